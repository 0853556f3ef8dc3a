//! memorize: inference, dedup, admission control, scope rules.

use hmg::{Effect, Epistemic, MemorizeRequest, MemoryError, Polarity, Scope, Status};

use super::{caller, id, memory, remember};

#[test]
fn stores_in_three_languages_with_inferred_fields() {
    let m = memory();
    let c = caller("hmg");
    let cases = [
        ("You must run migrations before deploying", Epistemic::Necessary, Polarity::Affirmative, "en"),
        ("本项目用 PostgreSQL 16 做主数据库，不用 MongoDB", Epistemic::Actual, Polarity::Negative, "zh"),
        ("原因はたぶんキャッシュだ", Epistemic::Possible, Polarity::Affirmative, "ja"),
        ("如果构建失败就清理缓存", Epistemic::Actual, Polarity::Conditional, "zh"),
    ];
    for (content, epistemic, polarity, language) in cases {
        let atom_id = remember(&m, &c, content);
        let atom = m.atom("alice", id(&atom_id)).unwrap().unwrap();
        assert_eq!(atom.content.as_deref(), Some(content));
        assert_eq!((atom.epistemic, atom.polarity), (epistemic, polarity), "{content}");
        assert_eq!(atom.language, language);
        assert_eq!(atom.status, Status::Active);
        assert_eq!(atom.source, "user");
        assert_eq!(atom.scope, c.scope);
    }
    let atom = m.atom("alice", id(&remember(&m, &c, "本项目用 PostgreSQL 16，老李负责 login.py"))).unwrap().unwrap();
    for entity in ["PostgreSQL", "PostgreSQL 16", "老李", "login.py"] {
        assert!(atom.entities.iter().any(|e| e == entity), "{entity} in {:?}", atom.entities);
    }
}

#[test]
fn exact_duplicates_are_no_ops_in_every_language() {
    let m = memory();
    let c = caller("hmg");
    for (original, restated) in [
        ("We use PostgreSQL 16", "  we use postgresql 16. "),
        ("主数据库用 PostgreSQL。", "主数据库用 ＰｏｓｔｇｒｅＳＱＬ"),
        ("主データベースは PostgreSQL です", "主データベースは postgresql です。"),
    ] {
        let first = remember(&m, &c, original);
        let version = m.snapshot_version().unwrap();
        let again = m.memorize(&c, MemorizeRequest::new(restated)).unwrap();
        assert_eq!(again.effect, Effect::NoOp);
        assert_eq!(again.deduped_with.as_deref(), Some(first.as_str()));
        assert_eq!(again.atom_id.as_deref(), Some(first.as_str()));
        assert!(again.reason.is_some());
        assert_eq!(m.snapshot_version().unwrap(), version, "a no_op writes nothing");
    }
    // Another branch of the same repository dedups too; another repository does not.
    let other_branch = hmg::Caller::new(c.scope.clone().with_branch("dev"), "test");
    assert_eq!(m.memorize(&other_branch, MemorizeRequest::new("We use PostgreSQL 16")).unwrap().effect, Effect::NoOp);
    assert_eq!(m.memorize(&caller("other"), MemorizeRequest::new("We use PostgreSQL 16")).unwrap().effect, Effect::Applied);
}

#[test]
fn admission_control_rejects_with_reasons() {
    let m = memory();
    let c = caller("hmg");
    let cases: Vec<(String, &str)> = vec![
        ("".to_owned(), "empty"),
        ("   \n\t ".to_owned(), "empty"),
        ("长".repeat(hmg::memory::MAX_CONTENT_CHARS + 1), "oversized"),
        ("AKIAIOSFODNN7EXAMPLE".to_owned(), "nothing left after redaction"),
        ("password=hunter2hunter2".to_owned(), "nothing left after redaction"),
    ];
    for (content, why) in cases {
        let version = m.snapshot_version().unwrap();
        let outcome = m.memorize(&c, MemorizeRequest::new(content)).unwrap();
        assert_eq!(outcome.effect, Effect::Rejected);
        assert!(outcome.reason.as_deref().unwrap_or("").starts_with(why), "{outcome:?}");
        assert_eq!(outcome.atom_id, None);
        assert_eq!(m.snapshot_version().unwrap(), version, "a rejection writes nothing");
    }
}

