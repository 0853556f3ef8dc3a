//! A BERT sentence-embedding model (all-MiniLM-L6-v2 by default) on HMG's
//! own engine (`csrc/bert.c`, the integer kernels that run
//! multilingual-e5-small): the model's safetensors weights quantized at
//! load to 8 bits per 32-weight block (once per model file: later loads
//! map them from a pack file, `packs`), its `tokenizer.json` through the
//! `tokenizers` crate, mean pooling. No ONNX Runtime: loading takes tens
//! of milliseconds and a few megabytes beyond the mapped file.

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokenizers::{Tokenizer, TruncationParams};

use super::{EmbedError, Embedder, default_models_dir, packs};

#[repr(C)]
struct CModel {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn hmg_bert_new(
        hidden: c_int,
        layers: c_int,
        heads: c_int,
        intermediate: c_int,
        vocab: c_int,
        max_positions: c_int,
        eps: f32,
        tensors: *const *const f32,
        packed_weights: *const *const u8,
        packed_scales: *const *const f32,
    ) -> *mut CModel;
    fn hmg_bert_free(model: *mut CModel);
    fn hmg_bert_matrix(
        model: *mut CModel,
        i: c_int,
        nout: *mut c_int,
        nin: *mut c_int,
        zero: *mut c_int,
        weights: *mut *const u8,
        scales: *mut *const f32,
    ) -> c_int;
    fn hmg_bert_embed(model: *mut CModel, ids: *const i32, lens: *const i32, n: c_int, out: *mut f32) -> c_int;
    fn hmg_bert_embed_late(
        model: *mut CModel,
        ids: *const i32,
        len: i32,
        from: *const i32,
        to: *const i32,
        n: c_int,
        out: *mut f32,
    ) -> c_int;
    fn hmg_bert_set_kernel(kernel: c_int) -> c_int;
    fn hmg_bert_batches_on_tiles() -> c_int;
    fn hmg_bert_uniform(on: c_int);
    #[cfg(test)]
    fn hmg_bert_unfused(on: c_int);
}

/// The matmul kernel the engine runs (process-wide). The default is the
/// best the CPU has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Plain C (any CPU).
    Plain,
    /// AVX2 (most x86 CPUs since 2013).
    Avx2,
    /// AVX512-VNNI (Intel since 2019, AMD since Zen 4).
    Vnni,
    /// AMX tiles in bf16 for batches of 32 tokens or more, VNNI for the
    /// rest (Intel Xeon since Sapphire Rapids, where Linux grants the
    /// process AMX).
    Amx,
}

/// Asks for `kernel` (one the CPU lacks falls back: AMX → VNNI → AVX2 → plain)
/// and returns the one now in use. Benches and tests compare them in one
/// process.
pub fn set_kernel(kernel: Kernel) -> Kernel {
    let code = match kernel {
        Kernel::Plain => 0,
        Kernel::Vnni => 1,
        Kernel::Avx2 => 2,
        Kernel::Amx => 3,
    };
    // SAFETY: a plain setter; takes effect on the next matmul.
    match unsafe { hmg_bert_set_kernel(code) } {
        3 => Kernel::Amx,
        1 => Kernel::Vnni,
        2 => Kernel::Avx2,
        _ => Kernel::Plain,
    }
}

/// Whether batches run on AMX tiles here (the kernel in use; both engines
/// choose the same from the CPU): they want 32 tokens or more per forward
/// pass, where the integer tiles cost the same per token at any length.
pub(crate) fn batches_on_tiles() -> bool {
    // SAFETY: a plain getter.
    unsafe { hmg_bert_batches_on_tiles() != 0 }
}

/// The files a model directory must hold.
const MODEL_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];

/// Texts per engine call in a large batch (bounds the activations' memory:
/// 64 texts of 256 tokens need ~60 MB).
const CALL_TEXTS: usize = 64;

/// The model's shape, from `config.json`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    hidden: usize,
    layers: usize,
    heads: usize,
    intermediate: usize,
    vocab: usize,
    max_positions: usize,
    eps: f32,
}

/// A BERT model on HMG's engine. Opening it checks the files and reads the
/// shape; the weights and tokenizer load at the first text embedded.
pub struct BertEmbedder {
    model_dir: PathBuf,
    shape: Shape,
    /// Tokens per text, [CLS] and [SEP] included (longer texts are cut).
    max_tokens: usize,
    loaded: OnceLock<Result<Loaded, String>>,
    id: String,
    languages: Option<Vec<String>>,
    /// Where the packed matrices are kept between loads (`packs`).
    pack_dir: Option<PathBuf>,
}

