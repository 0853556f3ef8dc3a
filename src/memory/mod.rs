//! The `Memory` facade: every operation HMG offers, and the Rust SDK.
//! Surfaces (CLI, MCP, GraphQL, REST, hooks) only translate their wire
//! formats to and from these calls.
//!
//! ```
//! use hmg::{Caller, Memory, MemorizeRequest, Scope, Effect};
//!
//! let memory = Memory::open_in_memory()?;
//! let caller = Caller::new(Scope::tenant("alice").with_repository("hmg"), "doc-test");
//! let outcome = memory.memorize(&caller, MemorizeRequest::new("We use PostgreSQL 16, not MongoDB"))?;
//! assert_eq!(outcome.effect, Effect::Applied);
//! let again = memory.memorize(&caller, MemorizeRequest::new("we use postgresql 16, not mongodb."))?;
//! assert_eq!(again.effect, Effect::NoOp);
//! # Result::<_, Box<dyn std::error::Error>>::Ok(())
//! ```
//!
//! **Architecture invariants**
//! - A write is acknowledged only after its one store transaction (atom,
//!   scope, entities, audit entry, snapshot version) has committed.
//! - History is append-only: only status and epistemic change in place, and
//!   each change writes an audit entry with the before and after values.
//!   Only tombstone destroys content.
//! - Policy refusals (empty, oversized, restating a negated memory, a
//!   correction aimed at a superseded atom, …) are outcomes with
//!   `effect: rejected` and a reason; invalid requests (unknown atom, bad
//!   action, missing field) are [`MemoryError`]s. Neither writes anything.

mod brief;
mod bulk;
pub use bulk::ChainEvent;
mod correct;
mod export;
mod govern;
mod merge;
mod read;
mod recall;
pub mod reflect;
#[cfg(test)]
mod tests;
mod usage;
mod write;

pub(crate) use crate::store::codec::{insert_atom, kind_of_class, literal_value, load_atom, load_atom_cached, scope_of, set_atom_literal};

use std::path::Path;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use oxigraph::model::{GraphNameRef, Literal, Term};
use serde::Serialize;
use ulid::Ulid;

use crate::atom::{Atom, AtomId, Epistemic, Status};
use crate::scope::{Scope, ScopeError};
use crate::store::{self, NamedQuery, Store, StoreError, WriteTx};
use crate::text;
use crate::vocab::hmg;

pub use brief::{Brief, BriefOptions, ONBOARDING};
pub use correct::{CorrectAction, CorrectOutcome, CorrectRequest};
pub use export::{ExportFormat, ExportRecord, ImportReport, ImportedLine};
pub use govern::{GovernAction, GovernOutcome, GovernRequest};
pub use merge::{MergeEvent, MergeResult};
pub use read::{AtomFilter, AtomPage, AtomView, AuditView, History, IndexCounts, MAX_PAGE, MigrationTarget, ScopeView, Stats};
pub use reflect::{
    ReflectAction, ReflectCounts, ReflectFilters, ReflectLifecycle, ReflectPromotion, ReflectReport, ReflectRequest, ReflectSummary,
    parse_iso8601,
};
pub use write::{HandoffOutcome, HandoffRequest, MEMORIZE_BATCH, MemorizeOutcome, MemorizeRequest};

/// Longest memory (memorize, replace, lesson), in characters.
pub const MAX_CONTENT_CHARS: usize = 4_000;
/// Longest handoff summary, in characters.
pub const MAX_HANDOFF_CHARS: usize = 16_000;
/// Longest reason, in characters.
pub const MAX_REASON_CHARS: usize = 2_000;
/// Longest `source` attribution, in characters.
pub const MAX_SOURCE_CHARS: usize = 200;

/// Errors of the facade: the request cannot be carried out as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A field is missing or malformed; the message names it.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// Field name as on the wire (`target_atom`, `new_content`, …).
        field: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// No atom with this id in the caller's tenant.
    #[error("unknown atom {0}: no atom with this id exists in your tenant (take ids from memory_recall results)")]
    AtomNotFound(AtomId),
    /// The scope cannot be used.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A derived index failed.
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    /// The caller may not act on what it asked for (another owner, team or
    /// scope than its own).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The data changed between reading and writing; nothing was written.
    #[error("conflict: {0}")]
    Conflict(String),
}

