//! Hydration: candidates read from the store, confined again (status and
//! visibility checked against the stored atom), boosted, and ranked on the
//! boosted score. Bounded: the graph index's cards give each candidate's
//! boost before any read, so candidates are read best boosted score first
//! and the loop stops once no later one can enter the top k (about k
//! reads); a candidate without a card counts with the largest boost, and
//! an atom that disagrees with its card makes every later one count so.
//! [`read_ahead`] reads the likely top atoms while the last model still
//! embeds the query; hydration starts from what it read.

use std::collections::HashMap;

use super::{Candidate, Query, RecallConfig, RecallError, RecallRequest};
use crate::atom::{Atom, AtomId, Epistemic, Status};
use crate::index::Indexes;
use crate::index::card::Card;
use crate::scope::{Scope, Visibility};
use crate::store::Store;

/// Atoms an embedded store reads per batch after the first k (on two
/// threads).
const LATER_BATCH: usize = 16;

/// What one recall reads from and for whom.
#[derive(Clone, Copy)]
pub(super) struct Recall<'a> {
    pub(super) store: &'a Store,
    pub(super) indexes: &'a Indexes,
    pub(super) config: &'a RecallConfig,
    pub(super) scope: &'a Scope,
    pub(super) request: &'a RecallRequest,
    pub(super) query: &'a Query<'a>,
}

/// How many times k atoms [`read_ahead`] reads at most.
const READ_AHEAD_TIMES: usize = 2;

/// A candidate on its way to hydration.
struct Ranked {
    id: AtomId,
    candidate: Candidate,
    /// The boost its card predicts (`None`: no card).
    predicted: Option<f32>,
    /// The best boosted score it can have.
    bound: f32,
}

/// Candidates in the order hydration reads them: best boosted score (as
/// their cards predict) first.
fn ranked(
    candidates: HashMap<AtomId, Candidate>,
    indexes: &Indexes,
    boosts: &mut Boosts<'_>,
    max_boost: f32,
    scope: &Scope,
) -> Vec<Ranked> {
    let graph = indexes.graph();
    let mut ranked: Vec<Ranked> = candidates
        .into_iter()
        .map(|(id, candidate)| {
            let predicted = graph.card(id).map(|card| boosts.of(card, card.on_other_branch(scope)));
            let bound = candidate.score * predicted.unwrap_or(max_boost);
            Ranked { id, candidate, predicted, bound }
        })
        .collect();
    ranked.sort_by(|a, b| b.bound.total_cmp(&a.bound).then(a.id.cmp(&b.id)));
    ranked
}

/// The largest boost any atom can get.
fn max_boost(config: &RecallConfig) -> f32 {
    config.boost_necessary.max(config.boost_possible).max(1.0)
        * config.boost_user.max(1.0)
        * config.boost_other_branch.max(1.0)
        * (1.0 + config.recency_bonus.max(0.0))
        * config.boost_named_source.max(1.0)
}

/// Reads ahead, one at a time and best first, the atoms that would be the
/// top 2k (k: `request.max_results`) of `guess` (candidates fused from the
/// lists a recall has so far) until `done` says the rest of the lists are
/// there. A recall does this on the core the faster model has left while
/// the slower one still embeds the query: the final top k is mostly in the
/// guess's top 2k, so most of hydration's reads are done by the time it
/// starts (at 10k over `hmg mcp`, hydration's median 0.55–0.58 ms with
/// the top k read ahead, 0.45–0.46 with the top 2k). What is read is only
/// a cache for [`hydrate`], which checks every atom as it would a fresh
/// read. An embedded store only (a remote one pays per request, and a
/// request cannot be cut short).
pub(super) fn read_ahead(guess: HashMap<AtomId, Candidate>, at: &Recall<'_>, done: &mut dyn FnMut() -> bool) -> HashMap<AtomId, Atom> {
    let Recall { store, indexes, config, scope, request, query } = *at;
    let mut read = HashMap::new();
    if store.is_shared() {
        return read;
    }
    let mut boosts = Boosts::new(config, query);
    for Ranked { id, .. } in
        ranked(guess, indexes, &mut boosts, max_boost(config), scope).into_iter().take(READ_AHEAD_TIMES * request.max_results)
    {
        if done() {
            break;
        }
        // A failed read here is not an error: hydration reads it again.
        if let Ok(atoms) = crate::store::codec::load_atoms(store, query.tenant, &[id], false) {
            read.extend(atoms);
        }
    }
    tracing::debug!(read = read.len(), "read ahead while the last model embedded");
    read
}

