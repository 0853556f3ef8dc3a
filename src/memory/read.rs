//! Read-side operations: stats and history, and the serializable views the
//! surfaces show (content of quarantined/sealed/tombstoned atoms is always
//! replaced by a placeholder here).

use serde::Serialize;

use super::{Caller, Memory, MemoryError, Result};
use crate::atom::{Atom, AtomId, Epistemic, Kind, Polarity, Status, parse_atom_id};
use crate::scope::Scope;
use crate::store::audit::{self, AuditEntry};
use crate::store::{self, NamedQuery, StoreError};

/// The scope fields as shown on the wire (`ScopeInput` of the seeds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ScopeView {
    /// Tenant.
    pub tenant_id: String,
    /// Workspace.
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
}

/// An atom as every surface shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct AtomView {
    /// ULID.
    pub atom_id: String,
    /// Content, or a placeholder saying why it is hidden.
    pub content: String,
    /// fact / handoff / lesson / episode / reflection.
    pub kind: Kind,
    /// Attribution.
    pub source: String,
    /// Where it was written.
    pub scope: ScopeView,
    /// actual / necessary / possible.
    pub epistemic: Epistemic,
    /// affirmative / negative / conditional.
    pub polarity: Polarity,
    /// Lifecycle status.
    pub status: Status,
    /// RFC 3339.
    pub created_at: String,
    /// Detected language.
    pub language: String,
    /// 0–1.
    pub importance: f64,
    /// Entities mentioned (empty once tombstoned).
    pub entities: Vec<String>,
    /// The atom this one replaced.
    pub supersedes: Option<String>,
    /// Atoms this one was derived from.
    pub derived_from: Vec<String>,
    /// Originating session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl From<&Atom> for AtomView {
    fn from(atom: &Atom) -> AtomView {
        AtomView {
            atom_id: atom.id.to_string(),
            content: atom.visible_content().to_owned(),
            kind: atom.kind,
            source: atom.source.clone(),
            scope: ScopeView {
                tenant_id: atom.scope.tenant_id.clone(),
                workspace: atom.scope.workspace.clone(),
                repository: atom.scope.repository.clone(),
                branch: atom.scope.branch.clone(),
            },
            epistemic: atom.epistemic,
            polarity: atom.polarity,
            status: atom.status,
            created_at: atom.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            language: atom.language.clone(),
            importance: atom.importance,
            entities: if atom.status.hides_content() { Vec::new() } else { atom.entities.clone() },
            supersedes: atom.supersedes.map(|id| id.to_string()),
            derived_from: atom.derived_from.iter().map(ToString::to_string).collect(),
            session_id: atom.session_id.clone(),
        }
    }
}

/// An audit entry as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditView {
    /// Entry id.
    pub audit_id: String,
    /// Position in the tenant's chain.
    pub seq: u64,
    /// RFC 3339.
    pub time: String,
    /// Who.
    pub actor: String,
    /// What.
    pub action: String,
    /// Why.
    pub reason: Option<String>,
    /// Atom acted on.
    pub target: Option<String>,
    /// Atom created.
    pub generated: Option<String>,
    /// Status before.
    pub status_before: Option<String>,
    /// Status after.
    pub status_after: Option<String>,
    /// Epistemic before.
    pub epistemic_before: Option<String>,
    /// Epistemic after.
    pub epistemic_after: Option<String>,
    /// Previous entry's hash.
    pub prev_hash: String,
    /// This entry's hash.
    pub hash: String,
}

impl From<&AuditEntry> for AuditView {
    fn from(e: &AuditEntry) -> AuditView {
        AuditView {
            audit_id: e.id.to_string(),
            seq: e.seq,
            time: e.time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            actor: e.actor.clone(),
            action: e.action.clone(),
            reason: e.reason.clone(),
            target: e.target.map(|id| id.to_string()),
            generated: e.generated.map(|id| id.to_string()),
            status_before: e.status_before.clone(),
            status_after: e.status_after.clone(),
            epistemic_before: e.epistemic_before.clone(),
            epistemic_after: e.epistemic_after.clone(),
            prev_hash: e.prev_hash.clone(),
            hash: e.hash.clone(),
        }
    }
}