unsafe extern "C" {
    fn omp_get_max_threads() -> c_int;
    fn omp_set_num_threads(threads: c_int);
}

/// OpenMP's thread count for the next parallel region this thread starts.
#[cfg(test)]
pub(crate) fn openmp_threads() -> i32 {
    // SAFETY: OpenMP's own call; it only reads this thread's setting.
    unsafe { omp_get_max_threads() }
}

/// Runs `work` with the C engines' OpenMP held to one thread on this thread
/// (both engines' parallel regions), then restores the thread's setting.
pub(crate) fn on_one_core<T>(work: impl FnOnce() -> T) -> T {
    /// Puts the setting back, even when `work` unwinds.
    struct Restore(c_int);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: OpenMP's own call; it changes this thread's setting only.
            unsafe { omp_set_num_threads(self.0) };
        }
    }
    // SAFETY: as above.
    let _restore = Restore(unsafe { omp_get_max_threads() });
    // SAFETY: as above.
    unsafe { omp_set_num_threads(1) };
    work()
}

struct Loaded {
    tokenizer: Tokenizer,
    model: ModelPtr,
    /// The pack file the engine's matrices are read from, when one was
    /// used; dropped after the model (field order).
    _packed: Option<packs::PackFile>,
    /// The weights the engine reads in place (embeddings, norms, biases).
    _weights: Weights,
}

/// The model's packed matrices as the engine holds them, for a pack file;
/// `None` when one is not of `shapes`.
fn matrices<'a>(model: &'a ModelPtr, shapes: &[packs::Shape]) -> Option<Vec<packs::Matrix<'a>>> {
    let matrix = |(i, want): (usize, &packs::Shape)| {
        // SAFETY: a live model; the call writes its out-parameters, and on
        // success the engine's pack holds that many weight and scale bytes
        // (hmg_pack_new) for as long as the model lives ('a).
        let reported = unsafe { packs::reported(|nout, nin, zero, w, d| hmg_bert_matrix(model.0, i as c_int, nout, nin, zero, w, d)) };
        reported.filter(|m| m.shape == *want)
    };
    shapes.iter().enumerate().map(matrix).collect()
}

struct ModelPtr(*mut CModel);
// SAFETY: the engine's model is read-only after loading, and a call keeps
// its working memory to itself (allocated per call, or thread-local), so
// calls may run at once from several threads (a batch split across cores).
// The bf16 weights the kernels make lazily are published by a
// compare-and-swap (csrc/hmg_kernels.h).
unsafe impl Send for ModelPtr {}
// SAFETY: as above.
unsafe impl Sync for ModelPtr {}

impl Drop for ModelPtr {
    fn drop(&mut self) {
        // SAFETY: the pointer came from hmg_bert_new and is freed once,
        // before the weights it reads (field order in `Loaded`).
        unsafe { hmg_bert_free(self.0) }
    }
}

impl std::fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEmbedder").field("id", &self.id).finish()
    }
}

fn model_error(path: &Path, message: impl Into<String>) -> EmbedError {
    EmbedError::ModelFile { path: path.to_path_buf(), message: message.into() }
}

impl BertEmbedder {
    /// Opens `HMG_MODEL_DIR` (default `<data>/hmg/models/all-MiniLM-L6-v2`).
    pub fn from_env() -> Result<BertEmbedder, EmbedError> {
        let model_dir = std::env::var_os("HMG_MODEL_DIR")
            .map(PathBuf::from)
            .or_else(|| default_models_dir().map(|d| d.join("all-MiniLM-L6-v2")))
            .ok_or_else(|| model_error(Path::new("model.safetensors"), "no data directory"))?;
        BertEmbedder::open(&model_dir)
    }

