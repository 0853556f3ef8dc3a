//! The store: the RDF store that holds the truth, behind one
//! [`backend::Backend`] boundary with two implementations: the embedded
//! Oxigraph store on disk (the default, [`embedded`]) and a remote SPARQL 1.1
//! store shared by many HMG nodes ([`remote`]).
//!
//! **Architecture invariants**
//! - Each tenant's triples live in its own named graph (`urn:hmg:tenant:<name>`);
//!   every query this module runs is confined to one tenant graph *before*
//!   evaluation, by setting the query dataset, not by filtering results.
//! - One writer at a time per process: [`Store::write`] holds a mutex for the
//!   whole transaction; every committed write increments `snapshot_version`
//!   in the same commit as its change and audit entry. A transaction is a
//!   [`backend::ChangeSet`] (reads inside it see its own writes) committed
//!   under a [`backend::Guard`]: the version and audit heads it read. On a
//!   shared store another node may commit first; the transaction then runs
//!   again on fresh reads, a bounded number of times.
//! - Tombstoned content is destroyed, not hidden (embedded: vacuum; remote:
//!   every quad deleted, the operator purges the store's own logs).
//!
//! **API boundary:** the rest of the crate sees IRIs, terms and query
//! solutions, never RocksDB or HTTP.

pub(crate) mod audit;
pub(crate) mod backend;
pub(crate) mod catalog;
pub(crate) mod codec;
pub(crate) mod embedded;
mod layout;
pub(crate) mod queries;
pub(crate) mod remote;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use oxigraph::model::{GraphNameRef, Literal, NamedNode, NamedNodeRef, Quad, QuadRef, Term};
use oxigraph::sparql::QuerySolution;
use oxigraph::store::StorageError;

use crate::atom::AtomId;
use crate::vocab::{STORE_NODE, SYSTEM_GRAPH, hmg};
use backend::{Backend, ChangeSet, Committed, Guard};

pub(crate) use audit::parse_datetime;
pub(crate) use embedded::ReadSnapshot;
pub(crate) use queries::NamedQuery;
pub use remote::RemoteConfig;

/// On-disk format version written in the system graph.
pub(crate) const FORMAT_VERSION: i64 = 1;

/// How many times a transaction runs when other nodes keep committing first.
/// Eight writers on two nodes over Virtuoso lost 12 attempts in a row
/// for about 7% of their writes; 30, with a longer pause, for none seen.
const WRITE_ATTEMPTS: u32 = 30;

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// RocksDB or Oxigraph storage failure.
    #[error("storage error: {0}")]
    Storage(#[from] StorageError),
    /// Another process holds the store open.
    #[error("the store at {path} is in use by another process (only one hmg process can open a store at a time): {source}")]
    Locked {
        /// Store directory.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: StorageError,
    },
    /// Another process on this machine serves this node's directory.
    #[error("the node directory {} is in use by another hmg process", path.display())]
    NodeLocked {
        /// The lock file.
        path: PathBuf,
    },
    /// A query file or evaluation failed.
    #[error("query {name} failed: {message}")]
    Query {
        /// Query name.
        name: &'static str,
        /// What went wrong.
        message: String,
    },
    /// File system trouble around the store directory.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// Path involved.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Data that does not follow the vocabulary's rules.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The remote store is unreachable, refused us, or answered something
    /// that is not SPARQL results.
    #[error("the SPARQL store at {endpoint} {message}")]
    Remote {
        /// The endpoint URL.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
    /// The remote store cut an answer at its result cap (Virtuoso's
    /// `ResultSetMaxRows`, named only in a header): the answer is
    /// incomplete, and HMG never takes part of a tenant for the whole.
    #[error(
        "the SPARQL store at {endpoint} cut its answer at {cap} rows, its result cap (Virtuoso: ResultSetMaxRows in \
         virtuoso.ini), so the answer is incomplete; raise the cap above the number of quads in the largest tenant"
    )]
    Cut {
        /// The endpoint URL.
        endpoint: String,
        /// The cap the store named.
        cap: u64,
    },
    /// Other nodes kept committing first.
    #[error("the write lost the race against other writers {attempts} times in a row; nothing was written, retry")]
    Contended {
        /// Attempts made.
        attempts: u32,
    },
    /// Bad configuration of the store backend.
    #[error("store configuration: {0}")]
    Config(String),
}

