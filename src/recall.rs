//! memory_recall: scope confinement → candidates from the keyword index, the
//! vector index and the entities named in the query → fusion → graph
//! expansion from the strongest candidates with decay per hop → boosts →
//! scores in 0–1 → hydration from the store. `explain` returns every stage's
//! contribution for each result.
//!
//! Boosts (multiplicative, defaults in [`RecallConfig::default`]): constraint
//! (`necessary`) over fact over guess (`possible`), user over agent source,
//! current branch over other branches, recency (half-life in days).

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

use crate::atom::{AtomId, Epistemic, Status};
use crate::indexes::repo_key;
use crate::memory::{Caller, Memory, MemoryError, Result};
use crate::scope::Visibility;
use crate::store;

/// How candidate lists are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// Reciprocal-rank fusion: Σ wᵢ / (k + rankᵢ).
    Rrf,
    /// Calibrated score mixing: Σ wᵢ · normalized scoreᵢ.
    Mix,
}

/// Recall tuning. Every field is documented with its default.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallConfig {
    /// Fusion method (default `Mix`: measured better than RRF on every
    /// benchmark set, see `ARCHITECTURE.md`).
    pub fusion: Fusion,
    /// RRF constant k (default 60).
    pub rrf_k: f32,
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
    /// Relative weight, within the semantic share, of a model made for a
    /// few languages including the query's, against a model for any
    /// language (default 1.0).
    pub specialist_weight: f32,
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
    /// In a dialogue, leave the agent's own lines (`Assistant:`, `AI:`,
    /// `助手：`, `アシスタント：` …) out of the parts: the user's lines carry
    /// the cues of the user's memories.
    pub user_parts_only: bool,
    /// Weight of a second semantic search with the query moved towards the
    /// best results so far (pseudo-relevance feedback; default 0, off).
    pub feedback_weight: f32,
    /// How many of the best results move the query (default 3).
    pub feedback_docs: usize,
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
    /// Multiplier bonus, as a fraction, for a memory whose emotional tone
    /// (joy, sadness, fear, anger; `lexicon/emotion_*.txt`) is the query's
    /// (default 0).
    pub emotion_boost: f32,
    /// Largest recency bonus, as a fraction (default 0.05).
    pub recency_bonus: f32,
    /// Half-life of the recency bonus in days (default 30).
    pub recency_half_life_days: f32,
}

impl Default for RecallConfig {
    fn default() -> RecallConfig {
        RecallConfig {
            fusion: Fusion::Mix,
            rrf_k: 60.0,
            candidates: 100,
            keyword_weight: 1.0,
            semantic_weight: 1.0,
            long_query_terms: 16,
            entity_weight: 0.3,
            specialist_weight: 1.0,
            segment_weight: 1.5,
            part_keyword_factor: 0.7,
            part_decay: 0.9,
            max_segments: 4,
            user_parts_only: false,
            feedback_weight: 0.0,
            feedback_docs: 3,
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
            emotion_boost: 0.0,
            recency_bonus: 0.05,
            recency_half_life_days: 30.0,
        }
    }
}

