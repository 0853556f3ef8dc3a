//! Read-only SPARQL for auditors: the `/sparql` endpoint (SPARQL 1.1
//! Protocol) and `hmg sparql`. Parses the query, refuses updates, confines
//! it to the caller's tenant graph ([`crate::store::query_confined`], or in
//! the query sent to a remote store),
//! enforces a time limit, a result size limit and (in the server) a memory
//! limit, and serializes the results in the negotiated format.
//!
//! **Invariants:**
//! - A query is scanned for nesting depth ([`crate::limits`]) before the
//!   parser sees it; nothing a client sends can overflow the stack of the
//!   process that serves other tenants.
//! - `hmg serve` never evaluates a client's query in its own process: the
//!   evaluator has loops (cartesian products, sorts, aggregates) that no
//!   cancellation check reaches and that can allocate without bound. The
//!   query runs in a child `hmg sparql-worker` over a read-only checkpoint
//!   of the store ([`crate::store::Store::read_snapshot`]), with its data
//!   segment capped (`RLIMIT_DATA`), killed at the deadline or when the
//!   client goes away. The in-process path ([`answer`]) serves `hmg sparql`,
//!   where the user queries their own store.

use std::cell::Cell;
use std::io::Write;
use std::time::{Duration, Instant};

use oxigraph::io::{RdfFormat, RdfSerializer};
use oxigraph::sparql::results::{QueryResultsFormat, QueryResultsSerializer};
use oxigraph::sparql::{CancellationToken, QueryResults};
use spargebra::Query;

use crate::limits::{SPARQL_MAX_NESTING, Syntax, check_nesting};
use crate::store::Store;

/// Longest accepted query text, in bytes.
pub(crate) const MAX_QUERY_BYTES: usize = 64 * 1024;
/// Default evaluation time limit.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default largest serialized result.
pub(crate) const DEFAULT_MAX_RESULT_BYTES: usize = 32 * 1024 * 1024;
/// Default memory a worker may allocate (its data segment).
pub(crate) const DEFAULT_MAX_MEMORY_BYTES: u64 = 1024 * 1024 * 1024;

/// What one evaluation may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Wall-clock time.
    pub timeout: Duration,
    /// Size of the serialized result.
    pub max_result_bytes: usize,
    /// Memory of a worker process (ignored in process).
    pub max_memory_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { timeout: DEFAULT_TIMEOUT, max_result_bytes: DEFAULT_MAX_RESULT_BYTES, max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES }
    }
}

/// Why a query was not answered. Serializable: a worker process reports
/// its refusal to the server as this value.
#[derive(Debug, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "error", content = "detail", rename_all = "snake_case")]
pub(crate) enum SparqlError {
    /// Not a query, or a syntax error.
    #[error("malformed query: {0}")]
    Syntax(String),
    /// An update was sent to the read-only endpoint.
    #[error("updates are refused: this endpoint is read-only (SPARQL query forms only)")]
    Update,
    /// Query too large.
    #[error("the query is longer than {MAX_QUERY_BYTES} bytes")]
    TooLarge,
    /// Query nested too deep.
    #[error("{0}")]
    TooDeep(String),
    /// No acceptable result format.
    #[error(
        "cannot produce any of the accepted media types ({0}); use application/sparql-results+json, application/sparql-results+xml, text/csv or text/tab-separated-values (text/turtle or application/n-triples for graphs)"
    )]
    NotAcceptable(String),
    /// The time limit passed.
    #[error("the query ran longer than the limit of {0} s and was stopped; narrow it (LIMIT, more specific patterns)")]
    Timeout(u64),
    /// The result is larger than allowed.
    #[error("the result is larger than the limit of {0} bytes; add LIMIT or select fewer variables")]
    ResultTooLarge(usize),
    /// The evaluation needed more memory than allowed.
    #[error(
        "the query needed more than the limit of {0} MiB of memory and was stopped; narrow it (a pattern without shared variables multiplies the rows)"
    )]
    OutOfMemory(u64),
    /// Every evaluation slot is taken.
    #[error("too many SPARQL queries are running; retry in a few seconds")]
    Busy,
    /// Evaluation failed.
    #[error("query evaluation failed: {0}")]
    Evaluation(String),
    /// The worker process could not run or died.
    #[error("the query could not be evaluated: {0}")]
    Worker(String),
    /// The remote store did not answer.
    #[error("{0}")]
    Unavailable(String),
}