impl MemoryError {
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
        MemoryError::InvalidInput { field, message: message.into() }
    }
}

impl crate::fault::Classified for MemoryError {
    fn fault(&self) -> crate::fault::Fault {
        use crate::fault::Fault;
        match self {
            MemoryError::InvalidInput { .. } => Fault::Invalid,
            MemoryError::AtomNotFound(_) => Fault::NotFound,
            MemoryError::Scope(error) => error.fault(),
            MemoryError::Store(error) => error.fault(),
            MemoryError::Index(error) => error.fault(),
            MemoryError::Forbidden(_) => Fault::Forbidden,
            MemoryError::Conflict(_) => Fault::Conflict,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            MemoryError::InvalidInput { field, .. } => Some(field),
            MemoryError::Scope(error) => error.field(),
            _ => None,
        }
    }
}

/// Result alias of the facade.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// Who is calling and in which scope. Surfaces resolve the scope (hook,
/// working directory, client roots); a scope sent by a model never reaches
/// this type unchecked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Resolved scope.
    pub scope: Scope,
    /// Actor name recorded in audit entries.
    pub actor: String,
}

impl Caller {
    /// A caller in `scope` recorded as `actor`.
    pub fn new(scope: Scope, actor: impl Into<String>) -> Caller {
        Caller { scope, actor: actor.into() }
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Written.
    Applied,
    /// Nothing to do (exact duplicate).
    NoOp,
    /// Refused by admission control or policy; nothing written.
    Rejected,
}

impl Effect {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Applied => "applied",
            Effect::NoOp => "no_op",
            Effect::Rejected => "rejected",
        }
    }
}

/// Which sentence-embedding model to use.
#[derive(Clone, Default)]
pub enum EmbedderChoice {
    /// From the environment (`HMG_EMBEDDER`, `HMG_MODEL_DIR`, `ORT_DYLIB_PATH`).
    #[default]
    FromEnv,
    /// No semantic search.
    Disabled,
    /// This one.
    Given(std::sync::Arc<dyn crate::index::embed::Embedder>),
}

impl std::fmt::Debug for EmbedderChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedderChoice::FromEnv => f.write_str("FromEnv"),
            EmbedderChoice::Disabled => f.write_str("Disabled"),
            EmbedderChoice::Given(e) => write!(f, "Given({})", e.id()),
        }
    }
}

/// How to open a [`Memory`].
#[derive(Debug, Clone, Default)]
pub struct MemoryOptions {
    /// Embedding model.
    pub embedder: EmbedderChoice,
    /// Recall tuning.
    pub recall: crate::recall::RecallConfig,
    /// A remote SPARQL store instead of the embedded one; the directory
    /// given to [`Memory::open_with`] then holds this node's indexes only.
    pub remote: Option<crate::store::RemoteConfig>,
    /// Prepare the models in the background from the start of
    /// [`Memory::open_with`] (for callers about to embed: a server, a
    /// recall), while the indexes open; else they load at first use.
    pub warm_up: bool,
    /// With `warm_up`, prepare the models for batches too (their weights as
    /// AMX tiles where the CPU has them: about 80 ms and 63 MB for both
    /// default models), for a server whose requests come in batches.
    pub warm_batches: bool,
    /// A one-shot process (a CLI recall): its recall usage is parked in the
    /// store directory's journal at close rather than committed (see
    /// `usage.rs`), and committed by the next process that is not one.
    pub park_usage: bool,
    /// A server: a recall that makes the usage stamps due leaves their
    /// commit to the caller, after it has answered
    /// ([`crate::Memory::flush_usage_if_due`]; the commit took 10–26 ms, one
    /// recall in about 26 at 10k memories). Stamps four batches past due are
    /// committed in the recall all the same.
    pub defer_usage: bool,
}

impl MemoryOptions {
    /// Builder: prepare the models while the memory opens.
    #[must_use]
    pub fn with_warm_up(mut self, warm_up: bool) -> MemoryOptions {
        self.warm_up = warm_up;
        self
    }

    /// Builder: with the warm-up, prepare the models for batches too
    /// ([`MemoryOptions::warm_batches`]).
    pub fn with_warm_batches(mut self, warm_batches: bool) -> MemoryOptions {
        self.warm_batches = warm_batches;
        self
    }

