//! The audit chain: one entry per mutation, hash-linked per tenant.
//!
//! **Architecture invariants**
//! - An entry is written in the same transaction as the mutation it records.
//! - Entry `n` carries `prevHash` = hash of entry `n-1` (64 zeros for the
//!   first) and `hash` = sha256 over its canonical fields (see
//!   [`canonical_form`]); the tenant node's `auditHead` names the newest.
//! - Entries never contain atom content, so a tombstone (which destroys
//!   content) never breaks the chain.

use chrono::{DateTime, Utc};
use oxigraph::model::{GraphNameRef, Literal, QuadRef, Term};
use oxigraph::sparql::QuerySolution;
use sha2::Digest;
use ulid::Ulid;

use crate::atom::{AtomId, Epistemic, Status};
use crate::store::{self, NamedQuery, Store, StoreError, WriteTx};
use crate::vocab::{RDF_TYPE, RDFS_LABEL, hmg, prov};

/// `prevHash` of a tenant's first entry.
pub(crate) const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a mutation records.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuditRecord {
    /// Who did it (`cli:alice`, `mcp:claude-code`, …).
    pub actor: String,
    /// `memorize`, `handoff`, `correct.negate`, `govern.tombstone`, `import`, …
    pub action: String,
    /// Why (redacted).
    pub reason: Option<String>,
    /// The atom acted on.
    pub target: Option<AtomId>,
    /// The atom created, if any.
    pub generated: Option<AtomId>,
    /// Target status before.
    pub status_before: Option<Status>,
    /// Target status after.
    pub status_after: Option<Status>,
    /// Target epistemic before.
    pub epistemic_before: Option<Epistemic>,
    /// Target epistemic after.
    pub epistemic_after: Option<Epistemic>,
}

/// One stored audit entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Entry id (ULID).
    pub id: Ulid,
    /// Position in the tenant's chain, from 1.
    pub seq: u64,
    /// When.
    pub time: DateTime<Utc>,
    /// Actor name.
    pub actor: String,
    /// Action.
    pub action: String,
    /// Reason.
    pub reason: Option<String>,
    /// Atom acted on.
    pub target: Option<AtomId>,
    /// Atom created.
    pub generated: Option<AtomId>,
    /// Status before.
    pub status_before: Option<String>,
    /// Status after.
    pub status_after: Option<String>,
    /// Epistemic before.
    pub epistemic_before: Option<String>,
    /// Epistemic after.
    pub epistemic_after: Option<String>,
    /// Hash of the previous entry.
    pub prev_hash: String,
    /// Hash of this entry.
    pub hash: String,
}

/// The text an entry's hash is computed over: one `name=value` line per
/// field, values JSON-encoded, time as Unix milliseconds.
pub(crate) fn canonical_form(entry: &AuditEntry) -> String {
    let json = |v: &Option<String>| serde_json::to_string(v).unwrap_or_default();
    let atom = |v: &Option<AtomId>| json(&v.map(|id| store::atom_iri(id).into_string()));
    format!(
        "seq={}\nprev={}\ntime={}\nactor={}\naction={}\nreason={}\ntarget={}\ngenerated={}\nstatus_before={}\nstatus_after={}\nepistemic_before={}\nepistemic_after={}",
        entry.seq,
        entry.prev_hash,
        entry.time.timestamp_millis(),
        json(&Some(store::actor_iri(&entry.actor).into_string())),
        json(&Some(entry.action.clone())),
        json(&entry.reason),
        atom(&entry.target),
        atom(&entry.generated),
        json(&entry.status_before),
        json(&entry.status_after),
        json(&entry.epistemic_before),
        json(&entry.epistemic_after),
    )
}

/// sha256 of the canonical form.
pub(crate) fn entry_hash(entry: &AuditEntry) -> String {
    hex::encode(sha2::Sha256::digest(canonical_form(entry).as_bytes()))
}