/// An atom's whole evolution chain and audit trail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    /// The atom asked about.
    pub atom_id: String,
    /// The atom in effect in the chain now.
    pub head: String,
    /// Every atom of the chain, oldest first.
    pub chain: Vec<AtomView>,
    /// Lessons and reflections derived from any atom of the chain.
    pub derived: Vec<AtomView>,
    /// Audit entries about any of them, in chain order.
    pub audit: Vec<AuditView>,
}

/// What `list_atoms` keeps; every field narrows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AtomFilter {
    /// Workspace.
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
    /// Only tenant-wide atoms (no workspace, no repository).
    pub tenant_wide: bool,
    /// Kind.
    pub kind: Option<Kind>,
    /// Status.
    pub status: Option<Status>,
    /// Epistemic status.
    pub epistemic: Option<Epistemic>,
    /// Polarity.
    pub polarity: Option<Polarity>,
    /// Created at or after.
    pub created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Created before.
    pub created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Case-insensitive substring of the visible content.
    pub text: Option<String>,
    /// Workspace and repository must equal the filter's, an absent one
    /// included (the REST API's `user_id` / `agent_id`); branch as usual.
    pub exact_scope: bool,
}

/// One page of atoms, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct AtomPage {
    /// The atoms.
    pub atoms: Vec<AtomView>,
    /// Pass as `after` for the next page (`None` on the last page).
    pub next_cursor: Option<String>,
    /// Atoms matching the filter in all pages.
    pub total: usize,
}

/// Largest page.
pub const MAX_PAGE: usize = 200;

impl AtomFilter {
    /// Whether the filter keeps atoms of `scope` (the scope's part of [`AtomFilter::keeps`]).
    pub(super) fn keeps_scope(&self, scope: &Scope) -> bool {
        let same = |want: &Option<String>, have: &Option<String>| want.as_ref().is_none_or(|w| have.as_deref() == Some(w.as_str()));
        let exact = !self.exact_scope || (self.workspace == scope.workspace && self.repository == scope.repository);
        exact
            && same(&self.workspace, &scope.workspace)
            && same(&self.repository, &scope.repository)
            && same(&self.branch, &scope.branch)
            && (!self.tenant_wide || scope.is_tenant_wide())
    }

    fn keeps(&self, atom: &Atom) -> bool {
        let text = self.text.as_ref().map(|t| t.to_lowercase());
        self.keeps_scope(&atom.scope)
            && self.kind.is_none_or(|k| atom.kind == k)
            && self.status.is_none_or(|s| atom.status == s)
            && self.epistemic.is_none_or(|e| atom.epistemic == e)
            && self.polarity.is_none_or(|p| atom.polarity == p)
            && self.created_after.is_none_or(|t| atom.created_at >= t)
            && self.created_before.is_none_or(|t| atom.created_at < t)
            && text.is_none_or(|t| atom.visible_content().to_lowercase().contains(&t))
    }
}

/// Per-index coverage counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct IndexCounts {
    /// Atoms with a vector in the semantic index.
    pub semantic: u64,
    /// Atoms in the keyword index.
    pub keyword: u64,
    /// Atoms in the temporal index.
    pub temporal: u64,
    /// Atoms in the categorical index.
    pub categorical: u64,
}

/// Output of `memory_stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct Stats {
    /// Atoms of the caller's tenant (every status).
    pub atoms: u64,
    /// Graph edges: entity mentions, revisions, derivations.
    pub edges: u64,
    /// Index coverage.
    pub indexes: IndexCounts,
    /// The tenant's write counter (the length of its audit chain):
    /// increases with every write of this tenant, and only with those.
    pub snapshot_version: u64,
    /// Why semantic coverage is 0, when it is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

fn count(solution: &oxigraph::sparql::QuerySolution, name: &str) -> Result<u64> {
    match solution.get(name) {
        Some(term) => Ok(store::integer_of(term)?.max(0) as u64),
        None => Ok(0),
    }
}

