//! memorize and handoff: validate → redact → admission → normalize + hash →
//! exact dedup in scope → infer → one store transaction with its audit entry.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Caller, Effect, Memory, MemoryError, Mutation, Result, clean_source};
use crate::atom::{Atom, AtomId, Epistemic, Kind, Status};
use crate::store::{self, NamedQuery};
use crate::text;

/// Input of `memory_memorize`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorizeRequest {
    /// One self-contained memory sentence, in the user's language.
    pub content: String,
    /// `user` (more authoritative), `agent` (default) or a custom attribution.
    pub source: Option<String>,
    /// `fact` (default) or `episode`.
    pub kind: Kind,
    /// Optional originating session (imports, evaluations).
    pub session_id: Option<String>,
    /// Creation time to record (imports, evaluations); now by default.
    pub created_at: Option<DateTime<Utc>>,
    /// Time after which `reflect` (action `expire`) marks it expired.
    pub expires_at: Option<DateTime<Utc>>,
}

impl MemorizeRequest {
    /// A fact with default attribution.
    pub fn new(content: impl Into<String>) -> MemorizeRequest {
        MemorizeRequest { content: content.into(), source: None, kind: Kind::Fact, session_id: None, created_at: None, expires_at: None }
    }

    /// Builder: attribution.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<String>) -> MemorizeRequest {
        self.source = Some(source.into());
        self
    }

    /// Builder: kind (`fact` or `episode`).
    #[must_use]
    pub fn with_kind(mut self, kind: Kind) -> MemorizeRequest {
        self.kind = kind;
        self
    }

    /// Builder: session.
    #[must_use]
    pub fn with_session(mut self, session_id: impl Into<String>) -> MemorizeRequest {
        self.session_id = Some(session_id.into());
        self
    }

    /// Builder: expiry time (reflect's `expire` action acts on it).
    #[must_use]
    pub fn with_expires_at(mut self, expires_at: DateTime<Utc>) -> MemorizeRequest {
        self.expires_at = Some(expires_at);
        self
    }

    /// Builder: creation time.
    #[must_use]
    pub fn with_created_at(mut self, created_at: DateTime<Utc>) -> MemorizeRequest {
        self.created_at = Some(created_at);
        self
    }
}

/// Output of `memory_memorize` (field names as in the seeds).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct MemorizeOutcome {
    /// The new atom, or the existing one on `no_op`; `null` when rejected.
    pub atom_id: Option<String>,
    /// applied / no_op / rejected.
    pub effect: Effect,
    /// Why (not on applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The existing atom (only on no_op).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deduped_with: Option<String>,
    /// Kinds of secret removed before storing, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redactions: Vec<String>,
}

impl MemorizeOutcome {
    fn rejected(reason: String) -> MemorizeOutcome {
        MemorizeOutcome { atom_id: None, effect: Effect::Rejected, reason: Some(reason), deduped_with: None, redactions: Vec::new() }
    }
}

/// How many new memories [`Memory::memorize_many`] writes per transaction
/// (and embeds per model call).
pub const MEMORIZE_BATCH: usize = 64;

/// What `memorize` decided before writing.
pub(super) enum Prepared {
    /// Nothing to write: a duplicate or a rejection.
    Answered(MemorizeOutcome),
    /// A new memory to write.
    New(Box<NewAtom>),
}

impl Prepared {
    /// The answer once what was new is written.
    fn outcome(self) -> MemorizeOutcome {
        match self {
            Prepared::Answered(outcome) => outcome,
            Prepared::New(new) => new.outcome(),
        }
    }
}

/// A memory about to be written.
pub(super) struct NewAtom {
    atom: Atom,
    entities: Vec<text::Entity>,
    /// Its content hash (what dedup compares).
    hash: String,
    redactions: Vec<String>,
}

impl NewAtom {
    fn outcome(self) -> MemorizeOutcome {
        MemorizeOutcome {
            atom_id: Some(self.atom.id.to_string()),
            effect: Effect::Applied,
            reason: None,
            deduped_with: None,
            redactions: self.redactions,
        }
    }
}

