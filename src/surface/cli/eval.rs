//! `hmg eval`: recall quality on a benchmark in the JSON Lines format of
//! `bench/README.md` (memories with `id`, `sample_id`, `session_id`,
//! `speaker`, `timestamp`, `text`; queries with `id`, `sample_id`,
//! `question`, `category_name`, `gold`). Each `sample_id` is ingested into
//! its own scope and queried only there. Metrics match the reference scorer:
//! R@k, Hit@k (k = 1, 5, 10), NDCG@10 (binary gains), MRR@10.
//!
//! The data is read from the paths given; nothing of it enters the project.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::recall::{MAX_QUERY_CHARS, RecallRequest};
use crate::{Caller, Effect, Kind, MemorizeRequest, Memory, MemoryError, MemoryOptions, Scope};

/// Errors of an evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not valid.
    #[error("{path}:{line}: {message}")]
    Format {
        /// File.
        path: PathBuf,
        /// Line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

impl crate::fault::Classified for EvalError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            EvalError::Io { .. } | EvalError::Format { .. } => crate::fault::Fault::Invalid,
            EvalError::Memory(error) => error.fault(),
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            EvalError::Memory(error) => error.field(),
            _ => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct BenchMemory {
    id: String,
    sample_id: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    speaker: Option<String>,
    #[serde(default)]
    timestamp: Option<String>,
    text: String,
    #[serde(default)]
    image_caption: Option<String>,
}

#[derive(Debug, Deserialize)]
struct BenchQuery {
    id: String,
    sample_id: String,
    question: String,
    #[serde(default)]
    category_name: Option<String>,
    #[serde(default)]
    gold: Vec<String>,
}

/// Metrics averaged over queries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Metrics {
    /// Queries averaged.
    pub queries: usize,
    /// Recall at 1.
    #[serde(rename = "R@1")]
    pub r1: f64,
    /// Recall at 5.
    #[serde(rename = "R@5")]
    pub r5: f64,
    /// Recall at 10.
    #[serde(rename = "R@10")]
    pub r10: f64,
    /// Hit at 1.
    #[serde(rename = "Hit@1")]
    pub hit1: f64,
    /// Hit at 5.
    #[serde(rename = "Hit@5")]
    pub hit5: f64,
    /// Hit at 10.
    #[serde(rename = "Hit@10")]
    pub hit10: f64,
    /// NDCG at 10, binary gains.
    #[serde(rename = "NDCG@10")]
    pub ndcg10: f64,
    /// Mean reciprocal rank within 10.
    #[serde(rename = "MRR@10")]
    pub mrr10: f64,
}

impl Metrics {
    fn add(&mut self, ranked: &[String], gold: &[String]) {
        let gold_set: std::collections::HashSet<&str> = gold.iter().map(String::as_str).collect();
        let hits_at = |k: usize| ranked.iter().take(k).filter(|id| gold_set.contains(id.as_str())).count() as f64;
        let n = gold_set.len() as f64;
        self.queries += 1;
        self.r1 += hits_at(1) / n;
        self.r5 += hits_at(5) / n;
        self.r10 += hits_at(10) / n;
        self.hit1 += f64::from(hits_at(1) > 0.0);
        self.hit5 += f64::from(hits_at(5) > 0.0);
        self.hit10 += f64::from(hits_at(10) > 0.0);
        let dcg: f64 = ranked
            .iter()
            .take(10)
            .enumerate()
            .filter(|(_, id)| gold_set.contains(id.as_str()))
            .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
            .sum();
        let idcg: f64 = (0..gold_set.len().min(10)).map(|i| 1.0 / ((i + 2) as f64).log2()).sum();
        self.ndcg10 += if idcg > 0.0 { dcg / idcg } else { 0.0 };
        self.mrr10 += ranked.iter().take(10).position(|id| gold_set.contains(id.as_str())).map_or(0.0, |p| 1.0 / (p + 1) as f64);
    }

    fn finish(mut self) -> Metrics {
        let n = self.queries.max(1) as f64;
        for v in
            [&mut self.r1, &mut self.r5, &mut self.r10, &mut self.hit1, &mut self.hit5, &mut self.hit10, &mut self.ndcg10, &mut self.mrr10]
        {
            *v /= n;
        }
        self
    }
}

