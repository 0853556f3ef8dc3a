//! What a process leaves for the next one that opens the same directory.

use super::{caller, remember};
use crate::{EmbedderChoice, Memory, MemoryOptions, RecallRequest};

fn open(dir: &std::path::Path) -> Memory {
    Memory::open_with(Some(dir), MemoryOptions::default().with_embedder(EmbedderChoice::Disabled)).expect("store opens")
}

/// A recall stamps usage on what it found: a write of the store that no
/// index holds. The indexes take its version as theirs, so the next process
/// replays nothing (the change feed was scanned at every open after a
/// recall: 215 ms at 10k atoms). A write that does change them is
/// replayed, never skipped.
#[test]
fn usage_stamps_leave_nothing_to_replay_and_real_writes_are_still_indexed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = caller("acme/api");
    {
        let memory = open(dir.path());
        remember(&memory, &c, "PostgreSQL must be restarted after a config change");
        remember(&memory, &c, "老李的猫叫咪咪");
        remember(&memory, &c, "田中さんの好きな食べ物は寿司です");
        for query in ["PostgreSQL restart", "老李的猫", "田中さん 寿司"] {
            let outcome = memory.recall(&c, RecallRequest::new(query)).expect("recall works");
            assert!(!outcome.atoms.is_empty(), "{query}");
        }
        let before = memory.snapshot_version().expect("version");
        memory.flush().expect("flush");
        let after = memory.snapshot_version().expect("version");
        assert_eq!(after, before + 1, "the usage stamps are one write");
        assert_eq!(memory.indexes().applied_version(), after, "and the indexes need not replay it");
    }
    {
        let memory = open(dir.path());
        assert_eq!(memory.indexes().applied_version(), memory.snapshot_version().expect("version"));
        // A usage stamp, then a memory written before the indexes saw
        // the stamp's version: nothing is skipped past the new memory.
        assert!(!memory.recall(&c, RecallRequest::new("老李的猫")).expect("recall").atoms.is_empty());
        memory.flush_usage().expect("usage flush");
        remember(&memory, &c, "The billing retries moved to the ledger-sync queue");
        memory.flush().expect("flush");
    }
    let memory = open(dir.path());
    let found = memory.recall(&c, RecallRequest::new("ledger-sync billing retries")).expect("recall");
    assert!(found.atoms.iter().any(|r| r.content.contains("ledger-sync")), "{found:?}");
    assert_eq!(memory.indexes().applied_version(), memory.snapshot_version().expect("version"));
}