/// Appends an entry for `record` to `tenant`'s chain inside `tx`.
pub(crate) fn append(
    tx: &mut WriteTx<'_>,
    tenant: &str,
    record: AuditRecord,
    id: Ulid,
    time: DateTime<Utc>,
) -> Result<AuditEntry, StoreError> {
    let graph_node = store::tenant_graph(tenant);
    let graph: GraphNameRef<'_> = graph_node.as_ref().into();
    let tenant_iri = store::tenant_graph(tenant);
    let (seq, prev_hash) = match tx.audit_head(tenant)? {
        Some(head) => (head.seq + 1, head.hash),
        None => {
            tx.insert(QuadRef::new(&tenant_iri, RDF_TYPE, hmg::TENANT, graph));
            tx.insert(QuadRef::new(&tenant_iri, RDFS_LABEL, &Literal::from(tenant), graph));
            (1, GENESIS_HASH.to_owned())
        }
    };
    let mut entry = AuditEntry {
        id,
        seq,
        time,
        actor: record.actor,
        action: record.action,
        // Reasons are cleaned by the facade; redacting again here (before
        // hashing) keeps a secret out of the chain whatever path wrote it.
        reason: record.reason.map(|r| crate::text::redact(&r).text),
        target: record.target,
        generated: record.generated,
        status_before: record.status_before.map(|s| s.as_str().to_owned()),
        status_after: record.status_after.map(|s| s.as_str().to_owned()),
        epistemic_before: record.epistemic_before.map(|s| s.as_str().to_owned()),
        epistemic_after: record.epistemic_after.map(|s| s.as_str().to_owned()),
        prev_hash,
        hash: String::new(),
    };
    entry.hash = entry_hash(&entry);

    let iri = store::audit_iri(id);
    let actor = store::actor_iri(&entry.actor);
    tx.insert(QuadRef::new(&iri, RDF_TYPE, hmg::AUDIT_ENTRY, graph));
    tx.insert(QuadRef::new(&iri, RDF_TYPE, prov::ACTIVITY, graph));
    tx.insert(QuadRef::new(&iri, hmg::SEQ, &Literal::from(entry.seq as i64), graph));
    // The store version of this write: the change feed derived indexes replay.
    let version = tx.version()?;
    tx.insert(QuadRef::new(&iri, hmg::SNAPSHOT_VERSION, &Literal::from(version as i64), graph));
    tx.insert(QuadRef::new(&iri, prov::AT_TIME, &datetime_literal(entry.time), graph));
    tx.insert(QuadRef::new(&iri, prov::WAS_ASSOCIATED_WITH, &actor, graph));
    tx.insert(QuadRef::new(&actor, RDF_TYPE, hmg::ACTOR, graph));
    tx.insert(QuadRef::new(&actor, RDFS_LABEL, &Literal::from(entry.actor.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::ACTION, &Literal::from(entry.action.as_str()), graph));
    if let Some(reason) = &entry.reason {
        tx.insert(QuadRef::new(&iri, hmg::REASON, &Literal::from(reason.as_str()), graph));
    }
    if let Some(target) = entry.target {
        tx.insert(QuadRef::new(&iri, hmg::TARGET, &store::atom_iri(target), graph));
    }
    if let Some(generated) = entry.generated {
        tx.insert(QuadRef::new(&iri, prov::GENERATED, &store::atom_iri(generated), graph));
    }
    for (predicate, value) in [
        (hmg::STATUS_BEFORE, &entry.status_before),
        (hmg::STATUS_AFTER, &entry.status_after),
        (hmg::EPISTEMIC_BEFORE, &entry.epistemic_before),
        (hmg::EPISTEMIC_AFTER, &entry.epistemic_after),
    ] {
        if let Some(value) = value {
            tx.insert(QuadRef::new(&iri, predicate, &Literal::from(value.as_str()), graph));
        }
    }
    tx.insert(QuadRef::new(&iri, hmg::PREV_HASH, &Literal::from(entry.prev_hash.as_str()), graph));
    tx.insert(QuadRef::new(&iri, hmg::HASH, &Literal::from(entry.hash.as_str()), graph));
    tx.set_audit_head(tenant, store::AuditHead { entry: iri, seq: entry.seq, hash: entry.hash.clone() })?;
    Ok(entry)
}

/// An `xsd:dateTime` literal, millisecond precision, UTC.
pub(crate) fn datetime_literal(time: DateTime<Utc>) -> Literal {
    Literal::new_typed_literal(time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true), oxigraph::model::vocab::xsd::DATE_TIME)
}

/// Parses a date-time literal as stored.
pub(crate) fn parse_datetime(term: &Term) -> Option<DateTime<Utc>> {
    match term {
        Term::Literal(l) => DateTime::parse_from_rfc3339(l.value()).ok().map(|t| t.with_timezone(&Utc)),
        _ => None,
    }
}

fn literal(solution: &QuerySolution, name: &str) -> Option<String> {
    match solution.get(name) {
        Some(Term::Literal(l)) => Some(l.value().to_owned()),
        _ => None,
    }
}