impl crate::fault::Classified for SparqlError {
    fn fault(&self) -> crate::fault::Fault {
        use crate::fault::Fault;
        match self {
            SparqlError::Syntax(_) | SparqlError::Update | SparqlError::Evaluation(_) | SparqlError::TooDeep(_) => Fault::Invalid,
            SparqlError::TooLarge => Fault::TooLarge,
            SparqlError::NotAcceptable(_) => Fault::Unacceptable,
            SparqlError::Timeout(_) | SparqlError::ResultTooLarge(_) | SparqlError::OutOfMemory(_) => Fault::OverLimit,
            SparqlError::Busy => Fault::Busy,
            SparqlError::Worker(_) => Fault::Internal,
            SparqlError::Unavailable(_) => Fault::Unavailable,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            SparqlError::NotAcceptable(_) => Some("accept"),
            SparqlError::Busy | SparqlError::Worker(_) | SparqlError::Unavailable(_) => None,
            _ => Some("query"),
        }
    }
}

/// An answer ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Media type.
    pub media_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
}

/// Parses `text` as a query; an update gets [`SparqlError::Update`]. The
/// parser recurses once per element of a long `a + b + …` or `p / q / …`
/// chain: call it on a large stack ([`on_big_stack`]).
pub(crate) fn parse(text: &str) -> Result<Query, SparqlError> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(SparqlError::TooLarge);
    }
    check_nesting(text, Syntax::Sparql, SPARQL_MAX_NESTING).map_err(|e| SparqlError::TooDeep(e.to_string()))?;
    match spargebra::SparqlParser::new().parse_query(text) {
        Ok(query) => Ok(query),
        Err(query_error) => match spargebra::SparqlParser::new().parse_update(text) {
            Ok(_) => Err(SparqlError::Update),
            Err(_) => Err(SparqlError::Syntax(query_error.to_string())),
        },
    }
}

/// Runs `work` on a thread with a large stack: evaluating and dropping a
/// query's algebra recurses once per operator of a long `a + b + …` or
/// `p / q / …` chain, which the nesting scan does not bound.
fn on_big_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, SparqlError> {
    std::thread::Builder::new()
        .name("sparql".to_owned())
        .stack_size(256 * 1024 * 1024)
        .spawn(work)
        .map_err(|e| SparqlError::Worker(format!("cannot start an evaluation thread: {e}")))?
        .join()
        .map_err(|_| SparqlError::Worker("the evaluation failed unexpectedly".to_owned()))
}

fn solutions_format(accept: &str) -> Option<QueryResultsFormat> {
    negotiate(
        accept,
        &[
            ("application/sparql-results+json", QueryResultsFormat::Json),
            ("application/json", QueryResultsFormat::Json),
            ("application/sparql-results+xml", QueryResultsFormat::Xml),
            ("application/xml", QueryResultsFormat::Xml),
            ("text/csv", QueryResultsFormat::Csv),
            ("text/tab-separated-values", QueryResultsFormat::Tsv),
        ],
    )
}

fn graph_format(accept: &str) -> Option<RdfFormat> {
    negotiate(
        accept,
        &[("application/n-triples", RdfFormat::NTriples), ("text/turtle", RdfFormat::Turtle), ("text/plain", RdfFormat::NTriples)],
    )
}