    /// Builder: park recall usage at close (a one-shot process).
    #[must_use]
    pub fn with_park_usage(mut self, park_usage: bool) -> MemoryOptions {
        self.park_usage = park_usage;
        self
    }

    /// Builder: leave due usage commits to the caller (a server).
    #[must_use]
    pub fn with_defer_usage(mut self, defer_usage: bool) -> MemoryOptions {
        self.defer_usage = defer_usage;
        self
    }

    /// Builder: embedding model.
    #[must_use]
    pub fn with_embedder(mut self, embedder: EmbedderChoice) -> MemoryOptions {
        self.embedder = embedder;
        self
    }

    /// Builder: recall tuning.
    #[must_use]
    pub fn with_recall(mut self, recall: crate::recall::RecallConfig) -> MemoryOptions {
        self.recall = recall;
        self
    }

    /// Builder: a remote SPARQL store.
    #[must_use]
    pub fn with_remote(mut self, remote: crate::store::RemoteConfig) -> MemoryOptions {
        self.remote = Some(remote);
        self
    }
}

/// The facade. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Memory {
    store: Store,
    indexes: crate::index::Indexes,
    pub(crate) recall_config: crate::recall::RecallConfig,
    ids: Mutex<ulid::Generator>,
    usage: Mutex<usage::Usage>,
    /// `usage.journal` of a store on disk ([`usage`]).
    usage_journal: Option<std::path::PathBuf>,
    /// Park recall usage in the journal at close (one-shot processes).
    park_usage: bool,
    /// Leave due usage commits to the caller ([`MemoryOptions::defer_usage`]).
    defer_usage: bool,
    /// A thread is committing usage stamps.
    usage_flushing: std::sync::atomic::AtomicBool,
    /// Serializes catching the indexes up with a shared store.
    sync: Mutex<()>,
    /// This node's hold on its local directory (remote store: the store has
    /// no lock of its own, the indexes must have one writer).
    _node_lock: Option<std::fs::File>,
    /// What merges lately read of memories' texts ([`merge::Readings`]).
    readings: merge::Readings,
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Err(error) = self.settle_usage() {
            tracing::warn!(%error, "could not write pending recall usage");
        }
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("store", &self.store).finish_non_exhaustive()
    }
}

impl Memory {
    /// Opens the store in directory `path`, creating it if needed, with the
    /// embedding model the environment names.
    pub fn open(path: &Path) -> Result<Memory> {
        Memory::open_with(Some(path), MemoryOptions::default())
    }

    /// A memory in RAM without semantic search (tests, examples).
    pub fn open_in_memory() -> Result<Memory> {
        Memory::open_with(None, MemoryOptions::default().with_embedder(EmbedderChoice::Disabled))
    }

    /// Opens a store on disk (`Some(dir)`) or in RAM (`None`) with options.
    pub fn open_with(path: Option<&Path>, options: MemoryOptions) -> Result<Memory> {
        // The models first: they load on the engine threads while this
        // one opens the store (RocksDB's open is mostly one thread, about
        // a third of a cold `hmg recall`), instead of after it.
        let embedder = match options.embedder {
            EmbedderChoice::FromEnv => crate::index::embed::from_env(),
            EmbedderChoice::Disabled => Ok(Vec::new()),
            EmbedderChoice::Given(embedder) => Ok(vec![embedder]),
        };
        if options.warm_up
            && let Ok(models) = &embedder
        {
            crate::index::embed::start_warm_up(models.clone(), options.warm_batches);
        }
        let (store, node_lock) = match (&options.remote, path) {
            (Some(remote), path) => (Store::connect(remote.clone())?, path.map(lock_node_dir).transpose()?),
            (None, Some(path)) => (Store::open(path)?, None),
            (None, None) => (Store::open_in_memory()?, None),
        };
        let index_dir = path.map(|p| p.join("index"));
        let indexes = crate::index::Indexes::open(index_dir.as_deref(), &store, embedder)?;
        // Usage is parked only beside an embedded store (this node's own).
        let journal = path.filter(|_| options.remote.is_none()).map(usage::journal_path);
        let memory = Memory {
            store,
            indexes,
            recall_config: options.recall,
            ids: Mutex::new(ulid::Generator::new()),
            usage: Mutex::new(usage::Usage::new()),
            usage_journal: journal,
            park_usage: options.park_usage,
            defer_usage: options.defer_usage,
            usage_flushing: std::sync::atomic::AtomicBool::new(false),
            readings: merge::Readings::default(),
            sync: Mutex::new(()),
            _node_lock: node_lock,
        };
        memory.take_parked_usage();
        Ok(memory)
    }

