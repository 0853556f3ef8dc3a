//! fastembed over a dynamically loaded ONNX Runtime.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fastembed::{InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel};

use super::{EmbedError, Embedder, default_models_dir, normalize};

/// ONNX Runtime intra-op threads (`HMG_EMBED_THREADS`, default 1). One is
/// fastest here: the small English model needs ~2 ms per query on one core,
/// and a second ORT thread competes with the e5 engine's OpenMP workers,
/// which spin between parallel regions (measured with `benches/recall.rs`:
/// ensemble query embedding 33 ms p50 with two ORT threads, 17 ms with one).
fn threads() -> usize {
    std::env::var("HMG_EMBED_THREADS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(1)
}

/// ONNX Runtime intra-op threads for batches of passages
/// (`HMG_EMBED_BULK_THREADS`, default every core): a batch runs long enough
/// that the other engine's spinning workers do not matter, and two threads
/// embed 1.8x as many passages per second as one (`benches/embed.rs`).
fn bulk_threads() -> usize {
    std::env::var("HMG_EMBED_BULK_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// Batches of at least this many passages go to the bulk session…
const BULK_MIN_TEXTS: usize = 8;
/// …and so do texts this long together (a dialogue pasted as a query:
/// 46 → 26 ms with two threads; a short query stays on one).
const BULK_MIN_BYTES: usize = 768;

/// An ONNX sentence-embedding model with mean pooling.
pub struct OnnxEmbedder {
    model: Mutex<TextEmbedding>,
    /// A second session with [`bulk_threads`] threads, made at the first
    /// large batch (`None` inside: it could not be made; the first serves).
    bulk: std::sync::OnceLock<Option<Mutex<TextEmbedding>>>,
    /// The model's directory (the bulk session reads it again).
    model_dir: PathBuf,
    id: String,
    dims: usize,
    languages: Option<Vec<String>>,
}

impl std::fmt::Debug for OnnxEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxEmbedder").field("id", &self.id).field("dims", &self.dims).finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|e| EmbedError::ModelFile { path: path.to_path_buf(), message: e.to_string() })
}

impl OnnxEmbedder {
    /// Loads the runtime from `ORT_DYLIB_PATH` (default
    /// `<data>/hmg/models/libonnxruntime.so`) and the model from
    /// `HMG_MODEL_DIR` (default `<data>/hmg/models/all-MiniLM-L6-v2`).
    pub fn from_env() -> Result<OnnxEmbedder, EmbedError> {
        let models = default_models_dir();
        let runtime = std::env::var_os("ORT_DYLIB_PATH")
            .map(PathBuf::from)
            .or_else(|| models.as_ref().map(|d| d.join("libonnxruntime.so")))
            .ok_or_else(|| EmbedError::Runtime { path: PathBuf::from("libonnxruntime.so"), message: "no data directory".into() })?;
        let model_dir = std::env::var_os("HMG_MODEL_DIR")
            .map(PathBuf::from)
            .or_else(|| models.map(|d| d.join("all-MiniLM-L6-v2")))
            .ok_or_else(|| EmbedError::ModelFile { path: PathBuf::from("model.onnx"), message: "no data directory".into() })?;
        OnnxEmbedder::load(&runtime, &model_dir)
    }

    /// Loads ONNX Runtime from `runtime` and the model in `model_dir`
    /// (`model.onnx`, `tokenizer.json`, `config.json`,
    /// `special_tokens_map.json`, `tokenizer_config.json`, and optionally
    /// `languages`: the language codes it understands, one per line; without
    /// it the model is taken to be multilingual).
    pub fn load(runtime: &Path, model_dir: &Path) -> Result<OnnxEmbedder, EmbedError> {
        if !runtime.is_file() {
            return Err(EmbedError::Runtime { path: runtime.to_path_buf(), message: "no such file".into() });
        }
        // Read every file first so a missing one is reported before ORT loads.
        let (onnx, tokenizer_files) = model_files(model_dir)?;
        // Loads the library once per process (later calls are no-ops); ORT then
        // creates its one process-wide environment when the first session is
        // made, so several models can share it.
        let _builder = ort::init_from(runtime).map_err(|e| EmbedError::Runtime { path: runtime.to_path_buf(), message: e.to_string() })?;
        let mut embedding = session(onnx, tokenizer_files, threads())?;
        let probe = embedding.embed(["probe"], None).map_err(|e| EmbedError::Backend(e.to_string()))?;
        let dims = probe.first().map(Vec::len).unwrap_or(0);
        if dims == 0 {
            return Err(EmbedError::Backend("the model returned an empty vector".into()));
        }
        let name = model_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "onnx".into());
        let languages = std::fs::read_to_string(model_dir.join("languages"))
            .ok()
            .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect());
        Ok(OnnxEmbedder {
            model: Mutex::new(embedding),
            bulk: std::sync::OnceLock::new(),
            model_dir: model_dir.to_path_buf(),
            id: format!("onnx:{name}:{dims}"),
            dims,
            languages,
        })
    }

    /// The session for a batch of `n` passages.
    fn session_for(&self, texts: &[&str]) -> &Mutex<TextEmbedding> {
        let bulk_threads = bulk_threads();
        let long = texts.iter().map(|t| t.len()).sum::<usize>() >= BULK_MIN_BYTES;
        if (texts.len() < BULK_MIN_TEXTS && !long) || bulk_threads <= threads() {
            return &self.model;
        }
        let bulk = self.bulk.get_or_init(|| match model_files(&self.model_dir).and_then(|(onnx, files)| session(onnx, files, bulk_threads)) {
            Ok(session) => Some(Mutex::new(session)),
            Err(error) => {
                tracing::warn!(%error, model = %self.id, "no bulk session; batches use the query session");
                None
            }
        });
        bulk.as_ref().unwrap_or(&self.model)
    }
}

