//! The embedded backend: Oxigraph on disk (RocksDB) or in memory, owned by
//! this process.
//!
//! **Invariants**
//! - One process opens a store directory (RocksDB's lock); within it the
//!   [`super::Store`] writer lock serializes transactions, so a guard always
//!   holds and [`Backend::commit`] is one Oxigraph transaction.
//! - Tombstoned content is destroyed, not hidden: Oxigraph never deletes
//!   strings from its dictionary, so a tombstone is followed by a *vacuum*
//!   that rebuilds the store from its live quads into a fresh directory and
//!   switches to it atomically (see [`Embedded::vacuum`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use oxigraph::model::{GraphName, GraphNameRef, NamedNode, NamedNodeRef, NamedOrBlankNode, Quad, Term};
use oxigraph::sparql::{QueryResults, QuerySolution, SparqlEvaluator, Variable};
use oxigraph::store::StorageError;

use super::backend::{Backend, ChangeSet, Committed, Guard};
use super::{NamedQuery, Result, StoreError, layout};

/// Oxigraph owned by this process.
pub(crate) struct Embedded {
    /// Current Oxigraph handle. Swapped only by a vacuum.
    inner: RwLock<oxigraph::store::Store>,
    /// Root directory (`None` in memory).
    root: Option<PathBuf>,
    /// Held by commits, vacuums, checkpoints and explicit flushes: none of
    /// them overlaps, and none of the last three overlaps a flush in
    /// flight either ([`Embedded::settle`] under it; see
    /// [`Embedded::written`] for why two flushes must never race).
    exclusive: Mutex<()>,
    /// The newest read-only checkpoint ([`Embedded::read_snapshot`]).
    snapshot: Mutex<Option<Arc<ReadSnapshot>>>,
    /// Quads written since RocksDB's memtables were last flushed (shared
    /// with a flush in flight, which gives its quads back if it fails).
    unflushed: Arc<std::sync::atomic::AtomicUsize>,
    /// The memtable flush in flight, if any ([`Embedded::written`]). Joined
    /// before a vacuum replaces the handle and when the store is dropped,
    /// so no RocksDB handle outlives this one.
    flushing: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Every quad of recently described subjects ([`DescribeCache`]).
    described: Mutex<DescribeCache>,
}

/// Subjects described (all their quads in one graph) kept between reads:
/// recall hydrates up to 30 atoms per query, and Oxigraph decodes every
/// term of every quad with a RocksDB read of its string (two thirds of a
/// recall's time at 2k atoms without embedding, under perf). A commit
/// applies its removals and insertions to the subjects kept and moves
/// `generation` on, so a read that raced a commit is not kept; this
/// process is the store's only writer (RocksDB's lock), so nothing else
/// can change it.
#[derive(Default)]
struct DescribeCache {
    generation: u64,
    entries: std::collections::HashMap<(NamedNode, GraphName), Arc<Vec<Quad>>>,
    /// The keys of `entries`, oldest first, for eviction.
    order: std::collections::VecDeque<(NamedNode, GraphName)>,
}

/// A subject's quads in one order whether they come from the cache or the
/// store (Oxigraph's order follows its term hashes, which a cache updated
/// in place cannot keep): by predicate, then object.
fn canonical_order(quads: &mut [Quad]) {
    quads.sort_by(order);
}

/// The order of [`canonical_order`]. Objects are spelled out only for a
/// predicate with several values.
fn order(a: &Quad, b: &Quad) -> std::cmp::Ordering {
    a.predicate.as_str().cmp(b.predicate.as_str()).then_with(|| a.object.to_string().cmp(&b.object.to_string()))
}

/// Least subjects a [`Backend::describe_many`] splits across two threads.
const PARALLEL_SUBJECTS: usize = 8;

/// Subjects kept in the [`DescribeCache`] (an atom is ~20–30 quads: a few
/// tens of megabytes at most).
const DESCRIBED_SUBJECTS: usize = 4096;

