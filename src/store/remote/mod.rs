//! The remote backend: any RDF store that speaks the SPARQL 1.1 Protocol
//! (query and update over HTTP), shared by many HMG nodes.
//!
//! **Invariants**
//! - Every read names its graph in the query sent (`FROM <tenant graph>` or
//!   `GRAPH <g>`); nothing is confined by filtering results.
//! - A commit is ONE SPARQL Update operation, `DELETE {…} INSERT {…} WHERE
//!   {guard}`: the change, its audit entry and the version step apply
//!   together, and only if the version and audit heads the transaction read
//!   are still there (stores do not make several operations of one request
//!   atomic). It is then confirmed by reading back: the new version, or the
//!   transaction's own audit entry when another node has already moved on.
//!   An update whose answer is lost (timeout, broken connection) is confirmed
//!   the same way; if the store cannot be read, the write is reported as
//!   failed, never acknowledged.
//! - Typed literals come back in the store's canonical form (Virtuoso drops
//!   trailing zeros of a time, writes booleans as 1/0); they are read back
//!   into the form HMG writes, so both backends answer the same terms.

mod http;
pub(crate) mod relay;

use std::path::Path;
use std::time::Duration;

use oxigraph::model::vocab::xsd;
use oxigraph::model::{GraphNameRef, Literal, NamedNode, NamedNodeRef, Quad, Term};
use oxigraph::sparql::QuerySolution;
use oxigraph::sparql::results::{QueryResultsFormat, QueryResultsParser, SliceQueryResultsParserOutput};

pub use http::Credentials;

use super::backend::{Backend, ChangeSet, Committed, Guard};
use super::{NamedQuery, Result, StoreError};
use crate::vocab::{STORE_NODE, SYSTEM_GRAPH, hmg};

/// Where a remote store is and how to talk to it.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The SPARQL query endpoint (`http://127.0.0.1:8890/sparql`).
    pub query_url: String,
    /// The update endpoint when it differs from the query endpoint.
    pub update_url: Option<String>,
    /// Authentication.
    pub credentials: Credentials,
    /// Longest wait for one request.
    pub timeout: Duration,
    /// The node that commits for every node (`http://host:port` of its
    /// `hmg serve`), for stores whose updates are not isolated from each
    /// other (Virtuoso); `None`: this node commits itself.
    pub writer: Option<String>,
    /// The secret nodes share to relay commits to the writer node.
    pub node_secret: Option<String>,
}

impl RemoteConfig {
    /// A store at `query_url` (updates at the same URL), no credentials,
    /// 30 s timeout, this node committing itself.
    pub fn new(query_url: impl Into<String>) -> RemoteConfig {
        RemoteConfig {
            query_url: query_url.into(),
            update_url: None,
            credentials: Credentials::None,
            timeout: Duration::from_secs(30),
            writer: None,
            node_secret: None,
        }
    }

    fn check(&self) -> Result<()> {
        for url in std::iter::once(&self.query_url).chain(self.update_url.as_ref()) {
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(char::is_whitespace) {
                return Err(StoreError::Config(format!("the store URL {url:?} is not an http:// or https:// URL")));
            }
        }
        if self.timeout.is_zero() {
            return Err(StoreError::Config("the store request timeout must be above zero".to_owned()));
        }
        if let Some(writer) = &self.writer {
            if !(writer.starts_with("http://") || writer.starts_with("https://")) {
                return Err(StoreError::Config(format!("the writer node {writer:?} is not an http:// or https:// URL")));
            }
            if self.node_secret.as_deref().is_none_or(|s| s.len() < 16) {
                return Err(StoreError::Config(
                    "relaying commits to a writer node needs HMG_NODE_SECRET (16 characters or more)".to_owned(),
                ));
            }
        }
        Ok(())
    }
}

/// What a remote store answered to a query.
#[derive(Debug)]
pub(crate) enum Answered {
    /// ASK.
    Boolean(bool),
    /// SELECT: variables and rows.
    Solutions(Vec<oxigraph::sparql::Variable>, Vec<QuerySolution>),
    /// CONSTRUCT or DESCRIBE.
    Graph(Vec<oxigraph::model::Triple>),
}

