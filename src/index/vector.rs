//! The semantic index: one vector per atom, confined by tenant, repository
//! and status *during* the search (exact scan for partitions up to
//! [`EXACT_LIMIT`] vectors, usearch HNSW with an in-search filter above).
//!
//! **Architecture invariants**
//! - Derived data for one embedder id: vectors of another model are never
//!   mixed in (a different id starts an empty index).
//! - Persisted on [`VectorIndex::persist`] with the store snapshot version it
//!   reflects; newer changes are replayed from the store at open.
//! - The HNSW graph is saved in the same file as the vectors it was built
//!   from (one rename makes both current), with a checksum; at open it is
//!   used only when it holds exactly the saved vectors' keys, else it is
//!   rebuilt. Building it took 2.8 s per model at 10k vectors, at every
//!   start of a process.
//! - The graph keeps its copy of the vectors in f16 (half the memory of
//!   f32, and a search reads half the bytes); the scores a search returns
//!   are exact, computed again from the f32 vectors.

use std::collections::HashMap;

use foldhash::{HashMap as KeyMap, HashSet as KeySet};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use crate::atom::AtomId;

/// Partitions up to this size are searched exactly.
pub(crate) const EXACT_LIMIT: usize = 4_096;
/// The file format written: 4 puts the vectors after the entries, aligned,
/// to be mapped; 3 appended the HNSW graph with f16 vectors; 2 (an f32
/// graph, converted at open) and 1 (vectors only, graph built at open) are
/// still read.
const FORMAT: u32 = 4;
/// The first format whose graph is loaded.
const GRAPH_FORMAT: u32 = 3;
/// The first format whose vectors follow the entries, aligned, and are
/// mapped rather than read.
const MAPPED_FORMAT: u32 = 4;
/// Where format 4 starts its vectors and its graph: a multiple of this.
const ALIGN: usize = 64;

/// Zero bytes that bring `offset` to a multiple of [`ALIGN`].
fn padding(offset: usize) -> usize {
    (ALIGN - offset % ALIGN) % ALIGN
}

/// Errors of the vector index.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    /// usearch failed.
    #[error("vector index: {0}")]
    Usearch(String),
    /// File trouble.
    #[error("vector index file {path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A vector of the wrong length.
    #[error("vector has {got} dimensions, the index has {expected}")]
    Dimensions {
        /// Expected.
        expected: usize,
        /// Given.
        got: usize,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    atom_id: AtomId,
    /// Its tenant, repository and status ([`Classes`]).
    class: u32,
    /// Where the vector sits in [`Vectors`].
    slot: u32,
}

/// What confines an entry to the searches that may see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Class {
    tenant: String,
    repo_key: String,
    status: String,
}

/// The classes the entries have, each kept once: a search decides once per
/// class whether it may see an entry, not once per vector it visits (three
/// string comparisons in usearch's filter were a third of a search at 10k
/// vectors, under perf). Never shrinks: a store has few tenants,
/// repositories and statuses.
#[derive(Debug, Default)]
struct Classes {
    all: Vec<Class>,
    ids: HashMap<Class, u32>,
}

impl Classes {
    fn intern(&mut self, tenant: &str, repo_key: &str, status: &str) -> u32 {
        let class = Class { tenant: tenant.to_owned(), repo_key: repo_key.to_owned(), status: status.to_owned() };
        if let Some(id) = self.ids.get(&class) {
            return *id;
        }
        let id = self.all.len() as u32;
        self.all.push(class.clone());
        self.ids.insert(class, id);
        id
    }

    fn get(&self, id: u32) -> &Class {
        &self.all[id as usize]
    }
}

/// Every vector of an index in one allocation, `dims` floats per slot; a
/// removed vector's slot is reused. One vector per heap allocation cost a
/// cold process about 40 ms of allocator and page-fault time for its two
/// models' indexes at 10k vectors, and an exact scan chased a pointer per
/// vector.
///
/// The slots a vector file holds (format 4) stay in the file: mapped
/// privately (copy on write: a vector set here never reaches the file,
/// which a save replaces whole), so opening reads no vector, and a search
/// touches only the pages of the vectors it scores. Slots past them are in
/// `floats`.
#[derive(Debug)]
struct Vectors {
    dims: usize,
    mapped: Option<memmap2::MmapMut>,
    /// Slots `0..mapped_slots` are in `mapped`.
    mapped_slots: usize,
    floats: Vec<f32>,
    free: Vec<u32>,
}

impl Vectors {
    fn new(dims: usize) -> Vectors {
        Vectors { dims, mapped: None, mapped_slots: 0, floats: Vec::new(), free: Vec::new() }
    }

    /// The `slots` vectors at `offset` of `file`, mapped; `None` when the
    /// map cannot serve them as floats (a platform of another byte order,
    /// a misaligned map) and they are to be read instead.
    #[allow(unsafe_code)]
    fn mapped(file: &std::fs::File, offset: u64, slots: usize, dims: usize) -> std::io::Result<Option<Vectors>> {
        let len = slots * dims * 4;
        if len == 0 || cfg!(target_endian = "big") {
            return Ok(None);
        }
        // SAFETY: a private (copy-on-write) map: writes stay in this
        // process. HMG replaces a vector file by renaming a new one over it
        // (this map keeps the old file) and writes in place only the
        // version in its header, before this range.
        let map = unsafe { memmap2::MmapOptions::new().offset(offset).len(len).map_copy(file) }?;
        if map.as_ptr().align_offset(std::mem::align_of::<f32>()) != 0 {
            return Ok(None);
        }
        Ok(Some(Vectors { dims, mapped: Some(map), mapped_slots: slots, floats: Vec::new(), free: Vec::new() }))
    }

    fn slots(&self) -> usize {
        self.mapped_slots + self.floats.len() / self.dims.max(1)
    }

    fn get(&self, slot: u32) -> &[f32] {
        let slot = slot as usize;
        match &self.mapped {
            Some(map) if slot < self.mapped_slots => &as_floats(map)[slot * self.dims..(slot + 1) * self.dims],
            _ => {
                let start = (slot - self.mapped_slots) * self.dims;
                &self.floats[start..start + self.dims]
            }
        }
    }

    /// Stores `vector` (of `dims` floats) in a free slot or a new one.
    fn add(&mut self, vector: &[f32]) -> Result<u32, VectorError> {
        match self.free.pop() {
            Some(slot) => {
                self.set(slot, vector);
                Ok(slot)
            }
            None => {
                let slot = u32::try_from(self.slots()).map_err(|_| VectorError::Usearch("more than 2^32 vectors in one index".into()))?;
                self.floats.extend_from_slice(vector);
                Ok(slot)
            }
        }
    }

    fn set(&mut self, slot: u32, vector: &[f32]) {
        let (slot, dims) = (slot as usize, self.dims);
        match &mut self.mapped {
            Some(map) if slot < self.mapped_slots => as_floats_mut(map)[slot * dims..(slot + 1) * dims].copy_from_slice(vector),
            _ => {
                let start = (slot - self.mapped_slots) * dims;
                self.floats[start..start + dims].copy_from_slice(vector);
            }
        }
    }

    fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }

    fn clear(&mut self) {
        self.mapped = None;
        self.mapped_slots = 0;
        self.floats = Vec::new();
        self.free.clear();
    }
}

/// The floats of a map [`Vectors::mapped`] checked for alignment.
#[allow(unsafe_code)]
fn as_floats(map: &memmap2::MmapMut) -> &[f32] {
    // SAFETY: aligned for f32 (checked when mapped), every bit pattern is
    // a float, and the length is whole floats; the map lives as long as
    // the borrow.
    unsafe { std::slice::from_raw_parts(map.as_ptr().cast::<f32>(), map.len() / 4) }
}

/// [`as_floats`], writable.
#[allow(unsafe_code)]
fn as_floats_mut(map: &mut memmap2::MmapMut) -> &mut [f32] {
    // SAFETY: as in `as_floats`, borrowed exclusively.
    unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().cast::<f32>(), map.len() / 4) }
}

/// Keyed by [`key_of`] with foldhash: SipHash's share of an HNSW search
/// (its filter looks up every node it visits) was a fifth under perf.
struct Inner {
    entries: KeyMap<u64, Entry>,
    classes: Classes,
    vectors: Vectors,
    /// The keys of each class's entries, by class id: a search that may see
    /// few of the graph's vectors scans just those, and a tenant's partition
    /// is the sum of its classes.
    by_class: Vec<KeySet<u64>>,
    hnsw: Option<usearch::Index>,
    applied_version: u64,
    saved_version: u64,
    /// Whether vectors, statuses or the graph changed since the file was
    /// written (else a save only moves the file's version forward).
    dirty: bool,
}

impl Inner {
    /// The id of the class, its key set made when it is new.
    fn class(&mut self, tenant: &str, repo_key: &str, status: &str) -> u32 {
        let id = self.classes.intern(tenant, repo_key, status);
        if self.by_class.len() <= id as usize {
            self.by_class.resize_with(id as usize + 1, KeySet::default);
        }
        id
    }

    /// How many entries `tenant` has (its partition).
    fn tenant_len(&self, tenant: &str) -> usize {
        self.classes.all.iter().zip(&self.by_class).filter(|(c, _)| c.tenant == tenant).map(|(_, keys)| keys.len()).sum()
    }

    /// The size of the largest tenant's partition.
    fn largest_tenant(&self) -> usize {
        let mut sizes: HashMap<&str, usize> = HashMap::new();
        for (class, keys) in self.classes.all.iter().zip(&self.by_class) {
            *sizes.entry(class.tenant.as_str()).or_default() += keys.len();
        }
        sizes.into_values().max().unwrap_or(0)
    }