#[test]
fn restating_a_negated_memory_is_rejected_pointing_at_replace() {
    let m = memory();
    let c = caller("hmg");
    for content in ["The API is versioned by header", "接口通过请求头做版本控制", "API はヘッダーでバージョン管理する"]
    {
        let atom = remember(&m, &c, content);
        m.correct(
            &c,
            hmg::CorrectRequest {
                target_atom: atom.clone(),
                action: hmg::CorrectAction::Negate,
                reason: "wrong".into(),
                new_content: None,
            },
        )
        .unwrap();
        let again = m.memorize(&c, MemorizeRequest::new(content)).unwrap();
        assert_eq!(again.effect, Effect::Rejected);
        let reason = again.reason.unwrap();
        assert!(reason.contains(&atom) && reason.contains("replace"), "{reason}");
    }
}

#[test]
fn invalid_requests_are_errors_naming_the_field() {
    let m = memory();
    let c = caller("hmg");
    let err = m.memorize(&c, MemorizeRequest::new("x y z").with_kind(hmg::Kind::Handoff)).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "kind", .. }), "{err}");
    let err = m.memorize(&c, MemorizeRequest::new("x y z").with_source("s".repeat(300))).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "source", .. }), "{err}");
    let bad_scope = hmg::Caller::new(Scope::tenant(" "), "test");
    let err = m.memorize(&bad_scope, MemorizeRequest::new("x y z")).unwrap_err();
    assert!(err.to_string().contains("tenant_id"), "{err}");
}

#[test]
fn snapshot_version_increases_with_every_write() {
    let m = memory();
    let c = caller("hmg");
    let v0 = m.stats(&c).unwrap().snapshot_version;
    remember(&m, &c, "one");
    remember(&m, &c, "二つ目");
    let stats = m.stats(&c).unwrap();
    assert_eq!(stats.snapshot_version, v0 + 2);
    assert_eq!(stats.atoms, 2);
    assert_eq!(stats.indexes.temporal, 2);
    assert_eq!(stats.indexes.categorical, 2);

    // Each index is counted by one predicate: an atom whose epistemic
    // status changed, one replaced, one derived and one tombstoned are
    // each counted once, as the atoms are.
    let third = remember(&m, &c, "田中さんは月曜日に東京へ出張します");
    let correct = |target: &str, action, new_content: Option<&str>| {
        let request = hmg::CorrectRequest {
            target_atom: target.to_owned(),
            action,
            reason: "test".into(),
            new_content: new_content.map(str::to_owned),
        };
        assert_eq!(m.correct(&c, request).unwrap().effect, Effect::Applied);
    };
    correct(&third, hmg::CorrectAction::ConfirmActual, None);
    correct(&third, hmg::CorrectAction::Replace, Some("田中さんは火曜日に大阪へ出張します"));
    let govern = |action, lesson_content: Option<&str>| {
        let request = hmg::GovernRequest {
            target_atom: third.clone(),
            action,
            reason: "test".into(),
            lesson_content: lesson_content.map(str::to_owned),
        };
        assert_eq!(m.govern(&c, request).unwrap().effect, Effect::Applied);
    };
    govern(hmg::GovernAction::DeriveLesson, Some("Check the trip's day before booking"));
    govern(hmg::GovernAction::Tombstone, None);
    let stats = m.stats(&c).unwrap();
    assert_eq!(stats.atoms, 5, "{stats:?}");
    assert_eq!((stats.indexes.temporal, stats.indexes.categorical), (stats.atoms, stats.atoms), "{stats:?}");
}

#[test]
fn handoffs_are_stored_redacted_and_rejected_when_empty() {
    let m = memory();
    let c = caller("hmg");
    let out = m.handoff(&c, hmg::HandoffRequest::new("修复了 login.py 的空指针问题，pytest 全部通过。token=abcd1234efgh5678")).unwrap();
    assert_eq!(out.effect, Effect::Applied);
    let atom = m.atom("alice", id(out.atom_id.as_deref().unwrap())).unwrap().unwrap();
    assert_eq!(atom.kind, hmg::Kind::Handoff);
    assert!(!atom.content.unwrap().contains("abcd1234efgh5678"));
    let rejected = m.handoff(&c, hmg::HandoffRequest::new("  ")).unwrap();
    assert_eq!(rejected.effect, Effect::Rejected);
    assert!(rejected.reason.unwrap().starts_with("empty"));
}

