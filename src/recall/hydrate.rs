//! Hydration: candidates read from the store best first, confined again
//! (status and visibility checked against the stored atom), boosted, and
//! ranked on the boosted score. Bounded: stops once no remaining candidate
//! could enter the top k even with the largest boost.

use std::collections::HashMap;

use super::{Candidate, Query, RecallConfig, RecallError, RecallRequest};
use crate::atom::{Atom, AtomId, Epistemic, Status};
use crate::scope::{Scope, Visibility};
use crate::store::Store;

/// Atoms an embedded store reads per batch (on two threads).
const READ_AHEAD: usize = 16;

/// The best `request.max_results` atoms with their candidates, best first.
pub(super) fn hydrate(
    candidates: HashMap<AtomId, Candidate>,
    store: &Store,
    config: &RecallConfig,
    scope: &Scope,
    request: &RecallRequest,
    query: &Query<'_>,
) -> Result<Vec<(Atom, Candidate)>, RecallError> {
    let mut ranked: Vec<(AtomId, Candidate)> = candidates.into_iter().collect();
    ranked.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
    let now = chrono::Utc::now();
    let mut results: Vec<(Atom, Candidate)> = Vec::new();
    let max_boost = config.boost_necessary.max(1.0)
        * config.boost_user.max(1.0)
        * (1.0 + config.recency_bonus.max(0.0))
        * config.boost_named_source.max(1.0);
    let mut kth_best: Vec<f32> = Vec::with_capacity(request.max_results + 1);
    // A hard cap keeps hydration bounded when many scores are close; the
    // boosts' effect that far down the list is negligible.
    let hydrate_cap = (request.max_results * 3).max(30);
    // Atoms are read ahead in batches: a remote store pays per request
    // (every atom that may be hydrated in one), an embedded one reads a
    // batch on two threads. The loop stops once no later candidate can
    // enter the top k, so a batch reads little past that.
    let batch = if store.is_shared() { hydrate_cap } else { READ_AHEAD };
    let order: Vec<AtomId> = ranked.iter().map(|(id, _)| *id).collect();
    let mut read: HashMap<AtomId, Atom> = HashMap::new();
    let mut read_up_to = 0;
    for (hydrated, (id, mut candidate)) in ranked.into_iter().enumerate() {
        if kth_best.len() >= request.max_results
            && (candidate.score * max_boost < kth_best[request.max_results - 1] || hydrated >= hydrate_cap)
        {
            break;
        }
        if hydrated >= read_up_to {
            let end = (read_up_to + batch).min(order.len());
            read = crate::store::codec::load_atoms(store, query.tenant, &order[read_up_to..end], false)?;
            read_up_to = end;
        }
        let Some(atom) = read.remove(&id) else { continue };
        let allowed = atom.status == Status::Active || (request.include_negated && atom.status == Status::Negated);
        let visibility = scope.sees(&atom.scope);
        if !allowed || visibility == Visibility::Hidden || (request.strict_scope && !scope.holds_exactly(&atom.scope)) {
            continue;
        }
        let boost = boost(&atom, visibility, config, query, now);
        candidate.explain.boost = boost;
        // Ranked on the boosted score; shown clamped to 0–1 (clamping
        // before sorting would tie every strong match at 1.0).
        candidate.score = (candidate.score * boost).max(0.0);
        let position = kth_best.partition_point(|s| *s >= candidate.score);
        kth_best.insert(position, candidate.score);
        kth_best.truncate(request.max_results);
        results.push((atom, candidate));
    }
    tracing::debug!(read = read_up_to, kept = results.len(), "hydrated atoms");
    results.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.id.cmp(&b.0.id)));
    results.truncate(request.max_results);
    Ok(results)
}

/// The product of the boosts that apply to `atom`.
fn boost(atom: &Atom, visibility: Visibility, config: &RecallConfig, query: &Query<'_>, now: chrono::DateTime<chrono::Utc>) -> f32 {
    let mut boost = match atom.epistemic {
        Epistemic::Necessary => config.boost_necessary,
        Epistemic::Possible => config.boost_possible,
        Epistemic::Actual => 1.0,
    };
    if atom.source == "user" {
        boost *= config.boost_user;
    }
    if visibility == Visibility::OtherBranch {
        boost *= config.boost_other_branch;
    }
    if config.boost_named_source != 1.0 && names_source(&query.terms, &atom.source) {
        boost *= config.boost_named_source;
    }
    let age_days = (now - atom.created_at).num_seconds().max(0) as f32 / 86_400.0;
    boost *= 1.0 + config.recency_bonus * 0.5f32.powf(age_days / config.recency_half_life_days.max(0.01));
    boost
}

/// Whether the query names a memory's custom source (a speaker): every term
/// of the source's name is a query term. `user`, `agent` and empty sources
/// name nobody.
pub(super) fn names_source(query_terms: &[String], source: &str) -> bool {
    if matches!(source, "user" | "agent" | "") || query_terms.is_empty() {
        return false;
    }
    let terms = crate::text::analyze::terms(source, crate::text::analyze::Mode::Query);
    !terms.is_empty() && terms.iter().all(|t| query_terms.contains(t))
}
