//! Candidate lists, each confined to the caller's tenant, visible
//! repositories and allowed statuses inside its own search: keyword (BM25),
//! one semantic list per model that understands the query's language, the
//! per-part list of a dialogue query, and atoms mentioning the query's
//! entities.

use std::collections::HashMap;

use super::{Query, RecallConfig, RecallError};
use crate::atom::AtomId;
use crate::index::{IndexError, Indexes, Placement, Semantic};
use crate::store;
use crate::text::analyze::{Mode, terms};

/// The lists fusion combines.
pub(super) struct Lists {
    /// Keyword hits, best first, with their BM25 scores.
    pub(super) keyword: Vec<(AtomId, f32)>,
    /// One list of (atom, cosine) per model that answered.
    pub(super) semantic: Vec<Vec<(AtomId, f32)>>,
    /// Best calibrated match with any part of a dialogue query (0–1).
    pub(super) segment: Vec<(AtomId, f32)>,
    /// Atoms mentioning entities the query names, most matches first.
    pub(super) entity: Vec<AtomId>,
    /// How many parts the query was split into (0 or 1: not a dialogue).
    pub(super) parts: usize,
}

/// Gathers every list for `query`. The models embed the query on the
/// engine threads (side by side, one core each, when there are several;
/// a dialogue's whole and parts crossed over two cores: [`placements`]).
/// This thread waits for them in the order they are expected to answer
/// (the cost each had lately) and searches each model's vectors as soon as
/// its vector is there, while the slower ones still embed; the keyword and
/// entity lists come just before the wait for the last model, on the core
/// the faster models have left. When that model is still embedding after
/// them, `while_waiting` gets the lists so far and a check of whether the
/// last vector is there, to use the idle core until it is.
pub(super) fn gather(
    indexes: &Indexes,
    config: &RecallConfig,
    query: &Query<'_>,
    while_waiting: &mut dyn FnMut(&Lists, &mut dyn FnMut() -> bool),
) -> Result<Lists, RecallError> {
    let (pieces, pooled) = query_pieces(query.text, query.terms.len(), config);
    let parts: Vec<&str> = pieces.iter().zip(&pooled).filter(|(_, pool)| **pool).map(|(p, _)| p.as_str()).collect();
    let with_parts = parts.len() >= 2 && config.segment_weight > 0.0;
    // Late chunking: the older parts' vectors pooled from each model's
    // forward pass over the whole, the latest `own_parts` embedded on
    // their own ([`Semantic::start_late`]).
    let late = with_parts && config.own_parts < parts.len();
    let piece_refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    // The whole query and its parts in one call per model: one forward
    // pass over all of them.
    let mut texts = vec![query.text];
    if with_parts {
        texts.extend(parts.iter().copied());
    }
    let models: Vec<&Semantic> = indexes.semantic().iter().filter(|s| s.understands(query.language)).collect();
    // Waited for in the order the models are expected to answer (the cost
    // each had lately). Halves are also started in that order: on an
    // engine thread the faster model's half goes first, so it answers
    // first; otherwise each model has its own core, model by model.
    let mut order: Vec<usize> = (0..models.len()).collect();
    // Before any query was timed, the model with the most arithmetic per
    // token is expected last.
    order.sort_by_key(|&i| (models[i].query_micros(), models[i].embedder.macs_per_token()));
    let engines = crate::index::engine_count();
    let placement = if late { late_placements(models.len(), engines) } else { placements(models.len(), with_parts, engines) };
    let halves = placement.iter().any(|p| matches!(p, Placement::Halves { .. }));
    let start: Vec<usize> = if halves || late { order.clone() } else { (0..models.len()).collect() };
    let mut started: Vec<_> = models.iter().map(|_| None).collect();
    for (rank, (&i, placement)) in start.iter().zip(placement).enumerate() {
        started[i] = Some(if late {
            // The faster models embed one part fewer on their own: they
            // share a core with the slowest model's own parts, and both
            // cores then end together ([`late_placements`]).
            let own = if rank + 1 == models.len() { config.own_parts } else { config.own_parts.saturating_sub(1) };
            models[i].start_late(query.text, &piece_refs, &pooled, own, placement)
        } else {
            models[i].start_queries(&texts, placement)
        });
    }
    // Each model's lists in the models' order, whatever order they came in
    // (fusion adds them up in that order).
    let mut semantic: Vec<Option<Vec<(AtomId, f32)>>> = vec![None; models.len()];
    let mut per_part: Vec<Option<HashMap<AtomId, f32>>> = vec![None; models.len()];
    let mut lexical = None;
    for (n, &i) in order.iter().enumerate() {
        if n + 1 == order.len() {
            let (keyword, entity) = lexical_lists(indexes, config, query)?;
            // Only when a faster model answered first: a lone model embeds
            // on every core, and this thread would take one from it.
            if n >= 1
                && let Some(Ok(last)) = started[i].as_mut()
                && !last.is_ready()
            {
                let so_far = Lists {
                    keyword,
                    semantic: semantic.iter().flatten().cloned().collect(),
                    segment: average(per_part.iter().flatten().cloned().collect()),
                    entity,
                    parts: parts.len(),
                };
                while_waiting(&so_far, &mut || last.is_ready());
                lexical = Some((so_far.keyword, so_far.entity));
            } else {
                lexical = Some((keyword, entity));
            }
        }
        let s = models[i];
        let Some(pending) = started[i].take() else { continue };
        let mut vectors = match pending.and_then(|pending| s.finish_queries(pending)) {
            Ok(vectors) if vectors.len() == texts.len() => vectors,
            Ok(_) | Err(_) if texts.len() > 1 => {
                tracing::warn!(model = s.embedder.id(), "query part embedding failed; this model sits out the dialogue list");
                match s.embed_query(query.text) {
                    Ok(vector) => vec![vector],
                    Err(error) => {
                        tracing::warn!(%error, model = s.embedder.id(), "query embedding failed; recalling without it");
                        continue;
                    }
                }
            }
            Ok(_) => continue,
            Err(error) => {
                tracing::warn!(%error, model = s.embedder.id(), "query embedding failed; recalling without it");
                continue;
            }
        };
        let part_vectors = vectors.split_off(1);
        semantic[i] = Some(search(s, query, &vectors[0], config)?);
        if with_parts && part_vectors.len() == parts.len() {
            per_part[i] = Some(part_list(s, config, query, &part_vectors)?);
        }
    }
    let (keyword, entity) = match lexical {
        Some(lists) => lists,
        None => lexical_lists(indexes, config, query)?,
    };
    let segment = average(per_part.into_iter().flatten().collect());
    Ok(Lists { keyword, semantic: semantic.into_iter().flatten().collect(), segment, entity, parts: parts.len() })
}

