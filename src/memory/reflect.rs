//! reflect (SPEC §6, seed 004): a bounded maintenance pass over the caller's
//! memories. Five actions, each planned from one snapshot and then written
//! in one transaction:
//!
//! - `summarize`: active episodes of the window, grouped by scope and
//!   session (or day), become one reflection atom per group of at least
//!   [`MIN_SUMMARY_EPISODES`], extractively (the most central sentences,
//!   no model), derived from its episodes (`prov:wasDerivedFrom`).
//! - `promote`: episodes of the window that say the same thing
//!   (term overlap ≥ [`PROMOTE_OVERLAP`]) in at least two sessions become a
//!   durable fact derived from them.
//! - `expire`: active atoms whose `expires_at` has passed become `expired`.
//! - `decay`: active atoms idle (not created, recalled or decayed) for
//!   [`DECAY_IDLE_DAYS`] lose importance (× [`DECAY_FACTOR`]).
//! - `archive`: active atoms idle for [`ARCHIVE_IDLE_DAYS`] whose
//!   importance is below [`ARCHIVE_BELOW`] become `archived`.
//!
//! Lessons and constraints (`epistemic: necessary`) never decay or archive.
//! "Now" for the lifecycle actions is `until` (default: the current time).
//!
//! **Invariants:** a dry run computes the same plan and writes nothing; a
//! real run writes every decision with its audit entry in one transaction
//! (all or nothing, and nothing if any target changed since planning);
//! filters only narrow the caller's boundary, never widen it.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};

use super::merge::jaccard;
use super::write::{initial_importance, new_atom};
use super::{Caller, FailAfter, Memory, MemoryError, Mutation, Result};
use crate::atom::{Atom, AtomId, Epistemic, Kind, Status};
use crate::scope::Visibility;
use crate::store::{self, NamedQuery};
use crate::text::analyze::{Mode, terms};

/// Default and largest candidate budget.
pub const DEFAULT_LIMIT: usize = 500;
/// Largest candidate budget; larger values are clamped to it.
pub const MAX_LIMIT: usize = 5_000;
/// Default look-back window for summarize and promote, in hours.
pub const DEFAULT_WINDOW_HOURS: f64 = 24.0;
/// Episodes a group needs before it is summarized.
pub const MIN_SUMMARY_EPISODES: usize = 2;
/// Sentences a summary keeps.
pub const SUMMARY_SENTENCES: usize = 3;
/// Term overlap (Jaccard) at which two episodes count as the same evidence.
pub const PROMOTE_OVERLAP: f32 = 0.5;
/// Idle days before importance decays.
pub const DECAY_IDLE_DAYS: i64 = 7;
/// Importance multiplier per decay.
pub const DECAY_FACTOR: f64 = 0.8;
/// Importance never decays below this.
pub const DECAY_FLOOR: f64 = 0.05;
/// Idle days before a low-importance atom is archived.
pub const ARCHIVE_IDLE_DAYS: i64 = 30;
/// Importance below which an idle atom is archived.
pub const ARCHIVE_BELOW: f64 = 0.2;

/// One of the five published actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReflectAction {
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

impl ReflectAction {
    /// Every action, in the order a run performs them.
    pub const ALL: [ReflectAction; 5] =
        [ReflectAction::Summarize, ReflectAction::Promote, ReflectAction::Expire, ReflectAction::Decay, ReflectAction::Archive];

    /// The published name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReflectAction::Summarize => "summarize",
            ReflectAction::Promote => "promote",
            ReflectAction::Expire => "expire",
            ReflectAction::Decay => "decay",
            ReflectAction::Archive => "archive",
        }
    }

    /// Parses a name or one of its aliases (`summary`, `promotion`,
    /// `expiry`, `importance_decay`, …), case-insensitively.
    pub fn parse(text: &str) -> Option<ReflectAction> {
        match text.trim().to_lowercase().replace('-', "_").as_str() {
            "summarize" | "summarise" | "summary" | "summaries" | "summarization" => Some(ReflectAction::Summarize),
            "promote" | "promotion" | "promotions" => Some(ReflectAction::Promote),
            "expire" | "expiry" | "expiration" | "expired" => Some(ReflectAction::Expire),
            "decay" | "importance_decay" | "decay_importance" => Some(ReflectAction::Decay),
            "archive" | "archival" | "archived" => Some(ReflectAction::Archive),
            _ => None,
        }
    }
}