/// The memorize writes of [`Memory::memorize_many`] and `hmg import`, a
/// group at a time, pipelined: a group's vectors are started on the engine
/// threads, then the group before it is committed and indexed while they
/// run, then the requests of the next group are checked. The engines go
/// from one group to the next without waiting for this thread; before,
/// they idled through each group's indexing and the next group's checks
/// (a sixth of an import's time at 10k). Only a group embedded in per-core
/// parts flies ahead; a small one is written at once, as alone.
///
/// A group in flight is checked but not written: the next group's
/// duplicates of it are found by content hash, here, as within a group.
/// Each landing is one transaction (its audit entries with it), then the
/// indexes, in group order, so what a crash keeps is always every group up
/// to some point. [`Bulk::land`] (or an error's [`Bulk::fail`]) writes the
/// one in flight; dropping a `Bulk` without either loses it, unwritten and
/// unanswered.
pub(super) struct Bulk<'m, T> {
    memory: &'m Memory,
    caller: Caller,
    flight: Option<Flight<T>>,
    /// Content hashes of the flying group's new memories, and then of the
    /// group being checked.
    seen: std::collections::HashMap<String, AtomId>,
    /// How many of `seen` belong to the group being checked.
    fresh: usize,
}

/// A group whose vectors are on their way and which is not written yet.
struct Flight<T> {
    group: Vec<Prepared>,
    embedding: crate::index::Embedding,
    tag: T,
}

/// A written group: its outcomes in request order, and the caller's tag.
pub(super) type Landed<T> = (Vec<MemorizeOutcome>, T);

impl<'m, T> Bulk<'m, T> {
    /// A pipeline for `caller`'s writes (its scope normalized).
    pub(super) fn new(memory: &'m Memory, caller: &Caller) -> Result<Self> {
        let caller = Caller { scope: caller.scope.clone().normalized()?, actor: caller.actor.clone() };
        Ok(Bulk { memory, caller, flight: None, seen: std::collections::HashMap::new(), fresh: 0 })
    }

    /// How many new memories the group being checked holds.
    pub(super) fn fresh_in_group(&self) -> usize {
        self.fresh
    }

    /// Checks one request of the group being gathered, as `memorize` would,
    /// also against the group in flight and this group's earlier requests.
    pub(super) fn prepare(&mut self, request: MemorizeRequest) -> Result<Prepared> {
        let prepared = self.memory.prepare_memorize(&self.caller, request, &self.seen)?;
        if let Prepared::New(new) = &prepared {
            self.seen.insert(new.hash.clone(), new.atom.id);
            self.fresh += 1;
        }
        Ok(prepared)
    }

    /// Sends the gathered group: its vectors start, then the group in
    /// flight lands. A group that is not embedded in parts (or has nothing
    /// new) is written now, after it. Returns what landed, in order.
    pub(super) fn send(&mut self, group: Vec<Prepared>, tag: T) -> Result<Vec<Landed<T>>> {
        let created: Vec<&Atom> = group.iter().filter_map(|p| if let Prepared::New(new) = p { Some(&new.atom) } else { None }).collect();
        let mut landed = Vec::with_capacity(2);
        if self.memory.indexes.embeds_in_parts(&created) {
            let embedding = self.memory.indexes.start_embedding(&created);
            let previous = self.flight.replace(Flight { group, embedding, tag });
            // The sent group's hashes stay in `seen`; the landed group's go
            // (the store finds those now).
            let keep: std::collections::HashSet<AtomId> = self
                .flight
                .iter()
                .flat_map(|f| f.group.iter())
                .filter_map(|p| if let Prepared::New(new) = p { Some(new.atom.id) } else { None })
                .collect();
            self.seen.retain(|_, id| keep.contains(id));
            self.fresh = 0;
            if let Some(previous) = previous {
                landed.push(self.write(previous)?);
            }
        } else {
            landed.extend(self.land()?);
            let fresh = self.memory.write_group(&self.caller, group.iter())?;
            if fresh > 0 {
                tracing::info!(memorized = fresh, "memorized a batch");
            }
            self.seen.clear();
            self.fresh = 0;
            landed.push((group.into_iter().map(Prepared::outcome).collect(), tag));
        }
        Ok(landed)
    }

