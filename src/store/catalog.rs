//! The catalog: every atom of a tenant with its scope node, kept in memory
//! between writes. Listing a scope (each REST `add` lists its memories
//! before merging; `list`, `get_all`) needs every atom id of the tenant and
//! each one's scope; reading them from Oxigraph decodes two IRIs per atom
//! (2.6 ms at 500 atoms, linear in the tenant's size).
//!
//! It also keeps the quads of atoms lately read ([`Catalog::described`]):
//! each REST `add` reads its scope's 200 newest memories again, 1.3 ms of
//! RocksDB reads per add, when only the few it wrote changed.
//!
//! **Invariant:** a tenant's listing, and an atom's quads, are served only at the
//! `snapshot_version` it was read or patched at. [`Catalog::committed`]
//! patches every listing from the quads a write committed, if the listing
//! was current just before that write; any other listing is dropped (a
//! version it missed: another node's write on a shared store, a migration,
//! a vacuum). A listing may hold an atom no longer in the store (readers
//! load each atom and skip one that is gone), never lack one. A write drops
//! the kept quads of every subject it touched, if they were current just
//! before it, else all of them; quads read at an older version than those
//! kept are not kept. Kept quads live in RAM only: a tombstone's commit
//! drops its atom's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use oxigraph::model::vocab::rdf;
use oxigraph::model::{GraphName, NamedNode, NamedNodeRef, NamedOrBlankNode, Quad, Term};

use super::backend::ChangeSet;
use crate::atom::AtomId;
use crate::recent::Recent;
use crate::vocab::hmg;

/// Tenants whose listing is kept; more clears them all (each is read again
/// at its next use).
const MAX_TENANTS: usize = 64;

/// Every atom of one tenant with its scope node, at one version.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    /// Atom ids (ULIDs: ascending is oldest first) and the index of each
    /// one's scope node in `scopes` (`None`: an atom without a scope, which
    /// is corrupt, listed so that reading it reports the damage).
    atoms: BTreeMap<AtomId, Option<u32>>,
    scopes: Vec<NamedNode>,
    scope_index: HashMap<NamedNode, u32>,
}

impl Listing {
    /// The atoms, newest first, each with its scope node.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = (AtomId, Option<&NamedNode>)> {
        self.atoms.iter().rev().map(|(id, scope)| (*id, scope.and_then(|s| self.scopes.get(s as usize))))
    }

    /// Whether `id` is listed.
    pub(crate) fn contains(&self, id: AtomId) -> bool {
        self.atoms.contains_key(&id)
    }

    fn scope(&mut self, node: NamedNode) -> u32 {
        if let Some(index) = self.scope_index.get(&node) {
            return *index;
        }
        let index = u32::try_from(self.scopes.len()).unwrap_or(u32::MAX);
        self.scopes.push(node.clone());
        self.scope_index.insert(node, index);
        index
    }

    /// Records an atom (its scope, if known).
    pub(crate) fn insert(&mut self, id: AtomId, scope: Option<NamedNode>) {
        let scope = scope.map(|node| self.scope(node));
        let entry = self.atoms.entry(id).or_insert(None);
        if scope.is_some() {
            *entry = scope;
        }
    }

    /// Applies one committed transaction's quads of this tenant's graph.
    fn apply(&mut self, graph: &NamedNode, changes: &ChangeSet) {
        let in_graph = |quad: &Quad| matches!(&quad.graph_name, oxigraph::model::GraphName::NamedNode(g) if g == graph);
        for quad in changes.removed.iter().filter(|q| in_graph(q)) {
            let Some(id) = subject_atom(quad) else { continue };
            if is_atom_type(quad) {
                self.atoms.remove(&id);
            } else if quad.predicate == hmg::IN_SCOPE
                && let Some(scope) = self.atoms.get_mut(&id)
            {
                *scope = None;
            }
        }
        // Types first: a scope is recorded only for a listed atom, as
        // [`super::Store::listing_at`] reads them.
        for quad in changes.inserted().filter(|q| in_graph(q) && is_atom_type(q)) {
            if let Some(id) = subject_atom(quad) {
                self.insert(id, None);
            }
        }
        for quad in changes.inserted().filter(|q| in_graph(q) && q.predicate == hmg::IN_SCOPE) {
            if let (Some(id), Term::NamedNode(scope)) = (subject_atom(quad), &quad.object)
                && self.contains(id)
            {
                self.insert(id, Some(scope.clone()));
            }
        }
    }
}

fn subject_atom(quad: &Quad) -> Option<AtomId> {
    match &quad.subject {
        NamedOrBlankNode::NamedNode(subject) => super::atom_id_of_iri(subject.as_str()),
        NamedOrBlankNode::BlankNode(_) => None,
    }
}

fn is_atom_type(quad: &Quad) -> bool {
    quad.predicate == rdf::TYPE && matches!(&quad.object, Term::NamedNode(o) if o.as_ref() == hmg::ATOM)
}