    /// Brings the indexes up to the store's version when other nodes write
    /// it too (a no-op for an embedded store: every write goes through this
    /// process). Run before each recall, which therefore sees every write
    /// acknowledged anywhere before it started.
    pub(crate) fn sync_indexes(&self) -> Result<()> {
        if !self.store.is_shared() {
            return Ok(());
        }
        Ok(self.catch_up_indexes()?)
    }

    fn catch_up_indexes(&self) -> std::result::Result<(), crate::index::IndexError> {
        let _sync = self.sync.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.indexes.applied_version() >= self.store.snapshot_version()? {
            return Ok(());
        }
        self.indexes.catch_up(&self.store, &mut |_, _, _| {})
    }

    /// The derived indexes.
    pub fn indexes(&self) -> &crate::index::Indexes {
        &self.indexes
    }

    /// Rebuilds every index from the store (`hmg reindex`).
    pub fn reindex(&self, progress: crate::index::Progress<'_>) -> Result<()> {
        Ok(self.indexes.rebuild(&self.store, progress)?)
    }

    /// Makes index changes durable.
    pub fn persist_indexes(&self) -> Result<()> {
        Ok(self.indexes.persist()?)
    }

    /// Replaces the recall parameters (for experiments; see `hmg eval --tune`).
    pub fn set_recall_config(&mut self, config: crate::recall::RecallConfig) {
        self.recall_config = config;
    }

    /// Call before shutting down: persists the indexes and flushes the
    /// store's memtables, so the next open does not replay a large
    /// write-ahead log (after a 20k-line import that replay took 17 s).
    pub fn flush(&self) -> Result<()> {
        let started = std::time::Instant::now();
        self.settle_usage()?;
        let usage_us = started.elapsed().as_micros() as u64;
        self.persist_indexes()?;
        let indexes_us = started.elapsed().as_micros() as u64 - usage_us;
        self.store.flush()?;
        tracing::debug!(usage_us, indexes_us, total_us = started.elapsed().as_micros() as u64, "memory flushed");
        Ok(())
    }

    /// The store's version: the number of committed writes (every write of
    /// the facade, in any tenant, steps it once).
    pub fn snapshot_version(&self) -> Result<u64> {
        Ok(self.store.snapshot_version()?)
    }

    /// The underlying store (SPARQL, audit verification, tests).
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// A new, strictly increasing ULID.
    pub(crate) fn next_id(&self) -> Ulid {
        let mut generator = self.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        generator.generate().unwrap_or_else(|_| Ulid::generate())
    }

    pub(crate) fn now() -> DateTime<Utc> {
        Utc::now()
    }

    /// Loads one atom of `tenant` (`None` when it does not exist there).
    pub fn atom(&self, tenant: &str, id: AtomId) -> Result<Option<Atom>> {
        self.flush_usage()?;
        Ok(load_atom(&self.store, tenant, id)?)
    }

    /// Loads `id` or fails with [`MemoryError::AtomNotFound`].
    pub(crate) fn require_atom(&self, caller: &Caller, id: AtomId) -> Result<Atom> {
        self.atom(&caller.scope.tenant_id, id)?.ok_or(MemoryError::AtomNotFound(id))
    }

    /// The atom currently in effect in `id`'s evolution chain.
    pub fn chain_head(&self, tenant: &str, id: AtomId) -> Result<AtomId> {
        let mut current = id;
        // Chains are short; the bound only guards against corrupt cycles.
        for _ in 0..10_000 {
            let next = self
                .store
                .select(NamedQuery::RevisionsOf, tenant, &[("atom", store::atom_iri(current).into())])?
                .iter()
                .filter_map(|s| s.get("next").and_then(store::atom_id_of))
                .max();
            match next {
                Some(next) => current = next,
                None => return Ok(current),
            }
        }
        Err(StoreError::Corrupt(format!("evolution chain of {id} does not end")).into())
    }
}

