//! Secrets never reach disk (issue 13), checked where it matters: after
//! writing every secret of the corpora through every write surface of the
//! real binary, every value is searched for in every file under the store
//! (bytes), in every quad of every tenant graph (the store decoded: RocksDB
//! compresses its blocks), and in the keyword index's term dictionaries.
//! The write fields are enumerated from the MCP server's own tool schemas,
//! so a text field added later is covered without editing this test.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::mcp::{Served, assert_success, client_tool};
use crate::redaction::corpus;

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Where each secret of `secrets` is found under the store `dir` (empty:
/// nowhere). The store must not be open in another process.
pub(crate) fn leaks(dir: &Path, secrets: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    // 1. Bytes of every file (WAL, SST, vectors.bin, graph.bin, tokens.json, …).
    for file in files_under(dir) {
        let Ok(bytes) = std::fs::read(&file) else { continue };
        for secret in secrets {
            let needle = secret.as_bytes();
            if needle.len() >= 6 && bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(format!("{secret} in the bytes of {}", file.display()));
            }
        }
    }
    // 2. Every quad of every tenant graph, decoded by the store itself.
    // Opened with Oxigraph itself, every graph, read-only: what HMG's own
    // reader might skip is seen too.
    let live = std::fs::read_to_string(dir.join("CURRENT")).expect("the store names its live generation");
    let store = oxigraph::store::Store::open_read_only(dir.join(live.trim())).expect("the store opens");
    let mut quads = String::new();
    for quad in store.iter() {
        quads.push_str(&quad.expect("a readable quad").to_string());
        quads.push('\n');
    }
    assert!(quads.contains("REDACTED"), "the test can see redacted content in the store");
    for secret in secrets {
        if quads.contains(secret.as_str()) {
            let line = quads.lines().find(|l| l.contains(secret.as_str())).unwrap_or("");
            found.push(format!("{secret} in a quad: {}", &line[..line.len().min(300)]));
        }
    }
    drop(store);
    // 3. The keyword index's terms (compressed, so a byte search cannot see them).
    let index = tantivy::Index::open_in_dir(dir.join("index").join("keyword")).expect("a keyword index");
    let text = index.schema().get_field("text").unwrap();
    let searcher = index.reader().unwrap().searcher();
    let mut terms: HashSet<String> = HashSet::new();
    for segment in searcher.segment_readers() {
        let inverted = segment.inverted_index(text).unwrap();
        let mut stream = inverted.terms().stream().unwrap();
        while stream.advance() {
            terms.insert(String::from_utf8_lossy(stream.key()).into_owned());
        }
    }
    let marker_terms = hmg::text::analyze::terms("REDACTED", hmg::text::analyze::Mode::Index);
    assert!(marker_terms.iter().all(|t| terms.contains(t)), "the test can see the index's terms");
    for secret in secrets {
        for term in hmg::text::analyze::terms(secret, hmg::text::analyze::Mode::Index) {
            // Pieces a secret shares with ordinary words ("live", "token") say nothing.
            if term.chars().count() >= 8 && terms.contains(&term) {
                found.push(format!("{secret}: its term {term} is in the keyword index"));
            }
        }
    }
    found
}

fn secrets_only(corpus: &[(String, String)]) -> Vec<String> {
    corpus.iter().map(|(secret, _)| secret.clone()).collect()
}

/// Raw JSON-RPC over stdio with `hmg mcp`.
struct RawMcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    next_id: u64,
}

impl RawMcp {
    fn start(store: &Path, cwd: &Path) -> RawMcp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hmg"))
            .arg("--store")
            .arg(store)
            .arg("mcp")
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut session = RawMcp { child, stdin, lines, next_id: 1 };
        session.request(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "secrets", "version": "1" } }),
        );
        session.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        session
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let answer: Value = serde_json::from_str(&self.lines.next().expect("an answer").unwrap()).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({ "name": tool, "arguments": arguments }));
        assert_eq!(answer["result"]["isError"], false, "{tool}: {answer}");
        answer["result"]["structuredContent"].clone()
    }

    fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

/// String arguments that select rather than carry text: never stored as
/// written (ids, enum actions, filters and time bounds). Any other string
/// argument of a writing tool is treated as stored text by the test below.
const NOT_TEXT: &[&str] = &["target_atom", "action", "actions_csv", "since", "until", "path_filter", "owner_filter", "bucket", "team_id"];

