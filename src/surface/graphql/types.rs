//! The GraphQL wire types, named for the domain (`Atom`, `AuditEntry`,
//! `Entity`, …): built from the facade's views, so the Rust SDK does not
//! depend on GraphQL. Field names and docs are the schema's
//! (`schema/schema.graphql`).

use async_graphql::{Enum, InputObject, SimpleObject};

use crate::memory;

/// Where an atom was written.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct Scope {
    /// Tenant.
    pub tenant_id: String,
    /// Workspace.
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
}

impl From<memory::ScopeView> for Scope {
    fn from(s: memory::ScopeView) -> Scope {
        Scope { tenant_id: s.tenant_id, workspace: s.workspace, repository: s.repository, branch: s.branch }
    }
}

/// A memory atom.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct Atom {
    /// ULID.
    pub atom_id: String,
    /// Content, or a placeholder saying why it is hidden.
    pub content: String,
    /// fact / handoff / lesson / episode / reflection.
    pub kind: String,
    /// Attribution.
    pub source: String,
    /// Where it was written.
    pub scope: Scope,
    /// actual / necessary / possible.
    pub epistemic: String,
    /// affirmative / negative / conditional.
    pub polarity: String,
    /// Lifecycle status.
    pub status: String,
    /// RFC 3339.
    pub created_at: String,
    /// Detected language.
    pub language: String,
    /// 0–1.
    pub importance: f64,
    /// Entities mentioned (empty once tombstoned).
    pub entities: Vec<String>,
    /// The atom this one replaced.
    pub supersedes: Option<String>,
    /// Atoms this one was derived from.
    pub derived_from: Vec<String>,
    /// Originating session.
    pub session_id: Option<String>,
}

impl From<memory::AtomView> for Atom {
    fn from(a: memory::AtomView) -> Atom {
        Atom {
            atom_id: a.atom_id,
            content: a.content,
            kind: a.kind.as_str().to_owned(),
            source: a.source,
            scope: a.scope.into(),
            epistemic: a.epistemic.as_str().to_owned(),
            polarity: a.polarity.as_str().to_owned(),
            status: a.status.as_str().to_owned(),
            created_at: a.created_at,
            language: a.language,
            importance: a.importance,
            entities: a.entities,
            supersedes: a.supersedes,
            derived_from: a.derived_from,
            session_id: a.session_id,
        }
    }
}

/// One entry of the tenant's hash-linked audit chain.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct AuditEntry {
    /// Entry id.
    pub audit_id: String,
    /// Position in the tenant's chain.
    pub seq: u64,
    /// RFC 3339.
    pub time: String,
    /// Who.
    pub actor: String,
    /// What.
    pub action: String,
    /// Why.
    pub reason: Option<String>,
    /// Atom acted on.
    pub target: Option<String>,
    /// Atom created.
    pub generated: Option<String>,
    /// Status before.
    pub status_before: Option<String>,
    /// Status after.
    pub status_after: Option<String>,
    /// Epistemic before.
    pub epistemic_before: Option<String>,
    /// Epistemic after.
    pub epistemic_after: Option<String>,
    /// Previous entry's hash.
    pub prev_hash: String,
    /// This entry's hash.
    pub hash: String,
}

impl From<memory::AuditView> for AuditEntry {
    fn from(e: memory::AuditView) -> AuditEntry {
        AuditEntry {
            audit_id: e.audit_id,
            seq: e.seq,
            time: e.time,
            actor: e.actor,
            action: e.action,
            reason: e.reason,
            target: e.target,
            generated: e.generated,
            status_before: e.status_before,
            status_after: e.status_after,
            epistemic_before: e.epistemic_before,
            epistemic_after: e.epistemic_after,
            prev_hash: e.prev_hash,
            hash: e.hash,
        }
    }
}

/// An atom's whole evolution chain and audit trail.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct History {
    /// The atom asked about.
    pub atom_id: String,
    /// The atom in effect in the chain now.
    pub head: String,
    /// Every atom of the chain, oldest first.
    pub chain: Vec<Atom>,
    /// Lessons and reflections derived from any atom of the chain.
    pub derived: Vec<Atom>,
    /// Audit entries about any of them, in chain order.
    pub audit: Vec<AuditEntry>,
}