/// The model and tokenizer files in `model_dir`.
fn model_files(model_dir: &Path) -> Result<(Vec<u8>, TokenizerFiles), EmbedError> {
    Ok((
        read(&model_dir.join("model.onnx"))?,
        TokenizerFiles {
            tokenizer_file: read(&model_dir.join("tokenizer.json"))?,
            config_file: read(&model_dir.join("config.json"))?,
            special_tokens_map_file: read(&model_dir.join("special_tokens_map.json"))?,
            tokenizer_config_file: read(&model_dir.join("tokenizer_config.json"))?,
        },
    ))
}

/// A fastembed session over the model with `threads` intra-op threads.
fn session(onnx: Vec<u8>, tokenizer_files: TokenizerFiles, threads: usize) -> Result<TextEmbedding, EmbedError> {
    let model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(Pooling::Mean);
    let options = InitOptionsUserDefined::new().with_intra_threads(threads).with_max_length(256);
    TextEmbedding::try_new_from_user_defined(model, options).map_err(|e| EmbedError::Backend(e.to_string()))
}

impl Embedder for OnnxEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // fastembed pads each batch to its longest text: texts of similar
        // length go together (shortest first), answers in the caller's order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|i| texts[*i].len());
        let sorted: Vec<&str> = order.iter().map(|i| texts[*i]).collect();
        let mut model = self.session_for(texts).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let embedded = model.embed(&sorted, Some(32)).map_err(|e| EmbedError::Backend(e.to_string()))?;
        if embedded.len() != texts.len() {
            return Err(EmbedError::Backend(format!("{} vectors for {} texts", embedded.len(), texts.len())));
        }
        let mut vectors = vec![Vec::new(); texts.len()];
        for (i, mut vector) in order.into_iter().zip(embedded) {
            normalize(&mut vector);
            vectors[i] = vector;
        }
        Ok(vectors)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vectors = self.embed_passages(&[text])?;
        vectors.pop().ok_or_else(|| EmbedError::Backend("no vector returned".into()))
    }

    /// Queries and passages share the recipe: a dialogue's parts run as
    /// one batch.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_passages(texts)
    }

    fn languages(&self) -> Option<&[String]> {
        self.languages.as_deref()
    }
}
