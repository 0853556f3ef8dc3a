//! HMG over a remote SPARQL 1.1 store: Virtuoso Open Source 7 (Debian's
//! `virtuoso-opensource`, installed by `scripts/test.sh`), one throwaway
//! instance per test started by `scripts/virtuoso.sh` on free loopback
//! ports, SPARQL update granted to a test account behind HTTP Digest.
//! The facade scenario runs on both backends and must answer the same.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hmg::{
    Caller, CorrectAction, CorrectRequest, Effect, GovernAction, GovernRequest, MemorizeRequest, Memory, MemoryOptions, RecallRequest,
    RemoteConfig, Scope, StoreCredentials,
};
use serde_json::Value;

use crate::mcp::{Served, assert_success, client_tool};

/// One Virtuoso for one test, stopped (and its files removed) on drop.
pub(crate) struct Virtuoso {
    dir: PathBuf,
    /// Query + update endpoint (Digest).
    pub(crate) url: String,
    /// Anonymous read endpoint.
    pub(crate) read_url: String,
    user: String,
    password: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/virtuoso.sh")
}

impl Virtuoso {
    pub(crate) fn start() -> Virtuoso {
        Virtuoso::start_capped(None)
    }

    /// A Virtuoso that cuts every answer at `max_rows` (its
    /// `ResultSetMaxRows`), else at the scripts' 10,000,000.
    pub(crate) fn start_capped(max_rows: Option<u64>) -> Virtuoso {
        let dir = tempfile::Builder::new().prefix("hmg-virtuoso-").tempdir().unwrap().keep();
        let mut command = Command::new(script());
        if let Some(max_rows) = max_rows {
            command.env("HMG_TEST_VIRTUOSO_MAX_ROWS", max_rows.to_string());
        }
        let out = command.arg("start").arg(&dir).output().expect("scripts/virtuoso.sh runs");
        assert!(
            out.status.success(),
            "Virtuoso did not start (scripts/test.sh installs virtuoso-opensource): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = String::from_utf8_lossy(&out.stdout).into_owned();
        let value = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}='")).and_then(|v| v.strip_suffix('\'')).map(str::to_owned))
                .unwrap_or_else(|| panic!("{name} in {env}"))
        };
        let url = value("HMG_TEST_VIRTUOSO_QUERY");
        let read_url = url.trim_end_matches("-auth").to_owned();
        Virtuoso { dir, url, read_url, user: value("HMG_TEST_VIRTUOSO_USER"), password: value("HMG_TEST_VIRTUOSO_PASSWORD") }
    }

    pub(crate) fn config(&self) -> RemoteConfig {
        RemoteConfig {
            credentials: StoreCredentials::Password { user: self.user.clone(), password: self.password.clone() },
            ..RemoteConfig::new(self.url.clone())
        }
    }

    /// `hmg` arguments and environment that select this store.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![("HMG_STORE_URL", self.url.clone()), ("HMG_STORE_USER", self.user.clone()), ("HMG_STORE_PASSWORD", self.password.clone())]
    }

    /// Runs a query on the anonymous endpoint; the JSON results.
    pub(crate) fn query(&self, query: &str) -> Value {
        let out = Command::new("curl")
            .args(["-s", "-H", "Accept: application/sparql-results+json", "--data-urlencode"])
            .arg(format!("query={query}"))
            .arg(&self.read_url)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    }
}

impl Drop for Virtuoso {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
    }
}

fn hmg(node: &Path, virtuoso: Option<&Virtuoso>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hmg"));
    command.args(["--store"]).arg(node).args(args).env("USER", "remote-tester").env_remove("HMG_STORE_URL");
    if let Some(virtuoso) = virtuoso {
        command.envs(virtuoso.env());
    }
    command.output().expect("hmg runs")
}

fn caller(tenant: &str) -> Caller {
    Caller::new(Scope::tenant(tenant).with_workspace("acme").with_repository("api").with_branch("main"), "test")
}