impl From<memory::History> for History {
    fn from(h: memory::History) -> History {
        History {
            atom_id: h.atom_id,
            head: h.head,
            chain: h.chain.into_iter().map(Atom::from).collect(),
            derived: h.derived.into_iter().map(Atom::from).collect(),
            audit: h.audit.into_iter().map(AuditEntry::from).collect(),
        }
    }
}

/// Per-index coverage counts.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct IndexCounts {
    /// Atoms with a vector in the semantic index.
    pub semantic: u64,
    /// Atoms in the keyword index.
    pub keyword: u64,
    /// Atoms in the temporal index.
    pub temporal: u64,
    /// Atoms in the categorical index.
    pub categorical: u64,
}

/// Counts of the caller's tenant (`memory_stats`).
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct Stats {
    /// Atoms of the caller's tenant (every status).
    pub atoms: u64,
    /// Graph edges: entity mentions, revisions, derivations.
    pub edges: u64,
    /// Index coverage.
    pub indexes: IndexCounts,
    /// The tenant's write counter (the length of its audit chain):
    /// increases with every write of this tenant, and only with those.
    pub snapshot_version: u64,
    /// Why semantic coverage is 0, when it is off.
    pub warning: Option<String>,
}

impl From<memory::Stats> for Stats {
    fn from(s: memory::Stats) -> Stats {
        let i = s.indexes;
        Stats {
            atoms: s.atoms,
            edges: s.edges,
            indexes: IndexCounts { semantic: i.semantic, keyword: i.keyword, temporal: i.temporal, categorical: i.categorical },
            snapshot_version: s.snapshot_version,
            warning: s.warning,
        }
    }
}

/// One of the five published reflect actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[graphql(remote = "crate::memory::ReflectAction", rename_items = "lowercase")]
pub(crate) enum ReflectAction {
    /// Recent episodes → reflection records.
    Summarize,
    /// Repeated episodic evidence → a durable fact.
    Promote,
    /// Past-due memories → expired.
    Expire,
    /// Importance of idle memories decays.
    Decay,
    /// Idle, unimportant memories → archived.
    Archive,
}

/// Input of `reflect`, as the seed names it. Every field is optional.
#[derive(Debug, Clone, Default, InputObject)]
pub(crate) struct ReflectInput {
    /// Comma-separated actions (default all five; aliases accepted).
    pub actions_csv: Option<String>,
    /// Plan and count only; write nothing.
    #[graphql(default)]
    pub dry_run: bool,
    /// Look-back window for summarize/promote in hours (default 24, > 0).
    pub time_window_hours: Option<f64>,
    /// ISO 8601 start of the window (overrides `time_window_hours`).
    pub since: Option<String>,
    /// ISO 8601 end of the window and "now" of the lifecycle actions.
    pub until: Option<String>,
    /// SQL-LIKE pattern (`%`, `_`) over the logical path
    /// `workspace/repository@branch` (tenant-wide atoms: empty path).
    pub path_filter: Option<String>,
    /// Owner (tenant); `%` or the caller's own tenant only.
    pub owner_filter: Option<String>,
    /// `personal` (tenant-wide atoms), `%`, or a LIKE pattern over the
    /// repository name.
    pub bucket: Option<String>,
    /// `workspace/repository[@branch]` inside the caller's boundary.
    pub scope: Option<String>,
    /// Team (workspace); must be the caller's own when it has one.
    pub team_id: Option<String>,
    /// Candidate budget: at most this many atoms are acted on (default 500,
    /// clamped to 5,000).
    pub limit: Option<i64>,
}

impl From<ReflectInput> for memory::ReflectRequest {
    fn from(i: ReflectInput) -> memory::ReflectRequest {
        memory::ReflectRequest {
            actions_csv: i.actions_csv,
            dry_run: i.dry_run,
            time_window_hours: i.time_window_hours,
            since: i.since,
            until: i.until,
            path_filter: i.path_filter,
            owner_filter: i.owner_filter,
            bucket: i.bucket,
            scope: i.scope,
            team_id: i.team_id,
            limit: i.limit,
            fail_after_writes: None,
        }
    }
}

