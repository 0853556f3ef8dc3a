//! govern: quarantine, restore, seal, tombstone, derive_lesson.

use hmg::{Effect, GovernAction, GovernRequest, Kind, Memory, MemoryError, Status};

use super::{caller, id, memory, remember};

fn request(target: &str, action: GovernAction, lesson: Option<&str>) -> GovernRequest {
    GovernRequest { target_atom: target.to_owned(), action, reason: "governance test".into(), lesson_content: lesson.map(str::to_owned) }
}

#[test]
fn quarantine_hides_content_and_restore_brings_it_back() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "田中さんの担当はキャッシュサーバー");
    assert_eq!(m.govern(&c, request(&atom, GovernAction::Quarantine, None)).unwrap().effect, Effect::Applied);
    let stored = m.atom("alice", id(&atom)).unwrap().unwrap();
    assert_eq!(stored.status, Status::Quarantined);
    assert_eq!(stored.content.as_deref(), Some("田中さんの担当はキャッシュサーバー"), "content kept");
    assert!(stored.visible_content().starts_with("[quarantined"));
    let history = m.history(&c, &atom).unwrap();
    assert!(history.chain[0].content.starts_with("[quarantined"), "placeholder wherever shown");
    let twice = m.govern(&c, request(&atom, GovernAction::Quarantine, None)).unwrap();
    assert_eq!(twice.effect, Effect::Rejected);
    assert_eq!(m.govern(&c, request(&atom, GovernAction::Restore, None)).unwrap().effect, Effect::Applied);
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().status, Status::Active);
    let again = m.govern(&c, request(&atom, GovernAction::Restore, None)).unwrap();
    assert_eq!(again.effect, Effect::Rejected);
    assert!(again.reason.unwrap().contains("not quarantined"));
}

#[test]
fn seal_is_audit_only() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "内部评审结论：方案B");
    assert_eq!(m.govern(&c, request(&atom, GovernAction::Seal, None)).unwrap().effect, Effect::Applied);
    let history = m.history(&c, &atom).unwrap();
    assert!(history.chain[0].content.starts_with("[sealed"));
    assert_eq!(m.govern(&c, request(&atom, GovernAction::Seal, None)).unwrap().effect, Effect::Rejected);
    // Corrections cannot touch a sealed atom.
    let corrected = m
        .correct(&c, hmg::CorrectRequest { target_atom: atom, action: hmg::CorrectAction::Negate, reason: "x".into(), new_content: None })
        .unwrap();
    assert_eq!(corrected.effect, Effect::Rejected);
}

#[test]
fn derive_lesson_seals_the_original_and_links_the_lesson() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "The CI config had OPENAI key sk-proj-abcdefghijklmnopqrstuvwxyz0123 pasted in");
    let out = m.govern(&c, request(&atom, GovernAction::DeriveLesson, Some("不要在代码或记忆中硬编码 API key，使用环境变量"))).unwrap();
    assert_eq!(out.effect, Effect::Applied);
    let lesson = m.atom("alice", id(&out.lesson_atom_id.unwrap())).unwrap().unwrap();
    assert_eq!(lesson.kind, Kind::Lesson);
    assert_eq!(lesson.derived_from, vec![id(&atom)]);
    assert_eq!(lesson.epistemic, hmg::Epistemic::Necessary);
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().status, Status::Sealed);
    let history = m.history(&c, &atom).unwrap();
    assert_eq!(history.derived.len(), 1);
    assert!(history.audit.iter().any(|e| e.action == "govern.derive_lesson"));
    let err = m.govern(&c, request(&atom, GovernAction::DeriveLesson, None)).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "lesson_content", .. }), "{err}");
    let err = "delete".parse::<GovernAction>().unwrap_err();
    assert!(err.to_string().contains("tombstone"));
}

/// Whether any file under `dir` holds `needle`.
pub(crate) fn files_contain(dir: &std::path::Path, needle: &[u8]) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap().flatten() {
                stack.push(entry.path());
            }
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            return true;
        }
    }
    false
}

/// Whether any segment file of the keyword index under `index` still has
/// `term` in its term dictionary (deleted documents' terms included: the
/// dictionary is compressed, so a byte search cannot tell).
fn keyword_files_hold(index: &std::path::Path, term: &str) -> bool {
    let index = tantivy::Index::open_in_dir(index.join("keyword")).unwrap();
    let text = index.schema().get_field("text").unwrap();
    let searcher = index.reader().unwrap().searcher();
    searcher.segment_readers().iter().any(|segment| segment.inverted_index(text).unwrap().terms().get(term.as_bytes()).unwrap().is_some())
}