#[test]
fn every_text_argument_of_every_writing_tool_is_redacted_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let all = corpus();
    // One secret per field per tool, rotating through the corpus.
    let mut next = all.iter().cycle();
    let mut session = RawMcp::start(&store, tmp.path());
    let tools = session.request("tools/list", json!({}))["result"]["tools"].as_array().cloned().unwrap();
    let mut used: Vec<String> = Vec::new();
    let mut covered: Vec<String> = Vec::new();
    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        if tool["annotations"]["readOnlyHint"] == true {
            continue;
        }
        let properties = tool["inputSchema"]["properties"].as_object().cloned().unwrap_or_default();
        for round in 0..3 {
            let target =
                session.call("memory_memorize", json!({ "content": format!("A plain memory for {name} round {round}") }))["atom_id"]
                    .clone();
            let mut arguments = serde_json::Map::new();
            for (field, schema) in &properties {
                let is_string = schema["type"] == "string" || schema["type"].as_array().is_some_and(|t| t.contains(&json!("string")));
                match field.as_str() {
                    "target_atom" => {
                        arguments.insert(field.clone(), target.clone());
                    }
                    "action" if name == "memory_correct" => {
                        arguments.insert(field.clone(), json!("replace"));
                    }
                    "action" if name == "memory_govern" => {
                        arguments.insert(field.clone(), json!("derive_lesson"));
                    }
                    "dry_run" => {
                        arguments.insert(field.clone(), json!(false));
                    }
                    field_name if is_string && !NOT_TEXT.contains(&field_name) => {
                        let (secret, text) = next.next().unwrap();
                        used.push(secret.clone());
                        covered.push(format!("{name}.{field_name}"));
                        arguments.insert(field.clone(), json!(format!("{field_name} for {name}: {text}")));
                    }
                    _ => {}
                }
            }
            session.call(name, Value::Object(arguments));
        }
    }
    session.stop();
    covered.sort();
    covered.dedup();
    for expected in [
        "memory_memorize.content",
        "memory_memorize.source",
        "memory_handoff.summary",
        "memory_handoff.source",
        "memory_correct.reason",
        "memory_correct.new_content",
        "memory_govern.reason",
        "memory_govern.lesson_content",
    ] {
        assert!(covered.iter().any(|c| c == expected), "{expected} was not exercised: {covered:?}");
    }
    let leaks = leaks(&store, &used);
    assert!(leaks.is_empty(), "secrets on disk:\n{}", leaks.join("\n"));
}

#[test]
fn secrets_never_reach_disk_through_any_surface() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let all = corpus();
    let secrets = secrets_only(&all);
    // JSON Lines import (content, source, session) while no server holds the store.
    let mut lines = String::new();
    for (n, (_, text)) in all.iter().enumerate() {
        let short = |prefix: &str| {
            let long = format!("{prefix} {}", text.replace('\n', " "));
            if long.chars().count() <= 200 { long } else { format!("{prefix} (long)") }
        };
        lines.push_str(
            &json!({ "content": format!("imported {n}: {text}"), "source": short("import"), "session_id": short(&format!("s-{n}")) })
                .to_string(),
        );
        lines.push('\n');
    }
    let file = tmp.path().join("secrets.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = crate::cli::hmg(&store, tmp.path(), &["import", file.to_str().unwrap()]);
    assert!(out.status.code().is_some_and(|c| c == 0 || c == 2), "{}", String::from_utf8_lossy(&out.stderr));
    // A token whose label holds a secret.
    let out = crate::cli::hmg(&store, tmp.path(), &["token", "create", "--scope", "memory:read", "--name", &format!("ci {}", all[0].1)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let revoke: Value = serde_json::from_slice(&crate::cli::hmg(&store, tmp.path(), &["token", "list", "--json"]).stdout).unwrap();
    let id = revoke[0]["id"].as_str().unwrap().to_owned();
    assert!(!revoke.to_string().contains(all[0].0.as_str()), "{revoke}");
    // Revoked again so the server below stays tokenless on loopback.
    assert_eq!(crate::cli::hmg(&store, tmp.path(), &["token", "revoke", &id]).status.code(), Some(0));

    // Without a model: vectors are floats, never text, and embedding 3,000
    // writes would quadruple the test's time; what is checked is the text.
    let served = Served::start_with(&store, &[("HMG_EMBEDDER", "none")]);
    // The CLI relays through the server that holds the store.
    for (n, (_, text)) in all.iter().enumerate().step_by(3) {
        let source = format!("cli {}", text.replace('\n', " "));
        let source = if source.chars().count() <= 200 { source } else { "cli (long)".to_owned() };
        let out = crate::cli::hmg(&store, tmp.path(), &["memorize", &format!("cli {n}: {text}"), "--source", &source]);
        assert!(out.status.code().is_some_and(|c| c == 0 || c == 2), "{}", String::from_utf8_lossy(&out.stderr));
        let out = crate::cli::hmg(&store, tmp.path(), &["handoff", &format!("cli handoff {n}: {text}")]);
        assert!(out.status.code().is_some_and(|c| c == 0 || c == 2), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let out = Command::new(client_tool("HMG_TEST_PYTHON"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/secret_surfaces.py"))
        .arg(&served.url)
        .arg(data.join("secrets.tsv"))
        .arg(data.join("secrets_formats.tsv"))
        .env("USER", "mcp-tester")
        .output()
        .expect("python runs");
    assert_success(&out, "secrets through every surface");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(served.stop().success());
    let leaks = leaks(&store, &secrets);
    assert!(leaks.is_empty(), "{} secrets on disk:\n{}", leaks.len(), leaks.join("\n"));
}