/// Atoms whose quads are kept ([`Catalog::described`]); the least
/// recently used half goes when full. About 4 KB each (some fifteen quads
/// of IRIs and literals): 8 MB at most.
const DESCRIBED_KEPT: usize = 2048;

/// The listings kept, by tenant graph, and atoms' quads.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    listings: Mutex<HashMap<NamedNode, (u64, Arc<Listing>)>>,
    described: Mutex<Described>,
}

/// Atoms' quads as read at one version, by graph and subject.
#[derive(Debug)]
struct Described {
    version: u64,
    quads: Recent<Arc<Vec<Quad>>>,
}

impl Default for Described {
    fn default() -> Described {
        Described { version: 0, quads: Recent::new(DESCRIBED_KEPT) }
    }
}

/// A kept subject's key: its graph and IRI (neither holds a space).
fn described_key(graph: &str, subject: &str) -> String {
    format!("{graph} {subject}")
}

impl Catalog {
    /// `graph`'s listing if it was current at `version`.
    pub(crate) fn get(&self, graph: &NamedNode, version: u64) -> Option<Arc<Listing>> {
        let listings = self.listings.lock().unwrap_or_else(PoisonError::into_inner);
        listings.get(graph).filter(|(at, _)| *at == version).map(|(_, listing)| Arc::clone(listing))
    }

    /// Keeps `listing`, read from the store after `version` was read: it
    /// holds at least that version's atoms (a write committed while it was
    /// read is in it too, and patching it again with that write changes
    /// nothing).
    pub(crate) fn put(&self, graph: NamedNode, version: u64, listing: Arc<Listing>) {
        let mut listings = self.listings.lock().unwrap_or_else(PoisonError::into_inner);
        if listings.len() >= MAX_TENANTS && !listings.contains_key(&graph) {
            listings.clear();
        }
        listings.insert(graph, (version, listing));
    }

    /// The quads of `subject` in `graph` if they were kept at `version`.
    pub(crate) fn described(&self, graph: &NamedNode, subject: NamedNodeRef<'_>, version: u64) -> Option<Arc<Vec<Quad>>> {
        let mut described = self.described.lock().unwrap_or_else(PoisonError::into_inner);
        if described.version != version {
            return None;
        }
        described.quads.get(&described_key(graph.as_str(), subject.as_str()))
    }

    /// Keeps `quads`, read from the store after `version` was read (a write
    /// committed meanwhile may be in them; if it touched `subject`, its
    /// patch drops them, before or after). Quads of an older version than
    /// those kept are not kept; of a newer one, they replace them all.
    pub(crate) fn keep_described(&self, graph: &NamedNode, subject: NamedNodeRef<'_>, version: u64, quads: Arc<Vec<Quad>>) {
        let mut described = self.described.lock().unwrap_or_else(PoisonError::into_inner);
        if version > described.version {
            *described = Described { version, ..Described::default() };
        }
        if version == described.version {
            described.quads.insert(described_key(graph.as_str(), subject.as_str()), quads);
        }
    }

    /// A transaction committed as `version`: each listing current just
    /// before it is patched with its changes; any other is dropped. The
    /// kept quads of every subject it touched go; all of them, if they
    /// were not current just before it.
    pub(crate) fn committed(&self, version: u64, changes: &ChangeSet) {
        {
            let mut described = self.described.lock().unwrap_or_else(PoisonError::into_inner);
            if version.checked_sub(1) == Some(described.version) {
                for quad in changes.removed.iter().chain(changes.inserted()) {
                    if let (NamedOrBlankNode::NamedNode(subject), GraphName::NamedNode(graph)) = (&quad.subject, &quad.graph_name) {
                        described.quads.remove(&described_key(graph.as_str(), subject.as_str()));
                    }
                }
                described.version = version;
            } else {
                *described = Described { version, ..Described::default() };
            }
        }
        let mut listings = self.listings.lock().unwrap_or_else(PoisonError::into_inner);
        listings.retain(|graph, (at, listing)| {
            if version.checked_sub(1) != Some(*at) {
                return false;
            }
            Arc::make_mut(listing).apply(graph, changes);
            *at = version;
            true
        });
    }