    /// Moves `key` out of its class's key set.
    fn unclass(&mut self, key: u64, class: u32) {
        if let Some(keys) = self.by_class.get_mut(class as usize) {
            keys.remove(&key);
        }
    }
}

/// The vector index for one embedder.
pub struct VectorIndex {
    inner: RwLock<Inner>,
    model_id: String,
    dims: usize,
    dir: Option<PathBuf>,
}

impl std::fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorIndex").field("model_id", &self.model_id).field("dims", &self.dims).finish()
    }
}

fn key_of(id: AtomId) -> u64 {
    // The low 64 bits of a ULID are random (or monotonically incremented):
    // unique in practice, and collisions are detected on insert.
    (u128::from(id) & u128::from(u64::MAX)) as u64
}

fn new_hnsw(dims: usize) -> Result<usearch::Index, VectorError> {
    hnsw_of(dims, usearch::ScalarKind::F16)
}

fn hnsw_of(dims: usize, quantization: usearch::ScalarKind) -> Result<usearch::Index, VectorError> {
    let options = usearch::IndexOptions {
        dimensions: dims,
        metric: usearch::MetricKind::IP,
        quantization,
        connectivity: 16,
        expansion_add: 128,
        expansion_search: 128,
        multi: false,
    };
    usearch::Index::new(&options).map_err(|e| VectorError::Usearch(e.to_string()))
}

/// One atom's vector for [`VectorIndex::upsert_many`], with what confines
/// it and the store version that wrote it.
#[derive(Debug, Clone)]
pub(crate) struct VectorUpsert {
    pub(crate) atom_id: AtomId,
    pub(crate) tenant: String,
    pub(crate) repo_key: String,
    pub(crate) status: String,
    pub(crate) vector: Vec<f32>,
    pub(crate) version: u64,
}

/// usearch's error as ours.
fn usearch_error(error: impl std::fmt::Display) -> VectorError {
    VectorError::Usearch(error.to_string())
}

/// Inserts `items` (keys not in `hnsw`) into the graph, one after another,
/// reserving room first. Not split over threads: usearch takes concurrent
/// insertions, but a graph built so left 1–3 of 4,396 vectors (8-d) that a
/// search for their own vector no longer found first, where one insertion
/// at a time leaves none (and the same graph every time). The cores share
/// the work by model instead ([`crate::index::Indexes`]' batches).
fn add_all(hnsw: &usearch::Index, items: &[(u64, &[f32])]) -> Result<(), VectorError> {
    let needed = hnsw.size() + items.len() + 1;
    if needed >= hnsw.capacity() {
        // Doubling keeps reallocations rare.
        hnsw.reserve((needed * 2).max(1024)).map_err(usearch_error)?;
    }
    for (key, vector) in items {
        hnsw.add(*key, vector).map_err(usearch_error)?;
    }
    Ok(())
}

/// Whether scoring the `seen` vectors a search may see costs less than a
/// filtered walk of a graph of `graph` vectors. A scan costs one dot
/// product per vector seen; the walk costs about what an unfiltered search
/// does divided by the share it may see, and an unfiltered search costs
/// about a scan of [`EXACT_LIMIT`] vectors (where the index starts using
/// the graph at all). So: scan while `seen² ≤ EXACT_LIMIT × graph`, which
/// is the old rule when every vector is visible.
fn scan_is_cheaper(seen: usize, graph: usize) -> bool {
    (seen as u128) * (seen as u128) <= (EXACT_LIMIT as u128) * (graph as u128)
}

/// Dot product with eight independent accumulators, so the compiler can
/// vectorize it (a plain fold is sequential under strict float semantics).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