/// Where the models started `i`-th of `models` embeds the query (its
/// whole text, then its parts when `with_parts`), over `engines` engine
/// threads. Several models run side by side, one core each (on one core,
/// one after the other); a lone model's batch takes every core. A
/// dialogue's whole text and its parts are about the same tokens, so with
/// two models and two cores each model's whole and parts go to both,
/// crossed over: e5's whole and MiniLM's parts on one core, e5's parts and
/// MiniLM's whole on the other. e5's whole batch on one core took about
/// twice MiniLM's and left the other core idle for half of the query
/// (MADial en, `hmg eval`, alternated: p50 60 / 59 → 51 / 50 ms, R@10
/// unchanged). A lone model (a Chinese or Japanese dialogue) gained
/// nothing from halves over one batch on both cores (p50 30 / 31 →
/// 31 / 33 ms), so it keeps the batch.
pub(super) fn placements(models: usize, with_parts: bool, engines: usize) -> Vec<Placement> {
    let halves = with_parts && models >= 2 && engines >= 2;
    (0..models)
        .map(|i| {
            if halves && engines >= 2 * models {
                Placement::Halves { whole: 2 * i, parts: 2 * i + 1 }
            } else if halves {
                Placement::Halves { whole: i % engines, parts: (i + 1) % engines }
            } else if models >= 2 {
                Placement::Core(i)
            } else {
                Placement::Every
            }
        })
        .collect()
}

/// Where the models, started fastest first, embed a dialogue query with
/// late chunking ([`Semantic::start_late`]) over `engines` engine threads:
/// each model's pass over the whole, and its latest parts' own pass. With
/// two cores for each model, each has two. Otherwise the slowest model's
/// pass over the whole (e5's: about twice MiniLM's per token) has a core
/// to itself, and every other run queues on the next core in the order
/// started (the faster models first, so they answer first; the slowest
/// model's own parts last). A lone model's runs take every core, one after
/// the other, as its batch would.
pub(super) fn late_placements(models: usize, engines: usize) -> Vec<Placement> {
    (0..models)
        .map(|rank| {
            if models == 1 {
                Placement::Every
            } else if engines >= 2 * models {
                Placement::Halves { whole: 2 * rank, parts: 2 * rank + 1 }
            } else if engines < 2 {
                Placement::Core(0)
            } else if rank + 1 == models {
                Placement::Halves { whole: 0, parts: 1 }
            } else {
                Placement::Core(1 + rank % (engines - 1))
            }
        })
        .collect()
}

/// The keyword list (BM25 scores) and the entity list.
type Lexical = (Vec<(AtomId, f32)>, Vec<AtomId>);

