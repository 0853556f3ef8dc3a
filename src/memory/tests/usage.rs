//! Recall usage parked by one-shot processes (`usage.journal`) and taken in
//! by the next process: never lost, never counted twice, never in the way.

use super::{caller, id, remember};
use crate::{EmbedderChoice, Memory, MemoryOptions, RecallRequest};

fn open(dir: &std::path::Path, park: bool) -> Memory {
    Memory::open_with(Some(dir), MemoryOptions::default().with_embedder(EmbedderChoice::Disabled).with_park_usage(park))
        .expect("store opens")
}

fn journal(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join("usage.journal")
}

/// A store on disk holding one memory (its id), closed.
fn store_with_one_memory() -> (tempfile::TempDir, crate::Caller, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = caller("acme/api");
    let memory = open(dir.path(), false);
    let pg = remember(&memory, &c, "PostgreSQL must be restarted after a config change");
    memory.flush().expect("flush");
    drop(memory);
    (dir, c, pg)
}

/// (recall count, last recalled) of an atom, as stored.
fn usage_of(memory: &Memory, atom: &str) -> (u64, Option<chrono::DateTime<chrono::Utc>>) {
    let atom = memory.atom("alice", id(atom)).expect("read").expect("the atom");
    (atom.recall_count, atom.last_recalled_at)
}

#[test]
fn one_shot_recalls_park_their_usage_and_the_next_other_process_commits_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = caller("acme/api");
    let (pg, cat, sushi) = {
        let memory = open(dir.path(), false);
        let ids = (
            remember(&memory, &c, "PostgreSQL must be restarted after a config change"),
            remember(&memory, &c, "老李的猫叫咪咪"),
            remember(&memory, &c, "田中さんの好きな食べ物は寿司です"),
        );
        memory.flush().expect("flush");
        ids
    };
    let version = open(dir.path(), false).snapshot_version().expect("version");
    // Two one-shot recalls: nothing written to the store, the journal holds both.
    for query in ["PostgreSQL restart", "老李的猫"] {
        let memory = open(dir.path(), true);
        assert!(!memory.recall(&c, RecallRequest::new(query)).expect("recall").atoms.is_empty(), "{query}");
        memory.flush().expect("flush");
        assert_eq!(memory.snapshot_version().expect("version"), version, "{query}: no store write");
    }
    {
        // A third, which drops without an explicit flush, parks too.
        let memory = open(dir.path(), true);
        assert!(!memory.recall(&c, RecallRequest::new("PostgreSQL restart config")).expect("recall").atoms.is_empty());
    }
    let parked = std::fs::read_to_string(journal(dir.path())).expect("a journal");
    assert!(parked.contains(&pg) && parked.contains(&cat), "{parked}");
    assert!(!parked.contains(&sushi), "only what was recalled: {parked}");

    // Any other process commits the journal when it opens, in one write.
    let memory = open(dir.path(), false);
    assert_eq!(memory.snapshot_version().expect("version"), version + 1);
    assert!(!journal(dir.path()).exists(), "applied, then removed");
    let (count, last) = usage_of(&memory, &pg);
    assert_eq!(count, 2, "two recalls of the PostgreSQL memory");
    assert!(last.is_some());
    assert_eq!(usage_of(&memory, &cat).0, 1);
    assert_eq!(usage_of(&memory, &sushi), (0, None));
    drop(memory);
    // Applied once: a later open finds nothing more to add.
    assert_eq!(usage_of(&open(dir.path(), false), &pg).0, 2);
}

#[test]
fn a_read_in_a_parking_process_sees_every_parked_stamp() {
    let (dir, c, pg) = store_with_one_memory();
    {
        let memory = open(dir.path(), true);
        memory.recall(&c, RecallRequest::new("PostgreSQL restart")).expect("recall");
    }
    assert!(journal(dir.path()).exists());
    let memory = open(dir.path(), true);
    memory.recall(&c, RecallRequest::new("PostgreSQL restart")).expect("recall");
    // Reading the atom commits the journal's stamp and this process's.
    assert_eq!(usage_of(&memory, &pg).0, 2);
    assert!(!journal(dir.path()).exists());
    memory.flush().expect("flush");
    drop(memory);
    assert_eq!(usage_of(&open(dir.path(), false), &pg).0, 2, "not counted twice");
}

#[test]
fn a_batch_of_parked_atoms_is_committed_by_the_parking_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = caller("acme/api");
    {
        let memory = open(dir.path(), false);
        let lines: Vec<String> = (0..300).map(|i| format!("Service number {i} listens on port {}", 9000 + i)).collect();
        for line in &lines {
            remember(&memory, &c, line);
        }
        memory.flush().expect("flush");
    }
    let version = open(dir.path(), false).snapshot_version().expect("version");
    let memory = open(dir.path(), true);
    let mut recalled = std::collections::HashSet::new();
    for i in 0..300 {
        let request = RecallRequest { max_results: 1, ..RecallRequest::new(format!("Service number {i} port")) };
        recalled.extend(memory.recall(&c, request).expect("recall").atoms.into_iter().map(|a| a.atom_id));
    }
    assert!(recalled.len() >= 256, "{} distinct atoms", recalled.len());
    memory.flush().expect("flush");
    assert_eq!(memory.snapshot_version().expect("version"), version + 1, "committed, not parked");
    assert!(!journal(dir.path()).exists());
}

