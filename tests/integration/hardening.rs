//! Hardening (issue 12): hostile requests against a real `hmg serve` get
//! clear refusals and leave it healthy; shutdown is bounded; a damaged
//! keyword index heals itself; the stdio MCP server answers protocol
//! errors and keeps serving; no tenant sees another's write count.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp::{Served, assert_success, client_tool};

/// About 120 memories in three languages: a few thousand triples.
fn seeded_store(dir: &Path) -> std::path::PathBuf {
    let store = dir.join("store");
    let mut lines = String::new();
    for i in 0..40 {
        lines.push_str(
            &json!({ "content": format!("Release checklist step {i}: run the migration suite before tagging v{i}.0") }).to_string(),
        );
        lines.push('\n');
        lines.push_str(&json!({ "content": format!("第{i}号服务器的日志保存在 /var/log/app{i} 目录") }).to_string());
        lines.push('\n');
        lines.push_str(&json!({ "content": format!("バックアップ{i}は毎晩三時に取得します") }).to_string());
        lines.push('\n');
    }
    let file = dir.join("seed.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmg"))
        .args(["--tenant", "mcp-tester", "import"])
        .arg(&file)
        .env("HMG_STORE", &store)
        .output()
        .unwrap();
    assert_success(&out, "seeding import");
    store
}

