//! Hybrid recall: keyword (three languages), semantic (the real local
//! model), graph expansion, scope and status rules, self-healing indexes.

use hmg::{Caller, CorrectAction, CorrectRequest, Memory, MemoryError, MemoryOptions, RecallRequest, Scope};

use super::{caller, memory, remember};

fn ids(memory: &Memory, caller: &Caller, query: &str) -> Vec<String> {
    memory.recall(caller, RecallRequest::new(query)).unwrap().atoms.into_iter().map(|a| a.atom_id).collect()
}

/// A memory with the default local model; fails (never skips) when the model
/// is not installed — `scripts/test.sh` installs it.
fn with_model(dir: Option<&std::path::Path>) -> Memory {
    let memory = Memory::open_with(dir, MemoryOptions::default()).unwrap();
    assert!(
        memory.indexes().embedder().is_some(),
        "the default embedding model must be installed (scripts/setup.sh): {:?}",
        memory.indexes().semantic_note()
    );
    memory
}

#[test]
fn keyword_recall_in_three_languages() {
    let m = memory();
    let c = caller("hmg");
    let pg = remember(&m, &c, "本项目用 PostgreSQL 16 做主数据库，不用 MongoDB");
    let pool = remember(&m, &c, "数据库连接池上限是 50 个连接");
    let cache = remember(&m, &c, "キャッシュサーバーは Redis 7 を使う");
    let deploy = remember(&m, &c, "Deployments run through the Helm chart in deploy/helm");
    remember(&m, &c, "The team meets on Tuesdays");
    assert_eq!(ids(&m, &c, "PostgreSQL")[0], pg);
    assert_eq!(ids(&m, &c, "连接池配置")[0], pool);
    assert_eq!(ids(&m, &c, "キャッシュ")[0], cache);
    assert_eq!(ids(&m, &c, "helm deployment")[0], deploy);
    let outcome = m.recall(&c, RecallRequest::new("数据库")).unwrap();
    assert!(outcome.atoms.len() >= 2);
    for pair in outcome.atoms.windows(2) {
        assert!(pair[0].score >= pair[1].score);
    }
    for atom in &outcome.atoms {
        assert!((0.0..=1.0).contains(&atom.score), "{}", atom.score);
        assert!(!atom.created_at.is_empty() && !atom.source.is_empty());
    }
    assert!(outcome.warning.is_some(), "without a model the reply says semantic search is off");
    let stats = m.stats(&c).unwrap();
    assert_eq!((stats.indexes.keyword, stats.indexes.semantic), (5, 0));
    assert!(stats.warning.as_deref().unwrap_or("").contains("semantic search"), "{stats:?}");
}