/// Whether a printed query calls a SERVICE.
fn calls_a_service(text: &str) -> bool {
    static SERVICE: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(?i)\bSERVICE\s+(SILENT\s+)?[<?$]").ok());
    SERVICE.as_ref().is_none_or(|pattern| pattern.is_match(text))
}

/// A SPARQL 1.1 store over HTTP.
#[derive(Debug)]
pub(crate) struct Remote {
    config: RemoteConfig,
    client: http::Client,
    /// Serializes this process's commits, its own and those relayed to it.
    commits: std::sync::Mutex<()>,
}

const RESULTS_JSON: &str = "application/sparql-results+json";

/// Quads per `INSERT DATA` of a migration.
const LOAD_BATCH: usize = 2000;

impl Remote {
    /// Connects and checks that the store answers queries.
    pub(crate) fn connect(config: RemoteConfig) -> Result<Remote> {
        config.check()?;
        let client = http::Client::new(config.credentials.clone(), config.timeout);
        let remote = Remote { config, client, commits: std::sync::Mutex::new(()) };
        remote.ask("ASK { }")?;
        tracing::info!(endpoint = %remote.config.query_url, "connected to the SPARQL store");
        Ok(remote)
    }

    fn update_url(&self) -> &str {
        self.config.update_url.as_deref().unwrap_or(&self.config.query_url)
    }

    fn error(&self, url: &str, message: impl Into<String>) -> StoreError {
        StoreError::Remote { endpoint: url.to_owned(), message: message.into() }
    }

    /// Sends a query, checking the status; the answer's body and type.
    pub(crate) fn query_raw(&self, text: &str, accept: &str) -> Result<http::Answer> {
        let url = &self.config.query_url;
        let span = tracing::debug_span!("sparql_query", endpoint = %url, bytes = text.len());
        let _entered = span.enter();
        let answer = self.client.post_form(url, "query", text, accept)?;
        if !(200..300).contains(&answer.status) {
            return Err(self.error(url, format!("answered HTTP {} to a query: {}", answer.status, excerpt(&answer.body))));
        }
        Ok(answer)
    }

    /// Refuses an answer of `count` rows the store may have cut at its
    /// result cap `cap`: Virtuoso stops at `ResultSetMaxRows` (10,000 as
    /// packaged) and says so only in a header (`X-SPARQL-MaxRows`), so a
    /// large tenant's change feed, listing or export would come back short
    /// and be taken for whole. An answer the query's own `limit` ended is
    /// whole.
    fn whole(&self, count: usize, cap: Option<u64>, limit: Option<usize>) -> Result<()> {
        let Some(cap) = cap else { return Ok(()) };
        if (count as u64) < cap || limit.is_some_and(|limit| limit <= count) {
            return Ok(());
        }
        Err(StoreError::Cut { endpoint: self.config.query_url.clone(), cap })
    }

    fn solutions(&self, text: &str) -> Result<Vec<QuerySolution>> {
        match self.results(text, None)? {
            Answered::Solutions(_, rows) => Ok(rows),
            _ => Err(self.error(&self.config.query_url, "answered a boolean where solutions were expected")),
        }
    }

    /// A SELECT or ASK query's results, terms in HMG's form; an answer
    /// cut at the store's result cap is an error ([`Remote::whole`]), unless
    /// the query's own `limit` ended it.
    fn results(&self, text: &str, limit: Option<usize>) -> Result<Answered> {
        let answer = self.query_raw(text, RESULTS_JSON)?;
        let url = &self.config.query_url;
        let bad = |e: &dyn std::fmt::Display| {
            self.error(url, format!("answered something that is not SPARQL JSON results ({e}): {}", excerpt(&answer.body)))
        };
        match QueryResultsParser::from_format(QueryResultsFormat::Json).for_slice(&answer.body).map_err(|e| bad(&e))? {
            SliceQueryResultsParserOutput::Solutions(solutions) => {
                let variables = solutions.variables().to_vec();
                let mut rows = Vec::new();
                for solution in solutions {
                    let solution = solution.map_err(|e| bad(&e))?;
                    let variables = solution.variables().to_vec();
                    let values: Vec<Option<Term>> = solution.values().iter().map(|v| v.clone().map(canonical)).collect();
                    rows.push(QuerySolution::from((variables, values)));
                }
                self.whole(rows.len(), answer.max_rows, limit)?;
                Ok(Answered::Solutions(variables, rows))
            }
            SliceQueryResultsParserOutput::Boolean(value) => Ok(Answered::Boolean(value)),
        }
    }

