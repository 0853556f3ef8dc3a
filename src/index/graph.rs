//! The graph index (petgraph): atoms linked to the entities they mention,
//! to the session they came from (in order), and to each other through
//! evolution (`prov:wasRevisionOf`) and derivation (`prov:wasDerivedFrom`).
//! Recall expands its strongest candidates through it.
//!
//! **Architecture invariants:** derived; updated after every committed
//! write; persisted in `<index>/graph.bin` with the store version it
//! reflects (written atomically on flush and after a tombstone), and caught
//! up from the change feed at open like the other indexes. A missing or
//! unreadable file, or one newer than the store, means a rebuild from the
//! store.

use std::io::{Read, Write};
use std::path::Path;

// foldhash (randomly seeded per process) instead of SipHash: reading
// graph.bin hashes every atom id and entity key a few times, and SipHash
// was a visible part of a cold `hmg recall` under perf.
use foldhash::HashMap as FastMap;
use petgraph::Undirected;
use petgraph::stable_graph::{NodeIndex, StableGraph};
use petgraph::visit::EdgeRef;

use crate::atom::AtomId;
use crate::index::card::Card;
use crate::index::vector::{put_str, read_str, rewrite_version};

/// A node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    /// An atom.
    Atom(AtomId),
    /// An entity, by tenant and normalized key.
    Entity(String, String),
    /// A session, by tenant and id.
    Session(String, String),
}

/// An edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Atom mentions entity.
    Mentions,
    /// Atom belongs to session.
    InSession,
    /// Newer atom revises older.
    Revision,
    /// Lesson or reflection derived from atom.
    Derivation,
}

/// What the graph knows about one atom: its links, and its card.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AtomLinks {
    /// Tenant.
    pub tenant: String,
    /// Normalized entity keys.
    pub entities: Vec<String>,
    /// Session id.
    pub session: Option<String>,
    /// The atom it revises.
    pub supersedes: Option<AtomId>,
    /// Its sources.
    pub derived_from: Vec<AtomId>,
    /// What recall boosts it by (`None`: unknown; recall then assumes the
    /// largest boost).
    pub card: Option<Card>,
}

/// A neighbour reached from a seed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Neighbour {
    /// The atom reached.
    pub atom_id: AtomId,
    /// Edge weight in 0–1 (before hop decay).
    pub weight: f32,
    /// How: `entity:<name>`, `session`, `revision`, `derivation`.
    pub via: String,
}

/// The in-memory graph.
#[derive(Debug, Default)]
pub(crate) struct GraphIndex {
    graph: StableGraph<Node, Link, Undirected>,
    nodes: FastMap<Node, NodeIndex>,
    /// Session members in id (= ingestion) order.
    sessions: FastMap<(String, String), Vec<AtomId>>,
    /// Each atom's links as given (what is persisted).
    links: FastMap<AtomId, AtomLinks>,
    /// Store version reflected.
    applied_version: u64,
    /// Version last written to disk.
    saved_version: u64,
    /// Whether the file holds exactly these links (read from it or written
    /// since, no link changed): a save then only moves its version.
    links_on_disk: bool,
}

/// Layout version of `graph.bin`: 2 added each atom's card; a file of
/// format 1 is built again from the store (it has no cards).
const FORMAT: u32 = 2;

/// Where `graph.bin` keeps its store version (after the layout version).
const VERSION_OFFSET: u64 = std::mem::size_of::<u32>() as u64;

impl GraphIndex {
    /// An empty graph.
    pub(crate) fn new() -> GraphIndex {
        GraphIndex::default()
    }

    fn node(&mut self, node: Node) -> NodeIndex {
        if let Some(index) = self.nodes.get(&node) {
            return *index;
        }
        let index = self.graph.add_node(node.clone());
        self.nodes.insert(node, index);
        index
    }

    /// The store version the graph reflects.
    pub(crate) fn applied_version(&self) -> u64 {
        self.applied_version
    }

