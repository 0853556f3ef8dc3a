//! Pack files: a model's weight matrices in the engines' packed layout
//! (`csrc/hmg_kernels.h`), written once per model file and mapped at every
//! later load instead of being made again.
//!
//! Making them is most of a model's load: MiniLM's float32 matrices read
//! and quantized to 8 bits (42 MB in), e5's 4-bit blocks unpacked into
//! nibble tiles; with both it was about 30 ms of the 99 ms of CPU a cold
//! `hmg recall` takes. A mapped pack file costs page-cache faults, its
//! pages are shared by every process that maps it (a server and a CLI
//! command do not hold two copies), and the kernel can drop and re-read
//! them.
//!
//! One file per model file, engine and build's kernels, under
//! `HMG_PACK_DIR` (default `${XDG_CACHE_HOME:-~/.cache}/hmg/packs`; `off`
//! never reads or writes one), named after the model file's canonical
//! path, which it records, and the kernel sources' hash: two builds used
//! in turn (an old and a new one, benchmarked side by side) each keep
//! their own file, where one name had each rewrite the other's at every
//! load. Writing one removes those of model files that are gone (a model
//! moved, a test's temporary copy), those of other builds not written for
//! a day (an upgrade's leftovers), and temporary files a crashed writer
//! left over an hour ago. A file is used only
//! if it was written from the same model file (size and modification
//! time), by a build of the same kernel sources (`build.rs` hashes them),
//! with the shapes the model has now, every part inside the file;
//! otherwise the matrices are made as before and the file is written again
//! (to a temporary file, synced, renamed over: a reader sees the old file
//! or the new one, and a crash leaves no half-written file under the
//! name). A pack file that cannot be read or written only costs the time
//! to make the matrices; it is never an error.
//!
//! **Invariant:** a mapped pack file is never changed in place (it is only
//! replaced by a rename), so the pages an engine reads stay as written.

use std::ffi::c_int;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::Digest;

/// First bytes of a pack file.
const MAGIC: &[u8; 8] = b"HMGPACK1";
/// Bytes before the table of matrices (which the model file's canonical
/// path follows).
const HEADER: usize = 48;
/// Temporary files of writers that died are removed after this long.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);
/// Pack files of other builds' kernels are removed once they are this old
/// (their writes; reading leaves a file's time alone).
const OTHER_BUILD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Bytes per matrix in the table.
const ENTRY: usize = 48;
/// Alignment of every weight and scale section (the kernels' loads).
const ALIGN: usize = 64;

/// Hash of the kernel sources this build compiled (see `build.rs`).
fn sources() -> u64 {
    u64::from_str_radix(env!("HMG_PACK_SOURCES"), 16).unwrap_or_default()
}

/// One matrix's shape: outputs, inputs and zero point (8: 4-bit nibbles,
/// 128: 8-bit bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) nout: u32,
    pub(crate) nin: u32,
    pub(crate) zero: u32,
}

impl Shape {
    /// Bytes of packed weights (as `hmg_pack_new` allocates them, before
    /// rounding up).
    pub(crate) fn weight_bytes(self) -> usize {
        let n = self.nout as usize * self.nin as usize;
        if self.zero == 8 { n / 2 } else { n }
    }

    /// Bytes of block scales (as `hmg_pack_new` allocates them).
    pub(crate) fn scale_bytes(self) -> usize {
        self.nout as usize / 16 * (self.nin as usize / 32) * 16 * 4
    }

    /// Whether the kernels can hold a matrix of this shape.
    fn valid(self) -> bool {
        self.nout > 0 && self.nin > 0 && self.nout.is_multiple_of(32) && self.nin.is_multiple_of(32) && matches!(self.zero, 8 | 128)
    }
}

/// One packed matrix to write: its shape, weights and scales (borrowed
/// from the engine, which made them).
pub(crate) struct Matrix<'a> {
    pub(crate) shape: Shape,
    pub(crate) weights: &'a [u8],
    pub(crate) scales: &'a [u8],
}