/// Takes this node's exclusive hold on its local directory (its indexes),
/// released when the process ends; a second process on the same directory
/// gets [`StoreError::NodeLocked`] and relays through the first.
fn lock_node_dir(dir: &Path) -> Result<std::fs::File> {
    let io = |source| MemoryError::Store(StoreError::Io { path: dir.to_path_buf(), source });
    std::fs::create_dir_all(dir).map_err(io)?;
    let path = dir.join("node.lock");
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(MemoryError::Store(StoreError::NodeLocked { path })),
        Err(std::fs::TryLockError::Error(source)) => Err(io(source)),
    }
}

/// Checks and cleans a reason (required, redacted, bounded).
pub(crate) fn clean_reason(reason: &str) -> Result<String> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(MemoryError::invalid("reason", "a reason is required; it is written into the audit chain"));
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(MemoryError::invalid("reason", format!("longer than {MAX_REASON_CHARS} characters")));
    }
    Ok(text::redact(reason).text)
}

/// Checks a `source` attribution.
pub(crate) fn clean_source(source: Option<&str>, default: &str) -> Result<String> {
    let source = source.map(str::trim).filter(|s| !s.is_empty()).unwrap_or(default);
    if source.chars().count() > MAX_SOURCE_CHARS {
        return Err(MemoryError::invalid("source", format!("longer than {MAX_SOURCE_CHARS} characters")));
    }
    if source.chars().any(char::is_control) {
        return Err(MemoryError::invalid("source", "contains control characters"));
    }
    // An attribution is stored text too: a secret in it is redacted like
    // one in the content.
    Ok(text::redact(source).text)
}

/// One mutation: what happens to an existing atom and/or which atom is
/// created. [`Memory::apply`] writes it and its audit entry in one
/// transaction; every write of the facade goes through it (or through
/// [`Memory::apply_all`], several in one transaction).
pub(crate) struct Mutation<'a> {
    /// Audit action (`memorize`, `correct.replace`, …).
    pub(crate) action: String,
    /// Audit reason.
    pub(crate) reason: Option<String>,
    /// The existing atom acted on.
    pub(crate) target: Option<&'a Atom>,
    /// Its new status.
    pub(crate) new_status: Option<Status>,
    /// Its new epistemic.
    pub(crate) new_epistemic: Option<Epistemic>,
    /// Its new importance, and the time of that decision (`decayedAt`).
    pub(crate) new_importance: Option<(f64, DateTime<Utc>)>,
    /// Destroy its content (tombstone).
    pub(crate) destroy_content: bool,
    /// The atom created, with its entities.
    pub(crate) created: Option<(&'a Atom, &'a [text::Entity])>,
}

impl<'a> Mutation<'a> {
    pub(crate) fn new(action: impl Into<String>) -> Mutation<'a> {
        Mutation {
            action: action.into(),
            reason: None,
            target: None,
            new_status: None,
            new_epistemic: None,
            new_importance: None,
            destroy_content: false,
            created: None,
        }
    }
}

/// Stops [`Memory::apply_all`] before its `n`-th mutation with an error, so
/// tests can show that a failed batch commits nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FailAfter(pub(crate) Option<usize>);

impl Memory {
    /// Writes `mutation` and its audit entry in one transaction.
    pub(crate) fn apply(&self, caller: &Caller, mutation: Mutation<'_>) -> Result<()> {
        self.apply_all(caller, vec![mutation], FailAfter::default()).map(|_| ())
    }

    /// Writes every mutation, each with its audit entry, in one transaction:
    /// all of them commit or none. A target whose status changed since the
    /// caller read it fails the whole batch (nothing is written on a stale
    /// plan). Returns the audit entry ids, in order.
    pub(crate) fn apply_all(&self, caller: &Caller, mutations: Vec<Mutation<'_>>, fail_after: FailAfter) -> Result<Vec<Ulid>> {
        if mutations.is_empty() {
            return Ok(Vec::new());
        }
        let created: Vec<&Atom> = mutations.iter().filter_map(|m| m.created.map(|(atom, _)| atom)).collect();
        if self.indexes.embeds_in_parts(&created) {
            // A batch embedded in per-core parts runs while the store
            // commits (the engine threads on the models, this one on the
            // transaction): the vectors are needed only by the indexes,
            // after the commit. memorize_many of 1,000: 221-245 -> 267-301/s.
            let embedding = self.indexes.start_embedding(&created);
            return self.apply_embedding(caller, mutations, embedding, fail_after);
        }
        // A few atoms: their forward pass takes every core (OpenMP), and a
        // commit beside it would stall the pass at its barriers
        // (one-at-a-time memorize p99 10 -> 22 ms). Embedded first, so no
        // model runs under the store's writer lock.
        let audit_ids: Vec<Ulid> = mutations.iter().map(|_| self.next_id()).collect();
        let embedded = self.indexes.embed_atoms(&created);
        let version = self.commit_all(caller, &mutations, &audit_ids, fail_after)?;
        self.index_written(caller, &mutations, embedded, version);
        Ok(audit_ids)
    }

