//! Operations on a whole evolution chain or scope: destroying the content of
//! every version, negating every active memory of a scope (each one
//! transaction), and a chain's life as ADD / UPDATE / DELETE events. The
//! REST API's `DELETE /{id}?purge=true`, `DELETE /` and `GET /{id}/history`
//! translate to these (the writes used to loop over single transactions
//! and could stop half way; a purge ran one whole-store vacuum per version).

use super::{AtomFilter, Caller, Memory, Mutation, Result, clean_reason};
use crate::atom::{Atom, Status, parse_atom_id};

impl Memory {
    /// Tombstones every version of the evolution chain `atom_id` belongs to
    /// (both directions), in one transaction followed by one vacuum: the
    /// content of each is destroyed, nodes, links and audit entries stay.
    /// Returns how many versions were destroyed (already tombstoned ones are
    /// left as they are).
    #[tracing::instrument(skip(self, reason), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor))]
    pub fn purge_chain(&self, caller: &Caller, atom_id: &str, reason: &str) -> Result<usize> {
        let reason = clean_reason(reason)?;
        let id = parse_atom_id(atom_id).map_err(|e| super::MemoryError::invalid("atom_id", e.to_string()))?;
        let targets: Vec<Atom> = self.chain(caller, id)?.into_iter().filter(|atom| atom.status != Status::Tombstoned).collect();
        let mutations: Vec<Mutation<'_>> = targets
            .iter()
            .map(|target| Mutation {
                reason: Some(reason.clone()),
                target: Some(target),
                new_status: Some(Status::Tombstoned),
                destroy_content: true,
                ..Mutation::new("govern.tombstone")
            })
            .collect();
        self.apply_all(caller, mutations, super::FailAfter::default())?;
        Ok(targets.len())
    }

    /// Negates every active memory that `filter` selects for the caller, in
    /// one transaction. Returns how many were negated.
    #[tracing::instrument(skip(self, filter, reason), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor))]
    pub fn negate_all(&self, caller: &Caller, filter: &AtomFilter, reason: &str) -> Result<usize> {
        let reason = clean_reason(reason)?;
        let filter = AtomFilter { status: Some(Status::Active), ..filter.clone() };
        let targets = self.atoms_matching(caller, &filter)?;
        let mutations: Vec<Mutation<'_>> = targets
            .iter()
            .map(|target| Mutation {
                reason: Some(reason.clone()),
                target: Some(target),
                new_status: Some(Status::Negated),
                ..Mutation::new("correct.negate")
            })
            .collect();
        self.apply_all(caller, mutations, super::FailAfter::default())?;
        Ok(targets.len())
    }
}

/// One step of an evolution chain's life, in the vocabulary of the
/// mem0-style API: a memory added, updated (replaced) or deleted (negated
/// or tombstoned).
#[derive(Debug, Clone, PartialEq)]
pub struct ChainEvent {
    /// The audit entry.
    pub audit_id: String,
    /// The version the event is about (ADD, UPDATE: the new one).
    pub atom_id: String,
    /// ADD, UPDATE or DELETE.
    pub event: super::MergeEvent,
    /// Text before (UPDATE, DELETE), as every view shows it.
    pub old_content: Option<String>,
    /// Text after (ADD, UPDATE).
    pub new_content: Option<String>,
    /// RFC 3339.
    pub time: String,
    /// Who.
    pub actor: String,
    /// Why.
    pub reason: Option<String>,
}

impl Memory {
    /// The ADD / UPDATE / DELETE events of the evolution chain `atom_id`
    /// belongs to, oldest first, from its audit entries (other entries, such
    /// as a quarantine, are not events of this vocabulary).
    #[tracing::instrument(skip(self), fields(tenant = %caller.scope.tenant_id))]
    pub fn chain_events(&self, caller: &Caller, atom_id: &str) -> Result<Vec<ChainEvent>> {
        use super::MergeEvent;
        let history = self.history(caller, atom_id)?;
        let content =
            |id: &Option<String>| id.as_ref().and_then(|id| history.chain.iter().find(|a| &a.atom_id == id)).map(|a| a.content.clone());
        let mut events = Vec::new();
        for entry in &history.audit {
            let event = match entry.action.as_str() {
                "memorize" | "import" | "reflect.promote" => MergeEvent::Add,
                "correct.replace" => MergeEvent::Update,
                "correct.negate" | "govern.tombstone" => MergeEvent::Delete,
                _ => continue,
            };
            let (subject, old_content, new_content) = match event {
                MergeEvent::Add => (entry.generated.clone(), None, content(&entry.generated)),
                MergeEvent::Update => (entry.generated.clone(), content(&entry.target), content(&entry.generated)),
                _ => (entry.target.clone(), content(&entry.target), None),
            };
            let Some(atom_id) = subject else { continue };
            events.push(ChainEvent {
                audit_id: entry.audit_id.clone(),
                atom_id,
                event,
                old_content,
                new_content,
                time: entry.time.clone(),
                actor: entry.actor.clone(),
                reason: entry.reason.clone(),
            });
        }
        Ok(events)
    }
}