#[test]
fn hostile_requests_are_refused_clearly_and_the_server_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let store = seeded_store(tmp.path());
    let served = Served::start_with_args(&store, &["--allow-origin", "http://app.example"], &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/hostile.py");
    let out = Command::new(client_tool("HMG_TEST_PYTHON"))
        .arg(script)
        .args([served.url.as_str(), &served.pid().to_string(), "http://app.example"])
        .output()
        .expect("python runs");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert_success(&out, "hostile input");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hostile ok"));
    assert!(served.stop().success());
    let verify = crate::cli::hmg(&store, tmp.path(), &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
}

#[test]
fn sigterm_with_a_request_in_flight_exits_within_the_grace_period() {
    let tmp = tempfile::tempdir().unwrap();
    let store = seeded_store(tmp.path());
    let served = Served::start_with_args(&store, &["--shutdown-grace-secs", "2"], &[]);
    // A query that runs until its 10 s limit, on a connection kept open.
    let url = format!("{}/sparql", served.url);
    let mut slow = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-H", "Content-Type: application/sparql-query", "--data-binary"])
        .arg("SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }")
        .arg(&url)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let started = Instant::now();
    let status = served.stop();
    let took = started.elapsed();
    let _ = slow.kill();
    let _ = slow.wait();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?} with a 2 s grace period");
    // Nothing is left holding the store: it opens at once.
    let out = crate::cli::hmg(&store, tmp.path(), &["--tenant", "mcp-tester", "stats", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

fn keyword_dir(store: &Path) -> std::path::PathBuf {
    store.join("index").join("keyword")
}

fn segment_files(store: &Path, extension: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(keyword_dir(store))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .collect()
}

/// Writes memories, breaks the keyword index with `breakage`, and checks
/// that every command still works and finds them, saying it rebuilt.
fn heals_after(breakage: impl Fn(&Path)) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    for content in [
        "The quarterly report lives in the Nextcloud finance folder",
        "财务报表保存在共享盘的季度目录里",
        "四半期レポートは経理フォルダにあります",
    ] {
        let out = crate::cli::hmg(&store, tmp.path(), &["memorize", content]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let before = crate::cli::hmg(&store, tmp.path(), &["recall", "Nextcloud finance", "--json"]);
    assert!(String::from_utf8_lossy(&before.stdout).contains("Nextcloud"));
    breakage(&store);
    let out = crate::cli::hmg(&store, tmp.path(), &["recall", "Nextcloud finance", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("keyword index is damaged; rebuilding it"), "a log line says the index was rebuilt: {stderr}");
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(hits["atoms"][0]["content"].as_str().unwrap_or("").contains("Nextcloud"), "{hits}");
    for (query, expected) in [("财务报表", "财务报表"), ("経理フォルダ", "経理フォルダ")] {
        let out = crate::cli::hmg(&store, tmp.path(), &["recall", query, "--json"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains(expected), "{query}: {}", String::from_utf8_lossy(&out.stdout));
    }
    let stats: Value = serde_json::from_slice(&crate::cli::hmg(&store, tmp.path(), &["stats", "--json"]).stdout).unwrap();
    assert_eq!(stats["indexes"]["keyword"], stats["atoms"], "every atom is back in the keyword index: {stats}");
    let out = crate::cli::hmg(&store, tmp.path(), &["memorize", "After the repair writes still work"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn garbage_in_the_keyword_meta_file_heals() {
    heals_after(|store| std::fs::write(keyword_dir(store).join("meta.json"), b"{ this is not the index meta").unwrap());
}

#[test]
fn a_deleted_term_file_heals() {
    heals_after(|store| {
        let terms = segment_files(store, "term");
        assert!(!terms.is_empty(), "the index has segments");
        for file in terms {
            std::fs::remove_file(file).unwrap();
        }
    });
}

#[test]
fn overwritten_segment_bytes_heal() {
    heals_after(|store| {
        for extension in ["idx", "term", "store"] {
            for file in segment_files(store, extension) {
                let mut bytes = std::fs::read(&file).unwrap();
                let middle = bytes.len() / 2;
                for byte in bytes.iter_mut().skip(middle.saturating_sub(8)).take(16) {
                    *byte ^= 0x5a;
                }
                std::fs::write(&file, bytes).unwrap();
            }
        }
    });
}

#[test]
fn reindex_and_serve_work_over_a_broken_keyword_index() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let out = crate::cli::hmg(&store, tmp.path(), &["--tenant", "mcp-tester", "memorize", "Grafana dashboards live in the ops folder"]);
    assert_eq!(out.status.code(), Some(0));
    std::fs::write(keyword_dir(&store).join("meta.json"), b"garbage").unwrap();
    let out = crate::cli::hmg(&store, tmp.path(), &["reindex"]);
    assert_eq!(out.status.code(), Some(0), "reindex does not depend on the broken files: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(keyword_dir(&store).join("meta.json"), b"garbage again").unwrap();
    let served = Served::start(&store);
    let out = Command::new("curl")
        .args(["-s", "-H", "Content-Type: application/json", "-d", r#"{"query": "{ recall(query: \"Grafana dashboards\") { content } }"}"#])
        .arg(format!("{}/graphql", served.url))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("ops folder"), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn stdio_mcp_answers_protocol_errors_and_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hmg"))
        .arg("--store")
        .arg(&store)
        .arg("mcp")
        .current_dir(tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |line: &str| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let mut next = || -> Value { serde_json::from_str(&lines.next().expect("an answer").unwrap()).unwrap() };
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    send("this is not JSON");
    let answer = next();
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    assert_eq!(answer["id"], Value::Null);
    send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#);
    let answer = next();
    assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(5), json!(-32002)), "{answer}");
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    );
    let answer = next();
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["serverInfo"]["name"], "hmg", "{answer}");
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    send("{ garbage again");
    assert_eq!(next()["error"]["code"], -32700);
    send(r#"[{"jsonrpc":"2.0","id":7,"method":"tools/list"}]"#);
    assert_eq!(next()["error"]["code"], -32600);
    send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let answer = next();
    assert_eq!(answer["id"], 2);
    assert!(answer["result"]["tools"].as_array().is_some_and(|tools| tools.len() >= 6), "{answer}");
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "hmg mcp exits cleanly when stdin closes: {status:?}");
}

#[test]
fn a_tenant_sees_only_its_own_write_count() {
    let memory = crate::memory();
    let alice = hmg::Caller::new(hmg::Scope::tenant("alice"), "test");
    let bob = hmg::Caller::new(hmg::Scope::tenant("bob"), "test");
    crate::remember(&memory, &alice, "Alice uses Neovim");
    let bob_before = memory.stats(&bob).unwrap().snapshot_version;
    let alice_before = memory.stats(&alice).unwrap().snapshot_version;
    crate::remember(&memory, &alice, "Alice moved to Lisbon");
    crate::remember(&memory, &alice, "Alice prefers tea");
    assert_eq!(memory.stats(&bob).unwrap().snapshot_version, bob_before, "Bob does not see Alice's writes");
    assert_eq!(memory.stats(&alice).unwrap().snapshot_version, alice_before + 2);
    crate::remember(&memory, &bob, "Bob uses Emacs");
    assert_eq!(memory.stats(&bob).unwrap().snapshot_version, bob_before + 1);
}