/// What the facade scenario observed, compared across backends.
#[derive(Debug, PartialEq)]
struct Observed {
    effects: Vec<String>,
    recalled: Vec<String>,
    audit_entries: Vec<u64>,
    atoms: u64,
    edges: u64,
}

/// Memorize (three languages, a duplicate), correct twice, negate,
/// tombstone, recall, audit: the same on either backend.
fn scenario(memory: &Memory) -> Observed {
    let alice = caller("alice");
    let bob = caller("bob");
    let mut effects = Vec::new();
    let mut memorize = |caller: &Caller, text: &str| {
        let outcome = memory.memorize(caller, MemorizeRequest::new(text).with_source("user")).unwrap();
        effects.push(format!("{:?}", outcome.effect));
        outcome.atom_id
    };
    let helm = memorize(&alice, "We deploy the payments service with Helm 3").unwrap();
    memorize(&alice, "数据库每周五晚上十点备份");
    memorize(&alice, "ステージング環境は毎朝6時に更新される");
    memorize(&alice, "We deploy the payments service with Helm 3");
    let secret = memorize(&alice, "The staging password is hunter2-staging-9931, keep it safe").unwrap();
    memorize(&bob, "Bob's team deploys with Argo CD");
    let replace = |target: &str, content: &str| CorrectRequest {
        target_atom: target.to_owned(),
        action: CorrectAction::Replace,
        reason: "upgraded".to_owned(),
        new_content: Some(content.to_owned()),
    };
    let first = memory.correct(&alice, replace(&helm, "We deploy the payments service with Helm 3.14")).unwrap();
    let second =
        memory.correct(&alice, replace(first.new_atom_id.as_deref().unwrap(), "We deploy the payments service with Helm 3.15")).unwrap();
    effects.push(format!("{:?} {:?}", first.effect, second.effect));
    // The superseded head cannot be replaced again: one active atom per chain.
    let stale = memory.correct(&alice, replace(&helm, "Helm 2"));
    effects.push(format!("stale replace refused: {}", stale.is_err() || stale.is_ok_and(|o| o.effect != Effect::Applied)));
    let governed = memory
        .govern(
            &alice,
            GovernRequest {
                target_atom: secret,
                action: GovernAction::Tombstone,
                reason: "a secret in memory".to_owned(),
                lesson_content: None,
            },
        )
        .unwrap();
    effects.push(format!("{:?}", governed.effect));
    // The best hit (ties further down may order by id, which differs per run).
    let recalled = memory
        .recall(&alice, RecallRequest::new("how do we deploy payments with Helm"))
        .unwrap()
        .atoms
        .into_iter()
        .take(1)
        .map(|a| a.content)
        .collect();
    let audit_entries: Vec<u64> = memory
        .verify_audit(None)
        .unwrap()
        .iter()
        .map(|v| {
            assert!(v.first_broken.is_none(), "{v:?}");
            v.entries
        })
        .collect();
    let stats = memory.stats(&alice).unwrap();
    Observed { effects, recalled, audit_entries, atoms: stats.atoms, edges: stats.edges }
}