/// What an evaluation found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EvalReport {
    /// Per category name.
    pub categories: BTreeMap<String, Metrics>,
    /// Micro-average over all scored queries.
    pub overall: Metrics,
    /// Queries without gold, not scored.
    pub skipped: usize,
    /// Memories ingested.
    pub memories: usize,
    /// Ingestion time in seconds.
    pub ingest_seconds: f64,
    /// Median recall latency (ms, query embedding included).
    pub recall_p50_ms: f64,
    /// 95th percentile recall latency (ms).
    pub recall_p95_ms: f64,
    /// The embedder used, or why none.
    pub embedder: String,
    /// The recall parameters changed from the defaults (`name=value,…`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning: Option<String>,
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, EvalError> {
    let file = std::fs::File::open(path).map_err(|source| EvalError::Io { path: path.to_path_buf(), source })?;
    let mut out = Vec::new();
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| EvalError::Io { path: path.to_path_buf(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| EvalError::Format {
            path: path.to_path_buf(),
            line: index + 1,
            message: e.to_string(),
        })?);
    }
    Ok(out)
}

fn parse_timestamp(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = text.trim();
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok()
        .or_else(|| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok().map(|t| t.and_utc()))
        .or_else(|| chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)).map(|t| t.and_utc()))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// Runs an evaluation in a fresh in-memory store. `depth` results are
