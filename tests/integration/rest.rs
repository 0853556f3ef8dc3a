//! The mem0-style REST API against `hmg serve`: the seed's curl examples,
//! a preference changed twice, the OpenAI-compatible extractor (with a
//! stand-in endpoint speaking the real wire format) and its fallback, and
//! schemathesis against the served OpenAPI document.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::mcp::{Served, assert_success, client_tool};

/// One request with curl: (status, JSON body).
fn http(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let mut command = Command::new("curl");
    command.args(["-sS", "-X", method, "-w", "\n%{http_code}", url]);
    if let Some(body) = body {
        command.args(["-H", "Content-Type: application/json", "-d", &body.to_string()]);
    }
    let out = command.output().expect("curl runs");
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').expect("status line");
    (status.trim().parse().expect("status code"), serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())))
}

fn api(served: &Served, path: &str) -> String {
    format!("{}/api/v1/hetamem/vg{path}", served.url)
}

fn is_ulid(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.len() == 26 && hmg::atom::parse_atom_id(s).is_ok())
}

#[test]
fn the_seed_curl_examples_give_the_seed_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    let served = Served::start(&tmp.path().join("store"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/seed_003_examples.sh");
    let out = Command::new("sh").arg(script).arg(&served.url).output().expect("sh runs");
    assert_success(&out, "seed 003 curl examples");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let answer = |label: &str| -> Value {
        let line = text
            .lines()
            .find(|l| l.split_once(' ').is_some_and(|(head, _)| head == label))
            .unwrap_or_else(|| panic!("no {label} in\n{text}"));
        serde_json::from_str(line.split_once(' ').unwrap().1).unwrap_or_else(|e| panic!("{label}: {e}\n{line}"))
    };
    // POST /add: {"results": [{"id", "memory", "event"}]}.
    let added = answer("ADD");
    let results = added["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{added}");
    assert!(is_ulid(&results[0]["id"]), "{added}");
    assert_eq!(results[0]["memory"], "Prefers concise Python examples");
    assert_eq!(results[0]["event"], "ADD");
    let id = results[0]["id"].clone();
    // POST /search: {"results": [{"id", "memory", "score"}]}.
    let found = answer("SEARCH");
    assert_eq!(found["results"][0]["id"], id, "{found}");
    assert_eq!(found["results"][0]["memory"], "Prefers concise Python examples");
    let score = found["results"][0]["score"].as_f64().unwrap();
    assert!(score > 0.0 && score <= 1.0, "{found}");
    // GET ?agent_id=agent lists it.
    let listed = answer("LIST");
    assert_eq!(listed["results"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["results"][0]["id"], id);
    // PUT: a new version; search then finds only the newest content.
    let updated = answer("UPDATE");
    assert_eq!(updated["event"], "UPDATE", "{updated}");
    assert_eq!(updated["memory"], "Prefers concise Python examples with type hints");
    assert_eq!(updated["previous_memory"], "Prefers concise Python examples");
    let after = answer("SEARCH_AFTER_UPDATE");
    let hits = after["results"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "only the newest version is found: {after}");
    assert_eq!(hits[0]["memory"], "Prefers concise Python examples with type hints");
    assert_eq!(hits[0]["id"], updated["id"]);
    // DELETE with the id the client kept from the add: acts on the current version.
    let deleted = answer("DELETE");
    assert_eq!(deleted["event"], "DELETE", "{deleted}");
    assert_eq!(deleted["id"], updated["id"]);
    // History: ADD, UPDATE, DELETE with timestamps from the audit chain.
    let history = answer("HISTORY");
    let events: Vec<&str> = history.as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ADD", "UPDATE", "DELETE"], "{history}");
    for event in history.as_array().unwrap() {
        assert!(chrono::DateTime::parse_from_rfc3339(event["created_at"].as_str().unwrap()).is_ok(), "{event}");
    }
    assert_eq!(history[1]["old_memory"], "Prefers concise Python examples");
    assert_eq!(history[1]["new_memory"], "Prefers concise Python examples with type hints");
    assert_eq!(history[2]["old_memory"], "Prefers concise Python examples with type hints", "a delete keeps the content in history");
    assert_eq!(answer("SEARCH_AFTER_DELETE")["results"], json!([]));
    // The deleted memory is gone from GET and lists, and says so.
    let (status, body) = http("GET", &api(&served, &format!("/{}", id.as_str().unwrap())), None);
    assert_eq!(status, 200, "the chain is still readable: {body}");
    assert_eq!(body["status"], "negated");
    let (status, _) = http("DELETE", &api(&served, &format!("/{}", id.as_str().unwrap())), None);
    assert_eq!(status, 404, "deleting twice");
    assert_eq!(http("GET", &api(&served, "?agent_id=agent"), None).1["results"], json!([]));
    assert!(served.stop().success());
}

#[test]
fn a_preference_changed_twice_leaves_one_memory_and_a_two_step_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let served = Served::start(&tmp.path().join("store"));
    let add = |text: &str| {
        let body = json!({"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Got it."}], "user_id": "alice", "agent_id": "editor"});
        let (status, answer) = http("POST", &api(&served, "/add"), Some(&body));
        assert_eq!(status, 200, "{answer}");
        answer["results"][0].clone()
    };
    let first = add("Hello! I prefer tabs for indentation.");
    assert_eq!((first["event"].as_str(), first["memory"].as_str()), (Some("ADD"), Some("Prefers tabs for indentation")), "{first}");
    let second = add("I prefer spaces for indentation.");
    assert_eq!(second["event"], "UPDATE", "{second}");
    let third = add("I prefer two spaces for indentation.");
    assert_eq!(third["event"], "UPDATE", "{third}");
    assert_eq!(third["previous_memory"], "Prefers spaces for indentation");
    // Someone else's memory with the same words is not touched.
    let (_, other) = http(
        "POST",
        &api(&served, "/add"),
        Some(&json!({"messages": [{"role": "user", "content": "I prefer tabs for indentation."}], "user_id": "bob", "agent_id": "editor"})),
    );
    assert_eq!(other["results"][0]["event"], "ADD", "{other}");
    let (_, listed) = http("GET", &api(&served, "?user_id=alice&agent_id=editor"), None);
    let active = listed["results"].as_array().unwrap();
    assert_eq!(active.len(), 1, "{listed}");
    assert_eq!(active[0]["memory"], "Prefers two spaces for indentation");
    let (_, history) = http("GET", &api(&served, &format!("/{}/history", first["id"].as_str().unwrap())), None);
    let events: Vec<&str> = history.as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ADD", "UPDATE", "UPDATE"], "two-step evolution chain: {history}");
    // The same in Chinese and Japanese: a change of preference is an update.
    let zh = |text: &str| {
        http("POST", &api(&served, "/add"), Some(&json!({"messages": [{"role": "user", "content": text}], "user_id": "li"}))).1
    };
    assert_eq!(zh("我喜欢喝咖啡。")["results"][0]["event"], "ADD");
    assert_eq!(zh("我不再喜欢喝咖啡。")["results"][0]["event"], "DELETE");
    let ja = |text: &str| {
        http("POST", &api(&served, "/add"), Some(&json!({"messages": [{"role": "user", "content": text}], "user_id": "sato"}))).1
    };
    assert_eq!(ja("私は緑茶が好きです。")["results"][0]["memory"], "緑茶が好き");
    // An assistant message alone caches an answer.
    let cached = http(
        "POST",
        &api(&served, "/add"),
        Some(&json!({"messages": [{"role": "assistant", "content": "The deploy script lives in scripts/deploy.sh."}], "agent_id": "ops"})),
    )
    .1;
    assert_eq!(cached["results"][0]["event"], "ADD", "{cached}");
    // infer=false stores the messages' text as it is (system messages aside).
    let raw = http("POST", &api(&served, "/add"), Some(&json!({"infer": false, "agent_id": "raw", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello! I prefer tabs."}]}))).1;
    assert_eq!(raw["results"].as_array().unwrap().len(), 1, "{raw}");
    assert_eq!(
        (raw["results"][0]["event"].as_str(), raw["results"][0]["memory"].as_str()),
        (Some("ADD"), Some("Hello! I prefer tabs.")),
        "{raw}"
    );
    // Several messages are written together; each is still deduplicated,
    // against the store and against the messages before it.
    let several = http(
        "POST",
        &api(&served, "/add"),
        Some(&json!({"infer": false, "agent_id": "raw", "messages": [
            {"role": "user", "content": "Hello! I prefer tabs."},
            {"role": "user", "content": "我每天早上喝绿茶。"},
            {"role": "assistant", "content": "了解しました。毎朝緑茶ですね。"},
            {"role": "user", "content": "我每天早上喝绿茶。"},
        ]})),
    )
    .1;
    let events: Vec<(&str, &str)> = several["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["event"].as_str().unwrap_or_default(), r["id"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), ["NONE", "ADD", "ADD", "NONE"], "{several}");
    assert_eq!(events[0].1, raw["results"][0]["id"].as_str().unwrap(), "the stored one: {several}");
    assert_eq!(events[3].1, events[1].1, "the earlier message of the add: {several}");
    // DELETE / negates every memory of one scope only.
    let (status, gone) = http("DELETE", &api(&served, "?user_id=alice&agent_id=editor"), None);
    assert_eq!((status, gone["deleted"].as_u64()), (200, Some(1)), "{gone}");
    assert_eq!(http("GET", &api(&served, "?user_id=bob&agent_id=editor"), None).1["results"].as_array().unwrap().len(), 1);
    assert!(served.stop().success());
    let verify = crate::cli::hmg(&tmp.path().join("store"), tmp.path(), &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
}

#[test]
fn malformed_requests_get_a_clear_4xx() {
    let tmp = tempfile::tempdir().unwrap();
    let served = Served::start(&tmp.path().join("store"));
    let cases: Vec<(&str, String, Option<Value>, u16, &str)> = vec![
        ("POST", api(&served, "/add"), Some(json!({"messages": [{"role": "user", "content": "x"}]})), 400, "user_id"),
        (
            "POST",
            api(&served, "/add"),
            Some(json!({"messages": [{"role": "robot", "content": "hi"}], "user_id": "a"})),
            400,
            "unknown role 'robot'",
        ),
        ("POST", api(&served, "/add"), Some(json!({"messages": "hello", "user_id": "a"})), 400, "messages"),
        ("POST", api(&served, "/add"), Some(json!({"messages": [], "user_id": "a", "metadata": {}})), 400, "metadata"),
        ("POST", api(&served, "/search"), Some(json!({"query": "", "agent_id": "a"})), 400, "query"),
        ("POST", api(&served, "/search"), Some(json!({"query": "x", "agent_id": "a", "limit": 0})), 400, "limit"),
        ("POST", api(&served, "/search"), Some(json!({"query": "x", "agent_id": "a\u{7}"})), 400, "agent_id"),
        ("GET", api(&served, "/not-an-id"), None, 400, "memory_id"),
        ("GET", api(&served, "/01J9ZK8V3QX7N2M4R6T8W0YB1C"), None, 404, "no memory"),
        ("PUT", api(&served, "/01J9ZK8V3QX7N2M4R6T8W0YB1C"), Some(json!({"data": "x"})), 404, "no memory"),
        ("PUT", api(&served, "/01J9ZK8V3QX7N2M4R6T8W0YB1C"), Some(json!({"text": "x"})), 400, "text"),
        ("GET", api(&served, "?limit=5"), None, 400, "user_id"),
        ("GET", api(&served, "?agent_id=a&limit=abc"), None, 400, "limit"),
    ];
    for (method, url, body, status, needle) in cases {
        let (got, answer) = http(method, &url, body.as_ref());
        assert_eq!(got, status, "{method} {url} {body:?}: {answer}");
        assert!(answer.to_string().contains(needle), "{method} {url}: {answer} should mention {needle}");
    }
    // Not JSON at all, and the wrong content type.
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "-X", "POST", "-H", "Content-Type: application/json", "-d", "{not json"])
        .arg(api(&served, "/add"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("400"));
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "-X", "POST", "-H", "Content-Type: text/plain", "-d", "{}"])
        .arg(api(&served, "/search"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("415"));
    assert_eq!(http("GET", &format!("{}/healthz", served.url), None).0, 200);
}

/// The stand-in endpoint, running until dropped.
struct FakeEndpoint {
    child: Child,
    url: String,
}

impl FakeEndpoint {
    fn start() -> FakeEndpoint {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/fake_openai.py");
        let mut child = Command::new(client_tool("HMG_TEST_PYTHON")).arg(script).stdout(Stdio::piped()).spawn().expect("python runs");
        let stdout = child.stdout.take().expect("stdout piped");
        let line = BufReader::new(stdout).lines().next().expect("fake endpoint announces its port").expect("readable");
        let port = line.trim().strip_prefix("listening ").expect("listening <port>").to_owned();
        FakeEndpoint { child, url: format!("http://127.0.0.1:{port}") }
    }

    fn mode(&self, mode: &str) {
        assert_eq!(http("POST", &format!("{}/control", self.url), Some(&json!({"mode": mode}))).0, 200);
    }
}

impl Drop for FakeEndpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_openai_compatible_endpoint_extracts_and_a_failing_one_falls_back() {
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = FakeEndpoint::start();
    let base = format!("{}/v1", endpoint.url);
    let served = Served::start_with(
        &tmp.path().join("store"),
        &[
            ("HMG_EXTRACT_BASE_URL", &base),
            ("HMG_EXTRACT_MODEL", "fake-model"),
            ("HMG_EXTRACT_API_KEY", "sk-test-key"),
            ("HMG_EXTRACT_TIMEOUT_SECS", "2"),
        ],
    );
    let add = |text: &str| {
        let (status, answer) =
            http("POST", &api(&served, "/add"), Some(&json!({"messages": [{"role": "user", "content": text}], "user_id": "alice"})));
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let answer = add("I work at Acme as a data engineer.");
    assert_eq!(answer["results"][0]["memory"], "Works at Acme as a data engineer", "the endpoint's fact: {answer}");
    assert!(answer.get("warnings").is_none(), "{answer}");
    let (_, last) = http("GET", &format!("{}/last", endpoint.url), None);
    assert_eq!(last["authorization"], "Bearer sk-test-key");
    assert_eq!(last["body"]["model"], "fake-model");
    assert!(last["body"]["messages"][1]["content"].as_str().unwrap().contains("user: I work at Acme"), "{last}");

    let cases = [
        ("error", "500", "I drink oolong tea.", "Drinks oolong tea"),
        ("slow", "timeout", "I live in Osaka.", "Lives in Osaka"),
        ("garbage", "did not answer with a list of facts", "I play the cello.", "Plays the cello"),
    ];
    for (mode, needle, said, fact) in cases {
        endpoint.mode(mode);
        let answer = add(said);
        let warning = answer["warnings"][0].as_str().unwrap_or_else(|| panic!("{mode}: a warning is expected: {answer}"));
        assert!(warning.to_lowercase().contains(needle) && warning.contains("built-in extractor"), "{mode}: {warning}");
        assert_eq!(answer["results"][0]["event"], "ADD", "{mode}: the add is not lost: {answer}");
        assert_eq!(answer["results"][0]["memory"], fact, "{mode}: the built-in extractor's fact");
    }
    drop(served);
    // A base URL without a model is refused at start.
    let out = Command::new(env!("CARGO_BIN_EXE_hmg"))
        .arg("--store")
        .arg(tmp.path().join("other"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HMG_EXTRACT_BASE_URL", &base)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HMG_EXTRACT_MODEL"));
}

#[test]
fn schemathesis_finds_no_server_error() {
    let tmp = tempfile::tempdir().unwrap();
    let served = Served::start(&tmp.path().join("store"));
    // Some memories to find, so searches and lists reach real data.
    for text in ["I prefer concise Python examples.", "我喜欢喝咖啡。", "私は緑茶が好きです。"] {
        http("POST", &api(&served, "/add"), Some(&json!({"messages": [{"role": "user", "content": text}], "agent_id": "0"})));
    }
    let out = Command::new(client_tool("HMG_TEST_SCHEMATHESIS"))
        .args(["run", &api(&served, "/openapi.json"), "--checks"])
        .arg("not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance")
        .args(["--max-examples", "40", "--seed", "20261130", "--no-color"])
        .current_dir(tmp.path())
        .output()
        .expect("schemathesis runs");
    assert_success(&out, "schemathesis");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("passed") && !text.contains("failed"), "{text}");
    assert_eq!(http("GET", &format!("{}/healthz", served.url), None).0, 200, "the server is still up");
    assert!(served.stop().success());
}

#[test]
fn purge_destroys_the_text_of_every_version_and_keeps_the_audit_trail() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let served = Served::start(&store);
    let (_, added) = http(
        "POST",
        &api(&served, "/add"),
        Some(&json!({"messages": [{"role": "user", "content": "My locker code is 4711-QUOKKA."}], "user_id": "u"})),
    );
    let id = added["results"][0]["id"].as_str().unwrap().to_owned();
    let (status, _) = http("PUT", &api(&served, &format!("/{id}")), Some(&json!({"data": "Locker code is 9999-WOMBAT"})));
    assert_eq!(status, 200);
    let (status, purged) = http("DELETE", &api(&served, &format!("/{id}?purge=true")), None);
    assert_eq!((status, purged["deleted"].as_u64()), (200, Some(2)), "{purged}");
    let (_, item) = http("GET", &api(&served, &format!("/{id}")), None);
    assert_eq!(item["status"], "tombstoned", "{item}");
    let (_, history) = http("GET", &api(&served, &format!("/{id}/history")), None);
    let text = history.to_string();
    assert!(!text.contains("QUOKKA") && !text.contains("WOMBAT"), "{history}");
    let events: Vec<&str> = history.as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ADD", "UPDATE", "DELETE", "DELETE"], "{history}");
    assert_eq!(http("POST", &api(&served, "/search"), Some(&json!({"query": "locker code", "user_id": "u"}))).1["results"], json!([]));
    assert!(served.stop().success());
    // Gone from every file of the store, not just hidden.
    for secret in ["QUOKKA", "WOMBAT"] {
        assert!(!crate::govern::files_contain(&store, secret.as_bytes()), "{secret} is still on disk");
    }
    let verify = crate::cli::hmg(&store, tmp.path(), &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
}

/// `../shared/bench/merge` (check.py and the labelled dev cases): from
/// `HMG_MERGE_BENCH`, beside the repository, or the workspace's copy.
fn merge_bench() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates: Vec<std::path::PathBuf> = std::env::var_os("HMG_MERGE_BENCH")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain([manifest.join("../shared/bench/merge"), std::path::PathBuf::from("/work/shared/bench/merge")])
        .collect();
    candidates.iter().find(|dir| dir.join("check.py").is_file()).cloned().unwrap_or_else(|| {
        panic!("the merge cases are not found (set HMG_MERGE_BENCH to the folder holding check.py); looked in {candidates:?}")
    })
}

/// Runs check.py on `cases` against a real server: overall at least 90%,
/// every language and phenomenon at least 80%.
fn merge_check(served: &Served, cases: &std::path::Path, label: &str) {
    let out = Command::new("python3")
        .arg(merge_bench().join("check.py"))
        .arg("--cases")
        .arg(cases)
        .args(["--url", &served.url, "--min", "0.9", "--label", label])
        .output()
        .expect("python3 runs check.py");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{report}");
    assert!(out.status.success(), "{label}: below 90%\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut section = "";
    for line in report.lines() {
        if line.starts_with("per language") || line.starts_with("per phenomenon") {
            section = line;
            continue;
        }
        if !line.starts_with("  ") || section.is_empty() {
            section = if line.starts_with("  ") { section } else { "" };
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [name, ratio, _] = fields.as_slice()
            && let Some((passed, all)) = ratio.split_once('/')
            && let (Ok(passed), Ok(all)) = (passed.parse::<u32>(), all.parse::<u32>())
        {
            assert!(passed * 5 >= all * 4, "{label}: {section} {name} {passed}/{all} is below 80%\n{report}");
        }
    }
}

/// The REST add's extraction and merge, scored by the labelled cases: the
/// dev cases of `../shared/bench/merge` and this repository's own cases
/// (other people, things and wording: tests/data/merge_cases.json).
#[test]
fn rest_add_gets_the_labelled_chat_cases_right() {
    let tmp = tempfile::tempdir().unwrap();
    let served = Served::start(&tmp.path().join("store"));
    merge_check(&served, &merge_bench().join("dev_cases.json"), "merge dev");
    merge_check(&served, &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/merge_cases.json"), "merge own");
}

/// `dry_run` decides and explains without writing.
#[test]
fn a_dry_run_add_explains_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let served = Served::start(&tmp.path().join("store"));
    let add = |text: &str, dry: bool| {
        let body = json!({"messages": [{"role": "user", "content": text}], "user_id": "dana", "dry_run": dry});
        let (status, answer) = http("POST", &api(&served, "/add"), Some(&body));
        assert_eq!(status, 200, "{answer}");
        answer
    };
    add("I live in Portland.", false);
    let planned = add("Big news: we just moved to Denver! Thanks for the tips.", true);
    assert_eq!(planned["results"].as_array().map(Vec::len), Some(1), "{planned}");
    assert_eq!(planned["results"][0]["event"], "UPDATE", "{planned}");
    assert_eq!(planned["results"][0]["previous_memory"], "Lives in Portland", "{planned}");
    let why = planned["results"][0]["why"].as_str().unwrap_or_default();
    assert!(why.contains("home") && why.contains("Portland"), "the slot and the matched memory: {why}");
    let (_, listed) = http("GET", &format!("{}?user_id=dana", api(&served, "")), None);
    let contents: Vec<&str> = listed["results"].as_array().unwrap().iter().filter_map(|m| m["memory"].as_str()).collect();
    assert_eq!(contents, ["Lives in Portland"], "a dry run writes nothing: {listed}");
    // The real add does what the dry run said, and history says why.
    let done = add("Big news: we just moved to Denver! Thanks for the tips.", false);
    assert_eq!(done["results"][0]["event"], "UPDATE", "{done}");
    let id = done["results"][0]["id"].as_str().unwrap();
    let (_, history) = http("GET", &format!("{}/{id}/history?user_id=dana", api(&served, "")), None);
    assert!(history.to_string().contains("home"), "history carries the reason: {history}");
}