/// The best `request.max_results` atoms with their candidates, best first.
/// `already_read`: atoms read for this recall ahead of it ([`read_ahead`]).
pub(super) fn hydrate(
    candidates: HashMap<AtomId, Candidate>,
    already_read: HashMap<AtomId, Atom>,
    at: &Recall<'_>,
) -> Result<Vec<(Atom, Candidate)>, RecallError> {
    let Recall { store, indexes, config, scope, request, query } = *at;
    let max_boost = max_boost(config);
    let mut boosts = Boosts::new(config, query);
    let ranked = ranked(candidates, indexes, &mut boosts, max_boost, scope);
    // The largest fused score from each position on: what bounds the rest
    // once a card has been found wrong.
    let mut best_after = vec![0f32; ranked.len() + 1];
    for i in (0..ranked.len()).rev() {
        best_after[i] = best_after[i + 1].max(ranked[i].candidate.score);
    }
    let k = request.max_results;
    let mut results: Vec<(Atom, Candidate)> = Vec::new();
    let mut kth_best: Vec<f32> = Vec::with_capacity(k + 1);
    // A hard cap keeps hydration bounded when many scores are close and
    // the cards are missing; the boosts' effect that far down the list is
    // negligible.
    let hydrate_cap = (k * 3).max(30);
    // Atoms are read ahead in batches: a remote store pays per request
    // (every atom that may be hydrated in one), an embedded one reads a
    // batch on two threads. With cards the first k are the likely top k:
    // the first batch is those.
    let carded = ranked.iter().take(k).all(|r| r.predicted.is_some());
    let batch = if store.is_shared() { hydrate_cap } else { LATER_BATCH };
    let first_batch = if carded { k } else { batch };
    let order: Vec<AtomId> = ranked.iter().map(|r| r.id).collect();
    let mut read: HashMap<AtomId, Atom> = already_read;
    let mut read_up_to = 0;
    let mut cards_hold = true;
    for (hydrated, Ranked { id, mut candidate, predicted, bound }) in ranked.into_iter().enumerate() {
        let best_left = if cards_hold { bound } else { best_after[hydrated] * max_boost };
        if kth_best.len() >= k && (best_left < kth_best[k - 1] || hydrated >= hydrate_cap) {
            break;
        }
        if hydrated >= read_up_to {
            let end = (read_up_to + if read_up_to == 0 { first_batch } else { batch }).min(order.len());
            let missing: Vec<AtomId> = order[read_up_to..end].iter().filter(|id| !read.contains_key(id)).copied().collect();
            if !missing.is_empty() {
                read.extend(crate::store::codec::load_atoms(store, query.tenant, &missing, false)?);
            }
            read_up_to = end;
        }
        let Some(atom) = read.remove(&id) else { continue };
        let allowed = atom.status == Status::Active || (request.include_negated && atom.status == Status::Negated);
        let visibility = scope.sees(&atom.scope);
        if !allowed || visibility == Visibility::Hidden || (request.strict_scope && !scope.holds_exactly(&atom.scope)) {
            continue;
        }
        let boost = boosts.of(&Card::of(&atom), visibility == Visibility::OtherBranch);
        if predicted.is_some_and(|p| p != boost) {
            tracing::warn!(atom = %atom.id, "an atom disagrees with its card in the graph index; ranking the rest without cards");
            cards_hold = false;
        }
        candidate.explain.boost = boost;
        // Ranked on the boosted score; shown clamped to 0–1 (clamping
        // before sorting would tie every strong match at 1.0).
        candidate.score = (candidate.score * boost).max(0.0);
        let position = kth_best.partition_point(|s| *s >= candidate.score);
        kth_best.insert(position, candidate.score);
        kth_best.truncate(k);
        results.push((atom, candidate));
    }
    tracing::debug!(read = read_up_to, kept = results.len(), cards_hold, "hydrated atoms");
    results.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.id.cmp(&b.0.id)));
    results.truncate(k);
    Ok(results)
}

/// The boosts of one query.
struct Boosts<'a> {
    config: &'a RecallConfig,
    query: &'a Query<'a>,
    now: chrono::DateTime<chrono::Utc>,
    /// Whether the query names each custom source seen so far (a dialogue's
    /// few speakers, asked of every candidate).
    named: HashMap<String, bool>,
}

impl<'a> Boosts<'a> {
    /// The boosts of `query`, as of now.
    fn new(config: &'a RecallConfig, query: &'a Query<'a>) -> Boosts<'a> {
        Boosts { config, query, now: chrono::Utc::now(), named: HashMap::new() }
    }

    /// The product of the boosts that apply to an atom with `card`
    /// (`other_branch`: the reader sees it as written on another branch).
    fn of(&mut self, card: &Card, other_branch: bool) -> f32 {
        let config = self.config;
        let mut boost = match card.epistemic {
            Epistemic::Necessary => config.boost_necessary,
            Epistemic::Possible => config.boost_possible,
            Epistemic::Actual => 1.0,
        };
        if card.source == "user" {
            boost *= config.boost_user;
        }
        if other_branch {
            boost *= config.boost_other_branch;
        }
        if config.boost_named_source != 1.0 && self.names(&card.source) {
            boost *= config.boost_named_source;
        }
        let age_days = (self.now - card.created_at()).num_seconds().max(0) as f32 / 86_400.0;
        boost *= 1.0 + config.recency_bonus * 0.5f32.powf(age_days / config.recency_half_life_days.max(0.01));
        boost
    }

    fn names(&mut self, source: &str) -> bool {
        if let Some(named) = self.named.get(source) {
            return *named;
        }
        let named = names_source(&self.query.terms, source);
        self.named.insert(source.to_owned(), named);
        named
    }
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