impl Memory {
    /// The caller's tenant's atoms matching `filter`, newest first, `first`
    /// at most (up to [`MAX_PAGE`]) after the cursor `after` (an atom id).
    #[tracing::instrument(skip(self, filter), fields(tenant = %caller.scope.tenant_id))]
    pub fn list_atoms(&self, caller: &Caller, filter: &AtomFilter, after: Option<&str>, first: usize) -> Result<AtomPage> {
        let tenant = &caller.scope.tenant_id;
        if first == 0 || first > MAX_PAGE {
            return Err(MemoryError::invalid("first", format!("must be between 1 and {MAX_PAGE}")));
        }
        let after = after
            .map(|a| parse_atom_id(a).map_err(|e| MemoryError::invalid("after", format!("not a cursor from a previous page: {e}"))))
            .transpose()?;
        let mut atoms = Vec::new();
        let mut total = 0;
        let mut more = false;
        self.scan_atoms(tenant, filter, &mut |atom| {
            total += 1;
            if after.is_none_or(|cursor| atom.id < cursor) {
                if atoms.len() < first {
                    atoms.push(AtomView::from(&atom));
                } else {
                    more = true;
                }
            }
            true
        })?;
        let next_cursor = if more { atoms.last().map(|a| a.atom_id.clone()) } else { None };
        Ok(AtomPage { atoms, next_cursor, total })
    }

    /// Every atom of the caller's tenant that `filter` keeps, newest first,
    /// in one pass (paging through [`Memory::list_atoms`] would read the
    /// whole tenant once per page).
    pub(crate) fn atoms_matching(&self, caller: &Caller, filter: &AtomFilter) -> Result<Vec<crate::atom::Atom>> {
        let mut atoms = Vec::new();
        self.scan_atoms(&caller.scope.tenant_id, filter, &mut |atom| {
            atoms.push(atom);
            true
        })?;
        Ok(atoms)
    }

    /// The `n` newest atoms of the caller's tenant that `filter` keeps
    /// (what the merge compares a fact with): reading stops there.
    pub(crate) fn newest_matching(&self, caller: &Caller, filter: &AtomFilter, n: usize) -> Result<Vec<crate::atom::Atom>> {
        let mut atoms = Vec::new();
        if n > 0 {
            self.scan_atoms(&caller.scope.tenant_id, filter, &mut |atom| {
                atoms.push(atom);
                atoms.len() < n
            })?;
        }
        Ok(atoms)
    }

    /// Visits every atom of `tenant` that `filter` keeps, newest first,
    /// until `visit` answers false. Only the atoms of the scopes the filter keeps are read (a scope node
    /// is read once): listing one REST user's memories does not read every
    /// user's.
    fn scan_atoms(&self, tenant: &str, filter: &AtomFilter, visit: &mut dyn FnMut(crate::atom::Atom) -> bool) -> Result<()> {
        let (version, listing) = self.store.listing_at(tenant)?;
        let mut scopes = std::collections::HashMap::new();
        let mut kept = std::collections::HashMap::new();
        for (id, node) in listing.newest_first() {
            if let Some(node) = node {
                let keep = match kept.get(node) {
                    Some(keep) => *keep,
                    None => {
                        let keep = filter.keeps_scope(&super::scope_of(&self.store, tenant, node.clone(), &mut scopes)?);
                        kept.insert(node.clone(), keep);
                        keep
                    }
                };
                if !keep {
                    continue;
                }
            }
            let Some(atom) = crate::store::codec::load_atom_kept(&self.store, tenant, id, true, &mut scopes, version)? else { continue };
            if filter.keeps(&atom) && !visit(atom) {
                break;
            }
        }
        Ok(())
    }

    /// `memory_stats` for the caller's tenant.
    #[tracing::instrument(skip(self), fields(tenant = %caller.scope.tenant_id))]
    pub fn stats(&self, caller: &Caller) -> Result<Stats> {
        let rows = self.store.select(NamedQuery::Stats, &caller.scope.tenant_id, &[])?;
        let row = rows.first().ok_or_else(|| StoreError::Corrupt("stats query returned no row".to_owned()))?;
        let (keyword, semantic) = self.indexes().counts(&caller.scope.tenant_id)?;
        Ok(Stats {
            atoms: count(row, "atoms")?,
            edges: count(row, "edges")?,
            indexes: IndexCounts { semantic, keyword, temporal: count(row, "temporal")?, categorical: count(row, "categorical")? },
            // The tenant's own write count (its audit chain's length), not
            // the store's: that would show other tenants' activity.
            snapshot_version: count(row, "version")?,
            warning: self.indexes().semantic_note().map(str::to_owned),
        })
    }

