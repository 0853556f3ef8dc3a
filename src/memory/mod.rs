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
pub mod reflect;
mod write;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use oxigraph::model::{GraphNameRef, Literal, NamedNode, QuadRef, Term};
use serde::Serialize;
use ulid::Ulid;

use crate::atom::{Atom, AtomId, Epistemic, Kind, Polarity, Status};
use crate::scope::{Scope, ScopeError};
use crate::store::{self, NamedQuery, Store, StoreError, WriteTx};
use crate::text;
use crate::vocab::{RDF_TYPE, RDFS_LABEL, hmg, prov};

pub use brief::{Brief, BriefOptions, ONBOARDING};
pub use correct::{CorrectAction, CorrectOutcome, CorrectRequest};
pub use export::{ExportFormat, ExportRecord, ImportReport, ImportedLine};
pub use govern::{GovernAction, GovernOutcome, GovernRequest};
pub use merge::{MergeEvent, MergeResult};
pub use reflect::{
    ReflectAction, ReflectCounts, ReflectFilters, ReflectLifecycle, ReflectPromotion, ReflectReport, ReflectRequest, ReflectSummary, parse_iso8601,
};
pub use read::{AtomFilter, AtomPage, AtomView, AuditView, History, IndexCounts, MAX_PAGE, ScopeView, Stats};
pub use write::{HandoffOutcome, HandoffRequest, MemorizeOutcome, MemorizeRequest};

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
    Index(#[from] crate::indexes::IndexError),
    /// The caller may not act on what it asked for (another owner, team or
    /// scope than its own).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The data changed between reading and writing; nothing was written.
    #[error("conflict: {0}")]
    Conflict(String),
}

impl MemoryError {
    /// Whether the caller can fix this by changing the request.
    pub fn is_caller_error(&self) -> bool {
        !matches!(self, MemoryError::Store(_) | MemoryError::Index(_))
    }

    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
        MemoryError::InvalidInput { field, message: message.into() }
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
    Given(std::sync::Arc<dyn crate::embed::Embedder>),
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
}

impl MemoryOptions {
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
}

/// The facade. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Memory {
    store: Store,
    indexes: crate::indexes::Indexes,
    pub(crate) recall_config: crate::recall::RecallConfig,
    ids: Mutex<ulid::Generator>,
    usage: Mutex<Usage>,
}

/// Recall usage not yet written: (tenant, atom) → (last recalled, recalls).
/// Stamps are bookkeeping, so they are batched instead of costing a store
/// write per recall; a crash may lose the last few seconds of them, never a
/// memory.
#[derive(Debug)]
struct Usage {
    pending: HashMap<(String, AtomId), (DateTime<Utc>, u64)>,
    since: std::time::Instant,
}

/// Pending usage stamps written once there are this many…
const USAGE_BATCH: usize = 256;
/// …or once the oldest is this old.
const USAGE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(10);