#[test]
fn a_damaged_journal_is_set_aside_and_the_store_opens() {
    let (dir, _, pg) = store_with_one_memory();
    for (case, bytes) in [
        ("not JSON", b"{\"tenant\": \"alice\", \"atom\"".to_vec()),
        ("an atom id that is not one", b"{\"tenant\":\"alice\",\"atom\":\"x\",\"at\":\"2026-01-01T00:00:00Z\",\"recalls\":1}\n".to_vec()),
        ("binary", vec![0xff, 0x00, 0xfe, 0x10]),
    ] {
        std::fs::write(journal(dir.path()), &bytes).expect("write");
        for park in [true, false] {
            let memory = open(dir.path(), park);
            assert_eq!(usage_of(&memory, &pg), (0, None), "{case}");
            assert!(!journal(dir.path()).exists(), "{case}: set aside");
            assert_eq!(std::fs::read(dir.path().join("usage.journal.bad")).expect("kept for a look"), bytes, "{case}");
            drop(memory);
            std::fs::write(journal(dir.path()), &bytes).expect("write");
        }
    }
    // A journal naming an atom that is gone (or never was) adds nothing.
    let unknown = ulid::Ulid::generate();
    std::fs::write(
        journal(dir.path()),
        format!("{{\"tenant\":\"alice\",\"atom\":\"{unknown}\",\"at\":\"2026-01-01T00:00:00Z\",\"recalls\":3}}\n"),
    )
    .expect("write");
    let memory = open(dir.path(), false);
    assert!(!journal(dir.path()).exists());
    assert_eq!(usage_of(&memory, &pg), (0, None));
}

/// A server's memory (`defer_usage`) leaves due stamps to its caller, who
/// commits them after answering; stamps four batches past due are committed
/// in the recall all the same, and none is lost.
#[test]
fn a_deferring_memory_leaves_due_stamps_to_its_caller_and_loses_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = caller("acme/api");
    let memory =
        Memory::open_with(Some(dir.path()), MemoryOptions::default().with_embedder(EmbedderChoice::Disabled).with_defer_usage(true))
            .expect("store opens");
    // Groups of ten memories sharing one rare word: a recall of the word
    // stamps its ten (a batch is 256 distinct atoms).
    let word = |g: usize| format!("zq{g:03}x");
    let mut ids = Vec::new();
    for g in 0..104 {
        for i in 0..10 {
            ids.push(remember(&memory, &c, &format!("Deploy step {i} of pipeline {} waits for the queue", word(g))));
        }
    }
    let recall = |g: usize| {
        let found = memory.recall(&c, RecallRequest::new(word(g))).expect("recall");
        assert_eq!(found.atoms.len(), 10, "{}", word(g));
    };
    let recalled = |memory: &Memory| -> u64 { ids.iter().map(|id| usage_of(memory, id).0).sum() };
    // 26 groups: 260 atoms stamped, past a batch, none committed.
    let before = memory.snapshot_version().expect("version");
    for g in 0..26 {
        recall(g);
    }
    assert!(memory.usage_due());
    assert_eq!(memory.snapshot_version().expect("version"), before, "the recall did not commit the stamps");
    memory.flush_usage_if_due().expect("commit");
    assert_eq!(memory.snapshot_version().expect("version"), before + 1, "the caller's commit is one write");
    assert!(!memory.usage_due());
    assert_eq!(recalled(&memory), 260, "every stamp counted once");
    memory.flush_usage_if_due().expect("nothing due is a no-op");
    assert_eq!(memory.snapshot_version().expect("version"), before + 1);

    // A caller that never commits: the recall commits once four batches
    // (1,024 atoms) are pending.
    for g in 0..102 {
        recall(g % 104);
    }
    assert_eq!(memory.snapshot_version().expect("version"), before + 1, "1,020 atoms: still left to the caller");
    recall(102);
    recall(103);
    assert_eq!(memory.snapshot_version().expect("version"), before + 2, "1,030: committed in the recall");
    // Reads count stamps not yet committed too: every recall, once.
    assert_eq!(recalled(&memory), 260 + 1_040);
    memory.flush().expect("flush");
    assert_eq!(memory.snapshot_version().expect("version"), before + 3, "the last ten at the flush");
    drop(memory);
    let memory = open(dir.path(), false);
    assert_eq!(recalled(&memory), 260 + 1_040, "all of them stored");
}
