//! Operations on many atoms at once, each in one transaction: destroying the
//! content of a whole evolution chain, negating every active memory of a
//! scope. The REST API's `DELETE /{id}?purge=true` and `DELETE /` translate
//! to these (they used to loop over single writes and could stop half way,
//! and a purge ran one whole-store vacuum per version).

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
        let history = self.history(caller, atom_id)?;
        let mut targets: Vec<Atom> = Vec::with_capacity(history.chain.len());
        for version in &history.chain {
            let id = parse_atom_id(&version.atom_id).map_err(|e| super::MemoryError::invalid("atom_id", e.to_string()))?;
            let atom = self.require_atom(caller, id)?;
            if atom.status != Status::Tombstoned {
                targets.push(atom);
            }
        }
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
        let filter = AtomFilter { status: Some(Status::Active.as_str().to_owned()), ..filter.clone() };
        let mut targets: Vec<Atom> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.list_atoms(caller, &filter, after.as_deref(), super::MAX_PAGE)?;
            for view in &page.atoms {
                let id = parse_atom_id(&view.atom_id).map_err(|e| super::MemoryError::invalid("atom_id", e.to_string()))?;
                targets.push(self.require_atom(caller, id)?);
            }
            match page.next_cursor {
                Some(cursor) => after = Some(cursor),
                None => break,
            }
        }
        let mutations: Vec<Mutation<'_>> = targets
            .iter()
            .map(|target| Mutation { reason: Some(reason.clone()), target: Some(target), new_status: Some(Status::Negated), ..Mutation::new("correct.negate") })
            .collect();
        self.apply_all(caller, mutations, super::FailAfter::default())?;
        Ok(targets.len())
    }
}