/// The first offered format the `Accept` header allows, by its q-values
/// (`*/*` or an empty header take the first offer).
fn negotiate<T: Copy>(accept: &str, offers: &[(&str, T)]) -> Option<T> {
    let mut ranges: Vec<(String, f32, usize)> = accept
        .split(',')
        .enumerate()
        .filter_map(|(position, item)| {
            let mut parts = item.split(';');
            let range = parts.next()?.trim().to_ascii_lowercase();
            if range.is_empty() {
                return None;
            }
            let q = parts.filter_map(|p| p.trim().strip_prefix("q=")).find_map(|q| q.trim().parse::<f32>().ok()).unwrap_or(1.0);
            Some((range, q, position))
        })
        .filter(|(_, q, _)| *q > 0.0)
        .collect();
    if ranges.is_empty() {
        return offers.first().map(|(_, t)| *t);
    }
    ranges.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    for (range, _, _) in ranges {
        if range == "*/*" {
            return offers.first().map(|(_, t)| *t);
        }
        if let Some(major) = range.strip_suffix("/*")
            && let Some((_, t)) = offers.iter().find(|(m, _)| m.split('/').next() == Some(major))
        {
            return Some(*t);
        }
        if let Some((_, t)) = offers.iter().find(|(m, _)| *m == range) {
            return Some(*t);
        }
    }
    None
}

/// The serialization a query's results get.
#[derive(Debug, Clone, Copy)]
enum Format {
    Solutions(QueryResultsFormat),
    Graph(RdfFormat),
}

impl Format {
    fn for_query(query: &Query, accept: &str) -> Result<Format, SparqlError> {
        let not_acceptable = || SparqlError::NotAcceptable(accept.to_owned());
        if matches!(query, Query::Construct { .. } | Query::Describe { .. }) {
            graph_format(accept).map(Format::Graph).ok_or_else(not_acceptable)
        } else {
            solutions_format(accept).map(Format::Solutions).ok_or_else(not_acceptable)
        }
    }

    fn media_type(self) -> &'static str {
        match self {
            Format::Solutions(format) => format.media_type(),
            Format::Graph(format) => format.media_type(),
        }
    }
}

/// Runs `text` for `tenant` in this process and serializes the results for
/// `accept` (for a store in memory; a store on disk is queried through
/// [`answer_isolated`], by `hmg serve` and `hmg sparql` alike). The time limit
/// holds only where the evaluator reads the store: a long property path or a
/// cartesian product can run past it, so never use this for a query you did
/// not write.
pub(crate) fn answer(store: &Store, tenant: &str, text: &str, accept: &str, limits: Limits) -> Result<Answer, SparqlError> {
    let _span = tracing::info_span!("sparql", tenant).entered();
    if let Some(remote) = store.remote() {
        return forward(remote, tenant, text, accept, limits);
    }
    match store.embedded() {
        Some(embedded) => answer_on(embedded.handle(), tenant, text, accept, limits),
        None => Err(SparqlError::Worker("this store cannot evaluate SPARQL".to_owned())),
    }
}

