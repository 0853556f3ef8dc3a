//! The store directory:
//!
//! ```text
//! <root>/CURRENT          name of the live Oxigraph directory, e.g. "oxigraph-3"
//! <root>/oxigraph-<n>/    RocksDB files of generation n
//! <root>/VACUUM_PENDING   present while a vacuum is owed (after a tombstone)
//! <root>/snapshots/<v>-<ulid>/  read-only checkpoints for SPARQL workers
//! ```
//!
//! **Invariant:** `CURRENT` is replaced only by an atomic rename after the
//! generation it names is complete and flushed; any other `oxigraph-*`
//! directory is garbage and removed on open.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Result, StoreError};

const CURRENT: &str = "CURRENT";
const PENDING: &str = "VACUUM_PENDING";
const PREFIX: &str = "oxigraph-";

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

/// Creates `root` if needed, removes stale generations and returns the
/// directory of the live generation.
pub(super) fn prepare(root: &Path) -> Result<PathBuf> {
    fs::create_dir_all(root).map_err(io_error(root))?;
    let current = match fs::read_to_string(root.join(CURRENT)) {
        Ok(name) if name.trim().starts_with(PREFIX) => root.join(name.trim()),
        _ => {
            let dir = root.join(format!("{PREFIX}0"));
            switch_current(root, &dir)?;
            dir
        }
    };
    remove_stale_generations(root, &current);
    remove_snapshots(root);
    Ok(current)
}

/// Where read-only checkpoints live.
pub(super) fn snapshots_dir(root: &Path) -> PathBuf {
    root.join("snapshots")
}

/// Removes every read-only checkpoint (at open, and after a vacuum).
pub(super) fn remove_snapshots(root: &Path) {
    let dir = snapshots_dir(root);
    if let Err(error) = fs::remove_dir_all(&dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %dir.display(), %error, "could not remove read snapshots");
    }
}

fn generation(dir: &Path) -> u64 {
    dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix(PREFIX)).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// A fresh, empty directory for the generation after the current one.
pub(super) fn next_generation_dir(root: &Path) -> Result<PathBuf> {
    let current = fs::read_to_string(root.join(CURRENT)).map_err(io_error(root))?;
    let next = root.join(format!("{PREFIX}{}", generation(Path::new(current.trim())) + 1));
    if next.exists() {
        fs::remove_dir_all(&next).map_err(io_error(&next))?;
    }
    Ok(next)
}

/// Atomically makes `dir` the live generation.
pub(super) fn switch_current(root: &Path, dir: &Path) -> Result<()> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| StoreError::Corrupt(format!("bad generation directory {}", dir.display())))?;
    let tmp = root.join("CURRENT.tmp");
    {
        let mut file = fs::File::create(&tmp).map_err(io_error(&tmp))?;
        file.write_all(name.as_bytes()).map_err(io_error(&tmp))?;
        file.sync_all().map_err(io_error(&tmp))?;
    }
    fs::rename(&tmp, root.join(CURRENT)).map_err(io_error(root))?;
    if let Ok(dir) = fs::File::open(root) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Removes every generation directory but `keep` (best effort).
pub(super) fn remove_stale_generations(root: &Path, keep: &Path) {
    let Ok(entries) = fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_generation = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(PREFIX));
        if is_generation
            && path != keep
            && let Err(error) = fs::remove_dir_all(&path)
        {
            tracing::warn!(path = %path.display(), %error, "could not remove a stale store generation");
        }
    }
}

pub(super) fn mark_vacuum_pending(root: &Path) -> Result<()> {
    let path = root.join(PENDING);
    let file = fs::File::create(&path).map_err(io_error(&path))?;
    file.sync_all().map_err(io_error(&path))
}

pub(super) fn clear_vacuum_pending(root: &Path) -> Result<()> {
    let path = root.join(PENDING);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StoreError::Io { path, source }),
    }
}

pub(super) fn vacuum_pending(root: &Path) -> bool {
    root.join(PENDING).exists()
}
