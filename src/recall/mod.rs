//! memory_recall, the engine: scope confinement → candidate lists from the
//! keyword index, the vector indexes and the entities named in the query
//! ([`candidates`]) → calibrated score mixing ([`fuse`]) → one-hop graph
//! expansion from the strongest candidates with decay ([`expand`]) →
//! hydration from the store with boosts ([`hydrate`]) → scores in 0–1.
//! `explain` returns every stage's contribution for each result. The facade
//! ([`crate::Memory::recall`]) validates the caller and records usage.
//!
//! Boosts (multiplicative, defaults in [`RecallConfig::default`]): constraint
//! (`necessary`) over fact over guess (`possible`), user over agent source,
//! current branch over other branches, a speaker the query names, recency
//! (half-life in days).
//!
//! **Invariant:** every retriever is confined to the caller's tenant,
//! visible repositories and allowed statuses inside its own search; the
//! hydration step checks status and visibility again against the store.

mod candidates;
mod config;
mod expand;
mod fuse;
mod hydrate;

use std::time::Instant;

use serde::Serialize;

pub use config::RecallConfig;

use crate::atom::Atom;
use crate::index::{IndexError, Indexes};
use crate::scope::Scope;
use crate::store::{Store, StoreError};

/// Errors of the recall engine.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecallError {
    /// The request is malformed; the message names the field.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// Field name as on the wire.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Reading an atom failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
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
    pub kind: crate::atom::Kind,
    /// actual / necessary / possible.
    pub epistemic: crate::atom::Epistemic,
    /// Status (active unless include_negated).
    pub status: crate::atom::Status,
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
pub(crate) struct Candidate {
    explain: Explain,
    score: f32,
}

/// A validated query, confined: what every stage reads.
pub(crate) struct Query<'a> {
    text: &'a str,
    tenant: &'a str,
    /// Repository keys visible to the caller (`""`: tenant-wide atoms).
    repo_keys: Vec<String>,
    statuses: &'static [&'static str],
    language: &'static str,
    terms: Vec<String>,
}

fn invalid(field: &'static str, message: impl Into<String>) -> RecallError {
    RecallError::Invalid { field, message: message.into() }
}

/// `request`'s query for a caller in `scope`, validated and confined.
fn query<'a>(request: &'a RecallRequest, scope: &'a Scope) -> Result<Query<'a>, RecallError> {
    let text = request.query.trim();
    if text.is_empty() {
        return Err(invalid("query", "the query is empty; pass a noun phrase naming what to find"));
    }
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(invalid("query", format!("longer than {MAX_QUERY_CHARS} characters")));
    }
    if request.max_results == 0 || request.max_results > MAX_RESULTS {
        return Err(invalid("max_results", format!("must be between 1 and {MAX_RESULTS}")));
    }
    Ok(Query {
        text,
        tenant: scope.tenant_id.as_str(),
        repo_keys: crate::index::repo_keys(scope, request.strict_scope),
        statuses: if request.include_negated { &["active", "negated"] } else { &["active"] },
        language: crate::text::detect_language(text),
        terms: crate::text::analyze::terms(text, crate::text::analyze::Mode::Query),
    })
}

/// Ranks the atoms that answer `request` for a caller in `scope` (already
/// normalized): the best `max_results`, best first.
pub(crate) fn rank(
    store: &Store,
    indexes: &Indexes,
    config: &RecallConfig,
    scope: &Scope,
    request: &RecallRequest,
) -> Result<Vec<(Atom, Candidate)>, RecallError> {
    let query = query(request, scope)?;
    let started = Instant::now();
    // While the slowest model still embeds the query, the atoms the lists
    // so far rank highest are read on the idle core.
    let at = hydrate::Recall { store, indexes, config, scope, request, query: &query };
    let mut already_read = std::collections::HashMap::new();
    // One span per stage (with HMG_LOG_SPANS each logs its time as it
    // closes): the candidate lists, query embedding included; fusion and
    // expansion; hydration.
    let stage = tracing::debug_span!("candidates").entered();
    let lists = candidates::gather(indexes, config, &query, &mut |so_far, done| {
        let mut guess = fuse::fuse(so_far, config, query.terms.len());
        expand::expand(&mut guess, indexes, config);
        already_read = hydrate::read_ahead(guess, &at, done);
    })?;
    drop(stage);
    tracing::debug!(
        keyword = lists.keyword.len(),
        semantic = lists.semantic.len(),
        entity = lists.entity.len(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "candidates"
    );
    let stage = tracing::debug_span!("fuse").entered();
    let mut candidates = fuse::fuse(&lists, config, query.terms.len());
    expand::expand(&mut candidates, indexes, config);
    drop(stage);
    tracing::debug!(candidates = candidates.len(), elapsed_us = started.elapsed().as_micros() as u64, "fused and expanded");
    let results = tracing::debug_span!("hydrate").in_scope(|| hydrate::hydrate(candidates, already_read, &at))?;
    tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, "hydrated");
    Ok(results)
}