/// Answers `text` from a remote store: parsed and checked here, its dataset
/// replaced by the tenant's graph in the query sent
/// ([`crate::store::remote::Remote::query_confined`]), the answer
/// re-serialized here in the negotiated format within `limits` (the remote
/// store evaluates; its own limits bound the work).
fn forward(remote: &crate::store::remote::Remote, tenant: &str, text: &str, accept: &str, limits: Limits) -> Result<Answer, SparqlError> {
    use crate::store::remote::Answered;
    let owned = text.to_owned();
    let query = on_big_stack(move || parse(&owned))??;
    let format = Format::for_query(&query, accept)?;
    let answered = remote.query_confined(tenant, query).map_err(|e| match e {
        crate::store::StoreError::Query { message, .. } => SparqlError::Evaluation(message),
        other => SparqlError::Unavailable(other.to_string()),
    })?;
    let deadline = Instant::now() + limits.timeout;
    let too_large = Cell::new(false);
    let mut body = Vec::new();
    let mut out = Capped { inner: &mut body, written: 0, limits, deadline, too_large: &too_large };
    let evaluation = |e: &dyn std::fmt::Display| SparqlError::Evaluation(e.to_string());
    let written = match (answered, format) {
        (Answered::Boolean(value), Format::Solutions(format)) => {
            QueryResultsSerializer::from_format(format).serialize_boolean_to_writer(&mut out, value).map(|_| ()).map_err(|e| evaluation(&e))
        }
        (Answered::Solutions(variables, rows), Format::Solutions(format)) => (|| {
            let mut writer = QueryResultsSerializer::from_format(format)
                .serialize_solutions_to_writer(&mut out, variables)
                .map_err(|e| evaluation(&e))?;
            for row in &rows {
                writer.serialize(row).map_err(|e| evaluation(&e))?;
            }
            writer.finish().map(|_| ()).map_err(|e| evaluation(&e))
        })(),
        (Answered::Graph(triples), Format::Graph(format)) => (|| {
            let mut writer = RdfSerializer::from_format(format).for_writer(&mut out);
            for triple in &triples {
                writer.serialize_triple(triple).map_err(|e| evaluation(&e))?;
            }
            writer.finish().map(|_| ()).map_err(|e| evaluation(&e))
        })(),
        _ => Err(SparqlError::Evaluation("the query form does not match the negotiated format".to_owned())),
    };
    match written {
        Ok(()) => Ok(Answer { media_type: format.media_type(), body }),
        Err(_) if too_large.get() => Err(SparqlError::ResultTooLarge(limits.max_result_bytes)),
        Err(error) => Err(error),
    }
}

/// Parses, negotiates and evaluates `text` on `store` within `limits`, all
/// on the big stack (parsing recurses too: a long `p / q / …` path). The
/// one evaluation path of [`answer`] and of the worker.
fn answer_on(store: oxigraph::store::Store, tenant: &str, text: &str, accept: &str, limits: Limits) -> Result<Answer, SparqlError> {
    let (tenant, text, accept) = (tenant.to_owned(), text.to_owned(), accept.to_owned());
    on_big_stack(move || {
        let query = parse(&text)?;
        let format = Format::for_query(&query, &accept)?;
        let mut body = Vec::new();
        evaluate(&store, &tenant, query, format, limits, &mut body)?;
        Ok(Answer { media_type: format.media_type(), body })
    })?
}

/// A writer that refuses to grow past a size or a deadline; `too_large`
/// tells the two apart once the serializer has turned the refusal into its
/// own error.
struct Capped<'a, W: Write> {
    inner: &'a mut W,
    written: usize,
    limits: Limits,
    deadline: Instant,
    too_large: &'a Cell<bool>,
}

impl<W: Write> Write for Capped<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.written + buf.len() > self.limits.max_result_bytes {
            self.too_large.set(true);
            return Err(std::io::Error::other("result too large"));
        }
        if Instant::now() > self.deadline {
            return Err(std::io::Error::other("deadline passed"));
        }
        let n = self.inner.write(buf)?;
        self.written += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Evaluates `query` confined to `tenant`'s graph of `store`, writing the
/// serialized results to `out` within `limits`.
fn evaluate(
    store: &oxigraph::store::Store,
    tenant: &str,
    query: Query,
    format: Format,
    limits: Limits,
    out: &mut impl Write,
) -> Result<(), SparqlError> {
    let started = Instant::now();
    let deadline = started + limits.timeout;
    let cancel = CancellationToken::new();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let cancel = cancel.clone();
        let timeout = limits.timeout;
        std::thread::spawn(move || {
            if finished.recv_timeout(timeout).is_err() {
                cancel.cancel();
            }
        })
    };
    let too_large = Cell::new(false);
    let result =
        serialize(store, tenant, query, format, cancel, Capped { inner: out, written: 0, limits, deadline, too_large: &too_large });
    let _ = done.send(());
    let _ = watchdog.join();
    match result {
        Ok(()) => Ok(()),
        Err(_) if too_large.get() => Err(SparqlError::ResultTooLarge(limits.max_result_bytes)),
        Err(_) if Instant::now() >= deadline => Err(SparqlError::Timeout(limits.timeout.as_secs())),
        Err(error) => Err(error),
    }
}