    /// A caller's own read-only query, confined to `tenant`'s graph in the
    /// query sent: its dataset (FROM / FROM NAMED) is replaced by that one
    /// graph, whatever it said; SERVICE is refused before anything is sent.
    pub(crate) fn query_confined(&self, tenant: &str, mut query: spargebra::Query) -> Result<Answered> {
        let graph = super::tenant_graph(tenant);
        let confined = Some(spargebra::algebra::QueryDataset { default: vec![graph.clone()], named: Some(vec![graph]) });
        let graph_form = matches!(query, spargebra::Query::Construct { .. } | spargebra::Query::Describe { .. });
        let limit = match &query {
            spargebra::Query::Select { pattern: spargebra::algebra::GraphPattern::Slice { length, .. }, .. }
            | spargebra::Query::Construct { pattern: spargebra::algebra::GraphPattern::Slice { length, .. }, .. }
            | spargebra::Query::Describe { pattern: spargebra::algebra::GraphPattern::Slice { length, .. }, .. } => *length,
            _ => None,
        };
        match &mut query {
            spargebra::Query::Select { dataset, .. }
            | spargebra::Query::Ask { dataset, .. }
            | spargebra::Query::Construct { dataset, .. }
            | spargebra::Query::Describe { dataset, .. } => *dataset = confined,
        }
        let text = query.to_string();
        if calls_a_service(&text) {
            return Err(StoreError::Query { name: "sparql", message: "SERVICE (federated queries) is not allowed".to_owned() });
        }
        if !graph_form {
            return self.results(&text, limit);
        }
        let answer = self.query_raw(&text, "application/n-triples")?;
        let mut triples = Vec::new();
        for triple in oxigraph::io::RdfParser::from_format(oxigraph::io::RdfFormat::NTriples).for_slice(&answer.body) {
            let triple = triple.map_err(|e| self.error(&self.config.query_url, format!("answered N-Triples that do not parse: {e}")))?;
            triples.push(oxigraph::model::Triple::new(triple.subject, triple.predicate, canonical(triple.object)));
        }
        // Virtuoso cuts a graph at its cap too but names the cap in no
        // header: a store that says so is heard (a query's LIMIT counts
        // solutions, not triples); Virtuoso's graphs are as whole as its
        // cap allows (README, "Stores").
        if limit.is_none() {
            self.whole(triples.len(), answer.max_rows, None)?;
        }
        Ok(Answered::Graph(triples))
    }

    fn ask(&self, text: &str) -> Result<bool> {
        match self.results(text, None)? {
            Answered::Boolean(value) => Ok(value),
            Answered::Solutions(..) | Answered::Graph(_) => Err(self.error(&self.config.query_url, "did not answer an ASK with a boolean")),
        }
    }

    fn update(&self, text: &str) -> Result<()> {
        let url = self.update_url();
        let span = tracing::debug_span!("sparql_update", endpoint = %url, bytes = text.len());
        let _entered = span.enter();
        let answer = self.client.post_form(url, "update", text, "*/*")?;
        if !(200..300).contains(&answer.status) {
            return Err(self.error(url, format!("refused an update with HTTP {}: {}", answer.status, excerpt(&answer.body))));
        }
        Ok(())
    }