/// The answer for ranked results (`explain`: with each stage's contribution).
pub(crate) fn outcome(ranked: Vec<(Atom, Candidate)>, explain: bool, warning: Option<String>) -> RecallOutcome {
    let atoms = ranked
        .into_iter()
        .map(|(atom, candidate)| RecalledAtom {
            atom_id: atom.id.to_string(),
            content: atom.visible_content().to_owned(),
            score: candidate.score.min(1.0),
            created_at: atom.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            source: atom.source.clone(),
            kind: atom.kind,
            epistemic: atom.epistemic,
            status: atom.status,
            explain: explain.then_some(candidate.explain),
        })
        .collect();
    RecallOutcome { atoms, warning }
}

#[cfg(test)]
mod tests {
    use super::candidates::query_parts;
    use super::hydrate::names_source;
    use super::*;
    use crate::text::analyze::{Mode, terms};

    fn query_terms(query: &str) -> Vec<String> {
        terms(query, Mode::Query)
    }

    #[test]
    fn a_dialogues_whole_and_parts_go_to_two_cores_per_model_crossed_over() {
        use super::candidates::placements;
        use crate::index::Placement::{Core, Every, Halves};
        // Two models on two cores: each core has one half of each model.
        assert_eq!(placements(2, true, 2), vec![Halves { whole: 0, parts: 1 }, Halves { whole: 1, parts: 0 }]);
        // A lone model (a Chinese dialogue): one batch on every core.
        assert_eq!(placements(1, true, 2), vec![Every]);
        // Cores enough for every half: each its own.
        assert_eq!(placements(2, true, 4), vec![Halves { whole: 0, parts: 1 }, Halves { whole: 2, parts: 3 }]);
        // One core: no halves to put side by side.
        assert_eq!(placements(2, true, 1), vec![Core(0), Core(1)]);
        assert_eq!(placements(1, true, 1), vec![Every]);
        // A short query: one batch per model.
        assert_eq!(placements(2, false, 2), vec![Core(0), Core(1)]);
        assert_eq!(placements(1, false, 2), vec![Every]);
        assert!(placements(0, true, 2).is_empty());
    }

    #[test]
    fn a_dialogue_in_one_pass_per_model_keeps_the_slowest_models_pass_on_a_core_of_its_own() {
        use super::candidates::late_placements;
        use crate::index::Placement::{Core, Every, Halves};
        // Started fastest first: MiniLM's runs and e5's own parts share the
        // second core, e5's pass over the whole has the first.
        assert_eq!(late_placements(2, 2), vec![Core(1), Halves { whole: 0, parts: 1 }]);
        assert_eq!(late_placements(3, 2), vec![Core(1), Core(1), Halves { whole: 0, parts: 1 }]);
        assert_eq!(late_placements(2, 4), vec![Halves { whole: 0, parts: 1 }, Halves { whole: 2, parts: 3 }]);
        assert_eq!(late_placements(2, 1), vec![Core(0), Core(0)]);
        assert_eq!(late_placements(1, 2), vec![Every]);
        assert!(late_placements(0, 2).is_empty());
    }