fn serialize<W: Write>(
    store: &oxigraph::store::Store,
    tenant: &str,
    query: Query,
    format: Format,
    cancel: CancellationToken,
    mut out: Capped<'_, W>,
) -> Result<(), SparqlError> {
    let evaluation = |e: &dyn std::fmt::Display| SparqlError::Evaluation(e.to_string());
    let deadline = out.deadline;
    let results = crate::store::query_confined(store, tenant, query, cancel).map_err(|e| evaluation(&e))?;
    match (results, format) {
        (QueryResults::Boolean(value), Format::Solutions(format)) => {
            QueryResultsSerializer::from_format(format).serialize_boolean_to_writer(&mut out, value).map_err(|e| evaluation(&e))?;
        }
        (QueryResults::Solutions(iter), Format::Solutions(format)) => {
            let mut writer = QueryResultsSerializer::from_format(format)
                .serialize_solutions_to_writer(&mut out, iter.variables().to_vec())
                .map_err(|e| evaluation(&e))?;
            for solution in iter {
                if Instant::now() > deadline {
                    return Err(SparqlError::Timeout(0));
                }
                let solution = solution.map_err(|e| evaluation(&e))?;
                writer.serialize(&solution).map_err(|e| evaluation(&e))?;
            }
            writer.finish().map_err(|e| evaluation(&e))?;
        }
        (QueryResults::Graph(triples), Format::Graph(format)) => {
            let mut writer = RdfSerializer::from_format(format).for_writer(&mut out);
            for triple in triples {
                if Instant::now() > deadline {
                    return Err(SparqlError::Timeout(0));
                }
                let triple = triple.map_err(|e| evaluation(&e))?;
                writer.serialize_triple(&triple).map_err(|e| evaluation(&e))?;
            }
            writer.finish().map_err(|e| evaluation(&e))?;
        }
        _ => return Err(SparqlError::Evaluation("the query form does not match the negotiated format".to_owned())),
    }
    Ok(())
}

/// The command line a worker is started with.
pub(crate) const WORKER_COMMAND: &str = "sparql-worker";

/// The worker's side (`hmg sparql-worker`): reads the query on stdin,
/// evaluates it over the checkpoint in `snapshot` and writes the body to
/// `out`; on a refusal, writes the [`SparqlError`] as JSON and returns 2.
/// Caps its own data segment first.
pub(crate) fn run_worker(
    snapshot: &std::path::Path,
    tenant: &str,
    accept: &str,
    limits: Limits,
    input: &mut dyn std::io::Read,
    out: &mut dyn Write,
) -> std::io::Result<u8> {
    if let Err(error) = rlimit::setrlimit(rlimit::Resource::DATA, limits.max_memory_bytes, limits.max_memory_bytes) {
        tracing::warn!(%error, "cannot limit the worker's memory");
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(input, MAX_QUERY_BYTES as u64 + 1), &mut text)?;
    let outcome = Store::open_snapshot(snapshot).map_err(|e| SparqlError::Worker(e.to_string())).and_then(|store| match store.embedded() {
        Some(embedded) => answer_on(embedded.handle(), tenant, &text, accept, limits),
        None => Err(SparqlError::Worker("a checkpoint is always embedded".to_owned())),
    });
    let code = match outcome {
        Ok(answer) => {
            out.write_all(&answer.body)?;
            0
        }
        Err(error) => {
            serde_json::to_writer(&mut *out, &error)?;
            2
        }
    };
    out.flush()?;
    Ok(code)
}

