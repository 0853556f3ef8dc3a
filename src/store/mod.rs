//! The store: Oxigraph on disk (RocksDB), the source of truth.
//!
//! **Architecture invariants**
//! - Each tenant's triples live in its own named graph (`urn:hmg:tenant:<name>`);
//!   every query this module runs is confined to one tenant graph *before*
//!   evaluation, by setting the query dataset, not by filtering results.
//! - One writer at a time: [`Store::write`] holds a mutex for the whole
//!   transaction; every committed write increments `snapshot_version` in the
//!   same transaction. Readers use Oxigraph snapshots and never wait for it.
//! - Tombstoned content is destroyed, not hidden: Oxigraph never deletes
//!   strings from its dictionary, so a tombstone is followed by a *vacuum*
//!   that rebuilds the store from its live quads into a fresh directory and
//!   switches to it atomically (see [`Store::vacuum`]).
//!
//! **API boundary:** the rest of the crate sees IRIs, terms and query
//! solutions, never RocksDB.

pub(crate) mod audit;
pub(crate) mod codec;
mod layout;
pub(crate) mod queries;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use oxigraph::model::{GraphName, GraphNameRef, Literal, NamedNode, NamedNodeRef, NamedOrBlankNode, Quad, QuadRef, Term};
use oxigraph::sparql::{QueryResults, QuerySolution, SparqlEvaluator, Variable};
use oxigraph::store::{StorageError, Transaction};

use crate::atom::AtomId;
use crate::vocab::{STORE_NODE, SYSTEM_GRAPH, hmg};

pub(crate) use queries::NamedQuery;

/// On-disk format version written in the system graph.
pub(crate) const FORMAT_VERSION: i64 = 1;

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
}

impl crate::fault::Classified for StoreError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            StoreError::Locked { .. } => crate::fault::Fault::Unavailable,
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
    /// Current Oxigraph handle. Swapped only by [`Store::vacuum`].
    inner: RwLock<oxigraph::store::Store>,
    /// Root directory (`None` for an in-memory store).
    root: Option<PathBuf>,
    /// Serializes writers and caches what only writers change.
    writer: Mutex<WriterState>,
    /// The newest read-only checkpoint ([`Store::read_snapshot`]).
    snapshot: Mutex<Option<Arc<ReadSnapshot>>>,
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
) -> std::result::Result<QueryResults<'static>, oxigraph::sparql::QueryEvaluationError> {
    let graph = tenant_graph(tenant);
    let mut prepared = SparqlEvaluator::new().with_cancellation_token(cancel).for_query(query);
    prepared.dataset_mut().set_default_graph(vec![GraphName::NamedNode(graph.clone())]);
    prepared.dataset_mut().set_available_named_graphs(vec![NamedOrBlankNode::NamedNode(graph)]);
    prepared.on_store(store).execute()
}