/// The matrix an engine reports through out-parameters (its
/// `hmg_*_matrix` call, which `call` makes): `None` when the call fails or
/// gives a null buffer.
///
/// # Safety
/// When `call` returns 0, the weights and scales it gives must hold the
/// bytes of the shape it gives (`Shape::weight_bytes`, `scale_bytes`), and
/// stay unchanged for `'a` (the engine's own pack, while the model lives).
#[allow(unsafe_code)]
pub(crate) unsafe fn reported<'a>(
    call: impl FnOnce(&mut c_int, &mut c_int, &mut c_int, &mut *const u8, &mut *const f32) -> c_int,
) -> Option<Matrix<'a>> {
    let (mut nout, mut nin, mut zero) = (0, 0, 0);
    let (mut w, mut d): (*const u8, *const f32) = (std::ptr::null(), std::ptr::null());
    let status = call(&mut nout, &mut nin, &mut zero, &mut w, &mut d);
    let shape = Shape { nout: u32::try_from(nout).ok()?, nin: u32::try_from(nin).ok()?, zero: u32::try_from(zero).ok()? };
    if status != 0 || w.is_null() || d.is_null() {
        return None;
    }
    // SAFETY: the caller's promise for a call that returned 0.
    Some(unsafe {
        Matrix {
            shape,
            weights: std::slice::from_raw_parts(w, shape.weight_bytes()),
            scales: std::slice::from_raw_parts(d.cast::<u8>(), shape.scale_bytes()),
        }
    })
}

/// A pack file, mapped; the engine reads its matrices in place for as long
/// as the model lives, so the model must be freed first.
pub(crate) struct PackFile {
    map: memmap2::Mmap,
    /// (weights, scales) offsets per matrix.
    at: Vec<(usize, usize)>,
}

impl PackFile {
    /// Every matrix's weights and scales, in the engine's order (as many
    /// as the shapes it was opened with), for the engine.
    pub(crate) fn parts(&self) -> Vec<(*const u8, *const f32)> {
        self.at.iter().map(|&(w, d)| (self.map[w..].as_ptr(), self.map[d..].as_ptr().cast::<f32>())).collect()
    }
}

impl std::fmt::Debug for PackFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackFile").field("bytes", &self.map.len()).field("matrices", &self.at.len()).finish()
    }
}

/// The pack directory: `HMG_PACK_DIR`, else the user's cache directory;
/// `None` when set to `off` (or no cache directory is known).
pub(crate) fn dir_from_env() -> Option<PathBuf> {
    match std::env::var_os("HMG_PACK_DIR") {
        Some(dir) if dir == "off" || dir == "none" => None,
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|cache| cache.join("hmg").join("packs")),
    }
}

/// Where this build's pack file of `model` for `engine` lives in `dir`.
pub(crate) fn path(dir: &Path, engine: &str, model: &Path) -> PathBuf {
    let digest = sha2::Sha256::digest(canonical(model).as_os_str().as_bytes());
    let stem = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!("{engine}-{stem}-{}-{:016x}.pack", hex::encode(&digest[..8]), sources()))
}

/// The model file's identity a pack file records: size, and modification
/// time in seconds and nanoseconds.
fn identity(model: &Path) -> Option<(u64, i64, u32)> {
    let meta = std::fs::metadata(model).ok()?;
    let modified = meta.modified().ok()?;
    let (secs, nanos) = match modified.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => (i64::try_from(d.as_secs()).ok()?, d.subsec_nanos()),
        Err(e) => (-i64::try_from(e.duration().as_secs()).ok()?, e.duration().subsec_nanos()),
    };
    Some((meta.len(), secs, nanos))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    bytes.get(at..at + 8).map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

/// Maps the pack file of `model` for `engine` from `dir` if it was
/// written from the model file as it is now, by this build's kernels, with
/// exactly `shapes`; else `None` (the reason at debug level).
pub(crate) fn open(dir: Option<&Path>, engine: &str, model: &Path, shapes: &[Shape]) -> Option<PackFile> {
    let path = path(dir?, engine, model);
    match try_open(&path, model, shapes) {
        Ok(file) => Some(file),
        Err(why) => {
            tracing::debug!(path = %path.display(), why, "pack file not used");
            None
        }
    }
}

/// Writes the pack file of `model` for `engine` into `dir`, for the next
/// load; a failure is logged at debug level (the matrices are then made
/// again next time).
pub(crate) fn save(dir: Option<&Path>, engine: &str, model: &Path, matrices: &[Matrix<'_>]) {
    let Some(dir) = dir else { return };
    let path = path(dir, engine, model);
    let started = std::time::Instant::now();
    match write(&path, model, matrices) {
        Ok(()) => tracing::debug!(path = %path.display(), ms = started.elapsed().as_millis() as u64, "pack file written"),
        Err(error) => tracing::debug!(path = %path.display(), %error, "pack file not written; the matrices are made at each load"),
    }
    prune(dir);
}

/// Removes the pack files in `dir` whose model file is gone (a model moved
/// or removed, a test's temporary copy), those of other builds' kernels
/// written more than a day ago, and temporary files a writer left more
/// than an hour ago; anything else is left alone.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let older_than = |age: std::time::Duration| {
            entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).is_some_and(|a| a > age)
        };
        let gone = if name.ends_with(".pack") {
            recorded(&path).is_some_and(|(built, model)| !model.exists() || (built != sources() && older_than(OTHER_BUILD)))
        } else if name.ends_with(".tmp") {
            older_than(STALE_TEMP)
        } else {
            false
        };
        if gone && std::fs::remove_file(&path).is_ok() {
            tracing::debug!(path = %path.display(), "stale pack file removed");
        }
    }
}