impl DescribeCache {
    fn keep(&mut self, generation: u64, key: (NamedNode, GraphName), quads: &[Quad]) {
        if generation != self.generation || self.entries.contains_key(&key) {
            return;
        }
        if self.entries.len() >= DESCRIBED_SUBJECTS
            && let Some(oldest) = self.order.pop_front()
        {
            self.entries.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.entries.insert(key, Arc::new(quads.to_vec()));
    }

    /// Applies a committed change to the subjects kept: their quads stay
    /// exactly the store's (recall usage is written to the atoms a recall
    /// just read; dropping them would empty the cache at every usage flush).
    fn apply<'a>(&mut self, removed: impl Iterator<Item = &'a Quad>, inserted: impl Iterator<Item = &'a Quad>) {
        self.generation += 1;
        let key = |quad: &Quad| match &quad.subject {
            NamedOrBlankNode::NamedNode(subject) => Some((subject.clone(), quad.graph_name.clone())),
            NamedOrBlankNode::BlankNode(_) => None,
        };
        for quad in removed {
            if let Some(quads) = key(quad).and_then(|k| self.entries.get_mut(&k)) {
                Arc::make_mut(quads).retain(|q| q != quad);
            }
        }
        for quad in inserted {
            if let Some(quads) = key(quad).and_then(|k| self.entries.get_mut(&k))
                && !quads.contains(quad)
            {
                // In place, in order: a batch of recall usage inserts two
                // quads into each of 256 subjects, and sorting a subject
                // again for each (objects spelled out to compare) held
                // this lock 2–6 ms, which recall's reads wait on.
                let quads = Arc::make_mut(quads);
                let at = quads.partition_point(|q| order(q, quad) == std::cmp::Ordering::Less);
                quads.insert(at, quad.clone());
            }
        }
    }

    fn clear(&mut self) {
        self.generation += 1;
        self.entries.clear();
        self.order.clear();
    }
}

/// Quads written between two memtable flushes. Oxigraph gives RocksDB a
/// 512 MB memtable budget per column family group and does not let it be
/// changed; with nine index column families an open store grew to 2.5 GB
/// of heap at 100k atoms, almost all of it unflushed memtables (heaptrack:
/// `rocksdb::Arena::AllocateNewBlock` under `Transaction::commit`).
/// Flushing every this many quads keeps them to tens of megabytes; the
/// flush writes what RocksDB would have written later anyway. It runs on a
/// thread of its own: waited for in the commit, it held that write 170 ms
/// (REST add, 40,000 quads), and commits go on into a fresh memtable while
/// RocksDB writes the full ones out.
const FLUSH_EVERY_QUADS: usize = 40_000;

/// RocksDB's own info logs kept beside the store. Each open starts a new
/// one and renames the last to `LOG.old.<microseconds>`, and RocksDB keeps
/// 1,000 of them (Oxigraph does not let `keep_log_file_num` be set): a hook
/// running `hmg recall` at every prompt filled the store directory with a
/// thousand files, which every open lists (a cold recall 5 ms slower).
const KEPT_INFO_LOGS: usize = 10;

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded").field("root", &self.root).finish_non_exhaustive()
    }
}

/// A read-only checkpoint of the store in its own directory, removed when
/// dropped.
#[derive(Debug)]
pub struct ReadSnapshot {
    dir: PathBuf,
    version: u64,
}

impl ReadSnapshot {
    /// Its directory (an Oxigraph store).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ReadSnapshot {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), %error, "could not remove a read snapshot");
        }
    }
}

impl Embedded {
    /// Opens (creating if needed) the store under `root`.
    pub(crate) fn open(root: &Path) -> Result<Embedded> {
        let oxigraph_dir = layout::prepare(root)?;
        let inner = oxigraph::store::Store::open(&oxigraph_dir).map_err(|source| {
            if source.to_string().to_lowercase().contains("lock") {
                StoreError::Locked { path: root.to_path_buf(), source }
            } else {
                StoreError::Storage(source)
            }
        })?;
        // Writes replayed from the log at open sit in memtables too.
        inner.flush()?;
        prune_info_logs(&oxigraph_dir);
        Ok(Embedded::from_handle(inner, Some(root.to_path_buf())))
    }

    /// A store in memory.
    pub(crate) fn in_memory() -> Result<Embedded> {
        Ok(Embedded::from_handle(oxigraph::store::Store::new()?, None))
    }

    /// Opens a checkpoint read-only.
    pub(crate) fn open_read_only(dir: &Path) -> Result<Embedded> {
        Ok(Embedded::from_handle(oxigraph::store::Store::open_read_only(dir)?, None))
    }

    fn from_handle(inner: oxigraph::store::Store, root: Option<PathBuf>) -> Embedded {
        Embedded {
            inner: RwLock::new(inner),
            root,
            exclusive: Mutex::new(()),
            snapshot: Mutex::new(None),
            unflushed: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            flushing: Mutex::new(None),
            described: Mutex::new(DescribeCache::default()),
        }
    }

