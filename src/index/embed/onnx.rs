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

/// An ONNX sentence-embedding model with mean pooling. Opening it checks
/// the files and reads the vector size from `config.json`; ONNX Runtime and
/// the session load at the first text embedded (0.3 s and 250 MB of a CLI
/// command's start, which `stats`, `history` and the like never need).
pub struct OnnxEmbedder {
    runtime: PathBuf,
    /// The model's directory.
    model_dir: PathBuf,
    /// The query session ([`threads`] threads), made at first use (the
    /// error is kept: it is not retried on every call).
    model: std::sync::OnceLock<Result<Mutex<TextEmbedding>, String>>,
    /// A second session with [`bulk_threads`] threads, made at the first
    /// large batch (`None` inside: it could not be made; the first serves).
    bulk: std::sync::OnceLock<Option<Mutex<TextEmbedding>>>,
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

/// The files a model directory must hold.
const MODEL_FILES: [&str; 5] = ["model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"];

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

    /// Opens the model in `model_dir` (`model.onnx`, `tokenizer.json`,
    /// `config.json` with its `hidden_size`, `special_tokens_map.json`,
    /// `tokenizer_config.json`, and optionally `languages`: the language
    /// codes it understands, one per line; without it the model is taken to
    /// be multilingual), to run on ONNX Runtime from `runtime`. Missing
    /// files are errors now; the runtime and the session load at first use
    /// (`Embedder::warm_up` loads them at once).
    pub fn load(runtime: &Path, model_dir: &Path) -> Result<OnnxEmbedder, EmbedError> {
        if !runtime.is_file() {
            return Err(EmbedError::Runtime { path: runtime.to_path_buf(), message: "no such file".into() });
        }
        for file in MODEL_FILES {
            let path = model_dir.join(file);
            if !path.is_file() {
                return Err(EmbedError::ModelFile { path, message: "no such file".into() });
            }
        }
        let config_path = model_dir.join("config.json");
        let config: serde_json::Value = serde_json::from_slice(&read(&config_path)?)
            .map_err(|e| EmbedError::ModelFile { path: config_path.clone(), message: format!("not JSON: {e}") })?;
        let dims = config.get("hidden_size").and_then(serde_json::Value::as_u64).filter(|d| *d > 0).ok_or_else(|| {
            EmbedError::ModelFile { path: config_path.clone(), message: "no positive \"hidden_size\" (the vector size)".into() }
        })? as usize;
        let name = model_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "onnx".into());
        let languages = std::fs::read_to_string(model_dir.join("languages"))
            .ok()
            .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect());
        Ok(OnnxEmbedder {
            runtime: runtime.to_path_buf(),
            model_dir: model_dir.to_path_buf(),
            model: std::sync::OnceLock::new(),
            bulk: std::sync::OnceLock::new(),
            id: format!("onnx:{name}:{dims}"),
            dims,
            languages,
        })
    }

    /// The query session, made at first use.
    fn query_session(&self) -> Result<&Mutex<TextEmbedding>, EmbedError> {
        self.model
            .get_or_init(|| self.open_session(threads()).map(Mutex::new).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|message| EmbedError::Backend(message.clone()))
    }

    /// A session with `threads` threads; the first loads ONNX Runtime (once
    /// per process; ORT then creates its one process-wide environment, so
    /// several models share it) and checks the vector size.
    fn open_session(&self, threads: usize) -> Result<TextEmbedding, EmbedError> {
        let _builder =
            ort::init_from(&self.runtime).map_err(|e| EmbedError::Runtime { path: self.runtime.clone(), message: e.to_string() })?;
        let (onnx, files) = model_files(&self.model_dir)?;
        let mut embedding = session(onnx, files, threads)?;
        let probe = embedding.embed(["probe"], None).map_err(|e| EmbedError::Backend(e.to_string()))?;
        let dims = probe.first().map(Vec::len).unwrap_or(0);
        if dims != self.dims {
            return Err(EmbedError::Backend(format!(
                "{} gives vectors of {dims} numbers, its config.json says {}",
                self.model_dir.join("model.onnx").display(),
                self.dims
            )));
        }
        Ok(embedding)
    }

    /// The session for a batch: large ones (many texts, or long together)
    /// go to the bulk session.
    fn session_for(&self, texts: &[&str]) -> Result<&Mutex<TextEmbedding>, EmbedError> {
        let bulk_threads = bulk_threads();
        let long = texts.iter().map(|t| t.len()).sum::<usize>() >= BULK_MIN_BYTES;
        if (texts.len() < BULK_MIN_TEXTS && !long) || bulk_threads <= threads() {
            return self.query_session();
        }
        // Only the session needed is loaded (an import never loads the
        // query session).
        let bulk = self.bulk.get_or_init(|| match self.open_session(bulk_threads) {
            Ok(session) => Some(Mutex::new(session)),
            Err(error) => {
                tracing::warn!(%error, model = %self.id, "no bulk session; batches use the query session");
                None
            }
        });
        match bulk {
            Some(bulk) => Ok(bulk),
            None => self.query_session(),
        }
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
    let options = InitOptionsUserDefined::new()
        .with_intra_threads(threads)
        .with_max_length(256)
        // Idle threads sleep instead of spinning: a spinning ORT worker took a
        // core from the e5 engine that runs next (ensemble query p95 9.7 → 8.0 ms).
        .with_session_config("session.intra_op.allow_spinning", "0");
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
        let mut model = self.session_for(texts)?.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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

    fn warm_up(&self) -> Result<(), EmbedError> {
        self.query_session().map(|_| ())
    }
}
