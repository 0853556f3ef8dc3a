//! The derived indexes together: keyword (Tantivy), semantic (embedder +
//! vectors), graph (petgraph). They follow the store.
//!
//! **Architecture invariants**
//! - Indexes catch up by themselves: each records the store snapshot version
//!   it reflects; at open everything newer is replayed from the change feed
//!   (audit entries carry the version of their write). A crash between a
//!   commit and an index update loses nothing.
//! - `rebuild` (`hmg reindex`) replays from version 0 and gives the same
//!   result as an index that was there all along.
//! - Tombstoned atoms are removed from every index.

pub(crate) mod card;
pub mod embed;
pub(crate) mod graph;
pub(crate) mod keyword;
pub(crate) mod vector;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use oxigraph::model::{Literal, Term};

use crate::atom::{Atom, AtomId};
use crate::index::embed::{EmbedError, Embedder};
use crate::index::graph::{AtomLinks, GraphIndex};
use crate::index::keyword::{KeywordDoc, KeywordError, KeywordIndex};
use crate::index::vector::{VectorError, VectorIndex, VectorUpsert};
use crate::recent::Recent;
use crate::store::{self, NamedQuery, Store, StoreError};

/// Errors of the index layer.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Keyword index.
    #[error(transparent)]
    Keyword(#[from] KeywordError),
    /// Vector index.
    #[error(transparent)]
    Vector(#[from] VectorError),
    /// Embedding.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// Store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An index file could not be written.
    #[error("index file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl crate::fault::Classified for IndexError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            IndexError::Store(error) => error.fault(),
            IndexError::Keyword(_) | IndexError::Vector(_) | IndexError::Embed(_) | IndexError::Io { .. } => crate::fault::Fault::Internal,
        }
    }
}

/// Fewer vector upserts than this in a write run on its thread, one model
/// after the other (a thread costs about as much as a few).
const BATCH_ON_THREADS: usize = 16;

/// Progress of a long index job: (stage, done, total).
pub(crate) type Progress<'a> = &'a mut dyn FnMut(&str, usize, usize);

/// `workspace/repository`, or empty for tenant-wide atoms.
pub(crate) fn repo_key(scope: &crate::scope::Scope) -> String {
    scope.repository_path().unwrap_or_default()
}

/// The [`repo_key`]s a search for a caller in `scope` may see: its
/// repository's, and the tenant-wide atoms unless `strict` (exactly the
/// caller's scope; a tenant-wide caller sees only tenant-wide atoms).
pub(crate) fn repo_keys(scope: &crate::scope::Scope, strict: bool) -> Vec<String> {
    let mut keys = Vec::with_capacity(2);
    if !strict || scope.is_tenant_wide() {
        keys.push(String::new());
    }
    if !scope.is_tenant_wide() {
        keys.push(repo_key(scope));
    }
    keys
}

/// The text an atom is embedded with: its attribution (a speaker, a custom
/// source) and its content.
pub(crate) fn attributed_text(atom: &Atom) -> Option<String> {
    Some(attributed(&atom.source, atom.content.as_deref()?))
}

/// [`attributed_text`] of an atom of `source` and `content`.
fn attributed(source: &str, content: &str) -> String {
    match source {
        "user" | "agent" | "" => content.to_owned(),
        source => format!("{source}: {content}"),
    }
}

/// A passage embedded before its atom is written
/// ([`Indexes::embed_ahead`]): the text and language the atom will have.
pub(crate) struct AheadPassage {
    text: String,
    language: &'static str,
}

impl AheadPassage {
    /// The passage of an atom to be of `source` (as stored) and `content`
    /// (as admitted: trimmed and redacted).
    pub(crate) fn new(source: &str, content: &str) -> AheadPassage {
        AheadPassage { text: attributed(source, content), language: crate::text::detect_language(content) }
    }
}

/// One model's passages started ahead of their atoms
/// ([`Indexes::embed_ahead`]), until a write claims them.
struct Ahead {
    texts: Vec<String>,
    pending: embed::Pending<Vec<f32>>,
}

/// Batches of passages each model keeps ahead, unclaimed; beyond them the
/// oldest is dropped (its texts were not written as started: a merge
/// decided otherwise, or the write failed).
pub(crate) const AHEAD_BATCHES: usize = 4;

/// The vectors a write takes from batches started ahead: the batches,
/// which atom (by its place in the write) has which text, and the model,
/// to embed them after all if their batch failed.
struct Claimed {
    aheads: Vec<Ahead>,
    slots: Vec<(usize, String)>,
    embedder: Arc<dyn Embedder>,
}

fn keyword_text(atom: &Atom) -> Option<String> {
    let mut text = attributed_text(atom)?;
    for entity in &atom.entities {
        text.push(' ');
        text.push_str(entity);
    }
    Some(text)
}

/// One embedding model and its vectors.
pub struct Semantic {
    /// The model.
    pub embedder: Arc<dyn Embedder>,
    /// Its vectors.
    pub vectors: VectorIndex,
    /// Recent query vectors: agents repeat queries, and embedding one costs
    /// far more than searching with it.
    query_cache: Mutex<Recent<Vec<f32>>>,
    /// What embedding a query has lately cost this model on its engine
    /// thread, in microseconds (a moving average; 0 before the first):
    /// recall searches with the model expected to answer first while the
    /// others still embed.
    query_micros: Arc<std::sync::atomic::AtomicU64>,
    /// What embedding passages has lately cost this model, in nanoseconds
    /// per byte of text (a moving average; 0 before the first): a shared
    /// batch ([`Indexes::embed_atoms`]) cuts each model's texts into
    /// pieces of about equal cost.
    passage_nanos_per_byte: Arc<std::sync::atomic::AtomicU64>,
    /// Recent vectors of compared texts ([`Semantic::comparable`]), apart
    /// from the queries': they come from other kernels.
    compare_cache: Mutex<Recent<Vec<f32>>>,
    /// Recent dialogue queries' vectors from one pass ([`Semantic::start_late`]),
    /// by the parts pooled and the whole text: a part's vector there saw
    /// the whole dialogue, so it is not the part's own query vector.
    late_cache: Mutex<Recent<Vec<Vec<f32>>>>,
    /// Texts [`Semantic::comparable`] found neither cached nor embedded
    /// ahead, and embedded when asked.
    asked_uncached: std::sync::atomic::AtomicU64,
    /// Passages started ahead of their atoms, oldest first
    /// ([`Indexes::embed_ahead`]; at most [`AHEAD_BATCHES`]).
    ahead: Mutex<std::collections::VecDeque<Ahead>>,
    /// How many atoms' vectors came from batches started ahead.
    claimed: std::sync::atomic::AtomicU64,
}

/// How many engine threads the models embed on (one per core; recall
/// places a query's runs over them).
pub(crate) fn engine_count() -> usize {
    embed::engine_count()
}

/// Where [`Semantic::start_queries`] embeds a model's query texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// One batch on the first engine thread, every core through OpenMP.
    Every,
    /// One batch on engine thread `n`, one core (models side by side).
    Core(usize),
    /// The first text (a dialogue query, whole) on engine thread `whole`
    /// and the rest (its parts) on engine thread `parts`, one core each.
    /// The whole and its parts are about the same tokens, so each half is
    /// about half the model's work: two models crossed over two cores
    /// (e5 whole + MiniLM parts on one, e5 parts + MiniLM whole on the
    /// other) keep both busy, where e5's whole batch on one core was about
    /// twice MiniLM's on the other. For [`Semantic::start_late`], the
    /// pass over the whole on `whole` and the parts embedded on their own
    /// on `parts`.
    Halves { whole: usize, parts: usize },
}

/// Query vectors on their way ([`Semantic::start_queries`]).
pub(crate) struct StartedQueries {
    /// One per query: from the cache, or `None` until the engine answers.
    vectors: Vec<Option<Vec<f32>>>,
    /// The queries the engine embeds, in order.
    missing: Vec<String>,
    pending: Option<embed::Pending<Vec<f32>>>,
    /// Set for [`Semantic::start_late`]: the late cache's key for the
    /// vectors pending.
    late_key: Option<String>,
}

impl StartedQueries {
    /// Whether the vectors are all there ([`Semantic::finish_queries`]
    /// would not wait).
    pub(crate) fn is_ready(&mut self) -> bool {
        self.pending.as_mut().is_none_or(embed::Pending::is_ready)
    }
}

/// Query vectors kept per model (4,096 of 384 dimensions are about
/// 6 MiB; the least recently used half goes when full: [`Recent`]), and
/// as many compared texts' vectors in their own cache. The merge's
/// compared memories were kept at 512 (cleared when full): the REST add of
/// 60 chats of 10 facts filled it, and the add after each clear embedded
/// the scope's memories again (max per add 188 / 210 → 114 / 133 ms,
/// alternated).
const QUERY_CACHE_ENTRIES: usize = 4096;

/// Dialogue queries kept in a model's late cache: a dialogue is asked again
/// mostly at once (a retry, another tool of the same turn), and an entry
/// holds a vector per part (about 8 KB with four parts at 384 dimensions).
const LATE_CACHE_ENTRIES: usize = 64;

/// The derived indexes.
pub struct Indexes {
    keyword: KeywordIndex,
    semantic: Vec<Semantic>,
    graph: RwLock<GraphIndex>,
    /// `<index>/graph.bin`, or none in RAM.
    graph_path: Option<PathBuf>,
    semantic_note: Option<String>,
}

impl std::fmt::Debug for Indexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let models: Vec<&str> = self.semantic.iter().map(|s| s.embedder.id()).collect();
        f.debug_struct("Indexes").field("models", &models).field("semantic_note", &self.semantic_note).finish()
    }
}