impl Drop for Memory {
    fn drop(&mut self) {
        if let Err(error) = self.flush_usage() {
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
        let store = match path {
            Some(path) => Store::open(path)?,
            None => Store::open_in_memory()?,
        };
        let embedder = match options.embedder {
            EmbedderChoice::FromEnv => crate::embed::from_env(),
            EmbedderChoice::Disabled => Ok(Vec::new()),
            EmbedderChoice::Given(embedder) => Ok(vec![embedder]),
        };
        let index_dir = path.map(|p| p.join("index"));
        let indexes = crate::indexes::Indexes::open(index_dir.as_deref(), &store, embedder)?;
        Ok(Memory {
            store,
            indexes,
            recall_config: options.recall,
            ids: Mutex::new(ulid::Generator::new()),
            usage: Mutex::new(Usage { pending: HashMap::new(), since: std::time::Instant::now() }),
        })
    }

    /// The derived indexes.
    pub fn indexes(&self) -> &crate::indexes::Indexes {
        &self.indexes
    }

    /// Rebuilds every index from the store (`hmg reindex`).
    pub fn reindex(&self, progress: crate::indexes::Progress<'_>) -> Result<()> {
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
        self.flush_usage()?;
        self.persist_indexes()?;
        Ok(self.store.flush()?)
    }

    /// The underlying store (SPARQL, audit verification, tests).
    pub fn store(&self) -> &Store {
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
        load_atom(&self.store, tenant, id)
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

impl Memory {
    /// Notes that a recall returned `ids`: `lastRecalledAt` = now and
    /// `recallCount` + 1, written in batches (see [`USAGE_BATCH`]). Usage
    /// bookkeeping, not a change of memory: no audit entry.
    pub(crate) fn record_recalls(&self, tenant: &str, ids: &[AtomId]) -> Result<()> {
        let now = Memory::now();
        let due = {
            let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if usage.pending.is_empty() {
                usage.since = std::time::Instant::now();
            }
            for id in ids {
                let entry = usage.pending.entry((tenant.to_owned(), *id)).or_insert((now, 0));
                entry.0 = now;
                entry.1 += 1;
            }
            usage.pending.len() >= USAGE_BATCH || usage.since.elapsed() >= USAGE_MAX_AGE
        };
        if due { self.flush_usage() } else { Ok(()) }
    }

    /// Writes the pending recall usage (one transaction).
    pub(crate) fn flush_usage(&self) -> Result<()> {
        let pending = {
            let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            std::mem::take(&mut usage.pending)
        };
        if pending.is_empty() {
            return Ok(());
        }
        self.store.write(|tx| {
            for ((tenant, id), (at, recalls)) in &pending {
                let graph_node = store::tenant_graph(tenant);
                let graph: GraphNameRef<'_> = graph_node.as_ref().into();
                let iri = store::atom_iri(*id);
                // A tombstoned or unknown atom keeps no usage.
                if tx.object(iri.as_ref(), hmg::STATUS, graph)?.is_none() {
                    continue;
                }
                let count = tx.object(iri.as_ref(), hmg::RECALL_COUNT, graph)?.as_ref().and_then(literal_value).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                tx.set(iri.as_ref(), hmg::LAST_RECALLED_AT, &Term::Literal(crate::audit::datetime_literal(*at)), graph)?;
                tx.set(iri.as_ref(), hmg::RECALL_COUNT, &Term::Literal(Literal::from(count + i64::try_from(*recalls).unwrap_or(i64::MAX))), graph)?;
            }
            Ok::<_, MemoryError>(())
        })
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

fn kind_class(kind: Kind) -> oxigraph::model::NamedNodeRef<'static> {
    match kind {
        Kind::Fact => hmg::FACT,
        Kind::Handoff => hmg::HANDOFF,
        Kind::Lesson => hmg::LESSON,
        Kind::Episode => hmg::EPISODE,
        Kind::Reflection => hmg::REFLECTION,
    }
}

fn kind_of_class(iri: &str) -> Option<Kind> {
    Kind::ALL.iter().copied().find(|k| kind_class(*k).as_str() == iri)
}

/// Writes a complete atom (and its scope node and entities) inside `tx`.
///
/// The last line of defence for secrets: the atom's content, source and
/// session are redacted again here (a no-op for text that went through
/// admission), so a write path that forgot the pass still stores nothing
/// secret, and the entities are then taken from the redacted text.
pub(crate) fn insert_atom(tx: &mut WriteTx<'_>, atom: &Atom, entities: &[text::Entity]) -> Result<()> {
    let redacted_content = atom.content.as_deref().map(text::redact);
    let redacted_source = text::redact(&atom.source);
    let redacted_session = atom.session_id.as_deref().map(text::redact);
    let missed = redacted_content.as_ref().is_some_and(text::Redaction::changed)
        || redacted_source.changed()
        || redacted_session.as_ref().is_some_and(text::Redaction::changed);
    if missed {
        tracing::error!(atom = %atom.id, "a write path skipped redaction; redacted at the store boundary");
        let mut clean = atom.clone();
        clean.content = redacted_content.map(|r| r.text);
        clean.source = redacted_source.text;
        clean.session_id = redacted_session.map(|r| r.text);
        let entities = clean.content.as_deref().map(text::extract_entities).unwrap_or_default();
        clean.entities = entities.iter().map(|e| e.name.clone()).collect();
        return write_atom_quads(tx, &clean, &entities);
    }
    write_atom_quads(tx, atom, entities)
}

fn write_atom_quads(tx: &mut WriteTx<'_>, atom: &Atom, entities: &[text::Entity]) -> Result<()> {
    let tenant = &atom.scope.tenant_id;
    let graph_node = store::tenant_graph(tenant);
    let graph: GraphNameRef<'_> = graph_node.as_ref().into();
    let iri = store::atom_iri(atom.id);
    let scope_iri = store::scope_iri(&atom.scope);

    tx.insert(QuadRef::new(&iri, RDF_TYPE, hmg::ATOM, graph));
    tx.insert(QuadRef::new(&iri, RDF_TYPE, kind_class(atom.kind), graph));
    if let Some(content) = &atom.content {
        tx.insert(QuadRef::new(&iri, hmg::CONTENT, &Literal::from(content.as_str()), graph));
        tx.insert(QuadRef::new(&iri, hmg::CONTENT_HASH, &Literal::from(text::content_hash(content)), graph));
    }
    tx.insert(QuadRef::new(&iri, hmg::SOURCE, &Literal::from(atom.source.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::STATUS, &Literal::from(atom.status.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::EPISTEMIC, &Literal::from(atom.epistemic.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::POLARITY, &Literal::from(atom.polarity.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::LANGUAGE, &Literal::from(atom.language.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::IMPORTANCE, &Literal::from(atom.importance), graph));
    tx.insert(QuadRef::new(&iri, hmg::CREATED_AT, &crate::audit::datetime_literal(atom.created_at), graph));
    if let Some(session) = &atom.session_id {
        tx.insert(QuadRef::new(&iri, hmg::SESSION_ID, &Literal::from(session.as_str()), graph));
    }
    if let Some(expires_at) = atom.expires_at {
        tx.insert(QuadRef::new(&iri, hmg::EXPIRES_AT, &crate::audit::datetime_literal(expires_at), graph));
    }
    tx.insert(QuadRef::new(&iri, hmg::IN_SCOPE, &scope_iri, graph));
    tx.insert(QuadRef::new(&scope_iri, RDF_TYPE, hmg::SCOPE, graph));
    tx.insert(QuadRef::new(&scope_iri, hmg::TENANT_ID, &Literal::from(tenant.as_str()), graph));
    for (predicate, value) in [
        (hmg::WORKSPACE, &atom.scope.workspace),
        (hmg::REPOSITORY, &atom.scope.repository),
        (hmg::BRANCH, &atom.scope.branch),
    ] {
        if let Some(value) = value {
            tx.insert(QuadRef::new(&scope_iri, predicate, &Literal::from(value.as_str()), graph));
        }
    }
    if let Some(old) = atom.supersedes {
        tx.insert(QuadRef::new(&iri, prov::WAS_REVISION_OF, &store::atom_iri(old), graph));
    }
    for source in &atom.derived_from {
        tx.insert(QuadRef::new(&iri, prov::WAS_DERIVED_FROM, &store::atom_iri(*source), graph));
    }
    for entity in entities {
        let entity_iri = store::entity_iri(tenant, &entity.key);
        if tx.object(entity_iri.as_ref(), RDFS_LABEL, graph)?.is_none() {
            tx.insert(QuadRef::new(&entity_iri, RDF_TYPE, hmg::ENTITY, graph));
            tx.insert(QuadRef::new(&entity_iri, RDFS_LABEL, &Literal::from(entity.name.as_str()), graph));
            tx.insert(QuadRef::new(&entity_iri, hmg::ENTITY_KIND, &Literal::from(entity.kind.as_str()), graph));
        }
        tx.insert(QuadRef::new(&iri, hmg::MENTIONS, &entity_iri, graph));
    }
    Ok(())
}

/// Sets a single-valued literal property of an atom inside `tx`.
pub(crate) fn set_atom_literal(
    tx: &mut WriteTx<'_>,
    tenant: &str,
    id: AtomId,
    predicate: oxigraph::model::NamedNodeRef<'_>,
    value: &str,
) -> Result<()> {
    let graph_node = store::tenant_graph(tenant);
    let iri = store::atom_iri(id);
    tx.set(iri.as_ref(), predicate, &Term::Literal(Literal::from(value)), graph_node.as_ref().into())?;
    Ok(())
}

fn literal_value(term: &Term) -> Option<&str> {
    match term {
        Term::Literal(l) => Some(l.value()),
        _ => None,
    }
}

/// Reads an atom from its quads.
pub(crate) fn load_atom(store: &Store, tenant: &str, id: AtomId) -> Result<Option<Atom>> {
    load_atom_with(store, tenant, id, true)
}

/// Reads an atom; without `with_entities` its entity names are left empty
/// (one lookup less per entity: what recall hydration needs).
pub(crate) fn load_atom_with(store: &Store, tenant: &str, id: AtomId, with_entities: bool) -> Result<Option<Atom>> {
    load_atom_cached(store, tenant, id, with_entities, &mut HashMap::new())
}

/// Reads an atom, reusing scopes already read (`scopes`): most atoms of a
/// recall share a handful of scope nodes.
pub(crate) fn load_atom_cached(
    store: &Store,
    tenant: &str,
    id: AtomId,
    with_entities: bool,
    scopes: &mut HashMap<NamedNode, Scope>,
) -> Result<Option<Atom>> {
    let iri = store::atom_iri(id);
    let quads = store.describe(tenant, iri.as_ref())?;
    if quads.is_empty() {
        return Ok(None);
    }
    let corrupt = |what: &str| MemoryError::Store(StoreError::Corrupt(format!("atom {id} has no valid {what}")));
    let mut kind = None;
    let mut content = None;
    let mut source = None;
    let mut status = None;
    let mut epistemic = None;
    let mut polarity = None;
    let mut language = None;
    let mut importance = 0.5;
    let mut created_at = None;
    let mut scope_node: Option<NamedNode> = None;
    let mut entity_nodes = Vec::new();
    let mut supersedes = None;
    let mut derived_from = Vec::new();
    let mut session_id = None;
    let mut expires_at = None;
    let mut last_recalled_at = None;
    let mut recall_count = 0;
    let mut last_decayed_at = None;
    for quad in &quads {
        let p = quad.predicate.as_ref();
        let o = &quad.object;
        if p == RDF_TYPE {
            if let Term::NamedNode(class) = o
                && let Some(k) = kind_of_class(class.as_str())
            {
                kind = Some(k);
            }
        } else if p == hmg::CONTENT {
            content = literal_value(o).map(str::to_owned);
        } else if p == hmg::SOURCE {
            source = literal_value(o).map(str::to_owned);
        } else if p == hmg::STATUS {
            status = literal_value(o).and_then(|v| v.parse::<Status>().ok());
        } else if p == hmg::EPISTEMIC {
            epistemic = literal_value(o).and_then(|v| v.parse::<Epistemic>().ok());
        } else if p == hmg::POLARITY {
            polarity = literal_value(o).and_then(|v| v.parse::<Polarity>().ok());
        } else if p == hmg::LANGUAGE {
            language = literal_value(o).map(str::to_owned);
        } else if p == hmg::IMPORTANCE {
            importance = literal_value(o).and_then(|v| v.parse().ok()).unwrap_or(0.5);
        } else if p == hmg::CREATED_AT {
            created_at = crate::audit::parse_datetime(o);
        } else if p == hmg::SESSION_ID {
            session_id = literal_value(o).map(str::to_owned);
        } else if p == hmg::EXPIRES_AT {
            expires_at = crate::audit::parse_datetime(o);
        } else if p == hmg::LAST_RECALLED_AT {
            last_recalled_at = crate::audit::parse_datetime(o);
        } else if p == hmg::DECAYED_AT {
            last_decayed_at = crate::audit::parse_datetime(o);
        } else if p == hmg::RECALL_COUNT {
            recall_count = literal_value(o).and_then(|v| v.parse().ok()).unwrap_or(0);
        } else if p == hmg::IN_SCOPE {
            if let Term::NamedNode(n) = o {
                scope_node = Some(n.clone());
            }
        } else if p == hmg::MENTIONS {
            if let Term::NamedNode(n) = o {
                entity_nodes.push(n.clone());
            }
        } else if p == prov::WAS_REVISION_OF {
            supersedes = store::atom_id_of(o);
        } else if p == prov::WAS_DERIVED_FROM {
            derived_from.extend(store::atom_id_of(o));
        }
    }
    let scope_node = scope_node.ok_or_else(|| corrupt("scope"))?;
    let scope = match scopes.get(&scope_node) {
        Some(scope) => scope.clone(),
        None => {
            let mut scope = Scope::tenant(tenant);
            for quad in store.describe(tenant, scope_node.as_ref())? {
                let value = literal_value(&quad.object).map(str::to_owned);
                let p = quad.predicate.as_ref();
                if p == hmg::WORKSPACE {
                    scope.workspace = value;
                } else if p == hmg::REPOSITORY {
                    scope.repository = value;
                } else if p == hmg::BRANCH {
                    scope.branch = value;
                }
            }
            scopes.insert(scope_node, scope.clone());
            scope
        }
    };
    let mut entities = Vec::with_capacity(entity_nodes.len());
    for node in entity_nodes.into_iter().filter(|_| with_entities) {
        let label = store
            .describe(tenant, node.as_ref())?
            .into_iter()
            .find(|q| q.predicate.as_ref() == RDFS_LABEL)
            .and_then(|q| literal_value(&q.object).map(str::to_owned));
        entities.extend(label);
    }
    entities.sort();
    Ok(Some(Atom {
        id,
        content,
        kind: kind.ok_or_else(|| corrupt("kind"))?,
        source: source.unwrap_or_else(|| "agent".to_owned()),
        scope,
        epistemic: epistemic.ok_or_else(|| corrupt("epistemic"))?,
        polarity: polarity.ok_or_else(|| corrupt("polarity"))?,
        status: status.ok_or_else(|| corrupt("status"))?,
        created_at: created_at.ok_or_else(|| corrupt("created_at"))?,
        language: language.unwrap_or_else(|| "und".to_owned()),
        importance,
        entities,
        supersedes,
        derived_from,
        session_id,
        expires_at,
        last_recalled_at,
        recall_count,
        last_decayed_at,
    }))
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
        let tenant = &caller.scope.tenant_id;
        if mutations.is_empty() {
            return Ok(Vec::new());
        }
        let audit_ids: Vec<Ulid> = mutations.iter().map(|_| self.next_id()).collect();
        // Embed before taking the writer lock: no model runs under it.
        let vectors: Vec<(AtomId, Vec<Option<Vec<f32>>>)> =
            mutations.iter().filter_map(|m| m.created.map(|(atom, _)| (atom.id, self.indexes.embed_atom(atom)))).collect();
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
            for (index, (mutation, audit_id)) in mutations.iter().zip(&audit_ids).enumerate() {
                if fail_after.0 == Some(index) {
                    return Err(MemoryError::Store(StoreError::Corrupt(format!("injected failure before write {} of {}", index + 1, mutations.len()))));
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
        let mut touched: Vec<AtomId> = Vec::new();
        for mutation in &mutations {
            for id in mutation.target.map(|t| t.id).into_iter().chain(mutation.created.map(|(a, _)| a.id)) {
                if !touched.contains(&id) {
                    touched.push(id);
                }
            }
        }
        if let Err(error) = self.indexes.on_change(&self.store, tenant, &touched, version, vectors) {
            // The write is committed; the indexes catch up at the next open.
            tracing::error!(%error, version, "index update failed after a committed write");
        } else if destroys && let Err(error) = self.indexes.purge() {
            // The marker stays: the purge is retried at the next open.
            tracing::error!(%error, version, "index purge failed after a tombstone");
        }
        Ok(audit_ids)
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
            tx.set(iri.as_ref(), hmg::DECAYED_AT, &Term::Literal(crate::audit::datetime_literal(at)), graph_node.as_ref().into())?;
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
    crate::audit::append(
        tx,
        tenant,
        crate::audit::AuditRecord {
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
