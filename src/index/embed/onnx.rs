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

/// An ONNX sentence-embedding model with mean pooling.
pub struct OnnxEmbedder {
    model: Mutex<TextEmbedding>,
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
        let onnx = read(&model_dir.join("model.onnx"))?;
        let tokenizer_files = TokenizerFiles {
            tokenizer_file: read(&model_dir.join("tokenizer.json"))?,
            config_file: read(&model_dir.join("config.json"))?,
            special_tokens_map_file: read(&model_dir.join("special_tokens_map.json"))?,
            tokenizer_config_file: read(&model_dir.join("tokenizer_config.json"))?,
        };
        // Loads the library once per process (later calls are no-ops); ORT then
        // creates its one process-wide environment when the first session is
        // made, so several models can share it.
        let _builder = ort::init_from(runtime).map_err(|e| EmbedError::Runtime { path: runtime.to_path_buf(), message: e.to_string() })?;
        let model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(Pooling::Mean);
        let options = InitOptionsUserDefined::new().with_intra_threads(threads()).with_max_length(256);
        let mut embedding = TextEmbedding::try_new_from_user_defined(model, options).map_err(|e| EmbedError::Backend(e.to_string()))?;
        let probe = embedding.embed(["probe"], None).map_err(|e| EmbedError::Backend(e.to_string()))?;
        let dims = probe.first().map(Vec::len).unwrap_or(0);
        if dims == 0 {
            return Err(EmbedError::Backend("the model returned an empty vector".into()));
        }
        let name = model_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "onnx".into());
        let languages = std::fs::read_to_string(model_dir.join("languages"))
            .ok()
            .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect());
        Ok(OnnxEmbedder { model: Mutex::new(embedding), id: format!("onnx:{name}:{dims}"), dims, languages })
    }
}

impl Embedder for OnnxEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut model = self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut vectors = model.embed(texts, Some(64)).map_err(|e| EmbedError::Backend(e.to_string()))?;
        vectors.iter_mut().for_each(|v| normalize(v));
        Ok(vectors)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vectors = self.embed_passages(&[text])?;
        vectors.pop().ok_or_else(|| EmbedError::Backend("no vector returned".into()))
    }

    fn languages(&self) -> Option<&[String]> {
        self.languages.as_deref()
    }
}