impl crate::fault::Classified for StoreError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            StoreError::Locked { .. }
            | StoreError::NodeLocked { .. }
            | StoreError::Remote { .. }
            | StoreError::Cut { .. }
            | StoreError::Contended { .. } => crate::fault::Fault::Unavailable,
            StoreError::Config(_) => crate::fault::Fault::Invalid,
            StoreError::Storage(_) | StoreError::Query { .. } | StoreError::Io { .. } | StoreError::Corrupt(_) => {
                crate::fault::Fault::Internal
            }
        }
    }
}

/// Result alias of this layer.
pub(crate) type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The HMG store.
pub struct Store {
    backend: Box<dyn Backend>,
    /// Serializes this process's writers and caches what only they change
    /// (for a store no other process writes).
    writer: Mutex<WriterState>,
    /// Each tenant's atoms and their scopes, between writes.
    catalog: catalog::Catalog,
}

/// Evaluates a caller's own read-only query on `store`, confined to
/// `tenant`'s graph: whatever the query says (FROM, FROM NAMED, GRAPH), its
/// dataset is replaced by that one graph before evaluation, and SERVICE
/// calls are refused. `cancel` stops a long evaluation where the evaluator
/// checks it (reads from the store).
pub(crate) fn query_confined(
    store: &oxigraph::store::Store,
    tenant: &str,
    query: spargebra::Query,
    cancel: oxigraph::sparql::CancellationToken,
) -> std::result::Result<oxigraph::sparql::QueryResults<'static>, oxigraph::sparql::QueryEvaluationError> {
    use oxigraph::model::{GraphName, NamedOrBlankNode};
    let graph = tenant_graph(tenant);
    let mut prepared = oxigraph::sparql::SparqlEvaluator::new().with_cancellation_token(cancel).for_query(query);
    prepared.dataset_mut().set_default_graph(vec![GraphName::NamedNode(graph.clone())]);
    prepared.dataset_mut().set_available_named_graphs(vec![NamedOrBlankNode::NamedNode(graph)]);
    prepared.on_store(store).execute()
}

/// What the single writer knows without reading it back. RocksDB keeps a
/// tombstone for every replaced `snapshotVersion` and `auditHead` quad until
/// its memtable is flushed, so *seeking* their current value costs O(writes);
/// the writer reads each once, then deletes and inserts exact quads. Only
/// kept for a store no other process writes.
#[derive(Debug, Default)]
struct WriterState {
    version: Option<i64>,
    audit_heads: HashMap<String, Option<AuditHead>>,
}