#[test]
fn status_and_scope_rules() {
    let m = memory();
    let c = caller("hmg");
    let wrong = remember(&m, &c, "The staging database is MySQL 5.7");
    m.correct(&c, CorrectRequest { target_atom: wrong.clone(), action: CorrectAction::Negate, reason: "wrong".into(), new_content: None })
        .unwrap();
    let old = remember(&m, &c, "The staging database runs on port 5432");
    let new = m
        .correct(
            &c,
            CorrectRequest {
                target_atom: old.clone(),
                action: CorrectAction::Replace,
                reason: "moved".into(),
                new_content: Some("The staging database runs on port 6432".into()),
            },
        )
        .unwrap()
        .new_atom_id
        .unwrap();
    let found = ids(&m, &c, "staging database");
    assert!(found.contains(&new) && !found.contains(&old) && !found.contains(&wrong));
    let with_negated = m.recall(&c, RecallRequest { include_negated: true, ..RecallRequest::new("staging database MySQL") }).unwrap();
    assert!(with_negated.atoms.iter().any(|a| a.atom_id == wrong && a.status == hmg::Status::Negated));

    let other_repo = remember(&m, &caller("other"), "The staging database of the other repository");
    let personal = remember(&m, &Caller::new(Scope::tenant("alice"), "t"), "I prefer staging database dumps compressed");
    let dev_branch = remember(&m, &Caller::new(c.scope.clone().with_branch("dev"), "t"), "On dev the staging database is reset nightly");
    let found = ids(&m, &c, "staging database");
    assert!(!found.contains(&other_repo), "other repositories are not seen");
    assert!(found.contains(&personal), "tenant-wide memories are seen");
    assert!(found.contains(&dev_branch), "other branches are seen");
    let bob = Caller::new(Scope::tenant("bob").with_workspace("acme").with_repository("hmg"), "t");
    assert!(ids(&m, &bob, "staging database").is_empty(), "tenants never see each other");

    let quarantined = remember(&m, &c, "Quarantine candidate about the staging database");
    m.govern(
        &c,
        hmg::GovernRequest {
            target_atom: quarantined.clone(),
            action: hmg::GovernAction::Quarantine,
            reason: "check".into(),
            lesson_content: None,
        },
    )
    .unwrap();
    assert!(!ids(&m, &c, "quarantine candidate").contains(&quarantined));
    m.govern(
        &c,
        hmg::GovernRequest {
            target_atom: quarantined.clone(),
            action: hmg::GovernAction::Restore,
            reason: "ok".into(),
            lesson_content: None,
        },
    )
    .unwrap();
    assert!(ids(&m, &c, "quarantine candidate").contains(&quarantined));
}

#[test]
fn graph_expansion_reaches_atoms_sharing_a_rare_entity() {
    let m = memory();
    let c = caller("hmg");
    let seed = remember(&m, &c, "The billing outage was traced to the ledger-sync worker");
    let linked = remember(&m, &c, "ledger-sync worker restarts every night at 02:00");
    for i in 0..5 {
        remember(&m, &c, &format!("Unrelated note number {i} about lunch"));
    }
    let outcome = m.recall(&c, RecallRequest { explain: true, ..RecallRequest::new("billing outage") }).unwrap();
    let ranked: Vec<&str> = outcome.atoms.iter().map(|a| a.atom_id.as_str()).collect();
    assert_eq!(ranked[0], seed);
    let reached = outcome.atoms.iter().find(|a| a.atom_id == linked).expect("the linked atom is reached through the graph");
    let explain = reached.explain.as_ref().unwrap();
    assert!(explain.keyword.is_none(), "no keyword overlap with the query");
    assert!(explain.graph.iter().any(|(from, via, _)| from == &seed && via.starts_with("entity:")), "{explain:?}");
}