    /// Opens the model in `model_dir`: `model.safetensors` (float32
    /// weights), `tokenizer.json`, `config.json` (a BERT with GELU),
    /// optionally `sentence_bert_config.json` (its `max_seq_length`,
    /// default 256) and `languages` (the language codes it understands, one
    /// per line; without it the model is taken to be multilingual). Missing
    /// files and shapes the engine cannot run are errors now; the weights
    /// load at first use (`Embedder::warm_up` loads them at once).
    pub fn open(model_dir: &Path) -> Result<BertEmbedder, EmbedError> {
        for file in MODEL_FILES {
            let path = model_dir.join(file);
            if !path.is_file() {
                return Err(model_error(&path, "no such file"));
            }
        }
        let config_path = model_dir.join("config.json");
        let config = read_json(&config_path)?;
        let shape = Shape::from_config(&config).map_err(|message| model_error(&config_path, message))?;
        let max_seq = match read_json(&model_dir.join("sentence_bert_config.json")) {
            Ok(st) => st.get("max_seq_length").and_then(serde_json::Value::as_u64).map_or(256, |n| n as usize),
            Err(_) => 256,
        };
        let name = model_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "bert".into());
        let languages = std::fs::read_to_string(model_dir.join("languages"))
            .ok()
            .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect());
        Ok(BertEmbedder {
            model_dir: model_dir.to_path_buf(),
            shape,
            max_tokens: max_seq.clamp(3, shape.max_positions),
            loaded: OnceLock::new(),
            id: format!("bert:{name}:{}:q8", shape.hidden),
            languages,
            pack_dir: packs::dir_from_env(),
        })
    }

    /// The same model, keeping its packed matrices in `dir` instead of
    /// `HMG_PACK_DIR`'s (`None`: quantized at every load). Before the first
    /// text.
    pub fn with_pack_dir(mut self, dir: Option<PathBuf>) -> BertEmbedder {
        self.pack_dir = dir;
        self
    }

    fn loaded(&self) -> Result<&Loaded, EmbedError> {
        self.loaded
            .get_or_init(|| {
                let started = std::time::Instant::now();
                let loaded = self.load().map_err(|e| e.to_string());
                tracing::debug!(model = %self.id, ms = started.elapsed().as_millis() as u64, ok = loaded.is_ok(), "model loaded");
                loaded
            })
            .as_ref()
            .map_err(|message| EmbedError::Backend(message.clone()))
    }

    fn load(&self) -> Result<Loaded, EmbedError> {
        let tokenizer_path = self.model_dir.join("tokenizer.json");
        let mut tokenizer = read_tokenizer(&tokenizer_path)?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: self.max_tokens, ..TruncationParams::default() }))
            .map_err(|e| model_error(&tokenizer_path, e.to_string()))?;
        tokenizer.with_padding(None);
        let weights_path = self.model_dir.join("model.safetensors");
        let weights = Weights::map(&weights_path, &self.shape)?;
        let s = self.shape;
        let pointers = weights.pointers();
        let shapes = self.matrix_shapes();
        let packed = packs::open(self.pack_dir.as_deref(), "bert", &weights_path, &shapes);
        let (packed_weights, packed_scales): (Vec<*const u8>, Vec<*const f32>) = packed.iter().flat_map(packs::PackFile::parts).unzip();
        let from_packs = packed.is_some();
        // SAFETY: `pointers` holds 5 + 16 * layers pointers to float32
        // tensors of the sizes the engine reads (checked by Weights::map),
        // which live in `weights`, kept beside the model and dropped after.
        // With a pack file: one weights and one scales pointer per matrix,
        // in the engine's order, of the sizes `shapes` gives (checked by
        // packs::open), 64-byte aligned, in `packed`, kept beside the model
        // and dropped after it.
        let model = unsafe {
            hmg_bert_new(
                s.hidden as c_int,
                s.layers as c_int,
                s.heads as c_int,
                s.intermediate as c_int,
                s.vocab as c_int,
                s.max_positions as c_int,
                s.eps,
                pointers.as_ptr(),
                if from_packs { packed_weights.as_ptr() } else { std::ptr::null() },
                if from_packs { packed_scales.as_ptr() } else { std::ptr::null() },
            )
        };
        if model.is_null() {
            return Err(EmbedError::Backend(format!("the BERT engine could not load {} (out of memory?)", self.model_dir.display())));
        }
        let model = ModelPtr(model);
        if !from_packs
            && self.pack_dir.is_some()
            && let Some(matrices) = matrices(&model, &shapes)
        {
            packs::save(self.pack_dir.as_deref(), "bert", &weights_path, &matrices);
        }
        Ok(Loaded { tokenizer, model, _packed: packed, _weights: weights })
    }

    /// The shapes of the engine's matrices, in its order: per layer query,
    /// key, value, attention output (hidden x hidden), intermediate
    /// (intermediate x hidden), output (hidden x intermediate); 8-bit.
    fn matrix_shapes(&self) -> Vec<packs::Shape> {
        let (h, ff) = (self.shape.hidden as u32, self.shape.intermediate as u32);
        let layer = [(h, h), (h, h), (h, h), (h, h), (ff, h), (h, ff)];
        (0..self.shape.layers).flat_map(|_| layer).map(|(nout, nin)| packs::Shape { nout, nin, zero: 128 }).collect()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let loaded = self.loaded()?;
        let dims = self.shape.hidden;
        let mut vectors = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(CALL_TEXTS) {
            let mut ids: Vec<i32> = Vec::new();
            let mut lens: Vec<i32> = Vec::with_capacity(chunk.len());
            for text in chunk {
                let encoding = loaded.tokenizer.encode(*text, true).map_err(|e| EmbedError::Backend(format!("tokenizer: {e}")))?;
                let before = ids.len();
                ids.extend(encoding.get_ids().iter().map(|id| i32::try_from(*id).unwrap_or(i32::MAX)));
                lens.push((ids.len() - before) as i32);
            }
            let mut out = vec![0.0f32; chunk.len() * dims];
            // SAFETY: ids holds the sum of lens tokens, out n * dims floats;
            // the engine checks every id and length.
            let status = unsafe { hmg_bert_embed(loaded.model.0, ids.as_ptr(), lens.as_ptr(), lens.len() as c_int, out.as_mut_ptr()) };
            if status != 0 {
                return Err(EmbedError::Backend(format!("the BERT engine refused a batch of {} texts (status {status})", chunk.len())));
            }
            vectors.extend(out.chunks(dims).map(<[f32]>::to_vec));
        }
        Ok(vectors)
    }
}