    /// [`Memory::apply_all`] of mutations whose new atoms' vectors are on
    /// their way ([`Indexes::start_embedding`], in `created` order): commits
    /// while the engines embed, then indexes. A caller that started the
    /// embedding earlier (a bulk write's next group) keeps the engines
    /// busy through this commit and indexing.
    pub(crate) fn apply_embedding(
        &self,
        caller: &Caller,
        mutations: Vec<Mutation<'_>>,
        embedding: crate::index::Embedding,
        fail_after: FailAfter,
    ) -> Result<Vec<Ulid>> {
        let audit_ids: Vec<Ulid> = mutations.iter().map(|_| self.next_id()).collect();
        let version = self.commit_all(caller, &mutations, &audit_ids, fail_after);
        let embedded = tracing::debug_span!("embedded").in_scope(|| self.indexes.finish_embedding(embedding));
        self.index_written(caller, &mutations, embedded, version?);
        Ok(audit_ids)
    }

    /// Brings the indexes up to a write that committed as `version`;
    /// `embedded` holds the new atoms' vectors, in their order among
    /// `mutations`. A failure is logged: the write stands, and the indexes
    /// catch up at the next open.
    fn index_written(&self, caller: &Caller, mutations: &[Mutation<'_>], embedded: Vec<Vec<Option<Vec<f32>>>>, version: u64) {
        let tenant = &caller.scope.tenant_id;
        let created = mutations.iter().filter_map(|m| m.created.map(|(atom, _)| atom));
        let vectors: Vec<(AtomId, Vec<Option<Vec<f32>>>)> = created.map(|atom| atom.id).zip(embedded).collect();
        let destroys = mutations.iter().any(|m| m.destroy_content);
        let mut touched: Vec<AtomId> = Vec::new();
        for mutation in mutations {
            for id in mutation.target.map(|t| t.id).into_iter().chain(mutation.created.map(|(a, _)| a.id)) {
                if !touched.contains(&id) {
                    touched.push(id);
                }
            }
        }
        let indexed = if self.store.is_shared() && self.indexes.applied_version() + 1 < version {
            // Another node wrote in between: replay the feed, ours included.
            self.catch_up_indexes()
        } else {
            self.indexes.on_change(&self.store, tenant, &touched, version, vectors)
        };
        if let Err(error) = indexed {
            // The write is committed; the indexes catch up at the next open.
            tracing::error!(%error, version, "index update failed after a committed write");
        } else if destroys && let Err(error) = self.indexes.purge() {
            // The marker stays: the purge is retried at the next open.
            tracing::error!(%error, version, "index purge failed after a tombstone");
        }
    }
}

impl Memory {
    /// The store's side of [`Memory::apply_all`]: the transaction (and the
    /// vacuum after content-destroying writes); returns its version.
    fn commit_all(&self, caller: &Caller, mutations: &[Mutation<'_>], audit_ids: &[Ulid], fail_after: FailAfter) -> Result<u64> {
        let tenant = &caller.scope.tenant_id;
        let destroys = mutations.iter().any(|m| m.destroy_content);
        if destroys {
            self.store.mark_vacuum_pending()?;
            self.indexes.mark_purge_pending()?;
        }
        let span = tracing::info_span!("write", action = %mutations[0].action, %tenant, mutations = mutations.len());
        let _entered = span.enter();
        let graph_node = store::tenant_graph(tenant);
        let version = self.store.write(|tx| {
            let version = tx.version()?;
            for (index, (mutation, audit_id)) in mutations.iter().zip(audit_ids).enumerate() {
                if fail_after.0 == Some(index) {
                    return Err(MemoryError::Store(StoreError::Corrupt(format!(
                        "injected failure before write {} of {}",
                        index + 1,
                        mutations.len()
                    ))));
                }
                if let Some(target) = mutation.target {
                    let iri = store::atom_iri(target.id);
                    let current = tx.object(iri.as_ref(), hmg::STATUS, graph_node.as_ref().into())?;
                    let current = current.as_ref().and_then(literal_value).and_then(|v| v.parse::<Status>().ok());
                    if current != Some(target.status) {
                        return Err(MemoryError::Conflict(format!(
                            "atom {} changed while this write was prepared (status now {}, expected {}); nothing was written, retry",
                            target.id,
                            current.map_or("missing", Status::as_str),
                            target.status
                        )));
                    }
                }
                write_one(tx, caller, mutation, *audit_id)?;
            }
            Ok::<_, MemoryError>(version)
        })?;
        if destroys {
            self.store.vacuum()?;
        }
        Ok(version)
    }
}

/// One mutation and its audit entry, inside `tx`.
fn write_one(tx: &mut WriteTx<'_>, caller: &Caller, mutation: &Mutation<'_>, audit_id: Ulid) -> Result<()> {
    let tenant = &caller.scope.tenant_id;
    if let Some((atom, entities)) = mutation.created {
        insert_atom(tx, atom, entities)?;
    }
    if let Some(target) = mutation.target {
        if let Some(status) = mutation.new_status {
            set_atom_literal(tx, tenant, target.id, hmg::STATUS, status.as_str())?;
        }
        if let Some(epistemic) = mutation.new_epistemic {
            set_atom_literal(tx, tenant, target.id, hmg::EPISTEMIC, epistemic.as_str())?;
        }
        if let Some((importance, at)) = mutation.new_importance {
            let graph_node = store::tenant_graph(tenant);
            let iri = store::atom_iri(target.id);
            tx.set(iri.as_ref(), hmg::IMPORTANCE, &Term::Literal(Literal::from(importance)), graph_node.as_ref().into())?;
            tx.set(iri.as_ref(), hmg::DECAYED_AT, &Term::Literal(crate::store::audit::datetime_literal(at)), graph_node.as_ref().into())?;
        }
        if mutation.destroy_content {
            destroy_content(tx, tenant, target.id)?;
        }
    }
    let (target, status_before, epistemic_before) = match mutation.target {
        Some(t) => (Some(t.id), Some(t.status), Some(t.epistemic)),
        None => (None, None, None),
    };
    let created = mutation.created.map(|(atom, _)| atom);
    let status_after = match mutation.target {
        Some(t) => Some(mutation.new_status.unwrap_or(t.status)),
        None => created.map(|a| a.status),
    };
    let epistemic_after = match mutation.target {
        Some(t) => Some(mutation.new_epistemic.unwrap_or(t.epistemic)),
        None => created.map(|a| a.epistemic),
    };
    crate::store::audit::append(
        tx,
        tenant,
        crate::store::audit::AuditRecord {
            actor: caller.actor.clone(),
            action: mutation.action.clone(),
            reason: mutation.reason.clone(),
            target,
            generated: created.map(|a| a.id),
            status_before,
            status_after,
            epistemic_before,
            epistemic_after,
        },
        audit_id,
        Memory::now(),
    )?;
    Ok(())
}

/// Removes an atom's content, content hash and entity links (the node, its
/// status, scope, chain links and audit trail stay), and every entity no
/// other atom mentions: an entity's name is text taken from the content.
fn destroy_content(tx: &mut WriteTx<'_>, tenant: &str, id: AtomId) -> Result<()> {
    let graph_node = store::tenant_graph(tenant);
    let graph: GraphNameRef<'_> = graph_node.as_ref().into();
    let iri = store::atom_iri(id);
    let mut entities = Vec::new();
    for predicate in [hmg::CONTENT, hmg::CONTENT_HASH, hmg::MENTIONS] {
        for quad in tx.quads(Some(iri.as_ref()), Some(predicate), None, graph)? {
            if predicate == hmg::MENTIONS {
                entities.push(quad.object.clone());
            }
            tx.remove(quad.as_ref());
        }
    }
    for entity in entities {
        let Term::NamedNode(node) = &entity else { continue };
        if tx.quads(None, Some(hmg::MENTIONS), Some(&entity), graph)?.is_empty() {
            for quad in tx.quads(Some(node.as_ref()), None, None, graph)? {
                tx.remove(quad.as_ref());
            }
        }
    }
    Ok(())
}