/// The newest audit entry of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditHead {
    /// Entry IRI.
    pub entry: NamedNode,
    /// Its position in the chain.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the embedded store under `root`.
    pub fn open(root: &Path) -> Result<Store> {
        let embedded = embedded::Embedded::open(root)?;
        let owed = embedded.vacuum_owed();
        let store = Store::with_backend(Box::new(embedded))?;
        if owed {
            tracing::info!("finishing a vacuum interrupted before the last shutdown");
            store.vacuum()?;
        }
        Ok(store)
    }

    /// An embedded store in memory, for tests and examples.
    pub fn open_in_memory() -> Result<Store> {
        Store::with_backend(Box::new(embedded::Embedded::in_memory()?))
    }

    /// Connects to a remote SPARQL 1.1 store (creating HMG's metadata in it
    /// when it has none); other HMG nodes may share it.
    pub fn connect(config: RemoteConfig) -> Result<Store> {
        let remote = remote::Remote::connect(config)?;
        Store::with_backend(Box::new(remote))
    }

    fn with_backend(backend: Box<dyn Backend>) -> Result<Store> {
        let store = Store { backend, writer: Mutex::new(WriterState::default()), catalog: catalog::Catalog::default() };
        store.init_metadata()?;
        Ok(store)
    }

    /// Root directory, if embedded on disk.
    pub fn root(&self) -> Option<&Path> {
        self.backend.root()
    }

    /// Where the store is: its directory or its endpoint.
    pub fn location(&self) -> String {
        self.backend.location()
    }

    /// Whether other HMG processes may write this store too.
    pub fn is_shared(&self) -> bool {
        self.backend.shared()
    }

    /// Creates the version counter and format marker once; on a shared
    /// store, two nodes starting together create them once.
    fn init_metadata(&self) -> Result<()> {
        if self.system_value(hmg::SNAPSHOT_VERSION)?.is_some() {
            return Ok(());
        }
        let mut changes = ChangeSet::default();
        changes.insert(Quad::new(STORE_NODE, hmg::FORMAT_VERSION, Literal::from(FORMAT_VERSION), SYSTEM_GRAPH));
        changes.insert(Quad::new(STORE_NODE, hmg::SNAPSHOT_VERSION, Literal::from(0_i64), SYSTEM_GRAPH));
        let _ = self.backend.commit(&changes, &Guard { version: None, audit_heads: Vec::new() })?;
        Ok(())
    }

    /// The embedded backend, for surfaces that evaluate on Oxigraph directly.
    pub(crate) fn embedded(&self) -> Option<&embedded::Embedded> {
        self.backend.as_embedded()
    }

    /// The remote backend, for surfaces that forward a query to it.
    pub(crate) fn remote(&self) -> Option<&remote::Remote> {
        self.backend.as_remote()
    }

    fn system_value(&self, predicate: NamedNodeRef<'_>) -> Result<Option<i64>> {
        match self.backend.quads(Some(STORE_NODE), Some(predicate), None, SYSTEM_GRAPH.into())?.first() {
            Some(quad) => Ok(Some(integer_of(&quad.object)?)),
            None => Ok(None),
        }
    }

    /// The number of writes committed so far.
    pub fn snapshot_version(&self) -> Result<u64> {
        Ok(self.system_value(hmg::SNAPSHOT_VERSION)?.unwrap_or(0).max(0) as u64)
    }

    /// Runs a SELECT query from `queries/` confined to `tenant`'s graph, with
    /// the given variable bindings.
    pub fn select(&self, query: NamedQuery, tenant: &str, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>> {
        self.backend.select(query, Some(&tenant_graph(tenant)), bindings)
    }

    /// Opens a checkpoint made by [`Store::read_snapshot`], read-only (no
    /// process writes a checkpoint).
    pub fn open_snapshot(dir: &Path) -> Result<Store> {
        Ok(Store {
            backend: Box::new(embedded::Embedded::open_read_only(dir)?),
            writer: Mutex::new(WriterState::default()),
            catalog: catalog::Catalog::default(),
        })
    }

    /// A read-only checkpoint of an embedded store as of now, for
    /// evaluating a client's query in another process (see
    /// [`embedded::Embedded::read_snapshot`]). `None` in memory or remote.
    pub fn read_snapshot(&self) -> Result<Option<Arc<ReadSnapshot>>> {
        match self.backend.as_embedded() {
            Some(embedded) => embedded.read_snapshot(self.snapshot_version()?),
            None => Ok(None),
        }
    }

    /// Runs a maintenance query across every graph (the change feed); never
    /// reachable from a caller's request.
    #[doc(hidden)]
    pub fn select_all_graphs(&self, query: NamedQuery, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>> {
        self.backend.select(query, None, bindings)
    }

    /// Every quad of `subject` in `tenant`'s graph.
    pub fn describe(&self, tenant: &str, subject: NamedNodeRef<'_>) -> Result<Vec<Quad>> {
        let graph = tenant_graph(tenant);
        self.backend.quads(Some(subject), None, None, graph.as_ref().into())
    }

    /// Every quad of each of `subjects` in `tenant`'s graph, grouped by
    /// subject (one request on a remote store).
    pub(crate) fn describe_many(&self, tenant: &str, subjects: &[NamedNode]) -> Result<HashMap<NamedNode, Vec<Quad>>> {
        let graph = tenant_graph(tenant);
        let mut grouped: HashMap<NamedNode, Vec<Quad>> = subjects.iter().map(|s| (s.clone(), Vec::new())).collect();
        for quad in self.backend.describe_many(subjects, graph.as_ref().into())? {
            if let oxigraph::model::NamedOrBlankNode::NamedNode(subject) = &quad.subject
                && let Some(quads) = grouped.get_mut(subject)
            {
                quads.push(quad);
            }
        }
        Ok(grouped)
    }

    /// Every atom of `tenant` with its scope node, newest first
    /// ([`catalog::Listing`]): kept between writes, read again (two scans
    /// of the tenant's graph by predicate) when a write it did not see
    /// committed; and the snapshot version it is of, for reading its
    /// atoms with [`Store::describe_kept`].
    pub(crate) fn listing_at(&self, tenant: &str) -> Result<(u64, Arc<catalog::Listing>)> {
        let graph = tenant_graph(tenant);
        let version = self.snapshot_version()?;
        if let Some(listing) = self.catalog.get(&graph, version) {
            return Ok((version, listing));
        }
        let listing = Arc::new(self.read_listing(&graph)?);
        self.catalog.put(graph, version, Arc::clone(&listing));
        Ok((version, listing))
    }

    /// [`Store::describe`] of an atom, kept between writes (the catalog):
    /// `version` is the snapshot version the caller read before asking.
    pub(crate) fn describe_kept(&self, tenant: &str, subject: NamedNodeRef<'_>, version: u64) -> Result<Arc<Vec<Quad>>> {
        let graph = tenant_graph(tenant);
        if let Some(quads) = self.catalog.described(&graph, subject, version) {
            return Ok(quads);
        }
        let quads = Arc::new(self.describe(tenant, subject)?);
        self.catalog.keep_described(&graph, subject, version, Arc::clone(&quads));
        Ok(quads)
    }

    /// `tenant`'s listing if one is kept at the current version (tests:
    /// whether a write patched it).
    #[cfg(test)]
    pub(crate) fn kept_listing(&self, tenant: &str) -> Option<Arc<catalog::Listing>> {
        self.catalog.get(&tenant_graph(tenant), self.snapshot_version().ok()?)
    }

    /// Every atom of the tenant graph `graph` with its scope node, read
    /// from the backend.
    pub(crate) fn read_listing(&self, graph: &NamedNode) -> Result<catalog::Listing> {
        let mut listing = catalog::Listing::default();
        let graph_ref = graph.as_ref().into();
        let atom_type = Term::NamedNode(hmg::ATOM.into_owned());
        for quad in self.backend.quads(None, Some(oxigraph::model::vocab::rdf::TYPE), Some(&atom_type), graph_ref)? {
            if let oxigraph::model::NamedOrBlankNode::NamedNode(subject) = &quad.subject
                && let Some(id) = atom_id_of_iri(subject.as_str())
            {
                listing.insert(id, None);
            }
        }
        for quad in self.backend.quads(None, Some(hmg::IN_SCOPE), None, graph_ref)? {
            if let (oxigraph::model::NamedOrBlankNode::NamedNode(subject), Term::NamedNode(scope)) = (&quad.subject, quad.object)
                && let Some(id) = atom_id_of_iri(subject.as_str())
                && listing.contains(id)
            {
                listing.insert(id, Some(scope));
            }
        }
        Ok(listing)
    }

    /// Every quad of `tenant`'s graph (export).
    pub fn tenant_quads(&self, tenant: &str) -> Result<Vec<Quad>> {
        let graph = tenant_graph(tenant);
        self.backend.quads(None, None, None, graph.as_ref().into())
    }

    /// Every quad of the system graph (migration).
    pub(crate) fn system_quads(&self) -> Result<Vec<Quad>> {
        self.backend.quads(None, None, None, SYSTEM_GRAPH.into())
    }

    /// The tenants that have a graph in this store.
    pub fn tenants(&self) -> Result<Vec<String>> {
        let mut tenants: Vec<String> = self.backend.graphs()?.iter().filter_map(|g| tenant_of_graph(g.as_str())).collect();
        tenants.sort();
        tenants.dedup();
        Ok(tenants)
    }

    /// Runs `body` as this process's one writer and commits what it did
    /// together with the next `snapshot_version`, atomically. Nothing is
    /// committed when `body` fails. On a shared store, when another node
    /// committed since `body` read, `body` runs again on fresh reads (it must
    /// not have effects outside `tx`), up to a bound.
    pub fn write<T, E>(&self, mut body: impl FnMut(&mut WriteTx<'_>) -> Result<T, E>) -> Result<T, E>
    where
        E: From<StoreError>,
    {
        let mut state = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let shared = self.backend.shared();
        let started = std::time::Instant::now();
        for attempt in 1..=WRITE_ATTEMPTS {
            let cached = if shared { WriterState::default() } else { std::mem::take(&mut *state) };
            let version = cached.version;
            let mut tx = WriteTx {
                backend: &*self.backend,
                changes: ChangeSet::default(),
                cached,
                version,
                version_read: None,
                heads: HashMap::new(),
                heads_read: Vec::new(),
            };
            let outcome = body(&mut tx).and_then(|value| Ok((value, tx.bump_version()?)));
            let WriteTx { changes, mut cached, heads, version_read, heads_read, .. } = tx;
            let restore = |state: &mut WriterState, cached: WriterState| {
                if !shared {
                    *state = cached;
                }
            };
            let (value, version) = match outcome {
                Ok(done) => done,
                Err(error) => {
                    restore(&mut state, cached);
                    return Err(error);
                }
            };
            let guard = Guard { version: version_read, audit_heads: heads_read };
            let body_us = started.elapsed().as_micros() as u64;
            match self.backend.commit(&changes, &guard) {
                Err(error) => {
                    restore(&mut state, cached);
                    return Err(error.into());
                }
                Ok(Committed::Applied) => {
                    self.catalog.committed(u64::try_from(version).unwrap_or(0), &changes);
                    // Only a committed transaction may update the cache.
                    cached.version = Some(version);
                    cached.audit_heads.extend(heads);
                    restore(&mut state, cached);
                    tracing::debug!(
                        snapshot_version = version,
                        attempt,
                        removed = changes.removed.len(),
                        body_us,
                        elapsed_us = started.elapsed().as_micros() as u64,
                        "write committed"
                    );
                    return Ok(value);
                }
                Ok(Committed::Lost) => {
                    tracing::debug!(attempt, "another writer committed first; running the transaction again");
                    std::thread::sleep(backoff(attempt));
                }
            }
        }
        Err(StoreError::Contended { attempts: WRITE_ATTEMPTS }.into())
    }

    /// Copies every graph of this store (the system graph and every tenant,
    /// audit chains included) into `target`, which must hold no memories
    /// yet and must not be used by any node until the copy is done. The
    /// target ends at this store's version. Returns the quads copied.
    pub fn copy_into(&self, target: &Store, progress: &dyn Fn(usize, usize)) -> Result<u64> {
        if !target.tenants()?.is_empty() || target.snapshot_version()? != 0 {
            return Err(StoreError::Config(format!("the target store {} is not empty; migrate only into a new store", target.location())));
        }
        let tenants = self.tenants()?;
        let mut copied = 0_u64;
        let system: Vec<Quad> = self
            .system_quads()?
            .into_iter()
            .filter(|q| q.predicate.as_ref() != hmg::SNAPSHOT_VERSION && q.predicate.as_ref() != hmg::FORMAT_VERSION)
            .collect();
        target.backend.load(&system)?;
        copied += system.len() as u64;
        for (done, tenant) in tenants.iter().enumerate() {
            let quads = self.tenant_quads(tenant)?;
            target.backend.load(&quads)?;
            copied += quads.len() as u64;
            progress(done + 1, tenants.len());
        }
        // The version last, so a reader of a half-copied store sees 0.
        let version = i64::try_from(self.snapshot_version()?).unwrap_or(i64::MAX);
        let mut changes = ChangeSet::default();
        changes.remove(Quad::new(STORE_NODE, hmg::SNAPSHOT_VERSION, Literal::from(0_i64), SYSTEM_GRAPH));
        changes.insert(Quad::new(STORE_NODE, hmg::SNAPSHOT_VERSION, Literal::from(version), SYSTEM_GRAPH));
        if target.backend.commit(&changes, &Guard { version: Some(0), audit_heads: Vec::new() })? == Committed::Lost {
            return Err(StoreError::Config(format!("another process wrote to {} during the migration", target.location())));
        }
        target.catalog.clear();
        target.flush()?;
        Ok(copied)
    }

    /// Makes the strings of destroyed content unreachable on disk (embedded:
    /// rebuilds the store; see [`embedded::Embedded`]). Takes the writer
    /// lock, so no transaction overlaps it.
    pub fn vacuum(&self) -> Result<()> {
        let _writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.catalog.clear();
        self.backend.vacuum()
    }

    /// Marks that a vacuum must run even if this process dies before it
    /// does (called before committing a tombstone).
    pub fn mark_vacuum_pending(&self) -> Result<()> {
        self.backend.mark_vacuum_pending()
    }

    /// Writes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.backend.flush()
    }
}

/// Reads of an audit head caught mid-commit on a shared store (about half
/// a second in all with [`backoff`]).
const HEAD_READ_ATTEMPTS: u32 = 12;

/// A jittered pause before running a lost transaction again.
fn backoff(attempt: u32) -> std::time::Duration {
    let jitter = u64::from(ulid::Ulid::generate().random() as u16 % 16);
    std::time::Duration::from_millis(u64::from(attempt.min(10)) * 5 + jitter)
}

/// The open write transaction. Reads inside it see its own writes.
pub struct WriteTx<'a> {
    backend: &'a dyn Backend,
    changes: ChangeSet,
    cached: WriterState,
    /// The version this transaction builds on, once known.
    version: Option<i64>,
    /// The version as read from the store (the guard).
    version_read: Option<i64>,
    /// Audit heads read or written in this transaction.
    heads: HashMap<String, Option<AuditHead>>,
    /// Audit heads as read from the store (the guard).
    heads_read: Vec<(NamedNode, Option<NamedNode>)>,
}

impl WriteTx<'_> {
    /// Inserts a quad.
    pub fn insert(&mut self, quad: QuadRef<'_>) {
        self.changes.insert(quad.into_owned());
    }

    /// Removes a quad.
    pub fn remove(&mut self, quad: QuadRef<'_>) {
        self.changes.remove(quad.into_owned());
    }

    /// Every quad matching the pattern, as seen inside the transaction.
    pub fn quads(
        &self,
        subject: Option<NamedNodeRef<'_>>,
        predicate: Option<NamedNodeRef<'_>>,
        object: Option<&Term>,
        graph: GraphNameRef<'_>,
    ) -> Result<Vec<Quad>> {
        let mut found = self.backend.quads(subject, predicate, object, graph)?;
        found.retain(|quad| !self.changes.removed.contains(quad));
        for quad in self.changes.inserted_matching(subject, predicate, object, graph) {
            if !found.contains(quad) {
                found.push(quad.clone());
            }
        }
        Ok(found)
    }

    /// The single object of `subject predicate ?o` in `graph`, if any.
    pub fn object(&self, subject: NamedNodeRef<'_>, predicate: NamedNodeRef<'_>, graph: GraphNameRef<'_>) -> Result<Option<Term>> {
        Ok(self.quads(Some(subject), Some(predicate), None, graph)?.into_iter().next().map(|q| q.object))
    }

    /// Replaces every `subject predicate ?o` in `graph` by one new object.
    pub fn set(&mut self, subject: NamedNodeRef<'_>, predicate: NamedNodeRef<'_>, object: &Term, graph: GraphNameRef<'_>) -> Result<()> {
        for quad in self.quads(Some(subject), Some(predicate), None, graph)? {
            self.changes.remove(quad);
        }
        self.insert(QuadRef::new(subject, predicate, object, graph));
        Ok(())
    }

    fn current_version(&mut self) -> Result<i64> {
        if let Some(version) = self.version {
            self.version_read.get_or_insert(version);
            return Ok(version);
        }
        let read = match self.backend.quads(Some(STORE_NODE), Some(hmg::SNAPSHOT_VERSION), None, SYSTEM_GRAPH.into())?.first() {
            Some(quad) => integer_of(&quad.object)?,
            None => return Err(StoreError::Corrupt("the store has no snapshotVersion (not initialized)".to_owned())),
        };
        self.version = Some(read);
        self.version_read = Some(read);
        Ok(read)
    }

    /// The snapshot version this transaction will commit as.
    pub fn version(&mut self) -> Result<u64> {
        let current = self.current_version()?;
        Ok((current + 1).max(0) as u64)
    }

    fn bump_version(&mut self) -> Result<i64> {
        let graph: GraphNameRef<'_> = SYSTEM_GRAPH.into();
        let current = self.current_version()?;
        let next = current + 1;
        self.remove(QuadRef::new(STORE_NODE, hmg::SNAPSHOT_VERSION, &Literal::from(current), graph));
        self.insert(QuadRef::new(STORE_NODE, hmg::SNAPSHOT_VERSION, &Literal::from(next), graph));
        Ok(next)
    }

    /// The newest audit entry of `tenant` (read from the store once per
    /// transaction, or once per process for a store no one else writes).
    pub fn audit_head(&mut self, tenant: &str) -> Result<Option<AuditHead>> {
        if let Some(head) = self.heads.get(tenant).or_else(|| self.cached.audit_heads.get(tenant)) {
            return Ok(head.clone());
        }
        let graph_node = tenant_graph(tenant);
        // A shared store that does not isolate readers from a commit in
        // progress (Virtuoso) can show the new head before its entry's
        // fields: read again shortly before calling it corrupt.
        let attempts = if self.backend.shared() { HEAD_READ_ATTEMPTS } else { 1 };
        let mut attempt = 1;
        let head = loop {
            match self.read_audit_head(&graph_node) {
                Err(StoreError::Corrupt(message)) if attempt < attempts => {
                    tracing::debug!(%message, attempt, "audit head read mid-commit; reading again");
                    std::thread::sleep(backoff(attempt));
                    attempt += 1;
                }
                other => break other?,
            }
        };
        self.heads_read.push((graph_node, head.as_ref().map(|h| h.entry.clone())));
        self.heads.insert(tenant.to_owned(), head.clone());
        Ok(head)
    }

    /// The audit head of a tenant's graph as stored now.
    fn read_audit_head(&self, graph_node: &NamedNode) -> Result<Option<AuditHead>> {
        let graph: GraphNameRef<'_> = graph_node.as_ref().into();
        match self.backend.quads(Some(graph_node.as_ref()), Some(hmg::AUDIT_HEAD), None, graph)?.first().map(|q| &q.object) {
            None => Ok(None),
            Some(Term::NamedNode(entry)) => {
                let seq = self
                    .object(entry.as_ref(), hmg::SEQ, graph)?
                    .map(|t| integer_of(&t))
                    .transpose()?
                    .ok_or_else(|| StoreError::Corrupt(format!("audit head {entry} has no seq")))?;
                let hash = match self.object(entry.as_ref(), hmg::HASH, graph)? {
                    Some(Term::Literal(l)) => l.value().to_owned(),
                    _ => return Err(StoreError::Corrupt(format!("audit head {entry} has no hash"))),
                };
                Ok(Some(AuditHead { entry: entry.clone(), seq: seq.max(0) as u64, hash }))
            }
            Some(other) => Err(StoreError::Corrupt(format!("audit head is not an IRI: {other}"))),
        }
    }

    /// Makes `head` the newest audit entry of `tenant`.
    pub fn set_audit_head(&mut self, tenant: &str, head: AuditHead) -> Result<()> {
        let previous = self.audit_head(tenant)?;
        let graph_node = tenant_graph(tenant);
        let graph: GraphNameRef<'_> = graph_node.as_ref().into();
        if let Some(previous) = previous {
            self.remove(QuadRef::new(&graph_node, hmg::AUDIT_HEAD, &previous.entry, graph));
        }
        self.insert(QuadRef::new(&graph_node, hmg::AUDIT_HEAD, &head.entry, graph));
        self.heads.insert(tenant.to_owned(), Some(head));
        Ok(())
    }
}

