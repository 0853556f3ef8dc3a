//! Read-only SPARQL for auditors: the `/sparql` endpoint (SPARQL 1.1
//! Protocol) and `hmg sparql`. Parses the query, refuses updates, confines
//! it to the caller's tenant graph ([`crate::store::Store::query_confined`]),
//! enforces a time limit and serializes the results in the negotiated format.

use std::time::Duration;

use oxigraph::io::{RdfFormat, RdfSerializer};
use oxigraph::sparql::results::{QueryResultsFormat, QueryResultsSerializer};
use oxigraph::sparql::{CancellationToken, QueryResults};
use spargebra::Query;

use crate::memory::Memory;

/// Longest accepted query text, in bytes.
pub const MAX_QUERY_BYTES: usize = 256 * 1024;
/// Default evaluation time limit.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a query was not answered.
#[derive(Debug, thiserror::Error)]
pub enum SparqlError {
    /// Not a query, or a syntax error.
    #[error("malformed query: {0}")]
    Syntax(String),
    /// An update was sent to the read-only endpoint.
    #[error("updates are refused: this endpoint is read-only (SPARQL query forms only)")]
    Update,
    /// Query too large.
    #[error("the query is longer than {MAX_QUERY_BYTES} bytes")]
    TooLarge,
    /// No acceptable result format.
    #[error("cannot produce any of the accepted media types ({0}); use application/sparql-results+json, application/sparql-results+xml, text/csv or text/tab-separated-values (text/turtle or application/n-triples for graphs)")]
    NotAcceptable(String),
    /// The time limit passed.
    #[error("the query ran longer than the limit of {0} s and was stopped")]
    Timeout(u64),
    /// Evaluation failed.
    #[error("query evaluation failed: {0}")]
    Evaluation(String),
}

/// An answer ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Media type.
    pub media_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
}

/// Parses `text` as a query; an update gets [`SparqlError::Update`].
pub fn parse(text: &str) -> Result<Query, SparqlError> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(SparqlError::TooLarge);
    }
    match spargebra::SparqlParser::new().parse_query(text) {
        Ok(query) => Ok(query),
        Err(query_error) => match spargebra::SparqlParser::new().parse_update(text) {
            Ok(_) => Err(SparqlError::Update),
            Err(_) => Err(SparqlError::Syntax(query_error.to_string())),
        },
    }
}

fn solutions_format(accept: &str) -> Option<QueryResultsFormat> {
    negotiate(accept, &[
        ("application/sparql-results+json", QueryResultsFormat::Json),
        ("application/json", QueryResultsFormat::Json),
        ("application/sparql-results+xml", QueryResultsFormat::Xml),
        ("application/xml", QueryResultsFormat::Xml),
        ("text/csv", QueryResultsFormat::Csv),
        ("text/tab-separated-values", QueryResultsFormat::Tsv),
    ])
}

fn graph_format(accept: &str) -> Option<RdfFormat> {
    negotiate(accept, &[("application/n-triples", RdfFormat::NTriples), ("text/turtle", RdfFormat::Turtle), ("text/plain", RdfFormat::NTriples)])
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

/// Runs `text` for `tenant` and serializes the results for `accept`.
pub fn answer(memory: &Memory, tenant: &str, text: &str, accept: &str, timeout: Duration) -> Result<Answer, SparqlError> {
    let query = parse(text)?;
    let graph_query = matches!(query, Query::Construct { .. } | Query::Describe { .. });
    // Check the format before doing any work.
    let solutions = if graph_query { None } else { Some(solutions_format(accept).ok_or_else(|| SparqlError::NotAcceptable(accept.to_owned()))?) };
    let graph = if graph_query { Some(graph_format(accept).ok_or_else(|| SparqlError::NotAcceptable(accept.to_owned()))?) } else { None };

    let cancel = CancellationToken::new();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            if finished.recv_timeout(timeout).is_err() {
                cancel.cancel();
                return true;
            }
            false
        })
    };
    let _span = tracing::info_span!("sparql", tenant, graph_query).entered();
    let result = evaluate(memory, tenant, query, solutions, graph, cancel);
    let _ = done.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    match result {
        Err(_) if timed_out => Err(SparqlError::Timeout(timeout.as_secs())),
        other => other,
    }
}

fn evaluate(
    memory: &Memory,
    tenant: &str,
    query: Query,
    solutions: Option<QueryResultsFormat>,
    graph: Option<RdfFormat>,
    cancel: CancellationToken,
) -> Result<Answer, SparqlError> {
    let evaluation = |e: &dyn std::fmt::Display| SparqlError::Evaluation(e.to_string());
    let results = memory.store().query_confined(tenant, query, cancel).map_err(|e| evaluation(&e))?;
    match results {
        QueryResults::Boolean(value) => {
            let format = solutions.unwrap_or(QueryResultsFormat::Json);
            let body = QueryResultsSerializer::from_format(format).serialize_boolean_to_writer(Vec::new(), value).map_err(|e| evaluation(&e))?;
            Ok(Answer { media_type: format.media_type(), body })
        }
        QueryResults::Solutions(iter) => {
            let format = solutions.unwrap_or(QueryResultsFormat::Json);
            let mut writer = QueryResultsSerializer::from_format(format)
                .serialize_solutions_to_writer(Vec::new(), iter.variables().to_vec())
                .map_err(|e| evaluation(&e))?;
            for solution in iter {
                let solution = solution.map_err(|e| evaluation(&e))?;
                writer.serialize(&solution).map_err(|e| evaluation(&e))?;
            }
            Ok(Answer { media_type: format.media_type(), body: writer.finish().map_err(|e| evaluation(&e))? })
        }
        QueryResults::Graph(triples) => {
            let format = graph.unwrap_or(RdfFormat::NTriples);
            let mut writer = RdfSerializer::from_format(format).for_writer(Vec::new());
            for triple in triples {
                let triple = triple.map_err(|e| evaluation(&e))?;
                writer.serialize_triple(&triple).map_err(|e| evaluation(&e))?;
            }
            Ok(Answer { media_type: format.media_type(), body: writer.finish().map_err(|e| evaluation(&e))? })
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
}