/// Input of `reflect`, as the seed names it. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReflectRequest {
    /// Comma-separated actions (default all five; aliases accepted).
    pub actions_csv: Option<String>,
    /// Plan and count only; write nothing.
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
    /// Test hook: fail before the n-th write (the whole run rolls back).
    #[doc(hidden)]
    pub fail_after_writes: Option<usize>,
}

/// The filters as applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReflectFilters {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReflectSummary {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReflectPromotion {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReflectLifecycle {
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReflectCounts {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReflectReport {
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

impl ReflectReport {
    /// The MCP text rendering (starts with `### Memory Reflect Report`).
    pub fn to_text(&self) -> String {
        let c = &self.counts;
        let mut text = String::from("### Memory Reflect Report\n\n");
        text.push_str(&format!("- Dry Run: {}\n", self.dry_run));
        let actions: Vec<&str> = self.actions.iter().map(|a| a.as_str()).collect();
        text.push_str(&format!("- Actions: {}\n", actions.join(", ")));
        text.push_str(&format!("- Window: {} → {}\n", self.filters.since, self.filters.until));
        text.push_str(&format!(
            "- Summarized: {}\n- Promoted: {}\n- Expired: {}\n- Decayed: {}\n- Archived: {}\n",
            c.summarized, c.promoted, c.expired, c.decayed, c.archived
        ));
        if self.truncated {
            text.push_str(&format!("- Candidate budget of {} reached: run again for the rest\n", self.filters.limit));
        }
        text.push_str(&format!("- Audit Records: {}\n", self.audit_record_ids.len()));
        if !self.audit_record_ids.is_empty() {
            text.push_str("\nAudit IDs:\n");
            for id in self.audit_record_ids.iter().take(20) {
                text.push_str(&format!("- {id}\n"));
            }
            if self.audit_record_ids.len() > 20 {
                text.push_str(&format!("- … and {} more\n", self.audit_record_ids.len() - 20));
            }
        }
        for s in &self.summaries {
            text.push_str(&format!("\nSummary ({}, {} episodes): {}", s.group, s.sources.len(), s.content));
        }
        for p in &self.promotions {
            text.push_str(&format!("\nPromotion ({} sessions): {}", p.sessions.len(), p.content));
        }
        for l in self.lifecycle.iter().take(50) {
            text.push_str(&format!("\n{} {}: {} → {} ({})", l.action.as_str(), l.atom_id, l.before, l.after, l.reason));
        }
        text
    }
}

/// Parses an ISO 8601 time: RFC 3339, `YYYY-MM-DDTHH:MM[:SS]` (UTC) or a
/// date (midnight UTC).
pub fn parse_iso8601(field: &'static str, text: &str) -> Result<DateTime<Utc>> {
    let t = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(t) {
        return Ok(time.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(time) = NaiveDateTime::parse_from_str(t, format) {
            return Ok(time.and_utc());
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(t, "%Y-%m-%d")
        && let Some(time) = date.and_hms_opt(0, 0, 0)
    {
        return Ok(time.and_utc());
    }
    Err(MemoryError::invalid(field, format!("'{text}' is not an ISO 8601 time (e.g. 2026-11-30T08:00:00Z or 2026-11-30)")))
}

/// SQL LIKE: `%` any run, `_` one character; case-sensitive.
fn like(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative wildcard matching with backtracking on the last `%`.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '_' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '%' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '%')
}

/// The logical path of a scope: `workspace/repository@branch`.
fn logical_path(scope: &crate::scope::Scope) -> String {
    let mut path = [scope.workspace.as_deref(), scope.repository.as_deref()].into_iter().flatten().collect::<Vec<_>>().join("/");
    if let Some(branch) = &scope.branch {
        path.push('@');
        path.push_str(branch);
    }
    path
}

/// The caller's boundary: a tenant-wide caller (an operator's token, the
/// local user without a repository) reaches the whole tenant; a caller bound
/// to a repository reaches what it sees (its repository and tenant-wide
/// atoms).
fn in_boundary(caller: &Caller, scope: &crate::scope::Scope) -> bool {
    if caller.scope.tenant_id != scope.tenant_id {
        return false;
    }
    (caller.scope.is_tenant_wide() && caller.scope.branch.is_none()) || caller.scope.sees(scope) != Visibility::Hidden
}

/// A checked request.
struct Plan {
    actions: Vec<ReflectAction>,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    filters: ReflectFilters,
    path: String,
    bucket: String,
    scope: Option<(Option<String>, Option<String>, Option<String>)>,
    team: Option<String>,
}

fn check(caller: &Caller, request: &ReflectRequest) -> Result<Plan> {
    let mut actions = Vec::new();
    let csv = request.actions_csv.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match csv {
        None => actions.extend(ReflectAction::ALL),
        Some(csv) => {
            for name in csv.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let action = ReflectAction::parse(name).ok_or_else(|| {
                    MemoryError::invalid(
                        "actions_csv",
                        format!("unsupported action '{name}'; the actions are summarize, promote, expire, decay, archive"),
                    )
                })?;
                if !actions.contains(&action) {
                    actions.push(action);
                }
            }
            if actions.is_empty() {
                return Err(MemoryError::invalid("actions_csv", "names no action"));
            }
            actions.sort();
        }
    }
    let hours = request.time_window_hours.unwrap_or(DEFAULT_WINDOW_HOURS);
    if !hours.is_finite() || hours <= 0.0 || hours > 24.0 * 366.0 * 100.0 {
        return Err(MemoryError::invalid("time_window_hours", format!("{hours} is not a positive number of hours")));
    }
    let until = match request.until.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(text) => parse_iso8601("until", text)?,
        None => Memory::now(),
    };
    let since = match request.since.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(text) => parse_iso8601("since", text)?,
        None => until - Duration::milliseconds((hours * 3_600_000.0) as i64),
    };
    if since > until {
        return Err(MemoryError::invalid("since", "is after until"));
    }
    let limit = match request.limit {
        None => DEFAULT_LIMIT,
        Some(n) if n <= 0 => return Err(MemoryError::invalid("limit", format!("{n} is not a positive candidate budget"))),
        Some(n) => usize::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
    };
    let tenant = &caller.scope.tenant_id;
    let owner = request.owner_filter.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("%");
    if owner != "%" && owner != tenant {
        return Err(MemoryError::Forbidden(format!(
            "owner_filter '{owner}' is not you ({tenant}): reflect works on your own memories only"
        )));
    }
    let team = request.team_id.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    if let (Some(team), Some(mine)) = (&team, &caller.scope.workspace)
        && team != mine
    {
        return Err(MemoryError::Forbidden(format!("team_id '{team}' is not your bound team '{mine}'")));
    }
    let scope = match request.scope.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => {
            let (path, branch) = match text.split_once('@') {
                Some((p, b)) => (p, Some(b.to_owned())),
                None => (text, None),
            };
            let (workspace, repository) = match path.split_once('/') {
                Some((w, r)) => (Some(w.to_owned()), Some(r.to_owned())),
                None if path.is_empty() => (None, None),
                None => (None, Some(path.to_owned())),
            };
            let wanted = crate::scope::Scope {
                tenant_id: tenant.clone(),
                workspace: workspace.clone(),
                repository: repository.clone(),
                branch: branch.clone(),
            };
            if !in_boundary(caller, &wanted) {
                return Err(MemoryError::Forbidden(format!("scope '{text}' is outside your boundary ({})", caller.scope.display())));
            }
            Some((workspace, repository, branch))
        }
    };
    let path = request.path_filter.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("%").to_owned();
    let bucket = request.bucket.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("%").to_owned();
    for (field, value) in [("path_filter", &path), ("bucket", &bucket)] {
        if value.chars().count() > 400 || value.chars().any(char::is_control) {
            return Err(MemoryError::invalid(field, "longer than 400 characters or contains control characters"));
        }
    }
    let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let filters = ReflectFilters {
        path_filter: path.clone(),
        owner_filter: tenant.clone(),
        bucket: bucket.clone(),
        scope: request.scope.clone().filter(|s| !s.trim().is_empty()),
        team_id: team.clone(),
        limit,
        since: rfc(since),
        until: rfc(until),
    };
    Ok(Plan { actions, since, until, filters, path, bucket, scope, team })
}

