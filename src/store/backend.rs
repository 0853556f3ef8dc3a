//! The store backend boundary: what the rest of the crate needs from the
//! RDF store that holds the truth, implemented by the embedded Oxigraph
//! store ([`super::embedded`]) and by a remote SPARQL 1.1 store
//! ([`super::remote`]).
//!
//! **Invariants every backend keeps**
//! - Reads for a tenant are confined to its graph in what is evaluated (the
//!   dataset of the query), never by filtering results.
//! - [`Backend::commit`] applies a [`ChangeSet`] entirely or not at all, and
//!   only while its [`Guard`] holds (the store version and the audit heads
//!   the transaction read are still the current ones); it answers
//!   [`Committed::Lost`] when another writer came first, so the caller can
//!   run the transaction again on fresh reads.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use oxigraph::model::{GraphNameRef, NamedNode, NamedNodeRef, NamedOrBlankNode, Quad, Term};
use oxigraph::sparql::QuerySolution;

use super::{NamedQuery, Result};

/// What one write transaction changes: disjoint sets of quads to remove and
/// to insert (a quad inserted then removed in the same transaction is in
/// neither). Inserted quads are grouped by subject, so a transaction that
/// writes thousands of atoms reads its own writes without scanning them all.
#[derive(Debug, Default, Clone)]
pub(crate) struct ChangeSet {
    pub(crate) removed: HashSet<Quad>,
    inserted: HashMap<NamedOrBlankNode, HashSet<Quad>>,
}

impl ChangeSet {
    pub(crate) fn insert(&mut self, quad: Quad) {
        self.removed.remove(&quad);
        self.inserted.entry(quad.subject.clone()).or_default().insert(quad);
    }

    pub(crate) fn remove(&mut self, quad: Quad) {
        let was_inserted = self.inserted.get_mut(&quad.subject).is_some_and(|quads| quads.remove(&quad));
        if !was_inserted {
            self.removed.insert(quad);
        }
    }

    /// Every quad inserted.
    pub(crate) fn inserted(&self) -> impl Iterator<Item = &Quad> {
        self.inserted.values().flatten()
    }

    /// The inserted quads matching a pattern.
    pub(crate) fn inserted_matching<'a>(
        &'a self,
        subject: Option<NamedNodeRef<'a>>,
        predicate: Option<NamedNodeRef<'a>>,
        object: Option<&'a Term>,
        graph: GraphNameRef<'a>,
    ) -> Box<dyn Iterator<Item = &'a Quad> + 'a> {
        let candidates: Box<dyn Iterator<Item = &'a Quad> + 'a> = match subject {
            Some(subject) => Box::new(self.inserted.get(&NamedOrBlankNode::from(subject.into_owned())).into_iter().flatten()),
            None => Box::new(self.inserted()),
        };
        Box::new(candidates.filter(move |quad| {
            predicate.is_none_or(|p| quad.predicate.as_ref() == p)
                && object.is_none_or(|o| &quad.object == o)
                && quad.graph_name.as_ref() == graph
        }))
    }

    /// Whether nothing changes.
    pub(crate) fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.inserted.values().all(HashSet::is_empty)
    }
}

/// What a transaction read and relied on: the store version and, per
/// tenant whose audit chain it extended, the audit head entry (`None`: the
/// tenant had none). `version: None` means "the store has no version yet"
/// (its first initialization).
#[derive(Debug, Default, Clone)]
pub(crate) struct Guard {
    pub(crate) version: Option<i64>,
    pub(crate) audit_heads: Vec<(NamedNode, Option<NamedNode>)>,
}

/// How a commit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// Applied (and, for a remote store, confirmed by reading it back).
    Applied,
    /// Not applied: the guard no longer held.
    Lost,
}

/// The operations the crate needs from the store that holds the truth.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// Where the store is, for messages (`/path/to/store` or the endpoint URL).
    fn location(&self) -> String;

    /// Whether other processes may write the same store at the same time;
    /// if so nothing read by a writer may be cached between transactions.
    fn shared(&self) -> bool;

    /// Runs a SELECT query from `queries/`, confined to `graph` (every graph
    /// for maintenance queries when `None`), with variables bound.
    fn select(&self, query: NamedQuery, graph: Option<&NamedNode>, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>>;

    /// Every quad matching the pattern in `graph`.
    fn quads(
        &self,
        subject: Option<NamedNodeRef<'_>>,
        predicate: Option<NamedNodeRef<'_>>,
        object: Option<&Term>,
        graph: GraphNameRef<'_>,
    ) -> Result<Vec<Quad>>;

    /// Every quad of each of `subjects` in `graph` (one request where the
    /// backend pays per request).
    fn describe_many(&self, subjects: &[NamedNode], graph: GraphNameRef<'_>) -> Result<Vec<Quad>> {
        let mut quads = Vec::new();
        for subject in subjects {
            quads.extend(self.quads(Some(subject.as_ref()), None, None, graph)?);
        }
        Ok(quads)
    }

    /// The named graphs of the store.
    fn graphs(&self) -> Result<Vec<NamedNode>>;

    /// Applies `changes` atomically if `guard` still holds.
    fn commit(&self, changes: &ChangeSet, guard: &Guard) -> Result<Committed>;

    /// Inserts quads without a guard (a migration into a store no node uses
    /// yet), in batches the store accepts.
    fn load(&self, quads: &[Quad]) -> Result<()>;

    /// Root directory of an embedded store.
    fn root(&self) -> Option<&Path> {
        None
    }

    /// Destroys the strings no quad refers to any more (embedded only; a
    /// remote store's operator purges its own storage, see the README).
    fn vacuum(&self) -> Result<()> {
        Ok(())
    }

    /// Records that a vacuum is owed even if the process dies first.
    fn mark_vacuum_pending(&self) -> Result<()> {
        Ok(())
    }

    /// Makes everything durable.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// The embedded store, for surfaces that evaluate on Oxigraph directly.
    fn as_embedded(&self) -> Option<&super::embedded::Embedded> {
        None
    }

    /// The remote store, for surfaces that forward a query to it.
    fn as_remote(&self) -> Option<&super::remote::Remote> {
        None
    }
}
