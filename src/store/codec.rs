//! The atom ↔ quads codec: how an [`Atom`] is written as triples of its
//! tenant's graph (`schema/hmg.ttl`) and read back.
//!
//! **Invariants**
//! - Every write of atom content passes [`insert_atom`], which redacts again
//!   (the last line of defence for secrets: a no-op for text that went
//!   through admission).
//! - Reading is the inverse of writing: an atom read back equals the atom
//!   written (entity names aside when `with_entities` is off).

use std::collections::HashMap;

use oxigraph::model::{GraphNameRef, Literal, NamedNode, QuadRef, Term};

use super::{Result, Store, StoreError, WriteTx};
use crate::atom::{Atom, AtomId, Epistemic, Kind, Polarity, Status};
use crate::scope::Scope;
use crate::text;
use crate::vocab::{RDF_TYPE, RDFS_LABEL, hmg, prov};

fn kind_class(kind: Kind) -> oxigraph::model::NamedNodeRef<'static> {
    match kind {
        Kind::Fact => hmg::FACT,
        Kind::Handoff => hmg::HANDOFF,
        Kind::Lesson => hmg::LESSON,
        Kind::Episode => hmg::EPISODE,
        Kind::Reflection => hmg::REFLECTION,
    }
}

pub(crate) fn kind_of_class(iri: &str) -> Option<Kind> {
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
    let graph_node = super::tenant_graph(tenant);
    let graph: GraphNameRef<'_> = graph_node.as_ref().into();
    let iri = super::atom_iri(atom.id);
    let scope_iri = super::scope_iri(&atom.scope);

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
    tx.insert(QuadRef::new(&iri, hmg::CREATED_AT, &super::audit::datetime_literal(atom.created_at), graph));
    if let Some(session) = &atom.session_id {
        tx.insert(QuadRef::new(&iri, hmg::SESSION_ID, &Literal::from(session.as_str()), graph));
    }
    if let Some(expires_at) = atom.expires_at {
        tx.insert(QuadRef::new(&iri, hmg::EXPIRES_AT, &super::audit::datetime_literal(expires_at), graph));
    }
    tx.insert(QuadRef::new(&iri, hmg::IN_SCOPE, &scope_iri, graph));
    tx.insert(QuadRef::new(&scope_iri, RDF_TYPE, hmg::SCOPE, graph));
    tx.insert(QuadRef::new(&scope_iri, hmg::TENANT_ID, &Literal::from(tenant.as_str()), graph));
    for (predicate, value) in
        [(hmg::WORKSPACE, &atom.scope.workspace), (hmg::REPOSITORY, &atom.scope.repository), (hmg::BRANCH, &atom.scope.branch)]
    {
        if let Some(value) = value {
            tx.insert(QuadRef::new(&scope_iri, predicate, &Literal::from(value.as_str()), graph));
        }
    }
    if let Some(old) = atom.supersedes {
        tx.insert(QuadRef::new(&iri, prov::WAS_REVISION_OF, &super::atom_iri(old), graph));
    }
    for source in &atom.derived_from {
        tx.insert(QuadRef::new(&iri, prov::WAS_DERIVED_FROM, &super::atom_iri(*source), graph));
    }
    for entity in entities {
        let entity_iri = super::entity_iri(tenant, &entity.key);
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
    let graph_node = super::tenant_graph(tenant);
    let iri = super::atom_iri(id);
    tx.set(iri.as_ref(), predicate, &Term::Literal(Literal::from(value)), graph_node.as_ref().into())?;
    Ok(())
}

pub(crate) fn literal_value(term: &Term) -> Option<&str> {
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
    let iri = super::atom_iri(id);
    let quads = store.describe(tenant, iri.as_ref())?;
    atom_of_quads(store, tenant, id, &quads, with_entities, scopes)
}

/// [`load_atom_cached`] through the quads kept between writes
/// ([`Store::describe_kept`]), `version` the snapshot version the caller
/// read first.
pub(crate) fn load_atom_kept(
    store: &Store,
    tenant: &str,
    id: AtomId,
    with_entities: bool,
    scopes: &mut HashMap<NamedNode, Scope>,
    version: u64,
) -> Result<Option<Atom>> {
    let iri = super::atom_iri(id);
    let quads = store.describe_kept(tenant, iri.as_ref(), version)?;
    atom_of_quads(store, tenant, id, &quads, with_entities, scopes)
}

/// Reads atoms whose quads were fetched together ([`Store::describe_many`]);
/// `None` for an id without quads.
pub(crate) fn load_atoms(store: &Store, tenant: &str, ids: &[AtomId], with_entities: bool) -> Result<HashMap<AtomId, Atom>> {
    let iris: Vec<NamedNode> = ids.iter().map(|id| super::atom_iri(*id)).collect();
    let mut described = store.describe_many(tenant, &iris)?;
    let mut scopes = HashMap::new();
    let mut atoms = HashMap::new();
    for (id, iri) in ids.iter().zip(&iris) {
        let quads = described.remove(iri).unwrap_or_default();
        if let Some(atom) = atom_of_quads(store, tenant, *id, &quads, with_entities, &mut scopes)? {
            atoms.insert(*id, atom);
        }
    }
    Ok(atoms)
}

/// An atom from its quads (`None` when there are none).
pub(crate) fn atom_of_quads(
    store: &Store,
    tenant: &str,
    id: AtomId,
    quads: &[oxigraph::model::Quad],
    with_entities: bool,
    scopes: &mut HashMap<NamedNode, Scope>,
) -> Result<Option<Atom>> {
    if quads.is_empty() {
        return Ok(None);
    }
    let corrupt = |what: &str| StoreError::Corrupt(format!("atom {id} has no valid {what}"));
    let mut fields = Fields::default();
    for quad in quads {
        fields.absorb(quad.predicate.as_ref(), &quad.object);
    }
    let scope_node = fields.scope_node.take().ok_or_else(|| corrupt("scope"))?;
    let scope = scope_of(store, tenant, scope_node, scopes)?;
    let entities = if with_entities { entity_labels(store, tenant, &fields.entity_nodes)? } else { Vec::new() };
    Ok(Some(Atom {
        id,
        content: fields.content,
        kind: fields.kind.ok_or_else(|| corrupt("kind"))?,
        source: fields.source.unwrap_or_else(|| "agent".to_owned()),
        scope,
        epistemic: fields.epistemic.ok_or_else(|| corrupt("epistemic"))?,
        polarity: fields.polarity.ok_or_else(|| corrupt("polarity"))?,
        status: fields.status.ok_or_else(|| corrupt("status"))?,
        created_at: fields.created_at.ok_or_else(|| corrupt("created_at"))?,
        language: fields.language.unwrap_or_else(|| "und".to_owned()),
        importance: fields.importance.unwrap_or(0.5),
        entities,
        supersedes: fields.supersedes,
        derived_from: fields.derived_from,
        session_id: fields.session_id,
        expires_at: fields.expires_at,
        last_recalled_at: fields.last_recalled_at,
        recall_count: fields.recall_count,
        last_decayed_at: fields.last_decayed_at,
    }))
}

/// An atom's fields as its quads give them.
#[derive(Default)]
struct Fields {
    kind: Option<Kind>,
    content: Option<String>,
    source: Option<String>,
    status: Option<Status>,
    epistemic: Option<Epistemic>,
    polarity: Option<Polarity>,
    language: Option<String>,
    importance: Option<f64>,
    created_at: Option<chrono::DateTime<chrono::Utc>>,
    scope_node: Option<NamedNode>,
    entity_nodes: Vec<NamedNode>,
    supersedes: Option<AtomId>,
    derived_from: Vec<AtomId>,
    session_id: Option<String>,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    last_recalled_at: Option<chrono::DateTime<chrono::Utc>>,
    recall_count: u64,
    last_decayed_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Fields {
    /// Takes in one quad of the atom.
    fn absorb(&mut self, p: oxigraph::model::NamedNodeRef<'_>, o: &Term) {
        let text = || literal_value(o).map(str::to_owned);
        if p == RDF_TYPE {
            if let Term::NamedNode(class) = o
                && let Some(k) = kind_of_class(class.as_str())
            {
                self.kind = Some(k);
            }
        } else if p == hmg::CONTENT {
            self.content = text();
        } else if p == hmg::SOURCE {
            self.source = text();
        } else if p == hmg::STATUS {
            self.status = literal_value(o).and_then(|v| v.parse::<Status>().ok());
        } else if p == hmg::EPISTEMIC {
            self.epistemic = literal_value(o).and_then(|v| v.parse::<Epistemic>().ok());
        } else if p == hmg::POLARITY {
            self.polarity = literal_value(o).and_then(|v| v.parse::<Polarity>().ok());
        } else if p == hmg::LANGUAGE {
            self.language = text();
        } else if p == hmg::IMPORTANCE {
            self.importance = literal_value(o).and_then(|v| v.parse().ok());
        } else if p == hmg::CREATED_AT {
            self.created_at = super::audit::parse_datetime(o);
        } else if p == hmg::SESSION_ID {
            self.session_id = text();
        } else if p == hmg::EXPIRES_AT {
            self.expires_at = super::audit::parse_datetime(o);
        } else if p == hmg::LAST_RECALLED_AT {
            self.last_recalled_at = super::audit::parse_datetime(o);
        } else if p == hmg::DECAYED_AT {
            self.last_decayed_at = super::audit::parse_datetime(o);
        } else if p == hmg::RECALL_COUNT {
            self.recall_count = literal_value(o).and_then(|v| v.parse().ok()).unwrap_or(0);
        } else if p == hmg::IN_SCOPE {
            if let Term::NamedNode(n) = o {
                self.scope_node = Some(n.clone());
            }
        } else if p == hmg::MENTIONS {
            if let Term::NamedNode(n) = o {
                self.entity_nodes.push(n.clone());
            }
        } else if p == prov::WAS_REVISION_OF {
            self.supersedes = super::atom_id_of(o);
        } else if p == prov::WAS_DERIVED_FROM {
            self.derived_from.extend(super::atom_id_of(o));
        }
    }
}

/// The scope a scope node names, read once per node (`scopes` caches them).
pub(crate) fn scope_of(store: &Store, tenant: &str, node: NamedNode, scopes: &mut HashMap<NamedNode, Scope>) -> Result<Scope> {
    if let Some(scope) = scopes.get(&node) {
        return Ok(scope.clone());
    }
    let mut scope = Scope::tenant(tenant);
    for quad in store.describe(tenant, node.as_ref())? {
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
    scopes.insert(node, scope.clone());
    Ok(scope)
}

/// The labels of entity nodes, sorted.
fn entity_labels(store: &Store, tenant: &str, nodes: &[NamedNode]) -> Result<Vec<String>> {
    let mut entities = Vec::with_capacity(nodes.len());
    for node in nodes {
        let label = store
            .describe(tenant, node.as_ref())?
            .into_iter()
            .find(|q| q.predicate.as_ref() == RDFS_LABEL)
            .and_then(|q| literal_value(&q.object).map(str::to_owned));
        entities.extend(label);
    }
    entities.sort();
    Ok(entities)
}