    /// Drops every listing and every kept quad (a change that bypassed
    /// [`Catalog::committed`]).
    pub(crate) fn clear(&self) {
        self.listings.lock().unwrap_or_else(PoisonError::into_inner).clear();
        *self.described.lock().unwrap_or_else(PoisonError::into_inner) = Described::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atom(n: u64) -> (AtomId, NamedNode) {
        let id: AtomId = ulid::Ulid::from_parts(n, 0);
        (id, super::super::atom_iri(id))
    }

    fn typed(iri: &NamedNode, graph: &NamedNode) -> Quad {
        Quad::new(iri.clone(), rdf::TYPE, hmg::ATOM, graph.clone())
    }

    fn scoped(iri: &NamedNode, scope: &str, graph: &NamedNode) -> Quad {
        Quad::new(iri.clone(), hmg::IN_SCOPE, NamedNode::new_unchecked(scope), graph.clone())
    }

    fn ids(listing: &Listing) -> Vec<(AtomId, Option<String>)> {
        listing.newest_first().map(|(id, s)| (id, s.map(|s| s.as_str().to_owned()))).collect()
    }

    #[test]
    fn a_write_patches_a_current_listing_and_drops_a_stale_one() {
        let (alice, bob) = (super::super::tenant_graph("alice"), super::super::tenant_graph("bob"));
        let catalog = Catalog::default();
        let (a1, a1_iri) = atom(1);
        let mut listing = Listing::default();
        listing.insert(a1, Some(NamedNode::new_unchecked("urn:hmg:scope:x")));
        catalog.put(alice.clone(), 7, Arc::new(listing));
        catalog.put(bob.clone(), 5, Arc::new(Listing::default()));

        // Version 8: a new atom in alice's graph, one in bob's, and a1 loses its type.
        let (a2, a2_iri) = atom(2);
        let (_, b1_iri) = atom(3);
        let mut changes = ChangeSet::default();
        changes.insert(typed(&a2_iri, &alice));
        changes.insert(scoped(&a2_iri, "urn:hmg:scope:y", &alice));
        changes.insert(typed(&b1_iri, &bob));
        changes.remove(typed(&a1_iri, &alice));
        catalog.committed(8, &changes);

        assert!(catalog.get(&alice, 7).is_none(), "a listing is served only at its version");
        let patched = catalog.get(&alice, 8).expect("alice's listing was current before version 8");
        assert_eq!(ids(&patched), [(a2, Some("urn:hmg:scope:y".to_owned()))]);
        assert!(catalog.get(&bob, 8).is_none() && catalog.get(&bob, 5).is_none(), "bob's listing missed a version");

        // Patching again with the same write (a listing read while it
        // committed) changes nothing.
        catalog.put(alice.clone(), 7, Arc::new((*patched).clone()));
        catalog.committed(8, &changes);
        assert_eq!(ids(&catalog.get(&alice, 8).expect("patched")), [(a2, Some("urn:hmg:scope:y".to_owned()))]);
    }

    #[test]
    fn kept_quads_are_served_at_their_version_and_a_write_drops_the_subjects_it_touched() {
        let (alice, bob) = (super::super::tenant_graph("alice"), super::super::tenant_graph("bob"));
        let catalog = Catalog::default();
        let ((_, a1), (_, a2)) = (atom(1), atom(2));
        let quads = |iri: &NamedNode| Arc::new(vec![typed(iri, &alice), scoped(iri, "urn:hmg:scope:x", &alice)]);
        catalog.keep_described(&alice, a1.as_ref(), 7, quads(&a1));
        catalog.keep_described(&alice, a2.as_ref(), 7, quads(&a2));
        assert_eq!(catalog.described(&alice, a1.as_ref(), 7), Some(quads(&a1)));
        assert!(catalog.described(&alice, a1.as_ref(), 8).is_none(), "served only at their version");
        assert!(catalog.described(&bob, a1.as_ref(), 7).is_none(), "kept per graph");

        // Version 8 changes a1's scope: a1's quads go, a2's are current.
        let mut changes = ChangeSet::default();
        changes.remove(scoped(&a1, "urn:hmg:scope:x", &alice));
        changes.insert(scoped(&a1, "urn:hmg:scope:y", &alice));
        catalog.committed(8, &changes);
        assert!(catalog.described(&alice, a1.as_ref(), 8).is_none(), "a1 changed");
        assert_eq!(catalog.described(&alice, a2.as_ref(), 8), Some(quads(&a2)));

        // Read before version 8 committed and kept after it: not kept.
        catalog.keep_described(&alice, a1.as_ref(), 7, quads(&a1));
        assert!(catalog.described(&alice, a1.as_ref(), 8).is_none() && catalog.described(&alice, a1.as_ref(), 7).is_none());

        // A version missed (another node's write): every quad goes, and
        // quads read at a newer version start again.
        catalog.committed(10, &ChangeSet::default());
        assert!(catalog.described(&alice, a2.as_ref(), 10).is_none());
        catalog.keep_described(&alice, a2.as_ref(), 12, quads(&a2));
        assert_eq!(catalog.described(&alice, a2.as_ref(), 12), Some(quads(&a2)));
        catalog.clear();
        assert!(catalog.described(&alice, a2.as_ref(), 12).is_none(), "cleared with the listings");
    }

    #[test]
    fn an_atom_without_a_scope_is_listed_and_scopes_are_shared() {
        let mut listing = Listing::default();
        let scope = NamedNode::new_unchecked("urn:hmg:scope:x");
        for n in 1..=3 {
            listing.insert(atom(n).0, Some(scope.clone()));
        }
        listing.insert(atom(4).0, None);
        assert_eq!(listing.scopes.len(), 1);
        assert_eq!(listing.atoms.len(), 4);
        let newest: Vec<Option<String>> = listing.newest_first().map(|(_, s)| s.map(|s| s.as_str().to_owned())).collect();
        assert_eq!(newest, [None, Some(scope.as_str().to_owned()), Some(scope.as_str().to_owned()), Some(scope.as_str().to_owned())]);
    }
}