impl VectorIndex {
    /// Opens the index of `model_id` in `dir` (or in RAM).
    pub fn open(dir: Option<&Path>, model_id: &str, dims: usize) -> Result<VectorIndex, VectorError> {
        let mut inner = Inner {
            entries: KeyMap::default(),
            classes: Classes::default(),
            vectors: Vectors::new(dims),
            by_class: Vec::new(),
            hnsw: None,
            applied_version: 0,
            saved_version: 0,
            dirty: true,
        };
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).map_err(|source| VectorError::Io { path: dir.to_path_buf(), source })?;
            match load(&dir.join("vectors.bin"), model_id, dims) {
                Ok(Some(Loaded { version, entries, classes, vectors, graph, upgraded })) => {
                    inner.entries.reserve(entries.len());
                    inner.vectors = vectors;
                    inner.by_class.resize_with(classes.all.len(), KeySet::default);
                    for (key, entry) in entries {
                        inner.by_class[entry.class as usize].insert(key);
                        inner.entries.insert(key, entry);
                    }
                    inner.classes = classes;
                    inner.applied_version = version;
                    inner.saved_version = version;
                    // A file without its graph is written again once the
                    // graph is built (below), so the next open loads it; an
                    // older format is written in the current one.
                    inner.dirty = upgraded || (graph.is_none() && inner.largest_tenant() > EXACT_LIMIT);
                    inner.hnsw = graph;
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "vector index unreadable; it will be rebuilt from the store"),
            }
        }
        let loaded = inner.saved_version != 0;
        let index = VectorIndex { inner: RwLock::new(inner), model_id: model_id.to_owned(), dims, dir: dir.map(Path::to_path_buf) };
        if index.rebuild_hnsw_if_needed()? && loaded {
            // Saved now, not at the process's first flush: a graph built at
            // open takes seconds to a minute, and a process stopped before
            // that flush (an MCP host's start-up timeout) would leave the
            // next one to build it again.
            if let Err(error) = index.persist() {
                tracing::warn!(%error, "vector index rebuilt at open but not saved; the next open builds it again");
            }
        }
        Ok(index)
    }

    /// The embedder id this index belongs to.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The store snapshot version the index reflects.
    pub fn applied_version(&self) -> u64 {
        self.read().applied_version
    }

    /// Records that every store change up to `version` is reflected (after
    /// a catch-up: versions without a change to vectors).
    pub(crate) fn mark(&self, version: u64) {
        let mut inner = self.write();
        inner.applied_version = inner.applied_version.max(version);
    }

    /// Records that the write committed as `version` changed no vector,
    /// when every earlier version is reflected (else a catch-up replays it).
    pub(crate) fn skip(&self, version: u64) {
        let mut inner = self.write();
        if inner.applied_version + 1 == version {
            inner.applied_version = version;
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Builds the graph when a partition outgrew exact scans and there is
    /// none; whether it did.
    fn rebuild_hnsw_if_needed(&self) -> Result<bool, VectorError> {
        let mut inner = self.write();
        if inner.hnsw.is_some() || inner.largest_tenant() <= EXACT_LIMIT {
            return Ok(false);
        }
        let hnsw = new_hnsw(self.dims)?;
        let items: Vec<(u64, &[f32])> = inner.entries.iter().map(|(key, entry)| (*key, inner.vectors.get(entry.slot))).collect();
        add_all(&hnsw, &items)?;
        inner.hnsw = Some(hnsw);
        Ok(true)
    }

    /// Adds or replaces an atom's vector and metadata.
    pub fn upsert(
        &self,
        atom_id: AtomId,
        tenant: &str,
        repo_key: &str,
        status: &str,
        vector: Vec<f32>,
        version: u64,
    ) -> Result<(), VectorError> {
        let upsert =
            VectorUpsert { atom_id, tenant: tenant.to_owned(), repo_key: repo_key.to_owned(), status: status.to_owned(), vector, version };
        self.upsert_many(vec![upsert])
    }

    /// [`VectorIndex::upsert`] of several atoms under one lock (an atom
    /// twice: its last vector). Nothing changes when a vector has the wrong
    /// dimensions.
    pub(crate) fn upsert_many(&self, upserts: Vec<VectorUpsert>) -> Result<(), VectorError> {
        if let Some(wrong) = upserts.iter().find(|u| u.vector.len() != self.dims) {
            return Err(VectorError::Dimensions { expected: self.dims, got: wrong.vector.len() });
        }
        if upserts.is_empty() {
            return Ok(());
        }
        // An atom twice: its last vector wins, as one upsert after another.
        let mut seen = KeySet::default();
        let mut upserts: Vec<VectorUpsert> = upserts.into_iter().rev().filter(|u| seen.insert(key_of(u.atom_id))).collect();
        upserts.reverse();
        {
            let mut inner = self.write();
            if let Some(hnsw) = &inner.hnsw {
                for upsert in &upserts {
                    let key = key_of(upsert.atom_id);
                    if hnsw.contains(key) {
                        hnsw.remove(key).map_err(|e| VectorError::Usearch(e.to_string()))?;
                    }
                }
                let items: Vec<(u64, &[f32])> = upserts.iter().map(|u| (key_of(u.atom_id), u.vector.as_slice())).collect();
                add_all(hnsw, &items)?;
            }
            for upsert in upserts {
                let key = key_of(upsert.atom_id);
                let slot = match inner.entries.remove(&key) {
                    Some(old) => {
                        inner.unclass(key, old.class);
                        inner.vectors.set(old.slot, &upsert.vector);
                        old.slot
                    }
                    None => inner.vectors.add(&upsert.vector)?,
                };
                let class = inner.class(&upsert.tenant, &upsert.repo_key, &upsert.status);
                inner.by_class[class as usize].insert(key);
                inner.entries.insert(key, Entry { atom_id: upsert.atom_id, class, slot });
                inner.applied_version = inner.applied_version.max(upsert.version);
                inner.dirty = true;
            }
        }
        self.rebuild_hnsw_if_needed().map(drop)
    }

    /// Updates an atom's status (a vector stays; the status filters it).
    pub fn set_status(&self, atom_id: AtomId, status: &str, version: u64) -> bool {
        let mut guard = self.write();
        let inner = &mut *guard;
        inner.applied_version = inner.applied_version.max(version);
        let key = key_of(atom_id);
        let Some(old) = inner.entries.get(&key).map(|entry| entry.class) else { return false };
        let Class { tenant, repo_key, status: old_status } = inner.classes.get(old);
        if old_status != status {
            let (tenant, repo_key) = (tenant.clone(), repo_key.clone());
            let class = inner.class(&tenant, &repo_key, status);
            inner.unclass(key, old);
            inner.by_class[class as usize].insert(key);
            if let Some(entry) = inner.entries.get_mut(&key) {
                entry.class = class;
            }
            inner.dirty = true;
        }
        true
    }

    /// Removes an atom.
    pub fn remove(&self, atom_id: AtomId, version: u64) {
        let key = key_of(atom_id);
        let mut inner = self.write();
        if let Some(entry) = inner.entries.remove(&key) {
            inner.vectors.release(entry.slot);
            inner.unclass(key, entry.class);
            if let Some(hnsw) = &inner.hnsw {
                let _ = hnsw.remove(key);
            }
            inner.dirty = true;
        }
        inner.applied_version = inner.applied_version.max(version);
    }

    /// The atom's vector, if it has one in `tenant`.
    pub fn vector_of(&self, atom_id: AtomId, tenant: &str) -> Option<Vec<f32>> {
        let inner = self.read();
        inner
            .entries
            .get(&key_of(atom_id))
            .filter(|e| e.atom_id == atom_id && inner.classes.get(e.class).tenant == tenant)
            .map(|e| inner.vectors.get(e.slot).to_vec())
    }

    /// Whether the atom has a vector.
    pub fn contains(&self, atom_id: AtomId) -> bool {
        self.read().entries.contains_key(&key_of(atom_id))
    }

    /// Vectors of `tenant`.
    pub fn count(&self, tenant: &str) -> u64 {
        self.read().tenant_len(tenant) as u64
    }

    /// Deletes everything (before a rebuild).
    pub fn clear(&self) {
        let mut inner = self.write();
        inner.entries.clear();
        inner.vectors.clear();
        inner.by_class.iter_mut().for_each(KeySet::clear);
        inner.hnsw = None;
        inner.applied_version = 0;
        inner.dirty = true;
    }

    /// Cosine similarity search among `tenant`'s vectors in `repo_keys` with
    /// a status in `statuses`; best first.
    pub fn search(
        &self,
        tenant: &str,
        repo_keys: &[String],
        statuses: &[&str],
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(AtomId, f32)>, VectorError> {
        if query.len() != self.dims {
            return Err(VectorError::Dimensions { expected: self.dims, got: query.len() });
        }
        let inner = self.read();
        // Whether this search may see each class of entries.
        let visible: Vec<bool> = inner
            .classes
            .all
            .iter()
            .map(|c| statuses.contains(&c.status.as_str()) && repo_keys.contains(&c.repo_key) && c.tenant == tenant)
            .collect();
        // How many vectors it may see: a filtered graph search visits
        // nodes until it has found enough of them, so the fewer there are
        // the more of the graph it walks (all of it when there are none:
        // 4-5 ms per model at 10k vectors, for an agent in a repository
        // holding none of the tenant's memories).
        let seen: usize = visible.iter().zip(&inner.by_class).filter(|(v, _)| **v).map(|(_, keys)| keys.len()).sum();
        if seen == 0 {
            return Ok(Vec::new());
        }
        let graph = match &inner.hnsw {
            Some(hnsw) if inner.tenant_len(tenant) > EXACT_LIMIT && !scan_is_cheaper(seen, hnsw.size()) => Some(hnsw),
            _ => None,
        };
        let mut hits: Vec<(AtomId, f32)> = match graph {
            Some(hnsw) => {
                // When every class is visible (one tenant, one repository,
                // every atom active: a single user's store) no filter is
                // needed: every vector in the graph is an entry of one.
                let matches = if visible.iter().all(|v| *v) {
                    hnsw.search(query, limit)
                } else {
                    hnsw.filtered_search(query, limit, |key| inner.entries.get(&key).is_some_and(|e| visible[e.class as usize]))
                }
                .map_err(|e| VectorError::Usearch(e.to_string()))?;
                // The graph's f16 distances find the neighbours; their scores
                // come from the f32 vectors.
                matches
                    .keys
                    .iter()
                    .filter_map(|key| inner.entries.get(key).map(|e| (e.atom_id, dot(inner.vectors.get(e.slot), query))))
                    .collect()
            }
            None => visible
                .iter()
                .zip(&inner.by_class)
                .filter(|(v, _)| **v)
                .flat_map(|(_, keys)| keys.iter())
                .filter_map(|key| inner.entries.get(key))
                // Each key is in its entry's class's set only (tested), but
                // confinement does not rest on that bookkeeping.
                .filter(|entry| visible[entry.class as usize])
                .map(|entry| (entry.atom_id, dot(inner.vectors.get(entry.slot), query)))
                .collect(),
        };
        let order = |a: &(AtomId, f32), b: &(AtomId, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > limit && limit > 0 {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_by(order);
        Ok(hits)
    }

    /// The file's header up to the version, which follows it (and is what
    /// a save that changed no vector rewrites in place).
    fn header_prefix(&self) -> Vec<u8> {
        let mut header = Vec::new();
        header.extend_from_slice(&FORMAT.to_le_bytes());
        put_str(&mut header, &self.model_id);
        header.extend_from_slice(&(self.dims as u32).to_le_bytes());
        header
    }

    /// Writes the index to disk if it changed since the last save.
    pub fn persist(&self) -> Result<(), VectorError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let mut inner = self.write();
        if !inner.dirty && inner.saved_version == inner.applied_version && inner.saved_version != 0 {
            return Ok(());
        }
        let path = dir.join("vectors.bin");
        if !inner.dirty && inner.saved_version != 0 {
            // Only the version moved (writes that changed no vector: usage
            // stamps, other atoms' fields): 8 bytes in place, not the whole
            // file again (32 MB at 10k vectors). Written or not, the file
            // is right for both versions.
            let offset = self.header_prefix().len() as u64;
            let rewritten =
                rewrite_version(&path, offset, inner.applied_version).map_err(|source| VectorError::Io { path: path.clone(), source })?;
            // Gone: written whole below.
            if rewritten {
                inner.saved_version = inner.applied_version;
                return Ok(());
            }
        }
        let tmp = dir.join("vectors.bin.tmp");
        let io = |source| VectorError::Io { path: tmp.clone(), source };
        let matrix_at;
        {
            let file = std::fs::File::create(&tmp).map_err(io)?;
            let mut out = Counted { out: std::io::BufWriter::with_capacity(1 << 20, file), written: 0 };
            let mut header = self.header_prefix();
            header.extend_from_slice(&inner.applied_version.to_le_bytes());
            header.extend_from_slice(&(inner.entries.len() as u64).to_le_bytes());
            out.put(&header).map_err(io)?;
            // The entries, then their vectors in the same order, aligned
            // (a map of the file serves them as floats).
            let mut body = Vec::with_capacity(64 + self.dims * 4);
            for entry in inner.entries.values() {
                let class = inner.classes.get(entry.class);
                body.clear();
                body.extend_from_slice(&u128::from(entry.atom_id).to_le_bytes());
                put_str(&mut body, &class.tenant);
                put_str(&mut body, &class.repo_key);
                put_str(&mut body, &class.status);
                out.put(&body).map_err(io)?;
            }
            out.pad().map_err(io)?;
            matrix_at = out.written as u64;
            for entry in inner.entries.values() {
                body.clear();
                for x in inner.vectors.get(entry.slot) {
                    body.extend_from_slice(&x.to_le_bytes());
                }
                out.put(&body).map_err(io)?;
            }
            // The graph, or an empty section when the index has none.
            body.clear();
            if let Some(hnsw) = &inner.hnsw {
                body.resize(hnsw.serialized_length(), 0);
                hnsw.save_to_buffer(&mut body).map_err(|e| VectorError::Usearch(e.to_string()))?;
            }
            out.put(&(body.len() as u64).to_le_bytes()).map_err(io)?;
            out.put(&checksum(&body).to_le_bytes()).map_err(io)?;
            out.pad().map_err(io)?;
            out.put(&body).map_err(io)?;
            let file = out.out.into_inner().map_err(|e| io(e.into_error()))?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(|source| VectorError::Io { path: path.clone(), source })?;
        inner.saved_version = inner.applied_version;
        inner.dirty = false;
        self.remap(&mut inner, &path, matrix_at);
        Ok(())
    }

    /// After a save: the vectors are served from the file just written, in
    /// its order. The map of the file it replaced is let go, so that file
    /// (with the vectors of whatever a purge removed) leaves the disk now,
    /// not when the process exits.
    fn remap(&self, inner: &mut Inner, path: &Path, offset: u64) {
        let count = inner.entries.len();
        if count == 0 {
            inner.vectors.clear();
            return;
        }
        match std::fs::File::open(path).and_then(|file| Vectors::mapped(&file, offset, count, self.dims)) {
            Ok(Some(vectors)) => {
                // The order the save wrote them in (the map is unchanged
                // since).
                for (slot, entry) in inner.entries.values_mut().enumerate() {
                    entry.slot = slot as u32;
                }
                inner.vectors = vectors;
            }
            // Not mappable here: they stay in memory.
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "vector file saved but not mapped again; its vectors stay in memory")
            }
        }
    }
}

/// A file written through a buffer, counting its bytes (to align sections).
struct Counted {
    out: std::io::BufWriter<std::fs::File>,
    written: usize,
}

impl Counted {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.written += bytes.len();
        self.out.write_all(bytes)
    }

    /// Zeros up to the next multiple of [`ALIGN`].
    fn pad(&mut self) -> std::io::Result<()> {
        self.put(&[0u8; ALIGN][..padding(self.written)])
    }
}

/// Rewrites the store version an index file keeps at `offset`, in place
/// (the rest of the file is unchanged): `Ok(false)` when there is no file.
/// Unsynced: a crash may keep the older version, and the next open replays
/// a little more.
pub(crate) fn rewrite_version(path: &Path, offset: u64, version: u64) -> std::io::Result<bool> {
    let mut file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    file.seek(std::io::SeekFrom::Start(offset))?;
    file.write_all(&version.to_le_bytes())?;
    Ok(true)
}

/// Appends a length-prefixed string (the index files' encoding).
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A vector file's contents.
struct Loaded {
    /// The store snapshot version the file reflects.
    version: u64,
    entries: Vec<(u64, Entry)>,
    /// The entries' classes.
    classes: Classes,
    /// The entries' vectors, in file order (entry `i` in slot `i`).
    vectors: Vectors,
    /// The HNSW graph, when the file has an intact one for its entries.
    graph: Option<usearch::Index>,
    /// Whether the file is of an older format than a save writes.
    upgraded: bool,
}

/// A 64-bit checksum of the graph section (against a damaged file, not an
/// adversary: whoever can write the index directory can write the store):
/// four independent multiply-rotate lanes, several GB/s.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
    let mut chunks = bytes.chunks_exact(32);
    for chunk in &mut chunks {
        for (lane, word) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            *lane = (*lane ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(31);
        }
    }
    let mut tail = [0u8; 32];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    let mut sum = bytes.len() as u64;
    for (lane, word) in lanes.iter().zip(tail.chunks_exact(8)) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        sum = (sum ^ lane ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(27);
    }
    sum
}

