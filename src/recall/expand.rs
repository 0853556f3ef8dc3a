//! Graph expansion: one hop from the strongest candidates, decaying per hop;
//! links through a shared entity count less than session adjacency,
//! revision and derivation links.

use std::collections::HashMap;

use super::{Candidate, RecallConfig};
use crate::atom::AtomId;
use crate::index::Indexes;

/// Adds the neighbours of the top `expansion_seeds` candidates.
pub(super) fn expand(candidates: &mut HashMap<AtomId, Candidate>, indexes: &Indexes, config: &RecallConfig) {
    let mut seeds: Vec<(AtomId, f32)> = candidates.iter().map(|(id, c)| (*id, c.score)).collect();
    seeds.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    seeds.truncate(config.expansion_seeds);
    let graph = indexes.graph();
    for (seed, seed_score) in seeds {
        for neighbour in graph.neighbours(seed, config.session_window, config.max_entity_degree) {
            let link = if neighbour.via.starts_with("entity:") { config.entity_hop_weight } else { 1.0 };
            let amount = seed_score * config.hop_decay * neighbour.weight * link;
            let c = candidates.entry(neighbour.atom_id).or_default();
            c.score += amount;
            c.explain.graph.push((seed.to_string(), neighbour.via, amount));
        }
    }
}