impl Plan {
    /// Whether `atom` is inside the caller's boundary and every filter.
    /// An episode with content inside the run's time window.
    fn in_window(&self, atom: &Atom) -> bool {
        atom.kind == Kind::Episode && atom.content.is_some() && atom.created_at >= self.since && atom.created_at <= self.until
    }

    fn keeps(&self, caller: &Caller, atom: &Atom) -> bool {
        if !in_boundary(caller, &atom.scope) {
            return false;
        }
        let s = &atom.scope;
        if let Some(team) = &self.team
            && s.workspace.as_ref() != Some(team)
        {
            return false;
        }
        if let Some((workspace, repository, branch)) = &self.scope
            && (&s.workspace != workspace || &s.repository != repository || branch.as_ref().is_some_and(|b| s.branch.as_ref() != Some(b)))
        {
            return false;
        }
        let bucket_ok = match self.bucket.as_str() {
            "%" => true,
            "personal" => s.is_tenant_wide(),
            pattern => s.repository.as_deref().is_some_and(|r| like(pattern, r)),
        };
        bucket_ok && like(&self.path, &logical_path(s))
    }
}

/// Sessions an episode belongs to: its session id, else its day.
fn group_of(atom: &Atom) -> String {
    match &atom.session_id {
        Some(session) => session.clone(),
        None => format!("day:{}", atom.created_at.format("%Y-%m-%d")),
    }
}