    /// Applies a commit from this process or relayed to it: one at a time,
    /// the guard checked by a read, then the guarded update, then the
    /// confirmation. The check makes commits serializable on a store that
    /// does not isolate concurrent updates, provided every commit to the
    /// store passes here (one writer node); the guard in the update keeps
    /// them serializable on a store that does.
    pub(crate) fn commit_here(&self, changes: &ChangeSet, guard: &Guard) -> Result<Committed> {
        let _one = self.commits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !self.ask(&format!("ASK {{\n{}}}", guard_patterns(guard)))? {
            return Ok(Committed::Lost);
        }
        let text = guarded_update(changes, guard);
        if let Err(error) = self.update(&text) {
            // The answer may be lost after the store applied it.
            return match self.confirmed(changes) {
                Ok(true) => Ok(Committed::Applied),
                Ok(false) | Err(_) => Err(error),
            };
        }
        if self.confirmed(changes)? { Ok(Committed::Applied) } else { Ok(Committed::Lost) }
    }

    /// Whether a commit is in the store. Exact when the commit wrote an
    /// audit entry (its IRI is unique and never deleted: the entry exists
    /// if and only if this commit applied). Otherwise (bookkeeping: usage
    /// stamps, initialization) the new version is looked for, which another
    /// writer that read the same version could also have written.
    fn confirmed(&self, changes: &ChangeSet) -> Result<bool> {
        let witness = changes.inserted().find(|q| q.subject.to_string().starts_with("<urn:hmg:audit:"));
        let version =
            changes.inserted().find(|q| q.predicate.as_ref() == hmg::SNAPSHOT_VERSION && q.graph_name.as_ref() == SYSTEM_GRAPH.into());
        let text = match (witness, version) {
            (Some(quad), _) | (None, Some(quad)) => {
                format!("ASK {{ GRAPH {} {{ {} {} {} }} }}", quad.graph_name, quad.subject, quad.predicate, quad.object)
            }
            (None, None) => return Ok(true),
        };
        self.ask(&text)
    }
}

/// Subjects described per query: 200 atoms of ~25 quads are half of
/// Virtuoso's packaged result cap (10,000 rows).
const DESCRIBED_PER_QUERY: usize = 200;

impl Remote {
    /// Adds every quad of `subjects` in `graph` to `quads`. A store that cuts
    /// the answer at its result cap is asked again for each half, down to
    /// one subject, so a cap the tenant's atoms fit in is no error.
    fn describe_into(&self, subjects: &[NamedNode], graph: NamedNodeRef<'_>, quads: &mut Vec<Quad>) -> Result<()> {
        let values: String = subjects.iter().map(|s| format!("{s} ")).collect();
        let text = format!("SELECT ?s ?p ?o WHERE {{ GRAPH {graph} {{ VALUES ?s {{ {values}}} ?s ?p ?o }} }}");
        let rows = match self.solutions(&text) {
            Err(StoreError::Cut { .. }) if subjects.len() > 1 => {
                let (first, second) = subjects.split_at(subjects.len() / 2);
                self.describe_into(first, graph, quads)?;
                return self.describe_into(second, graph, quads);
            }
            answer => answer?,
        };
        for row in rows {
            if let (Some(Term::NamedNode(s)), Some(Term::NamedNode(p)), Some(o)) = (row.get("s"), row.get("p"), row.get("o")) {
                quads.push(Quad::new(s.clone(), p.clone(), o.clone(), graph.into_owned()));
            }
        }
        Ok(())
    }
}

impl Backend for Remote {
    fn location(&self) -> String {
        self.config.query_url.clone()
    }

    fn shared(&self) -> bool {
        true
    }

    fn select(&self, query: NamedQuery, graph: Option<&NamedNode>, bindings: &[(&str, Term)]) -> Result<Vec<QuerySolution>> {
        let text = confined_text(query, graph, bindings)?;
        self.solutions(&text)
    }