/// Reads an integer literal.
pub(crate) fn integer_of(term: &Term) -> Result<i64> {
    match term {
        Term::Literal(literal) => literal.value().parse().map_err(|_| StoreError::Corrupt(format!("expected an integer, found {literal}"))),
        other => Err(StoreError::Corrupt(format!("expected an integer literal, found {other}"))),
    }
}

/// Percent-encodes a name for use inside an IRI (RFC 3987 iunreserved kept).
pub(crate) fn encode_iri_component(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_alphanumeric() && !c.is_ascii() || c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~') {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// Decodes what [`encode_iri_component`] wrote (`None` if malformed).
pub(crate) fn decode_iri_component(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The named graph of a tenant.
pub(crate) fn tenant_graph(tenant: &str) -> NamedNode {
    NamedNode::new_unchecked(format!("urn:hmg:tenant:{}", encode_iri_component(tenant)))
}

/// The tenant name of a tenant graph IRI.
pub(crate) fn tenant_of_graph(iri: &str) -> Option<String> {
    decode_iri_component(iri.strip_prefix("urn:hmg:tenant:")?)
}

/// The IRI of an atom.
pub(crate) fn atom_iri(id: AtomId) -> NamedNode {
    NamedNode::new_unchecked(format!("urn:hmg:atom:{id}"))
}

/// The atom id of an atom IRI.
pub(crate) fn atom_id_of(term: &Term) -> Option<AtomId> {
    match term {
        Term::NamedNode(node) => atom_id_of_iri(node.as_str()),
        _ => None,
    }
}

/// The atom an IRI names, if it names one.
pub(crate) fn atom_id_of_iri(iri: &str) -> Option<AtomId> {
    iri.strip_prefix("urn:hmg:atom:").and_then(|id| id.parse().ok())
}

/// The IRI of an audit entry.
pub(crate) fn audit_iri(id: ulid::Ulid) -> NamedNode {
    NamedNode::new_unchecked(format!("urn:hmg:audit:{id}"))
}

/// The IRI of an entity, derived from its normalized key within the tenant.
pub(crate) fn entity_iri(tenant: &str, key: &str) -> NamedNode {
    NamedNode::new_unchecked(format!("urn:hmg:entity:{}:{}", encode_iri_component(tenant), encode_iri_component(key)))
}

/// The IRI of an actor.
pub(crate) fn actor_iri(actor: &str) -> NamedNode {
    NamedNode::new_unchecked(format!("urn:hmg:actor:{}", encode_iri_component(actor)))
}

/// The IRI of a scope node: a digest of its four components.
pub(crate) fn scope_iri(scope: &crate::scope::Scope) -> NamedNode {
    use sha2::Digest;
    let key = format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{}",
        scope.tenant_id,
        scope.workspace.as_deref().unwrap_or(""),
        scope.repository.as_deref().unwrap_or(""),
        scope.branch.as_deref().unwrap_or("")
    );
    let digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
    NamedNode::new_unchecked(format!("urn:hmg:scope:{}", &digest[..32]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Store>();
    }

    #[test]
    fn tenant_graph_names_round_trip() {
        for name in ["alice", "qiankun", "山田 太郎", "a/b?c#d", "用户"] {
            let graph = tenant_graph(name);
            assert!(NamedNode::new(graph.as_str()).is_ok(), "{graph}");
            assert_eq!(tenant_of_graph(graph.as_str()).as_deref(), Some(name));
        }
    }

    #[test]
    fn writes_bump_the_snapshot_version() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(store.snapshot_version().unwrap(), 0);
        store.write(|_| Ok::<_, StoreError>(())).unwrap();
        store.write(|_| Ok::<_, StoreError>(())).unwrap();
        assert_eq!(store.snapshot_version().unwrap(), 2);
        let failed: Result<()> = store.write(|_| Err(StoreError::Corrupt("no".into())));
        assert!(failed.is_err());
        assert_eq!(store.snapshot_version().unwrap(), 2);
    }
}
