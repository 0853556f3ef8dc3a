//! The graph index's cards: recall ranks candidates by them before it
//! reads any atom, so they must give exactly what reading every candidate
//! gives, survive a restart, be built again from the store, and a wrong one
//! must not change an answer.

use crate::index::card::Card;
use crate::{AtomId, Caller, EmbedderChoice, MemorizeRequest, Memory, MemoryOptions, RecallRequest, Scope};

const MEMORIES: i64 = 28;

fn open(dir: &std::path::Path) -> Memory {
    Memory::open_with(Some(dir), MemoryOptions::default().with_embedder(EmbedderChoice::Disabled)).expect("store opens")
}

fn on(branch: &str) -> Caller {
    Caller::new(Scope::tenant("alice").with_workspace("acme").with_repository("api").with_branch(branch), "test")
}

/// Memories on one topic whose boosts all differ: constraints, guesses,
/// the user's, a speaker's, another branch's, tenant-wide, old and new; in
/// English, Chinese and Japanese. Fewer than hydration's cap (30), so that
/// without cards it reads every candidate: the exact answer.
fn fill(memory: &Memory) {
    let tenant_wide = Caller::new(Scope::tenant("alice"), "test");
    let days_ago = |days: i64| chrono::Utc::now() - chrono::Duration::days(days);
    for i in 0..MEMORIES {
        let (content, source) = match i % 6 {
            0 => (format!("The deploy pipeline must run the migration check first (step {i})"), "user"),
            1 => (format!("Maybe the deploy pipeline skips the cache warm-up (step {i})"), "agent"),
            2 => (format!("Caroline said the deploy pipeline pauses on Fridays (step {i})"), "Caroline"),
            3 => (format!("deploy pipeline 部署流程在周五暂停 (第{i}步)"), "user"),
            4 => (format!("deploy pipeline デプロイは金曜日に止まる ({i})"), "agent"),
            _ => (format!("The deploy pipeline posts to the release channel (step {i})"), "Melanie"),
        };
        let caller = match i % 4 {
            0 => on("main"),
            1 => on("dev"),
            2 => tenant_wide.clone(),
            _ => on("main"),
        };
        let mut request = MemorizeRequest::new(content).with_source(source);
        request.created_at = Some(days_ago(i * 7 % 90));
        memory.memorize(&caller, request).expect("memorize");
    }
}

fn answer(memory: &Memory, caller: &Caller, query: &str) -> Vec<(String, String)> {
    let request = RecallRequest { max_results: 10, record: false, ..RecallRequest::new(query) };
    let outcome = memory.recall(caller, request).expect("recall");
    outcome.atoms.iter().map(|a| (a.atom_id.clone(), format!("{:.6}", a.score))).collect()
}

const QUERIES: [&str; 4] = ["what did Caroline say about the deploy pipeline", "deploy pipeline", "部署流程 周五", "デプロイ 金曜日"];

#[test]
fn cards_rank_as_reading_every_candidate_would_and_a_wrong_card_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let memory = open(dir.path());
    fill(&memory);
    let readers = [on("main"), on("dev"), Caller::new(Scope::tenant("alice"), "test")];
    let with_cards: Vec<_> = readers.iter().flat_map(|c| QUERIES.map(|q| answer(&memory, c, q))).collect();
    // A tenant-wide reader sees no Chinese memory (all are in the repository).
    assert_eq!(with_cards.iter().filter(|a| a.is_empty()).count(), 1, "{with_cards:?}");

    let cards = memory.indexes().graph().cards();
    assert_eq!(cards.len(), MEMORIES as usize);
    assert!(cards.values().all(Option::is_some), "every memory written has a card");

    // Without cards every candidate counts with the largest boost: the
    // same answers, read the slow way.
    for id in cards.keys() {
        memory.indexes().graph_mut().set_card(*id, None);
    }
    let without: Vec<_> = readers.iter().flat_map(|c| QUERIES.map(|q| answer(&memory, c, q))).collect();
    assert_eq!(without, with_cards);

    // Wrong cards (every atom a constraint of the user's, made now, on
    // another branch): the first atom read disagrees, and the rest are
    // bounded by the largest boost again.
    for id in cards.keys() {
        let wrong =
            Card { epistemic: crate::atom::Epistemic::Necessary, source: "user".into(), created_micros: 0, branch: Some("x".into()) };
        memory.indexes().graph_mut().set_card(*id, Some(wrong));
    }
    let wrong: Vec<_> = readers.iter().flat_map(|c| QUERIES.map(|q| answer(&memory, c, q))).collect();
    assert_eq!(wrong, with_cards);
}

#[test]
fn cards_are_saved_and_built_again_from_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cards: std::collections::HashMap<AtomId, Option<Card>> = {
        let memory = open(dir.path());
        fill(&memory);
        memory.flush().expect("flush");
        memory.indexes().graph().cards()
    };
    assert_eq!(cards.len(), MEMORIES as usize);
    // Every fourth memory is tenant-wide (no branch on its card, whatever
    // the reader's), one in four is on dev, the rest on main.
    let branches = |branch: Option<&str>| cards.values().flatten().filter(|c| c.branch.as_deref() == branch).count();
    assert_eq!((branches(None), branches(Some("dev")), branches(Some("main"))), (7, 7, 14));
    {
        let memory = open(dir.path());
        assert_eq!(memory.indexes().graph().cards(), cards, "read back from graph.bin");
    }
    // No file: built from the store (the query that reads every card), and
    // saved at once.
    let graph = dir.path().join("index").join("graph.bin");
    std::fs::remove_file(&graph).expect("remove graph.bin");
    {
        let memory = open(dir.path());
        assert_eq!(memory.indexes().graph().cards(), cards, "built from the store");
    }
    assert!(graph.is_file(), "a graph built at open is saved at once");
    // A file of format 1 (before cards) is built again too.
    let mut old = std::fs::read(&graph).expect("read");
    old[..4].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&graph, &old).expect("write");
    let memory = open(dir.path());
    assert_eq!(memory.indexes().graph().cards(), cards, "format 1 built again");
    let c = on("main");
    assert!(!memory.recall(&c, RecallRequest::new("deploy pipeline")).expect("recall").atoms.is_empty());
}
