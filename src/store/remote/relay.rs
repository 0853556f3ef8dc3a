//! Commits relayed to the writer node, for stores that do not isolate
//! concurrent updates (Virtuoso evaluates the `WHERE` of two concurrent
//! `DELETE/INSERT` operations before either writes, so both guards pass).
//! Every node reads the store itself; every commit goes through one
//! process, the writer node, which checks each guard and applies it one at
//! a time ([`super::Remote::commit_here`]).
//!
//! Wire format (`POST /internal/v1/commit` on the writer's `hmg serve`,
//! header `X-HMG-Node-Secret`): `{"removed": N-Quads, "inserted": N-Quads,
//! "version": n | null, "audit_heads": [[graph IRI, entry IRI | null]]}`;
//! the answer `{"committed": "applied" | "lost"}`, or an error status with
//! `{"error": message}`.

use oxigraph::io::{RdfFormat, RdfParser};
use oxigraph::model::NamedNode;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::super::backend::{ChangeSet, Committed, Guard};
use super::super::{Result, Store, StoreError};
use super::http::Client;

/// The path of the writer node's commit endpoint.
pub(crate) const COMMIT_PATH: &str = "/internal/v1/commit";

/// The header carrying the shared node secret.
pub(crate) const SECRET_HEADER: &str = "x-hmg-node-secret";

/// Largest relayed commit accepted.
pub(crate) const MAX_COMMIT_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    removed: String,
    inserted: String,
    version: Option<i64>,
    audit_heads: Vec<(String, Option<String>)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    #[serde(default)]
    committed: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

fn nquads<'a>(quads: impl Iterator<Item = &'a oxigraph::model::Quad>) -> String {
    quads.map(|q| format!("{q} .\n")).collect()
}

/// Sends a commit to the writer node.
pub(crate) fn commit(client: &Client, writer: &str, secret: &str, changes: &ChangeSet, guard: &Guard) -> Result<Committed> {
    let url = format!("{}{COMMIT_PATH}", writer.trim_end_matches('/'));
    let wire = Wire {
        removed: nquads(changes.removed.iter()),
        inserted: nquads(changes.inserted()),
        version: guard.version,
        audit_heads: guard.audit_heads.iter().map(|(g, h)| (g.as_str().to_owned(), h.as_ref().map(|h| h.as_str().to_owned()))).collect(),
    };
    let body = serde_json::to_vec(&wire).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let span = tracing::debug_span!("relay_commit", writer = %url, bytes = body.len());
    let _entered = span.enter();
    let answer = client.post_json(&url, &body, &[(SECRET_HEADER, secret)])?;
    let unavailable = |message: String| StoreError::Remote { endpoint: url.clone(), message };
    let parsed: Answer = serde_json::from_slice(&answer.body)
        .map_err(|_| unavailable(format!("(the writer node) answered HTTP {} without a commit result", answer.status)))?;
    match (answer.status, parsed.committed.as_deref(), parsed.error) {
        (200, Some("applied"), _) => Ok(Committed::Applied),
        (200, Some("lost"), _) => Ok(Committed::Lost),
        (status, _, error) => {
            Err(unavailable(format!("(the writer node) refused the commit with HTTP {status}: {}", error.unwrap_or_default())))
        }
    }
}

/// Why the writer node did not apply a relayed commit.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    /// No or a wrong secret, or this node is not a writer node.
    #[error("{0}")]
    Refused(&'static str),
    /// A body that is not a commit.
    #[error("malformed commit: {0}")]
    Malformed(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whether `given` is the node secret `expected` (compared in constant time
/// over digests).
pub(crate) fn secret_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (sha2::Sha256::digest(expected.as_bytes()), sha2::Sha256::digest(given.as_bytes()));
    a.iter().zip(b.iter()).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The writer node's side: applies a relayed commit to `store`.
pub(crate) fn apply(store: &Store, body: &[u8]) -> std::result::Result<Committed, RelayError> {
    let Some(remote) = store.remote() else { return Err(RelayError::Refused("this node's store is not a remote store")) };
    let wire: Wire = serde_json::from_slice(body).map_err(|e| RelayError::Malformed(e.to_string()))?;
    let parse = |text: &str| -> std::result::Result<Vec<oxigraph::model::Quad>, RelayError> {
        RdfParser::from_format(RdfFormat::NQuads)
            .for_slice(text.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| RelayError::Malformed(e.to_string()))
    };
    let mut changes = ChangeSet::default();
    for quad in parse(&wire.removed)? {
        changes.remove(quad);
    }
    for quad in parse(&wire.inserted)? {
        changes.insert(quad);
    }
    let node = |iri: String| NamedNode::new(iri).map_err(|e| RelayError::Malformed(e.to_string()));
    let mut audit_heads = Vec::new();
    for (graph, head) in wire.audit_heads {
        audit_heads.push((node(graph)?, head.map(node).transpose()?));
    }
    Ok(remote.commit_here(&changes, &Guard { version: wire.version, audit_heads })?)
}

/// The answer body for a commit result.
pub(crate) fn answer_body(committed: Committed) -> serde_json::Value {
    serde_json::json!({ "committed": if committed == Committed::Applied { "applied" } else { "lost" } })
}