    /// Writes the group in flight, if any.
    pub(super) fn land(&mut self) -> Result<Option<Landed<T>>> {
        let Some(flight) = self.flight.take() else { return Ok(None) };
        let landed = self.write(flight);
        self.seen.clear();
        self.fresh = 0;
        landed.map(Some)
    }

    /// On an error while gathering a group: the group in flight is written
    /// (as it would have been before the error), and the error returned.
    pub(super) fn fail(&mut self, error: MemoryError) -> MemoryError {
        if let Err(landing) = self.land() {
            tracing::error!(error = %landing, "the group before a failed one could not be written");
        }
        error
    }

    fn write(&self, flight: Flight<T>) -> Result<Landed<T>> {
        let Flight { group, embedding, tag } = flight;
        let mutations = mutations_of(group.iter());
        let fresh = mutations.len();
        self.memory.apply_embedding(&self.caller, mutations, embedding, super::FailAfter::default())?;
        tracing::info!(memorized = fresh, "memorized a batch");
        Ok((group.into_iter().map(Prepared::outcome).collect(), tag))
    }
}

/// The writes of a group's new memories.
fn mutations_of<'p>(prepared: impl Iterator<Item = &'p Prepared>) -> Vec<Mutation<'p>> {
    prepared
        .filter_map(|item| match item {
            Prepared::New(new) => Some(Mutation { created: Some((&new.atom, new.entities.as_slice())), ..Mutation::new("memorize") }),
            Prepared::Answered(_) => None,
        })
        .collect()
}

/// Input of `memory_handoff`.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffRequest {
    /// What was done / why / verification / risks / next steps.
    pub summary: String,
    /// Attribution, `agent` by default.
    pub source: Option<String>,
}

impl HandoffRequest {
    /// A handoff with default attribution.
    pub fn new(summary: impl Into<String>) -> HandoffRequest {
        HandoffRequest { summary: summary.into(), source: None }
    }
}

/// Output of `memory_handoff`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct HandoffOutcome {
    /// The handoff atom (`null` when rejected).
    pub atom_id: Option<String>,
    /// applied / rejected.
    pub effect: Effect,
    /// Why (only rejected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Kinds of secret removed before storing, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redactions: Vec<String>,
}

/// Content that passed admission control.
pub(crate) struct Admitted {
    pub(crate) text: String,
    pub(crate) redactions: Vec<String>,
}

/// Admission control shared by every write that stores new text: empty,
/// oversized and nothing-left-after-redaction are refused with a reason.
pub(crate) fn admit(field: &str, raw: &str, max_chars: usize) -> std::result::Result<Admitted, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(format!("empty: {field} has no text"));
    }
    let chars = trimmed.chars().count();
    if chars > max_chars {
        return Err(format!(
            "oversized: {field} has {chars} characters, the limit is {max_chars}; split it into smaller self-contained memories"
        ));
    }
    let redaction = text::redact(trimmed);
    if !redaction.has_substance() {
        return Err(format!(
            "nothing left after redaction: {field} consisted only of secrets ({}); secrets are never stored",
            redaction.kinds.join(", ")
        ));
    }
    Ok(Admitted { text: redaction.text, redactions: redaction.kinds })
}

/// Initial importance: constraints and user statements weigh more.
pub(crate) fn initial_importance(kind: Kind, epistemic: Epistemic, source: &str) -> f64 {
    let base: f64 = match kind {
        Kind::Lesson => 0.8,
        Kind::Handoff => 0.6,
        Kind::Reflection => 0.55,
        Kind::Fact => 0.5,
        Kind::Episode => 0.4,
    };
    let constraint = match epistemic {
        Epistemic::Necessary => 0.2,
        Epistemic::Possible => -0.1,
        Epistemic::Actual => 0.0,
    };
    let user = if source == "user" { 0.1 } else { 0.0 };
    (base + constraint + user).clamp(0.0, 1.0)
}