#[test]
fn invalid_recall_requests_name_the_field() {
    let m = memory();
    let c = caller("hmg");
    for (request, field) in [
        (RecallRequest::new("   "), "query"),
        (RecallRequest { max_results: 0, ..RecallRequest::new("x") }, "max_results"),
        (RecallRequest { max_results: 101, ..RecallRequest::new("x") }, "max_results"),
        (RecallRequest::new("长".repeat(hmg::recall::MAX_QUERY_CHARS + 1)), "query"),
    ] {
        match m.recall(&c, request) {
            Err(MemoryError::InvalidInput { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected an invalid {field}, got {other:?}"),
        }
    }
}

#[test]
fn semantic_recall_with_the_local_model() {
    let m = with_model(None);
    let c = caller("hmg");
    let target = remember(&m, &c, "The cat sleeps on the warm windowsill every afternoon");
    remember(&m, &c, "Quarterly revenue grew by twelve percent");
    remember(&m, &c, "The CI pipeline caches cargo registries");
    let outcome = m.recall(&c, RecallRequest { explain: true, ..RecallRequest::new("kitten napping in the sun") }).unwrap();
    assert_eq!(outcome.atoms[0].atom_id, target, "{outcome:?}");
    let explain = outcome.atoms[0].explain.as_ref().unwrap();
    assert!(explain.semantic.is_some() && explain.keyword.is_none());
    assert!(outcome.warning.is_none());
    let stats = m.stats(&c).unwrap();
    assert_eq!((stats.indexes.semantic, stats.indexes.keyword), (3, 3));
}

#[test]
fn an_english_only_model_embeds_english_memories_only_and_each_language_is_still_found() {
    let m = with_model(None);
    let c = caller("hmg");
    let en = remember(&m, &c, "The cat sleeps on the warm windowsill every afternoon");
    let zh = remember(&m, &c, "季度收入增长了百分之十二");
    let ja = remember(&m, &c, "CIパイプラインはcargoのレジストリをキャッシュします");
    let models = m.indexes().semantic();
    assert!(models.iter().any(|s| s.embedder.languages().is_some()), "the default ensemble has an English-only model");
    for s in models {
        // MiniLM (English) holds the English memory's vector only; e5 all three.
        let wanted = if s.embedder.languages().is_some() { 1 } else { 3 };
        assert_eq!(s.vectors.count(&c.scope.tenant_id), wanted, "{}", s.embedder.id());
    }
    // Coverage counts the memories every model of all languages embedded.
    let stats = m.stats(&c).unwrap();
    assert_eq!((stats.indexes.semantic, stats.indexes.keyword), (3, 3));
    for (query, wanted) in [("kitten napping in the sun", &en), ("收入增长了多少", &zh), ("キャッシュの設定はどこ", &ja)]
    {
        assert_eq!(ids(&m, &c, query).first(), Some(wanted), "{query}");
    }
}

#[test]
fn deleting_every_index_and_reopening_gives_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let c = caller("hmg");
    let queries = ["database", "数据库 连接", "キャッシュ", "deploy helm", "weekly meeting"];
    let texts = [
        "We use PostgreSQL 16 as the main database",
        "数据库连接池上限是 50 个连接",
        "キャッシュサーバーは Redis 7 を使う",
        "Deployments run through the Helm chart",
        "The weekly meeting moved to Thursday",
        "老李负责数据库迁移",
        "田中さんがキャッシュの設定を変えた",
    ];
    // Each query's atoms and scores. A reindex embeds the memories as one
    // batch, which runs on AMX tiles in bf16 where the CPU has them, while
    // `remember` embedded them one at a time on VNNI: vectors agree to a
    // cosine of ~0.9999; through fusion's normalized lists a score moves by
    // up to ~0.005 (two atoms that close may swap places). Same atoms, each
    // score within 0.01.
    let snapshot = |m: &Memory| -> Vec<Vec<(String, f32)>> {
        queries
            .iter()
            .map(|q| {
                let mut atoms: Vec<(String, f32)> =
                    m.recall(&c, RecallRequest::new(*q)).unwrap().atoms.into_iter().map(|a| (a.atom_id, a.score)).collect();
                atoms.sort_by(|a, b| a.0.cmp(&b.0));
                atoms
            })
            .collect()
    };
    let same = |a: &[Vec<(String, f32)>], b: &[Vec<(String, f32)>], when: &str| {
        for ((query, a), b) in queries.iter().zip(a).zip(b) {
            let ids = |l: &[(String, f32)]| l.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(a), ids(b), "{when}: other atoms for {query:?}");
            for ((id, x), (_, y)) in a.iter().zip(b) {
                assert!((x - y).abs() < 0.01, "{when}: {query:?} scores {id} {x} then {y}");
            }
        }
    };
    let before = {
        let m = with_model(Some(dir.path()));
        for text in texts {
            remember(&m, &c, text);
        }
        m.persist_indexes().unwrap();
        snapshot(&m)
    };
    let graph_file = dir.path().join("index/graph.bin");
    assert!(graph_file.exists(), "the graph index is persisted");
    // The index files hold the vectors as they were: the same scores to
    // 1e-4 (the query's own embedding may differ in its last bits).
    let rounded = |snapshot: Vec<Vec<(String, f32)>>| -> Vec<Vec<(String, u32)>> {
        snapshot.into_iter().map(|atoms| atoms.into_iter().map(|(id, score)| (id, (score * 1e4).round() as u32)).collect()).collect()
    };
    let exact = rounded(before.clone());
    assert_eq!(exact, rounded(snapshot(&with_model(Some(dir.path())))), "reopened from the index files");
    std::fs::write(&graph_file, b"not a graph file").unwrap();
    assert_eq!(exact, rounded(snapshot(&with_model(Some(dir.path())))), "an unreadable graph file is rebuilt from the store");
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let m = with_model(Some(dir.path()));
    same(&before, &snapshot(&m), "every index deleted");
    m.reindex(&mut |_, _, _| {}).unwrap();
    same(&before, &snapshot(&m), "reindexed");
}