/// The keyword list and the entity list.
fn lexical_lists(indexes: &Indexes, config: &RecallConfig, query: &Query<'_>) -> Result<Lexical, RecallError> {
    let keyword = indexes
        .keyword()
        .search(query.tenant, &query.repo_keys, query.statuses, query.text, config.candidates)
        .map_err(IndexError::from)?;
    Ok((keyword, entity_list(indexes, config, query)))
}

fn search(s: &Semantic, query: &Query<'_>, vector: &[f32], config: &RecallConfig) -> Result<Vec<(AtomId, f32)>, RecallError> {
    Ok(s.vectors.search(query.tenant, &query.repo_keys, query.statuses, vector, config.candidates).map_err(IndexError::from)?)
}

/// One model's list for the parts of a long query, each embedded alone:
/// a memory scores its best calibrated match with any part (later parts
/// weigh more).
fn part_list(s: &Semantic, config: &RecallConfig, query: &Query<'_>, vectors: &[Vec<f32>]) -> Result<HashMap<AtomId, f32>, RecallError> {
    let mut per_model: HashMap<AtomId, f32> = HashMap::new();
    for (index, vector) in vectors.iter().enumerate() {
        let weight = config.part_decay.clamp(0.0, 1.0).powi((vectors.len() - 1 - index) as i32);
        let hits = search(s, query, vector, config)?;
        let (low, high) = hits.iter().fold((f32::MAX, f32::MIN), |(lo, hi), (_, c)| (lo.min(*c), hi.max(*c)));
        let spread = (high - low).max(f32::EPSILON);
        for (id, cosine) in hits {
            let v = per_model.entry(id).or_default();
            *v = v.max(weight * (cosine - low) / spread);
        }
    }
    Ok(per_model)
}

/// The per-part lists of the models that answered, averaged (a model for
/// other languages sits out and must not halve the list).
fn average(per_model: Vec<HashMap<AtomId, f32>>) -> Vec<(AtomId, f32)> {
    let models = per_model.iter().filter(|m| !m.is_empty()).count().max(1) as f32;
    let mut best: HashMap<AtomId, f32> = HashMap::new();
    for list in per_model {
        for (id, v) in list {
            *best.entry(id).or_default() += v;
        }
    }
    best.into_iter().map(|(id, v)| (id, v / models)).collect()
}

/// Atoms mentioning entities named in the query, most matches first.
fn entity_list(indexes: &Indexes, config: &RecallConfig, query: &Query<'_>) -> Vec<AtomId> {
    let graph = indexes.graph();
    let mut counts: HashMap<AtomId, usize> = HashMap::new();
    for entity in crate::text::extract_entities(query.text) {
        let iri = store::entity_iri(query.tenant, &entity.key).into_string();
        let atoms = graph.atoms_mentioning(query.tenant, &iri);
        if atoms.len() > config.max_entity_degree * 4 {
            continue;
        }
        for id in atoms {
            *counts.entry(id).or_default() += 1;
        }
    }
    let mut list: Vec<(AtomId, usize)> = counts.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    list.truncate(config.candidates);
    list.into_iter().map(|(id, _)| id).collect()
}

/// The most recent parts of a long query: its lines, or its sentences when
/// it is one line; parts of fewer than three terms are left out.
#[cfg(test)]
pub(super) fn query_parts(query: &str, query_term_count: usize, config: &RecallConfig) -> Vec<String> {
    let (pieces, pooled) = query_pieces(query, query_term_count, config);
    pieces.into_iter().zip(pooled).filter(|(_, pool)| *pool).map(|(piece, _)| piece).collect()
}

/// A long query cut into pieces (its lines, or its sentences when it is
/// one line; together its text, in order), each marked when it is one of
/// [`query_parts`]; nothing for a short query.
pub(super) fn query_pieces(query: &str, query_term_count: usize, config: &RecallConfig) -> (Vec<String>, Vec<bool>) {
    if query_term_count < config.long_query_terms {
        return (Vec::new(), Vec::new());
    }
    let lines: Vec<&str> = query.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let pieces: Vec<String> = if lines.len() >= 2 {
        lines.into_iter().map(str::to_owned).collect()
    } else {
        query.split_inclusive(['.', '!', '?', '。', '！', '？']).map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect()
    };
    let mut pooled: Vec<bool> = pieces.iter().map(|p| terms(p, Mode::Query).len() >= 3).collect();
    let keep = config.max_segments.max(1);
    let mut kept = 0;
    for pool in pooled.iter_mut().rev().filter(|pool| **pool) {
        kept += 1;
        *pool = kept <= keep;
    }
    (pieces, pooled)
}