impl Semantic {
    /// One model and its vectors.
    fn new(embedder: Arc<dyn Embedder>, vectors: VectorIndex) -> Semantic {
        Semantic {
            embedder,
            vectors,
            query_cache: Mutex::new(Recent::new(QUERY_CACHE_ENTRIES)),
            query_micros: Arc::default(),
            passage_nanos_per_byte: Arc::default(),
            compare_cache: Mutex::new(Recent::new(QUERY_CACHE_ENTRIES)),
            late_cache: Mutex::new(Recent::new(LATE_CACHE_ENTRIES)),
            asked_uncached: std::sync::atomic::AtomicU64::new(0),
            ahead: Mutex::new(std::collections::VecDeque::new()),
            claimed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// What a query has lately cost this model to embed (microseconds; 0
    /// before its first).
    pub(crate) fn query_micros(&self) -> u64 {
        self.query_micros.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many texts [`Semantic::comparable`] has embedded when asked
    /// (neither cached nor embedded ahead).
    #[cfg(test)]
    pub(crate) fn asked_uncached(&self) -> u64 {
        self.asked_uncached.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This model's vector for a query, from the cache when it was seen lately.
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>, crate::index::embed::EmbedError> {
        if let Some(vector) = self.query_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(query) {
            return Ok(vector);
        }
        let embedder = Arc::clone(&self.embedder);
        let owned = query.to_owned();
        let vector = embed::on_engine_thread(move || embedder.embed_query(&owned))??;
        self.query_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(query.to_owned(), vector.clone());
        Ok(vector)
    }

    /// This model's vector of `text` for comparing it with other texts
    /// ([`Embedder::embed_comparable`]: the same whichever texts it was
    /// embedded with), from the cache when it was compared lately or
    /// embedded ahead ([`Indexes::embed_ahead`]).
    pub(crate) fn comparable(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        if let Some(vector) = self.compare_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(text) {
            return Ok(vector);
        }
        self.asked_uncached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let embedder = Arc::clone(&self.embedder);
        let owned = text.to_owned();
        let vector = embed::on_engine_thread(move || embedder.embed_comparable(&[&owned]).and_then(one_vector))??;
        self.compare_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(text.to_owned(), vector.clone());
        Ok(vector)
    }

    /// Puts this model's comparable vector ([`Semantic::comparable`]) of
    /// each of `texts` into the cache, as [`Indexes::embed_ahead`] does
    /// without passages (the tests' handle on it).
    #[cfg(test)]
    pub(crate) fn comparable_ahead(&self, texts: &[&str]) -> Result<(), EmbedError> {
        let missing = self.missing_comparable(texts);
        if missing.is_empty() {
            return Ok(());
        }
        let answers = self.start_mixed(missing.clone(), Vec::new()).wait()?;
        self.keep_comparable(missing, answers)
    }

    /// How many atoms' vectors came from batches started ahead, and how
    /// many batches wait to be claimed.
    #[cfg(test)]
    pub(crate) fn ahead_counts(&self) -> (u64, usize) {
        let waiting = self.ahead.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len();
        (self.claimed.load(std::sync::atomic::Ordering::Relaxed), waiting)
    }

    /// The texts of `texts` without a comparable vector in the cache, once each.
    fn missing_comparable(&self, texts: &[&str]) -> Vec<String> {
        let cache = self.compare_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut asked = std::collections::HashSet::new();
        texts.iter().filter(|t| !cache.contains(t) && asked.insert(**t)).map(|t| (*t).to_owned()).collect()
    }

    /// Keeps the comparable vectors of `texts` in the cache; the first
    /// failure is returned (the others are kept).
    fn keep_comparable(&self, texts: Vec<String>, answers: Vec<Result<Vec<f32>, EmbedError>>) -> Result<(), EmbedError> {
        let mut failed = None;
        let mut cache = self.compare_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (text, vector) in texts.into_iter().zip(answers) {
            match vector {
                Ok(vector) => cache.insert(text, vector),
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// This model's passages of `passages` (those in its languages), once each.
    fn ahead_texts(&self, passages: &[AheadPassage]) -> Vec<String> {
        let mut texts: Vec<String> = Vec::new();
        for passage in passages.iter().filter(|p| self.understands(p.language)) {
            if !texts.contains(&passage.text) {
                texts.push(passage.text.clone());
            }
        }
        texts
    }

    /// Keeps `texts` started ahead with their vectors on the way, for the
    /// write that makes them ([`Semantic::claim_ahead`]).
    fn keep_ahead(&self, texts: Vec<String>, pending: embed::Pending<Vec<f32>>) {
        let mut ahead = self.ahead.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if ahead.len() >= AHEAD_BATCHES {
            ahead.pop_front();
        }
        ahead.push_back(Ahead { texts, pending });
    }

    /// Starts `compared` (comparable vectors, [`Semantic::comparable`])
    /// and `passages` in one call per engine thread: the texts, compared
    /// first, cut into contiguous runs of about equal bytes, which the
    /// threads take as they come free ([`embed::start_shared`]), one core
    /// each. Each short compared text alone, dealt out to the threads, was
    /// 30% of a REST add's CPU (perf: 2.9 ms per text, the integer kernels'
    /// one-row tiles); a batch runs on the AMX tiles where the CPU has
    /// them, and gives every compared text the vector it gets alone. The
    /// answers, in the order compared then passages, one per text: a run
    /// the model refuses is embedded again text by text for its compared
    /// texts, so one refused text costs no other, and its passages fail
    /// (the write embeds them).
    fn start_mixed(&self, compared: Vec<String>, passages: Vec<String>) -> embed::Pending<Result<Vec<f32>, EmbedError>> {
        let split = compared.len();
        let all: Vec<String> = compared.into_iter().chain(passages).collect();
        let parts = embed::engine_count().min(all.len()).max(1);
        let mut at = 0;
        let tasks = embed::runs_of(all, parts)
            .into_iter()
            .map(|(_, run)| {
                let compared = split.saturating_sub(at).min(run.len());
                at += run.len();
                let embedder = Arc::clone(&self.embedder);
                let cost = run.iter().map(String::len).sum::<usize>() as u64;
                let task: embed::Task<Result<Vec<f32>, EmbedError>> = Box::new(move || {
                    let refs: Vec<&str> = run.iter().map(String::as_str).collect();
                    let (asked, written) = refs.split_at(compared);
                    Ok(match embedder.embed_comparable_and_passages(asked, written) {
                        Ok((c, p)) if c.len() == asked.len() && p.len() == written.len() => c.into_iter().chain(p).map(Ok).collect(),
                        _ => asked
                            .iter()
                            .map(|text| embedder.embed_comparable(&[text]).and_then(one_vector))
                            .chain(written.iter().map(|_| Err(EmbedError::Backend("a batch embedded ahead failed".into()))))
                            .collect(),
                    })
                });
                (cost, task)
            })
            .collect();
        embed::Pending::joined(embed::start_shared(tasks))
    }

    /// This model's vectors for several queries (a dialogue's parts): the
    /// ones seen lately from the cache, the others in one batch.
    pub fn embed_queries(&self, queries: &[&str]) -> Result<Vec<Vec<f32>>, crate::index::embed::EmbedError> {
        let started = self.start_queries(queries, Placement::Every)?;
        self.finish_queries(started)
    }

    /// Starts this model's vectors for `queries`: the ones seen lately come
    /// from the cache, the others go to the engine threads as `placement`
    /// says. Returns at once; [`Semantic::finish_queries`] waits.
    pub(crate) fn start_queries(&self, queries: &[&str], placement: Placement) -> Result<StartedQueries, crate::index::embed::EmbedError> {
        let vectors: Vec<Option<Vec<f32>>> = {
            let mut cache = self.query_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            queries.iter().map(|q| cache.get(q)).collect()
        };
        let missing: Vec<String> = queries.iter().zip(&vectors).filter(|(_, v)| v.is_none()).map(|(q, _)| (*q).to_owned()).collect();
        let pending = if missing.is_empty() {
            None
        } else {
            let embedder = Arc::clone(&self.embedder);
            let cost = Arc::clone(&self.query_micros);
            let work = move |refs: &[&str]| {
                let started = std::time::Instant::now();
                let vectors = embedder.embed_queries(refs);
                let micros = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u64;
                average_in(&cost, micros);
                tracing::trace!(model = embedder.id(), texts = refs.len(), micros, "query texts embedded");
                vectors
            };
            Some(match placement {
                Placement::Every => embed::start_batch(missing.clone(), work)?,
                Placement::Core(n) => embed::start_runs(vec![(n, missing.clone())], work)?,
                Placement::Halves { whole, parts } => {
                    // The whole is `missing[0]` only when it was not cached.
                    let split = usize::from(vectors.first().is_some_and(Option::is_none)).min(missing.len());
                    let (first, rest) = missing.split_at(split);
                    let runs =
                        [(whole, first.to_vec()), (parts, rest.to_vec())].into_iter().filter(|(_, texts)| !texts.is_empty()).collect();
                    embed::start_runs(runs, work)?
                }
            })
        };
        Ok(StartedQueries { vectors, missing, pending, late_key: None })
    }

    /// Starts this model's vectors for a dialogue query given as `pieces`
    /// (its lines, in order; together `whole`): the whole's, then one per
    /// piece `pooled` marks (its parts, in order). The latest `own` parts
    /// are embedded as texts of their own; the older ones are pooled from
    /// one forward pass over the whole where the model can
    /// ([`Embedder::embed_query_late`]: their own passes would cost their
    /// tokens again), else embedded with the whole as texts. `placement`:
    /// the whole's pass on `whole` and the own parts on `parts` for
    /// [`Placement::Halves`], else both there, one after the other. From
    /// the late cache when the same dialogue was recalled lately; an own
    /// part seen lately (the latest part of the turn before) from the
    /// query cache. Returns at once; [`Semantic::finish_queries`] waits.
    pub(crate) fn start_late(
        &self,
        whole: &str,
        pieces: &[&str],
        pooled: &[bool],
        own: usize,
        placement: Placement,
    ) -> Result<StartedQueries, crate::index::embed::EmbedError> {
        let parts: Vec<usize> = (0..pieces.len()).filter(|&i| pooled.get(i).copied().unwrap_or(false)).collect();
        let own = own.min(parts.len());
        let (late_parts, own_parts) = parts.split_at(parts.len() - own);
        let marks: Vec<bool> = (0..pieces.len()).map(|i| late_parts.contains(&i)).collect();
        // A part not pooled is one of the own parts.
        let mark_text: String = marks
            .iter()
            .enumerate()
            .map(|(i, late)| {
                if *late {
                    'l'
                } else if pooled.get(i).copied().unwrap_or(false) {
                    'o'
                } else {
                    '-'
                }
            })
            .collect();
        let key = format!("{mark_text}\n{whole}");
        if let Some(vectors) = self.late_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
            return Ok(StartedQueries {
                vectors: vectors.into_iter().map(Some).collect(),
                missing: Vec::new(),
                pending: None,
                late_key: None,
            });
        }
        let (whole_on, own_on) = match placement {
            Placement::Every => (None, None),
            Placement::Core(n) => (Some(n), Some(n)),
            Placement::Halves { whole, parts } => (Some(whole), Some(parts)),
        };
        let embedder = Arc::clone(&self.embedder);
        let cost = Arc::clone(&self.query_micros);
        // What the whole's pass gives as texts when the model cannot pool.
        let texts: Vec<String> = std::iter::once(whole).chain(late_parts.iter().map(|&i| pieces[i])).map(str::to_owned).collect();
        let owned: Vec<String> = pieces.iter().map(|p| (*p).to_owned()).collect();
        let late = move || {
            let started = std::time::Instant::now();
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            let vectors = match embedder.embed_query_late(&refs, &marks)? {
                Some(vectors) => vectors,
                None => embedder.embed_queries(&texts.iter().map(String::as_str).collect::<Vec<_>>())?,
            };
            let micros = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u64;
            average_in(&cost, micros);
            tracing::trace!(model = embedder.id(), pieces = refs.len(), micros, "dialogue query embedded in one pass");
            Ok(vectors)
        };
        let mut pending = vec![embed::start_on(whole_on, late)?];
        // The latest parts are their own query vectors: the ones seen
        // lately (the latest part of the turn before) from the query cache.
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; 1 + late_parts.len()];
        {
            let mut cache = self.query_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            vectors.extend(own_parts.iter().map(|&i| cache.get(pieces[i])));
        }
        let missing: Vec<String> = own_parts
            .iter()
            .zip(&vectors[1 + late_parts.len()..])
            .filter(|(_, v)| v.is_none())
            .map(|(&i, _)| pieces[i].to_owned())
            .collect();
        if !missing.is_empty() {
            let embedder = Arc::clone(&self.embedder);
            let texts = missing.clone();
            pending.push(embed::start_on(own_on, move || embedder.embed_queries(&texts.iter().map(String::as_str).collect::<Vec<_>>()))?);
        }
        Ok(StartedQueries { vectors, missing, pending: Some(embed::Pending::joined(pending)), late_key: Some(key) })
    }

    /// Waits for the vectors [`Semantic::start_queries`] or
    /// [`Semantic::start_late`] started (in the order of the queries) and
    /// keeps the new ones in the cache.
    pub(crate) fn finish_queries(&self, started: StartedQueries) -> Result<Vec<Vec<f32>>, crate::index::embed::EmbedError> {
        let StartedQueries { mut vectors, missing, pending, late_key } = started;
        let fresh = match pending {
            Some(pending) => pending.wait()?,
            None => Vec::new(),
        };
        let empty = vectors.iter().filter(|v| v.is_none()).count();
        if late_key.is_some() && fresh.len() != empty {
            return Err(EmbedError::Backend(format!("{} vectors for a dialogue query missing {empty}", fresh.len())));
        }
        // The empty slots take the fresh vectors in order. The last
        // `missing.len()` are the texts embedded as queries, cached as
        // such; before them, a late pass's (the whole, the pooled parts).
        let unnamed = empty.saturating_sub(missing.len());
        if !fresh.is_empty() {
            let mut cache = self.query_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (n, (slot, vector)) in vectors.iter_mut().filter(|v| v.is_none()).zip(fresh).enumerate() {
                if let Some(text) = n.checked_sub(unnamed).and_then(|k| missing.get(k)) {
                    cache.insert(text.clone(), vector.clone());
                }
                *slot = Some(vector);
            }
        }
        let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
        if let Some(key) = late_key {
            self.late_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, vectors.clone());
        }
        Ok(vectors)
    }

    /// This model's vector for one atom (`None` without content, or when the
    /// model fails: the atom is then indexed without it, and the failure logged).
    fn embed(&self, atom: &Atom) -> Option<Vec<f32>> {
        match self.start_atoms(&[atom]).and_then(Started::finish) {
            Ok(mut vectors) => vectors.pop().flatten(),
            Err(error) => {
                tracing::warn!(%error, atom = %atom.id, model = self.embedder.id(), "embedding failed; the atom is indexed without this vector");
                None
            }
        }
    }

    /// Whether this model understands `language` (a code of
    /// [`crate::text::detect_language`]): recall asks it only about
    /// queries in its languages, and it embeds only atoms in them.
    pub(crate) fn understands(&self, language: &str) -> bool {
        self.embedder.languages().is_none_or(|languages| languages.iter().any(|l| l == language))
    }

    /// Starts this model's vectors for several atoms (the engines batch,
    /// and split the batch across cores); [`Started::finish`] waits for them.
    /// An atom in a language the model does not understand gets none: an
    /// English-only model's vector of a Chinese memory is noise no query
    /// of its languages should meet, and it was a third of an import's
    /// model time on the cold bench's three-language set.
    fn start_atoms(&self, atoms: &[&Atom]) -> Result<Started, crate::index::embed::EmbedError> {
        let (slots, owned) = self.atom_texts(atoms);
        let (slots, owned, claimed) = self.claim_ahead(slots, owned);
        let pending = if owned.is_empty() {
            None
        } else {
            let embedder = Arc::clone(&self.embedder);
            Some(embed::start_on_engine_threads(owned, move |refs| embedder.embed_passages(refs))?)
        };
        Ok(Started { atoms: atoms.len(), slots, pending, claimed })
    }

    /// Takes the batches started ahead that hold any of `texts` (of the
    /// atoms `slots`): the texts they hold leave the lists, to come from
    /// them ([`Started::finish`]), and the rest stay to be embedded.
    fn claim_ahead(&self, slots: Vec<usize>, texts: Vec<String>) -> (Vec<usize>, Vec<String>, Claimed) {
        let mut claimed = Claimed { aheads: Vec::new(), slots: Vec::new(), embedder: Arc::clone(&self.embedder) };
        {
            let mut ahead = self.ahead.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if ahead.is_empty() {
                return (slots, texts, claimed);
            }
            let mut kept = std::collections::VecDeque::with_capacity(ahead.len());
            for batch in ahead.drain(..) {
                if batch.texts.iter().any(|t| texts.contains(t)) {
                    claimed.aheads.push(batch);
                } else {
                    kept.push_back(batch);
                }
            }
            *ahead = kept;
        }
        let (mut rest_slots, mut rest) = (Vec::with_capacity(slots.len()), Vec::with_capacity(texts.len()));
        for (slot, text) in slots.into_iter().zip(texts) {
            if claimed.aheads.iter().any(|batch| batch.texts.contains(&text)) {
                claimed.slots.push((slot, text));
            } else {
                rest_slots.push(slot);
                rest.push(text);
            }
        }
        if !claimed.slots.is_empty() {
            self.claimed.fetch_add(claimed.slots.len() as u64, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(model = self.embedder.id(), ahead = claimed.slots.len(), now = rest.len(), "passages embedded ahead");
        }
        (rest_slots, rest, claimed)
    }

    /// The texts this model embeds of `atoms` (those in its languages,
    /// with content), and which atom each is.
    fn atom_texts(&self, atoms: &[&Atom]) -> (Vec<usize>, Vec<String>) {
        atoms
            .iter()
            .enumerate()
            .filter(|(_, atom)| self.understands(&atom.language))
            .filter_map(|(i, atom)| attributed_text(atom).map(|t| (i, t)))
            .unzip()
    }

    /// A piece of a shared batch: this model's passages of `texts`, timed
    /// into [`Semantic::passage_nanos_per_byte`].
    fn passage_task(&self, texts: Vec<String>) -> embed::Task<Vec<f32>> {
        let embedder = Arc::clone(&self.embedder);
        let rate = Arc::clone(&self.passage_nanos_per_byte);
        Box::new(move || {
            let started = std::time::Instant::now();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embedder.embed_passages(&refs);
            let bytes = texts.iter().map(String::len).sum::<usize>().max(1) as u128;
            average_in(&rate, (started.elapsed().as_nanos() / bytes).clamp(1, u128::from(u32::MAX)) as u64);
            tracing::debug!(texts = texts.len(), bytes = bytes as u64, micros = started.elapsed().as_micros() as u64, "passages embedded");
            vectors
        })
    }
}

/// Takes `figure` into the moving average kept in `average` (0: none
/// yet): an eighth of each new figure, the first taken whole; never 0 once
/// taken.
fn average_in(average: &std::sync::atomic::AtomicU64, figure: u64) {
    let old = average.load(std::sync::atomic::Ordering::Relaxed);
    let new = if old == 0 { figure } else { (old * 7 + figure) / 8 };
    average.store(new.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// The one vector of a one-text call.
fn one_vector(mut vectors: Vec<Vec<f32>>) -> Result<Vec<f32>, EmbedError> {
    match (vectors.pop(), vectors.is_empty()) {
        (Some(vector), true) => Ok(vector),
        _ => Err(EmbedError::Backend("not one vector for one text".into())),
    }
}

/// One model's vectors for a batch of atoms, on their way.
/// New atoms' vectors on their way: [`Indexes::start_embedding`].
pub(crate) struct Embedding {
    atoms: usize,
    /// Per model, in `semantic()` order.
    started: Vec<Result<Started, crate::index::embed::EmbedError>>,
}

struct Started {
    atoms: usize,
    /// The atoms whose texts were sent now, in the order sent.
    slots: Vec<usize>,
    pending: Option<embed::Pending<Vec<f32>>>,
    /// The atoms whose texts come from batches started ahead.
    claimed: Claimed,
}

impl Started {
    /// The vectors, one per atom (`None` for an atom without content). A
    /// batch started ahead that failed (it may hold a text the model
    /// refuses that this write does not make) leaves its texts to be
    /// embedded now, each alone.
    fn finish(self) -> Result<Vec<Option<Vec<f32>>>, crate::index::embed::EmbedError> {
        let mut vectors = vec![None; self.atoms];
        let mut ahead: HashMap<String, Vec<f32>> = HashMap::new();
        for batch in self.claimed.aheads {
            let count = batch.texts.len();
            match batch.pending.wait() {
                Ok(embedded) if embedded.len() == count => ahead.extend(batch.texts.into_iter().zip(embedded)),
                Ok(embedded) => tracing::warn!(vectors = embedded.len(), texts = count, "a batch embedded ahead came back short"),
                Err(error) => tracing::warn!(%error, texts = count, "a batch embedded ahead failed; its texts are embedded now"),
            }
        }
        for (i, text) in self.claimed.slots {
            vectors[i] = match ahead.get(&text) {
                Some(vector) => Some(vector.clone()),
                None => {
                    let embedder = Arc::clone(&self.claimed.embedder);
                    match embed::on_engine_thread(move || embedder.embed_passages(&[&text]).and_then(one_vector)) {
                        Ok(Ok(vector)) => Some(vector),
                        Ok(Err(error)) | Err(error) => {
                            tracing::warn!(%error, "embedding failed; the atom is indexed without this vector");
                            None
                        }
                    }
                }
            };
        }
        let Some(pending) = self.pending else { return Ok(vectors) };
        let embedded = pending.wait()?;
        if embedded.len() != self.slots.len() {
            return Err(crate::index::embed::EmbedError::Backend(format!("{} vectors for {} texts", embedded.len(), self.slots.len())));
        }
        for (i, vector) in self.slots.into_iter().zip(embedded) {
            vectors[i] = Some(vector);
        }
        Ok(vectors)
    }
}

/// Loads an atom for indexing.
fn load(store: &Store, tenant: &str, id: AtomId) -> Result<Option<Atom>, IndexError> {
    Ok(crate::store::codec::load_atom(store, tenant, id)?)
}

/// A directory name for a model id.
fn model_dir_name(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

impl Indexes {
    /// Opens the indexes under `dir` (or in RAM) with one semantic index per
    /// embedder, and catches up with `store`.
    pub fn open(dir: Option<&Path>, store: &Store, embedders: Result<Vec<Arc<dyn Embedder>>, EmbedError>) -> Result<Indexes, IndexError> {
        let (embedders, semantic_note) = match embedders {
            Ok(embedders) if embedders.is_empty() => (Vec::new(), Some("semantic search is disabled (HMG_EMBEDDER=none)".to_owned())),
            Ok(embedders) => (embedders, None),
            Err(error) => {
                let note = format!("semantic search is off: {error}; recall uses keyword and graph only");
                tracing::warn!("{note}");
                (Vec::new(), Some(note))
            }
        };
        let mut semantic = Vec::with_capacity(embedders.len());
        let graph_path = dir.map(|d| d.join("graph.bin"));
        // One thread per model: reading a vector file and its graph took
        // 80 ms at 10k vectors, and a cold `hmg recall` waits for them;
        // meanwhile this thread opens the keyword index and reads the
        // graph (12 ms at 10k atoms, once after the vectors).
        let (opened, keyword, graph) = std::thread::scope(|scope| {
            let opening: Vec<_> = embedders
                .iter()
                .map(|embedder| {
                    let vector_dir = dir.map(|d| d.join("vectors").join(model_dir_name(embedder.id())));
                    let (id, dims) = (embedder.id(), embedder.dims());
                    scope.spawn(move || VectorIndex::open(vector_dir.as_deref(), id, dims))
                })
                .collect();
            let keyword = KeywordIndex::open(dir.map(|d| d.join("keyword")).as_deref());
            let graph = match graph_path.as_deref().map(GraphIndex::load).transpose() {
                Ok(graph) => graph.flatten().unwrap_or_default(),
                Err(error) => {
                    tracing::warn!(%error, "graph index file unreadable; rebuilding it from the store");
                    GraphIndex::new()
                }
            };
            let opened: Vec<Result<VectorIndex, VectorError>> = opening
                .into_iter()
                .map(|handle| handle.join().unwrap_or_else(|_| Err(VectorError::Usearch("opening the vector index panicked".into()))))
                .collect();
            (opened, keyword, graph)
        });
        let keyword = keyword?;
        for (embedder, vectors) in embedders.into_iter().zip(opened) {
            semantic.push(Semantic::new(embedder, vectors?));
        }
        let indexes = Indexes { keyword, semantic, graph: RwLock::new(graph), graph_path, semantic_note };
        indexes.catch_up(store, &mut |_, _, _| {})?;
        if indexes.keyword.purge_pending() {
            tracing::info!("finishing an index purge interrupted before the last shutdown");
            indexes.purge()?;
        }
        Ok(indexes)
    }

    /// Records, durably, that a write about to commit destroys content, so
    /// that [`Indexes::purge`] runs even if the process dies before it.
    pub fn mark_purge_pending(&self) -> Result<(), IndexError> {
        Ok(self.keyword.mark_purge_pending()?)
    }

    /// After content was destroyed: removes every trace of removed documents
    /// from the files of the indexes (vector and graph files rewritten,
    /// keyword segments merged).
    pub fn purge(&self) -> Result<(), IndexError> {
        self.persist()?;
        Ok(self.keyword.purge()?)
    }

    /// Why semantic search is off, if it is.
    pub fn semantic_note(&self) -> Option<&str> {
        self.semantic_note.as_deref()
    }

    /// The primary embedder, if any.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.semantic.first().map(|s| &s.embedder)
    }

    /// Every semantic index, primary first.
    pub fn semantic(&self) -> &[Semantic] {
        &self.semantic
    }

    pub(crate) fn keyword(&self) -> &KeywordIndex {
        &self.keyword
    }

    pub(crate) fn graph(&self) -> std::sync::RwLockReadGuard<'_, GraphIndex> {
        self.graph.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn graph_mut(&self) -> std::sync::RwLockWriteGuard<'_, GraphIndex> {
        self.graph.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether embedding `atoms` runs in per-core parts
    /// ([`embed::start_on_engine_threads`]), which leave no core waiting at
    /// a barrier for a thread the scheduler took away.
    pub(crate) fn embeds_in_parts(&self, atoms: &[&Atom]) -> bool {
        let bytes = atoms.iter().map(|a| a.content.as_ref().map_or(0, String::len)).sum();
        !self.semantic.is_empty() && embed::split_parts(atoms.len(), bytes) > 1
    }

    /// Every model's vectors for `atoms` as one shared batch
    /// ([`embed::start_shared`]): each model's texts cut into contiguous
    /// pieces of about equal bytes, as many as its share of the expected
    /// cost (bytes times its lately measured cost per byte) of
    /// [`embed::shared_pieces`] in all, so the threads take the pieces as
    /// they come free and finish about together.
    fn start_shared(&self, atoms: &[&Atom]) -> Vec<Started> {
        let mut slots = Vec::with_capacity(self.semantic.len());
        let mut texts = Vec::with_capacity(self.semantic.len());
        let mut claims = Vec::with_capacity(self.semantic.len());
        for s in &self.semantic {
            let (model_slots, model_texts) = s.atom_texts(atoms);
            let (model_slots, model_texts, claimed) = s.claim_ahead(model_slots, model_texts);
            slots.push(model_slots);
            texts.push(model_texts);
            claims.push(claimed);
        }
        slots
            .into_iter()
            .zip(claims)
            .zip(self.start_texts(texts))
            .map(|((slots, claimed), pending)| Started { atoms: atoms.len(), slots, pending, claimed })
            .collect()
    }

    /// Starts every model's passages of its `texts` (one list per model,
    /// in `semantic()` order) as one shared batch, as
    /// [`Indexes::start_shared`] describes; per model, the vectors on their
    /// way (none without texts).
    fn start_texts(&self, texts: Vec<Vec<String>>) -> Vec<Option<embed::Pending<Vec<f32>>>> {
        let bytes = |texts: &[String]| texts.iter().map(String::len).sum::<usize>() as u64;
        let rates: Vec<u64> = self.semantic.iter().map(|s| s.passage_nanos_per_byte.load(std::sync::atomic::Ordering::Relaxed)).collect();
        // Until every model has a figure, a byte costs each the same.
        let known = rates.iter().all(|r| *r > 0);
        let rates: Vec<u64> = rates.into_iter().map(|rate| if known { rate } else { 1 }).collect();
        let costs: Vec<u64> = texts.iter().zip(&rates).map(|(t, rate)| bytes(t) * rate).collect();
        let total = costs.iter().sum::<u64>().max(1);
        let wanted = embed::shared_pieces() as u64;
        let mut tasks = Vec::new();
        let mut pieces_of = Vec::with_capacity(texts.len());
        for (((s, owned), cost), rate) in self.semantic.iter().zip(texts).zip(costs).zip(rates) {
            let share = (wanted * cost).div_ceil(total).max(1) as usize;
            let parts = embed::pieces(owned.len(), bytes(&owned) as usize, share);
            let runs = if owned.is_empty() { Vec::new() } else { embed::runs_of(owned, parts) };
            pieces_of.push(runs.len());
            for (_, run) in runs {
                tasks.push((bytes(&run) * rate, s.passage_task(run)));
            }
        }
        let mut pending = embed::start_shared(tasks).into_iter();
        pieces_of.into_iter().map(|pieces| (pieces > 0).then(|| embed::Pending::joined(pending.by_ref().take(pieces).collect()))).collect()
    }

    /// Embeds ahead what a merge is about to compare and write: the first
    /// model's comparable vectors of `compared` (into its cache, as
    /// [`Semantic::comparable`]; waited for, the decisions need them)
    /// and every model's passages of `passages`, the memories the facts
    /// would be written as (kept for the write that makes them,
    /// [`Semantic::claim_ahead`]). The first model runs both kinds in one
    /// call per engine thread ([`Embedder::embed_comparable_and_passages`]):
    /// a short batch's forward pass streams all of e5's weights once, and
    /// two calls per thread streamed them twice. The other models'
    /// passages queue behind and embed while the request's thread decides.
    /// Texts a write does not make (a fact decided NONE) are embedded for
    /// nothing. Returns the first failure to embed a compared text (each
    /// is then embedded when compared).
    pub(crate) fn embed_ahead(&self, compared: &[&str], passages: &[AheadPassage]) -> Result<(), EmbedError> {
        let Some(first) = self.semantic.first() else { return Ok(()) };
        let missing = first.missing_comparable(compared);
        let first_passages = if missing.is_empty() { Vec::new() } else { first.ahead_texts(passages) };
        tracing::debug!(compared = compared.len(), missing = missing.len(), passages = passages.len(), "embedding ahead");
        let mixed = (!missing.is_empty()).then(|| first.start_mixed(missing.clone(), first_passages.clone()));
        // Every model's passages not in the mixed calls, queued behind them.
        let rest: Vec<Vec<String>> = self
            .semantic
            .iter()
            .enumerate()
            .map(|(n, s)| if n == 0 && mixed.is_some() { Vec::new() } else { s.ahead_texts(passages) })
            .collect();
        let started = self.start_texts(rest.clone());
        for ((s, texts), pending) in self.semantic.iter().zip(rest).zip(started) {
            if let Some(pending) = pending {
                s.keep_ahead(texts, pending);
            }
        }
        let Some(mixed) = mixed else { return Ok(()) };
        let answers = mixed.wait()?;
        let (compared_answers, passage_answers) = {
            let mut answers = answers;
            let passage_answers = answers.split_off(missing.len().min(answers.len()));
            (answers, passage_answers)
        };
        let (texts, vectors): (Vec<String>, Vec<Vec<f32>>) =
            first_passages.into_iter().zip(passage_answers).filter_map(|(text, vector)| vector.ok().map(|v| (text, v))).unzip();
        if !texts.is_empty() {
            first.keep_ahead(texts, embed::Pending::ready(vectors));
        }
        first.keep_comparable(missing, compared_answers)
    }

    /// Embeds several atoms with every model, one call per model (the
    /// engines batch); per atom, the vectors in `semantic()` order.
    #[tracing::instrument(skip_all, fields(atoms = atoms.len()))]
    pub(crate) fn embed_atoms(&self, atoms: &[&Atom]) -> Vec<Vec<Option<Vec<f32>>>> {
        self.finish_embedding(self.start_embedding(atoms))
    }

    /// Starts [`Self::embed_atoms`]: every model's runs are queued before
    /// any is waited for, so the engine threads go from one model's run to
    /// the next without idling. A batch embedded in per-core parts
    /// ([`Self::embeds_in_parts`]) returns at once, and queues behind the
    /// runs already on the engine threads.
    pub(crate) fn start_embedding(&self, atoms: &[&Atom]) -> Embedding {
        let started = if self.embeds_in_parts(atoms) {
            self.start_shared(atoms).into_iter().map(Ok).collect()
        } else {
            self.semantic.iter().map(|s| s.start_atoms(atoms)).collect()
        };
        Embedding { atoms: atoms.len(), started }
    }

    /// Waits for the vectors [`Self::start_embedding`] started.
    pub(crate) fn finish_embedding(&self, embedding: Embedding) -> Vec<Vec<Option<Vec<f32>>>> {
        let Embedding { atoms, started } = embedding;
        let mut vectors: Vec<Vec<Option<Vec<f32>>>> = vec![vec![None; self.semantic.len()]; atoms];
        for (model, (s, started)) in self.semantic.iter().zip(started).enumerate() {
            match started.and_then(Started::finish) {
                Ok(embedded) => {
                    for (slot, vector) in vectors.iter_mut().zip(embedded) {
                        slot[model] = vector;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, atoms, model = s.embedder.id(), "embedding failed; these atoms are indexed without this vector");
                }
            }
        }
        vectors
    }

    /// Coverage counts for `tenant`: (keyword, semantic — atoms with a
    /// vector from every model that reads all languages).
    pub fn counts(&self, tenant: &str) -> Result<(u64, u64), IndexError> {
        // Semantic: the atoms with a vector from every model that reads
        // all languages; a model of some languages (MiniLM: English)
        // leaves the others without its vector by design. With only such
        // models, the most any of them covers.
        let every: Vec<u64> = self.semantic.iter().filter(|s| s.embedder.languages().is_none()).map(|s| s.vectors.count(tenant)).collect();
        let semantic = match every.iter().min() {
            Some(least) => *least,
            None => self.semantic.iter().map(|s| s.vectors.count(tenant)).max().unwrap_or(0),
        };
        Ok((self.keyword.count(tenant)?, semantic))
    }

    /// Updates every index for atoms touched by the write that committed as
    /// `version`. `vectors` are precomputed embeddings for some of them.
    #[tracing::instrument(skip_all, fields(atoms = atoms.len(), version = version))]
    pub(crate) fn on_change(
        &self,
        store: &Store,
        tenant: &str,
        atoms: &[AtomId],
        version: u64,
        vectors: Vec<(AtomId, Vec<Option<Vec<f32>>>)>,
    ) -> Result<(), IndexError> {
        let mut vectors = vectors;
        let mut upserts = self.no_upserts();
        for id in atoms {
            let atom = load(store, tenant, *id)?;
            let precomputed = match vectors.iter().position(|(vid, _)| vid == id) {
                Some(at) => vectors.swap_remove(at).1,
                None => Vec::new(),
            };
            match atom {
                Some(atom) => self.index_atom(&atom, version, precomputed, &mut upserts)?,
                None => self.forget(*id, version),
            }
        }
        self.upsert_vectors(upserts)
    }

    /// An empty list of vector upserts per model, for [`Self::index_atom`].
    fn no_upserts(&self) -> Vec<Vec<VectorUpsert>> {
        vec![Vec::new(); self.semantic.len()]
    }

    /// Applies the vector upserts [`Self::index_atom`] gathered, a batch
    /// per model under one lock. A bulk write's batches run side by side,
    /// a model per thread: past 4,096 vectors each is a graph insertion
    /// per vector (~0.3 ms), and one model after the other left a core
    /// idle (an import of 10k spent 4.7 s of 38.5 in index updates). Each
    /// graph still takes its insertions one at a time (see `vector.rs`).
    fn upsert_vectors(&self, upserts: Vec<Vec<VectorUpsert>>) -> Result<(), IndexError> {
        let busy = upserts.iter().filter(|u| !u.is_empty()).count();
        let total: usize = upserts.iter().map(Vec::len).sum();
        if busy < 2 || total < BATCH_ON_THREADS {
            for (s, upserts) in self.semantic.iter().zip(upserts) {
                s.vectors.upsert_many(upserts)?;
            }
            return Ok(());
        }
        let span = tracing::Span::current();
        std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .semantic
                .iter()
                .zip(upserts)
                .map(|(s, upserts)| {
                    let span = span.clone();
                    scope.spawn(move || span.in_scope(|| s.vectors.upsert_many(upserts)))
                })
                .collect();
            for worker in workers {
                worker.join().unwrap_or_else(|_| Err(VectorError::Usearch("a model's vector update panicked".to_owned())))?;
            }
            Ok(())
        })
    }

    fn forget(&self, id: AtomId, version: u64) {
        self.keyword.remove(id, version);
        for s in &self.semantic {
            s.vectors.remove(id, version);
        }
        let mut graph = self.graph_mut();
        graph.remove(id);
        graph.mark(version);
    }

    /// Indexes one atom; `vectors[i]` is a precomputed vector for
    /// `semantic()[i]` (missing ones are computed or kept). Its new vectors
    /// join `upserts` (per model), which the caller applies with
    /// [`Self::upsert_vectors`] once its batch is done.
    fn index_atom(
        &self,
        atom: &Atom,
        version: u64,
        mut vectors: Vec<Option<Vec<f32>>>,
        upserts: &mut [Vec<VectorUpsert>],
    ) -> Result<(), IndexError> {
        let Some(text) = keyword_text(atom) else {
            // Tombstoned: content destroyed, so nothing of it may stay indexed.
            self.forget(atom.id, version);
            return Ok(());
        };
        let repo = repo_key(&atom.scope);
        self.keyword.upsert(
            &KeywordDoc {
                atom_id: atom.id,
                tenant: atom.scope.tenant_id.clone(),
                repo_key: repo.clone(),
                status: atom.status.as_str().to_owned(),
                text,
            },
            version,
        )?;
        vectors.resize(self.semantic.len(), None);
        for ((s, vector), upserts) in self.semantic.iter().zip(vectors).zip(upserts.iter_mut()) {
            let vector = match vector {
                Some(v) => Some(v),
                None if s.vectors.set_status(atom.id, atom.status.as_str(), version) => None,
                None => s.embed(atom),
            };
            if let Some(vector) = vector {
                upserts.push(VectorUpsert {
                    atom_id: atom.id,
                    tenant: atom.scope.tenant_id.clone(),
                    repo_key: repo.clone(),
                    status: atom.status.as_str().to_owned(),
                    vector,
                    version,
                });
            }
        }
        let mut graph = self.graph_mut();
        graph.upsert(atom.id, &links_of(atom));
        graph.mark(version);
        Ok(())
    }

    /// Records that the write committed as `version` changed nothing the
    /// indexes hold (usage stamps): an index that reflects every earlier
    /// version reflects this one too, and the next open need not replay
    /// it. Without this, every recall's usage stamp made the next process
    /// scan the change feed (215 ms at 10k atoms) and rewrite the vector
    /// files.
    pub(crate) fn skip(&self, version: u64) {
        self.keyword.skip(version);
        for s in &self.semantic {
            s.vectors.skip(version);
        }
        self.graph_mut().skip(version);
    }

    /// The store version every index has applied.
    pub(crate) fn applied_version(&self) -> u64 {
        self.semantic
            .iter()
            .map(|s| s.vectors.applied_version())
            .min()
            .unwrap_or(u64::MAX)
            .min(self.keyword.marked_version())
            .min(self.graph().applied_version())
    }

    /// Replays every change newer than what each index reflects; builds the
    /// graph from the store.
    pub fn catch_up(&self, store: &Store, progress: Progress<'_>) -> Result<(), IndexError> {
        let target = store.snapshot_version()?;
        let graph_version = self.graph().applied_version();
        let graph_from = if graph_version == 0 || graph_version > target {
            // No file, or one from another history of the store: from
            // scratch, and saved at once (else every short-lived process,
            // a CLI recall, builds it again).
            self.build_graph(store, target)?;
            if let Err(error) = self.save_graph() {
                tracing::warn!(%error, "could not save the graph index just built; the next start builds it again");
            }
            target
        } else {
            graph_version
        };
        let from = self
            .semantic
            .iter()
            .map(|s| s.vectors.applied_version())
            .min()
            .unwrap_or(u64::MAX)
            .min(self.keyword.applied_version())
            .min(graph_from);
        if from >= target {
            return Ok(());
        }
        tracing::info!(from, target, "indexes catching up with the store");
        let rows = store.select_all_graphs(NamedQuery::ChangesSince, &[("since", Literal::from(from as i64).into())])?;
        // Latest version per atom, grouped by tenant graph.
        let mut touched: BTreeMap<(String, AtomId), u64> = BTreeMap::new();
        for row in &rows {
            let Some(Term::NamedNode(graph)) = row.get("g") else { continue };
            let Some(tenant) = store::tenant_of_graph(graph.as_str()) else { continue };
            let version = row.get("version").map(store::integer_of).transpose()?.unwrap_or(0).max(0) as u64;
            for name in ["target", "generated"] {
                if let Some(id) = row.get(name).and_then(store::atom_id_of) {
                    let entry = touched.entry((tenant.clone(), id)).or_insert(version);
                    *entry = (*entry).max(version);
                }
            }
        }
        let total = touched.len();
        let touched: Vec<((String, AtomId), u64)> = touched.into_iter().collect();
        let mut done = 0;
        // Batches of one tenant, read in one request each.
        for batch in touched.chunk_by(|a, b| a.0.0 == b.0.0).flat_map(|tenant| tenant.chunks(64)) {
            let tenant = &batch[0].0.0;
            let ids: Vec<AtomId> = batch.iter().map(|((_, id), _)| *id).collect();
            let mut atoms = crate::store::codec::load_atoms(store, tenant, &ids, true)?;
            let mut pending: Vec<(Atom, u64)> = Vec::new();
            for ((_, id), version) in batch {
                match atoms.remove(id) {
                    Some(atom) => pending.push((atom, *version)),
                    None => self.forget(*id, *version),
                }
            }
            self.index_batch(pending)?;
            done += batch.len();
            progress("index", done, total);
        }
        self.keyword.mark(target);
        self.keyword.refresh()?;
        for s in &self.semantic {
            s.vectors.mark(target);
            s.vectors.persist()?;
        }
        self.graph_mut().mark(target);
        Ok(())
    }

    fn index_batch(&self, batch: Vec<(Atom, u64)>) -> Result<(), IndexError> {
        // Per model, embed in one call the atoms it has no vector for.
        // Every model's runs are queued before any is waited for.
        let mut computed: Vec<Vec<Option<Vec<f32>>>> = vec![vec![None; self.semantic.len()]; batch.len()];
        let mut started = Vec::with_capacity(self.semantic.len());
        for s in &self.semantic {
            let missing: Vec<usize> =
                (0..batch.len()).filter(|i| batch[*i].0.content.is_some() && !s.vectors.contains(batch[*i].0.id)).collect();
            let atoms: Vec<&Atom> = missing.iter().map(|i| &batch[*i].0).collect();
            started.push((missing, s.start_atoms(&atoms)));
        }
        for (model, (missing, started)) in started.into_iter().enumerate() {
            for (i, vector) in missing.into_iter().zip(started?.finish()?) {
                computed[i][model] = vector;
            }
        }
        let mut upserts = self.no_upserts();
        for ((atom, version), vectors) in batch.into_iter().zip(computed) {
            self.index_atom(&atom, version, vectors, &mut upserts)?;
        }
        self.upsert_vectors(upserts)
    }

    fn build_graph(&self, store: &Store, version: u64) -> Result<(), IndexError> {
        let started = std::time::Instant::now();
        let mut links: HashMap<AtomId, AtomLinks> = HashMap::new();
        for row in store.select_all_graphs(NamedQuery::GraphLinks, &[])? {
            let (Some(Term::NamedNode(graph)), Some(id)) = (row.get("g"), row.get("atom").and_then(store::atom_id_of)) else { continue };
            let Some(tenant) = store::tenant_of_graph(graph.as_str()) else { continue };
            let entry = links.entry(id).or_insert_with(|| AtomLinks { tenant, ..AtomLinks::default() });
            let link = match row.get("link") {
                Some(Term::Literal(l)) => l.value().to_owned(),
                _ => continue,
            };
            match (link.as_str(), row.get("other")) {
                ("mentions", Some(Term::NamedNode(entity))) => entry.entities.push(entity.as_str().to_owned()),
                ("session", Some(Term::Literal(session))) => entry.session = Some(session.value().to_owned()),
                ("revision", Some(other)) => entry.supersedes = store::atom_id_of(other),
                ("derivation", Some(other)) => entry.derived_from.extend(store::atom_id_of(other)),
                _ => {}
            }
        }
        for (id, tenant, card) in cards_from_store(store)? {
            links.entry(id).or_insert_with(|| AtomLinks { tenant, ..AtomLinks::default() }).card = Some(card);
        }
        let queried_ms = started.elapsed().as_millis() as u64;
        let mut graph = GraphIndex::new();
        for (id, links) in &links {
            graph.upsert(*id, links);
        }
        graph.mark(version);
        *self.graph_mut() = graph;
        tracing::debug!(atoms = links.len(), queried_ms, elapsed_ms = started.elapsed().as_millis() as u64, "graph index built");
        Ok(())
    }

    /// Drops every index and replays the whole store.
    pub fn rebuild(&self, store: &Store, progress: Progress<'_>) -> Result<(), IndexError> {
        self.keyword.clear()?;
        self.keyword.refresh()?;
        for s in &self.semantic {
            s.vectors.clear();
        }
        *self.graph_mut() = GraphIndex::new();
        self.catch_up(store, progress)
    }

    /// Makes buffered changes durable (keyword commit, vector and graph
    /// files).
    pub fn persist(&self) -> Result<(), IndexError> {
        self.keyword.persist()?;
        for s in &self.semantic {
            s.vectors.persist()?;
        }
        self.save_graph()
    }

    fn save_graph(&self) -> Result<(), IndexError> {
        let Some(path) = &self.graph_path else { return Ok(()) };
        self.graph_mut().save(path).map_err(|source| IndexError::Io { path: path.clone(), source })
    }
}

/// Every atom's card in the store, with its tenant, from the fields
/// `queries/atom_cards.rq` lists (one row per field), joined here.
fn cards_from_store(store: &Store) -> Result<Vec<(AtomId, String, card::Card)>, IndexError> {
    /// What the rows say of one subject (an atom, or a scope).
    #[derive(Default)]
    struct Fields {
        created: Option<chrono::DateTime<chrono::Utc>>,
        epistemic: Option<crate::atom::Epistemic>,
        source: Option<String>,
        scope: Option<String>,
        workspace: Option<String>,
        repository: Option<String>,
        branch: Option<String>,
    }
    let mut subjects: HashMap<(String, String), Fields> = HashMap::new();
    for row in store.select_all_graphs(NamedQuery::AtomCards, &[])? {
        let (Some(Term::NamedNode(graph)), Some(Term::NamedNode(subject)), Some(Term::Literal(field)), Some(value)) =
            (row.get("g"), row.get("subject"), row.get("field"), row.get("value"))
        else {
            continue;
        };
        let text = match value {
            Term::Literal(l) => l.value().to_owned(),
            Term::NamedNode(n) => n.as_str().to_owned(),
            _ => continue,
        };
        let fields = subjects.entry((graph.as_str().to_owned(), subject.as_str().to_owned())).or_default();
        match field.value() {
            "created" => fields.created = store::parse_datetime(value),
            "epistemic" => fields.epistemic = text.parse().ok(),
            "source" => fields.source = Some(text),
            "scope" => fields.scope = Some(text),
            "workspace" => fields.workspace = Some(text),
            "repository" => fields.repository = Some(text),
            "branch" => fields.branch = Some(text),
            _ => {}
        }
    }
    let mut cards = Vec::new();
    for ((graph, subject), fields) in &subjects {
        let (Some(id), Some(tenant)) = (store::atom_id_of_iri(subject), store::tenant_of_graph(graph)) else { continue };
        let (Some(created), Some(epistemic), Some(scope)) = (fields.created, fields.epistemic, &fields.scope) else { continue };
        // The scope as the store's reader makes it: the tenant, then its
        // node's fields.
        let mut scope_of = crate::scope::Scope::tenant(&tenant);
        if let Some(node) = subjects.get(&(graph.clone(), scope.clone())) {
            scope_of.workspace = node.workspace.clone();
            scope_of.repository = node.repository.clone();
            scope_of.branch = node.branch.clone();
        }
        let source = fields.source.clone().unwrap_or_else(|| "agent".to_owned());
        cards.push((id, tenant, card::Card::new(epistemic, source, created, &scope_of)));
    }
    Ok(cards)
}

/// An atom's graph links; entity keys are the entity IRIs.
pub(crate) fn links_of(atom: &Atom) -> AtomLinks {
    AtomLinks {
        tenant: atom.scope.tenant_id.clone(),
        entities: if atom.content.is_some() {
            crate::text::extract_entities(atom.content.as_deref().unwrap_or(""))
                .into_iter()
                .map(|e| store::entity_iri(&atom.scope.tenant_id, &e.key).into_string())
                .collect()
        } else {
            Vec::new()
        },
        session: atom.session_id.clone(),
        supersedes: atom.supersedes,
        derived_from: atom.derived_from.clone(),
        card: Some(card::Card::of(atom)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default models (scripts/setup.sh installs them), each with an
    /// empty vector index in RAM.
    fn models() -> Vec<Semantic> {
        embed::from_env()
            .expect("the default models (scripts/setup.sh)")
            .into_iter()
            .map(|embedder| {
                let vectors = VectorIndex::open(None, embedder.id(), embedder.dims()).expect("vector index");
                Semantic::new(embedder, vectors)
            })
            .collect()
    }

    #[test]
    fn a_compared_text_has_one_vector_alone_in_any_batch_and_ahead() {
        let texts = [
            "Wants to learn pottery with Ana someday",
            "I keep my road bike in the garage.",
            "我想和李伟一起学书法。",
            "Kenjiさんはベランダでバジルを育てています。",
            "thanks!",
            "Moved the billing retries to the staging cluster after the Redis incident on Friday, then rolled the canary back twice because the p99 doubled",
            "x",
        ];
        for (ahead, asked) in models().iter().zip(models()) {
            let id = ahead.embedder.id().to_owned();
            // Each alone, asked for when compared.
            let alone: Vec<Vec<f32>> = texts.iter().map(|t| asked.comparable(t).unwrap()).collect();
            assert_eq!(asked.asked_uncached(), texts.len() as u64);
            // One batch of all (past the 32 tokens where batches go to the
            // AMX tiles), and each with one neighbour: the same digits.
            let whole = ahead.embedder.embed_comparable(&texts).unwrap();
            for (i, text) in texts.iter().enumerate() {
                assert!(whole[i] == alone[i], "{id}: \"{text}\" differs in its digits in a batch");
                let pair = ahead.embedder.embed_comparable(&[texts[(i + 1) % texts.len()], text]).unwrap();
                assert!(pair[1] == alone[i], "{id}: \"{text}\" differs in its digits beside another");
            }
            // Dealt out to the engine threads in runs, one core each; a
            // repeat once.
            let mut twice = texts.to_vec();
            twice.push(texts[0]);
            ahead.comparable_ahead(&twice).unwrap();
            assert_eq!(ahead.compare_cache.lock().unwrap().len(), texts.len(), "{id}");
            for (text, alone) in texts.iter().zip(&alone) {
                assert!(ahead.comparable(text).unwrap() == *alone, "{id}: \"{text}\" differs in its digits ahead");
            }
            assert_eq!(ahead.asked_uncached(), 0, "every text was there ahead");
            // A comparison is no query: the queries' cache is untouched, and
            // a query's vector is the query path's own.
            assert_eq!(ahead.query_cache.lock().unwrap().len(), 0);
            let close: f32 = ahead.embed_query(texts[0]).unwrap().iter().zip(&alone[0]).map(|(a, b)| a * b).sum();
            assert!(close > 0.99, "{id}: a query's vector and a comparison's are of one model ({close})");
        }
    }

    /// A model that fails on one text, and says which texts it embedded.
    struct Picky(Mutex<Vec<String>>);

    impl Embedder for Picky {
        fn id(&self) -> &str {
            "picky"
        }
        fn dims(&self) -> usize {
            2
        }
        fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            texts.iter().map(|t| self.embed_query(t)).collect()
        }
        fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
            self.0.lock().unwrap().push(text.to_owned());
            if text == "refused" {
                return Err(EmbedError::Backend("model refused".into()));
            }
            Ok(vec![text.len() as f32, 1.0])
        }
    }

    #[test]
    fn a_text_the_model_refuses_ahead_fails_the_call_and_the_others_are_kept() {
        let picky = Arc::new(Picky(Mutex::new(Vec::new())));
        let semantic = Semantic::new(Arc::clone(&picky) as Arc<dyn Embedder>, VectorIndex::open(None, "picky", 2).unwrap());
        let texts = ["one", "refused", "three", "four", "five"];
        let error = semantic.comparable_ahead(&texts).unwrap_err();
        assert!(error.to_string().contains("model refused"), "{error}");
        // Every other text is kept, in the refused one's run too.
        {
            let mut cache = semantic.compare_cache.lock().unwrap();
            assert!(!cache.contains("refused"));
            assert!(cache.contains("one") && cache.contains("four"), "{cache:?}");
            assert_eq!(cache.get("three"), Some(vec![5.0, 1.0]));
        }
        // Asked later, each is answered: the refused one by the model again.
        let embedded = picky.0.lock().unwrap().len();
        assert!(semantic.comparable("refused").is_err());
        assert_eq!(semantic.comparable("one").unwrap(), vec![3.0, 1.0]);
        assert_eq!(picky.0.lock().unwrap().len(), embedded + 1, "only the refused text went to the model again");
        // Nothing to embed: no call at all.
        semantic.comparable_ahead(&[]).unwrap();
        semantic.comparable_ahead(&["one", "one"]).unwrap();
        assert_eq!(picky.0.lock().unwrap().len(), embedded + 1);
    }

    fn atom(text: &str, source: &str) -> Atom {
        use crate::atom::{Epistemic, Kind, Polarity, Status};
        Atom {
            id: AtomId::generate(),
            content: Some(text.to_owned()),
            kind: Kind::Fact,
            source: source.to_owned(),
            scope: crate::scope::Scope::tenant("t"),
            epistemic: Epistemic::Actual,
            polarity: Polarity::Affirmative,
            status: Status::Active,
            created_at: chrono::Utc::now(),
            language: crate::text::detect_language(text).to_owned(),
            importance: 0.5,
            entities: Vec::new(),
            supersedes: None,
            derived_from: Vec::new(),
            session_id: None,
            expires_at: None,
            last_recalled_at: None,
            recall_count: 0,
            last_decayed_at: None,
        }
    }

    /// A write takes the passages started ahead for its atoms' texts (as
    /// attributed) and embeds only the others; a batch started ahead that
    /// failed (a text in it the model refuses, which the write does not
    /// make) costs the write nothing: its texts are embedded then.
    #[test]
    fn a_write_takes_its_passages_from_ahead_and_embeds_a_failed_batchs_again() {
        let picky = Arc::new(Picky(Mutex::new(Vec::new())));
        let semantic = Semantic::new(Arc::clone(&picky) as Arc<dyn Embedder>, VectorIndex::open(None, "picky", 2).unwrap());
        let kept = vec!["Ana: one".to_owned(), "three".to_owned()];
        semantic.keep_ahead(kept.clone(), embed::Pending::ready(vec![vec![9.0, 9.0], vec![7.0, 7.0]]));
        let failing = vec!["refused".to_owned(), "four".to_owned()];
        let task = semantic.passage_task(failing.clone());
        semantic.keep_ahead(failing, embed::Pending::joined(embed::start_shared(vec![(1, task)])));
        let atoms = [atom("one", "Ana"), atom("two", "user"), atom("three", "agent"), atom("four", "user")];
        let refs: Vec<&Atom> = atoms.iter().collect();
        let before = picky.0.lock().unwrap().len();
        let vectors = semantic.start_atoms(&refs).and_then(Started::finish).unwrap();
        assert_eq!(vectors[0], Some(vec![9.0, 9.0]), "from ahead, attributed");
        assert_eq!(vectors[2], Some(vec![7.0, 7.0]), "from ahead");
        assert_eq!(vectors[1], Some(vec![3.0, 1.0]), "embedded now");
        assert_eq!(vectors[3], Some(vec![4.0, 1.0]), "its batch failed: embedded now");
        let asked: Vec<String> = picky.0.lock().unwrap()[before..].to_vec();
        assert!(asked.iter().filter(|t| *t == "two").count() == 1 && !asked.iter().any(|t| t.contains("one") || t == "three"), "{asked:?}");
        assert_eq!(semantic.ahead_counts(), (3, 0), "both batches claimed");
        // Nothing ahead for a text: no batch is claimed, all embedded now.
        semantic.keep_ahead(vec!["five".to_owned()], embed::Pending::ready(vec![vec![5.0, 5.0]]));
        assert_eq!(semantic.start_atoms(&[&atom("six", "user")]).and_then(Started::finish).unwrap(), vec![Some(vec![3.0, 1.0])]);
        assert_eq!(semantic.ahead_counts(), (3, 1));
    }

    #[test]
    fn a_dialogue_embedded_in_halves_gives_the_models_own_vectors_in_order() {
        let models = models();
        let dialogue = "User: I moved to Porto in May for the new job.\nAssistant: How do you like it?\n用户：我每周日和Ana跑五公里。\nユーザー：週末は京都で写真を撮ります。";
        let parts =
            ["I moved to Porto in May for the new job.", "How do you like it?", "我每周日和Ana跑五公里。", "週末は京都で写真を撮ります。"];
        let texts: Vec<&str> = std::iter::once(dialogue).chain(parts).collect();
        // Both models started before either is waited for, crossed over the
        // two engine threads, as recall starts them.
        let placements = [Placement::Halves { whole: 0, parts: 1 }, Placement::Halves { whole: 1, parts: 0 }];
        let started: Vec<StartedQueries> = models.iter().zip(placements).map(|(s, p)| s.start_queries(&texts, p).unwrap()).collect();
        for (s, started) in models.iter().zip(started) {
            let vectors = s.finish_queries(started).unwrap();
            let own = s.embedder.embed_queries(&texts).unwrap();
            assert_eq!(vectors.len(), texts.len(), "{}", s.embedder.id());
            for (n, (a, b)) in vectors.iter().zip(&own).enumerate() {
                let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                assert!(cosine > 0.9999, "{}: text {n}: cosine {cosine} with the model's own call", s.embedder.id());
            }
            // The whole cached, a part new: only the part is embedded, in place.
            let new_part = "Redis 迁移到哪个集群了";
            let again = s.start_queries(&[dialogue, parts[0], new_part], Placement::Halves { whole: 0, parts: 1 }).unwrap();
            assert_eq!(again.missing, vec![new_part.to_owned()]);
            let again = s.finish_queries(again).unwrap();
            assert_eq!(again[..2], [vectors[0].clone(), vectors[1].clone()]);
            let cosine: f32 = again[2].iter().zip(&s.embedder.embed_query(new_part).unwrap()).map(|(x, y)| x * y).sum();
            assert!(cosine > 0.9999, "{}: the new part, cosine {cosine}", s.embedder.id());
            // A new whole, its parts cached: the whole alone.
            let new_whole = format!("{dialogue}\nUser: thanks!");
            let fresh = s.start_queries(&[new_whole.as_str(), parts[1], parts[2]], Placement::Halves { whole: 1, parts: 0 }).unwrap();
            assert_eq!(fresh.missing, vec![new_whole.clone()]);
            let fresh = s.finish_queries(fresh).unwrap();
            assert_eq!(fresh[1..], [vectors[2].clone(), vectors[3].clone()]);
            assert_eq!(fresh[0], s.embed_query(&new_whole).unwrap(), "cached by the halves' call");
        }
    }

    /// Cosine of two unit vectors.
    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// A dialogue in one pass per model: the whole's vector is the one the
    /// model gives the text; the latest parts are their own query vectors;
    /// the older ones are pooled from the whole's pass (near their own,
    /// not them); asked again, all come from the late cache.
    #[test]
    fn a_dialogue_in_one_pass_gives_the_whole_its_latest_parts_own_vectors_and_the_older_pooled() {
        let models = models();
        let pieces = [
            "User: hi!",
            "User: I moved to Porto in May for the new job at the bakery.",
            "Assistant: How do you like the new city so far?",
            "User: 我每周日和Ana在河边跑五公里。",
            "User: 週末は京都でお寺の写真を撮ります。",
        ];
        let dialogue = pieces.join("\n");
        let pooled = [false, true, true, true, true];
        let placements = [Placement::Halves { whole: 0, parts: 1 }, Placement::Core(1)];
        let started: Vec<StartedQueries> =
            models.iter().zip(placements).map(|(s, p)| s.start_late(&dialogue, &pieces, &pooled, 2, p).unwrap()).collect();
        for (s, started) in models.iter().zip(started) {
            let id = s.embedder.id().to_owned();
            let vectors = s.finish_queries(started).unwrap();
            assert_eq!(vectors.len(), 5, "{id}: the whole and four parts");
            let whole = cosine(&vectors[0], &s.embedder.embed_query(&dialogue).unwrap());
            assert!(whole > 0.999, "{id}: the whole, cosine {whole} with the text's own vector");
            let own = s.embedder.embed_queries(&pieces[1..]).unwrap();
            for (n, (a, b)) in vectors[1..].iter().zip(&own).enumerate() {
                let c = cosine(a, b);
                if n >= 2 {
                    assert!(c > 0.9999, "{id}: part {n} is embedded on its own, cosine {c}");
                } else {
                    assert!(c > 0.3 && c < 0.999, "{id}: part {n} is pooled from the whole's pass, cosine {c}");
                }
            }
            // Asked again: from the late cache, nothing for an engine; the
            // plain query cache holds no part's pooled vector.
            let again = s.start_late(&dialogue, &pieces, &pooled, 2, Placement::Every).unwrap();
            assert!(again.pending.is_none(), "{id}");
            assert_eq!(s.finish_queries(again).unwrap(), vectors, "{id}");
            assert!(!s.query_cache.lock().unwrap().contains(pieces[1]), "{id}");
            assert!(s.query_cache.lock().unwrap().contains(pieces[4]), "{id}: an own part is a query vector");
            // The next turn: its latest part but one was the latest before,
            // from the query cache; only the new line is embedded alone.
            let next_line = "User: thanks, see you tomorrow at the bakery!";
            let next: Vec<&str> = pieces.iter().copied().chain([next_line]).collect();
            let started = s.start_late(&next.join("\n"), &next, &[false, true, true, true, true, true], 2, Placement::Every).unwrap();
            assert_eq!(started.missing, vec![next_line.to_owned()], "{id}");
            let turn = s.finish_queries(started).unwrap();
            assert_eq!(turn.len(), 6, "{id}");
            assert_eq!(turn[4], vectors[4], "{id}: from the query cache");
            let c = cosine(&turn[5], &s.embedder.embed_query(next_line).unwrap());
            assert!(c > 0.9999, "{id}: the new line, cosine {c}");
            // Other parts on their own: another entry, embedded again.
            let other = s.start_late(&dialogue, &pieces, &pooled, 1, Placement::Every).unwrap();
            assert!(other.pending.is_some(), "{id}");
            assert_eq!(s.finish_queries(other).unwrap().len(), 5, "{id}");
        }
    }

    /// A model without one-pass pooling embeds the whole and the older
    /// parts as texts (one batch), and the latest parts on their own.
    #[test]
    fn a_model_that_cannot_pool_embeds_the_dialogue_as_texts() {
        let picky = Arc::new(Picky(Mutex::new(Vec::new())));
        let semantic = Semantic::new(Arc::clone(&picky) as Arc<dyn Embedder>, VectorIndex::open(None, "picky", 2).unwrap());
        let pieces = ["hello", "first part", "second", "third one here"];
        let dialogue = pieces.join("\n");
        let started = semantic.start_late(&dialogue, &pieces, &[false, true, true, true], 1, Placement::Core(0)).unwrap();
        let vectors = semantic.finish_queries(started).unwrap();
        let lengths: Vec<f32> = vectors.iter().map(|v| v[0]).collect();
        assert_eq!(lengths, vec![dialogue.len() as f32, 10.0, 6.0, 14.0]);
        assert_eq!(*picky.0.lock().unwrap(), vec![dialogue.clone(), "first part".into(), "second".into(), "third one here".into()]);
        // A refused part fails the call and caches nothing.
        let refused = ["hello", "refused", "fine"];
        let started = semantic.start_late(&refused.join("\n"), &refused, &[false, true, true], 1, Placement::Every).unwrap();
        assert!(semantic.finish_queries(started).is_err());
        assert!(semantic.start_late(&refused.join("\n"), &refused, &[false, true, true], 1, Placement::Every).unwrap().pending.is_some());
    }

    #[test]
    fn queries_embedded_side_by_side_match_the_models_own_vectors_and_are_cached() {
        let models = models();
        let queries = ["Where does Caroline work now?", "老李的猫叫什么名字？", "田中さんの好きな食べ物は何ですか", "thanks!"];
        // Every model started before any is waited for, one per engine thread.
        let started: Vec<StartedQueries> =
            models.iter().enumerate().map(|(i, s)| s.start_queries(&queries, Placement::Core(i)).unwrap()).collect();
        for (s, started) in models.iter().zip(started) {
            let vectors = s.finish_queries(started).unwrap();
            assert_eq!(vectors.len(), queries.len(), "{}", s.embedder.id());
            // The model's own call gives the same vectors, up to the order of
            // float sums (its kernels differ with the thread's cores and
            // instruction set).
            for (a, b) in vectors.iter().zip(&s.embedder.embed_queries(&queries).unwrap()) {
                let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                assert!(cosine > 0.9999, "{}: cosine {cosine} with the model's own call", s.embedder.id());
            }
            assert_eq!(s.query_cache.lock().unwrap().len(), queries.len());
            // Seen: from the cache, with nothing left for an engine.
            let again = s.start_queries(&queries[..2], Placement::Core(1)).unwrap();
            assert!(again.pending.is_none());
            assert_eq!(s.finish_queries(again).unwrap(), vectors[..2].to_vec());
            // A mix: only the new query goes to the engine, order kept.
            let mixed = s.start_queries(&["Redis 迁移到哪个集群了", queries[0]], Placement::Every).unwrap();
            assert_eq!(mixed.missing, vec!["Redis 迁移到哪个集群了".to_owned()]);
            let mixed = s.finish_queries(mixed).unwrap();
            assert_eq!(mixed[1], vectors[0]);
            assert_eq!(mixed[0], s.embed_query("Redis 迁移到哪个集群了").unwrap());
        }
    }
}