/// The kernel sources' hash of the build that wrote a pack file and the
/// model file it was written from, as recorded in it.
fn recorded(file: &Path) -> Option<(u64, PathBuf)> {
    let mut head = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::open(file).ok()?, 1 << 16), &mut head).ok()?;
    if head.get(..8)? != MAGIC {
        return None;
    }
    let model = named(&head).map(|bytes| PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))?;
    Some((u64_at(&head, 8)?, model))
}

/// The model path a pack file's header records: after the table (as many
/// entries as the header counts), as long as the header says.
fn named(bytes: &[u8]) -> Option<&[u8]> {
    let start = HEADER.checked_add((u32_at(bytes, 36)? as usize).checked_mul(ENTRY)?)?;
    let len = u32_at(bytes, 40)? as usize;
    bytes.get(start..start.checked_add(len)?)
}

/// The model file's canonical path, as a pack file records it.
fn canonical(model: &Path) -> PathBuf {
    model.canonicalize().unwrap_or_else(|_| model.to_path_buf())
}

#[allow(unsafe_code)]
fn try_open(path: &Path, model: &Path, shapes: &[Shape]) -> Result<PackFile, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // SAFETY: mapped read-only; pack files are only ever replaced by a
    // rename, never written in place (module invariant), so the pages stay
    // as they were checked.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
    let bytes: &[u8] = &map;
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("not a pack file".into());
    }
    let (size, secs, nanos) = identity(model).ok_or("model file unreadable")?;
    let recorded = (u64_at(bytes, 16), u64_at(bytes, 24).map(|s| s as i64), u32_at(bytes, 32));
    if u64_at(bytes, 8) != Some(sources()) {
        return Err("written by a build of other kernels".into());
    }
    if recorded != (Some(size), Some(secs), Some(nanos)) {
        return Err("written from another version of the model file".into());
    }
    if u32_at(bytes, 36).map(|n| n as usize) != Some(shapes.len()) {
        return Err("another number of matrices".into());
    }
    if named(bytes) != Some(canonical(model).as_os_str().as_bytes()) {
        return Err("written from a model file at another path".into());
    }
    let mut at = Vec::with_capacity(shapes.len());
    for (i, shape) in shapes.iter().enumerate() {
        let entry = HEADER + i * ENTRY;
        let found = Shape {
            nout: u32_at(bytes, entry).ok_or("truncated table")?,
            nin: u32_at(bytes, entry + 4).ok_or("truncated table")?,
            zero: u32_at(bytes, entry + 8).ok_or("truncated table")?,
        };
        if found != *shape {
            return Err(format!("matrix {i} is {found:?}, the model's {shape:?}"));
        }
        let section = |offset_at: usize, len_at: usize, want: usize| -> Result<usize, String> {
            let offset = usize::try_from(u64_at(bytes, entry + offset_at).ok_or("truncated table")?).map_err(|e| e.to_string())?;
            let len = usize::try_from(u64_at(bytes, entry + len_at).ok_or("truncated table")?).map_err(|e| e.to_string())?;
            // Each section padded to ALIGN inside the file: the kernels'
            // vector loads may read to the end of their last 64 bytes.
            let end = offset.checked_add(len.next_multiple_of(ALIGN)).ok_or("offset overflows")?;
            if len != want || !offset.is_multiple_of(ALIGN) || end > bytes.len() {
                return Err(format!("matrix {i}: a section of {len} bytes at {offset} (want {want}, inside {})", bytes.len()));
            }
            Ok(offset)
        };
        let w = section(16, 24, shape.weight_bytes())?;
        let d = section(32, 40, shape.scale_bytes())?;
        at.push((w, d));
    }
    Ok(PackFile { map, at })
}