#[test]
fn writes_not_yet_indexed_are_caught_up_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let c = caller("hmg");
    let id = {
        // Dropped without persisting: the keyword commit and vector file are
        // never written, as if the process died right after the store commit.
        let m = Memory::open_with(Some(dir.path()), MemoryOptions::default().with_embedder(hmg::EmbedderChoice::Disabled)).unwrap();
        remember(&m, &c, "Unindexed memory about the flux capacitor")
    };
    let m = Memory::open_with(Some(dir.path()), MemoryOptions::default().with_embedder(hmg::EmbedderChoice::Disabled)).unwrap();
    assert_eq!(ids(&m, &c, "flux capacitor"), [id]);
}

#[test]
fn the_onnx_backend_loads_the_installed_model_and_knows_its_languages() {
    use hmg::embed::Embedder;
    let embedder = hmg::embed::onnx::OnnxEmbedder::from_env().expect("scripts/setup.sh installs ONNX Runtime and all-MiniLM-L6-v2");
    assert_eq!(embedder.dims(), 384);
    assert_eq!(embedder.languages(), Some(&["en".to_owned()][..]));
    let query = embedder.embed_query("kitten napping in the sun").unwrap();
    let passages = embedder.embed_passages(&["The cat sleeps on the warm windowsill", "Quarterly revenue grew"]).unwrap();
    let cosine = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(cosine(&query, &passages[0]) > cosine(&query, &passages[1]) + 0.1);
    assert!((cosine(&query, &query) - 1.0).abs() < 1e-4, "vectors are normalized");
}

#[test]
fn a_missing_or_wrong_runtime_is_a_clear_error_not_a_panic() {
    let models = hmg::embed::default_models_dir().unwrap().join("all-MiniLM-L6-v2");
    let missing = hmg::embed::onnx::OnnxEmbedder::load(std::path::Path::new("/nonexistent/libonnxruntime.so"), &models).unwrap_err();
    assert!(missing.to_string().contains("cannot load ONNX Runtime"), "{missing}");
    let no_model = hmg::embed::onnx::OnnxEmbedder::load(
        std::path::Path::new("/nonexistent/libonnxruntime.so"),
        std::path::Path::new("/nonexistent-model"),
    );
    assert!(no_model.is_err());
    let dir = tempfile::tempdir().unwrap();
    let empty_model =
        hmg::embed::onnx::OnnxEmbedder::load(&hmg::embed::default_models_dir().unwrap().join("libonnxruntime.so"), dir.path()).unwrap_err();
    assert!(empty_model.to_string().contains("model.onnx"), "{empty_model}");
}

/// The project's builds use the multilingual engine: a Chinese or Japanese
/// paraphrase finds its memory, and so does an English query.
#[cfg(feature = "e5")]
#[test]
fn multilingual_semantic_recall_with_e5() {
    let m = with_model(None);
    assert!(m.indexes().semantic().iter().any(|s| s.embedder.id().starts_with("e5:")));
    let c = caller("hmg");
    let zh = remember(&m, &c, "我女儿下个月要参加钢琴比赛");
    let ja = remember(&m, &c, "週末は家族で富士山に登る予定です");
    remember(&m, &c, "The invoice service retries failed payments three times");
    remember(&m, &c, "季度财报显示收入增长了百分之十二");
    assert_eq!(ids(&m, &c, "孩子的音乐演出")[0], zh);
    assert_eq!(ids(&m, &c, "山登りの計画")[0], ja);
    assert_eq!(ids(&m, &c, "piano competition")[0], zh, "cross-lingual: English query, Chinese memory");
}