/// Builds an atom from admitted text, inferring everything inferable.
pub(crate) fn new_atom(id: AtomId, text: String, kind: Kind, source: String, caller: &Caller) -> (Atom, Vec<text::Entity>) {
    let epistemic = text::infer_epistemic(&text);
    let polarity = text::infer_polarity(&text);
    let entities = text::extract_entities(&text);
    let atom = Atom {
        id,
        kind,
        epistemic,
        polarity,
        status: Status::Active,
        created_at: Memory::now(),
        language: text::detect_language(&text).to_owned(),
        importance: initial_importance(kind, epistemic, &source),
        entities: entities.iter().map(|e| e.name.clone()).collect(),
        supersedes: None,
        derived_from: Vec::new(),
        session_id: None,
        expires_at: None,
        last_recalled_at: None,
        recall_count: 0,
        last_decayed_at: None,
        scope: caller.scope.clone(),
        source,
        content: Some(text),
    };
    (atom, entities)
}

/// An existing atom with the same normalized content in the same repository.
pub(crate) enum Duplicate {
    /// In effect (or hidden but kept): the new write is a no-op.
    Existing(AtomId),
    /// Negated: restating it is refused.
    Negated(AtomId),
}

impl Memory {
    pub(crate) fn find_duplicate(&self, scope: &crate::scope::Scope, content: &str) -> Result<Option<Duplicate>> {
        let hash = text::content_hash(content);
        let rows =
            self.store.select(NamedQuery::FindByContentHash, &scope.tenant_id, &[("hash", oxigraph::model::Literal::from(hash).into())])?;
        let mut negated = None;
        for row in &rows {
            let literal = |name: &str| match row.get(name) {
                Some(oxigraph::model::Term::Literal(l)) => Some(l.value().to_owned()),
                _ => None,
            };
            let candidate_scope = crate::scope::Scope {
                tenant_id: scope.tenant_id.clone(),
                workspace: literal("workspace"),
                repository: literal("repository"),
                branch: None,
            };
            if !scope.same_repository(&candidate_scope) {
                continue;
            }
            let Some(id) = row.get("atom").and_then(store::atom_id_of) else { continue };
            match literal("status").and_then(|s| s.parse::<Status>().ok()) {
                Some(Status::Negated) => negated = negated.or(Some(id)),
                Some(Status::Superseded | Status::Tombstoned) | None => {}
                Some(_) => return Ok(Some(Duplicate::Existing(id))),
            }
        }
        Ok(negated.map(Duplicate::Negated))
    }

    /// `memory_memorize`: stores one memory, or says why not.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor))]
    pub fn memorize(&self, caller: &Caller, request: MemorizeRequest) -> Result<MemorizeOutcome> {
        let caller = Caller { scope: caller.scope.clone().normalized()?, actor: caller.actor.clone() };
        self.memorize_alone(&caller, request)
    }

    /// One call, written alone (its caller normalized).
    fn memorize_alone(&self, caller: &Caller, request: MemorizeRequest) -> Result<MemorizeOutcome> {
        match self.prepare_memorize(caller, request, &std::collections::HashMap::new())? {
            Prepared::Answered(outcome) => Ok(outcome),
            Prepared::New(new) => {
                self.apply(caller, Mutation { created: Some((&new.atom, new.entities.as_slice())), ..Mutation::new("memorize") })?;
                tracing::info!(atom = %new.atom.id, "memorized");
                Ok(new.outcome())
            }
        }
    }

    /// Several `memorize` calls that arrived together (a burst of tool
    /// calls), possibly of several callers: each answered as if made alone,
    /// in this order; each caller's new memories embedded in one batch per
    /// model and written together ([`Memory::memorize_together`]). One call
    /// is written alone, as `memorize` does. A call's failure (its scope,
    /// its request) is its own.
    #[tracing::instrument(skip_all, fields(calls = calls.len()))]
    pub(crate) fn memorize_calls(&self, calls: Vec<(Caller, MemorizeRequest)>) -> Vec<Result<MemorizeOutcome>> {
        // Each caller's calls, callers in the order they first came.
        let mut callers: Vec<(Caller, Vec<(usize, MemorizeRequest)>)> = Vec::new();
        let mut answers: Vec<(usize, Result<MemorizeOutcome>)> = Vec::with_capacity(calls.len());
        let alone = calls.len() == 1;
        for (at, (caller, request)) in calls.into_iter().enumerate() {
            let caller = match caller.scope.clone().normalized() {
                Ok(scope) => Caller { scope, actor: caller.actor },
                Err(error) => {
                    answers.push((at, Err(error.into())));
                    continue;
                }
            };
            match callers.iter_mut().find(|(c, _)| *c == caller) {
                Some((_, mine)) => mine.push((at, request)),
                None => callers.push((caller, vec![(at, request)])),
            }
        }
        for (caller, mine) in callers {
            let (at, requests): (Vec<usize>, Vec<MemorizeRequest>) = mine.into_iter().unzip();
            let written = if alone {
                requests.into_iter().map(|request| self.memorize_alone(&caller, request)).collect()
            } else {
                self.memorize_together(&caller, requests)
            };
            answers.extend(at.into_iter().zip(written));
        }
        answers.sort_by_key(|(at, _)| *at);
        answers.into_iter().map(|(_, answer)| answer).collect()
    }