    #[test]
    fn a_dialogues_pieces_are_its_lines_with_its_latest_parts_marked() {
        use super::candidates::query_pieces;
        let config = RecallConfig::default();
        let count = |q: &str| terms(q, Mode::Query).len();
        let dialogue = "Bart: hi!\n  Bart: I am doing a magic trick at the New Year party  \n\nAssistant: ok\nBart: 我每周日和Ana在河边跑五公里\nBart: what should I wear on the stage?\nAssistant: your favorite performance outfit\nBart: 週末は京都でお寺の写真を撮ります";
        let (pieces, pooled) = query_pieces(dialogue, count(dialogue), &config);
        assert_eq!(pieces.len(), 7, "every non-empty line, trimmed: {pieces:?}");
        assert_eq!(pieces[1], "Bart: I am doing a magic trick at the New Year party");
        assert_eq!(pooled, vec![false, false, false, true, true, true, true], "the latest four of three terms or more");
        assert_eq!(query_parts(dialogue, count(dialogue), &config), pieces[3..].to_vec());
        assert_eq!(query_pieces("thanks!", 1, &config), (Vec::new(), Vec::new()));
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

    /// Atoms read ahead (for the right guess, for another reader's guess,
    /// for a guess cut short) give exactly the answer of reading none
    /// ahead, in English, Chinese and Japanese, for readers on two
    /// branches, in another repository and tenant-wide.
    #[test]
    fn atoms_read_ahead_change_no_answer() {
        use std::collections::HashMap;

        use crate::{Caller, EmbedderChoice, MemorizeRequest, Memory, MemoryOptions};

        let dir = tempfile::tempdir().expect("temp dir");
        let memory = Memory::open_with(Some(dir.path()), MemoryOptions::default().with_embedder(EmbedderChoice::Disabled)).expect("opens");
        let in_repo = |repo: &str, branch: &str| Scope::tenant("alice").with_workspace("acme").with_repository(repo).with_branch(branch);
        let scopes: Vec<Scope> = [in_repo("api", "main"), in_repo("api", "dev"), in_repo("web", "main"), Scope::tenant("alice")]
            .into_iter()
            .map(|s| s.normalized().expect("scope"))
            .collect();
        for i in 0..36 {
            let content = match i % 3 {
                0 => format!("The release checklist needs a changelog entry ({i})"),
                1 => format!("release checklist 发布清单需要更新日志 ({i})"),
                _ => format!("release checklist リリース手順に変更履歴が要る ({i})"),
            };
            let request = MemorizeRequest::new(content).with_source(if i % 5 == 0 { "user" } else { "agent" });
            memory.memorize(&Caller::new(scopes[i % 4].clone(), "test"), request).expect("memorize");
        }
        memory
            .recall(&Caller::new(scopes[0].clone(), "test"), RecallRequest { record: false, ..RecallRequest::new("sync") })
            .expect("recall");
        let config = RecallConfig::default();
        let (store, indexes) = (memory.store(), memory.indexes());
        let candidates_for = |scope: &Scope, request: &RecallRequest| {
            let query = query(request, scope).expect("query");
            let lists = candidates::gather(indexes, &config, &query, &mut |_, _| panic!("no model embeds here")).expect("lists");
            let mut candidates = fuse::fuse(&lists, &config, query.terms.len());
            expand::expand(&mut candidates, indexes, &config);
            candidates
        };
        let answer = |ranked: Vec<(Atom, Candidate)>| ranked.into_iter().map(|(a, c)| (a.id, c.score)).collect::<Vec<_>>();
        for text in ["release checklist changelog", "发布清单", "リリース手順"] {
            for max_results in [3, 10] {
                let request = RecallRequest { max_results, record: false, ..RecallRequest::new(text) };
                for scope in &scopes {
                    let query = query(&request, scope).expect("query");
                    let at = hydrate::Recall { store, indexes, config: &config, scope, request: &request, query: &query };
                    let plain = answer(hydrate::hydrate(candidates_for(scope, &request), HashMap::new(), &at).expect("hydrate"));
                    assert!(!plain.is_empty(), "{text} for {scope:?}");
                    let guesses = [
                        (candidates_for(scope, &request), false),
                        (candidates_for(&scopes[2], &request), false),
                        (candidates_for(scope, &request), true),
                    ];
                    for (guess, cut_short) in guesses {
                        let most = if cut_short { 2 } else { (2 * max_results).min(guess.len()) };
                        let mut reads = 0;
                        let read = hydrate::read_ahead(guess, &at, &mut || {
                            reads += 1;
                            cut_short && reads > 2
                        });
                        assert_eq!(read.len(), most, "{text} for {scope:?}");
                        let ahead = answer(hydrate::hydrate(candidates_for(scope, &request), read, &at).expect("hydrate"));
                        assert_eq!(ahead, plain, "{text} for {scope:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn long_queries_split_into_their_latest_parts() {
        let config = RecallConfig::default();
        let count = |q: &str| terms(q, Mode::Query).len();
        assert!(
            query_parts("pottery class with Melanie", count("pottery class with Melanie"), &config).is_empty(),
            "a short query is one part"
        );
        let dialogue = (1..=6)
            .map(|i| format!("Bart: \"turn number {i} talks about magic tricks, parties and performance outfits\""))
            .collect::<Vec<_>>()
            .join("\n");
        let parts = query_parts(&dialogue, count(&dialogue), &config);
        assert_eq!(parts.len(), config.max_segments);
        assert!(parts[0].contains("number 3") && parts[3].contains("number 6"), "{parts:?}");
    }
}