    fn quads(
        &self,
        subject: Option<NamedNodeRef<'_>>,
        predicate: Option<NamedNodeRef<'_>>,
        object: Option<&Term>,
        graph: GraphNameRef<'_>,
    ) -> Result<Vec<Quad>> {
        let GraphNameRef::NamedNode(graph_node) = graph else {
            return Err(StoreError::Corrupt("HMG keeps nothing in the default graph of a remote store".to_owned()));
        };
        let s = subject.map_or_else(|| "?s".to_owned(), |s| s.to_string());
        let p = predicate.map_or_else(|| "?p".to_owned(), |p| p.to_string());
        let o = object.map_or_else(|| "?o".to_owned(), ToString::to_string);
        let text = format!("SELECT * WHERE {{ GRAPH {graph_node} {{ {s} {p} {o} }} }}");
        let mut quads = Vec::new();
        for row in self.solutions(&text)? {
            let subject: oxigraph::model::NamedOrBlankNode = match (subject, row.get("s")) {
                (Some(s), _) => s.into_owned().into(),
                (None, Some(Term::NamedNode(s))) => s.clone().into(),
                (None, Some(Term::BlankNode(s))) => s.clone().into(),
                _ => continue,
            };
            let predicate = match (predicate, row.get("p")) {
                (Some(p), _) => p.into_owned(),
                (None, Some(Term::NamedNode(p))) => p.clone(),
                _ => continue,
            };
            let object = match (object, row.get("o")) {
                (Some(o), _) => o.clone(),
                (None, Some(o)) => o.clone(),
                _ => continue,
            };
            quads.push(Quad::new(subject, predicate, object, graph_node.into_owned()));
        }
        Ok(quads)
    }

    fn describe_many(&self, subjects: &[NamedNode], graph: GraphNameRef<'_>) -> Result<Vec<Quad>> {
        let GraphNameRef::NamedNode(graph_node) = graph else {
            return Err(StoreError::Corrupt("HMG keeps nothing in the default graph of a remote store".to_owned()));
        };
        let mut quads = Vec::new();
        for chunk in subjects.chunks(DESCRIBED_PER_QUERY) {
            self.describe_into(chunk, graph_node, &mut quads)?;
        }
        Ok(quads)
    }

    fn graphs(&self) -> Result<Vec<NamedNode>> {
        let text = "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } FILTER(STRSTARTS(STR(?g), \"urn:hmg:\")) }";
        Ok(self
            .solutions(text)?
            .into_iter()
            .filter_map(|row| match row.get("g") {
                Some(Term::NamedNode(g)) => Some(g.clone()),
                _ => None,
            })
            .collect())
    }

    fn commit(&self, changes: &ChangeSet, guard: &Guard) -> Result<Committed> {
        if changes.is_empty() {
            return Ok(Committed::Applied);
        }
        match &self.config.writer {
            Some(writer) => relay::commit(&self.client, writer, self.config.node_secret.as_deref().unwrap_or(""), changes, guard),
            None => self.commit_here(changes, guard),
        }
    }

    fn load(&self, quads: &[Quad]) -> Result<()> {
        for chunk in quads.chunks(LOAD_BATCH) {
            self.update(&format!("INSERT DATA {{\n{}}}", graph_blocks(chunk.iter())))?;
        }
        Ok(())
    }

    fn as_remote(&self) -> Option<&Remote> {
        Some(self)
    }

    fn root(&self) -> Option<&Path> {
        None
    }
}

/// A named query's text for the store: bindings written in, the dataset set
/// to `graph` (`FROM` and `FROM NAMED`), printed back from the parsed algebra.
fn confined_text(query: NamedQuery, graph: Option<&NamedNode>, bindings: &[(&str, Term)]) -> Result<String> {
    let query_error = |message: String| StoreError::Query { name: query.name(), message };
    let mut text = query.text().to_owned();
    for (name, term) in bindings {
        let pattern = regex::Regex::new(&format!(r"\?{}\b", regex::escape(name))).map_err(|e| query_error(e.to_string()))?;
        let split = text.find("WHERE").ok_or_else(|| query_error("no WHERE clause".to_owned()))?;
        let (head, body) = text.split_at(split);
        let head = pattern.replace_all(head, format!("({term} AS ?{name})").as_str()).into_owned();
        let body = pattern.replace_all(body, term.to_string().as_str()).into_owned();
        text = head + &body;
    }
    let mut parsed = spargebra::SparqlParser::new().parse_query(&text).map_err(|e| query_error(e.to_string()))?;
    if let Some(graph) = graph
        && let spargebra::Query::Select { dataset, .. } = &mut parsed
    {
        *dataset = Some(spargebra::algebra::QueryDataset { default: vec![graph.clone()], named: Some(vec![graph.clone()]) });
    }
    Ok(parsed.to_string())
}