#[test]
fn a_query_naming_a_speaker_favours_what_that_speaker_said() {
    let m = memory();
    let c = caller("hmg");
    let said = |source: &str, content: &str| {
        let outcome = m.memorize(&c, hmg::MemorizeRequest::new(content).with_source(source)).unwrap();
        outcome.atom_id.unwrap()
    };
    let caroline = said("Caroline", "I signed up for a pottery class last week");
    let melanie = said("Melanie", "I signed up for a pottery class on Friday");
    let xiaolin = said("小林", "我报名了周末的陶艺课");
    let xiaowang = said("小王", "我也报名了周末的陶艺课程");
    let boost_of = |query: &str, id: &str| {
        let outcome = m.recall(&c, RecallRequest { explain: true, ..RecallRequest::new(query) }).unwrap();
        outcome
            .atoms
            .iter()
            .find(|a| a.atom_id == id)
            .and_then(|a| a.explain.as_ref())
            .map(|e| e.boost)
            .unwrap_or_else(|| panic!("{id} not recalled for {query}"))
    };
    let config = hmg::recall::RecallConfig::default();
    for (query, named, other) in [("What class did Melanie sign up for?", &melanie, &caroline), ("小林报名了什么课", &xiaolin, &xiaowang)]
    {
        let ratio = boost_of(query, named) / boost_of(query, other);
        assert!((ratio - config.boost_named_source).abs() < 0.01, "{query}: boost ratio {ratio}");
        assert_eq!(ids(&m, &c, query)[0], *named, "{query}");
    }
    // Nobody named: no attribution boost either way.
    let ratio = boost_of("pottery class", &melanie) / boost_of("pottery class", &caroline);
    assert!((ratio - 1.0).abs() < 0.01, "{ratio}");
    // `user` is not a name: a query containing the word gets no boost for it.
    let own = remember(&m, &c, "The user signed up for a pottery class too");
    let ratio = boost_of("pottery class user", &own) / boost_of("pottery class", &own);
    assert!((ratio - 1.0).abs() < 0.01, "{ratio}");
}

#[test]
fn a_dialogue_query_is_matched_turn_by_turn_with_its_latest_turn_counting_most() {
    let m = with_model(None);
    let c = caller("hmg");
    let early = remember(&m, &c, "Bart was nervous before the school spelling contest");
    let late = remember(&m, &c, "Bart won a prize for his drawing of a penguin at the zoo");
    remember(&m, &c, "The quarterly budget review moved to Thursday");
    // The first turn is about the spelling contest, the last about drawing.
    let dialogue = "Bart: \"I was so nervous at the spelling contest at school today, my hands were shaking.\"\n\
        Assistant: \"That sounds hard, but you practised a lot for it, so be proud of yourself.\"\n\
        Bart: \"Now I just want to draw animals, especially the penguins from the zoo trip.\"";
    let outcome = m.recall(&c, RecallRequest { explain: true, ..RecallRequest::new(dialogue) }).unwrap();
    let explain_of = |id: &str| outcome.atoms.iter().find(|a| a.atom_id == id).and_then(|a| a.explain.clone()).unwrap();
    let (early_part, late_part) = (explain_of(&early).segment.unwrap(), explain_of(&late).segment.unwrap());
    assert!(late_part > early_part, "the latest turn's match counts more: {late_part} vs {early_part}");
    assert!(outcome.atoms.windows(2).all(|w| w[0].score >= w[1].score) && outcome.atoms.iter().all(|a| (0.0..=1.0).contains(&a.score)));
    // A short query is one part: no per-part list.
    let short = m.recall(&c, RecallRequest { explain: true, ..RecallRequest::new("penguin drawing") }).unwrap();
    assert!(short.atoms.iter().all(|a| a.explain.as_ref().unwrap().segment.is_none()));
}