/// A worker process that is killed and reaped if its future is dropped (a
/// client that went away, a deadline): no worker outlives its request, not
/// even as a zombie.
struct Reaped(Option<tokio::process::Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else { return };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = child.start_kill();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = child.wait().await;
                });
            }
            Err(_) => drop(child),
        }
    }
}

/// Evaluates `text` in a child `hmg sparql-worker` (the executable at
/// `worker`) over `snapshot`, within `limits`. Dropping the future kills the
/// child (a client that goes away stops its query).
pub(crate) async fn answer_isolated(
    worker: &std::path::Path,
    snapshot: &std::path::Path,
    tenant: &str,
    text: &str,
    accept: &str,
    limits: Limits,
) -> Result<Answer, SparqlError> {
    // Refuse what is malformed here, with the parser's own message and
    // without starting a process.
    let owned = text.to_owned();
    let accept_owned = accept.to_owned();
    let format =
        tokio::task::spawn_blocking(move || on_big_stack(move || parse(&owned).and_then(|query| Format::for_query(&query, &accept_owned))))
            .await
            .map_err(|e| SparqlError::Worker(e.to_string()))???;
    let child = tokio::process::Command::new(worker)
        .arg(WORKER_COMMAND)
        .arg("--snapshot")
        .arg(snapshot)
        .args(["--tenant", tenant, "--accept", format.media_type()])
        .args(["--timeout-ms", &limits.timeout.as_millis().to_string()])
        .args(["--max-result-bytes", &limits.max_result_bytes.to_string()])
        .args(["--max-memory-bytes", &limits.max_memory_bytes.to_string()])
        .env_remove("HMG_STORE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| SparqlError::Worker(format!("cannot start {}: {e}", worker.display())))?;
    let mut child = Reaped(Some(child));
    let Some(child) = child.0.as_mut() else { return Err(SparqlError::Worker("the worker vanished".to_owned())) };
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        stdin.write_all(text.as_bytes()).await.map_err(|e| SparqlError::Worker(format!("cannot send the query: {e}")))?;
    }
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(SparqlError::Worker("the worker has no output pipes".to_owned()));
    };
    async fn read_capped(pipe: impl tokio::io::AsyncRead + Unpin, cap: usize) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut bytes = Vec::new();
        let _ = pipe.take(cap as u64).read_to_end(&mut bytes).await;
        bytes
    }
    let grace = Duration::from_secs(2);
    let run = async {
        let (out, err, status) =
            tokio::join!(read_capped(stdout, limits.max_result_bytes + 4096), read_capped(stderr, 64 * 1024), child.wait());
        (out, err, status)
    };
    let (out, err, status) = match tokio::time::timeout(limits.timeout + grace, run).await {
        Ok(done) => done,
        Err(_) => {
            let _ = child.kill().await;
            return Err(SparqlError::Timeout(limits.timeout.as_secs()));
        }
    };
    let status = status.map_err(|e| SparqlError::Worker(e.to_string()))?;
    let stderr = String::from_utf8_lossy(&err);
    match status.code() {
        Some(0) if out.len() > limits.max_result_bytes => Err(SparqlError::ResultTooLarge(limits.max_result_bytes)),
        Some(0) => Ok(Answer { media_type: format.media_type(), body: out }),
        Some(2) => {
            Err(serde_json::from_slice(&out)
                .unwrap_or_else(|_| SparqlError::Worker(format!("unreadable refusal from the worker: {stderr}"))))
        }
        _ if stderr.contains("memory allocation of") || stderr.contains("out of memory") || stderr.contains("bad_alloc") => {
            Err(SparqlError::OutOfMemory(limits.max_memory_bytes / (1024 * 1024)))
        }
        _ => {
            tracing::warn!(?status, stderr = %stderr.chars().take(500).collect::<String>(), "SPARQL worker failed");
            Err(SparqlError::Worker(format!("the evaluation stopped abnormally ({status})")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_negotiation_follows_q_values() {
        assert_eq!(solutions_format(""), Some(QueryResultsFormat::Json));
        assert_eq!(solutions_format("text/csv;q=0.5, application/sparql-results+xml"), Some(QueryResultsFormat::Xml));
        assert_eq!(solutions_format("text/*"), Some(QueryResultsFormat::Csv));
        assert_eq!(solutions_format("image/png"), None);
        assert_eq!(graph_format("text/turtle"), Some(RdfFormat::Turtle));
    }

    #[test]
    fn updates_and_garbage_are_refused() {
        assert!(matches!(parse("INSERT DATA { <urn:a> <urn:b> <urn:c> }"), Err(SparqlError::Update)));
        assert!(matches!(parse("SELEC * WHERE {}"), Err(SparqlError::Syntax(_))));
        assert!(parse("SELECT * WHERE { ?s ?p ?o }").is_ok());
    }

    #[test]
    fn a_workers_refusal_reaches_the_server_as_it_was() {
        for error in
            [SparqlError::Update, SparqlError::Timeout(10), SparqlError::ResultTooLarge(1_000), SparqlError::Evaluation("boom".to_owned())]
        {
            let wire = serde_json::to_vec(&error).unwrap();
            assert_eq!(serde_json::from_slice::<SparqlError>(&wire).unwrap(), error);
        }
    }

    #[test]
    fn deep_queries_are_refused_before_parsing() {
        let groups = format!("SELECT * WHERE {}{}", "{".repeat(1_000), "}".repeat(1_000));
        assert!(matches!(parse(&groups), Err(SparqlError::TooDeep(_))));
        let path = format!("SELECT * WHERE {{ ?s {}<urn:p>{} ?o }}", "(".repeat(5_000), ")".repeat(5_000));
        assert!(matches!(parse(&path), Err(SparqlError::TooDeep(_))));
    }

    #[test]
    fn long_operator_chains_evaluate_without_overflowing_the_stack() {
        let store = Store::open_in_memory().unwrap();
        // Parsing is linear; evaluating a long sum is not (the time limit
        // bounds it), so a shorter one is evaluated.
        let long_sum = format!("SELECT (1{} AS ?n) WHERE {{}}", "+1".repeat(20_000));
        assert!(on_big_stack(move || parse(&long_sum).is_ok()).unwrap());
        let sum = format!("SELECT (1{} AS ?n) WHERE {{}}", "+1".repeat(3_000));
        let answer = answer(&store, "t", &sum, "", Limits::default()).unwrap();
        assert!(String::from_utf8_lossy(&answer.body).contains("3001"), "{}", String::from_utf8_lossy(&answer.body));
        // Property-path sequences evaluate in worse than quadratic time (400
        // steps: 3 s; the worker's time limit bounds them in the server).
        let long_path = format!("SELECT * WHERE {{ ?s <urn:p>{} ?o }}", "/<urn:p>".repeat(6_000));
        assert!(on_big_stack(move || parse(&long_path).is_ok()).unwrap());
        let path = format!("SELECT * WHERE {{ ?s <urn:p>{} ?o }}", "/<urn:p>".repeat(100));
        assert!(answer_ok(&store, &path));
        let or = format!("SELECT * WHERE {{ FILTER(false{}) }}", " || false".repeat(6_000));
        assert!(answer_ok(&store, &or));
    }

    fn answer_ok(store: &Store, text: &str) -> bool {
        answer(store, "t", text, "", Limits::default()).is_ok()
    }

    #[test]
    fn results_past_the_size_limit_are_refused() {
        let store = Store::open_in_memory().unwrap();
        let limits = Limits { max_result_bytes: 1_000, ..Limits::default() };
        let many =
            format!("SELECT ?x WHERE {{ VALUES ?x {{ {} }} }}", (0..500).map(|i| format!("\"value {i}\"")).collect::<Vec<_>>().join(" "));
        assert!(matches!(answer(&store, "t", &many, "", limits), Err(SparqlError::ResultTooLarge(1_000))));
    }
}