impl RecallConfig {
    /// Sets one parameter by name (`keyword`, `semantic`, `entity`,
    /// `speaker`, `segment`, `part_decay`, `dialogue_keyword`, `hop`,
    /// `window`, `seeds`, `long`, `candidates`, `degree`, `rrf_k`,
    /// `fusion` = mix | rrf, …; an unknown name lists them all), for
    /// experiments such as `hmg eval --tune`.
    pub fn set(&mut self, name: &str, value: &str) -> std::result::Result<(), String> {
        let number = || value.trim().parse::<f32>().map_err(|e| format!("{name}: '{value}' is not a number ({e})"));
        let count = || value.trim().parse::<usize>().map_err(|e| format!("{name}: '{value}' is not a whole number ({e})"));
        match name.trim() {
            "keyword" => self.keyword_weight = number()?,
            "semantic" => self.semantic_weight = number()?,
            "entity" => self.entity_weight = number()?,
            "specialist" => self.specialist_weight = number()?,
            "segment" => self.segment_weight = number()?,
            "segments" => self.max_segments = count()?,
            "part_decay" => self.part_decay = number()?,
            "dialogue_keyword" => self.part_keyword_factor = number()?,
            "user_parts" => self.user_parts_only = count()? > 0,
            "emotion" => self.emotion_boost = number()?,
            "speaker" => self.boost_named_source = number()?,
            "feedback" => self.feedback_weight = number()?,
            "feedback_docs" => self.feedback_docs = count()?,
            "hop" => self.hop_decay = number()?,
            "entity_hop" => self.entity_hop_weight = number()?,
            "rrf_k" => self.rrf_k = number()?,
            "window" => self.session_window = count()?,
            "seeds" => self.expansion_seeds = count()?,
            "long" => self.long_query_terms = count()?,
            "candidates" => self.candidates = count()?.max(1),
            "degree" => self.max_entity_degree = count()?,
            "fusion" => {
                self.fusion = match value.trim() {
                    "mix" => Fusion::Mix,
                    "rrf" => Fusion::Rrf,
                    other => return Err(format!("unknown fusion '{other}'; expected mix or rrf")),
                }
            }
            other => {
                return Err(format!(
                    "unknown parameter '{other}'; expected keyword, semantic, entity, specialist, segment, segments, part_decay, dialogue_keyword, user_parts, emotion, speaker, feedback, feedback_docs, hop, entity_hop, window, seeds, long, candidates, degree, rrf_k or fusion"
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

/// Whether the query names a memory's custom source (a speaker): every term
/// of the source's name is a query term. `user`, `agent` and empty sources
/// name nobody.
fn names_source(query_terms: &[String], source: &str) -> bool {
    if matches!(source, "user" | "agent" | "") || query_terms.is_empty() {
        return false;
    }
    let terms = crate::text::analyze::terms(source, crate::text::analyze::Mode::Query);
    !terms.is_empty() && terms.iter().all(|t| query_terms.contains(t))
}

/// The most recent parts of a long query: its lines, or its sentences when
/// it is one line; parts of fewer than three terms are left out.
fn query_parts(query: &str, query_term_count: usize, config: &RecallConfig) -> Vec<String> {
    use crate::text::analyze::{Mode, terms};
    if query_term_count < config.long_query_terms {
        return Vec::new();
    }
    let mut lines: Vec<&str> = query.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if config.user_parts_only && lines.len() >= 2 {
        let agent = |line: &str| {
            let speaker = line.split([':', '：']).next().unwrap_or("").trim().to_lowercase();
            line.contains([':', '：']) && matches!(speaker.as_str(), "assistant" | "ai" | "agent" | "bot" | "助手" | "助理" | "アシスタント")
        };
        if lines.iter().any(|l| !agent(l)) {
            lines.retain(|l| !agent(l));
        }
    }
    let pieces: Vec<String> = if lines.len() >= 2 {
        lines.into_iter().map(str::to_owned).collect()
    } else {
        query.split_inclusive(['.', '!', '?', '。', '！', '？']).map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect()
    };
    let mut parts: Vec<String> = pieces.into_iter().filter(|p| terms(p, Mode::Query).len() >= 3).collect();
    let keep = config.max_segments.max(1);
    if parts.len() > keep {
        parts.drain(..parts.len() - keep);
    }
    parts
}

/// Input of `memory_recall`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallRequest {
    /// A noun phrase, any language.
    pub query: String,
    /// At most this many results (default 10, at most 100).
    pub max_results: usize,
    /// Include negated memories (default false).
    pub include_negated: bool,
    /// Return each stage's contribution.
    pub explain: bool,
    /// Only atoms of exactly the caller's scope: same workspace and
    /// repository (no tenant-wide atoms, unless the caller is tenant-wide),
    /// and the caller's branch when it has one. The REST API's filter
    /// semantics; default false (SPEC visibility rules).
    pub strict_scope: bool,
    /// Record on each returned atom that it was recalled (`lastRecalledAt`,
    /// `recallCount`; reflect's decay and archive read them). Default true;
    /// internal look-ups (merge) turn it off.
    pub record: bool,
}

/// Largest `max_results`.
pub const MAX_RESULTS: usize = 100;
/// Longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 2_000;

impl RecallRequest {
    /// A recall with defaults.
    pub fn new(query: impl Into<String>) -> RecallRequest {
        RecallRequest { query: query.into(), max_results: 10, include_negated: false, explain: false, strict_scope: false, record: true }
    }
}

/// One stage's view of a result.
#[derive(Debug, Clone, PartialEq, Serialize, Default, schemars::JsonSchema, serde::Deserialize)]
pub struct Explain {
    /// Rank and BM25 score in the keyword list.
    pub keyword: Option<(usize, f32)>,
    /// Rank and cosine in the semantic list.
    pub semantic: Option<(usize, f32)>,
    /// Rank in the query-entity list.
    pub entity: Option<usize>,
    /// For a query of several parts (a dialogue): the best calibrated match
    /// with one part, later parts weighing more, averaged over the models
    /// (0–1, before the list's weight).
    #[serde(default)]
    pub segment: Option<f32>,
    /// Fused score before expansion and boosts (0–1).
    pub fused: f32,
    /// Graph expansion: contributing seed, link and amount.
    pub graph: Vec<(String, String, f32)>,
    /// Product of the boosts applied.
    pub boost: f32,
}

/// One recalled memory (the seeds' fields first).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct RecalledAtom {
    /// Atom id.
    pub atom_id: String,
    /// Content.
    pub content: String,
    /// Relevance, 0–1.
    pub score: f32,
    /// RFC 3339.
    pub created_at: String,
    /// Attribution.
    pub source: String,
    /// Kind.
    pub kind: String,
    /// actual / necessary / possible.
    pub epistemic: String,
    /// Status (active unless include_negated).
    pub status: String,
    /// Stage contributions (only with explain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
}

/// Output of `memory_recall`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct RecallOutcome {
    /// Best first.
    pub atoms: Vec<RecalledAtom>,
    /// Set when semantic search is off, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct Candidate {
    explain: Explain,
    score: f32,
}

impl Memory {
    /// `memory_recall`.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, max_results = request.max_results))]
    pub fn recall(&self, caller: &Caller, request: RecallRequest) -> Result<RecallOutcome> {
        let scope = caller.scope.clone().normalized()?;
        let query = request.query.trim();
        if query.is_empty() {
            return Err(MemoryError::invalid("query", "the query is empty; pass a noun phrase naming what to find"));
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(MemoryError::invalid("query", format!("longer than {MAX_QUERY_CHARS} characters")));
        }
        if request.max_results == 0 || request.max_results > MAX_RESULTS {
            return Err(MemoryError::invalid("max_results", format!("must be between 1 and {MAX_RESULTS}")));
        }
        let config = &self.recall_config;
        let tenant = scope.tenant_id.as_str();
        let mut repo_keys = Vec::with_capacity(2);
        if !request.strict_scope || scope.is_tenant_wide() {
            repo_keys.push(String::new());
        }
        if !scope.is_tenant_wide() {
            repo_keys.push(repo_key(&scope));
        }
        let statuses: &[&str] = if request.include_negated { &["active", "negated"] } else { &["active"] };
        let indexes = self.indexes();
        let started = Instant::now();

        let keyword = indexes.keyword().search(tenant, &repo_keys, statuses, query, config.candidates).map_err(crate::indexes::IndexError::from)?;
        tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, "keyword");
        let query_language = crate::text::detect_language(query);
        let query_terms = crate::text::analyze::terms(query, crate::text::analyze::Mode::Query);
        // One list per model that understands the query's language.
        let mut semantic_lists: Vec<(f32, Vec<(AtomId, f32)>)> = Vec::new();
        let mut query_vectors: Vec<(usize, Vec<f32>)> = Vec::new();
        for (model, s) in indexes.semantic().iter().enumerate() {
            if !s.embedder.languages().is_none_or(|languages| languages.iter().any(|l| l == query_language)) {
                continue;
            }
            match s.embed_query(query) {
                Ok(vector) => {
                    let hits = s.vectors.search(tenant, &repo_keys, statuses, &vector, config.candidates).map_err(crate::indexes::IndexError::from)?;
                    let weight = if s.embedder.languages().is_some() { config.specialist_weight.max(0.0) } else { 1.0 };
                    semantic_lists.push((weight, hits));
                    query_vectors.push((model, vector));
                }
                Err(error) => tracing::warn!(%error, model = s.embedder.id(), "query embedding failed; recalling without it"),
            }
        }
        // Long queries of several parts: each part embedded alone, a memory
        // scoring its best calibrated match with any part.
        let mut segment_list: Vec<(AtomId, f32)> = Vec::new();
        let parts = query_parts(query, query_terms.len(), config);
        if parts.len() >= 2 && config.segment_weight > 0.0 {
            let mut best: HashMap<AtomId, f32> = HashMap::new();
            let mut models = 0usize;
            for s in indexes.semantic() {
                if !s.embedder.languages().is_none_or(|languages| languages.iter().any(|l| l == query_language)) {
                    continue;
                }
                let mut per_model: HashMap<AtomId, f32> = HashMap::new();
                for (index, part) in parts.iter().enumerate() {
                    let weight = config.part_decay.clamp(0.0, 1.0).powi((parts.len() - 1 - index) as i32);
                    let vector = match s.embed_query(part) {
                        Ok(vector) => vector,
                        Err(error) => {
                            tracing::warn!(%error, model = s.embedder.id(), "query part embedding failed");
                            continue;
                        }
                    };
                    let hits = s.vectors.search(tenant, &repo_keys, statuses, &vector, config.candidates).map_err(crate::indexes::IndexError::from)?;
                    let (low, high) = hits.iter().fold((f32::MAX, f32::MIN), |(lo, hi), (_, c)| (lo.min(*c), hi.max(*c)));
                    let spread = (high - low).max(f32::EPSILON);
                    for (id, cosine) in hits {
                        let v = per_model.entry(id).or_default();
                        *v = v.max(weight * (cosine - low) / spread);
                    }
                }
                if !per_model.is_empty() {
                    models += 1;
                }
                for (id, v) in per_model {
                    *best.entry(id).or_default() += v;
                }
            }
            segment_list = best.into_iter().collect();
            // An average over the models that answered (a model for other
            // languages sits out and must not halve the list).
            let models = models.max(1) as f32;
            for (_, v) in &mut segment_list {
                *v /= models;
            }
        }
        let entity_list = self.entity_candidates(tenant, query, config);
        tracing::debug!(keyword = keyword.len(), semantic = semantic_lists.len(), entity = entity_list.len(), elapsed_us = started.elapsed().as_micros() as u64, "candidates");

        // Fusion.
        let keyword_weight = if parts.len() >= 2 { config.keyword_weight * config.part_keyword_factor.max(0.0) } else { config.keyword_weight };
        let mut candidates: HashMap<AtomId, Candidate> = HashMap::new();
        let max_keyword = keyword.first().map_or(1.0, |h| h.1.max(f32::EPSILON));
        for (rank, (id, score)) in keyword.iter().enumerate() {
            let c = candidates.entry(*id).or_default();
            c.explain.keyword = Some((rank + 1, *score));
            c.score += match config.fusion {
                Fusion::Rrf => keyword_weight / (config.rrf_k + rank as f32 + 1.0),
                Fusion::Mix => keyword_weight * score / max_keyword,
            };
        }
        // Cosine ranges differ between models (e5 crowds them near 0.8), so
        // mixing calibrates each list per query: min–max over its candidates.
        // The semantic weight is shared between the models that answered.
        let term_count = query_terms.len().max(1) as f32;
        let length_factor = 1.0 + ((term_count / config.long_query_terms.max(1) as f32).log2() / 2.0).clamp(0.0, 1.0);
        let semantic_weight = config.semantic_weight * length_factor;
        let total_share = semantic_lists.iter().map(|(w, _)| w).sum::<f32>().max(f32::EPSILON);
        for (model_weight, semantic) in &semantic_lists {
            let share = semantic_weight * model_weight / total_share;
            let (low, high) = semantic.iter().fold((f32::MAX, f32::MIN), |(lo, hi), (_, s)| (lo.min(*s), hi.max(*s)));
            let spread = (high - low).max(f32::EPSILON);
            for (rank, (id, cosine)) in semantic.iter().enumerate() {
                let c = candidates.entry(*id).or_default();
                if c.explain.semantic.is_none_or(|(_, best)| *cosine > best) {
                    c.explain.semantic = Some((rank + 1, *cosine));
                }
                c.score += match config.fusion {
                    Fusion::Rrf => share / (config.rrf_k + rank as f32 + 1.0),
                    Fusion::Mix => share * (cosine - low) / spread,
                };
            }
        }
        for (rank, id) in entity_list.iter().enumerate() {
            let c = candidates.entry(*id).or_default();
            c.explain.entity = Some(rank + 1);
            c.score += match config.fusion {
                Fusion::Rrf => config.entity_weight / (config.rrf_k + rank as f32 + 1.0),
                Fusion::Mix => config.entity_weight / (1.0 + rank as f32).sqrt(),
            };
        }
        for (id, value) in &segment_list {
            let c = candidates.entry(*id).or_default();
            c.explain.segment = Some(*value);
            c.score += config.segment_weight * value;
        }
        let active_weights = keyword_weight
            + if semantic_lists.is_empty() { 0.0 } else { semantic_weight }
            + if segment_list.is_empty() { 0.0 } else { config.segment_weight }
            + if entity_list.is_empty() { 0.0 } else { config.entity_weight };
        let max_possible = match config.fusion {
            Fusion::Rrf => active_weights / (config.rrf_k + 1.0),
            Fusion::Mix => active_weights,
        }
        .max(f32::EPSILON);
        for c in candidates.values_mut() {
            c.score = (c.score / max_possible).min(1.0);
            c.explain.fused = c.score;
        }

        // Graph expansion from the strongest candidates, one hop.
        let mut seeds: Vec<(AtomId, f32)> = candidates.iter().map(|(id, c)| (*id, c.score)).collect();
        seeds.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        seeds.truncate(config.expansion_seeds);
        {
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

        // Pseudo-relevance feedback: the query moved towards the best
        // results so far finds memories like them (another part of a
        // multi-part answer) that the query alone ranks low.
        if config.feedback_weight > 0.0 && !query_vectors.is_empty() {
            let mut best: Vec<(AtomId, f32)> = candidates.iter().map(|(id, c)| (*id, c.score)).collect();
            best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            best.truncate(config.feedback_docs.max(1));
            let share = semantic_weight * config.feedback_weight / query_vectors.len() as f32 / max_possible;
            for (model, query_vector) in &query_vectors {
                let Some(s) = indexes.semantic().get(*model) else { continue };
                let mut moved = query_vector.clone();
                let mut used = 0;
                for (id, _) in &best {
                    if let Some(v) = s.vectors.vector_of(*id, tenant) {
                        for (m, x) in moved.iter_mut().zip(&v) {
                            *m += x / best.len() as f32;
                        }
                        used += 1;
                    }
                }
                if used == 0 {
                    continue;
                }
                crate::embed::normalize(&mut moved);
                let hits = s.vectors.search(tenant, &repo_keys, statuses, &moved, config.candidates).map_err(crate::indexes::IndexError::from)?;
                let (low, high) = hits.iter().fold((f32::MAX, f32::MIN), |(lo, hi), (_, c)| (lo.min(*c), hi.max(*c)));
                let spread = (high - low).max(f32::EPSILON);
                for (id, cosine) in hits {
                    candidates.entry(id).or_default().score += share * (cosine - low) / spread;
                }
            }
        }

        tracing::debug!(candidates = candidates.len(), elapsed_us = started.elapsed().as_micros() as u64, "fused and expanded");
        // Hydrate, confine again (status and visibility), boost.
        let mut ranked: Vec<(AtomId, Candidate)> = candidates.into_iter().collect();
        ranked.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
        let now = chrono::Utc::now();
        let mut results: Vec<(crate::atom::Atom, Candidate)> = Vec::new();
        // Boosts are bounded, so once a candidate could not reach the current
        // k-th result even with the largest boost, none after it can.
        let query_emotion = if config.emotion_boost > 0.0 { crate::text::infer_emotion(query) } else { None };
        let max_boost = config.boost_necessary.max(1.0)
            * config.boost_user.max(1.0)
            * (1.0 + config.recency_bonus.max(0.0))
            * config.boost_named_source.max(1.0)
            * if query_emotion.is_some() { 1.0 + config.emotion_boost } else { 1.0 };
        let mut kth_best: Vec<f32> = Vec::with_capacity(request.max_results + 1);
        let mut scopes = HashMap::new();
        // A hard cap keeps hydration bounded when many scores are close; the
        // boosts' effect that far down the list is negligible.
        let hydrate_cap = (request.max_results * 3).max(30);
        let mut hydrated = 0;
        for (id, mut candidate) in ranked {
            if kth_best.len() >= request.max_results
                && (candidate.score * max_boost < kth_best[request.max_results - 1] || hydrated >= hydrate_cap)
            {
                break;
            }
            hydrated += 1;
            let Some(atom) = crate::memory::load_atom_cached(self.store(), tenant, id, false, &mut scopes)? else { continue };
            let allowed = atom.status == Status::Active || (request.include_negated && atom.status == Status::Negated);
            let visibility = scope.sees(&atom.scope);
            if !allowed || visibility == Visibility::Hidden || (request.strict_scope && !scope.holds_exactly(&atom.scope)) {
                continue;
            }
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
            if config.boost_named_source != 1.0 && names_source(&query_terms, &atom.source) {
                boost *= config.boost_named_source;
            }
            if let Some(emotion) = query_emotion
                && crate::text::infer_emotion(atom.visible_content()) == Some(emotion)
            {
                boost *= 1.0 + config.emotion_boost;
            }
            let age_days = (now - atom.created_at).num_seconds().max(0) as f32 / 86_400.0;
            boost *= 1.0 + config.recency_bonus * 0.5f32.powf(age_days / config.recency_half_life_days.max(0.01));
            candidate.explain.boost = boost;
            // Ranked on the boosted score; shown clamped to 0–1 (clamping
            // before sorting would tie every strong match at 1.0).
            candidate.score = (candidate.score * boost).max(0.0);
            let position = kth_best.partition_point(|s| *s >= candidate.score);
            kth_best.insert(position, candidate.score);
            kth_best.truncate(request.max_results);
            results.push((atom, candidate));
        }
        results.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.id.cmp(&b.0.id)));
        results.truncate(request.max_results);
        tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, "hydrated");
        if request.record && !results.is_empty() {
            let ids: Vec<AtomId> = results.iter().map(|(atom, _)| atom.id).collect();
            if let Err(error) = self.record_recalls(tenant, &ids) {
                // Usage stamps are bookkeeping: a failure must not fail the recall.
                tracing::warn!(%error, "could not record recall usage");
            }
        }
        let atoms = results
            .into_iter()
            .map(|(atom, candidate)| RecalledAtom {
                atom_id: atom.id.to_string(),
                content: atom.visible_content().to_owned(),
                score: candidate.score.min(1.0),
                created_at: atom.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                source: atom.source.clone(),
                kind: atom.kind.as_str().to_owned(),
                epistemic: atom.epistemic.as_str().to_owned(),
                status: atom.status.as_str().to_owned(),
                explain: request.explain.then_some(candidate.explain),
            })
            .collect();
        Ok(RecallOutcome { atoms, warning: indexes.semantic_note().map(str::to_owned) })
    }