fn term_set(text: &str) -> HashSet<String> {
    terms(text, Mode::Query).into_iter().collect()
}

/// An extractive summary: the most central sentences, in time order.
fn summarize(episodes: &[&Atom], group: &str) -> String {
    let sets: Vec<HashSet<String>> = episodes.iter().map(|a| term_set(a.content.as_deref().unwrap_or(""))).collect();
    let mut scored: Vec<(usize, f32)> = (0..episodes.len())
        .map(|i| {
            let centrality: f32 = (0..episodes.len()).filter(|j| *j != i).map(|j| jaccard(&sets[i], &sets[j])).sum();
            // Longer sentences carry more; tie-break on position.
            (i, centrality + (sets[i].len() as f32).ln_1p() * 0.05)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen: Vec<usize> = scored.iter().take(SUMMARY_SENTENCES).map(|(i, _)| *i).collect();
    chosen.sort_unstable();
    let sentences: Vec<&str> = chosen.iter().filter_map(|i| episodes[*i].content.as_deref()).map(str::trim).collect();
    let day = episodes.first().map(|a| a.created_at.format("%Y-%m-%d").to_string()).unwrap_or_default();
    let language = episodes.first().map(|a| a.language.as_str()).unwrap_or("en");
    let label = group.strip_prefix("day:").map_or_else(|| group.to_owned(), |_| day.clone());
    let head = match language {
        "zh" => format!("会话 {label} 摘要（{day}，{} 条记录）：", episodes.len()),
        "ja" => format!("セッション {label} の要約（{day}、{} 件）：", episodes.len()),
        _ => format!("Summary of session {label} ({day}, {} episodes): ", episodes.len()),
    };
    let separator = if matches!(language, "zh" | "ja") { "／" } else { " / " };
    let mut text = format!("{head}{}", sentences.join(separator));
    if text.chars().count() > super::MAX_CONTENT_CHARS {
        text = text.chars().take(super::MAX_CONTENT_CHARS - 1).collect::<String>() + "…";
    }
    text
}

/// A planned write.
enum Write {
    Summary { atom: Atom, entities: Vec<crate::text::Entity>, reason: String },
    Promotion { atom: Atom, entities: Vec<crate::text::Entity>, sessions: Vec<String>, reason: String },
    Lifecycle { target: Atom, action: ReflectAction, status: Option<Status>, importance: Option<(f64, DateTime<Utc>)>, reason: String },
}

/// What a reflect run reads: the atoms it may act on, and the sources
/// earlier runs already summarized or promoted.
#[derive(Default)]
struct Candidates {
    atoms: Vec<Atom>,
    summarized: HashSet<AtomId>,
    promoted: HashSet<AtomId>,
}

/// The run's candidate budget (`limit`): an action that would exceed it
/// stops, and the report says the run was truncated.
struct Budget {
    left: usize,
    truncated: bool,
}

impl Budget {
    /// Takes `n` from the budget, or marks the run truncated.
    fn take(&mut self, n: usize) -> bool {
        if n > self.left {
            self.truncated = true;
            return false;
        }
        self.left -= n;
        true
    }
}

/// Expiry, decay and archive decisions for atoms no earlier action of this
/// run already changed the status of.
fn plan_lifecycle(action: ReflectAction, plan: &Plan, atoms: &[Atom], budget: &mut Budget, writes: &mut Vec<Write>) {
    let planned: HashSet<AtomId> = writes
        .iter()
        .filter_map(|w| match w {
            Write::Lifecycle { target, status: Some(_), .. } => Some(target.id),
            _ => None,
        })
        .collect();
    for atom in atoms.iter().filter(|a| !planned.contains(&a.id)) {
        let Some(decision) = lifecycle(action, atom, plan.until, writes) else { continue };
        if !budget.take(1) {
            break;
        }
        writes.push(decision);
    }
}

impl Memory {
    /// `reflect`: plans the requested maintenance over the caller's
    /// boundary and, unless `dry_run`, writes it all in one transaction.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, dry_run = request.dry_run))]
    pub fn reflect(&self, caller: &Caller, request: ReflectRequest) -> Result<ReflectReport> {
        let caller = &Caller { scope: caller.scope.clone().normalized()?, actor: caller.actor.clone() };
        let plan = check(caller, &request)?;
        // Decay and archive read recall usage: write what is pending first.
        self.flush_usage()?;
        let candidates = self.reflect_candidates(caller, &plan)?;
        let mut budget = Budget { left: plan.filters.limit, truncated: false };
        let mut writes: Vec<Write> = Vec::new();
        for action in &plan.actions {
            match action {
                ReflectAction::Summarize => self.plan_summaries(caller, &plan, &candidates, &mut budget, &mut writes),
                ReflectAction::Promote => self.plan_promotions(caller, &plan, &candidates, &mut budget, &mut writes)?,
                ReflectAction::Expire | ReflectAction::Decay | ReflectAction::Archive => {
                    plan_lifecycle(*action, &plan, &candidates.atoms, &mut budget, &mut writes)
                }
            }
        }
        self.finish(caller, &request, plan, writes, budget.truncated)
    }

    /// The active atoms the plan keeps, and the sources earlier runs
    /// already summarized or promoted.
    fn reflect_candidates(&self, caller: &Caller, plan: &Plan) -> Result<Candidates> {
        let tenant = &caller.scope.tenant_id;
        let ids: Vec<AtomId> = self
            .store
            .select(NamedQuery::AllAtoms, tenant, &[])?
            .iter()
            .filter_map(|row| row.get("atom").and_then(store::atom_id_of))
            .collect();
        let mut scopes = HashMap::new();
        let mut candidates = Candidates::default();
        for (done, id) in ids.iter().enumerate() {
            if done > 0 && done % 10_000 == 0 {
                tracing::info!(done, total = ids.len(), "reflect: reading atoms");
            }
            let Some(atom) = super::load_atom_cached(&self.store, tenant, *id, false, &mut scopes)? else { continue };
            if atom.source == "reflect" {
                match atom.kind {
                    Kind::Reflection => candidates.summarized.extend(&atom.derived_from),
                    Kind::Fact => candidates.promoted.extend(&atom.derived_from),
                    _ => {}
                }
            }
            if atom.status == Status::Active && plan.keeps(caller, &atom) {
                candidates.atoms.push(atom);
            }
        }
        Ok(candidates)
    }

    /// Summaries of sessions with enough episodes in the window.
    fn plan_summaries(&self, caller: &Caller, plan: &Plan, candidates: &Candidates, budget: &mut Budget, writes: &mut Vec<Write>) {
        let mut groups: BTreeMap<(String, String), Vec<&Atom>> = BTreeMap::new();
        for atom in candidates.atoms.iter().filter(|a| plan.in_window(a)).filter(|a| !candidates.summarized.contains(&a.id)) {
            groups.entry((atom.scope.display(), group_of(atom))).or_default().push(atom);
        }
        for ((_, group), mut episodes) in groups {
            if episodes.len() < MIN_SUMMARY_EPISODES {
                continue;
            }
            if !budget.take(episodes.len()) {
                break;
            }
            episodes.sort_by_key(|a| (a.created_at, a.id));
            let content = summarize(&episodes, &group);
            let first = episodes[0];
            let scope_caller = Caller { scope: first.scope.clone(), actor: caller.actor.clone() };
            let (mut atom, entities) = new_atom(self.next_id(), content, Kind::Reflection, "reflect".to_owned(), &scope_caller);
            atom.derived_from = episodes.iter().map(|a| a.id).collect();
            atom.session_id = first.session_id.clone();
            atom.importance = initial_importance(Kind::Reflection, atom.epistemic, "reflect");
            let reason = format!("reflect summarize: {} episodes of {group}", episodes.len());
            writes.push(Write::Summary { atom, entities, reason });
        }
    }

    /// Facts promoted from what was said alike in several sessions.
    fn plan_promotions(
        &self,
        caller: &Caller,
        plan: &Plan,
        candidates: &Candidates,
        budget: &mut Budget,
        writes: &mut Vec<Write>,
    ) -> Result<()> {
        let episodes: Vec<&Atom> =
            candidates.atoms.iter().filter(|a| plan.in_window(a)).filter(|a| !candidates.promoted.contains(&a.id)).collect();
        let sets: Vec<HashSet<String>> = episodes.iter().map(|a| term_set(a.content.as_deref().unwrap_or(""))).collect();
        let mut used = vec![false; episodes.len()];
        for i in 0..episodes.len() {
            if used[i] || sets[i].len() < 2 {
                continue;
            }
            let cluster: Vec<usize> = (i..episodes.len())
                .filter(|j| {
                    !used[*j]
                        && episodes[*j].scope.same_repository(&episodes[i].scope)
                        && (*j == i || jaccard(&sets[i], &sets[*j]) >= PROMOTE_OVERLAP)
                })
                .collect();
            let mut sessions: Vec<String> = cluster.iter().map(|j| group_of(episodes[*j])).collect();
            sessions.sort();
            sessions.dedup();
            if sessions.len() < 2 {
                continue;
            }
            if !budget.take(cluster.len()) {
                break;
            }
            for j in &cluster {
                used[*j] = true;
            }
            // The most recent wording, as a statement about the user.
            let latest = cluster.iter().map(|j| episodes[*j]).max_by_key(|a| (a.created_at, a.id)).unwrap_or(episodes[i]);
            let sentence = latest.content.as_deref().unwrap_or("").trim();
            let content = crate::fact::third_person(sentence.split_once(": ").map_or(sentence, |(_, s)| s));
            if self.find_duplicate(&latest.scope, &content)?.is_some() {
                continue;
            }
            let scope_caller = Caller { scope: latest.scope.clone(), actor: caller.actor.clone() };
            let (mut atom, entities) = new_atom(self.next_id(), content, Kind::Fact, "reflect".to_owned(), &scope_caller);
            atom.derived_from = cluster.iter().map(|j| episodes[*j].id).collect();
            let reason = format!("reflect promote: said in {} sessions ({})", sessions.len(), sessions.join(", "));
            writes.push(Write::Promotion { atom, entities, sessions, reason });
        }
        Ok(())
    }

    fn finish(&self, caller: &Caller, request: &ReflectRequest, plan: Plan, writes: Vec<Write>, truncated: bool) -> Result<ReflectReport> {
        let mut report = ReflectReport {
            dry_run: request.dry_run,
            actions: plan.actions.clone(),
            filters: plan.filters.clone(),
            summaries: Vec::new(),
            promotions: Vec::new(),
            lifecycle: Vec::new(),
            counts: ReflectCounts::default(),
            truncated,
            audit_record_ids: Vec::new(),
        };
        let written = |id: AtomId| (!request.dry_run).then(|| id.to_string());
        for write in &writes {
            match write {
                Write::Summary { atom, .. } => {
                    report.counts.summarized += 1;
                    report.summaries.push(ReflectSummary {
                        atom_id: written(atom.id),
                        scope: atom.scope.display(),
                        group: atom.session_id.clone().unwrap_or_else(|| format!("day:{}", atom.created_at.format("%Y-%m-%d"))),
                        sources: atom.derived_from.iter().map(ToString::to_string).collect(),
                        content: atom.content.clone().unwrap_or_default(),
                    });
                }
                Write::Promotion { atom, sessions, .. } => {
                    report.counts.promoted += 1;
                    report.promotions.push(ReflectPromotion {
                        atom_id: written(atom.id),
                        scope: atom.scope.display(),
                        content: atom.content.clone().unwrap_or_default(),
                        sources: atom.derived_from.iter().map(ToString::to_string).collect(),
                        sessions: sessions.clone(),
                    });
                }
                Write::Lifecycle { target, action, status, importance, reason } => {
                    match action {
                        ReflectAction::Expire => report.counts.expired += 1,
                        ReflectAction::Decay => report.counts.decayed += 1,
                        _ => report.counts.archived += 1,
                    }
                    let (before, after) = match (status, importance) {
                        (Some(s), _) => (target.status.as_str().to_owned(), s.as_str().to_owned()),
                        (None, Some((i, _))) => (format!("importance {:.3}", target.importance), format!("importance {i:.3}")),
                        (None, None) => (String::new(), String::new()),
                    };
                    report.lifecycle.push(ReflectLifecycle {
                        atom_id: target.id.to_string(),
                        action: *action,
                        before,
                        after,
                        reason: reason.clone(),
                    });
                }
            }
        }
        if request.dry_run || writes.is_empty() {
            tracing::info!(counts = ?report.counts, dry_run = request.dry_run, "reflect planned");
            return Ok(report);
        }
        let mutations: Vec<Mutation<'_>> = writes
            .iter()
            .map(|write| match write {
                Write::Summary { atom, entities, reason } => Mutation {
                    reason: Some(reason.clone()),
                    created: Some((atom, entities.as_slice())),
                    ..Mutation::new("reflect.summarize")
                },
                Write::Promotion { atom, entities, reason, .. } => Mutation {
                    reason: Some(reason.clone()),
                    created: Some((atom, entities.as_slice())),
                    ..Mutation::new("reflect.promote")
                },
                Write::Lifecycle { target, action, status, importance, reason } => Mutation {
                    reason: Some(reason.clone()),
                    target: Some(target),
                    new_status: *status,
                    new_importance: *importance,
                    ..Mutation::new(format!("reflect.{}", action.as_str()))
                },
            })
            .collect();
        let audit_ids = self.apply_all(caller, mutations, FailAfter(request.fail_after_writes))?;
        report.audit_record_ids = audit_ids.iter().map(ToString::to_string).collect();
        tracing::info!(counts = ?report.counts, audit_records = audit_ids.len(), "reflect applied");
        Ok(report)
    }
}

/// The expire / decay / archive decision for one active atom, if any.
/// `earlier` holds decisions already planned in this run (archive sees the
/// importance decay just planned).
fn lifecycle(action: ReflectAction, atom: &Atom, now: DateTime<Utc>, earlier: &[Write]) -> Option<Write> {
    let protected = atom.kind == Kind::Lesson || atom.epistemic == Epistemic::Necessary;
    let last_use =
        [Some(atom.created_at), atom.last_recalled_at, atom.last_decayed_at].into_iter().flatten().max().unwrap_or(atom.created_at);
    let idle_days = (now - last_use).num_days();
    let target = atom.clone();
    match action {
        ReflectAction::Expire => {
            let expires = atom.expires_at?;
            (expires <= now).then(|| Write::Lifecycle {
                target,
                action,
                status: Some(Status::Expired),
                importance: None,
                reason: format!("reflect expire: expired at {}", expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            })
        }
        ReflectAction::Decay => {
            if protected || idle_days < DECAY_IDLE_DAYS || atom.importance <= DECAY_FLOOR {
                return None;
            }
            let after = (atom.importance * DECAY_FACTOR).max(DECAY_FLOOR);
            let after = (after * 1000.0).round() / 1000.0;
            Some(Write::Lifecycle {
                target,
                action,
                status: None,
                importance: Some((after, now)),
                reason: format!("reflect decay: not recalled for {idle_days} days; importance {:.3} → {after:.3}", atom.importance),
            })
        }
        ReflectAction::Archive => {
            let importance = earlier
                .iter()
                .rev()
                .find_map(|w| match w {
                    Write::Lifecycle { target, importance: Some((i, _)), .. } if target.id == atom.id => Some(*i),
                    _ => None,
                })
                .unwrap_or(atom.importance);
            if protected || idle_days < ARCHIVE_IDLE_DAYS || importance >= ARCHIVE_BELOW {
                return None;
            }
            Some(Write::Lifecycle {
                target,
                action,
                status: Some(Status::Archived),
                importance: None,
                reason: format!("reflect archive: importance {importance:.3} < {ARCHIVE_BELOW} and not recalled for {idle_days} days"),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        assert!(like("%", ""));
        assert!(like("%", "acme/hmg@main"));
        assert!(like("acme/%", "acme/hmg@main"));
        assert!(!like("acme/%", "other/hmg"));
        assert!(like("%@ma_n", "acme/hmg@main"));
        assert!(!like("hmg", "acme/hmg"));
    }

    #[test]
    fn aliases_are_normalized() {
        for (alias, action) in [
            ("summary", "summarize"),
            ("promotion", "promote"),
            ("expiry", "expire"),
            ("importance_decay", "decay"),
            ("Archive", "archive"),
        ] {
            assert_eq!(ReflectAction::parse(alias).map(ReflectAction::as_str), Some(action));
        }
        assert_eq!(ReflectAction::parse("dream"), None);
    }

    #[test]
    fn summaries_speak_the_episodes_language() {
        let caller = Caller::new(crate::scope::Scope::tenant("t"), "test");
        let episodes = |texts: &[&str]| -> Vec<Atom> {
            texts
                .iter()
                .map(|t| {
                    let (mut atom, _) = new_atom(ulid::Ulid::generate(), (*t).to_owned(), Kind::Episode, "user".to_owned(), &caller);
                    atom.session_id = Some("s9".to_owned());
                    atom
                })
                .collect()
        };
        let zh = episodes(&["我们讨论了数据库迁移。", "迁移在周五完成。", "迁移后性能提升了。"]);
        let text = summarize(&zh.iter().collect::<Vec<_>>(), "s9");
        assert!(text.starts_with("会话 s9 摘要") && text.contains("／") && text.contains("迁移在周五完成"), "{text}");
        let ja = episodes(&["新しいサーバーを設定した。", "サーバーの監視を追加した。"]);
        let text = summarize(&ja.iter().collect::<Vec<_>>(), "s9");
        assert!(text.starts_with("セッション s9 の要約") && text.contains("サーバーの監視を追加した"), "{text}");
        let en = episodes(&["We moved the billing database.", "The billing database now runs PostgreSQL 16."]);
        let text = summarize(&en.iter().collect::<Vec<_>>(), "s9");
        assert!(text.starts_with("Summary of session s9 (") && text.contains(" / "), "{text}");
    }

    #[test]
    fn iso8601_forms_and_errors() {
        assert!(parse_iso8601("since", "2026-11-30T08:00:00Z").is_ok());
        assert!(parse_iso8601("since", "2026-11-30T08:00:00+09:00").is_ok());
        assert!(parse_iso8601("since", "2026-11-30T08:00").is_ok());
        assert!(parse_iso8601("since", "2026-11-30").is_ok());
        let error = parse_iso8601("until", "yesterday").unwrap_err().to_string();
        assert!(error.contains("until") && error.contains("ISO 8601"), "{error}");
    }
}