    fn described(&self) -> std::sync::MutexGuard<'_, DescribeCache> {
        self.described.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts `quads` just committed; once [`FLUSH_EVERY_QUADS`] have
    /// gathered, starts a flush of the memtables on its own thread (on disk
    /// only: a store in memory keeps everything in memory anyway), unless
    /// one is still running. The caller holds `exclusive`. A failed flush
    /// is logged, not returned: the commit is durable in RocksDB's log, and
    /// the quads count again, so the next commit tries again.
    ///
    /// Only one RocksDB flush runs at a time: oxigraph's memtables merge
    /// two at a time (`min_write_buffer_number_to_merge` = 2, set by its
    /// level-style tuning), and with that setting a manual flush that races
    /// another over the same column families can wait forever for a
    /// memtable no flush will pick (facebook/rocksdb#12094, still open in
    /// RocksDB 11). A CI run hung for its last 40 minutes in a test that
    /// starts this flush 35 ms before its explicit `flush`. So a flush is
    /// started here only when none is running, and every other flush (an
    /// explicit one, a checkpoint's) holds `exclusive`, which keeps this
    /// from starting one, and waits for the one in flight first.
    fn written(&self, store: &oxigraph::store::Store, quads: usize) {
        use std::sync::atomic::Ordering;
        if self.root.is_none() {
            return;
        }
        let total = self.unflushed.fetch_add(quads, Ordering::Relaxed) + quads;
        if total < FLUSH_EVERY_QUADS {
            return;
        }
        let mut flushing = self.flushing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if flushing.as_ref().is_some_and(|running| !running.is_finished()) {
            return;
        }
        if let Some(done) = flushing.take() {
            joined(done);
        }
        self.unflushed.fetch_sub(total, Ordering::Relaxed);
        let (handle, unflushed) = (store.clone(), Arc::clone(&self.unflushed));
        match std::thread::Builder::new().name("hmg-flush".into()).spawn(move || flush_memtables(&handle, total, &unflushed)) {
            Ok(running) => *flushing = Some(running),
            // No thread to be had: flush here.
            Err(_) => flush_memtables(store, total, &self.unflushed),
        }
    }

    /// Waits for the memtable flush in flight, if any.
    fn settle(&self) {
        let running = self.flushing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(running) = running {
            joined(running);
        }
    }

    /// Whether a vacuum was owed when the last process stopped.
    pub(crate) fn vacuum_owed(&self) -> bool {
        self.root.as_deref().is_some_and(layout::vacuum_pending)
    }

