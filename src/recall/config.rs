//! Recall tuning: every weight and limit of the pipeline, with its default
//! and why (measurements in `docs/recall-tuning.md`).

/// Recall tuning. Every field is documented with its default.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallConfig {
    /// Candidates taken from each retriever (default 100).
    pub candidates: usize,
    /// Weight of the keyword list (default 1.0).
    pub keyword_weight: f32,
    /// Weight of the semantic lists together (default 1.0), for queries of
    /// up to `long_query_terms` terms.
    pub semantic_weight: f32,
    /// From this many query terms on, the semantic weight grows (doubling at
    /// four times as many): keyword scores get noisier as queries grow into
    /// sentences and dialogues, embeddings do not (default 16).
    pub long_query_terms: usize,
    /// Weight of the query-entity list (default 0.3).
    pub entity_weight: f32,
    /// Weight of the per-part semantic list for long queries made of several
    /// lines or sentences (a dialogue): each part is embedded on its own and
    /// a memory scores its best match with any part (default 1.5).
    pub segment_weight: f32,
    /// Multiplier of the keyword weight for queries of several parts (a
    /// dialogue): their words come from every turn, greetings and the agent's
    /// replies included, so the whole-text keyword match is the noisiest list
    /// (default 0.7).
    pub part_keyword_factor: f32,
    /// Multiplier per part of distance from the last part of a dialogue
    /// query (default 0.9: the latest turns are what the next reply answers).
    pub part_decay: f32,
    /// Most recent parts embedded on their own (default 4).
    pub max_segments: usize,
    /// How many of a dialogue's latest parts are embedded on their own
    /// (default 2); the older ones come from the whole's forward pass
    /// (their tokens' states pooled, "late chunking"). At
    /// [`RecallConfig::max_segments`] or more, every part has its own pass.
    pub own_parts: usize,
    /// How many top candidates seed graph expansion (default 10).
    pub expansion_seeds: usize,
    /// Score multiplier per hop (default 0.45: conversation turns next to a
    /// strong hit often carry the rest of the answer).
    pub hop_decay: f32,
    /// Multiplier of links through shared entities against session, revision
    /// and derivation links (default 0.3: a shared name is weaker evidence
    /// than adjacency in a session or an evolution link).
    pub entity_hop_weight: f32,
    /// Session neighbours on each side reached in one hop (default 2).
    pub session_window: usize,
    /// Entities linking more atoms than this are too common to expand (default 40).
    pub max_entity_degree: usize,
    /// Multiplier for constraints (default 1.10).
    pub boost_necessary: f32,
    /// Multiplier for guesses (default 0.92).
    pub boost_possible: f32,
    /// Multiplier for `source = user` (default 1.05).
    pub boost_user: f32,
    /// Multiplier for atoms of another branch of the repository (default 0.90).
    pub boost_other_branch: f32,
    /// Multiplier for a memory attributed to someone the query names (a
    /// conversation turn spoken by the person asked about: questions about
    /// a person are mostly answered by what that person said). Only custom
    /// sources count, not `user` or `agent` (default 1.3).
    pub boost_named_source: f32,
    /// Largest recency bonus, as a fraction (default 0.05).
    pub recency_bonus: f32,
    /// Half-life of the recency bonus in days (default 30).
    pub recency_half_life_days: f32,
}

impl Default for RecallConfig {
    fn default() -> RecallConfig {
        RecallConfig {
            candidates: 100,
            keyword_weight: 1.0,
            semantic_weight: 1.0,
            long_query_terms: 16,
            entity_weight: 0.3,
            segment_weight: 1.5,
            part_keyword_factor: 0.7,
            part_decay: 0.9,
            max_segments: 4,
            own_parts: 2,
            expansion_seeds: 10,
            hop_decay: 0.45,
            entity_hop_weight: 0.3,
            session_window: 2,
            max_entity_degree: 40,
            boost_necessary: 1.10,
            boost_possible: 0.92,
            boost_user: 1.05,
            boost_other_branch: 0.90,
            boost_named_source: 1.3,
            recency_bonus: 0.05,
            recency_half_life_days: 30.0,
        }
    }
}

impl RecallConfig {
    /// Sets one parameter by name (`keyword`, `semantic`, `entity`,
    /// `speaker`, `segment`, `part_decay`, `dialogue_keyword`, `hop`,
    /// `window`, `seeds`, `long`, `candidates`, `degree`, …; an unknown
    /// name lists them all), for experiments such as `hmg eval --tune`.
    pub fn set(&mut self, name: &str, value: &str) -> std::result::Result<(), String> {
        let number = || value.trim().parse::<f32>().map_err(|e| format!("{name}: '{value}' is not a number ({e})"));
        let count = || value.trim().parse::<usize>().map_err(|e| format!("{name}: '{value}' is not a whole number ({e})"));
        match name.trim() {
            "keyword" => self.keyword_weight = number()?,
            "semantic" => self.semantic_weight = number()?,
            "entity" => self.entity_weight = number()?,
            "segment" => self.segment_weight = number()?,
            "segments" => self.max_segments = count()?,
            "own_parts" => self.own_parts = count()?,
            "part_decay" => self.part_decay = number()?,
            "dialogue_keyword" => self.part_keyword_factor = number()?,
            "speaker" => self.boost_named_source = number()?,
            "hop" => self.hop_decay = number()?,
            "entity_hop" => self.entity_hop_weight = number()?,
            "window" => self.session_window = count()?,
            "seeds" => self.expansion_seeds = count()?,
            "long" => self.long_query_terms = count()?,
            "candidates" => self.candidates = count()?.max(1),
            "degree" => self.max_entity_degree = count()?,
            other => {
                return Err(format!(
                    "unknown parameter '{other}'; expected keyword, semantic, entity, segment, segments, own_parts, part_decay, dialogue_keyword, speaker, hop, entity_hop, window, seeds, long, candidates or degree"
                ));
            }
        }
        Ok(())
    }

    /// Applies `name=value,name=value`.
    pub fn apply(&mut self, settings: &str) -> std::result::Result<(), String> {
        for pair in settings.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("'{pair}' is not name=value"));
            };
            self.set(name, value)?;
        }
        Ok(())
    }
}