/// Reads a `tokenizer.json`. A WordPiece model (BERT's) is read straight
/// into its vocabulary: the crate's own reader passes the model through an
/// untagged enum and a JSON value first, building MiniLM's 30,522-entry
/// vocabulary three times (18.9 ms against 8.9 ms this way, alone; up to
/// 100 ms beside the other model's load in a cold `hmg recall`). Every other part
/// goes through the crate's own types, so the tokenizer is the same one
/// (checked token for token against `Tokenizer::from_file` in the tests).
/// Other models take the crate's reader.
pub(crate) fn read_tokenizer(path: &Path) -> Result<Tokenizer, EmbedError> {
    let text = std::fs::read_to_string(path).map_err(|e| model_error(path, e.to_string()))?;
    let fast = match serde_json::from_str::<TokenizerParts<'_>>(&text) {
        Ok(parts) => parts.into_wordpiece_tokenizer(),
        Err(_) => None,
    };
    match fast {
        Some(Ok(tokenizer)) => Ok(tokenizer),
        Some(Err(message)) => Err(model_error(path, message)),
        None => text.parse::<Tokenizer>().map_err(|e| model_error(path, e.to_string())),
    }
}

/// The parts of a `tokenizer.json`, the model left unparsed. Truncation and
/// padding are not read: the engine sets its own.
#[derive(serde::Deserialize)]
struct TokenizerParts<'a> {
    #[serde(borrow)]
    model: &'a serde_json::value::RawValue,
    normalizer: Option<tokenizers::NormalizerWrapper>,
    pre_tokenizer: Option<tokenizers::PreTokenizerWrapper>,
    post_processor: Option<tokenizers::PostProcessorWrapper>,
    decoder: Option<tokenizers::DecoderWrapper>,
    #[serde(default)]
    added_tokens: Vec<AddedTokenEntry>,
}

/// An entry of `added_tokens` (its `id` is the model's own for every token
/// a BERT vocabulary holds; the crate only warns when they differ).
#[derive(serde::Deserialize)]
struct AddedTokenEntry {
    #[serde(flatten)]
    token: tokenizers::AddedToken,
}

/// A model's `type`, the rest skipped.
#[derive(serde::Deserialize)]
struct ModelKind {
    #[serde(rename = "type")]
    kind: Option<String>,
}