    /// A clone of the current Oxigraph handle (cheap: reference counted).
    pub(crate) fn handle(&self) -> oxigraph::store::Store {
        match self.inner.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A read-only checkpoint of the store as of `version` (RocksDB hard
    /// links, cheap), for evaluating a client's query in another process.
    /// Reused while the version stays the same; its directory is removed
    /// when the last holder drops it, and every checkpoint is removed by a
    /// vacuum (they would keep destroyed content). `None` in memory.
    pub(crate) fn read_snapshot(&self, version: u64) -> Result<Option<Arc<ReadSnapshot>>> {
        let Some(root) = &self.root else { return Ok(None) };
        let mut cached = self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(snapshot) = cached.as_ref()
            && snapshot.version == version
            && snapshot.dir.exists()
        {
            return Ok(Some(Arc::clone(snapshot)));
        }
        let parent = layout::snapshots_dir(root);
        std::fs::create_dir_all(&parent).map_err(|source| StoreError::Io { path: parent.clone(), source })?;
        let dir = parent.join(format!("{version}-{}", ulid::Ulid::generate()));
        {
            let _exclusive = self.exclusive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // A checkpoint flushes the memtables: not beside another flush.
            self.settle();
            self.handle().backup(&dir)?;
        }
        let snapshot = Arc::new(ReadSnapshot { dir, version });
        *cached = Some(Arc::clone(&snapshot));
        Ok(Some(snapshot))
    }
}

/// Flushes `store`'s memtables, which hold `quads` of the count kept in
/// `unflushed`; gives them back to it if the flush fails.
fn flush_memtables(store: &oxigraph::store::Store, quads: usize, unflushed: &std::sync::atomic::AtomicUsize) {
    let _span = tracing::debug_span!("flush_memtables", quads).entered();
    let started = std::time::Instant::now();
    match store.flush() {
        Ok(()) => tracing::debug!(quads, ms = started.elapsed().as_millis() as u64, "memtables flushed"),
        Err(error) => {
            unflushed.fetch_add(quads, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(%error, "could not flush the store's memtables; retrying after the next commit");
        }
    }
}

/// Waits for a memtable flush's thread to end.
fn joined(flush: std::thread::JoinHandle<()>) {
    if flush.join().is_err() {
        tracing::warn!("a memtable flush panicked; the writes are in RocksDB's log");
    }
}

impl Drop for Embedded {
    /// A flush in flight holds a handle of its own: the directory is not
    /// free for the next open until it is done.
    fn drop(&mut self) {
        self.settle();
    }
}

impl Backend for Embedded {
    fn location(&self) -> String {
        self.root.as_ref().map_or_else(|| "(in memory)".to_owned(), |root| root.display().to_string())
    }

    fn shared(&self) -> bool {
        false
    }

    fn select(&self, query: NamedQuery, graph: Option<&NamedNode>, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>> {
        let query_error = |message: String| StoreError::Query { name: query.name(), message };
        let mut prepared = SparqlEvaluator::new().for_query(query.parsed().clone());
        if let Some(graph) = graph {
            prepared.dataset_mut().set_default_graph(vec![GraphName::NamedNode(graph.clone())]);
            prepared.dataset_mut().set_available_named_graphs(vec![NamedOrBlankNode::NamedNode(graph.clone())]);
        }
        for (name, term) in bindings {
            let variable = Variable::new(*name).map_err(|e| query_error(e.to_string()))?;
            prepared = prepared.substitute_variable(variable, term.clone());
        }
        let store = self.handle();
        match prepared.on_store(&store).execute().map_err(|e| query_error(e.to_string()))? {
            QueryResults::Solutions(solutions) => solutions.collect::<Result<Vec<_>, _>>().map_err(|e| query_error(e.to_string())),
            _ => Err(query_error("not a SELECT query".to_owned())),
        }
    }

    fn quads(
        &self,
        subject: Option<NamedNodeRef<'_>>,
        predicate: Option<NamedNodeRef<'_>>,
        object: Option<&Term>,
        graph: GraphNameRef<'_>,
    ) -> Result<Vec<Quad>> {
        // A whole subject (an atom, a scope): from the cache when it is there.
        // One predicate of a kept subject too (the cache holds exactly the
        // store's quads): a batch of recall usage reads four per atom it
        // stamps, atoms a recall has just read (9–22 ms of RocksDB reads per
        // batch of 256 atoms, the MCP tail; 1.5–2.9 ms from the cache).
        let cached = match (subject, predicate, object) {
            (Some(subject), None, None) => {
                let key = (subject.into_owned(), graph.into_owned());
                let described = self.described();
                if let Some(quads) = described.entries.get(&key) {
                    return Ok(quads.as_ref().clone());
                }
                Some((key, described.generation))
            }
            (Some(subject), Some(predicate), None) => {
                let key = (subject.into_owned(), graph.into_owned());
                if let Some(quads) = self.described().entries.get(&key) {
                    return Ok(quads.iter().filter(|q| q.predicate.as_ref() == predicate).cloned().collect());
                }
                None
            }
            _ => None,
        };
        let store = self.handle();
        let mut quads = store
            .quads_for_pattern(subject.map(Into::into), predicate, object.map(Term::as_ref), Some(graph))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some((key, generation)) = cached {
            canonical_order(&mut quads);
            self.described().keep(generation, key, &quads);
        }
        Ok(quads)
    }

    /// Several subjects read on two threads: a recall hydrates up to 30
    /// atoms, and a subject not kept in the [`DescribeCache`] costs a
    /// RocksDB read per term (about 100 µs an atom at 10k atoms).
    fn describe_many(&self, subjects: &[NamedNode], graph: GraphNameRef<'_>) -> Result<Vec<Quad>> {
        let read = |subjects: &[NamedNode]| -> Result<Vec<Quad>> {
            let mut quads = Vec::new();
            for subject in subjects {
                quads.extend(self.quads(Some(subject.as_ref()), None, None, graph)?);
            }
            Ok(quads)
        };
        if subjects.len() < PARALLEL_SUBJECTS {
            return read(subjects);
        }
        let (first, second) = subjects.split_at(subjects.len() / 2);
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new().spawn_scoped(scope, || read(second));
            let mut quads = read(first)?;
            match other {
                Ok(other) => quads.extend(other.join().map_err(|_| StoreError::Corrupt("a store read panicked".into()))??),
                // No thread to be had: read the rest here.
                Err(_) => quads.extend(read(second)?),
            }
            Ok(quads)
        })
    }

    fn graphs(&self) -> Result<Vec<NamedNode>> {
        let mut graphs = Vec::new();
        for graph in self.handle().named_graphs() {
            if let NamedOrBlankNode::NamedNode(node) = graph? {
                graphs.push(node);
            }
        }
        Ok(graphs)
    }

    fn commit(&self, changes: &ChangeSet, _guard: &Guard) -> Result<Committed> {
        // The store's writer lock is held: nobody else wrote since the
        // reads, so the guard holds by construction.
        let _exclusive = self.exclusive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let store = self.handle();
        let mut tx = store.start_transaction()?;
        for quad in &changes.removed {
            tx.remove(quad);
        }
        let mut written = changes.removed.len();
        for quad in changes.inserted() {
            tx.insert(quad);
            written += 1;
        }
        tx.commit()?;
        self.described().apply(changes.removed.iter(), changes.inserted());
        self.written(&store, written);
        Ok(Committed::Applied)
    }

    fn load(&self, quads: &[Quad]) -> Result<()> {
        let _exclusive = self.exclusive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let store = self.handle();
        let mut tx = store.start_transaction()?;
        for quad in quads {
            tx.insert(quad);
        }
        tx.commit()?;
        self.described().apply(std::iter::empty(), quads.iter());
        self.written(&store, quads.len());
        Ok(())
    }

    fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Rebuilds the store from its live quads into a fresh directory and
    /// switches to it, so that strings no quad refers to any more (the
    /// content of tombstoned atoms) are gone from disk. Crash-safe: the
    /// switch is one atomic rename of the `CURRENT` file; an interrupted
    /// vacuum is finished at the next open.
    fn vacuum(&self) -> Result<()> {
        let Some(root) = &self.root else { return Ok(()) };
        let _exclusive = self.exclusive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The old handle is closed below: no flush may still be writing it.
        self.settle();
        layout::mark_vacuum_pending(root)?;
        let old = self.handle();
        let next_dir = layout::next_generation_dir(root)?;
        {
            let next = oxigraph::store::Store::open(&next_dir)?;
            let mut loader = next.bulk_loader();
            loader.load_ok_quads::<StorageError, StorageError>(old.iter())?;
            loader.commit()?;
            next.flush()?;
        }
        let next = oxigraph::store::Store::open(&next_dir)?;
        layout::switch_current(root, &next_dir)?;
        {
            let mut guard = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            *guard = next;
        }
        self.described().clear();
        drop(old);
        layout::remove_stale_generations(root, &next_dir);
        // Checkpoints hard-link the old files, destroyed content included.
        self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        layout::remove_snapshots(root);
        layout::clear_vacuum_pending(root)?;
        Ok(())
    }

    fn mark_vacuum_pending(&self) -> Result<()> {
        match &self.root {
            Some(root) => layout::mark_vacuum_pending(root),
            None => Ok(()),
        }
    }

    /// Waits for the flush in flight (never two at once: see
    /// [`Embedded::written`]), then flushes what came after it.
    fn flush(&self) -> Result<()> {
        let _exclusive = self.exclusive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.settle();
        Ok(self.handle().flush()?)
    }

    fn as_embedded(&self) -> Option<&Embedded> {
        Some(self)
    }
}

/// Removes RocksDB's old info logs (`LOG.old.<microseconds>`) in `dir`
/// beyond the [`KEPT_INFO_LOGS`] newest. Nothing of the data is in them
/// (they hold RocksDB's warnings); a file that cannot be removed stays.
fn prune_info_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut old: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let stamp = name.to_str()?.strip_prefix("LOG.old.")?.parse::<u64>().ok()?;
            Some((stamp, entry.path()))
        })
        .collect();
    if old.len() <= KEPT_INFO_LOGS {
        return;
    }
    old.sort_unstable();
    let excess = old.len() - KEPT_INFO_LOGS;
    let removed = old.into_iter().take(excess).filter(|(_, path)| std::fs::remove_file(path).is_ok()).count();
    tracing::debug!(dir = %dir.display(), removed, "old RocksDB info logs removed");
}