fn entry_of(solution: &QuerySolution) -> Result<AuditEntry, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("audit entry without a valid {what}"));
    let id = match solution.get("entry") {
        Some(Term::NamedNode(n)) => n.as_str().strip_prefix("urn:hmg:audit:").and_then(|s| s.parse().ok()),
        _ => None,
    }
    .ok_or_else(|| corrupt("id"))?;
    let actor = match solution.get("actor") {
        Some(Term::NamedNode(n)) => n.as_str().strip_prefix("urn:hmg:actor:").and_then(store::decode_iri_component),
        _ => None,
    }
    .ok_or_else(|| corrupt("actor"))?;
    Ok(AuditEntry {
        id,
        seq: solution.get("seq").map(store::integer_of).transpose()?.ok_or_else(|| corrupt("seq"))?.max(0) as u64,
        time: solution.get("time").and_then(parse_datetime).ok_or_else(|| corrupt("time"))?,
        actor,
        action: literal(solution, "action").ok_or_else(|| corrupt("action"))?,
        reason: literal(solution, "reason"),
        target: solution.get("target").and_then(store::atom_id_of),
        generated: solution.get("generated").and_then(store::atom_id_of),
        status_before: literal(solution, "statusBefore"),
        status_after: literal(solution, "statusAfter"),
        epistemic_before: literal(solution, "epistemicBefore"),
        epistemic_after: literal(solution, "epistemicAfter"),
        prev_hash: literal(solution, "prevHash").ok_or_else(|| corrupt("prevHash"))?,
        hash: literal(solution, "hash").ok_or_else(|| corrupt("hash"))?,
    })
}

/// The whole chain of `tenant`, oldest first.
pub(crate) fn chain(store: &Store, tenant: &str) -> Result<Vec<AuditEntry>, StoreError> {
    store.select(NamedQuery::AuditChain, tenant, &[])?.iter().map(entry_of).collect()
}

/// Entries that targeted or generated `atom`, oldest first.
pub(crate) fn entries_for_atom(store: &Store, tenant: &str, atom: AtomId) -> Result<Vec<AuditEntry>, StoreError> {
    store.select(NamedQuery::AuditOfAtom, tenant, &[("atom", store::atom_iri(atom).into())])?.iter().map(entry_of).collect()
}

/// The first problem found in a tenant's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenLink {
    /// Position of the bad entry.
    pub seq: u64,
    /// Its id (if it has one).
    pub entry: Option<Ulid>,
    /// What is wrong.
    pub problem: String,
}

/// Verification result of one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantVerification {
    /// Tenant.
    pub tenant: String,
    /// Entries checked.
    pub entries: u64,
    /// First broken link, if any.
    pub first_broken: Option<BrokenLink>,
}

/// Recomputes `tenant`'s chain and reports the first broken link.
pub(crate) fn verify_tenant(store: &Store, tenant: &str) -> Result<TenantVerification, StoreError> {
    let entries = chain(store, tenant)?;
    let mut previous_hash = GENESIS_HASH.to_owned();
    let mut first_broken = None;
    for (index, entry) in entries.iter().enumerate() {
        let expected_seq = index as u64 + 1;
        let problem = if entry.seq != expected_seq {
            Some(format!("expected entry number {expected_seq}, found number {} (an entry is missing or duplicated)", entry.seq))
        } else if entry.prev_hash != previous_hash {
            Some(format!("prevHash {} does not match the hash of entry {} ({previous_hash})", entry.prev_hash, index))
        } else if entry_hash(entry) != entry.hash {
            Some(format!("stored hash {} does not match the recomputed hash {} (the entry was altered)", entry.hash, entry_hash(entry)))
        } else {
            None
        };
        if let Some(problem) = problem {
            first_broken = Some(BrokenLink { seq: expected_seq, entry: Some(entry.id), problem });
            break;
        }
        previous_hash = entry.hash.clone();
    }
    if first_broken.is_none() {
        let head = store
            .describe(tenant, store::tenant_graph(tenant).as_ref())?
            .into_iter()
            .find(|q| q.predicate.as_ref() == hmg::AUDIT_HEAD)
            .map(|q| q.object);
        let last = entries.last().map(|e| Term::NamedNode(store::audit_iri(e.id)));
        if head != last {
            first_broken = Some(BrokenLink {
                seq: entries.len() as u64,
                entry: entries.last().map(|e| e.id),
                problem: "the tenant's audit head does not point at the last entry (entries were removed or added)".to_owned(),
            });
        }
    }
    Ok(TenantVerification { tenant: tenant.to_owned(), entries: entries.len() as u64, first_broken })
}