/// The saved HNSW graph, when it is intact and holds exactly `entries`'
/// keys (else `None`: the caller builds it anew).
fn saved_graph(bytes: &[u8], dims: usize, entries: &[(u64, Entry)]) -> Option<usearch::Index> {
    let hnsw = new_hnsw(dims).ok()?;
    match hnsw.load_from_buffer(bytes) {
        Ok(()) if hnsw.dimensions() == dims && hnsw.size() == entries.len() && entries.iter().all(|(key, _)| hnsw.contains(*key)) => {
            Some(hnsw)
        }
        Ok(()) => {
            tracing::warn!(vectors = entries.len(), graph = hnsw.size(), "saved vector graph does not match its vectors; rebuilding it");
            None
        }
        Err(error) => {
            tracing::warn!(%error, "saved vector graph unreadable; rebuilding it");
            None
        }
    }
}

/// A vector file read as a stream, never past its length: at 100k vectors
/// the file is hundreds of megabytes, which would sit in memory beside what
/// is built from it; a length read from a damaged file is checked against
/// what is left before anything is allocated for it.
struct Stream {
    reader: std::io::BufReader<std::fs::File>,
    left: u64,
}

impl Stream {
    fn take(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.left = self.left.checked_sub(buf.len() as u64).ok_or(std::io::ErrorKind::UnexpectedEof)?;
        self.reader.read_exact(buf)
    }