    /// One caller's calls of a burst (normalized): each checked and deduplicated as
    /// alone (also against the earlier ones), the new memories embedded in
    /// one batch per model and written in one transaction per
    /// [`MEMORIZE_BATCH`] calls. A transaction that fails is retried one call at
    /// a time, so that each call gets its own answer.
    fn memorize_together(&self, caller: &Caller, requests: Vec<MemorizeRequest>) -> Vec<Result<MemorizeOutcome>> {
        let mut answers = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(MEMORIZE_BATCH) {
            let mut seen = std::collections::HashMap::new();
            // A call that cannot be prepared (its request) fails alone.
            let prepared: Vec<Result<Prepared>> =
                chunk.iter().map(|request| self.prepare_in_group(caller, request.clone(), &mut seen)).collect();
            match self.write_group(caller, prepared.iter().filter_map(|item| item.as_ref().ok())) {
                Ok(fresh) => {
                    tracing::info!(memorized = fresh, calls = chunk.len(), "memorized a burst");
                    answers.extend(prepared.into_iter().map(|item| item.map(Prepared::outcome)));
                }
                Err(error) => {
                    tracing::warn!(%error, calls = chunk.len(), "a burst's write failed; its calls are written one at a time");
                    answers.extend(chunk.iter().map(|request| self.memorize_alone(caller, request.clone())));
                }
            }
        }
        answers
    }

    /// Several `memorize` requests of one caller (bulk import, evaluation
    /// ingest, a burst): each is checked and deduplicated as `memorize`
    /// would (also against the earlier ones of the batch), then the new
    /// memories are embedded in one call per model and written in one
    /// transaction per [`MEMORIZE_BATCH`] of them. Outcomes come back in
    /// request order. On an error, the groups written before it stay
    /// written (each with its audit entries) and later ones are not.
    #[tracing::instrument(skip(self, requests), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor, requests = requests.len()))]
    pub fn memorize_many(&self, caller: &Caller, requests: Vec<MemorizeRequest>) -> Result<Vec<MemorizeOutcome>> {
        let mut bulk = Bulk::new(self, caller)?;
        let mut outcomes = Vec::with_capacity(requests.len());
        let mut requests = requests.into_iter().peekable();
        while requests.peek().is_some() {
            // One group: up to MEMORIZE_BATCH new memories, and the answers between them.
            let mut group: Vec<Prepared> = Vec::new();
            while bulk.fresh_in_group() < MEMORIZE_BATCH
                && let Some(request) = requests.next()
            {
                match bulk.prepare(request) {
                    Ok(prepared) => group.push(prepared),
                    Err(error) => return Err(bulk.fail(error)),
                }
            }
            outcomes.extend(bulk.send(group, ())?.into_iter().flat_map(|(landed, ())| landed));
        }
        outcomes.extend(bulk.land()?.into_iter().flat_map(|(landed, ())| landed));
        Ok(outcomes)
    }

    /// [`Memory::prepare_memorize`] of one request of a group; `seen` maps
    /// the content hashes of the group's new memories so far to their atoms,
    /// and gains this one's if it is new.
    fn prepare_in_group(
        &self,
        caller: &Caller,
        request: MemorizeRequest,
        seen: &mut std::collections::HashMap<String, AtomId>,
    ) -> Result<Prepared> {
        let prepared = self.prepare_memorize(caller, request, seen)?;
        if let Prepared::New(new) = &prepared {
            seen.insert(new.hash.clone(), new.atom.id);
        }
        Ok(prepared)
    }