/// The filters as applied.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct ReflectFilters {
    /// Logical path pattern.
    pub path_filter: String,
    /// Owner (the caller's tenant).
    pub owner_filter: String,
    /// Bucket pattern.
    pub bucket: String,
    /// Scope, if narrowed.
    pub scope: Option<String>,
    /// Team, if narrowed.
    pub team_id: Option<String>,
    /// Candidate budget after clamping.
    pub limit: usize,
    /// RFC 3339 start of the window.
    pub since: String,
    /// RFC 3339 end of the window.
    pub until: String,
}

/// A reflection record (planned or written).
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct ReflectSummary {
    /// The reflection atom (absent in a dry run).
    pub atom_id: Option<String>,
    /// Its scope.
    pub scope: String,
    /// The session summarized (or `day:YYYY-MM-DD`).
    pub group: String,
    /// The episodes summarized.
    pub sources: Vec<String>,
    /// The reflection's text.
    pub content: String,
}

/// A promotion (planned or written).
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct ReflectPromotion {
    /// The new fact (absent in a dry run).
    pub atom_id: Option<String>,
    /// Its scope.
    pub scope: String,
    /// The fact's text.
    pub content: String,
    /// The episodes that support it.
    pub sources: Vec<String>,
    /// The distinct sessions they came from.
    pub sessions: Vec<String>,
}

/// An expire, decay or archive decision.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct ReflectLifecycle {
    /// The atom.
    pub atom_id: String,
    /// `expire`, `decay` or `archive`.
    pub action: ReflectAction,
    /// Status or importance before.
    pub before: String,
    /// Status or importance after.
    pub after: String,
    /// Why.
    pub reason: String,
}

/// The five counts.
#[derive(Debug, Clone, Copy, SimpleObject)]
pub(crate) struct ReflectCounts {
    /// Reflection records.
    pub summarized: usize,
    /// Facts promoted.
    pub promoted: usize,
    /// Atoms expired.
    pub expired: usize,
    /// Atoms whose importance decayed.
    pub decayed: usize,
    /// Atoms archived.
    pub archived: usize,
}

/// Output of `reflect`.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct ReflectReport {
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The normalized actions, in run order.
    pub actions: Vec<ReflectAction>,
    /// The filters and window as applied.
    pub filters: ReflectFilters,
    /// Reflection records.
    pub summaries: Vec<ReflectSummary>,
    /// Promotions.
    pub promotions: Vec<ReflectPromotion>,
    /// Expire, decay and archive decisions.
    pub lifecycle: Vec<ReflectLifecycle>,
    /// Counts per action.
    pub counts: ReflectCounts,
    /// Whether the candidate budget stopped the plan early.
    pub truncated: bool,
    /// Audit entries written (empty in a dry run).
    pub audit_record_ids: Vec<String>,
}

impl From<memory::ReflectReport> for ReflectReport {
    fn from(r: memory::ReflectReport) -> ReflectReport {
        let f = r.filters;
        let c = r.counts;
        ReflectReport {
            dry_run: r.dry_run,
            actions: r.actions.into_iter().map(ReflectAction::from).collect(),
            filters: ReflectFilters {
                path_filter: f.path_filter,
                owner_filter: f.owner_filter,
                bucket: f.bucket,
                scope: f.scope,
                team_id: f.team_id,
                limit: f.limit,
                since: f.since,
                until: f.until,
            },
            summaries: r
                .summaries
                .into_iter()
                .map(|s| ReflectSummary { atom_id: s.atom_id, scope: s.scope, group: s.group, sources: s.sources, content: s.content })
                .collect(),
            promotions: r
                .promotions
                .into_iter()
                .map(|p| ReflectPromotion {
                    atom_id: p.atom_id,
                    scope: p.scope,
                    content: p.content,
                    sources: p.sources,
                    sessions: p.sessions,
                })
                .collect(),
            lifecycle: r
                .lifecycle
                .into_iter()
                .map(|l| ReflectLifecycle {
                    atom_id: l.atom_id,
                    action: l.action.into(),
                    before: l.before,
                    after: l.after,
                    reason: l.reason,
                })
                .collect(),
            counts: ReflectCounts {
                summarized: c.summarized,
                promoted: c.promoted,
                expired: c.expired,
                decayed: c.decayed,
                archived: c.archived,
            },
            truncated: r.truncated,
            audit_record_ids: r.audit_record_ids,
        }
    }
}