    /// Passes over `len` bytes.
    fn skip(&mut self, len: u64) -> std::io::Result<()> {
        self.left = self.left.checked_sub(len).ok_or(std::io::ErrorKind::UnexpectedEof)?;
        self.reader.seek_relative(i64::try_from(len).map_err(|_| std::io::ErrorKind::InvalidData)?)
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.take(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> std::io::Result<u64> {
        let mut b = [0u8; 8];
        self.take(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// `len` bytes, when that many are left.
    fn bytes(&mut self, len: u64) -> std::io::Result<Vec<u8>> {
        if len > self.left {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let mut bytes = vec![0u8; usize::try_from(len).map_err(|_| std::io::ErrorKind::InvalidData)?];
        self.take(&mut bytes)?;
        Ok(bytes)
    }

    /// A string written by [`put_str`].
    fn string(&mut self) -> std::io::Result<String> {
        let len = self.u32()?;
        String::from_utf8(self.bytes(u64::from(len))?).map_err(|_| std::io::ErrorKind::InvalidData.into())
    }
}

fn load(path: &Path, model_id: &str, dims: usize) -> Result<Option<Loaded>, VectorError> {
    let io = |source| VectorError::Io { path: path.to_path_buf(), source };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let size = file.metadata().map_err(io)?.len();
    let mut stream = Stream { reader: std::io::BufReader::with_capacity(1 << 20, file), left: size };
    let bad = |_| io(std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated or malformed vector file"));
    let format = stream.u32().map_err(bad)?;
    let stored_model = stream.string().map_err(bad)?;
    let stored_dims = stream.u32().map_err(bad)? as usize;
    if !(1..=FORMAT).contains(&format) || stored_model != model_id || stored_dims != dims {
        tracing::info!(stored_model, model_id, "vector index belongs to another model or format; rebuilding");
        return Ok(None);
    }
    let version = stream.u64().map_err(bad)?;
    let count = stream.u64().map_err(bad)?;
    // Every record holds at least its id and its vector.
    if count.saturating_mul(16 + dims as u64 * 4) > stream.left {
        return Err(bad(std::io::ErrorKind::InvalidData.into()));
    }
    // Vectors are mapped from format 4 on; before, each followed its entry.
    let mapped = format >= MAPPED_FORMAT;
    // Bounded by the file's length (checked above).
    let mut entries = Vec::with_capacity(count as usize);
    let mut classes = Classes::default();
    let mut vectors = Vectors::new(dims);
    let mut raw = vec![0u8; dims * 4];
    let mut read_vector = |stream: &mut Stream, vectors: &mut Vectors| -> Result<(), VectorError> {
        stream.take(&mut raw).map_err(bad)?;
        vectors.floats.extend(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        Ok(())
    };
    if !mapped {
        vectors.floats.reserve_exact(count as usize * dims);
    }
    for slot in 0..count {
        let mut id = [0u8; 16];
        stream.take(&mut id).map_err(bad)?;
        let atom_id = AtomId::from(u128::from_le_bytes(id));
        let tenant = stream.string().map_err(bad)?;
        let repo_key = stream.string().map_err(bad)?;
        let status = stream.string().map_err(bad)?;
        if !mapped {
            read_vector(&mut stream, &mut vectors)?;
        }
        let slot = u32::try_from(slot).map_err(|_| bad(std::io::ErrorKind::InvalidData.into()))?;
        let class = classes.intern(&tenant, &repo_key, &status);
        entries.push((key_of(atom_id), Entry { atom_id, class, slot }));
    }
    if mapped {
        stream.skip(padding((size - stream.left) as usize) as u64).map_err(bad)?;
        let (offset, len) = (size - stream.left, count * dims as u64 * 4);
        if len > stream.left {
            return Err(bad(std::io::ErrorKind::InvalidData.into()));
        }
        match Vectors::mapped(stream.reader.get_ref(), offset, count as usize, dims).map_err(io)? {
            Some(map) => {
                vectors = map;
                stream.skip(len).map_err(bad)?;
            }
            None => {
                vectors.floats.reserve_exact(count as usize * dims);
                for _ in 0..count {
                    read_vector(&mut stream, &mut vectors)?;
                }
            }
        }
    }
    let upgraded = format < FORMAT;
    let graph = if format >= 2 {
        let len = stream.u64().map_err(bad)?;
        let sum = stream.u64().map_err(bad)?;
        if mapped {
            stream.skip(padding((size - stream.left) as usize) as u64).map_err(bad)?;
        }
        // A saved graph is mapped for usearch to copy it, not read into a
        // buffer first (a second copy, and its page faults).
        let (map, read);
        let bytes: &[u8] = if mapped && len > 0 && len <= stream.left {
            map = map_section(stream.reader.get_ref(), size - stream.left, len).map_err(io)?;
            stream.skip(len).map_err(bad)?;
            &map
        } else {
            read = stream.bytes(len).map_err(bad)?;
            &read
        };
        if bytes.is_empty() {
            None
        } else if checksum(bytes) != sum {
            tracing::warn!(path = %path.display(), "saved vector graph fails its checksum; rebuilding it");
            None
        } else if format < GRAPH_FORMAT {
            // The same graph with its vectors in f16: about 0.1 s at 10k
            // vectors, where building it again took 1.7 s there and 65 s
            // for two models at 100k, before the first answer of the first
            // process after the upgrade.
            match f32_graph_as_f16(bytes, dims) {
                Some(converted) => saved_graph(&converted, dims, &entries),
                None => {
                    tracing::warn!(
                        path = %path.display(),
                        format,
                        vectors = count,
                        "the saved vector graph could not be converted to f16 vectors; building it again (about a minute per 100k)"
                    );
                    None
                }
            }
        } else {
            saved_graph(bytes, dims, &entries)
        }
    } else {
        None
    };
    Ok(Some(Loaded { version, entries, classes, vectors, graph, upgraded }))
}

/// `len` bytes of `file` from `offset`, mapped read-only.
#[allow(unsafe_code)]
fn map_section(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<memmap2::Mmap> {
    let len = usize::try_from(len).map_err(|_| std::io::ErrorKind::InvalidData)?;
    // SAFETY: read while the file is open here; HMG replaces a vector file
    // by a rename (this map keeps the old one) and writes in place only the
    // version in its header, before this section.
    unsafe { memmap2::MmapOptions::new().offset(offset).len(len).map(file) }
}

/// A usearch graph serialized with f32 vectors (format 2), as the same graph
/// serialized with f16 vectors: usearch writes the vector matrix first (its
/// row count and bytes per row as two `u32`s, then the rows), then a 64-byte
/// header naming the scalar kind, then the graph, which does not depend on
/// the scalar kind. `None` when the bytes are not laid out that way (the
/// caller builds the graph again).
fn f32_graph_as_f16(bytes: &[u8], dims: usize) -> Option<Vec<u8>> {
    let kind = scalar_kind_byte(dims)?;
    let word = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let (rows, row_bytes) = (word(0)?, word(4)?);
    if row_bytes != dims * 4 {
        return None;
    }
    let matrix_end = rows.checked_mul(row_bytes)?.checked_add(8)?;
    let head = bytes.get(matrix_end..matrix_end.checked_add(USEARCH_HEAD)?)?;
    if !head.starts_with(b"usearch") || head[kind.at] != kind.f32 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() - rows * dims * 2);
    out.extend_from_slice(&u32::try_from(rows).ok()?.to_le_bytes());
    out.extend_from_slice(&u32::try_from(dims * 2).ok()?.to_le_bytes());
    for b in bytes[8..matrix_end].chunks_exact(4) {
        out.extend_from_slice(&f16_bits(f32::from_le_bytes([b[0], b[1], b[2], b[3]])).to_le_bytes());
    }
    let head_at = out.len();
    out.extend_from_slice(&bytes[matrix_end..]);
    out[head_at + kind.at] = kind.f16;
    Some(out)
}

/// Bytes of usearch's serialized header.
const USEARCH_HEAD: usize = 64;

/// Where usearch's header names the scalar kind, and its f32 and f16 values.
struct ScalarKindByte {
    at: usize,
    f32: u8,
    f16: u8,
}

/// Found by serializing two empty graphs that differ only in their scalar
/// kind (so a usearch that moves the field is detected, not misread).
fn scalar_kind_byte(dims: usize) -> Option<ScalarKindByte> {
    let head = |kind| -> Option<Vec<u8>> {
        let hnsw = hnsw_of(dims, kind).ok()?;
        let mut bytes = vec![0u8; hnsw.serialized_length()];
        hnsw.save_to_buffer(&mut bytes).ok()?;
        bytes.get(8..8 + USEARCH_HEAD).map(<[u8]>::to_vec)
    };
    let (f32_head, f16_head) = (head(usearch::ScalarKind::F32)?, head(usearch::ScalarKind::F16)?);
    let mut differ = (0..USEARCH_HEAD).filter(|&i| f32_head[i] != f16_head[i]);
    let at = differ.next()?;
    if differ.next().is_some() {
        return None;
    }
    Some(ScalarKindByte { at, f32: f32_head[at], f16: f16_head[at] })
}

/// IEEE 754 half-precision bits of `x`, rounded to nearest, ties to even
/// (as usearch converts when it is given f32 vectors).
fn f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x7f_ffff;
    if exponent == 0xff {
        return sign | 0x7c00 | if mantissa != 0 { 0x200 } else { 0 };
    }
    let rounded = |value: u32, shift: u32| {
        let (kept, rest, half) = (value >> shift, value & ((1 << shift) - 1), 1 << (shift - 1));
        kept + u32::from(rest > half || (rest == half && kept & 1 == 1))
    };
    let e = exponent - 127 + 15;
    if e >= 0x1f {
        sign | 0x7c00
    } else if e <= 0 {
        // Subnormal (or zero): the implicit bit joins the mantissa.
        if e < -10 {
            return sign;
        }
        sign | rounded(mantissa | 0x80_0000, (14 - e) as u32) as u16
    } else {
        // A carry out of the mantissa moves the exponent, up to infinity.
        sign | rounded(((e as u32) << 23) | mantissa, 13) as u16
    }
}

/// Reads a string written by [`put_str`].
pub(crate) fn read_str(reader: &mut &[u8]) -> Option<String> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).ok()?;
    let len = u32::from_le_bytes(len) as usize;
    if reader.len() < len {
        return None;
    }
    let (text, rest) = reader.split_at(len);
    *reader = rest;
    String::from_utf8(text.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let mut v = v.to_vec();
        crate::index::embed::normalize(&mut v);
        v
    }

    #[test]
    fn search_is_confined_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<AtomId> = (0..3).map(|_| ulid::Ulid::generate()).collect();
        {
            let index = VectorIndex::open(Some(dir.path()), "test:3", 3).unwrap();
            index.upsert(ids[0], "t", "a/r", "active", unit(&[1.0, 0.0, 0.0]), 1).unwrap();
            index.upsert(ids[1], "t", "a/other", "active", unit(&[1.0, 0.1, 0.0]), 2).unwrap();
            index.upsert(ids[2], "u", "a/r", "active", unit(&[1.0, 0.0, 0.1]), 3).unwrap();
            let hits = index.search("t", &["a/r".into()], &["active"], &unit(&[1.0, 0.0, 0.0]), 5).unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(hits[0].0, ids[0]);
            assert!((hits[0].1 - 1.0).abs() < 1e-5);
            index.set_status(ids[0], "negated", 4);
            assert!(index.search("t", &["a/r".into()], &["active"], &unit(&[1.0, 0.0, 0.0]), 5).unwrap().is_empty());
            assert!(index.upsert(ids[0], "t", "a/r", "active", vec![1.0], 5).is_err());
            index.persist().unwrap();
        }
        let reopened = VectorIndex::open(Some(dir.path()), "test:3", 3).unwrap();
        assert_eq!(reopened.applied_version(), 4);
        assert_eq!(reopened.count("t"), 2);
        let other_model = VectorIndex::open(Some(dir.path()), "other:3", 3).unwrap();
        assert_eq!(other_model.count("t"), 0);
    }

    #[test]
    fn a_graph_search_sees_only_its_tenant_repository_and_statuses() {
        let dir = tempfile::tempdir().unwrap();
        let atoms = scattered(EXACT_LIMIT + 300);
        let index = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        for (i, (id, v)) in atoms.iter().enumerate() {
            index.upsert(*id, "t", "a/r", "active", v.clone(), i as u64 + 1).unwrap();
        }
        assert!(index.read().hnsw.is_some(), "searched through the graph");
        // One class: every vector visible, searched without a filter.
        assert_eq!(top(&index, &atoms[7].1)[0], atoms[7].0);
        // Out of sight: another tenant, another repository, negated.
        let hidden = |i: usize| (1..=3).contains(&(i % 5));
        let mut version = atoms.len() as u64;
        for (i, (id, v)) in atoms.iter().enumerate() {
            version += 1;
            match i % 5 {
                1 => index.upsert(*id, "u", "a/r", "active", v.clone(), version).unwrap(),
                2 => index.upsert(*id, "t", "a/other", "active", v.clone(), version).unwrap(),
                3 => assert!(index.set_status(*id, "negated", version)),
                _ => {}
            }
        }
        let visible: std::collections::HashSet<AtomId> =
            atoms.iter().enumerate().filter(|(i, _)| !hidden(*i)).map(|(_, (id, _))| *id).collect();
        let check = |index: &VectorIndex| {
            for j in (0..atoms.len()).step_by(97) {
                let hits = top(index, &atoms[j].1);
                assert!(hits.iter().all(|id| visible.contains(id)), "query {j}: a hidden vector was returned");
                if hidden(j) {
                    assert!(!hits.contains(&atoms[j].0));
                } else {
                    assert_eq!(hits[0], atoms[j].0, "query {j}: its own vector first");
                }
            }
        };
        check(&index);
        // Each hidden class is found by the search that may see it.
        let found = |tenant: &str, repo: &str, statuses: &[&str], j: usize| {
            index.search(tenant, &[repo.into()], statuses, &atoms[j].1, 10).unwrap().first().map(|h| h.0) == Some(atoms[j].0)
        };
        assert!(found("u", "a/r", &["active"], 1));
        assert!(found("t", "a/other", &["active"], 2));
        assert!(!found("t", "a/r", &["active"], 3));
        assert!(found("t", "a/r", &["active", "negated"], 3));
        // Classes survive a save and an open.
        index.persist().unwrap();
        drop(index);
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        check(&reopened);
        assert_eq!(reopened.count("u"), (0..atoms.len()).filter(|i| i % 5 == 1).count() as u64);
        // A status set back: visible again.
        assert!(reopened.set_status(atoms[3].0, "active", version + 1));
        assert_eq!(top(&reopened, &atoms[3].1)[0], atoms[3].0);
    }

    #[test]
    fn a_search_that_may_see_few_of_the_graphs_vectors_scores_each_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let atoms = scattered(EXACT_LIMIT + 300);
        let (big, small) = atoms.split_at(EXACT_LIMIT + 250);
        let index = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        let mut version = 0;
        for (id, v) in big {
            version += 1;
            index.upsert(*id, "t", "a/r", "active", v.clone(), version).unwrap();
        }
        for (id, v) in small {
            version += 1;
            index.upsert(*id, "t", "a/small", "active", v.clone(), version).unwrap();
        }
        assert!(index.read().hnsw.is_some(), "the partition has a graph");
        assert!(scan_is_cheaper(small.len(), atoms.len()), "50 of {} are scanned", atoms.len());
        // Exactly the best of the ones it may see, in order, scored in f32.
        let expect = |members: &[(AtomId, Vec<f32>)], query: &[f32]| {
            let mut all: Vec<(AtomId, f32)> = members.iter().map(|(id, v)| (*id, dot(v, query))).collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.truncate(10);
            all
        };
        let check = |index: &VectorIndex, members: &[(AtomId, Vec<f32>)]| {
            for (_, query) in atoms.iter().step_by(211) {
                assert_eq!(index.search("t", &["a/small".into()], &["active"], query, 10).unwrap(), expect(members, query));
            }
        };
        check(&index, small);
        // A repository holding nothing finds nothing, without a walk.
        assert!(index.search("t", &["a/none".into()], &["active"], &small[0].1, 10).unwrap().is_empty());
        assert!(index.search("nobody", &["a/small".into()], &["active"], &small[0].1, 10).unwrap().is_empty());
        // Status changes, removals and moves between repositories keep each
        // class's keys right, in memory and after a save and an open.
        assert!(index.set_status(small[0].0, "negated", version + 1));
        index.remove(small[1].0, version + 2);
        index.upsert(big[0].0, "t", "a/small", "active", big[0].1.clone(), version + 3).unwrap();
        index.upsert(small[1].0, "t", "a/r", "active", small[1].1.clone(), version + 4).unwrap();
        classes_agree(&index);
        let mut members: Vec<(AtomId, Vec<f32>)> = small[2..].to_vec();
        members.push(big[0].clone());
        check(&index, &members);
        let negated = index.search("t", &["a/small".into()], &["negated"], &small[0].1, 10).unwrap();
        assert_eq!(negated.iter().map(|h| h.0).collect::<Vec<_>>(), vec![small[0].0]);
        assert!(!top(&index, &big[0].1).contains(&big[0].0), "moved out of a/r");
        index.persist().unwrap();
        drop(index);
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        classes_agree(&reopened);
        check(&reopened, &members);
        reopened.clear();
        classes_agree(&reopened);
        assert!(reopened.search("t", &["a/small".into()], &["active"], &small[2].1, 10).unwrap().is_empty());
    }

    /// Every entry's key is in its class's set, and in no other.
    fn classes_agree(index: &VectorIndex) {
        let inner = index.read();
        for (key, entry) in &inner.entries {
            assert!(inner.by_class[entry.class as usize].contains(key), "an entry missing from its class");
        }
        for (class, keys) in inner.by_class.iter().enumerate() {
            for key in keys {
                assert_eq!(inner.entries.get(key).map(|e| e.class as usize), Some(class), "a key left in a class it is not in");
            }
        }
    }

    #[test]
    fn a_search_that_may_see_most_of_the_graphs_vectors_walks_it_with_its_filter() {
        let atoms = scattered(EXACT_LIMIT + 300);
        let index = VectorIndex::open(None, "test:8", 8).unwrap();
        for (i, (id, v)) in atoms.iter().enumerate() {
            index.upsert(*id, "t", "a/r", "active", v.clone(), i as u64 + 1).unwrap();
        }
        let hidden = |i: usize| i % 50 == 7;
        for (i, (id, _)) in atoms.iter().enumerate() {
            if hidden(i) {
                assert!(index.set_status(*id, "negated", (atoms.len() + i) as u64));
            }
        }
        let seen = (0..atoms.len()).filter(|i| !hidden(*i)).count();
        assert!(!scan_is_cheaper(seen, atoms.len()), "{seen} of {} are found through the graph", atoms.len());
        let hidden_ids: std::collections::HashSet<AtomId> =
            atoms.iter().enumerate().filter(|(i, _)| hidden(*i)).map(|(_, (id, _))| *id).collect();
        for j in (0..atoms.len()).step_by(43) {
            let hits = top(&index, &atoms[j].1);
            assert_eq!(hits.len(), 10);
            assert!(hits.iter().all(|id| !hidden_ids.contains(id)), "query {j}: a negated vector was returned");
            if !hidden(j) {
                assert_eq!(hits[0], atoms[j].0, "query {j}: its own vector first");
            }
        }
    }

    #[test]
    fn a_scan_is_chosen_where_it_costs_less_than_a_filtered_walk() {
        // Every vector visible: the rule the index always had.
        assert!(scan_is_cheaper(EXACT_LIMIT, EXACT_LIMIT));
        assert!(!scan_is_cheaper(EXACT_LIMIT + 1, EXACT_LIMIT + 1));
        // Few visible in a large graph: scanned, up to the square root.
        assert!(scan_is_cheaper(20_000, 100_000));
        assert!(!scan_is_cheaper(20_300, 100_000));
        assert!(scan_is_cheaper(0, 0));
        assert!(!scan_is_cheaper(usize::MAX, 1));
    }

    /// `n` pseudo-random unit vectors of 8 dimensions, with their ids.
    fn scattered(n: usize) -> Vec<(AtomId, Vec<f32>)> {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..8)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed % 2001) as f32 / 1000.0 - 1.0
                    })
                    .collect();
                (ulid::Ulid::generate(), unit(&v))
            })
            .collect()
    }

    fn top(index: &VectorIndex, query: &[f32]) -> Vec<AtomId> {
        index.search("t", &["a/r".into()], &["active"], query, 10).unwrap().into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn the_graph_is_saved_with_its_vectors_and_rebuilt_when_it_cannot_be_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        let atoms = scattered(EXACT_LIMIT + 200);
        let queries: Vec<Vec<f32>> = scattered(5).into_iter().map(|(_, v)| v).collect();
        let (removed, graph_len, expected) = {
            let index = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
            for (version, (id, v)) in atoms.iter().enumerate() {
                index.upsert(*id, "t", "a/r", "active", v.clone(), version as u64 + 1).unwrap();
            }
            // A removed vector must not come back with the saved graph.
            let removed = top(&index, &queries[0])[0];
            index.remove(removed, atoms.len() as u64 + 1);
            index.persist().unwrap();
            let graph_len = index.read().hnsw.as_ref().map_or(0, usearch::Index::serialized_length);
            (removed, graph_len, queries.iter().map(|q| top(&index, q)).collect::<Vec<_>>())
        };
        let saved = std::fs::read(&path).unwrap();
        let loaded = load(&path, "test:8", 8).unwrap().unwrap();
        assert!(loaded.graph.is_some(), "the graph is read back, not built again");
        assert_eq!(loaded.entries.len(), atoms.len() - 1);
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        let found: Vec<Vec<AtomId>> = queries.iter().map(|q| top(&reopened, q)).collect();
        assert_eq!(found, expected);
        assert!(!found[0].contains(&removed));
        drop(reopened);

        // One flipped byte in the graph: its checksum fails, the graph is
        // built from the vectors, and search answers as before.
        let mut damaged = saved.clone();
        let at = damaged.len() - 100;
        damaged[at] ^= 0x40;
        std::fs::write(&path, &damaged).unwrap();
        assert!(load(&path, "test:8", 8).unwrap().unwrap().graph.is_none());
        let rebuilt = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        assert_eq!(rebuilt.count("t"), atoms.len() as u64 - 1);
        let found: Vec<Vec<AtomId>> = queries.iter().map(|q| top(&rebuilt, q)).collect();
        assert_eq!(found[0], expected[0]);
        // The rebuilt graph was saved at open, before any save of the
        // process's own (which a killed process never makes).
        assert!(load(&path, "test:8", 8).unwrap().unwrap().graph.is_some());
        drop(rebuilt);

        // A file of the first format (each vector after its entry, no
        // graph section) still opens with every vector.
        assert!(graph_len > 0);
        let kept: Vec<(AtomId, Vec<f32>)> = atoms.iter().filter(|(id, _)| *id != removed).cloned().collect();
        std::fs::write(&path, legacy_file(1, 8, &kept, None)).unwrap();
        let from_old = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        assert_eq!(from_old.count("t"), atoms.len() as u64 - 1);
        assert_eq!(top(&from_old, &queries[1]), expected[1]);
    }

    /// A vector file as formats 1 to 3 wrote it (each vector after its
    /// entry; from format 2 on, the graph section without alignment), of
    /// `atoms` in tenant `t`, repository `a/r`, active, at version
    /// `atoms.len()`.
    fn legacy_file(format: u32, dims: usize, atoms: &[(AtomId, Vec<f32>)], graph: Option<&usearch::Index>) -> Vec<u8> {
        let mut out = format.to_le_bytes().to_vec();
        put_str(&mut out, &format!("test:{dims}"));
        out.extend_from_slice(&(dims as u32).to_le_bytes());
        out.extend_from_slice(&(atoms.len() as u64).to_le_bytes());
        out.extend_from_slice(&(atoms.len() as u64).to_le_bytes());
        for (id, v) in atoms {
            out.extend_from_slice(&u128::from(*id).to_le_bytes());
            for field in ["t", "a/r", "active"] {
                put_str(&mut out, field);
            }
            v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        if format >= 2 {
            let mut bytes = Vec::new();
            if let Some(graph) = graph {
                bytes.resize(graph.serialized_length(), 0);
                graph.save_to_buffer(&mut bytes).unwrap();
            }
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&checksum(&bytes).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// A graph of `atoms` with vectors of `kind`.
    fn graph_of(dims: usize, kind: usearch::ScalarKind, atoms: &[(AtomId, Vec<f32>)]) -> usearch::Index {
        let graph = hnsw_of(dims, kind).unwrap();
        graph.reserve(atoms.len()).unwrap();
        for (id, v) in atoms {
            graph.add(key_of(*id), v).unwrap();
        }
        graph
    }

    /// `n` pseudo-random unit vectors of `dims` dimensions drawn around a
    /// few centres (embeddings cluster by topic), with their ids.
    fn clustered(n: usize, dims: usize, seed: u64) -> Vec<(AtomId, Vec<f32>)> {
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 20_001) as f32 / 10_000.0 - 1.0
        };
        let centres: Vec<Vec<f32>> = (0..16).map(|_| (0..dims).map(|_| next()).collect()).collect();
        (0..n)
            .map(|i| {
                let v: Vec<f32> = centres[i % centres.len()].iter().map(|c| c + 0.8 * next()).collect();
                (ulid::Ulid::generate(), unit(&v))
            })
            .collect()
    }

    /// An index of `atoms` (tenant "t", repository "a/r"), upserted one at a
    /// time, a version each.
    fn one_at_a_time(atoms: &[(AtomId, Vec<f32>)], dims: usize) -> VectorIndex {
        let index = VectorIndex::open(None, &format!("test:{dims}"), dims).unwrap();
        for (version, (id, v)) in atoms.iter().enumerate() {
            index.upsert(*id, "t", "a/r", "active", v.clone(), version as u64 + 1).unwrap();
        }
        index
    }

    #[test]
    fn the_f16_graph_finds_what_an_f32_graph_finds_with_exact_scores() {
        let dims = 384;
        let atoms = clustered(EXACT_LIMIT + 1_000, dims, 7);
        let index = one_at_a_time(&atoms, dims);
        let f32_graph = graph_of(dims, usearch::ScalarKind::F32, &atoms);
        assert!(index.read().hnsw.is_some(), "a partition this large is searched on the graph");
        let vectors: HashMap<AtomId, &Vec<f32>> = atoms.iter().map(|(id, v)| (*id, v)).collect();
        let by_key: HashMap<u64, AtomId> = atoms.iter().map(|(id, _)| (key_of(*id), *id)).collect();
        let (mut f16_found, mut f32_found, mut asked) = (0, 0, 0);
        for (_, query) in clustered(50, dims, 99) {
            let hits = index.search("t", &["a/r".into()], &["active"], &query, 100).unwrap();
            assert_eq!(hits.len(), 100);
            // Scores are the f32 cosines, best first.
            for (id, score) in &hits {
                assert!((score - dot(vectors[id], &query)).abs() < 1e-6);
            }
            assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
            let mut exact: Vec<(AtomId, f32)> = atoms.iter().map(|(id, v)| (*id, dot(v, &query))).collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            let f16: std::collections::HashSet<AtomId> = hits.iter().map(|(id, _)| *id).collect();
            let f32: std::collections::HashSet<AtomId> = f32_graph.search(&query, 100).unwrap().keys.iter().map(|k| by_key[k]).collect();
            f16_found += exact[..10].iter().filter(|(id, _)| f16.contains(id)).count();
            f32_found += exact[..10].iter().filter(|(id, _)| f32.contains(id)).count();
            asked += 10;
        }
        // The true ten best among the hundred returned: as often as with
        // f32 vectors, within what two builds of the same graph differ by
        // (insertion levels are random; this data is harder for a graph
        // than embeddings are).
        assert!(f16_found + asked / 20 >= f32_found, "f16 {f16_found}, f32 {f32_found} of {asked}");
        assert!(f16_found as f32 / asked as f32 >= 0.8, "f16 {f16_found} of {asked}");
    }

    #[test]
    fn batched_upserts_build_the_graph_that_one_at_a_time_builds() {
        let dims = 384;
        let atoms = clustered(EXACT_LIMIT + 1_000, dims, 11);
        let one = one_at_a_time(&atoms, dims);
        // As an import does: groups of 64, the graph made mid-group when the
        // partition outgrows exact scans, then filled 64 at a time.
        let batched = VectorIndex::open(None, "test:384", dims).unwrap();
        for (group, chunk) in atoms.chunks(64).enumerate() {
            let upserts = chunk
                .iter()
                .map(|(id, v)| VectorUpsert {
                    atom_id: *id,
                    tenant: "t".into(),
                    repo_key: "a/r".into(),
                    status: "active".into(),
                    vector: v.clone(),
                    version: group as u64 + 1,
                })
                .collect();
            batched.upsert_many(upserts).unwrap();
        }
        {
            let inner = batched.read();
            let graph = inner.hnsw.as_ref().expect("a partition this large has a graph");
            assert_eq!(graph.size(), atoms.len());
            assert!(atoms.iter().all(|(id, _)| graph.contains(key_of(*id))), "every vector is in the graph");
            assert_eq!(inner.applied_version, atoms.len().div_ceil(64) as u64);
        }
        classes_agree(&batched);
        let (mut batched_found, mut one_found, mut asked) = (0, 0, 0);
        for (_, query) in clustered(50, dims, 98) {
            let mut exact: Vec<(AtomId, f32)> = atoms.iter().map(|(id, v)| (*id, dot(v, &query))).collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            let found = |index: &VectorIndex| {
                let hits: std::collections::HashSet<AtomId> =
                    index.search("t", &["a/r".into()], &["active"], &query, 100).unwrap().into_iter().map(|(id, _)| id).collect();
                exact[..10].iter().filter(|(id, _)| hits.contains(id)).count()
            };
            batched_found += found(&batched);
            one_found += found(&one);
            asked += 10;
        }
        // The bar two builds of one graph meet (see the f16 test above).
        assert!(batched_found + asked / 20 >= one_found, "batched {batched_found}, one at a time {one_found} of {asked}");
        assert!(batched_found as f32 / asked as f32 >= 0.8, "batched {batched_found} of {asked}");
    }

    #[test]
    fn a_batch_keeps_an_atoms_last_vector_and_a_wrong_size_changes_nothing() {
        let index = VectorIndex::open(None, "test:3", 3).unwrap();
        let id = ulid::Ulid::generate();
        let other = ulid::Ulid::generate();
        let upsert = |atom_id, repo_key: &str, vector: Vec<f32>, version| VectorUpsert {
            atom_id,
            tenant: "t".into(),
            repo_key: repo_key.into(),
            status: "active".into(),
            vector,
            version,
        };
        index.upsert_many(vec![upsert(id, "a/r", unit(&[1.0, 0.0, 0.0]), 1), upsert(id, "a/other", unit(&[0.0, 1.0, 0.0]), 2)]).unwrap();
        assert_eq!(index.count("t"), 1);
        assert_eq!(index.vector_of(id, "t"), Some(unit(&[0.0, 1.0, 0.0])));
        assert_eq!(index.search("t", &["a/other".into()], &["active"], &unit(&[0.0, 1.0, 0.0]), 5).unwrap().len(), 1);
        assert!(index.search("t", &["a/r".into()], &["active"], &unit(&[1.0, 0.0, 0.0]), 5).unwrap().is_empty());
        let wrong = index.upsert_many(vec![upsert(other, "a/r", unit(&[1.0, 0.0, 0.0]), 3), upsert(id, "a/r", vec![1.0], 4)]);
        assert!(matches!(wrong, Err(VectorError::Dimensions { expected: 3, got: 1 })));
        assert!(!index.contains(other), "a batch with a wrong-sized vector writes none of its vectors");
        assert_eq!(index.applied_version(), 2);
        classes_agree(&index);
    }

    #[test]
    fn a_graph_saved_with_f32_vectors_is_kept_with_its_vectors_in_f16() {
        let dims = 8;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        let atoms = scattered(EXACT_LIMIT + 50);
        let queries: Vec<Vec<f32>> = scattered(5).into_iter().map(|(_, v)| v).collect();
        std::fs::write(&path, legacy_file(2, dims, &atoms, Some(&graph_of(dims, usearch::ScalarKind::F32, &atoms)))).unwrap();
        let converted = {
            let loaded = load(&path, "test:8", dims).unwrap().unwrap();
            assert!(loaded.upgraded);
            loaded.graph.expect("the f32 graph is converted, not built again")
        };
        assert_eq!(converted.scalar_kind(), usearch::ScalarKind::F16);
        // Its vectors are what usearch itself makes of the f32 ones.
        let native = graph_of(dims, usearch::ScalarKind::F16, &atoms);
        for (id, _) in &atoms {
            let (mut ours, mut theirs) = (vec![0i16; dims], vec![0i16; dims]);
            converted.get(key_of(*id), usearch::f16::from_mut_i16s(&mut ours)).unwrap();
            native.get(key_of(*id), usearch::f16::from_mut_i16s(&mut theirs)).unwrap();
            assert_eq!(ours, theirs);
        }
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", dims).unwrap();
        let mut exact_hits = 0;
        for query in &queries {
            let found = reopened.search("t", &["a/r".into()], &["active"], query, 10).unwrap();
            let mut exact: Vec<(AtomId, f32)> = atoms.iter().map(|(id, v)| (*id, dot(v, query))).collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            exact_hits += found.iter().filter(|(id, _)| exact[..10].iter().any(|(e, _)| e == id)).count();
        }
        assert!(exact_hits >= 45, "{exact_hits} of 50 true neighbours");
        // The next save writes the current format, whose graph loads as is.
        reopened.persist().unwrap();
        let saved = std::fs::read(&path).unwrap();
        assert_eq!(saved[..4], FORMAT.to_le_bytes());
        let again = load(&path, "test:8", dims).unwrap().unwrap();
        assert!(!again.upgraded);
        assert_eq!(again.graph.unwrap().scalar_kind(), usearch::ScalarKind::F16);
    }

    #[test]
    fn a_graph_that_cannot_be_converted_is_built_again_and_saved_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        let atoms = scattered(EXACT_LIMIT + 50);
        let query = scattered(1).pop().unwrap().1;
        let expected = {
            let index = VectorIndex::open(None, "test:8", 8).unwrap();
            for (version, (id, v)) in atoms.iter().enumerate() {
                index.upsert(*id, "t", "a/r", "active", v.clone(), version as u64 + 1).unwrap();
            }
            top(&index, &query)
        };
        // An f16 graph labelled format 2: not f32 vectors, so not converted.
        std::fs::write(&path, legacy_file(2, 8, &atoms, Some(&graph_of(8, usearch::ScalarKind::F16, &atoms)))).unwrap();
        let loaded = load(&path, "test:8", 8).unwrap().unwrap();
        assert!(loaded.graph.is_none(), "a graph of unexpected layout is not loaded");
        assert_eq!(loaded.entries.len(), atoms.len());
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        assert!(reopened.read().hnsw.is_some(), "built again from the vectors");
        assert_eq!(top(&reopened, &query), expected);
        // Saved in the current format by the open itself.
        let saved = std::fs::read(&path).unwrap();
        assert_eq!(saved[..4], FORMAT.to_le_bytes());
        assert!(load(&path, "test:8", 8).unwrap().unwrap().graph.is_some());
    }

    #[test]
    fn f16_conversion_rounds_to_nearest_even() {
        for (x, bits) in [
            (0.0f32, 0x0000u16),
            (-0.0, 0x8000),
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (1.0 / 3.0, 0x3555),
            (65504.0, 0x7bff),
            (65520.0, 0x7c00),
            (1e9, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
            (6.103_515_6e-5, 0x0400),
            (5.960_464_5e-8, 0x0001),
            (1e-7, 0x0002),
            (2e-8, 0x0000),
            // 1 + 2^-11 lies halfway between 1 and the next half: even wins.
            (1.000_488_3, 0x3c00),
            (1.001_464_8, 0x3c02),
        ] {
            assert_eq!(f16_bits(x), bits, "{x}");
        }
        assert_eq!(f16_bits(f32::NAN) & 0x7c00, 0x7c00);
        assert_ne!(f16_bits(f32::NAN) & 0x03ff, 0);
    }

    #[test]
    fn removed_slots_are_reused_and_every_vector_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let atoms = scattered(50);
        let index = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        for (version, (id, v)) in atoms.iter().enumerate() {
            index.upsert(*id, "t", "a/r", "active", v.clone(), version as u64 + 1).unwrap();
        }
        let floats = index.read().vectors.slots();
        // Ten removed, ten new: the arena does not grow.
        for (id, _) in &atoms[..10] {
            index.remove(*id, 60);
        }
        let newcomers = scattered(10);
        for (id, v) in &newcomers {
            index.upsert(*id, "t", "a/r", "active", v.clone(), 61).unwrap();
        }
        assert_eq!(index.read().vectors.slots(), floats, "freed slots reused");
        // Replacing a vector rewrites its slot; moving an atom to another
        // tenant takes it out of the first one's partition.
        let (moved, replaced) = (atoms[20].0, atoms[21].0);
        index.upsert(replaced, "t", "a/r", "active", atoms[30].1.clone(), 62).unwrap();
        index.upsert(moved, "u", "a/r", "active", atoms[20].1.clone(), 63).unwrap();
        assert_eq!(index.read().vectors.slots(), floats);
        assert_eq!((index.count("t"), index.count("u")), (49, 1));
        assert_eq!(index.vector_of(moved, "t"), None);
        let expect = |index: &VectorIndex| {
            for (id, v) in atoms[10..].iter().chain(&newcomers) {
                let want = if *id == replaced { &atoms[30].1 } else { v };
                let tenant = if *id == moved { "u" } else { "t" };
                assert_eq!(index.vector_of(*id, tenant).as_ref(), Some(want), "{id}");
            }
            for (id, _) in &atoms[..10] {
                assert!(!index.contains(*id));
            }
            // Exact scan: each vector finds itself first.
            for (id, v) in newcomers.iter().chain(&atoms[40..]) {
                assert_eq!(top(index, v)[0], *id);
            }
        };
        expect(&index);
        index.persist().unwrap();
        drop(index);
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        assert_eq!(reopened.read().vectors.slots(), 50, "written compactly");
        expect(&reopened);
    }

    #[test]
    fn saved_vectors_are_mapped_and_changed_in_memory_only_until_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        let atoms = scattered(40);
        // Written by format 3 (vectors after their entries): read, then
        // saved in the current format.
        std::fs::write(&path, legacy_file(3, 8, &atoms, None)).unwrap();
        {
            let index = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
            assert_eq!(index.read().vectors.mapped_slots, 0, "an older file is read");
            assert!(atoms.iter().all(|(id, v)| index.vector_of(*id, "t").as_ref() == Some(v)));
            index.persist().unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap()[..4], FORMAT.to_le_bytes());
        let on_disk = std::fs::read(&path).unwrap();
        let index = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        assert_eq!(index.read().vectors.mapped_slots, atoms.len(), "every saved vector is mapped");
        assert!(index.read().vectors.floats.is_empty());
        for (id, v) in &atoms {
            assert_eq!(index.vector_of(*id, "t").as_ref(), Some(v));
            assert_eq!(top(&index, v)[0], *id);
        }
        // Changes: a mapped slot replaced, one freed and reused, and more
        // vectors than the map holds.
        let newcomers = scattered(15);
        index.upsert(atoms[0].0, "t", "a/r", "active", atoms[1].1.clone(), 50).unwrap();
        index.remove(atoms[2].0, 51);
        for (id, v) in &newcomers {
            index.upsert(*id, "t", "a/r", "active", v.clone(), 52).unwrap();
        }
        assert_eq!(index.read().vectors.slots(), atoms.len() + newcomers.len() - 1);
        let expect = |index: &VectorIndex| {
            assert_eq!(index.vector_of(atoms[0].0, "t").as_ref(), Some(&atoms[1].1));
            assert!(!index.contains(atoms[2].0));
            for (id, v) in atoms[3..].iter().chain(&newcomers) {
                assert_eq!(index.vector_of(*id, "t").as_ref(), Some(v));
            }
        };
        expect(&index);
        assert_eq!(std::fs::read(&path).unwrap(), on_disk, "a mapped vector changes in memory only");
        index.persist().unwrap();
        expect(&index);
        // Served from the new file: the replaced one is not held open.
        assert_eq!(index.read().vectors.mapped_slots, atoms.len() + newcomers.len() - 1);
        assert!(index.read().vectors.floats.is_empty() && index.read().vectors.free.is_empty());
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let dir_name = dir.path().to_string_lossy().into_owned();
        assert!(!maps.lines().any(|l| l.contains(&dir_name) && l.contains("(deleted)")), "a replaced vector file is still mapped");
        // Changes after the save, then another save.
        index.remove(atoms[3].0, 53);
        index.upsert(atoms[4].0, "t", "a/r", "active", atoms[5].1.clone(), 54).unwrap();
        index.persist().unwrap();
        assert_eq!(index.vector_of(atoms[4].0, "t").as_ref(), Some(&atoms[5].1));
        assert!(!index.contains(atoms[3].0));
        index.upsert(atoms[4].0, "t", "a/r", "active", atoms[4].1.clone(), 55).unwrap();
        index.upsert(atoms[3].0, "t", "a/r", "active", atoms[3].1.clone(), 56).unwrap();
        index.persist().unwrap();
        expect(&index);
        drop(index);
        let reopened = VectorIndex::open(Some(dir.path()), "test:8", 8).unwrap();
        assert_eq!(reopened.read().vectors.mapped_slots, atoms.len() + newcomers.len() - 1);
        expect(&reopened);
    }

    #[test]
    fn a_version_without_vector_changes_moves_the_file_version_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.bin");
        let id = ulid::Ulid::generate();
        let index = VectorIndex::open(Some(dir.path()), "test:3", 3).unwrap();
        index.upsert(id, "t", "a/r", "active", unit(&[1.0, 0.0, 0.0]), 1).unwrap();
        index.persist().unwrap();
        let before = std::fs::read(&path).unwrap();
        // Version 3 is not next: 2 may have changed vectors; it stays at 1.
        index.skip(3);
        assert_eq!(index.applied_version(), 1);
        index.skip(2);
        index.skip(3);
        assert_eq!(index.applied_version(), 3);
        index.persist().unwrap();
        let after = std::fs::read(&path).unwrap();
        assert_eq!(before.len(), after.len());
        let differing: Vec<usize> = before.iter().zip(&after).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
        assert!(differing.iter().all(|i| (12 + "test:3".len()..20 + "test:3".len()).contains(i)), "{differing:?}");
        assert_eq!(VectorIndex::open(Some(dir.path()), "test:3", 3).unwrap().applied_version(), 3);
        // A status change is a change: the file is written whole.
        index.set_status(id, "negated", 4);
        index.persist().unwrap();
        let reopened = VectorIndex::open(Some(dir.path()), "test:3", 3).unwrap();
        assert!(reopened.search("t", &["a/r".into()], &["active"], &unit(&[1.0, 0.0, 0.0]), 5).unwrap().is_empty());
    }
}