#[test]
fn the_facade_answers_the_same_on_virtuoso_as_embedded() {
    let tmp = tempfile::tempdir().unwrap();
    let embedded = Memory::open(&tmp.path().join("embedded")).unwrap();
    let expected = scenario(&embedded);
    drop(embedded);

    let virtuoso = Virtuoso::start();
    let remote = Memory::open_with(Some(&tmp.path().join("node")), MemoryOptions::default().with_remote(virtuoso.config())).unwrap();
    let observed = scenario(&remote);
    assert_eq!(observed, expected);
    assert!(observed.recalled[0].contains("Helm 3.15"), "{observed:?}");

    // Tombstone deleted every quad of the content from the remote store.
    let leaked = virtuoso.query("ASK { GRAPH ?g { ?s ?p ?o FILTER(CONTAINS(STR(?o), \"hunter2\")) } }");
    assert_eq!(leaked["boolean"], Value::Bool(false), "{leaked}");
    // Tenants are graphs of the remote store.
    let graphs = virtuoso.query("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } FILTER(STRSTARTS(STR(?g), \"urn:hmg:tenant:\")) }");
    assert_eq!(graphs["results"]["bindings"].as_array().unwrap().len(), 2, "{graphs}");

    // A second process on the same node directory is refused the node, not
    // the store: it relays (CLI commands) through the first.
    drop(remote);
    let out = hmg(&tmp.path().join("node"), Some(&virtuoso), &["--tenant", "alice", "audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_wrong_password_or_a_dead_store_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start();
    let node = tmp.path().join("node");
    let out = Command::new(env!("CARGO_BIN_EXE_hmg"))
        .args(["--store"])
        .arg(&node)
        .args(["stats", "--json"])
        .envs(virtuoso.env())
        .env("HMG_STORE_PASSWORD", "wrong")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains(&virtuoso.url) && stderr.contains("401"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_hmg"))
        .args(["--store"])
        .arg(&node)
        .args(["stats", "--store-url", "http://127.0.0.1:9/sparql", "--store-timeout-secs", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("http://127.0.0.1:9/sparql") && stderr.contains("unreachable"), "{stderr}");
    let out = hmg(&node, None, &["stats", "--store-url", "ftp://example.org/sparql"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Virtuoso cuts every answer at its `ResultSetMaxRows` and says so only
/// in a header. Reading a tenant larger than the cap whole (an export, a
/// caller's SPARQL from the CLI or a served node) is a clear error naming
/// the cap, never a short answer taken for the whole; a new node whose
/// catch-up asks for more atoms at once than the cap holds asks again in
/// halves and indexes every one; a query's own LIMIT at the cap is whole.
#[test]
fn a_store_that_cuts_answers_at_its_row_cap_is_a_clear_error_not_a_short_answer() {
    const CAP: usize = 200;
    // Fewer memories than the cap has rows, many more quads.
    const MEMORIES: usize = CAP / 7;
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start_capped(Some(CAP as u64));
    let options = || MemoryOptions::default().with_embedder(hmg::EmbedderChoice::Disabled).with_remote(virtuoso.config());
    let alice = caller("alice");
    let cut = |error: &dyn std::fmt::Display| {
        let message = error.to_string();
        assert!(message.contains(&format!("at {CAP} rows")) && message.contains("ResultSetMaxRows"), "{message}");
    };
    let ports = |memory: &Memory| {
        let found = memory.recall(&alice, RecallRequest { max_results: MEMORIES, ..RecallRequest::new("port 9005") }).unwrap();
        let mut ids: Vec<String> = found.atoms.into_iter().map(|a| a.atom_id).collect();
        ids.sort();
        ids
    };
    let node = tmp.path().join("node");
    let recalled = {
        let memory = Memory::open_with(Some(&node), options()).unwrap();
        let texts = ["Service {i} listens on port {p}", "服务 {i} 监听端口 {p}", "サービス {i} はポート {p} で待ち受ける"];
        for i in 0..MEMORIES {
            let text = texts[i % 3].replace("{i}", &i.to_string()).replace("{p}", &(9000 + i).to_string());
            let outcome = memory.memorize(&alice, MemorizeRequest::new(text).with_source("user")).unwrap();
            assert_eq!(outcome.effect, Effect::Applied);
        }
        let mut out = Vec::new();
        cut(&memory.export(&alice, hmg::ExportFormat::NQuads, true, &mut out).unwrap_err());
        ports(&memory)
    };
    assert!(!recalled.is_empty());
    // A second node reads every atom from the store at its first open.
    let second = Memory::open_with(Some(&tmp.path().join("second-node")), options()).unwrap();
    assert_eq!(second.stats(&alice).unwrap().indexes.keyword, MEMORIES as u64, "every memory indexed");
    assert_eq!(ports(&second), recalled);
    drop(second);
    // A caller's SPARQL from the CLI: past the cap refused, a LIMIT at the
    // cap whole.
    let sparql = |name: &str, text: &str| {
        let file = tmp.path().join(name);
        std::fs::write(&file, text).unwrap();
        hmg(&node, Some(&virtuoso), &["--tenant", "alice", "sparql", file.to_str().unwrap(), "--format", "csv"])
    };
    let all = sparql("all.rq", "SELECT ?s ?p ?o WHERE { ?s ?p ?o }");
    assert_ne!(all.status.code(), Some(0), "{}", String::from_utf8_lossy(&all.stdout));
    cut(&String::from_utf8_lossy(&all.stderr));
    let limited = sparql("limited.rq", &format!("SELECT ?s ?p ?o WHERE {{ ?s ?p ?o }} LIMIT {CAP}"));
    assert_eq!(limited.status.code(), Some(0), "{}", String::from_utf8_lossy(&limited.stderr));
    assert_eq!(String::from_utf8_lossy(&limited.stdout).lines().filter(|l| !l.is_empty()).count(), CAP + 1, "a header and {CAP} rows");
    // And from a served node.
    let bearer = token(&node, "alice");
    let served = serve(&node, &virtuoso);
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/sparql-query", "-H", "Accept: text/csv"])
        .args(["-H", &format!("Authorization: Bearer {bearer}"), "--data-binary", "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"])
        .arg(format!("{}/sparql", served.url))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = out.rsplit_once('\n').unwrap();
    assert_eq!(status, "503", "{body}");
    cut(&body);
}

fn token(node: &Path, tenant: &str) -> String {
    let out = hmg(node, None, &["--tenant", tenant, "token", "create", "--json", "--scope", "memory:read", "--scope", "memory:write"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"].as_str().unwrap().to_owned()
}

fn serve(node: &Path, virtuoso: &Virtuoso) -> Served {
    serve_with(node, virtuoso, &[])
}

fn serve_with(node: &Path, virtuoso: &Virtuoso, extra: &[(&str, &str)]) -> Served {
    let env = virtuoso.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.extend_from_slice(extra);
    Served::start_with(node, &env)
}

const NODE_SECRET: &str = "a-shared-node-secret-for-tests";

#[test]
fn two_nodes_write_one_tenant_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start();
    let (node_a, node_b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let (token_a, token_b) = (token(&node_a, "team"), token(&node_b, "team"));
    // Virtuoso does not isolate concurrent updates: node A commits for both.
    let a = serve_with(&node_a, &virtuoso, &[("HMG_NODE_SECRET", NODE_SECRET)]);
    let b = serve_with(&node_b, &virtuoso, &[("HMG_NODE_SECRET", NODE_SECRET), ("HMG_STORE_WRITER", &a.url)]);
    let seconds = std::env::var("HMG_TEST_NODES_SECONDS").unwrap_or_else(|_| "30".to_owned());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/remote_nodes.py");
    let out = Command::new(client_tool("HMG_TEST_PYTHON"))
        .arg(script)
        .args([&seconds, &a.url, &token_a, &b.url, &token_b, &virtuoso.read_url, "urn:hmg:tenant:team"])
        .output()
        .expect("python runs");
    assert_success(&out, "two nodes");
    println!("two nodes: {}", String::from_utf8_lossy(&out.stdout).trim());
    assert!(a.stop().success() && b.stop().success());
    let verify = hmg(&node_a, Some(&virtuoso), &["audit", "verify", "--json"]);
    assert_eq!(verify.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
}

/// `hmg mcp` as a node: the whole agent session of the MCP test, driven by
/// the MCP Python SDK over stdio, on a node whose store is Virtuoso and
/// whose commits go through a serving writer node; then a third node, a
/// fresh CLI process, recalls what the session wrote and the audit chain
/// verifies.
#[test]
fn an_mcp_node_runs_a_whole_agent_session_over_the_shared_store() {
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start();
    let writer = serve_with(&tmp.path().join("writer"), &virtuoso, &[("HMG_NODE_SECRET", NODE_SECRET)]);
    let repo = crate::cli::fake_repo(tmp.path(), "acme", "api", "main");
    let user = "mcp-node-tester";
    let out = Command::new(client_tool("HMG_TEST_PYTHON"))
        .arg(crate::mcp::session_script())
        .args(["session", "stdio", crate::mcp::hmg_bin()])
        .arg(tmp.path().join("mcp-node"))
        .arg(repo.join("src/deep"))
        .env("USER", user)
        .envs(virtuoso.env())
        .env("HMG_NODE_SECRET", NODE_SECRET)
        .env("HMG_STORE_WRITER", &writer.url)
        .output()
        .expect("python runs");
    assert_success(&out, "MCP session on a node over Virtuoso");
    let reader = tmp.path().join("reader");
    let recalled = Command::new(env!("CARGO_BIN_EXE_hmg"))
        .arg("--store")
        .arg(&reader)
        .args(["recall", "API rate limit", "--json", "--tenant", user])
        .current_dir(&repo)
        .envs(virtuoso.env())
        .output()
        .unwrap();
    let hits: Value =
        serde_json::from_slice(&recalled.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&recalled.stderr)));
    assert!(hits["atoms"][0]["content"].as_str().is_some_and(|c| c.contains("500 requests")), "the other node sees the session: {hits}");
    assert!(writer.stop().success());
    let verify = hmg(&reader, Some(&virtuoso), &["audit", "verify", "--json"]);
    assert_eq!(verify.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
}

/// A GraphQL memorize through curl: (HTTP status, answer).
fn graphql_memorize(url: &str, bearer: &str, i: usize) -> (u16, Value) {
    let body = serde_json::json!({ "query": format!("mutation {{ memorize(content: \"Killed-node note {i}: the cache TTL is {i} seconds\", source: \"user\") {{ effect atomId }} }}") });
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-H", &format!("Authorization: Bearer {bearer}")])
        .args(["--max-time", "60", "-d", &body.to_string()])
        .arg(format!("{url}/graphql"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.trim().parse().unwrap_or(0), serde_json::from_str(json).unwrap_or(Value::Null))
}

#[test]
fn a_killed_node_loses_nothing_and_a_restarted_store_is_a_clear_503() {
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start();
    let node = tmp.path().join("node");
    let bearer = token(&node, "team");
    let served = serve(&node, &virtuoso);
    let memorize = |url: &str, i: usize| graphql_memorize(url, &bearer, i);
    // Writes while the store restarts: each either acknowledged or a clear
    // refusal, never half-written; service resumes by itself.
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for i in 0..10 {
        let (_, answer) = memorize(&served.url, i);
        acknowledged.push(answer["data"]["memorize"]["atomId"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned());
    }
    let dir = virtuoso.dir.clone();
    let restart = std::thread::spawn(move || Command::new(script()).arg("restart").arg(dir).output().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut resumed = 0;
    let mut i = 10;
    while resumed < 5 && std::time::Instant::now() < deadline {
        let (status, answer) = memorize(&served.url, i);
        i += 1;
        match answer["data"]["memorize"]["atomId"].as_str() {
            Some(id) => {
                acknowledged.push(id.to_owned());
                if refused > 0 {
                    resumed += 1;
                }
            }
            None => {
                refused += 1;
                assert!(status == 503 || answer["errors"][0]["extensions"]["code"] == "UNAVAILABLE", "{status} {answer}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
    assert!(restart.join().unwrap().status.success());
    assert!(refused > 0 && resumed == 5, "the restart was seen ({refused} refused) and service resumed ({resumed} writes after it)");
    // kill -9 the node in the middle of writes.
    let (url, token) = (served.url.clone(), bearer.clone());
    let writer = std::thread::spawn(move || (100..300).map(|i| graphql_memorize(&url, &token, i)).collect::<Vec<_>>());
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _ = Command::new("kill").args(["-9", &served.pid().to_string()]).status();
    for (_, answer) in writer.join().unwrap() {
        if let Some(id) = answer["data"]["memorize"]["atomId"].as_str() {
            acknowledged.push(id.to_owned());
        }
    }
    drop(served);
    let rows =
        virtuoso.query("PREFIX hmg: <https://w3id.org/hmg/ns#> SELECT ?a WHERE { GRAPH <urn:hmg:tenant:team> { ?a hmg:status ?s } }");
    let stored: Vec<String> = rows["results"]["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["a"]["value"].as_str().unwrap().replace("urn:hmg:atom:", ""))
        .collect();
    for id in &acknowledged {
        assert!(stored.contains(id), "acknowledged {id} is in the store");
    }
    let verify = hmg(&node, Some(&virtuoso), &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
    // A node restarted on the same directory serves again.
    let again = serve(&node, &virtuoso);
    let (_, answer) = memorize(&again.url, 999);
    assert!(answer["data"]["memorize"]["atomId"].is_string(), "{answer}");
}

#[test]
fn tenants_stay_isolated_on_a_remote_store() {
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start();
    let node = tmp.path().join("node");
    let create = |tenant: &str, scopes: &[&str]| {
        let mut args = vec!["--tenant", tenant, "token", "create", "--json"];
        for scope in scopes {
            args.extend(["--scope", scope]);
        }
        let out = hmg(&node, None, &args);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"].as_str().unwrap().to_owned()
    };
    let alice = create("alice", &["memory:read", "memory:write"]);
    let alice_read = create("alice", &["memory:read"]);
    let bob = create("bob", &["memory:read,memory:write"]);
    let served = serve(&node, &virtuoso);
    crate::http::isolation_matrix(&served.url, [&alice, &alice_read, &bob], "http surfaces on the remote store");
}

#[test]
fn migrate_round_trips_embedded_to_virtuoso_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let virtuoso = Virtuoso::start();
    let first = tmp.path().join("first");
    {
        let memory = Memory::open(&first).unwrap();
        scenario(&memory);
        memory.flush().unwrap();
    }
    let export = |store: &Path, virtuoso: Option<&Virtuoso>, tenant: &str| {
        let out = hmg(store, virtuoso, &["--tenant", tenant, "export", "--format", "nquads", "--all"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    let out = hmg(&first, None, &["migrate", "--to", &virtuoso.url, "--to-user", "hmg", "--to-password", "hmg-test-secret", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["audit_intact"], Value::Bool(true), "{report}");
    // Into a non-empty store: refused, nothing written.
    let again = hmg(&first, None, &["migrate", "--to", &virtuoso.url, "--to-user", "hmg", "--to-password", "hmg-test-secret"]);
    assert_ne!(again.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"), "{}", String::from_utf8_lossy(&again.stderr));

    let node = tmp.path().join("node");
    let back = tmp.path().join("back");
    let out = hmg(&node, Some(&virtuoso), &["migrate", "--to", back.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let same = |copy: &[String], original: &[String], what: &str| {
        let missing: Vec<&String> = original.iter().filter(|l| !copy.contains(l)).collect();
        let extra: Vec<&String> = copy.iter().filter(|l| !original.contains(l)).collect();
        assert!(missing.is_empty() && extra.is_empty(), "{what}: missing {missing:#?}\nextra {extra:#?}");
    };
    for tenant in ["alice", "bob"] {
        let original = export(&first, None, tenant);
        assert!(original.len() > 10, "{original:?}");
        same(&export(&node, Some(&virtuoso), tenant), &original, &format!("{tenant}: the remote copy"));
        same(&export(&back, None, tenant), &original, &format!("{tenant}: the copy back"));
    }
    let verify = hmg(&back, None, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
    let stats = |store: &Path, virtuoso: Option<&Virtuoso>| {
        let out = hmg(store, virtuoso, &["--tenant", "alice", "stats", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let (before, after) = (stats(&first, None), stats(&back, None));
    assert_eq!(
        (&after["atoms"], &after["edges"], &after["snapshot_version"]),
        (&before["atoms"], &before["edges"], &before["snapshot_version"])
    );
}
