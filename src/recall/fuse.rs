//! Fusion: calibrated score mixing. Each list counts with its weight, scores
//! normalized per query (cosine ranges differ between models: e5 crowds them
//! near 0.8, so each semantic list is min–max calibrated over its own
//! candidates); the sum is divided by the weights of the lists that answered,
//! so a fused score is in 0–1.

use std::collections::HashMap;

use super::candidates::Lists;
use super::{Candidate, RecallConfig};
use crate::atom::AtomId;

/// Fuses `lists` of a query of `term_count` terms into scored candidates.
pub(super) fn fuse(lists: &Lists, config: &RecallConfig, term_count: usize) -> HashMap<AtomId, Candidate> {
    let keyword_weight = if lists.parts >= 2 { config.keyword_weight * config.part_keyword_factor.max(0.0) } else { config.keyword_weight };
    let mut candidates: HashMap<AtomId, Candidate> = HashMap::new();
    let max_keyword = lists.keyword.first().map_or(1.0, |h| h.1.max(f32::EPSILON));
    for (rank, (id, score)) in lists.keyword.iter().enumerate() {
        let c = candidates.entry(*id).or_default();
        c.explain.keyword = Some((rank + 1, *score));
        c.score += keyword_weight * score / max_keyword;
    }
    // The semantic weight grows with the query's length (doubling at four
    // times `long_query_terms`) and is shared between the models that answered.
    let term_count = term_count.max(1) as f32;
    let length_factor = 1.0 + ((term_count / config.long_query_terms.max(1) as f32).log2() / 2.0).clamp(0.0, 1.0);
    let semantic_weight = config.semantic_weight * length_factor;
    let total_share = (lists.semantic.len() as f32).max(f32::EPSILON);
    for semantic in &lists.semantic {
        let share = semantic_weight / total_share;
        let (low, high) = semantic.iter().fold((f32::MAX, f32::MIN), |(lo, hi), (_, s)| (lo.min(*s), hi.max(*s)));
        let spread = (high - low).max(f32::EPSILON);
        for (rank, (id, cosine)) in semantic.iter().enumerate() {
            let c = candidates.entry(*id).or_default();
            if c.explain.semantic.is_none_or(|(_, best)| *cosine > best) {
                c.explain.semantic = Some((rank + 1, *cosine));
            }
            c.score += share * (cosine - low) / spread;
        }
    }
    for (rank, id) in lists.entity.iter().enumerate() {
        let c = candidates.entry(*id).or_default();
        c.explain.entity = Some(rank + 1);
        c.score += config.entity_weight / (1.0 + rank as f32).sqrt();
    }
    for (id, value) in &lists.segment {
        let c = candidates.entry(*id).or_default();
        c.explain.segment = Some(*value);
        c.score += config.segment_weight * value;
    }
    let active_weights = keyword_weight
        + if lists.semantic.is_empty() { 0.0 } else { semantic_weight }
        + if lists.segment.is_empty() { 0.0 } else { config.segment_weight }
        + if lists.entity.is_empty() { 0.0 } else { config.entity_weight };
    let max_possible = active_weights.max(f32::EPSILON);
    for c in candidates.values_mut() {
        c.score = (c.score / max_possible).min(1.0);
        c.explain.fused = c.score;
    }
    candidates
}
