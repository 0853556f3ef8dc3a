//! The MCP server with real clients: the official Python SDK over stdio and
//! streamable HTTP, the MCP Inspector CLI, and the hook commands with the
//! hosts' exact JSON shapes. `scripts/test.sh` installs the clients and
//! exports `HMG_TEST_PYTHON` and `HMG_TEST_INSPECTOR`; without them these
//! tests fail rather than skip.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::cli::fake_repo;

const USER: &str = "mcp-tester";

pub(crate) fn hmg_bin() -> &'static str {
    env!("CARGO_BIN_EXE_hmg")
}

pub(crate) fn client_tool(var: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{var} is not set: run the suite with scripts/test.sh, which installs the MCP clients"));
    assert!(path.exists(), "{var}={} does not exist: run scripts/test.sh", path.display());
    path
}

pub(crate) fn session_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/mcp_session.py")
}

fn python(args: &[&str]) -> Output {
    Command::new(client_tool("HMG_TEST_PYTHON")).arg(session_script()).args(args).env("USER", USER).output().expect("python runs")
}

pub(crate) fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `hmg serve` on a free loopback port; killed on drop.
pub(crate) struct Served {
    child: Child,
    pub(crate) url: String,
}

impl Served {
    pub(crate) fn start(store: &Path) -> Served {
        Served::start_with(store, &[])
    }

    /// Like [`Served::start`], with extra environment variables.
    pub(crate) fn start_with(store: &Path, env: &[(&str, &str)]) -> Served {
        Served::start_with_args(store, &[], env)
    }

    /// Like [`Served::start`], with extra `hmg serve` arguments and environment variables.
    pub(crate) fn start_with_args(store: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
        let mut child = Command::new(hmg_bin())
            .args(["--store"])
            .arg(store)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("USER", USER)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hmg serve starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let mut lines = BufReader::new(stderr).lines();
        let mut said = String::new();
        let url = loop {
            let Some(line) = lines.next() else { panic!("hmg serve ended before announcing its address; it said:\n{said}") };
            let line = line.expect("stderr readable");
            said.push_str(&line);
            said.push('\n');
            if let Some(rest) = line.split("serving ").nth(1) {
                break rest.split_whitespace().next().expect("an address").to_owned();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Served { child, url }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits: the graceful shutdown path.
    pub(crate) fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = self.child.wait().expect("hmg serve exits");
        std::mem::forget(self);
        status
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn python_client_runs_a_whole_session_over_stdio() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fake_repo(tmp.path(), "acme", "api", "main");
    let store = tmp.path().join("store");
    let out = python(&["session", "stdio", hmg_bin(), store.to_str().unwrap(), repo.join("src/deep").to_str().unwrap()]);
    assert_success(&out, "stdio session");
    assert!(String::from_utf8_lossy(&out.stdout).contains("session ok"));
    // What the session wrote is on disk, in the repository's scope, and audited.
    let cli = crate::cli::hmg(&store, &repo, &["recall", "API rate limit", "--json", "--tenant", USER]);
    let hits: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert!(hits["atoms"][0]["content"].as_str().unwrap().contains("500 requests"), "{hits}");
    let verify = crate::cli::hmg(&store, &repo, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
}

/// Many `memory_memorize` calls in flight at once are written together
/// (one embedding batch, one transaction); each is still answered as if
/// alone: repeats name the write they repeat, a blank one is rejected, a
/// secret is redacted, and the store holds exactly one atom per memory.
/// Sent to the server that holds the store (`burst`), and to a second one
/// that relays them to it as one message (`guest-burst`).
#[test]
fn a_burst_of_memorize_calls_is_answered_as_if_each_came_alone() {
    for mode in ["burst", "guest-burst"] {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let out = python(&[mode, hmg_bin(), store.to_str().unwrap(), tmp.path().to_str().unwrap()]);
        assert_success(&out, mode);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{} ok", mode.replace('-', " "))), "{mode}");
        let verify = crate::cli::hmg(&store, tmp.path(), &["audit", "verify"]);
        assert_eq!(verify.status.code(), Some(0), "{mode}: {}", String::from_utf8_lossy(&verify.stdout));
    }
}

#[test]
fn python_client_runs_a_whole_session_over_streamable_http() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let served = Served::start(&store);
    let health = Command::new("curl").args(["-sf", &format!("{}/healthz", served.url)]).output().expect("curl runs");
    assert_success(&health, "healthz");
    let out = python(&["session", "http", &format!("{}/mcp", served.url)]);
    assert_success(&out, "http session");
    // A browser page from another origin is refused.
    let cross = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "Origin: http://evil.example.com"])
        .args(["-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream"])
        .args(["-d", r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#])
        .arg(format!("{}/mcp", served.url))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&cross.stdout), "403");
    let status = served.stop();
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
}

#[test]
fn two_stdio_servers_in_two_repositories_share_one_store() {
    let tmp = tempfile::tempdir().unwrap();
    let a = fake_repo(tmp.path(), "acme", "orchid", "main");
    let b = fake_repo(tmp.path(), "acme", "tulip", "main");
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let store = tmp.path().join("store");
    let out = python(&["two-repos", hmg_bin(), store.to_str().unwrap(), a.to_str().unwrap(), b.to_str().unwrap(), plain.to_str().unwrap()]);
    assert_success(&out, "two repositories");
}

#[test]
fn the_inspector_cli_lists_the_tools_and_calls_one() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let inspector = client_tool("HMG_TEST_INSPECTOR");
    let run = |extra: &[&str]| {
        let out = Command::new(&inspector)
            .args(["--cli", hmg_bin(), "--store", store.to_str().unwrap(), "mcp"])
            .args(extra)
            .env("USER", USER)
            .current_dir(tmp.path())
            .output()
            .expect("the inspector runs");
        assert_success(&out, "inspector");
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("unknown format"),
            "schemas use only standard formats: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("inspector prints JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    };
    let listed = run(&["--method", "tools/list"]);
    let mut names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["memory_correct", "memory_govern", "memory_handoff", "memory_memorize", "memory_recall", "memory_stats", "reflect"]);
    let called =
        run(&["--method", "tools/call", "--tool-name", "memory_memorize", "--tool-arg", "content=The inspector stored this memory"]);
    assert_eq!(called["isError"], false, "{called}");
    assert_eq!(called["structuredContent"]["effect"], "applied", "{called}");
    let called = run(&["--method", "tools/call", "--tool-name", "memory_recall", "--tool-arg", "query=inspector memory"]);
    assert!(called["structuredContent"]["atoms"][0]["content"].as_str().unwrap().contains("inspector stored"), "{called}");
}