#[cfg(test)]
mod tests {
    use oxigraph::model::{GraphName, Literal, NamedNode, Quad};

    use super::super::backend::{Backend, ChangeSet, Guard};
    use super::{Embedded, FLUSH_EVERY_QUADS, KEPT_INFO_LOGS};

    #[test]
    fn reopening_keeps_only_the_newest_rocksdb_info_logs_and_every_quad() {
        let dir = tempfile::tempdir().unwrap();
        let store = Embedded::open(dir.path()).unwrap();
        commit_batches(&store, 0, 1);
        drop(store);
        let data = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).find(|p| p.is_dir()).unwrap();
        let logs = |pattern: &str| {
            let mut names: Vec<String> = std::fs::read_dir(&data)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(pattern))
                .collect();
            names.sort();
            names
        };
        // A thousand left by earlier opens, older than any real one, and
        // files that only look alike.
        for i in 0..1000u64 {
            std::fs::write(data.join(format!("LOG.old.{}", 1_000_000 + i)), b"warning").unwrap();
        }
        for other in ["LOG.old.notanumber", "LOG.older.5", "notes.txt"] {
            std::fs::write(data.join(other), b"keep me").unwrap();
        }
        for round in 0..3 {
            let store = Embedded::open(dir.path()).unwrap();
            assert_eq!(store.handle().len().unwrap(), 1000, "round {round}");
            drop(store);
            let old: Vec<String> = logs("LOG.old.").into_iter().filter(|n| n[8..].parse::<u64>().is_ok()).collect();
            assert_eq!(old.len(), KEPT_INFO_LOGS, "round {round}: {old:?}");
            // The newest kept: this test's opens' own, then the last of
            // the thousand.
            let real = old.iter().filter(|n| n[8..].parse::<u64>().unwrap() > 1_000_999).count();
            assert_eq!(real, round + 1, "round {round}: {old:?}");
            assert!(
                old.iter().all(|n| n[8..].parse::<u64>().unwrap() >= 1_001_000 - (KEPT_INFO_LOGS - real) as u64),
                "the oldest go first: {old:?}"
            );
        }
        for kept in ["LOG", "LOG.old.notanumber", "LOG.older.5", "notes.txt"] {
            assert!(data.join(kept).exists(), "{kept} is not an old info log");
        }
    }

    fn sst_files(root: &std::path::Path) -> usize {
        let mut count = 0;
        for dir in std::fs::read_dir(root).unwrap().flatten().filter(|e| e.path().is_dir()) {
            count += std::fs::read_dir(dir.path()).unwrap().flatten().filter(|f| f.path().extension().is_some_and(|x| x == "sst")).count();
        }
        count
    }

    #[test]
    fn memtables_are_flushed_to_disk_as_writes_gather() {
        let dir = tempfile::tempdir().unwrap();
        let store = Embedded::open(dir.path()).unwrap();
        let before = sst_files(dir.path());
        // Commits of 1,000 quads each, past the flush threshold.
        commit_batches(&store, 0, FLUSH_EVERY_QUADS / 1000 + 1);
        assert!(store.unflushed.load(std::sync::atomic::Ordering::Relaxed) < FLUSH_EVERY_QUADS, "the counter restarts after a flush");
        store.settle();
        assert!(sst_files(dir.path()) > before, "a flush writes SST files");
        // Nothing is lost: every quad is there after a reopen.
        drop(store);
        let reopened = Embedded::open(dir.path()).unwrap();
        assert_eq!(reopened.handle().len().unwrap(), (FLUSH_EVERY_QUADS / 1000 + 1) * 1000);
    }

    /// Commits `batches` of 1,000 quads each to `store`, numbered from
    /// `first`.
    fn commit_batches(store: &Embedded, first: usize, batches: usize) {
        let predicate = NamedNode::new("urn:test:p").unwrap();
        for batch in first..first + batches {
            let mut changes = ChangeSet::default();
            for i in 0..1000 {
                let subject = NamedNode::new(format!("urn:test:s{batch}-{i}")).unwrap();
                changes.insert(Quad::new(subject, predicate.clone(), Literal::from(format!("田中さん {i}")), GraphName::DefaultGraph));
            }
            store.commit(&changes, &Guard::default()).unwrap();
        }
    }

    #[test]
    fn a_flush_in_flight_is_waited_for_by_a_vacuum_and_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let batches = FLUSH_EVERY_QUADS / 1000;
        let store = Embedded::open(dir.path()).unwrap();
        // The last commit starts a flush; the vacuum comes straight after
        // it, and commits go on meanwhile.
        commit_batches(&store, 0, batches);
        assert!(store.flushing.lock().unwrap().is_some(), "a flush was started");
        store.vacuum().unwrap();
        assert!(store.flushing.lock().unwrap().is_none(), "the vacuum waited for it");
        commit_batches(&store, batches, batches + 1);
        assert_eq!(store.handle().len().unwrap(), (2 * batches + 1) * 1000);
        // Dropped with a flush in flight: the directory opens again at
        // once, with every quad.
        assert!(store.flushing.lock().unwrap().is_some(), "a second flush was started");
        drop(store);
        let reopened = Embedded::open(dir.path()).unwrap();
        assert_eq!(reopened.handle().len().unwrap(), (2 * batches + 1) * 1000);
    }

    /// RocksDB can wait forever in a manual flush that races another one
    /// over the same column families when memtables merge two at a time
    /// (oxigraph's setting; facebook/rocksdb#12094). A commit's flush in
    /// flight, an explicit flush and a read snapshot's checkpoint (which
    /// flushes too) come from different threads here, as in a server: all
    /// of them end, and every quad is there.
    #[test]
    fn flushes_from_commits_callers_and_checkpoints_never_wait_on_each_other_forever() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Embedded::open(dir.path()).unwrap());
        let batches = FLUSH_EVERY_QUADS / 1000;
        // A commit starts a flush; an explicit flush, then a checkpoint,
        // straight after it wait for it before flushing.
        for (case, first) in [("an explicit flush", 0), ("a checkpoint", batches)] {
            commit_batches(&store, first, batches);
            assert!(store.flushing.lock().unwrap().is_some(), "{case}: a flush was started");
            if first == 0 {
                store.flush().unwrap();
            } else {
                drop(store.read_snapshot(1).unwrap());
            }
            assert!(store.flushing.lock().unwrap().is_none(), "{case} waited for the flush in flight");
        }
        // All three from their own threads, over and over.
        let written = 2 * batches;
        let rounds = 24;
        let batches = batches / 4;
        let (done, finished) = std::sync::mpsc::channel();
        let workers: Vec<_> = (0..3)
            .map(|role| {
                let (store, done) = (std::sync::Arc::clone(&store), done.clone());
                std::thread::spawn(move || {
                    for round in 0..rounds {
                        match role {
                            0 => commit_batches(&store, written + round * batches, batches),
                            1 => store.flush().unwrap(),
                            _ => drop(store.read_snapshot(round as u64).unwrap()),
                        }
                    }
                    done.send(role).unwrap();
                })
            })
            .collect();
        for _ in 0..workers.len() {
            let role = finished.recv_timeout(std::time::Duration::from_secs(120));
            assert!(role.is_ok(), "a flush has waited two minutes: RocksDB's flushes raced");
        }
        for worker in workers {
            worker.join().unwrap();
        }
        store.settle();
        assert_eq!(store.handle().len().unwrap(), (written + rounds * batches) * 1000);
    }

    /// An empty store on disk and a tenant's graph in it.
    fn store_with_tenant() -> (tempfile::TempDir, Embedded, GraphName) {
        let dir = tempfile::tempdir().unwrap();
        let store = Embedded::open(dir.path()).unwrap();
        (dir, store, GraphName::NamedNode(NamedNode::new("urn:test:tenant").unwrap()))
    }

    #[test]
    fn many_subjects_read_on_two_threads_give_each_subjects_quads_once() {
        let (_dir, store, graph) = store_with_tenant();
        let content = NamedNode::new("urn:test:content").unwrap();
        let status = NamedNode::new("urn:test:status").unwrap();
        let subjects: Vec<NamedNode> = (0..31).map(|i| NamedNode::new(format!("urn:test:atom{i}")).unwrap()).collect();
        let texts = ["Caroline moved to Lisbon", "老李的猫叫 Mochi", "田中さんは寿司が好き"];
        let mut changes = ChangeSet::default();
        // Every third subject is never written: it has no quads.
        for (i, subject) in subjects.iter().enumerate().filter(|(i, _)| i % 3 != 2) {
            changes.insert(Quad::new(subject.clone(), content.clone(), Literal::from(format!("{} {i}", texts[i % 3])), graph.clone()));
            changes.insert(Quad::new(subject.clone(), status.clone(), Literal::from("active"), graph.clone()));
        }
        store.commit(&changes, &Guard::default()).unwrap();
        // Some subjects already kept in memory, the others read from disk.
        for subject in subjects.iter().step_by(4) {
            store.quads(Some(subject.as_ref()), None, None, graph.as_ref()).unwrap();
        }
        for count in [0, 1, super::PARALLEL_SUBJECTS - 1, super::PARALLEL_SUBJECTS, subjects.len()] {
            let mut together = store.describe_many(&subjects[..count], graph.as_ref()).unwrap();
            let mut one_by_one: Vec<Quad> =
                subjects[..count].iter().flat_map(|s| store.quads(Some(s.as_ref()), None, None, graph.as_ref()).unwrap()).collect();
            assert_eq!(together.len(), 2 * (0..count).filter(|i| i % 3 != 2).count(), "{count} subjects");
            together.sort_by_key(ToString::to_string);
            one_by_one.sort_by_key(ToString::to_string);
            assert_eq!(together, one_by_one, "{count} subjects");
        }
    }

    #[test]
    fn one_predicate_of_a_kept_subject_is_read_from_memory_and_equals_the_store() {
        let (_dir, store, graph) = store_with_tenant();
        let subject = NamedNode::new("urn:test:atom").unwrap();
        let count = NamedNode::new("urn:test:recallCount").unwrap();
        let entity = NamedNode::new("urn:test:mentions").unwrap();
        let absent = NamedNode::new("urn:test:absent").unwrap();
        let quad = |p: &NamedNode, o: Literal| Quad::new(subject.clone(), p.clone(), o, graph.clone());
        let mut changes = ChangeSet::default();
        changes.insert(quad(&count, Literal::from(3_i64)));
        changes.insert(quad(&entity, Literal::from("老李")));
        changes.insert(quad(&entity, Literal::from("田中さん")));
        store.commit(&changes, &Guard::default()).unwrap();
        let from_store = |p: &NamedNode| -> Vec<Quad> {
            let mut quads: Vec<Quad> = store
                .handle()
                .quads_for_pattern(Some(subject.as_ref().into()), Some(p.as_ref()), None, Some(graph.as_ref()))
                .collect::<Result<_, _>>()
                .unwrap();
            quads.sort_by_key(ToString::to_string);
            quads
        };
        let read = |p: &NamedNode| -> Vec<Quad> {
            let mut quads = store.quads(Some(subject.as_ref()), Some(p.as_ref()), None, graph.as_ref()).unwrap();
            quads.sort_by_key(ToString::to_string);
            quads
        };
        // Not kept yet: from the store, and nothing is kept by it.
        assert_eq!(read(&count), from_store(&count));
        assert!(store.described().entries.is_empty());
        store.quads(Some(subject.as_ref()), None, None, graph.as_ref()).unwrap();
        // Kept: the same answers, several objects and none included.
        for p in [&count, &entity, &absent] {
            assert_eq!(read(p), from_store(p), "{p}");
        }
        // A commit replacing the count: the kept subject answers the new one.
        let mut changes = ChangeSet::default();
        changes.remove(quad(&count, Literal::from(3_i64)));
        changes.insert(quad(&count, Literal::from(4_i64)));
        store.commit(&changes, &Guard::default()).unwrap();
        assert_eq!(read(&count), vec![quad(&count, Literal::from(4_i64))]);
        assert_eq!(read(&count), from_store(&count));
        // Another graph's quads of the same subject are not these.
        assert!(store.quads(Some(subject.as_ref()), Some(count.as_ref()), None, GraphName::DefaultGraph.as_ref()).unwrap().is_empty());
    }

    #[test]
    fn a_described_subject_is_served_from_memory_and_kept_equal_to_the_store() {
        let (_dir, store, graph) = store_with_tenant();
        let other = GraphName::NamedNode(NamedNode::new("urn:test:other").unwrap());
        let subject = NamedNode::new("urn:test:atom").unwrap();
        let status = NamedNode::new("urn:test:status").unwrap();
        let content = NamedNode::new("urn:test:content").unwrap();
        let quad = |p: &NamedNode, o: &str, g: &GraphName| Quad::new(subject.clone(), p.clone(), Literal::from(o), g.clone());
        let describe = |g: &GraphName| store.quads(Some(subject.as_ref()), None, None, g.as_ref()).unwrap();
        let mut changes = ChangeSet::default();
        changes.insert(quad(&status, "active", &graph));
        changes.insert(quad(&content, "老李的猫叫 Mochi", &graph));
        changes.insert(quad(&content, "elsewhere", &other));
        store.commit(&changes, &Guard::default()).unwrap();
        let first = describe(&graph);
        assert_eq!(first.len(), 2, "one graph's quads only: {first:?}");
        assert_eq!(store.described().entries.len(), 1, "kept after the first read");
        assert_eq!(describe(&graph), first, "the same quads from memory");
        assert_eq!(describe(&other).len(), 1, "another graph is another entry");

        // A commit touching the subject: the next read sees it (from
        // memory: the commit applied itself to the entry).
        let mut changes = ChangeSet::default();
        changes.remove(quad(&status, "active", &graph));
        changes.insert(quad(&status, "negated", &graph));
        // Several values of one predicate, and a predicate ordered first:
        // each goes in its place.
        let mention = NamedNode::new("urn:test:mention").unwrap();
        let agent = NamedNode::new("urn:test:agent").unwrap();
        for (p, o) in [(&mention, "田中"), (&mention, "Caroline"), (&agent, "x"), (&mention, "alice")] {
            changes.insert(quad(p, o, &graph));
        }
        store.commit(&changes, &Guard::default()).unwrap();
        let second = describe(&graph);
        assert!(second.contains(&quad(&status, "negated", &graph)) && !second.contains(&quad(&status, "active", &graph)), "{second:?}");
        let mut stored: Vec<Quad> = store
            .handle()
            .quads_for_pattern(Some(subject.as_ref().into()), None, None, Some(graph.as_ref()))
            .collect::<Result<_, _>>()
            .unwrap();
        super::canonical_order(&mut stored);
        assert_eq!(second, stored, "the kept quads are the store's, in one order");
        assert_eq!(store.described().entries.len(), 2, "updated in place, not dropped");
        assert_eq!(describe(&other).len(), 1, "the other graph's entry was not the one written");

        // A read that raced a commit is not kept.
        let raced = (NamedNode::new("urn:test:raced").unwrap(), graph.clone());
        let generation = store.described().generation;
        store.described().apply(std::iter::empty(), std::iter::empty());
        store.described().keep(generation, raced.clone(), &first);
        assert!(!store.described().entries.contains_key(&raced), "a stale read was kept");

        // Loads update too, vacuums start afresh; the cache stays bounded.
        store.load(&[quad(&content, "loaded", &graph)]).unwrap();
        assert_eq!(describe(&graph).len(), 7);
        store.vacuum().unwrap();
        assert!(store.described().entries.is_empty());
        assert_eq!(describe(&graph).len(), 7);
        for i in 0..super::DESCRIBED_SUBJECTS + 10 {
            let s = NamedNode::new(format!("urn:test:s{i}")).unwrap();
            store.quads(Some(s.as_ref()), None, None, graph.as_ref()).unwrap();
        }
        let described = store.described();
        assert!(described.entries.len() <= super::DESCRIBED_SUBJECTS);
        assert_eq!(described.order.len(), described.entries.len(), "every key kept once in the eviction order");
    }
}
