//! The `hmg` binary: the CLI contract (JSON fields, exit statuses, scope
//! inference from the working directory).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub(crate) fn hmg(store: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hmg"))
        .args(args)
        .env("HMG_STORE", store)
        .env("USER", "cli-tester")
        .current_dir(cwd)
        .output()
        .expect("hmg runs")
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

/// A directory that looks like a clone of `owner/name` on `branch`.
pub(crate) fn fake_repo(root: &Path, owner: &str, name: &str, branch: &str) -> std::path::PathBuf {
    let repo = root.join(name);
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    std::fs::write(repo.join(".git/HEAD"), format!("ref: refs/heads/{branch}\n")).unwrap();
    std::fs::write(
        repo.join(".git/config"),
        format!("[core]\n\tbare = false\n[remote \"origin\"]\n\turl = git@github.com:{owner}/{name}.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"),
    )
    .unwrap();
    repo
}

#[test]
fn memorize_recall_free_contract_and_exit_statuses() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let repo = fake_repo(tmp.path(), "acme", "widgets", "main");
    let cwd = repo.join("src/deep");

    let out = hmg(&store, &cwd, &["memorize", "本项目用 PostgreSQL 16 做主数据库", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let applied = json(&out);
    assert_eq!(applied["effect"], "applied");
    let atom = applied["atom_id"].as_str().unwrap().to_owned();
    assert!(applied.get("reason").is_none() && applied.get("deduped_with").is_none());

    let out = hmg(&store, &cwd, &["memorize", "本项目用 postgresql 16 做主数据库。", "--json"]);
    assert_eq!(out.status.code(), Some(0), "no_op exits 0");
    let no_op = json(&out);
    assert_eq!((no_op["effect"].as_str(), no_op["deduped_with"].as_str()), (Some("no_op"), Some(atom.as_str())));

    let out = hmg(&store, &cwd, &["memorize", "   ", "--json"]);
    assert_eq!(out.status.code(), Some(2), "rejected exits 2");
    assert_eq!(json(&out)["effect"], "rejected");

    let out = hmg(&store, &cwd, &["correct", &atom, "rewrite", "--reason", "x", "--json"]);
    assert_eq!(out.status.code(), Some(2), "invalid exits 2");
    let error = json(&out);
    assert_eq!(error["field"], "action");
    assert!(error["error"].as_str().unwrap().contains("rewrite"));

    let out = hmg(&store, &cwd, &["correct", &atom, "replace", "--reason", "升级", "--json"]);
    assert_eq!((out.status.code(), json(&out)["field"].as_str()), (Some(2), Some("new_content")));

    let out =
        hmg(&store, &cwd, &["correct", &atom, "replace", "--reason", "升级", "--new-content", "主数据库升级到 PostgreSQL 17", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let replaced = json(&out);
    assert_eq!(replaced["effect"], "applied");
    assert_eq!(replaced["target_atom"], atom.as_str());
    let head = replaced["new_atom_id"].as_str().unwrap().to_owned();

    let out = hmg(&store, &cwd, &["govern", &head, "quarantine", "--reason", "check", "--json"]);
    assert_eq!((out.status.code(), json(&out)["effect"].as_str()), (Some(0), Some("applied")));
    let out = hmg(
        &store,
        &cwd,
        &["govern", &head, "derive_lesson", "--reason", "r", "--lesson-content", "移行前に必ずバックアップを取る", "--json"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(json(&out)["lesson_atom_id"].is_string());

    let out = hmg(&store, &cwd, &["handoff", "完成了数据库迁移；下一步：补集成测试", "--json"]);
    assert_eq!(json(&out)["effect"], "applied");

    let out = hmg(&store, &cwd, &["stats", "--json"]);
    let stats = json(&out);
    assert_eq!(stats["atoms"], 4);
    assert!(stats["edges"].as_u64().unwrap() >= 3);
    for index in ["semantic", "keyword", "temporal", "categorical"] {
        assert!(stats["indexes"][index].is_u64(), "{index}");
    }
    // memorize, replace, quarantine, derive_lesson, handoff: five writes; the
    // no_op, the rejection and the invalid requests wrote nothing.
    assert_eq!(stats["snapshot_version"], 5);

    let out = hmg(&store, &cwd, &["history", &atom, "--json"]);
    let history = json(&out);
    assert_eq!(history["chain"].as_array().unwrap().len(), 2);
    assert_eq!(history["head"], head.as_str());
    let scope = &history["chain"][0]["scope"];
    assert_eq!((scope["tenant_id"].as_str(), scope["workspace"].as_str()), (Some("cli-tester"), Some("acme")));
    assert_eq!((scope["repository"].as_str(), scope["branch"].as_str()), (Some("widgets"), Some("main")));

    let out = hmg(&store, &cwd, &["brief"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("完成了数据库迁移") && text.contains("必ずバックアップ"), "{text}");

    let out = hmg(&store, &cwd, &["recall", "主数据库", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let recalled = json(&out);
    let found: Vec<&str> = recalled["atoms"].as_array().unwrap().iter().filter_map(|a| a["atom_id"].as_str()).collect();
    assert!(!found.contains(&atom.as_str()), "a superseded atom is not recalled");
    assert!(!found.contains(&head.as_str()), "a sealed atom is not recalled");
    let first = &recalled["atoms"][0];
    assert!(first["content"].as_str().unwrap().contains("数据库"), "{recalled}");
    for field in ["atom_id", "content", "score", "created_at", "source"] {
        assert!(!first[field].is_null(), "{field}");
    }
    assert!((0.0..=1.0).contains(&first["score"].as_f64().unwrap()));
    let out = hmg(&store, &cwd, &["recall", "主数据库", "--max-results", "0", "--json"]);
    assert_eq!((out.status.code(), json(&out)["field"].as_str()), (Some(2), Some("max_results")));
    let out = hmg(&store, &cwd, &["recall", "database", "--explain"]);
    assert_eq!(out.status.code(), Some(0));
    let out = hmg(&store, tmp.path(), &["reindex"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("reindexed"));

    let out = hmg(&store, &cwd, &["audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["ok"], true);

    let out = hmg(&store, &cwd, &["history", "nope", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let out = hmg(&store, &cwd, &["stats"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("snapshot_version"));
}

#[test]
fn export_import_and_scope_overrides() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let other_store = tmp.path().join("other");
    let repo = fake_repo(tmp.path(), "acme", "widgets", "feature-x");
    hmg(&store, &repo, &["memorize", "Widgets render with wgpu"]);
    hmg(&store, &repo, &["memorize", "Gadgets are another repo", "--repository", "gadgets"]);
    let out = hmg(&store, &repo, &["export"]);
    let exported = String::from_utf8(out.stdout).unwrap();
    assert_eq!(exported.lines().count(), 1, "only atoms visible from this repository: {exported}");
    let out = hmg(&store, &repo, &["export", "--all", "--format", "nquads"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("Gadgets are another repo"));
    let file = tmp.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let out = hmg(&other_store, &repo, &["import", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let ack: Value = serde_json::from_str(String::from_utf8(out.stdout).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(ack["effect"], "applied");
    let out = hmg(&store, &repo, &["export", "--format", "turtle"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("turtle"));

    // Content lines go to the scope of the working directory, and the
    // summary says which: inside the checkout only its agents see them.
    let lines = tmp.path().join("lines.jsonl");
    std::fs::write(&lines, "{\"content\": \"The build cache lives on the NAS\"}\n").unwrap();
    let out = hmg(&other_store, &repo, &["import", lines.to_str().unwrap()]);
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("1 applied") && summary.contains("repository acme/widgets"), "{summary}");
    let out = hmg(&other_store, tmp.path(), &["import", lines.to_str().unwrap()]);
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("1 applied") && summary.contains("tenant-wide"), "{summary}");

    // A recall that finds nothing says what it searched and how to reach
    // another repository's memories: run outside the checkout, the
    // repository's own lines are not searched.
    let elsewhere = fake_repo(&tmp.path().join("elsewhere"), "acme", "gizmos", "main");
    let out = hmg(&store, &elsewhere, &["recall", "wgpu rendering"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no memories found");
    let hint = String::from_utf8_lossy(&out.stderr);
    assert!(hint.contains("tenant 'cli-tester'") && hint.contains("repository acme/gizmos") && hint.contains("--repository"), "{hint}");
    let out = hmg(&store, &elsewhere, &["recall", "wgpu rendering", "--workspace", "acme", "--repository", "widgets"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Widgets render with wgpu"), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stderr.is_empty() || !String::from_utf8_lossy(&out.stderr).contains("searched"));
    let out = hmg(&store, tmp.path(), &["recall", "老李的猫叫什么名字？"]);
    let hint = String::from_utf8_lossy(&out.stderr);
    assert!(hint.contains("tenant-wide memories only"), "{hint}");
    // --json stays one document on stdout, with no hint.
    let out = hmg(&store, &elsewhere, &["recall", "wgpu rendering", "--json"]);
    assert_eq!(json(&out)["atoms"], serde_json::json!([]));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("searched"));
}

#[test]
fn a_locked_store_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let _open = hmg::Memory::open(&store).unwrap();
    let out = hmg(&store, tmp.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("in use by another process"), "{stderr}");
}

#[test]
fn eval_reports_bad_files_and_options_as_the_callers_error() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let memories = tmp.path().join("m.jsonl");
    let queries = tmp.path().join("q.jsonl");
    std::fs::write(&memories, "{\"id\": \"m1\", \"sample_id\": \"s\", \"text\": \"主数据库用 PostgreSQL\"}\nnot json\n").unwrap();
    std::fs::write(&queries, "{\"id\": \"q1\", \"sample_id\": \"s\", \"question\": \"データベース\", \"gold\": [\"m1\"]}\n").unwrap();
    let (m, q) = (memories.to_str().unwrap(), queries.to_str().unwrap());
    let out = hmg(&store, tmp.path(), &["eval", "--memories", "/nonexistent/m.jsonl", "--queries", q, "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(json(&out)["error"].as_str().unwrap().contains("/nonexistent/m.jsonl"));
    let out = hmg(&store, tmp.path(), &["eval", "--memories", m, "--queries", q]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("m.jsonl:2"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = hmg(&store, tmp.path(), &["eval", "--memories", m, "--queries", q, "--tune", "magic=1", "--json"]);
    assert_eq!((out.status.code(), json(&out)["field"].as_str()), (Some(2), Some("tune")));
    assert!(json(&out)["error"].as_str().unwrap().contains("unknown parameter 'magic'"), "{}", json(&out));
    let out = hmg(&store, tmp.path(), &["eval", "--memories", m, "--queries", q, "--tune", "keyword=x", "--json"]);
    assert_eq!((out.status.code(), json(&out)["field"].as_str()), (Some(2), Some("tune")));
}

#[test]
fn reflect_on_disk_expires_past_due_memories_and_the_audit_chain_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let repo = fake_repo(tmp.path(), "acme", "api", "main");
    let out = hmg(&store, &repo, &["memorize", "The staging freeze lasts until Friday", "--expires-at", "2020-01-01"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    hmg(&store, &repo, &["memorize", "The API gateway is Envoy"]);
    let dry = json(&hmg(&store, &repo, &["--json", "reflect", "--dry-run"]));
    assert_eq!(dry["counts"]["expired"], 1, "{dry}");
    assert_eq!(dry["audit_record_ids"], serde_json::json!([]));
    let real = json(&hmg(&store, &repo, &["--json", "reflect"]));
    assert_eq!(real["counts"], dry["counts"], "{real}");
    assert_eq!(real["audit_record_ids"].as_array().unwrap().len(), 1);
    let text = String::from_utf8_lossy(&hmg(&store, &repo, &["reflect", "--dry-run", "--actions", "expiry"]).stdout).to_string();
    assert!(text.starts_with("### Memory Reflect Report") && text.contains("Expired: 0"), "already expired: {text}");
    let recall = json(&hmg(&store, &repo, &["--json", "recall", "staging freeze"]));
    assert!(
        recall["atoms"].as_array().unwrap().iter().all(|a| a["content"] != "The staging freeze lasts until Friday"),
        "expired memories leave recall: {recall}"
    );
    let verify = hmg(&store, &repo, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
    let bad = hmg(&store, &repo, &["reflect", "--until", "tomorrow"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("until"));
}

/// `hmg recall` is a one-shot process: it parks its recall usage beside
/// the store (no store write at exit) and the next process of another kind
/// commits it before it reads, so a SPARQL query sees every recall.
#[test]
fn cli_recalls_park_their_usage_and_a_sparql_query_sees_all_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    for content in ["PostgreSQL must be restarted after a config change", "老李的猫叫咪咪"] {
        let out = hmg(&store, tmp.path(), &["memorize", content]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // How many of the recalls returned each memory.
    let (mut postgres, mut cat) = (0, 0);
    for query in ["PostgreSQL restart", "PostgreSQL config change", "老李的猫"] {
        let out = hmg(&store, tmp.path(), &["recall", query]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        postgres += usize::from(text.contains("PostgreSQL must be restarted"));
        cat += usize::from(text.contains("老李的猫叫咪咪"));
        assert!(store.join("usage.journal").exists(), "{query}: parked, not committed");
    }
    assert!(postgres >= 2 && cat >= 1, "{postgres} {cat}");
    let query = tmp.path().join("usage.rq");
    std::fs::write(
        &query,
        "PREFIX hmg: <https://w3id.org/hmg/ns#>\nSELECT ?content ?count WHERE { ?a hmg:content ?content ; hmg:recallCount ?count } ORDER BY ?content",
    )
    .unwrap();
    let out = hmg(&store, tmp.path(), &["sparql", query.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |expected: String| text.lines().any(|line| line.trim_end() == expected);
    assert!(row(format!("PostgreSQL must be restarted after a config change,{postgres}")), "{text}");
    assert!(row(format!("老李的猫叫咪咪,{cat}")), "{text}");
    assert!(!store.join("usage.journal").exists(), "committed, then removed");
}

#[test]
fn span_times_are_logged_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let run = |spans: Option<&str>, text: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hmg"));
        command.args(["memorize", text]).env("HMG_STORE", &store).env("USER", "cli-tester").env("HMG_LOG", "hmg=info");
        command.current_dir(tmp.path());
        if let Some(spans) = spans {
            command.env("HMG_LOG_SPANS", spans);
        }
        let out = command.output().expect("hmg runs");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let logged = run(Some("1"), "Ana waters the basil on Sundays");
    // The write's span closes with its times, inside memorize's.
    let write = logged.lines().find(|l| l.contains("write{action=memorize") && l.contains("close")).unwrap_or_else(|| panic!("{logged}"));
    assert!(write.contains("time.busy=") && write.contains("time.idle="), "{write}");
    assert!(logged.lines().any(|l| l.contains("memorize{") && l.contains("close time.busy=")), "{logged}");
    // Without it (or with 0), the events only.
    for spans in [None, Some("0"), Some("")] {
        let quiet = run(spans, &format!("李伟每周日跑五公里 {spans:?}"));
        assert!(quiet.contains("memorized"), "info events still logged: {quiet}");
        assert!(!quiet.contains("time.busy"), "{spans:?}: {quiet}");
    }
}

#[test]
fn pack_files_go_where_hmg_pack_dir_says_and_nowhere_with_off() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, cache, packs) = (tmp.path().join("store"), tmp.path().join("cache"), tmp.path().join("packs"));
    let run = |pack_dir: Option<&str>, args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hmg"));
        command.args(args).env("HMG_STORE", &store).env("USER", "cli-tester").env("XDG_CACHE_HOME", &cache).current_dir(tmp.path());
        match pack_dir {
            Some(dir) => command.env("HMG_PACK_DIR", dir),
            None => command.env_remove("HMG_PACK_DIR"),
        };
        let out = command.output().expect("hmg runs");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let files = |dir: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        names.sort();
        names
    };
    // `off`: the models are made at load and nothing is written anywhere.
    run(Some("off"), &["memorize", "田中さんは毎朝コーヒーを飲みます"]);
    assert!(run(Some("off"), &["recall", "田中さんの朝の飲み物"]).contains("コーヒー"));
    assert!(files(&cache.join("hmg").join("packs")).is_empty() && !packs.exists());
    // A directory: one file per model (MiniLM always; e5 where the VNNI
    // kernel runs), written by the first command that embeds and mapped by
    // the next, which finds the same memory.
    let first = run(Some(packs.to_str().unwrap()), &["recall", "what does Tanaka drink in the morning"]);
    let written = files(&packs);
    assert!(written.iter().any(|n| n.starts_with("bert-")) && written.iter().all(|n| n.ends_with(".pack")), "{written:?}");
    let again = run(Some(packs.to_str().unwrap()), &["recall", "what does Tanaka drink in the morning"]);
    assert!(first.contains("コーヒー") && again.contains("コーヒー"), "{first}\n{again}");
    assert_eq!(files(&packs), written);
    // Unset: the user's cache directory.
    run(None, &["recall", "老李的猫"]);
    assert_eq!(files(&cache.join("hmg").join("packs")), written);
}