fn result_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the client prints JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

fn hook(store: &Path, which: &str, input: &Value) -> Output {
    let mut child = Command::new(hmg_bin())
        .args(["--store"])
        .arg(store)
        .args(["hook", which])
        .env("USER", USER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook runs");
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn pre_tool_use_injects_a_proven_scope_and_keeps_every_field() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fake_repo(tmp.path(), "acme", "hooked", "feature-x");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let store = tmp.path().join("store");
    let tool_input = json!({"content": "The hooked repository deploys with Helm", "source": "user", "scope": {"tenant_id": "mallory", "repository": "forged"}});
    let input = json!({
        "session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": repo.join("src/deep"), "permission_mode": "default",
        "hook_event_name": "PreToolUse", "tool_name": "mcp__hmg__memory_memorize", "tool_input": tool_input,
    });
    let out = hook(&store, "pre-tool-use", &input);
    assert_success(&out, "pre-tool-use");
    let output: Value = serde_json::from_slice(&out.stdout).unwrap();
    let specific = &output["hookSpecificOutput"];
    assert_eq!(specific["hookEventName"], "PreToolUse");
    assert_eq!(specific["permissionDecision"], "allow");
    let updated = &specific["updatedInput"];
    assert_eq!(updated["content"], tool_input["content"]);
    assert_eq!(updated["source"], "user");
    let scope = &updated["scope"];
    assert_eq!(
        (scope["tenant_id"].as_str(), scope["workspace"].as_str(), scope["repository"].as_str(), scope["branch"].as_str()),
        (Some(USER), Some("acme"), Some("hooked"), Some("feature-x"))
    );
    assert!(scope["proof"].as_str().is_some_and(|p| p.len() == 64), "{scope}");

    // A server running outside the repository honours the proven scope…
    let out = python(&["call", hmg_bin(), store.to_str().unwrap(), elsewhere.to_str().unwrap(), "memory_memorize", &updated.to_string()]);
    assert_success(&out, "call with the hook's input");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["is_error"], false, "{result}");
    let recalled = crate::cli::hmg(&store, &repo, &["recall", "Helm deploys", "--json", "--tenant", USER]);
    let hits: Value = serde_json::from_slice(&recalled.stdout).unwrap();
    assert_eq!(hits["atoms"][0]["atom_id"], result["structured"]["atom_id"], "stored in the hooked repository: {hits}");
    // …and ignores a tampered one (the memory lands tenant-wide instead).
    let mut tampered = updated.clone();
    tampered["content"] = json!("A tampered scope must not reach the hooked repository");
    tampered["scope"]["repository"] = json!("other");
    let out = python(&["call", hmg_bin(), store.to_str().unwrap(), elsewhere.to_str().unwrap(), "memory_memorize", &tampered.to_string()]);
    assert_success(&out, "call with a tampered scope");
    // A reader outside every repository sees only tenant-wide memories.
    let recalled = crate::cli::hmg(&store, &elsewhere, &["recall", "tampered scope", "--json", "--tenant", USER]);
    let hits: Value = serde_json::from_slice(&recalled.stdout).unwrap();
    assert_eq!(hits["atoms"][0]["atom_id"], result_of(&out)["structured"]["atom_id"], "tenant-wide, not confined to 'other': {hits}");

    // reflect's own `scope` is a filter: the hook's scope goes beside it, and
    // the server runs the call in the hooked repository.
    let reflect_input = json!({"dry_run": true, "scope": "acme/hooked", "actions_csv": "decay"});
    let out = hook(
        &store,
        "pre-tool-use",
        &json!({"session_id": "s1", "cwd": repo, "hook_event_name": "PreToolUse", "tool_name": "mcp__hmg__reflect", "tool_input": reflect_input}),
    );
    assert_success(&out, "pre-tool-use for reflect");
    let updated: Value = serde_json::from_slice::<Value>(&out.stdout).unwrap()["hookSpecificOutput"]["updatedInput"].clone();
    assert_eq!(updated["scope"], "acme/hooked", "the filter is kept: {updated}");
    assert_eq!(updated["bound_scope"]["repository"], "hooked", "{updated}");
    let out = python(&["call", hmg_bin(), store.to_str().unwrap(), elsewhere.to_str().unwrap(), "reflect", &updated.to_string()]);
    assert_success(&out, "reflect with the hook's input");
    let result = result_of(&out);
    assert_eq!(result["is_error"], false, "the filter is inside the hooked boundary: {result}");
    assert_eq!(result["structured"]["filters"]["scope"], "acme/hooked");
    // The bound scope is what limits the call: another repository is refused,
    // though this server (outside any repository) would be tenant-wide.
    let mut widened = updated.clone();
    widened["scope"] = json!("acme/other");
    let out = python(&["call", hmg_bin(), store.to_str().unwrap(), elsewhere.to_str().unwrap(), "reflect", &widened.to_string()]);
    let result = result_of(&out);
    assert_eq!(result["is_error"], true, "{result}");
    assert!(result["text"][0].as_str().unwrap().contains("outside your boundary"), "{result}");

    // Malformed hook input: a clear error, exit 2.
    let out = hook(&store, "pre-tool-use", &json!("not an object"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JSON object"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = hook(&store, "pre-tool-use", &json!({"hook_event_name": "SessionStart", "tool_input": {}}));
    assert_eq!(out.status.code(), Some(2), "wrong event is refused");
}

#[test]
fn session_start_prints_the_brief_as_additional_context() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fake_repo(tmp.path(), "acme", "briefed", "main");
    let store = tmp.path().join("store");
    let input = |source: &str| json!({"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": repo, "hook_event_name": "SessionStart", "source": source});
    // Empty store: the onboarding note.
    let out = hook(&store, "session-start", &input("startup"));
    assert_success(&out, "session-start on an empty store");
    let output: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(output["hookSpecificOutput"]["hookEventName"], "SessionStart");
    assert!(output["hookSpecificOutput"]["additionalContext"].as_str().unwrap().contains("memory_memorize"));

    // With memories and a long handoff, while an MCP server holds the store.
    let out = crate::cli::hmg(&store, &repo, &["--tenant", USER, "memorize", "部署前必须先跑数据库迁移", "--source", "user"]);
    assert_eq!(out.status.code(), Some(0));
    let out = crate::cli::hmg(&store, &repo, &["--tenant", USER, "handoff", &"Refactored the billing module; tests pass. ".repeat(300)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let served = Served::start(&store);
    for source in ["startup", "resume", "clear", "compact"] {
        let out = hook(&store, "session-start", &input(source));
        assert_success(&out, source);
        let output: Value = serde_json::from_slice(&out.stdout).unwrap();
        let context = output["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
        assert!(context.contains("部署前必须先跑数据库迁移") && context.contains("billing"), "{source}: {context}");
        assert!(context.chars().count() < 10_000, "{source}: {} characters", context.chars().count());
    }
    drop(served);
}

#[test]
fn serve_refuses_network_addresses_without_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let out = crate::cli::hmg(&store, tmp.path(), &["serve", "--listen", "0.0.0.0:7411"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without access tokens"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = crate::cli::hmg(&store, tmp.path(), &["serve", "--listen", "not-an-address"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cli_tool_commands_go_through_the_process_that_holds_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fake_repo(tmp.path(), "acme", "relayed", "main");
    let store = tmp.path().join("store");
    let served = Served::start(&store);
    let out = crate::cli::hmg(&store, &repo, &["memorize", "寿司の予約は金曜日の19時", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stored["effect"], "applied");
    let out = crate::cli::hmg(&store, &repo, &["recall", "寿司の予約", "--json", "--explain"]);
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits["atoms"][0]["atom_id"], stored["atom_id"], "{hits}");
    assert!(hits["atoms"][0]["explain"].is_object(), "{hits}");
    let out = crate::cli::hmg(&store, &repo, &["correct", stored["atom_id"].as_str().unwrap(), "undo", "--reason", "r", "--json"]);
    assert_eq!(out.status.code(), Some(2), "a bad action is still the caller's error");
    let out = crate::cli::hmg(&store, &repo, &["stats"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("atoms: 1"), "{}", String::from_utf8_lossy(&out.stdout));
    // Commands that need the store itself say so.
    let out = crate::cli::hmg(&store, &repo, &["export"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("open in another hmg process"), "{}", String::from_utf8_lossy(&out.stderr));
    drop(served);
    // Once the server is gone, the CLI opens the store itself.
    let out = crate::cli::hmg(&store, &repo, &["export"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("寿司の予約"));
}