    /// The evolution chain `id` belongs to, oldest first (both directions
    /// from `id`, which must be visible to the caller).
    pub(crate) fn chain(&self, caller: &Caller, id: AtomId) -> Result<Vec<crate::atom::Atom>> {
        let tenant = &caller.scope.tenant_id;
        let start = self.require_atom(caller, id)?;
        let mut chain = vec![start];
        while let Some(previous) = chain.first().and_then(|a| a.supersedes) {
            match self.atom(tenant, previous)? {
                Some(atom) if !chain.iter().any(|a| a.id == atom.id) => chain.insert(0, atom),
                _ => break,
            }
        }
        while let Some(last) = chain.last() {
            let next = self
                .store
                .select(NamedQuery::RevisionsOf, tenant, &[("atom", store::atom_iri(last.id).into())])?
                .iter()
                .filter_map(|s| s.get("next").and_then(store::atom_id_of))
                .max();
            match next {
                Some(next) if !chain.iter().any(|a| a.id == next) => match self.atom(tenant, next)? {
                    Some(atom) => chain.push(atom),
                    None => break,
                },
                _ => break,
            }
        }
        Ok(chain)
    }

    /// An atom's evolution chain (both directions), derived lessons and audit
    /// entries.
    #[tracing::instrument(skip(self), fields(tenant = %caller.scope.tenant_id))]
    pub fn history(&self, caller: &Caller, atom_id: &str) -> Result<History> {
        let tenant = &caller.scope.tenant_id;
        let id = parse_atom_id(atom_id).map_err(|e| MemoryError::invalid("atom_id", e.to_string()))?;
        let chain = self.chain(caller, id)?;
        let mut derived_ids: Vec<AtomId> = Vec::new();
        for atom in &chain {
            for row in self.store.select(NamedQuery::DerivedFrom, tenant, &[("atom", store::atom_iri(atom.id).into())])? {
                derived_ids.extend(row.get("derived").and_then(store::atom_id_of));
            }
        }
        let mut derived = Vec::new();
        for derived_id in &derived_ids {
            derived.extend(self.atom(tenant, *derived_id)?);
        }
        let mut entries: Vec<AuditEntry> = Vec::new();
        for atom_id in chain.iter().map(|a| a.id).chain(derived_ids.iter().copied()) {
            for entry in audit::entries_for_atom(&self.store, tenant, atom_id)? {
                if !entries.iter().any(|e| e.id == entry.id) {
                    entries.push(entry);
                }
            }
        }
        entries.sort_by_key(|e| e.seq);
        let head = chain.iter().rev().find(|a| a.status != crate::atom::Status::Superseded).map(|a| a.id);
        Ok(History {
            atom_id: id.to_string(),
            head: head.or(chain.last().map(|a| a.id)).unwrap_or(id).to_string(),
            chain: chain.iter().map(AtomView::from).collect(),
            derived: derived.iter().map(AtomView::from).collect(),
            audit: entries.iter().map(AuditView::from).collect(),
        })
    }

    /// Recomputes every tenant's audit chain (or one tenant's).
    pub fn verify_audit(&self, tenant: Option<&str>) -> Result<Vec<audit::TenantVerification>> {
        let tenants = match tenant {
            Some(t) => vec![t.to_owned()],
            None => self.store.tenants()?,
        };
        tenants.iter().map(|t| audit::verify_tenant(&self.store, t).map_err(MemoryError::from)).collect()
    }

    /// Copies the whole store (every tenant, audit chains included) into
    /// another one — a remote SPARQL store or an embedded directory — that
    /// holds no memories yet, then verifies every audit chain there.
    /// Returns the quads copied and the target's verification.
    pub fn migrate_to(&self, target: MigrationTarget, progress: &dyn Fn(usize, usize)) -> Result<(u64, Vec<audit::TenantVerification>)> {
        let target = match target {
            MigrationTarget::Remote(config) => crate::store::Store::connect(config)?,
            MigrationTarget::Directory(dir) => crate::store::Store::open(&dir)?,
        };
        let span = tracing::info_span!("migrate", from = %self.store.location(), to = %target.location());
        let _entered = span.enter();
        let copied = self.store.copy_into(&target, progress)?;
        let verified =
            target.tenants()?.iter().map(|t| audit::verify_tenant(&target, t).map_err(MemoryError::from)).collect::<Result<Vec<_>>>()?;
        Ok((copied, verified))
    }
}

/// Where [`Memory::migrate_to`] copies a store.
#[derive(Debug, Clone)]
pub enum MigrationTarget {
    /// A remote SPARQL 1.1 store.
    Remote(crate::store::RemoteConfig),
    /// An embedded store in this directory.
    Directory(std::path::PathBuf),
}
