//! `memory_recall` on the facade: the caller's scope resolved, the engine
//! ([`crate::recall`]) run, usage recorded on what was returned.

use super::{Caller, Memory, MemoryError, Result};
use crate::atom::AtomId;
use crate::recall::{RecallError, RecallOutcome, RecallRequest};

impl From<RecallError> for MemoryError {
    fn from(error: RecallError) -> MemoryError {
        match error {
            RecallError::Invalid { field, message } => MemoryError::InvalidInput { field, message },
            RecallError::Store(e) => MemoryError::Store(e),
            RecallError::Index(e) => MemoryError::Index(e),
        }
    }
}

impl Memory {
    /// `memory_recall`.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, max_results = request.max_results))]
    pub fn recall(&self, caller: &Caller, request: RecallRequest) -> Result<RecallOutcome> {
        let scope = caller.scope.clone().normalized()?;
        self.sync_indexes()?;
        let ranked = crate::recall::rank(&self.store, &self.indexes, &self.recall_config, &scope, &request)?;
        if request.record && !ranked.is_empty() {
            let ids: Vec<AtomId> = ranked.iter().map(|(atom, _)| atom.id).collect();
            if let Err(error) = self.record_recalls(&scope.tenant_id, &ids) {
                // Usage stamps are bookkeeping: a failure must not fail the recall.
                tracing::warn!(%error, "could not record recall usage");
            }
        }
        Ok(crate::recall::outcome(ranked, request.explain, self.indexes.semantic_note().map(str::to_owned)))
    }
}