/// ranked per query (at least 10); `progress` hears about each stage.
///
/// Each entry of `tunings` (`name=value,…`, see [`crate::RecallConfig::apply`])
/// is applied on top of `options.recall` and scored on the same ingested
/// store, one report each; with none, one report for `options.recall`. The
/// ranking file, when asked for, is the first run's.
pub(crate) fn run(
    memories_path: &Path,
    queries_path: &Path,
    run_out: Option<&Path>,
    depth: usize,
    options: MemoryOptions,
    tunings: &[String],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<EvalReport>, EvalError> {
    let base = options.recall.clone();
    let mut configs = Vec::new();
    for tuning in tunings {
        let mut config = base.clone();
        config.apply(tuning).map_err(|message| MemoryError::invalid("tune", message))?;
        configs.push((Some(tuning.clone()), config));
    }
    if configs.is_empty() {
        configs.push((None, base));
    }
    let memories: Vec<BenchMemory> = read_jsonl(memories_path)?;
    let queries: Vec<BenchQuery> = read_jsonl(queries_path)?;
    let mut memory = Memory::open_with(None, options)?;
    let models: Vec<&str> = memory.indexes().semantic().iter().map(|s| s.embedder.id()).collect();
    let embedder = if models.is_empty() { memory.indexes().semantic_note().unwrap_or("none").to_owned() } else { models.join(" + ") };
    progress(&format!("embedder: {embedder}"));
    let caller_for = |sample: &str| Caller::new(Scope::tenant("eval").with_workspace("bench").with_repository(sample), "eval");

    let started = Instant::now();
    let mut ids_of_atom: HashMap<String, Vec<String>> = HashMap::new();
    // Consecutive memories of one sample go in together, in runs of
    // several groups: `memorize_many` embeds a group while it commits and
    // indexes the one before (one embedding call per model and one
    // transaction per group), as `hmg import` does; a run of one group
    // would leave the engines idle through every commit. Progress is
    // reported between runs.
    let mut done = 0usize;
    for sample in memories.chunk_by(|a, b| a.sample_id == b.sample_id) {
        for group in sample.chunks(INGEST_RUN) {
            let requests: Vec<MemorizeRequest> = group
                .iter()
                .map(|m| {
                    let mut content = m.text.clone();
                    if let Some(caption) = &m.image_caption {
                        content.push_str(&format!(" [image: {caption}]"));
                    }
                    let mut request = MemorizeRequest::new(content)
                        .with_kind(Kind::Episode)
                        .with_source(m.speaker.clone().unwrap_or_else(|| "user".to_owned()));
                    request.session_id = m.session_id.clone();
                    request.created_at = m.timestamp.as_deref().and_then(parse_timestamp);
                    request
                })
                .collect();
            let outcomes = memory.memorize_many(&caller_for(&group[0].sample_id), requests)?;
            for (m, outcome) in group.iter().zip(outcomes) {
                match (outcome.effect, outcome.atom_id) {
                    (Effect::Applied | Effect::NoOp, Some(atom)) => ids_of_atom.entry(atom).or_default().push(m.id.clone()),
                    (_, _) => tracing::warn!(id = %m.id, reason = ?outcome.reason, "benchmark memory not stored"),
                }
            }
            let before = done;
            done += group.len();
            if done / 250 > before / 250 || done == memories.len() {
                progress(&format!("ingested {done} / {} memories", memories.len()));
            }
        }
    }
    memory.persist_indexes()?;
    let ingest_seconds = started.elapsed().as_secs_f64();

    let mut reports = Vec::with_capacity(configs.len());
    for (index, (tuning, config)) in configs.into_iter().enumerate() {
        memory.set_recall_config(config);
        if let Some(tuning) = &tuning {
            progress(&format!("tuning {tuning}"));
        }
        let report = score(&memory, &queries, &ids_of_atom, if index == 0 { run_out } else { None }, depth, progress)?;
        reports.push(EvalReport { memories: memories.len(), ingest_seconds, embedder: embedder.clone(), tuning, ..report });
    }
    Ok(reports)
}

/// Memories of one sample handed to `memorize_many` at a time: eight of
/// its groups, so the pipeline runs full between two progress lines.
const INGEST_RUN: usize = 8 * crate::MEMORIZE_BATCH;

/// Runs every query against the ingested store.
fn score(
    memory: &Memory,
    queries: &[BenchQuery],
    ids_of_atom: &HashMap<String, Vec<String>>,
    run_out: Option<&Path>,
    depth: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalReport, EvalError> {
    let caller_for = |sample: &str| Caller::new(Scope::tenant("eval").with_workspace("bench").with_repository(sample), "eval");
    let mut run_file = match run_out {
        Some(path) => Some((
            path,
            std::io::BufWriter::new(std::fs::File::create(path).map_err(|source| EvalError::Io { path: path.to_path_buf(), source })?),
        )),
        None => None,
    };
    let mut categories: BTreeMap<String, Metrics> = BTreeMap::new();
    let mut overall = Metrics::default();
    let mut latencies = Vec::with_capacity(queries.len());
    let mut skipped = 0;
    for (index, q) in queries.iter().enumerate() {
        // Long dialogue queries keep their most recent part.
        let chars: Vec<char> = q.question.chars().collect();
        let question: String = chars[chars.len().saturating_sub(MAX_QUERY_CHARS)..].iter().collect();
        let t = Instant::now();
        let outcome = memory.recall(
            &caller_for(&q.sample_id),
            RecallRequest { max_results: depth.clamp(10, crate::recall::MAX_RESULTS), ..RecallRequest::new(question) },
        )?;
        latencies.push(t.elapsed());
        let mut ranked: Vec<String> = Vec::new();
        for atom in &outcome.atoms {
            if let Some(ids) = ids_of_atom.get(&atom.atom_id) {
                ranked.extend(ids.iter().cloned());
            }
        }
        if let Some((path, out)) = &mut run_file {
            let line = serde_json::json!({ "query_id": q.id, "ranked": ranked });
            writeln!(out, "{line}").map_err(|source| EvalError::Io { path: path.to_path_buf(), source })?;
        }
        if q.gold.is_empty() {
            skipped += 1;
            continue;
        }
        overall.add(&ranked, &q.gold);
        categories.entry(q.category_name.clone().unwrap_or_else(|| "all".to_owned())).or_default().add(&ranked, &q.gold);
        if (index + 1) % 100 == 0 || index + 1 == queries.len() {
            progress(&format!("ran {} / {} queries", index + 1, queries.len()));
        }
    }
    if let Some((path, out)) = run_file {
        out.into_inner().map_err(|e| EvalError::Io { path: path.to_path_buf(), source: e.into_error() })?;
    }
    latencies.sort();
    Ok(EvalReport {
        categories: categories.into_iter().map(|(k, v)| (k, v.finish())).collect(),
        overall: overall.finish(),
        skipped,
        memories: 0,
        ingest_seconds: 0.0,
        recall_p50_ms: percentile(&latencies, 0.5),
        recall_p95_ms: percentile(&latencies, 0.95),
        embedder: String::new(),
        tuning: None,
    })
}

/// The report as a table.
pub(crate) fn render(report: &EvalReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "embedder: {}", report.embedder)?;
    if let Some(tuning) = &report.tuning {
        writeln!(out, "tuning: {tuning}")?;
    }
    writeln!(
        out,
        "{} memories ingested in {:.1} s; recall p50 {:.2} ms, p95 {:.2} ms",
        report.memories, report.ingest_seconds, report.recall_p50_ms, report.recall_p95_ms
    )?;
    writeln!(
        out,
        "{:<14} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>7}",
        "category", "n", "R@1", "R@5", "R@10", "Hit@1", "Hit@5", "Hit@10", "NDCG@10", "MRR@10"
    )?;
    let row = |out: &mut dyn Write, name: &str, m: &Metrics| {
        writeln!(
            out,
            "{:<14} {:>5} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>8.3} {:>7.3}",
            name, m.queries, m.r1, m.r5, m.r10, m.hit1, m.hit5, m.hit10, m.ndcg10, m.mrr10
        )
    };
    for (name, m) in &report.categories {
        row(out, name, m)?;
    }
    row(out, "overall", &report.overall)?;
    if report.skipped > 0 {
        writeln!(out, "({} queries without gold skipped)", report.skipped)?;
    }
    Ok(())
}