/// Writes the pack file of `model` at `path`: a temporary file beside it,
/// synced, then renamed over `path`.
pub(crate) fn write(path: &Path, model: &Path, matrices: &[Matrix<'_>]) -> std::io::Result<()> {
    let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
    let (size, secs, nanos) = identity(model).ok_or_else(|| invalid(format!("cannot read {}", model.display())))?;
    for (i, m) in matrices.iter().enumerate() {
        if !m.shape.valid() || m.weights.len() != m.shape.weight_bytes() || m.scales.len() != m.shape.scale_bytes() {
            return Err(invalid(format!("matrix {i}: {:?} with {} + {} bytes", m.shape, m.weights.len(), m.scales.len())));
        }
    }
    let count = u32::try_from(matrices.len()).map_err(|e| invalid(e.to_string()))?;
    let named = canonical(model);
    let named = named.as_os_str().as_bytes();
    let named_len = u32::try_from(named.len()).map_err(|e| invalid(e.to_string()))?;
    let mut header = Vec::with_capacity(HEADER + matrices.len() * ENTRY + named.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&sources().to_le_bytes());
    header.extend_from_slice(&size.to_le_bytes());
    header.extend_from_slice(&secs.to_le_bytes());
    header.extend_from_slice(&nanos.to_le_bytes());
    header.extend_from_slice(&count.to_le_bytes());
    header.extend_from_slice(&named_len.to_le_bytes());
    header.resize(HEADER, 0);
    let mut offset = (HEADER + matrices.len() * ENTRY + named.len()).next_multiple_of(ALIGN);
    for m in matrices {
        header.extend_from_slice(&m.shape.nout.to_le_bytes());
        header.extend_from_slice(&m.shape.nin.to_le_bytes());
        header.extend_from_slice(&m.shape.zero.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        for len in [m.weights.len(), m.scales.len()] {
            header.extend_from_slice(&(offset as u64).to_le_bytes());
            header.extend_from_slice(&(len as u64).to_le_bytes());
            offset += len.next_multiple_of(ALIGN);
        }
    }
    header.extend_from_slice(named);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let nanos_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or_default();
    let temp = path.with_extension(format!("{}-{nanos_now}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut file);
            let zeros = [0u8; ALIGN];
            let mut put = |bytes: &[u8]| -> std::io::Result<()> {
                out.write_all(bytes)?;
                out.write_all(&zeros[..bytes.len().next_multiple_of(ALIGN) - bytes.len()])
            };
            put(&header)?;
            for m in matrices {
                put(m.weights)?;
                put(m.scales)?;
            }
            out.flush()?;
        }
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two matrices, 4-bit and 8-bit, with recognisable bytes.
    fn parts() -> Vec<(Shape, Vec<u8>, Vec<u8>)> {
        [Shape { nout: 32, nin: 64, zero: 8 }, Shape { nout: 64, nin: 32, zero: 128 }]
            .into_iter()
            .enumerate()
            .map(|(i, shape)| {
                let weights = (0..shape.weight_bytes()).map(|b| (b * 7 + i) as u8).collect();
                let scales = (0..shape.scale_bytes()).map(|b| (b * 13 + i + 1) as u8).collect();
                (shape, weights, scales)
            })
            .collect()
    }

    fn matrices(parts: &[(Shape, Vec<u8>, Vec<u8>)]) -> Vec<Matrix<'_>> {
        parts.iter().map(|(shape, weights, scales)| Matrix { shape: *shape, weights, scales }).collect()
    }

    fn set_modified(path: &Path, time: std::time::SystemTime) {
        std::fs::File::options().write(true).open(path).expect("file").set_modified(time).expect("mtime");
    }

    fn shapes(parts: &[(Shape, Vec<u8>, Vec<u8>)]) -> Vec<Shape> {
        parts.iter().map(|p| p.0).collect()
    }

    /// Matrix `i`'s bytes as the mapped file gives them.
    fn read(file: &PackFile, i: usize, shape: Shape) -> (Vec<u8>, Vec<u8>) {
        let (w, d) = file.parts()[i];
        // SAFETY: packs::open checked both sections lie inside the map.
        #[allow(unsafe_code)]
        unsafe {
            (
                std::slice::from_raw_parts(w, shape.weight_bytes()).to_vec(),
                std::slice::from_raw_parts(d.cast::<u8>(), shape.scale_bytes()).to_vec(),
            )
        }
    }

    /// A temporary directory, the pack directory to be in it, and a model
    /// file in it holding `bytes`.
    fn scratch(bytes: &[u8]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().expect("tmp");
        let (dir, model) = (tmp.path().join("packs"), tmp.path().join("model.bin"));
        std::fs::write(&model, bytes).expect("model");
        (tmp, dir, model)
    }

    #[test]
    fn a_pack_file_gives_back_what_was_written_aligned_and_only_for_its_model_file() {
        let (tmp, dir, model) = scratch(b"weights v1");
        let parts = parts();
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_none(), "nothing written yet");
        save(Some(&dir), "e5", &model, &matrices(&parts));
        let file = open(Some(&dir), "e5", &model, &shapes(&parts)).expect("mapped");
        assert_eq!(file.parts().len(), 2);
        for (i, (shape, weights, scales)) in parts.iter().enumerate() {
            let (w, d) = file.parts()[i];
            assert_eq!((w as usize % ALIGN, d as usize % ALIGN), (0, 0), "sections 64-byte aligned");
            assert_eq!(read(&file, i, *shape), (weights.clone(), scales.clone()));
        }
        // No temporary file left beside it.
        let names: Vec<String> =
            std::fs::read_dir(&dir).expect("dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].starts_with("e5-model-") && names[0].ends_with(".pack"), "{names:?}");

        // Another engine or another model file: another pack file.
        assert!(open(Some(&dir), "bert", &model, &shapes(&parts)).is_none());
        let other = tmp.path().join("other.bin");
        std::fs::write(&other, b"weights v1").expect("model");
        assert!(open(Some(&dir), "e5", &other, &shapes(&parts)).is_none());
        // Shapes the model does not have now: not used.
        let mut wrong = shapes(&parts);
        wrong[1].zero = 8;
        assert!(open(Some(&dir), "e5", &model, &wrong).is_none());
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)[..1]).is_none());
        // No directory: nothing read or written.
        assert!(open(None, "e5", &model, &shapes(&parts)).is_none());
        save(None, "e5", &model, &matrices(&parts));

        // The model file replaced (another size, then the same size with
        // another modification time): the pack file is not used.
        std::fs::write(&model, b"weights version 2").expect("model");
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_none());
        std::fs::write(&model, b"weights v3").expect("model");
        set_modified(&model, std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000));
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_none());
        // Written again, it is used again; a mapping taken before a rewrite
        // keeps reading what it mapped (the file is replaced, not changed).
        save(Some(&dir), "e5", &model, &matrices(&parts));
        let before = open(Some(&dir), "e5", &model, &shapes(&parts)).expect("mapped");
        let mut changed = parts.clone();
        changed[0].1[0] ^= 0xff;
        save(Some(&dir), "e5", &model, &matrices(&changed));
        assert_eq!(read(&before, 0, parts[0].0).0, parts[0].1);
        let after = open(Some(&dir), "e5", &model, &shapes(&parts)).expect("mapped");
        assert_eq!(read(&after, 0, parts[0].0).0, changed[0].1);
    }

    #[test]
    fn a_damaged_pack_file_is_not_used_and_bad_matrices_are_not_written() {
        let (tmp, dir, model) = scratch(b"weights");
        let parts = parts();
        save(Some(&dir), "e5", &model, &matrices(&parts));
        let file = path(&dir, "e5", &model);
        let good = std::fs::read(&file).expect("pack");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("header only", good[..HEADER].to_vec()),
            ("cut in the table", good[..HEADER + ENTRY / 2].to_vec()),
            ("cut in the last section", good[..good.len() - 1].to_vec()),
            ("other magic", [b"NOTAPACK".as_slice(), &good[8..]].concat()),
            ("other kernel sources", {
                let mut bad = good.clone();
                bad[8] ^= 1;
                bad
            }),
            ("a section out of the file", {
                let mut bad = good.clone();
                let at = HEADER + 16;
                bad[at..at + 8].copy_from_slice(&(good.len() as u64).to_le_bytes());
                bad
            }),
            ("a misaligned section", {
                let mut bad = good.clone();
                let at = HEADER + 16;
                let offset = u64_at(&good, at).expect("offset") + 4;
                bad[at..at + 8].copy_from_slice(&offset.to_le_bytes());
                bad
            }),
            ("an offset that overflows", {
                let mut bad = good.clone();
                let at = HEADER + ENTRY + 32;
                bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
                bad
            }),
            ("another matrix count", {
                let mut bad = good.clone();
                bad[36] = 3;
                bad
            }),
            ("another model path recorded", {
                let mut bad = good.clone();
                let at = HEADER + 2 * ENTRY + 1;
                bad[at] ^= 1;
                bad
            }),
        ];
        for (case, bytes) in cases {
            std::fs::write(&file, &bytes).expect("write");
            assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_none(), "{case}");
        }
        std::fs::write(&file, &good).expect("write");
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_some());

        // Matrices that do not match their shape, or a shape the kernels
        // cannot hold, are refused, and the file under the name stays.
        let mut short = parts.clone();
        short[0].2.pop();
        assert!(write(&file, &model, &matrices(&short)).is_err());
        let odd = vec![(Shape { nout: 16, nin: 32, zero: 8 }, vec![0u8; 256], vec![0u8; 64])];
        assert!(write(&file, &model, &matrices(&odd)).is_err());
        assert_eq!(std::fs::read(&file).expect("pack"), good);
        // A directory that cannot be made: an error for write, nothing for
        // save (the matrices are made at each load).
        let blocked = tmp.path().join("blocked");
        std::fs::write(&blocked, b"a file where the directory would be").expect("file");
        assert!(write(&path(&blocked, "e5", &model), &model, &matrices(&parts)).is_err());
        save(Some(&blocked), "e5", &model, &matrices(&parts));
        assert!(open(Some(&blocked), "e5", &model, &shapes(&parts)).is_none());
    }

    #[test]
    fn writing_a_pack_file_removes_those_of_model_files_that_are_gone_and_stale_temporary_files() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("packs");
        let parts = parts();
        let (kept, gone) = (tmp.path().join("kept.bin"), tmp.path().join("gone.bin"));
        for model in [&kept, &gone] {
            std::fs::write(model, b"weights").expect("model");
            save(Some(&dir), "e5", model, &matrices(&parts));
        }
        assert_eq!(recorded(&path(&dir, "e5", &gone)), Some((sources(), gone.canonicalize().expect("canonical"))));
        std::fs::remove_file(&gone).expect("rm");
        let old_temp = dir.join("e5-kept-0.pack.1-2.tmp");
        let new_temp = dir.join("e5-kept-0.pack.3-4.tmp");
        let foreign = dir.join("notes.pack");
        for file in [&old_temp, &new_temp, &foreign] {
            std::fs::write(file, b"x").expect("write");
        }
        set_modified(&old_temp, std::time::SystemTime::now() - 2 * STALE_TEMP);
        save(Some(&dir), "e5", &kept, &matrices(&parts));
        assert!(!path(&dir, "e5", &gone).exists(), "the gone model's pack file is removed");
        assert!(!old_temp.exists(), "a temporary file left long ago is removed");
        assert!(new_temp.exists() && foreign.exists(), "a writer's fresh temporary file and a file not ours stay");
        assert!(open(Some(&dir), "e5", &kept, &shapes(&parts)).is_some());
    }

    /// A pack file as a build of other kernels would have written it for
    /// `model`: this build's, with another sources hash, under that
    /// build's name.
    fn other_builds(dir: &Path, model: &Path, parts: &[(Shape, Vec<u8>, Vec<u8>)], built: u64) -> PathBuf {
        let ours = path(dir, "e5", model);
        write(&ours, model, &matrices(parts)).expect("write");
        let mut bytes = std::fs::read(&ours).expect("read");
        bytes[8..16].copy_from_slice(&built.to_le_bytes());
        let theirs =
            dir.join(ours.file_name().expect("name").to_string_lossy().replace(&format!("{:016x}", sources()), &format!("{built:016x}")));
        std::fs::write(&theirs, bytes).expect("write");
        std::fs::remove_file(&ours).expect("rm");
        theirs
    }

    #[test]
    fn two_builds_keep_their_own_pack_files_and_an_old_builds_goes_after_a_day() {
        let (_tmp, dir, model) = scratch(b"weights");
        let parts = parts();
        let (recent, old) = (other_builds(&dir, &model, &parts, sources() ^ 1), other_builds(&dir, &model, &parts, sources() ^ 2));
        assert_ne!(recent, old);
        set_modified(&old, std::time::SystemTime::now() - 2 * OTHER_BUILD);
        // This build does not read another build's file, and writes its own
        // beside them.
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_none());
        save(Some(&dir), "e5", &model, &matrices(&parts));
        assert!(open(Some(&dir), "e5", &model, &shapes(&parts)).is_some());
        assert!(recent.exists(), "a build used lately keeps its file");
        assert!(!old.exists(), "a build's file not written for a day is removed");
        assert_eq!(recorded(&recent).map(|(built, _)| built), Some(sources() ^ 1), "and the other build's file is as it wrote it");
    }
}