impl TokenizerParts<'_> {
    /// The tokenizer, when the model is a WordPiece (`None`: another kind,
    /// for the crate's reader).
    fn into_wordpiece_tokenizer(self) -> Option<Result<Tokenizer, String>> {
        let kind: ModelKind = serde_json::from_str(self.model.get()).ok()?;
        if kind.kind.as_deref() != Some("WordPiece") {
            return None;
        }
        let built = (|| {
            let model: tokenizers::models::wordpiece::WordPiece =
                serde_json::from_str(self.model.get()).map_err(|e| format!("model: {e}"))?;
            let mut tokenizer = tokenizers::TokenizerBuilder::new()
                .with_model(tokenizers::ModelWrapper::WordPiece(model))
                .with_normalizer(self.normalizer)
                .with_pre_tokenizer(self.pre_tokenizer)
                .with_post_processor(self.post_processor)
                .with_decoder(self.decoder)
                .build()
                .map_err(|e| e.to_string())?;
            tokenizer.add_tokens(self.added_tokens.into_iter().map(|t| t.token)).map_err(|e| e.to_string())?;
            Ok(Tokenizer::from(tokenizer))
        })();
        Some(built)
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value, EmbedError> {
    let bytes = std::fs::read(path).map_err(|e| model_error(path, e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| model_error(path, format!("not JSON: {e}")))
}

impl Shape {
    fn from_config(config: &serde_json::Value) -> Result<Shape, String> {
        let number = |key: &str| -> Result<usize, String> {
            config
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .filter(|n| *n > 0 && *n < (1 << 24))
                .map(|n| n as usize)
                .ok_or_else(|| format!("no positive \"{key}\""))
        };
        let kind = config.get("model_type").and_then(serde_json::Value::as_str).unwrap_or("");
        if kind != "bert" {
            return Err(format!("model_type is \"{kind}\"; this engine runs \"bert\""));
        }
        let activation = config.get("hidden_act").and_then(serde_json::Value::as_str).unwrap_or("gelu");
        if activation != "gelu" {
            return Err(format!("hidden_act is \"{activation}\"; this engine runs \"gelu\""));
        }
        let shape = Shape {
            hidden: number("hidden_size")?,
            layers: number("num_hidden_layers")?,
            heads: number("num_attention_heads")?,
            intermediate: number("intermediate_size")?,
            vocab: number("vocab_size")?,
            max_positions: number("max_position_embeddings")?,
            eps: config.get("layer_norm_eps").and_then(serde_json::Value::as_f64).unwrap_or(1e-12) as f32,
        };
        if !shape.hidden.is_multiple_of(32)
            || !shape.intermediate.is_multiple_of(32)
            || !shape.hidden.is_multiple_of(shape.heads)
            || shape.max_positions < 3
        {
            return Err(format!(
                "hidden_size {} and intermediate_size {} must be multiples of 32, hidden_size of num_attention_heads {}, and max_position_embeddings at least 3",
                shape.hidden, shape.intermediate, shape.heads
            ));
        }
        Ok(shape)
    }
}

/// The model's float32 tensors: the safetensors file memory-mapped, each
/// tensor found by name and checked for type and shape. A tensor not
/// aligned for floats in the file is copied.
struct Weights {
    _map: memmap2::Mmap,
    copies: Vec<Vec<f32>>,
    /// (in the map, or index into copies) per tensor, in the engine's order.
    tensors: Vec<Tensor>,
}

enum Tensor {
    Mapped(*const f32),
    Copied(usize),
}

// SAFETY: the pointers point into the read-only map owned alongside.
unsafe impl Send for Weights {}
unsafe impl Sync for Weights {}

impl Weights {
    fn map(path: &Path, s: &Shape) -> Result<Weights, EmbedError> {
        let file = std::fs::File::open(path).map_err(|e| model_error(path, e.to_string()))?;
        // SAFETY: the file is mapped read-only and private; HMG never
        // writes it (a model file changed underneath is the installer's
        // doing, as with any mapped model).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| model_error(path, e.to_string()))?;
        let index = SafeTensors::parse(&map).map_err(|message| model_error(path, message))?;
        let (h, ff) = (s.hidden, s.intermediate);
        let mut wanted: Vec<(String, Vec<usize>)> = vec![
            ("embeddings.word_embeddings.weight".into(), vec![s.vocab, h]),
            ("embeddings.position_embeddings.weight".into(), vec![s.max_positions, h]),
            ("embeddings.token_type_embeddings.weight".into(), vec![0, h]),
            ("embeddings.LayerNorm.weight".into(), vec![h]),
            ("embeddings.LayerNorm.bias".into(), vec![h]),
        ];
        for l in 0..s.layers {
            let p = format!("encoder.layer.{l}.");
            for (name, shape) in [
                ("attention.self.query.weight", vec![h, h]),
                ("attention.self.query.bias", vec![h]),
                ("attention.self.key.weight", vec![h, h]),
                ("attention.self.key.bias", vec![h]),
                ("attention.self.value.weight", vec![h, h]),
                ("attention.self.value.bias", vec![h]),
                ("attention.output.dense.weight", vec![h, h]),
                ("attention.output.dense.bias", vec![h]),
                ("attention.output.LayerNorm.weight", vec![h]),
                ("attention.output.LayerNorm.bias", vec![h]),
                ("intermediate.dense.weight", vec![ff, h]),
                ("intermediate.dense.bias", vec![ff]),
                ("output.dense.weight", vec![h, ff]),
                ("output.dense.bias", vec![h]),
                ("output.LayerNorm.weight", vec![h]),
                ("output.LayerNorm.bias", vec![h]),
            ] {
                wanted.push((format!("{p}{name}"), shape));
            }
        }
        let mut copies = Vec::new();
        let mut tensors = Vec::with_capacity(wanted.len());
        for (name, shape) in wanted {
            let bytes = index.f32_tensor(&map, &name, &shape).map_err(|message| model_error(path, message))?;
            if bytes.as_ptr().align_offset(std::mem::align_of::<f32>()) == 0 {
                tensors.push(Tensor::Mapped(bytes.as_ptr().cast::<f32>()));
            } else {
                copies.push(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
                tensors.push(Tensor::Copied(copies.len() - 1));
            }
        }
        Ok(Weights { _map: map, copies, tensors })
    }

    fn pointers(&self) -> Vec<*const f32> {
        self.tensors
            .iter()
            .map(|t| match t {
                Tensor::Mapped(p) => *p,
                Tensor::Copied(i) => self.copies[*i].as_ptr(),
            })
            .collect()
    }
}

/// The header of a safetensors file: tensor name → (dtype, shape, byte range).
struct SafeTensors {
    data_start: usize,
    header: serde_json::Map<String, serde_json::Value>,
}

impl SafeTensors {
    fn parse(file: &[u8]) -> Result<SafeTensors, String> {
        let length = file
            .get(..8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .ok_or("not safetensors: shorter than 8 bytes")?;
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(8))
            .filter(|e| *e <= file.len())
            .ok_or("not safetensors: header longer than the file")?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&file[8..end]).map_err(|e| format!("not safetensors: header is not a JSON object: {e}"))?;
        Ok(SafeTensors { data_start: end, header })
    }

    /// The bytes of float32 tensor `name` (or `bert.name`) of `shape` (a 0
    /// in the first dimension: any number of rows, at least one).
    fn f32_tensor<'a>(&self, file: &'a [u8], name: &str, shape: &[usize]) -> Result<&'a [u8], String> {
        let entry =
            self.header.get(name).or_else(|| self.header.get(&format!("bert.{name}"))).ok_or_else(|| format!("no tensor {name}"))?;
        let dtype = entry.get("dtype").and_then(serde_json::Value::as_str).unwrap_or("");
        if dtype != "F32" {
            return Err(format!("tensor {name} is {dtype}; the engine reads F32"));
        }
        let actual = numbers(entry, "shape");
        let fits = actual.len() == shape.len() && actual.iter().zip(shape).all(|(a, w)| if *w == 0 { *a > 0 } else { a == w });
        if !fits {
            return Err(format!("tensor {name} has shape {actual:?}, config.json implies {shape:?}"));
        }
        let offsets = numbers(entry, "data_offsets");
        let [from, to] = offsets[..] else { return Err(format!("tensor {name} has no data_offsets")) };
        let elements: usize = actual.iter().product();
        let range = self.data_start.checked_add(from).zip(self.data_start.checked_add(to));
        match range {
            Some((a, b)) if a <= b && b <= file.len() && b - a == elements * 4 => Ok(&file[a..b]),
            _ => Err(format!("tensor {name}'s data_offsets do not fit its shape or the file")),
        }
    }
}

