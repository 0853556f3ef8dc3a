//! `hmg serve` beyond MCP: tokens, the tenant-isolation matrix over MCP
//! HTTP, GraphQL and SPARQL, the audit queries through SPARQLWrapper,
//! malformed input, and the explorer page in headless Chromium. The clients
//! come from `scripts/test-clients.sh` (run by `scripts/test.sh`).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::mcp::{Served, assert_success, client_tool};

fn token(store: &Path, tenant: &str, scopes: &[&str]) -> String {
    let mut args = vec!["--tenant", tenant, "token", "create", "--json"];
    for scope in scopes {
        args.extend(["--scope", scope]);
    }
    let out = crate::cli::hmg(store, store.parent().unwrap(), &args);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    created["token"].as_str().unwrap().to_owned()
}

/// The tenant-isolation matrix (`tests/clients/http_surfaces.py`) against
/// a running server, with tokens for alice (read+write), alice (read) and
/// bob.
pub(crate) fn isolation_matrix(url: &str, [alice, alice_read, bob]: [&str; 3], what: &str) {
    let queries = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/audit");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/http_surfaces.py");
    let out = Command::new(client_tool("HMG_TEST_PYTHON"))
        .arg(script)
        .args([url, alice, alice_read, bob])
        .arg(&queries)
        .output()
        .expect("python runs");
    assert_success(&out, what);
}

#[test]
fn tenants_stay_isolated_on_every_http_surface() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let alice = token(&store, "alice", &["memory:read", "memory:write"]);
    let alice_read = token(&store, "alice", &["memory:read"]);
    let bob = token(&store, "bob", &["memory:read,memory:write"]);
    let listed = crate::cli::hmg(&store, tmp.path(), &["token", "list", "--json"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(!text.contains(&alice) && !text.contains(&bob), "secrets are never listed");

    let served = Served::start(&store);
    isolation_matrix(&served.url, [&alice, &alice_read, &bob], "http surfaces");

    // A revoked token stops working at once (the server reloads the file).
    let id = serde_json::from_slice::<Value>(&crate::cli::hmg(&store, tmp.path(), &["token", "list", "--json"]).stdout).unwrap()[2]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = crate::cli::hmg(&store, tmp.path(), &["token", "revoke", &id]);
    assert_eq!(out.status.code(), Some(0));
    let status = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", &format!("Authorization: Bearer {bob}")])
        .arg(format!("{}/sparql?query=ASK%7B%7D", served.url))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&status.stdout), "401");
    assert!(served.stop().success());
    let verify = crate::cli::hmg(&store, tmp.path(), &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
}

#[test]
fn hmg_sparql_runs_a_query_file_against_the_local_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let out = crate::cli::hmg(&store, tmp.path(), &["memorize", "The audit trail starts here"]);
    assert_eq!(out.status.code(), Some(0));
    let query = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/audit/who_changed_what.rq");
    let out = crate::cli::hmg(&store, tmp.path(), &["sparql", query.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("seq,time,actor,action") && text.contains(",memorize,"), "{text}");
    let bad = tmp.path().join("update.rq");
    std::fs::write(&bad, "DELETE WHERE { ?s ?p ?o }").unwrap();
    let out = crate::cli::hmg(&store, tmp.path(), &["sparql", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"));
}

#[test]
fn the_explorer_page_runs_a_query_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let out = crate::cli::hmg(
        &store,
        tmp.path(),
        &["--tenant", "mcp-tester", "memorize", "The explorer shows this memory about Grafana dashboards"],
    );
    assert_eq!(out.status.code(), Some(0));
    let served = Served::start(&store);
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let screenshot = artifacts.join("explorer.png");
    let _ = std::fs::remove_file(&screenshot);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/explorer.js");
    let out = Command::new("node")
        .arg(script)
        .arg(format!("{}/graphql", served.url))
        .arg(&screenshot)
        .env("NODE_PATH", client_tool("HMG_TEST_NODE_MODULES"))
        .output()
        .expect("node runs");
    assert_success(&out, "explorer in chromium");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Grafana dashboards"), "{stdout}");
    // GraphiQL's introspection passed: the docs panel lists the Query fields.
    let fields = stdout.lines().find_map(|line| line.strip_prefix("docs fields: ")).unwrap_or_else(|| panic!("no docs panel: {stdout}"));
    for field in ["atoms", "atom", "entities", "scopes", "stats", "recall"] {
        assert!(fields.split(", ").any(|f| f == field), "the docs panel lists {field}: {fields}");
    }
    assert!(std::fs::metadata(&screenshot).map(|m| m.len() > 10_000).unwrap_or(false), "a screenshot is kept at {}", screenshot.display());
}