/// What the single writer knows without reading it back. RocksDB keeps a
/// tombstone for every replaced `snapshotVersion` and `auditHead` quad until
/// its memtable is flushed, so *seeking* their current value costs O(writes);
/// the writer reads each once, then deletes and inserts exact quads.
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
        f.debug_struct("Store").field("root", &self.root).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the store under `root`.
    pub fn open(root: &Path) -> Result<Store> {
        let oxigraph_dir = layout::prepare(root)?;
        let inner = oxigraph::store::Store::open(&oxigraph_dir).map_err(|source| {
            if source.to_string().to_lowercase().contains("lock") {
                StoreError::Locked { path: root.to_path_buf(), source }
            } else {
                StoreError::Storage(source)
            }
        })?;
        let store = Store {
            inner: RwLock::new(inner),
            root: Some(root.to_path_buf()),
            writer: Mutex::new(WriterState::default()),
            snapshot: Mutex::new(None),
        };
        store.init_metadata()?;
        if layout::vacuum_pending(root) {
            tracing::info!("finishing a vacuum interrupted before the last shutdown");
            store.vacuum()?;
        }
        Ok(store)
    }

    /// A store in memory, for tests and examples.
    pub fn open_in_memory() -> Result<Store> {
        let store = Store {
            inner: RwLock::new(oxigraph::store::Store::new()?),
            root: None,
            writer: Mutex::new(WriterState::default()),
            snapshot: Mutex::new(None),
        };
        store.init_metadata()?;
        Ok(store)
    }

    /// Root directory, if on disk.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    fn init_metadata(&self) -> Result<()> {
        if self.snapshot_version()? == 0 && self.system_value(hmg::FORMAT_VERSION)?.is_none() {
            let store = self.handle();
            let mut tx = store.start_transaction()?;
            tx.insert(QuadRef::new(STORE_NODE, hmg::FORMAT_VERSION, &Literal::from(FORMAT_VERSION), SYSTEM_GRAPH));
            tx.insert(QuadRef::new(STORE_NODE, hmg::SNAPSHOT_VERSION, &Literal::from(0_i64), SYSTEM_GRAPH));
            tx.commit()?;
        }
        Ok(())
    }

    /// A clone of the current Oxigraph handle (cheap: reference counted).
    pub(crate) fn handle(&self) -> oxigraph::store::Store {
        match self.inner.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn system_value(&self, predicate: NamedNodeRef<'_>) -> Result<Option<i64>> {
        let store = self.handle();
        let mut quads = store.quads_for_pattern(Some(STORE_NODE.into()), Some(predicate), None, Some(SYSTEM_GRAPH.into()));
        match quads.next() {
            Some(quad) => Ok(Some(integer_of(&quad?.object)?)),
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
        self.select_in(query, Some(tenant_graph(tenant)), bindings)
    }

    fn select_in(&self, query: NamedQuery, graph: Option<NamedNode>, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>> {
        let query_error = |message: String| StoreError::Query { name: query.name(), message };
        let mut prepared = SparqlEvaluator::new().for_query(query.parsed().clone());
        if let Some(graph) = graph {
            prepared.dataset_mut().set_default_graph(vec![GraphName::NamedNode(graph.clone())]);
            prepared.dataset_mut().set_available_named_graphs(vec![NamedOrBlankNode::NamedNode(graph)]);
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

    /// Evaluates a caller's own read-only query, confined to `tenant`'s
    /// graph (see [`query_confined`]).
    pub fn query_confined(
        &self,
        tenant: &str,
        query: spargebra::Query,
        cancel: oxigraph::sparql::CancellationToken,
    ) -> std::result::Result<QueryResults<'static>, oxigraph::sparql::QueryEvaluationError> {
        query_confined(&self.handle(), tenant, query, cancel)
    }

    /// Opens a checkpoint made by [`Store::read_snapshot`], read-only (no
    /// process writes a checkpoint).
    pub fn open_snapshot(dir: &Path) -> Result<Store> {
        let inner = oxigraph::store::Store::open_read_only(dir)?;
        Ok(Store { inner: RwLock::new(inner), root: None, writer: Mutex::new(WriterState::default()), snapshot: Mutex::new(None) })
    }

    /// A read-only checkpoint of the store as of now (RocksDB hard links,
    /// cheap), for evaluating a client's query in another process. Reused
    /// while the snapshot version stays the same; its directory is removed
    /// when the last holder drops it, and every checkpoint is removed by a
    /// vacuum (they would keep destroyed content). `None` for a store in
    /// memory.
    pub fn read_snapshot(&self) -> Result<Option<Arc<ReadSnapshot>>> {
        let Some(root) = &self.root else { return Ok(None) };
        let version = self.snapshot_version()?;
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
        // Taken under the writer lock, so no vacuum runs while it is made.
        {
            let _writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.handle().backup(&dir)?;
        }
        let snapshot = Arc::new(ReadSnapshot { dir, version });
        *cached = Some(Arc::clone(&snapshot));
        Ok(Some(snapshot))
    }

    /// Runs a maintenance query across every graph (the change feed); never
    /// reachable from a caller's request.
    #[doc(hidden)]
    pub fn select_all_graphs(&self, query: NamedQuery, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>> {
        self.select_in(query, None, bindings)
    }

    /// Every quad of `subject` in `tenant`'s graph.
    pub fn describe(&self, tenant: &str, subject: NamedNodeRef<'_>) -> Result<Vec<Quad>> {
        let graph = tenant_graph(tenant);
        let store = self.handle();
        Ok(store.quads_for_pattern(Some(subject.into()), None, None, Some(graph.as_ref().into())).collect::<Result<Vec<_>, _>>()?)
    }

    /// Every quad of `tenant`'s graph (export).
    pub fn tenant_quads(&self, tenant: &str) -> Result<Vec<Quad>> {
        let graph = tenant_graph(tenant);
        let store = self.handle();
        Ok(store.quads_for_pattern(None, None, None, Some(graph.as_ref().into())).collect::<Result<Vec<_>, _>>()?)
    }

    /// The tenants that have a graph in this store.
    pub fn tenants(&self) -> Result<Vec<String>> {
        let store = self.handle();
        let mut tenants = Vec::new();
        for graph in store.named_graphs() {
            if let NamedOrBlankNode::NamedNode(node) = graph?
                && let Some(name) = tenant_of_graph(node.as_str())
            {
                tenants.push(name);
            }
        }
        tenants.sort();
        Ok(tenants)
    }

    /// Runs `body` as the one writer, in one Oxigraph transaction that also
    /// increments `snapshot_version`. Nothing is committed when `body` fails.
    pub fn write<T, E>(&self, body: impl FnOnce(&mut WriteTx<'_>) -> Result<T, E>) -> Result<T, E>
    where
        E: From<StoreError>,
    {
        let mut state = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let store = self.handle();
        let tx = store.start_transaction().map_err(StoreError::from)?;
        let cached = std::mem::take(&mut *state);
        let version = cached.version;
        let mut write_tx = WriteTx { tx, cached, version, heads: HashMap::new() };
        let outcome = body(&mut write_tx).and_then(|value| Ok((value, write_tx.bump_version()?)));
        let WriteTx { tx, mut cached, heads, .. } = write_tx;
        let (value, version) = match outcome {
            Ok(done) => done,
            Err(error) => {
                *state = cached;
                return Err(error);
            }
        };
        if let Err(error) = tx.commit() {
            *state = cached;
            return Err(StoreError::from(error).into());
        }
        // Only a committed transaction may update the cache.
        cached.version = Some(version);
        cached.audit_heads.extend(heads);
        *state = cached;
        tracing::debug!(snapshot_version = version, "write committed");
        Ok(value)
    }

    /// Rebuilds the store from its live quads into a fresh directory and
    /// switches to it, so that strings no quad refers to any more (the
    /// content of tombstoned atoms) are gone from disk. Crash-safe: the
    /// switch is one atomic rename of the `CURRENT` file; an interrupted
    /// vacuum is finished at the next open.
    pub fn vacuum(&self) -> Result<()> {
        let Some(root) = &self.root else { return Ok(()) };
        let _writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
        drop(old);
        layout::remove_stale_generations(root, &next_dir);
        // Checkpoints hard-link the old files, destroyed content included.
        self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        layout::remove_snapshots(root);
        layout::clear_vacuum_pending(root)?;
        Ok(())
    }

    /// Marks that a vacuum must run even if this process dies before it
    /// does (called before committing a tombstone).
    pub fn mark_vacuum_pending(&self) -> Result<()> {
        match &self.root {
            Some(root) => layout::mark_vacuum_pending(root),
            None => Ok(()),
        }
    }

    /// Writes everything to disk.
    pub fn flush(&self) -> Result<()> {
        Ok(self.handle().flush()?)
    }
}

/// The one open write transaction. Reads inside it see its own writes.
pub struct WriteTx<'a> {
    tx: Transaction<'a>,
    cached: WriterState,
    version: Option<i64>,
    /// Audit heads read or written in this transaction.
    heads: HashMap<String, Option<AuditHead>>,
}

impl WriteTx<'_> {
    /// Inserts a quad.
    pub fn insert(&mut self, quad: QuadRef<'_>) {
        self.tx.insert(quad);
    }

    /// Removes a quad.
    pub fn remove(&mut self, quad: QuadRef<'_>) {
        self.tx.remove(quad);
    }

    /// Every quad matching the pattern, as seen inside the transaction.
    pub fn quads(
        &self,
        subject: Option<NamedNodeRef<'_>>,
        predicate: Option<NamedNodeRef<'_>>,
        object: Option<&Term>,
        graph: GraphNameRef<'_>,
    ) -> Result<Vec<Quad>> {
        Ok(self
            .tx
            .quads_for_pattern(subject.map(Into::into), predicate, object.map(Term::as_ref), Some(graph))
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// The single object of `subject predicate ?o` in `graph`, if any.
    pub fn object(&self, subject: NamedNodeRef<'_>, predicate: NamedNodeRef<'_>, graph: GraphNameRef<'_>) -> Result<Option<Term>> {
        Ok(self.quads(Some(subject), Some(predicate), None, graph)?.into_iter().next().map(|q| q.object))
    }

    /// Replaces every `subject predicate ?o` in `graph` by one new object.
    pub fn set(&mut self, subject: NamedNodeRef<'_>, predicate: NamedNodeRef<'_>, object: &Term, graph: GraphNameRef<'_>) -> Result<()> {
        for quad in self.quads(Some(subject), Some(predicate), None, graph)? {
            self.tx.remove(&quad);
        }
        self.tx.insert(QuadRef::new(subject, predicate, object, graph));
        Ok(())
    }

    fn current_version(&self) -> Result<i64> {
        match self.version {
            Some(version) => Ok(version),
            None => match self.object(STORE_NODE, hmg::SNAPSHOT_VERSION, SYSTEM_GRAPH.into())? {
                Some(term) => integer_of(&term),
                None => Ok(0),
            },
        }
    }

    /// The snapshot version this transaction will commit as.
    pub fn version(&mut self) -> Result<u64> {
        let current = self.current_version()?;
        self.version = Some(current);
        Ok((current + 1).max(0) as u64)
    }

    fn bump_version(&mut self) -> Result<i64> {
        let graph: GraphNameRef<'_> = SYSTEM_GRAPH.into();
        let current = self.current_version()?;
        let next = current + 1;
        self.tx.remove(QuadRef::new(STORE_NODE, hmg::SNAPSHOT_VERSION, &Literal::from(current), graph));
        self.tx.insert(QuadRef::new(STORE_NODE, hmg::SNAPSHOT_VERSION, &Literal::from(next), graph));
        self.version = Some(next);
        Ok(next)
    }

    /// The newest audit entry of `tenant` (read from the store once per
    /// process, then from the writer's cache).
    pub fn audit_head(&mut self, tenant: &str) -> Result<Option<AuditHead>> {
        if let Some(head) = self.heads.get(tenant).or_else(|| self.cached.audit_heads.get(tenant)) {
            return Ok(head.clone());
        }
        let graph_node = tenant_graph(tenant);
        let graph: GraphNameRef<'_> = graph_node.as_ref().into();
        let head = match self.object(graph_node.as_ref(), hmg::AUDIT_HEAD, graph)? {
            None => None,
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
                Some(AuditHead { entry, seq: seq.max(0) as u64, hash })
            }
            Some(other) => return Err(StoreError::Corrupt(format!("audit head is not an IRI: {other}"))),
        };
        self.heads.insert(tenant.to_owned(), head.clone());
        Ok(head)
    }

    /// Makes `head` the newest audit entry of `tenant`.
    pub fn set_audit_head(&mut self, tenant: &str, head: AuditHead) -> Result<()> {
        let previous = self.audit_head(tenant)?;
        let graph_node = tenant_graph(tenant);
        let graph: GraphNameRef<'_> = graph_node.as_ref().into();
        if let Some(previous) = previous {
            self.tx.remove(QuadRef::new(&graph_node, hmg::AUDIT_HEAD, &previous.entry, graph));
        }
        self.tx.insert(QuadRef::new(&graph_node, hmg::AUDIT_HEAD, &head.entry, graph));
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
        Term::NamedNode(node) => node.as_str().strip_prefix("urn:hmg:atom:").and_then(|id| id.parse().ok()),
        _ => None,
    }
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