    /// Atoms mentioning entities named in the query, most matches first.
    fn entity_candidates(&self, tenant: &str, query: &str, config: &RecallConfig) -> Vec<AtomId> {
        let graph = self.indexes().graph();
        let mut counts: HashMap<AtomId, usize> = HashMap::new();
        for entity in crate::text::extract_entities(query) {
            let iri = store::entity_iri(tenant, &entity.key).into_string();
            let atoms = graph.atoms_mentioning(tenant, &iri);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::analyze::{Mode, terms};

    fn query_terms(query: &str) -> Vec<String> {
        terms(query, Mode::Query)
    }

    #[test]
    fn a_source_is_named_when_every_term_of_it_is_in_the_query() {
        let q = query_terms("What did Caroline say about the adoption agency?");
        assert!(names_source(&q, "Caroline"));
        assert!(!names_source(&q, "Melanie"));
        assert!(!names_source(&query_terms("What did Mary say?"), "Mary Ann"), "every term of a two-word name");
        assert!(names_source(&query_terms("Mary Ann's plans"), "Mary Ann"));
        assert!(names_source(&query_terms("小林报名了什么课"), "小林"));
        assert!(names_source(&query_terms("田中さんの趣味は何ですか"), "田中"));
        for nobody in ["user", "agent", ""] {
            assert!(!names_source(&query_terms("what the user and the agent said"), nobody), "{nobody:?}");
        }
        assert!(!names_source(&query_terms(""), "Caroline"));
    }

    #[test]
    fn long_queries_split_into_their_latest_parts() {
        let config = RecallConfig::default();
        let count = |q: &str| terms(q, Mode::Query).len();
        assert!(query_parts("pottery class with Melanie", count("pottery class with Melanie"), &config).is_empty(), "a short query is one part");
        let dialogue = (1..=6)
            .map(|i| format!("Bart: \"turn number {i} talks about magic tricks, parties and performance outfits\""))
            .collect::<Vec<_>>()
            .join("\n");
        let parts = query_parts(&dialogue, count(&dialogue), &config);
        assert_eq!(parts.len(), config.max_segments);
        assert!(parts[0].contains("number 3") && parts[3].contains("number 6"), "{parts:?}");
    }
}