    /// Writes the new memories among a group's `prepared` requests in one
    /// transaction (their vectors embedded in one batch per model), and
    /// says how many there were; nothing to write is no transaction.
    fn write_group<'p>(&self, caller: &Caller, prepared: impl Iterator<Item = &'p Prepared>) -> Result<usize> {
        let mutations = mutations_of(prepared);
        let fresh = mutations.len();
        self.apply_all(caller, mutations, super::FailAfter::default())?;
        Ok(fresh)
    }

    /// Everything `memorize` decides before writing: the answer, or the
    /// atom to write. `seen` maps content hashes to atoms about to be
    /// written in the same batch.
    fn prepare_memorize(
        &self,
        caller: &Caller,
        request: MemorizeRequest,
        seen: &std::collections::HashMap<String, AtomId>,
    ) -> Result<Prepared> {
        if !matches!(request.kind, Kind::Fact | Kind::Episode) {
            return Err(MemoryError::invalid(
                "kind",
                format!("memorize writes facts and episodes; {} atoms come from memory_handoff, derive_lesson or reflect", request.kind),
            ));
        }
        let source = clean_source(request.source.as_deref(), "agent")?;
        let admitted = match admit("content", &request.content, super::MAX_CONTENT_CHARS) {
            Ok(admitted) => admitted,
            Err(reason) => return Ok(Prepared::Answered(MemorizeOutcome::rejected(reason))),
        };
        let hash = text::content_hash(&admitted.text);
        let earlier = seen.get(&hash).copied().map(Duplicate::Existing);
        match earlier.map_or_else(|| self.find_duplicate(&caller.scope, &admitted.text), |d| Ok(Some(d)))? {
            Some(Duplicate::Existing(existing)) => {
                return Ok(Prepared::Answered(MemorizeOutcome {
                    atom_id: Some(existing.to_string()),
                    effect: Effect::NoOp,
                    reason: Some("exact duplicate of an existing memory in this scope".to_owned()),
                    deduped_with: Some(existing.to_string()),
                    redactions: admitted.redactions,
                }));
            }
            Some(Duplicate::Negated(negated)) => {
                return Ok(Prepared::Answered(MemorizeOutcome {
                    atom_id: None,
                    effect: Effect::Rejected,
                    reason: Some(format!(
                        "restates negated memory {negated}; negated memories stay negated. If it is true again, use memory_correct with action=replace on {negated} and the corrected content"
                    )),
                    deduped_with: None,
                    redactions: admitted.redactions,
                }));
            }
            None => {}
        }
        let id = self.next_id();
        let (mut atom, entities) = new_atom(id, admitted.text, request.kind, source, caller);
        atom.session_id = request.session_id;
        if let Some(created_at) = request.created_at {
            atom.created_at = created_at;
        }
        atom.expires_at = request.expires_at;
        Ok(Prepared::New(Box::new(NewAtom { atom, entities, hash, redactions: admitted.redactions })))
    }

    /// `memory_handoff`: stores a session hand-off summary.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor))]
    pub fn handoff(&self, caller: &Caller, request: HandoffRequest) -> Result<HandoffOutcome> {
        let caller = &Caller { scope: caller.scope.clone().normalized()?, actor: caller.actor.clone() };
        let source = clean_source(request.source.as_deref(), "agent")?;
        let admitted = match admit("summary", &request.summary, super::MAX_HANDOFF_CHARS) {
            Ok(admitted) => admitted,
            Err(reason) => {
                return Ok(HandoffOutcome { atom_id: None, effect: Effect::Rejected, reason: Some(reason), redactions: Vec::new() });
            }
        };
        let id = self.next_id();
        let (atom, entities) = new_atom(id, admitted.text, Kind::Handoff, source, caller);
        self.apply(caller, Mutation { created: Some((&atom, entities.as_slice())), ..Mutation::new("handoff") })?;
        Ok(HandoffOutcome { atom_id: Some(id.to_string()), effect: Effect::Applied, reason: None, redactions: admitted.redactions })
    }
}