    /// Records that every change up to `version` is applied.
    pub(crate) fn mark(&mut self, version: u64) {
        self.applied_version = self.applied_version.max(version);
    }

    /// Records that the write committed as `version` changed no link, when
    /// every earlier version is applied (else a catch-up replays it).
    pub(crate) fn skip(&mut self, version: u64) {
        if self.applied_version + 1 == version {
            self.applied_version = version;
        }
    }

    /// Writes the graph to `path` (atomically) unless it is unchanged since
    /// the last write.
    pub(crate) fn save(&mut self, path: &Path) -> std::io::Result<()> {
        if self.saved_version == self.applied_version && path.exists() {
            return Ok(());
        }
        // Only the version moved (recall usage stamps): rewrite its 8
        // bytes, not the whole file (1 MB and an fsync at 10k atoms, on
        // every CLI recall).
        if self.links_on_disk && rewrite_version(path, VERSION_OFFSET, self.applied_version)? {
            self.saved_version = self.applied_version;
            return Ok(());
        }
        let mut out = Vec::with_capacity(64 * self.links.len() + 32);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&self.applied_version.to_le_bytes());
        out.extend_from_slice(&(self.links.len() as u64).to_le_bytes());
        for (id, links) in &self.links {
            out.extend_from_slice(&u128::from(*id).to_le_bytes());
            put_str(&mut out, &links.tenant);
            out.extend_from_slice(&(links.entities.len() as u32).to_le_bytes());
            for entity in &links.entities {
                put_str(&mut out, entity);
            }
            put_str(&mut out, links.session.as_deref().unwrap_or(""));
            out.extend_from_slice(&links.supersedes.map_or(0, u128::from).to_le_bytes());
            out.extend_from_slice(&(links.derived_from.len() as u32).to_le_bytes());
            for source in &links.derived_from {
                out.extend_from_slice(&u128::from(*source).to_le_bytes());
            }
            match &links.card {
                Some(card) => {
                    out.push(1);
                    card.put(&mut out);
                }
                None => out.push(0),
            }
        }
        let tmp = path.with_extension("bin.tmp");
        {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&out)?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        self.saved_version = self.applied_version;
        self.links_on_disk = true;
        Ok(())
    }

    /// Reads a graph written by [`GraphIndex::save`]; `Ok(None)` when there
    /// is no file or one of an older format (the caller builds the graph
    /// from the store), an `InvalidData` error when it is not one.
    pub(crate) fn load(path: &Path) -> std::io::Result<Option<GraphIndex>> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated or malformed graph file");
        let mut reader = &bytes[..];
        fn take<const N: usize>(reader: &mut &[u8]) -> Option<[u8; N]> {
            let mut buf = [0u8; N];
            reader.read_exact(&mut buf).ok()?;
            Some(buf)
        }
        match take::<4>(&mut reader).map(u32::from_le_bytes) {
            Some(FORMAT) => {}
            Some(1) => {
                tracing::info!(path = %path.display(), "graph index file of an older format (no cards); building it again");
                return Ok(None);
            }
            _ => return Err(bad()),
        }
        let version = take::<8>(&mut reader).map(u64::from_le_bytes).ok_or_else(bad)?;
        let count = take::<8>(&mut reader).map(u64::from_le_bytes).ok_or_else(bad)?;
        let mut graph = GraphIndex::new();
        for _ in 0..count {
            let id = AtomId::from(take::<16>(&mut reader).map(u128::from_le_bytes).ok_or_else(bad)?);
            let tenant = read_str(&mut reader).ok_or_else(bad)?;
            let entity_count = take::<4>(&mut reader).map(u32::from_le_bytes).ok_or_else(bad)?;
            let mut entities = Vec::new();
            for _ in 0..entity_count {
                entities.push(read_str(&mut reader).ok_or_else(bad)?);
            }
            let session = read_str(&mut reader).ok_or_else(bad)?;
            let supersedes = take::<16>(&mut reader).map(u128::from_le_bytes).ok_or_else(bad)?;
            let source_count = take::<4>(&mut reader).map(u32::from_le_bytes).ok_or_else(bad)?;
            let mut derived_from = Vec::new();
            for _ in 0..source_count {
                derived_from.push(AtomId::from(take::<16>(&mut reader).map(u128::from_le_bytes).ok_or_else(bad)?));
            }
            let card = match take::<1>(&mut reader).ok_or_else(bad)? {
                [0] => None,
                [1] => Some(Card::read(&mut reader).ok_or_else(bad)?),
                _ => return Err(bad()),
            };
            let links = AtomLinks {
                tenant,
                entities,
                session: (!session.is_empty()).then_some(session),
                supersedes: (supersedes != 0).then(|| AtomId::from(supersedes)),
                derived_from,
                card,
            };
            if graph.links.contains_key(&id) {
                // Written from a map, so never twice; a damaged file that
                // repeats an atom still loads as a replacement would.
                graph.upsert(id, &links);
            } else {
                graph.add_edges(id, &links);
                graph.links.insert(id, links);
            }
        }
        if !reader.is_empty() {
            return Err(bad());
        }
        graph.applied_version = version;
        graph.saved_version = version;
        graph.links_on_disk = true;
        Ok(Some(graph))
    }

    /// The card of `atom_id`, when the graph has one.
    pub(crate) fn card(&self, atom_id: AtomId) -> Option<&Card> {
        self.links.get(&atom_id)?.card.as_ref()
    }

    /// Replaces the card of `atom_id` (tests: a missing or a wrong card).
    #[cfg(test)]
    pub(crate) fn set_card(&mut self, atom_id: AtomId, card: Option<Card>) {
        if let Some(links) = self.links.get_mut(&atom_id) {
            links.card = card;
        }
    }

    /// Every atom's card (tests).
    #[cfg(test)]
    pub(crate) fn cards(&self) -> std::collections::HashMap<AtomId, Option<Card>> {
        self.links.iter().map(|(id, links)| (*id, links.card.clone())).collect()
    }

    /// Replaces an atom's links.
    pub(crate) fn upsert(&mut self, atom_id: AtomId, links: &AtomLinks) {
        self.remove(atom_id);
        self.links.insert(atom_id, links.clone());
        self.add_edges(atom_id, links);
    }

    /// Adds the edges of an atom's links (an atom without any yet).
    fn add_edges(&mut self, atom_id: AtomId, links: &AtomLinks) {
        let atom = self.node(Node::Atom(atom_id));
        for key in &links.entities {
            let entity = self.node(Node::Entity(links.tenant.clone(), key.clone()));
            self.graph.add_edge(atom, entity, Link::Mentions);
        }
        if let Some(session) = &links.session {
            let node = self.node(Node::Session(links.tenant.clone(), session.clone()));
            self.graph.add_edge(atom, node, Link::InSession);
            let members = self.sessions.entry((links.tenant.clone(), session.clone())).or_default();
            if let Err(position) = members.binary_search(&atom_id) {
                members.insert(position, atom_id);
            }
        }
        if let Some(old) = links.supersedes {
            let old = self.node(Node::Atom(old));
            self.graph.add_edge(atom, old, Link::Revision);
        }
        for source in &links.derived_from {
            let source = self.node(Node::Atom(*source));
            self.graph.add_edge(atom, source, Link::Derivation);
        }
    }

    /// Removes an atom's outgoing links (the node stays if others point at it).
    pub(crate) fn remove(&mut self, atom_id: AtomId) {
        self.links_on_disk = false;
        self.links.remove(&atom_id);
        let Some(&atom) = self.nodes.get(&Node::Atom(atom_id)) else { return };
        let edges: Vec<_> = self.graph.edges(atom).map(|e| (e.id(), *e.weight(), e.target(), e.source())).collect();
        for (edge, link, a, b) in edges {
            let other = if a == atom { b } else { a };
            if link == Link::InSession
                && let Some(Node::Session(tenant, session)) = self.graph.node_weight(other).cloned()
                && let Some(members) = self.sessions.get_mut(&(tenant, session))
            {
                members.retain(|m| *m != atom_id);
            }
            // Revision/derivation edges pointing *at* this atom belong to the other atom.
            let outgoing = matches!(link, Link::Mentions | Link::InSession) || self.owns_link(atom_id, other);
            if outgoing {
                self.graph.remove_edge(edge);
            }
        }
    }

    /// Revision and derivation edges are stored undirected; the newer atom
    /// (the larger id) owns them.
    fn owns_link(&self, atom_id: AtomId, other: NodeIndex) -> bool {
        match self.graph.node_weight(other) {
            Some(Node::Atom(other)) => *other < atom_id,
            _ => true,
        }
    }

    /// Atoms linked to `atom_id`: through shared entities (weighted by how
    /// rare the entity is), session neighbours within `session_window`
    /// turns, and evolution/derivation links.
    pub(crate) fn neighbours(&self, atom_id: AtomId, session_window: usize, max_entity_degree: usize) -> Vec<Neighbour> {
        let Some(&atom) = self.nodes.get(&Node::Atom(atom_id)) else { return Vec::new() };
        let mut out: Vec<Neighbour> = Vec::new();
        for edge in self.graph.edges(atom) {
            let other = if edge.source() == atom { edge.target() } else { edge.source() };
            match (edge.weight(), self.graph.node_weight(other)) {
                (Link::Mentions, Some(Node::Entity(_, key))) => {
                    // Counted only as far as the cap: a common name's node
                    // has thousands of edges, walked for every seed.
                    let degree = self.graph.edges(other).take(max_entity_degree.saturating_add(1)).count();
                    if degree <= 1 || degree > max_entity_degree {
                        continue;
                    }
                    let weight = 1.0 / (1.0 + (degree as f32).ln());
                    for e in self.graph.edges(other) {
                        let next = if e.source() == other { e.target() } else { e.source() };
                        if let Some(Node::Atom(id)) = self.graph.node_weight(next)
                            && *id != atom_id
                        {
                            out.push(Neighbour { atom_id: *id, weight, via: format!("entity:{key}") });
                        }
                    }
                }
                (Link::InSession, Some(Node::Session(tenant, session))) => {
                    if let Some(members) = self.sessions.get(&(tenant.clone(), session.clone()))
                        && let Ok(position) = members.binary_search(&atom_id)
                    {
                        let from = position.saturating_sub(session_window);
                        let to = (position + session_window + 1).min(members.len());
                        for (i, id) in members[from..to].iter().enumerate() {
                            let distance = (from + i).abs_diff(position);
                            if distance > 0 {
                                out.push(Neighbour { atom_id: *id, weight: 1.0 / (1.0 + distance as f32), via: "session".to_owned() });
                            }
                        }
                    }
                }
                (Link::Revision, Some(Node::Atom(id))) => {
                    out.push(Neighbour { atom_id: *id, weight: 1.0, via: "revision".to_owned() });
                }
                (Link::Derivation, Some(Node::Atom(id))) => {
                    out.push(Neighbour { atom_id: *id, weight: 1.0, via: "derivation".to_owned() });
                }
                _ => {}
            }
        }
        out
    }

    /// Atoms mentioning the entity `key` of `tenant`.
    pub(crate) fn atoms_mentioning(&self, tenant: &str, key: &str) -> Vec<AtomId> {
        let Some(&entity) = self.nodes.get(&Node::Entity(tenant.to_owned(), key.to_owned())) else { return Vec::new() };
        self.graph
            .edges(entity)
            .filter_map(|e| {
                let next = if e.source() == entity { e.target() } else { e.source() };
                match self.graph.node_weight(next) {
                    Some(Node::Atom(id)) => Some(*id),
                    _ => None,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(entities: &[&str], session: Option<&str>) -> AtomLinks {
        AtomLinks {
            tenant: "t".into(),
            entities: entities.iter().map(|s| s.to_string()).collect(),
            session: session.map(str::to_owned),
            ..AtomLinks::default()
        }
    }

    #[test]
    fn neighbours_through_entities_sessions_and_revisions() {
        let mut graph = GraphIndex::new();
        let mut ids: Vec<AtomId> = (0..5).map(|_| ulid::Ulid::generate()).collect();
        ids.sort();
        graph.upsert(ids[0], &links(&["postgresql"], Some("s1")));
        graph.upsert(ids[1], &links(&["postgresql", "redis"], Some("s1")));
        graph.upsert(ids[2], &links(&[], Some("s1")));
        graph.upsert(ids[3], &links(&["redis"], Some("s2")));
        graph.upsert(ids[4], &AtomLinks { supersedes: Some(ids[3]), ..links(&[], None) });
        let n0 = graph.neighbours(ids[0], 1, 100);
        assert!(n0.iter().any(|n| n.atom_id == ids[1] && n.via == "entity:postgresql"));
        assert!(n0.iter().any(|n| n.atom_id == ids[1] && n.via == "session"));
        assert!(!n0.iter().any(|n| n.atom_id == ids[2]), "outside the session window");
        let n3 = graph.neighbours(ids[3], 1, 100);
        assert!(n3.iter().any(|n| n.atom_id == ids[4] && n.via == "revision"));
        assert_eq!(graph.atoms_mentioning("t", "redis").len(), 2);
        graph.remove(ids[1]);
        assert_eq!(graph.atoms_mentioning("t", "redis"), vec![ids[3]]);
        assert!(graph.neighbours(ids[0], 1, 100).iter().all(|n| n.atom_id != ids[1]));
        assert!(graph.neighbours(ids[4], 1, 100).iter().any(|n| n.atom_id == ids[3]), "revision edge owned by the newer atom survives");
    }

    #[test]
    fn a_save_that_only_moves_the_version_rewrites_the_version_alone() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("graph.bin");
        let (a, b, c) = (ulid::Ulid::generate(), ulid::Ulid::generate(), ulid::Ulid::generate());
        let mut graph = GraphIndex::new();
        graph.upsert(a, &links(&["postgresql"], Some("s1")));
        graph.upsert(b, &links(&["postgresql", "老李"], Some("s1")));
        graph.mark(7);
        graph.save(&path).expect("save");
        let written = std::fs::read(&path).expect("read");
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).expect("metadata"));
        let first_inode = inode(&path);

        // Usage stamps: versions 8 and 9 change no link.
        let mut graph = GraphIndex::load(&path).expect("load").expect("a graph");
        graph.skip(8);
        graph.skip(9);
        graph.save(&path).expect("save");
        let moved = std::fs::read(&path).expect("read");
        assert_eq!(inode(&path), first_inode, "written in place, not replaced");
        assert_eq!(moved.len(), written.len());
        let at = VERSION_OFFSET as usize;
        assert_eq!(moved[at..at + 8], 9u64.to_le_bytes());
        assert_eq!(moved[..at], written[..at]);
        assert_eq!(moved[at + 8..], written[at + 8..], "every link byte as it was");
        let reread = GraphIndex::load(&path).expect("load").expect("a graph");
        assert_eq!(reread.applied_version(), 9);
        assert_eq!(reread.atoms_mentioning("t", "老李"), vec![b]);

        // A link changed: the whole file is written again, atomically.
        let mut graph = reread;
        graph.upsert(c, &links(&["redis"], None));
        graph.mark(10);
        graph.save(&path).expect("save");
        assert_ne!(inode(&path), first_inode, "replaced by rename");
        let reread = GraphIndex::load(&path).expect("load").expect("a graph");
        assert_eq!((reread.applied_version(), reread.atoms_mentioning("t", "redis")), (10, vec![c]));
        // A removal is a change too.
        let mut graph = reread;
        graph.remove(a);
        graph.mark(11);
        graph.save(&path).expect("save");
        let reread = GraphIndex::load(&path).expect("load").expect("a graph");
        assert_eq!((reread.applied_version(), reread.atoms_mentioning("t", "postgresql")), (11, vec![b]));

        // A graph built anew (here: empty, for an empty store) over a file
        // that could not be read is written whole, never patched.
        std::fs::write(&path, b"not a graph file").expect("write");
        assert!(GraphIndex::load(&path).is_err());
        let mut graph = GraphIndex::new();
        graph.mark(12);
        graph.save(&path).expect("save");
        let reread = GraphIndex::load(&path).expect("load").expect("a graph");
        assert_eq!(reread.applied_version(), 12);
    }

    #[test]
    fn a_loaded_graph_answers_as_the_one_saved_and_a_repeated_atom_replaces_not_doubles() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("graph.bin");
        let mut ids: Vec<AtomId> = (0..4).map(|_| ulid::Ulid::generate()).collect();
        ids.sort();
        let mut graph = GraphIndex::new();
        graph.upsert(ids[0], &links(&["postgresql", "老李"], Some("s1")));
        graph.upsert(ids[1], &links(&["postgresql", "田中さん"], Some("s1")));
        graph.upsert(ids[2], &AtomLinks { supersedes: Some(ids[0]), derived_from: vec![ids[1]], ..links(&["redis"], None) });
        graph.upsert(ids[3], &links(&["老李"], Some("s1")));
        graph.mark(4);
        graph.save(&path).expect("save");
        let answers = |g: &GraphIndex| -> Vec<Vec<(AtomId, String)>> {
            ids.iter()
                .map(|id| {
                    let mut n: Vec<(AtomId, String)> =
                        g.neighbours(*id, 2, 100).into_iter().map(|n| (n.atom_id, n.via.to_string())).collect();
                    n.sort();
                    n
                })
                .collect()
        };
        let loaded = GraphIndex::load(&path).expect("load").expect("a graph");
        assert_eq!(answers(&loaded), answers(&graph));
        assert_eq!(loaded.cards(), graph.cards());
        let mentioning = |g: &GraphIndex| {
            let mut atoms = g.atoms_mentioning("t", "老李");
            atoms.sort();
            atoms
        };
        assert_eq!(mentioning(&loaded), vec![ids[0], ids[3]]);
        assert_eq!(mentioning(&loaded), mentioning(&graph));

        // The file with one atom's record written twice (before the others,
        // count 5): loaded as that atom replaced by itself, no edge doubled.
        let bytes = std::fs::read(&path).expect("read");
        let header = 4 + 8 + 8;
        let mut one = GraphIndex::new();
        one.upsert(ids[0], &links(&["postgresql", "老李"], Some("s1")));
        one.save(&dir.path().join("one.bin")).expect("save");
        let record = std::fs::read(dir.path().join("one.bin")).expect("read")[header..].to_vec();
        assert!(bytes.windows(record.len()).any(|w| w == record), "the atom's record is in the file");
        let mut repeated = bytes[..header].to_vec();
        repeated[12..20].copy_from_slice(&5u64.to_le_bytes());
        repeated.extend_from_slice(&record);
        repeated.extend_from_slice(&bytes[header..]);
        std::fs::write(&path, &repeated).expect("write");
        let reloaded = GraphIndex::load(&path).expect("load").expect("a graph");
        assert_eq!(answers(&reloaded), answers(&graph));
        assert_eq!(reloaded.graph.edge_count(), graph.graph.edge_count());
    }
}