#[test]
fn tombstone_destroys_content_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let marker = "tombstone-marker-7f3a9c1e5b2d8f4a6c0e";
    let c = caller("hmg");
    let (atom, keep) = {
        let m = Memory::open(dir.path()).unwrap();
        // Zephyrwick is extracted as an entity: its name is content too.
        let atom = remember(&m, &c, &format!("The incident note {marker} mentions the old host Zephyrwick"));
        let keep = remember(&m, &c, "Keep this memory: the build uses cargo nextest");
        m.flush().unwrap();
        assert!(files_contain(dir.path(), marker.as_bytes()), "the test can see content on disk");
        // The keyword index holds analyzed terms (lowercased), not the text;
        // it commits lazily, at the next search.
        assert_eq!(m.recall(&c, hmg::RecallRequest::new("Zephyrwick")).unwrap().atoms[0].atom_id, atom);
        let index = dir.path().join("index");
        assert!(keyword_files_hold(&index, "zephyrwick"), "the test can see an indexed term on disk");
        m.persist_indexes().unwrap();
        assert!(files_contain(&index.join("graph.bin"), b"zephyrwick"), "the test can see the entity in the graph file");
        let out = m.govern(&c, request(&atom, GovernAction::Tombstone, None)).unwrap();
        assert_eq!(out.effect, Effect::Applied);
        let stored = m.atom("alice", id(&atom)).unwrap().unwrap();
        assert_eq!((stored.status, stored.content), (Status::Tombstoned, None));
        assert!(stored.entities.is_empty());
        assert_eq!(m.govern(&c, request(&atom, GovernAction::Tombstone, None)).unwrap().effect, Effect::Rejected);
        (atom, keep)
    };
    assert!(!files_contain(dir.path(), marker.as_bytes()), "tombstoned content must be gone from every store file");
    assert!(!files_contain(dir.path(), b"Zephyrwick"), "an entity only the tombstoned atom mentioned goes with it");
    assert!(
        !keyword_files_hold(&dir.path().join("index"), "zephyrwick"),
        "the keyword index's segment files keep no term of destroyed content"
    );
    assert!(!files_contain(&dir.path().join("index"), b"zephyrwick"), "no index file (the graph's entity keys included) keeps the entity");
    assert!(!dir.path().join("index/keyword/purge-pending").exists(), "the purge finished");
    let m = Memory::open(dir.path()).unwrap();
    let history = m.history(&c, &atom).unwrap();
    assert_eq!(history.chain[0].status, Status::Tombstoned);
    assert!(history.audit.iter().any(|e| e.action == "govern.tombstone"));
    assert_eq!(m.atom("alice", id(&keep)).unwrap().unwrap().content.as_deref(), Some("Keep this memory: the build uses cargo nextest"));
    assert!(m.verify_audit(None).unwrap().iter().all(|t| t.first_broken.is_none()));
}

#[test]
fn an_index_purge_interrupted_by_a_crash_finishes_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let c = caller("hmg");
    {
        let m = Memory::open(dir.path()).unwrap();
        let atom = remember(&m, &c, "The old host Quillmoor serves the wiki");
        // A second document keeps the segment alive (a segment whose every
        // document is deleted is dropped at commit).
        remember(&m, &c, "The new host Brackenfell serves the wiki");
        m.recall(&c, hmg::RecallRequest::new("Quillmoor")).unwrap();
        // A status change rewrites the atom's document: the old one is deleted.
        m.govern(&c, request(&atom, GovernAction::Quarantine, None)).unwrap();
        m.recall(&c, hmg::RecallRequest::new("Quillmoor")).unwrap();
    }
    let keyword = dir.path().join("index/keyword");
    let deleted = || {
        let index = tantivy::Index::open_in_dir(&keyword).unwrap();
        index.searchable_segment_metas().unwrap().iter().map(|m| m.num_deleted_docs()).sum::<u32>()
    };
    assert!(deleted() > 0, "the test needs a segment with a deleted document");
    // What a crash between the tombstone's commit and its purge leaves.
    std::fs::write(keyword.join("purge-pending"), b"").unwrap();
    drop(Memory::open(dir.path()).unwrap());
    assert_eq!(deleted(), 0, "the purge ran at open");
    assert!(!keyword.join("purge-pending").exists());
}

/// REST `DELETE /{id}?purge=true` and `DELETE /` used to loop over single
/// writes: a failure half way left a chain half purged, and each version
/// paid a whole-store vacuum. Each is now one transaction.
#[test]
fn purging_a_chain_and_negating_a_scope_are_one_transaction_each() {
    let dir = tempfile::tempdir().unwrap();
    let m = Memory::open(dir.path()).unwrap();
    let c = caller("bulk");
    let first = remember(&m, &c, "The staging database lives on host pg-staging-1");
    let second = m
        .correct(
            &c,
            hmg::CorrectRequest {
                target_atom: first.clone(),
                action: hmg::CorrectAction::Replace,
                reason: "moved".into(),
                new_content: Some("The staging database lives on host pg-staging-2".into()),
            },
        )
        .unwrap()
        .new_atom_id
        .unwrap();
    let third = m
        .correct(
            &c,
            hmg::CorrectRequest {
                target_atom: second.clone(),
                action: hmg::CorrectAction::Replace,
                reason: "moved again".into(),
                new_content: Some("The staging database lives on host pg-staging-3".into()),
            },
        )
        .unwrap()
        .new_atom_id
        .unwrap();
    let before = m.snapshot_version().unwrap();
    assert_eq!(m.purge_chain(&c, &second, "purge the whole chain").unwrap(), 3);
    assert_eq!(m.snapshot_version().unwrap(), before + 1, "one transaction for three versions");
    for id in [&first, &second, &third] {
        let atom = m.atom("alice", super::id(id)).unwrap().unwrap();
        assert_eq!((atom.status, atom.content), (hmg::Status::Tombstoned, None));
    }
    assert_eq!(m.purge_chain(&c, &third, "again").unwrap(), 0, "nothing left to destroy");

    let other = caller("elsewhere");
    let keep = remember(&m, &other, "This memory is in another repository");
    for n in 0..5 {
        remember(&m, &c, &format!("Scope memory number {n} about the deploy calendar"));
    }
    let before = m.snapshot_version().unwrap();
    let filter = hmg::memory::AtomFilter {
        workspace: Some("acme".into()),
        repository: Some("bulk".into()),
        branch: Some("main".into()),
        exact_scope: true,
        ..Default::default()
    };
    assert_eq!(m.negate_all(&c, &filter, "clear the scope").unwrap(), 5);
    assert_eq!(m.snapshot_version().unwrap(), before + 1, "one transaction for five negations");
    assert_eq!(m.atom("alice", super::id(&keep)).unwrap().unwrap().status, hmg::Status::Active);
    let verification = m.verify_audit(Some("alice")).unwrap();
    assert_eq!(verification[0].first_broken, None);
}