#[test]
fn tenants_never_see_each_other() {
    let m = memory();
    let alice = caller("hmg");
    let bob = hmg::Caller::new(Scope::tenant("bob").with_workspace("acme").with_repository("hmg"), "test");
    let atom = remember(&m, &alice, "Alice's deploy key lives in the vault");
    assert!(m.atom("bob", id(&atom)).unwrap().is_none());
    let err = m
        .correct(
            &bob,
            hmg::CorrectRequest { target_atom: atom.clone(), action: hmg::CorrectAction::Negate, reason: "x".into(), new_content: None },
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::AtomNotFound(_)), "{err}");
    assert!(m.history(&bob, &atom).is_err());
    assert_eq!(m.stats(&bob).unwrap().atoms, 0);
    // The same content is not a duplicate across tenants.
    assert_eq!(m.memorize(&bob, MemorizeRequest::new("Alice's deploy key lives in the vault")).unwrap().effect, Effect::Applied);
}

#[test]
fn a_batch_answers_each_request_as_memorize_would() {
    let m = memory();
    let c = caller("hmg");
    let existing = remember(&m, &c, "We use PostgreSQL 16");
    let mut requests = vec![
        MemorizeRequest::new("Caroline works at the bakery now"),
        MemorizeRequest::new("  we use postgresql 16. "),
        MemorizeRequest::new("   "),
        MemorizeRequest::new("老李负责 login.py"),
        MemorizeRequest::new("caroline works at the bakery now."),
        MemorizeRequest::new("The deploy key is AKIAIOSFODNN7EXAMPLE, keep it safe"),
        MemorizeRequest::new("原因はたぶんキャッシュだ"),
    ];
    // More than one group (hmg::MEMORIZE_BATCH new memories per transaction).
    requests.extend((0..hmg::MEMORIZE_BATCH + 5).map(|i| MemorizeRequest::new(format!("Build {i} passed on the first try"))));
    let version = m.snapshot_version().unwrap();
    let outcomes = m.memorize_many(&c, requests.clone()).unwrap();
    assert_eq!(outcomes.len(), requests.len());
    assert_eq!(outcomes[0].effect, Effect::Applied);
    assert_eq!((outcomes[1].effect, outcomes[1].deduped_with.as_deref()), (Effect::NoOp, Some(existing.as_str())));
    assert_eq!(outcomes[2].effect, Effect::Rejected, "empty content");
    assert_eq!(outcomes[3].effect, Effect::Applied);
    // A restatement of an earlier request of the same batch.
    assert_eq!((outcomes[4].effect, outcomes[4].deduped_with.as_deref()), (Effect::NoOp, outcomes[0].atom_id.as_deref()));
    assert_eq!(outcomes[5].effect, Effect::Applied);
    assert!(!outcomes[5].redactions.is_empty(), "the key is redacted in a batch too");
    let stored = m.atom("alice", id(outcomes[5].atom_id.as_deref().unwrap())).unwrap().unwrap();
    assert!(!stored.content.unwrap().contains("AKIAIOSFODNN7EXAMPLE"));
    let japanese = m.atom("alice", id(outcomes[6].atom_id.as_deref().unwrap())).unwrap().unwrap();
    assert_eq!((japanese.language.as_str(), japanese.epistemic), ("ja", Epistemic::Possible));
    for (i, outcome) in outcomes.iter().enumerate().skip(7) {
        let atom = m.atom("alice", id(outcome.atom_id.as_deref().unwrap())).unwrap().unwrap();
        assert_eq!(atom.content.as_deref(), Some(format!("Build {} passed on the first try", i - 7).as_str()));
    }
    let applied = outcomes.iter().filter(|o| o.effect == Effect::Applied).count();
    assert_eq!(applied, 4 + hmg::MEMORIZE_BATCH + 5);
    // Every new memory has its audit entry, as one at a time would.
    let history = m.history(&c, outcomes[3].atom_id.as_deref().unwrap()).unwrap();
    assert_eq!(history.audit.len(), 1, "{history:?}");
    assert!(m.snapshot_version().unwrap() > version);
    // The same batch again changes nothing.
    let version = m.snapshot_version().unwrap();
    let again = m.memorize_many(&c, requests).unwrap();
    assert!(again.iter().all(|o| o.effect != Effect::Applied));
    assert_eq!(m.snapshot_version().unwrap(), version);
}