/// `GRAPH <g> { s p o . … }` blocks, one per graph.
fn graph_blocks<'a>(quads: impl Iterator<Item = &'a Quad>) -> String {
    let mut by_graph: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    for quad in quads {
        let block = by_graph.entry(quad.graph_name.to_string()).or_default();
        block.push_str(&format!("{} {} {} .\n", quad.subject, quad.predicate, quad.object));
    }
    by_graph.into_iter().map(|(graph, triples)| format!("GRAPH {graph} {{\n{triples}}}\n")).collect()
}

/// The one guarded update of a commit.
fn guarded_update(changes: &ChangeSet, guard: &Guard) -> String {
    let mut text = String::new();
    if !changes.removed.is_empty() {
        text.push_str(&format!("DELETE {{\n{}}}\n", graph_blocks(changes.removed.iter())));
    }
    text.push_str(&format!("INSERT {{\n{}}}\n", graph_blocks(changes.inserted())));
    text.push_str("WHERE {\n");
    text.push_str(&guard_patterns(guard));
    text.push('}');
    text
}

/// The WHERE patterns that hold while `guard` does.
fn guard_patterns(guard: &Guard) -> String {
    let mut text = String::new();
    match guard.version {
        Some(version) => {
            text.push_str(&format!("GRAPH {SYSTEM_GRAPH} {{ {STORE_NODE} {} {} }}\n", hmg::SNAPSHOT_VERSION, Literal::from(version)))
        }
        None => {
            text.push_str(&format!("FILTER NOT EXISTS {{ GRAPH {SYSTEM_GRAPH} {{ {STORE_NODE} {} ?version }} }}\n", hmg::SNAPSHOT_VERSION))
        }
    }
    for (graph, head) in &guard.audit_heads {
        match head {
            Some(entry) => text.push_str(&format!("GRAPH {graph} {{ {graph} {} {entry} }}\n", hmg::AUDIT_HEAD)),
            None => text.push_str(&format!("FILTER NOT EXISTS {{ GRAPH {graph} {{ {graph} {} ?head }} }}\n", hmg::AUDIT_HEAD)),
        }
    }
    text
}

/// A typed literal in the lexical form HMG writes (stores may answer their
/// own canonical form: `1` for `true`, a time without its `.000`).
fn canonical(term: Term) -> Term {
    let Term::Literal(literal) = &term else { return term };
    let datatype = literal.datatype();
    let value = literal.value();
    let canonical = if datatype == xsd::BOOLEAN {
        match value {
            "1" | "true" => Some(Literal::from(true)),
            "0" | "false" => Some(Literal::from(false)),
            _ => None,
        }
    } else if datatype == xsd::INTEGER {
        value.parse::<i64>().ok().map(Literal::from)
    } else if datatype == xsd::DOUBLE {
        value.parse::<f64>().ok().map(Literal::from)
    } else if datatype == xsd::DATE_TIME {
        chrono::DateTime::parse_from_rfc3339(value)
            .ok()
            .map(|t| Literal::new_typed_literal(canonical_datetime(t.with_timezone(&chrono::Utc)), xsd::DATE_TIME))
    } else {
        None
    };
    canonical.map_or(term, Term::Literal)
}