/// The whole numbers in the array `key` of a header entry (none when absent).
fn numbers(entry: &serde_json::Value, key: &str) -> Vec<usize> {
    entry
        .get(key)
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter_map(|n| n.as_u64().map(|n| n as usize)).collect())
        .unwrap_or_default()
}

impl Embedder for BertEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dims(&self) -> usize {
        self.shape.hidden
    }

    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }

    fn macs_per_token(&self) -> u64 {
        let (h, ff) = (self.shape.hidden as u64, self.shape.intermediate as u64);
        (self.shape.layers as u64).saturating_mul(4 * h * h + 2 * h * ff)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[text])?.pop().ok_or_else(|| EmbedError::Backend("no vector returned".into()))
    }

    /// Queries and passages share the recipe: a dialogue's parts run as
    /// one call.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }

    /// One call with the kernels held to one choice for every length
    /// (`hmg_bert_uniform`), on this thread, for this call only.
    fn embed_comparable(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // SAFETY: sets a flag of this thread's, read by this thread's
        // forward passes; put back before returning (also on unwind).
        let _uniform = super::Uniform::hold(|on| unsafe { hmg_bert_uniform(on) });
        self.embed(texts)
    }

    /// One forward pass over the pieces' word pieces between one [CLS]
    /// and one [SEP] (WordPiece splits at whitespace, so they are the
    /// whole text's); `None` when they exceed [`LATE_MAX_TOKENS`] or a
    /// piece alone was truncated.
    fn embed_query_late(&self, pieces: &[&str], pooled: &[bool]) -> Result<Option<Vec<Vec<f32>>>, EmbedError> {
        if pieces.is_empty() || pieces.len() != pooled.len() {
            return Err(EmbedError::Backend(format!("{} pieces with {} pooling marks", pieces.len(), pooled.len())));
        }
        let loaded = self.loaded()?;
        let tokenize =
            |text: &str, special: bool| loaded.tokenizer.encode(text, special).map_err(|e| EmbedError::Backend(format!("tokenizer: {e}")));
        let ends = tokenize("", true)?;
        let (Some(&cls), Some(&sep)) = (ends.get_ids().first(), ends.get_ids().last()) else { return Ok(None) };
        let id = |id: u32| i32::try_from(id).unwrap_or(i32::MAX);
        let mut ids = vec![id(cls)];
        let (mut from, mut to) = (vec![0], vec![0]);
        for (piece, pool) in pieces.iter().zip(pooled) {
            let encoding = tokenize(piece, false)?;
            if !encoding.get_overflowing().is_empty() {
                return Ok(None);
            }
            let start = ids.len() as i32;
            ids.extend(encoding.get_ids().iter().map(|i| id(*i)));
            if ids.len() + 1 > LATE_MAX_TOKENS {
                return Ok(None);
            }
            if *pool {
                from.push(start);
                to.push(ids.len() as i32);
            }
        }
        ids.push(id(sep));
        to[0] = ids.len() as i32;
        let dims = self.shape.hidden;
        let mut out = vec![0.0f32; from.len() * dims];
        // SAFETY: ids holds len tokens, from/to n ranges each, out n * dims
        // floats; the engine checks every id and range.
        let status = unsafe {
            hmg_bert_embed_late(
                loaded.model.0,
                ids.as_ptr(),
                ids.len() as i32,
                from.as_ptr(),
                to.as_ptr(),
                from.len() as c_int,
                out.as_mut_ptr(),
            )
        };
        if status != 0 {
            return Err(EmbedError::Backend(format!("the BERT engine refused a dialogue of {} tokens (status {status})", ids.len())));
        }
        Ok(Some(out.chunks(dims).map(<[f32]>::to_vec).collect()))
    }

    fn languages(&self) -> Option<&[String]> {
        self.languages.as_deref()
    }

    fn warm_up(&self) -> Result<(), EmbedError> {
        self.loaded().map(|_| ())
    }
}

/// Most tokens of a dialogue query in one pass ([`Embedder::embed_query_late`]):
/// the length all-MiniLM-L6-v2 was tuned to (sentence-transformers'
/// `max_seq_length`; its tokenizer truncates a text at 128). A longer
/// dialogue is embedded as texts, its whole truncated.
const LATE_MAX_TOKENS: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    /// The installed MiniLM's `tokenizer.json` (scripts/setup.sh).
    fn minilm_tokenizer() -> PathBuf {
        default_models_dir().expect("a data directory").join("all-MiniLM-L6-v2").join("tokenizer.json")
    }

    /// One pass over a dialogue's pieces: the same word pieces as the
    /// text's, so the whole is its vector bit for bit; a dialogue over
    /// [`LATE_MAX_TOKENS`] is left to the caller.
    #[test]
    fn a_dialogue_in_one_pass_gives_its_whole_bit_for_bit_and_pooled_parts() {
        let model = BertEmbedder::from_env().expect("MiniLM (scripts/setup.sh)");
        let pieces = [
            "Bart: \"Hey, I'm doing a magic trick at the party!\"",
            "Assistant: \"Wow, what will you wear?\"",
            "Bart: \"My blue suit, I think.\"",
        ];
        let whole = pieces.join("\n");
        let vectors = model.embed_query_late(&pieces, &[true, false, true]).unwrap().expect("fits");
        assert_eq!(vectors.len(), 3);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&vectors[0]), bits(&model.embed_query(&whole).unwrap()), "the whole");
        for (piece, vector) in [pieces[0], pieces[2]].iter().zip(&vectors[1..]) {
            let c: f32 = vector.iter().zip(&model.embed_query(piece).unwrap()).map(|(x, y)| x * y).sum();
            assert!(c > 0.5 && c < 0.9999, "{piece}: cosine {c} with its own vector");
        }
        let long: Vec<String> = (0..30).map(|i| format!("turn {i}: we talked about the trip to Lisbon")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert!(model.embed_query_late(&long, &vec![true; long.len()]).unwrap().is_none(), "over {LATE_MAX_TOKENS} tokens");
        assert!(model.embed_query_late(&pieces, &[true]).is_err());
    }

    #[test]
    fn the_fused_kernels_give_the_plain_schedules_vectors_bit_for_bit() {
        let model = BertEmbedder::open(&default_models_dir().expect("a data directory").join("all-MiniLM-L6-v2"))
            .expect("MiniLM's safetensors (scripts/setup.sh)");
        let long = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(12);
        let texts = ["Where does Caroline work now?", "老李上周把 Redis 迁移到了第三个集群", "田中さんは毎朝コーヒーを飲みます", "", &long];
        // SAFETY: a getter of the kernel decided from the CPU.
        eprintln!("MiniLM batches on tiles (the fused path): {}", unsafe { hmg_bert_batches_on_tiles() });
        let bits = |vectors: Vec<Vec<f32>>| -> Vec<Vec<u32>> { vectors.iter().map(|v| v.iter().map(|x| x.to_bits()).collect()).collect() };
        let run =
            || (bits(model.embed_passages(&texts).expect("passages")), bits(model.embed_comparable(&texts[..2]).expect("comparable")));
        let fused = run();
        // SAFETY: a flag of this thread's, read by its own forward passes.
        unsafe { hmg_bert_unfused(1) };
        let unfused = run();
        unsafe { hmg_bert_unfused(0) };
        assert_eq!(fused, unfused, "the fused GELU and bf16 rows or the keys' transposes changed a vector");
        assert_eq!(fused, run(), "the second fused run differs from the first");
    }

    #[test]
    fn the_fast_tokenizer_reader_gives_the_crates_tokenizer_token_for_token() {
        let path = minilm_tokenizer();
        let reference = Tokenizer::from_file(&path).expect("MiniLM's tokenizer.json (scripts/setup.sh)");
        let fast = read_tokenizer(&path).expect("read");
        let long_word = "x".repeat(150);
        let long_text = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(40);
        let texts = [
            "Where does Caroline work now?",
            "老李的猫叫什么名字？Redis 迁移到哪个集群了",
            "田中さんの好きな食べ物は何ですか。カタカナとひらがな",
            "Café naïve résumé — ÀÉÎÕÜ façade",
            "[CLS] literal special tokens [SEP] and [MASK], [UNK] [PAD]",
            "emoji 🎉🙂 and symbols ©®™ ½",
            "control\u{0}chars\tand\r\nnew lines\u{200b}zero width",
            &long_word,
            &long_text,
            "",
            "   ",
            "don't stop-believing: https://example.com/a?b=c#d 3.14159 1,000,000",
            "ALL CAPS and MiXeD CaSe",
        ];
        let mut truncated = [reference, fast];
        for tokenizer in &mut truncated {
            tokenizer.with_truncation(Some(TruncationParams { max_length: 256, ..TruncationParams::default() })).expect("truncation");
            tokenizer.with_padding(None);
        }
        let [reference, fast] = truncated;
        assert_eq!(reference.get_vocab_size(true), fast.get_vocab_size(true));
        for text in texts {
            let want = reference.encode(text, true).expect("reference encodes");
            let got = fast.encode(text, true).expect("fast encodes");
            let label: String = text.chars().take(30).collect();
            assert_eq!(got.get_ids(), want.get_ids(), "{label:?}");
            assert_eq!(got.get_tokens(), want.get_tokens(), "{label:?}");
            assert_eq!(got.get_offsets(), want.get_offsets(), "{label:?}");
            assert_eq!(got.get_special_tokens_mask(), want.get_special_tokens_mask(), "{label:?}");
            assert_eq!(got.get_type_ids(), want.get_type_ids(), "{label:?}");
        }
        assert_eq!(fast.encode("[CLS]", false).expect("encodes").get_ids(), [101], "added tokens keep their ids");
    }

    #[test]
    fn a_tokenizer_file_that_is_not_one_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tokenizer.json");
        for (case, body) in [
            ("empty", ""),
            ("not JSON", "{\"model\": "),
            ("a WordPiece without its vocabulary", r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]"}}"#),
            (
                "a vocabulary of the wrong type",
                r###"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": [1, 2]}}"###,
            ),
        ] {
            std::fs::write(&path, body).expect("write");
            let error = read_tokenizer(&path).expect_err(case).to_string();
            assert!(error.contains("tokenizer.json"), "{case}: {error}");
        }
        assert!(read_tokenizer(&dir.path().join("missing.json")).is_err());
    }
}