/// The canonical lexical form of a UTC date-time, as Oxigraph prints a
/// stored one: the fraction without trailing zeros, none when whole, `Z`.
fn canonical_datetime(time: chrono::DateTime<chrono::Utc>) -> String {
    let mut text = time.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = time.timestamp_subsec_nanos();
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// The start of an answer, for error messages.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().filter(|c| !c.is_control() || *c == ' ').take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_are_written_in_and_the_dataset_is_the_tenant_graph() {
        let graph = crate::store::tenant_graph("alice");
        let atom = crate::store::atom_iri(ulid::Ulid::generate());
        let text = confined_text(NamedQuery::RevisionsOf, Some(&graph), &[("atom", atom.clone().into())]).unwrap();
        assert!(text.contains(&format!("FROM {graph}")), "{text}");
        assert!(text.contains(&format!("FROM NAMED {graph}")), "{text}");
        assert!(text.contains(&format!("{atom} AS ?atom")), "{text}");
        assert!(!text.contains("?atom ."), "{text}");
        let since = confined_text(NamedQuery::ChangesSince, None, &[("since", Literal::from(5_i64).into())]).unwrap();
        assert!(!since.contains("FROM"), "{since}");
        assert!(since.contains("> 5") || since.contains("\"5\"^^"), "{since}");
    }

    #[test]
    fn a_guarded_update_is_one_operation() {
        let mut changes = ChangeSet::default();
        let graph = crate::store::tenant_graph("山田");
        changes.insert(Quad::new(
            NamedNode::new_unchecked("urn:hmg:atom:1"),
            hmg::CONTENT,
            Literal::from("a \"quoted\"\nline"),
            graph.clone(),
        ));
        changes.remove(Quad::new(STORE_NODE, hmg::SNAPSHOT_VERSION, Literal::from(4_i64), SYSTEM_GRAPH));
        let guard = Guard { version: Some(4), audit_heads: vec![(graph.clone(), None)] };
        let text = guarded_update(&changes, &guard);
        let parsed = spargebra::SparqlParser::new().parse_update(&text).unwrap();
        assert_eq!(parsed.operations.len(), 1, "{text}");
        assert!(text.contains("FILTER NOT EXISTS"), "{text}");
    }

    #[test]
    fn literals_come_back_in_hmg_form() {
        let t = |value: &str, datatype| Term::Literal(Literal::new_typed_literal(value, datatype));
        assert_eq!(canonical(t("1", xsd::BOOLEAN)), Term::Literal(Literal::from(true)));
        assert_eq!(canonical(t("007", xsd::INTEGER)), Term::Literal(Literal::from(7_i64)));
        assert_eq!(canonical(Term::Literal(Literal::from("x"))), Term::Literal(Literal::from("x")));
        // Whatever form a store answers, the date-time comes back as the
        // embedded store answers HMG's own (millisecond) form.
        let store = oxigraph::store::Store::new().unwrap();
        let g = NamedNode::new_unchecked("urn:g");
        for (i, value) in ["2026-12-01T01:02:03.120Z", "2026-12-01T01:02:03.000Z", "2026-12-01T01:02:03.123Z"].iter().enumerate() {
            let p = NamedNode::new_unchecked(format!("urn:p{i}"));
            store.insert(&Quad::new(g.clone(), p, Literal::new_typed_literal(*value, xsd::DATE_TIME), g.clone())).unwrap();
        }
        for quad in store.iter() {
            let object = quad.unwrap().object;
            assert_eq!(canonical(object.clone()), object);
        }
        // Virtuoso's answers for the same values.
        assert_eq!(canonical(t("2026-12-01T01:02:03.120000Z", xsd::DATE_TIME)), t("2026-12-01T01:02:03.12Z", xsd::DATE_TIME));
        assert_eq!(canonical(t("2026-12-01T01:02:03Z", xsd::DATE_TIME)), t("2026-12-01T01:02:03Z", xsd::DATE_TIME));
    }

    #[test]
    fn a_bad_url_is_a_configuration_error() {
        for url in ["ftp://x/sparql", "127.0.0.1:8890/sparql", "http://a b/"] {
            assert!(matches!(RemoteConfig::new(url).check(), Err(StoreError::Config(_))), "{url}");
        }
    }
}
