//! correct: negate, confirm_*, demote, replace and the evolution chain.

use hmg::{CorrectAction, CorrectRequest, Effect, Epistemic, MemoryError, Status};

use super::{caller, id, memory, remember};

fn request(target: &str, action: CorrectAction, new_content: Option<&str>) -> CorrectRequest {
    CorrectRequest { target_atom: target.to_owned(), action, reason: "test reason".into(), new_content: new_content.map(str::to_owned) }
}

#[test]
fn negate_is_permanent_and_only_replace_follows() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "The staging cluster runs Kubernetes 1.27");
    let out = m.correct(&c, request(&atom, CorrectAction::Negate, None)).unwrap();
    assert_eq!((out.effect, out.target_atom.as_str()), (Effect::Applied, atom.as_str()));
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().status, Status::Negated);
    for action in [CorrectAction::Negate, CorrectAction::ConfirmActual, CorrectAction::Demote] {
        let again = m.correct(&c, request(&atom, action, None)).unwrap();
        assert_eq!(again.effect, Effect::Rejected);
        assert!(again.reason.unwrap().contains("replace"));
    }
    let replaced = m.correct(&c, request(&atom, CorrectAction::Replace, Some("The staging cluster runs Kubernetes 1.29"))).unwrap();
    assert_eq!(replaced.effect, Effect::Applied);
    let new_id = replaced.new_atom_id.unwrap();
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().status, Status::Negated, "negation stays");
    let new_atom = m.atom("alice", id(&new_id)).unwrap().unwrap();
    assert_eq!((new_atom.status, new_atom.supersedes), (Status::Active, Some(id(&atom))));
}

#[test]
fn confirm_and_demote_change_epistemic_with_audit() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "这个 bug 可能是并发导致的");
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().epistemic, Epistemic::Possible);
    for (action, expected) in [
        (CorrectAction::ConfirmActual, Epistemic::Actual),
        (CorrectAction::ConfirmNecessary, Epistemic::Necessary),
        (CorrectAction::Demote, Epistemic::Possible),
    ] {
        assert_eq!(m.correct(&c, request(&atom, action, None)).unwrap().effect, Effect::Applied);
        assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().epistemic, expected);
    }
    let history = m.history(&c, &atom).unwrap();
    let actions: Vec<_> = history.audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["memorize", "correct.confirm_actual", "correct.confirm_necessary", "correct.demote"]);
    let confirm = &history.audit[2];
    assert_eq!((confirm.epistemic_before.as_deref(), confirm.epistemic_after.as_deref()), (Some("actual"), Some("necessary")));
    assert_eq!(confirm.reason.as_deref(), Some("test reason"));
}

#[test]
fn replace_builds_a_chain_with_one_atom_in_effect() {
    let m = memory();
    let c = caller("hmg");
    let v1 = remember(&m, &c, "主数据库用 MongoDB");
    let v2 = m.correct(&c, request(&v1, CorrectAction::Replace, Some("主数据库用 PostgreSQL 16，替换原 MongoDB 方案"))).unwrap();
    let v2 = v2.new_atom_id.unwrap();
    // Correcting the superseded atom is rejected and names the head.
    let stale = m.correct(&c, request(&v1, CorrectAction::Replace, Some("主数据库用 MySQL"))).unwrap();
    assert_eq!(stale.effect, Effect::Rejected);
    assert!(stale.reason.unwrap().contains(&v2));
    let v3 = m.correct(&c, request(&v2, CorrectAction::Replace, Some("主数据库用 PostgreSQL 17"))).unwrap().new_atom_id.unwrap();
    let stale = m.correct(&c, request(&v1, CorrectAction::Negate, None)).unwrap();
    assert!(stale.reason.unwrap().contains(&v3), "names the current head, not the next link");

    let statuses: Vec<Status> = [&v1, &v2, &v3].iter().map(|a| m.atom("alice", id(a)).unwrap().unwrap().status).collect();
    assert_eq!(statuses, [Status::Superseded, Status::Superseded, Status::Active]);
    for start in [&v1, &v2, &v3] {
        let history = m.history(&c, start).unwrap();
        let chain: Vec<&str> = history.chain.iter().map(|a| a.atom_id.as_str()).collect();
        assert_eq!(chain, [v1.as_str(), v2.as_str(), v3.as_str()], "from {start}");
        assert_eq!(history.head, v3);
    }
    // The old content stays in the store (append-only history).
    assert_eq!(m.atom("alice", id(&v1)).unwrap().unwrap().content.as_deref(), Some("主数据库用 MongoDB"));
    assert_eq!(m.chain_head("alice", id(&v1)).unwrap(), id(&v3));
}

#[test]
fn replace_admission_and_validation() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "キャッシュの TTL は 60 秒");
    let err = m.correct(&c, request(&atom, CorrectAction::Replace, None)).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "new_content", .. }), "{err}");
    let err = m.correct(&c, request(&atom, CorrectAction::Negate, Some("x"))).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "new_content", .. }), "{err}");
    let same = m.correct(&c, request(&atom, CorrectAction::Replace, Some("キャッシュの TTL は 60 秒。"))).unwrap();
    assert_eq!(same.effect, Effect::Rejected);
    let empty = m.correct(&c, request(&atom, CorrectAction::Replace, Some("  "))).unwrap();
    assert_eq!(empty.effect, Effect::Rejected);
    assert!(empty.reason.unwrap().starts_with("empty"));
    let secret = m.correct(&c, request(&atom, CorrectAction::Replace, Some("TTL 120 秒、password=Zz9yYxXwW"))).unwrap();
    let new_atom = m.atom("alice", id(&secret.new_atom_id.unwrap())).unwrap().unwrap();
    assert!(!new_atom.content.unwrap().contains("Zz9yYxXwW"));
}

#[test]
fn bad_ids_actions_and_reasons_are_clear_errors() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "we deploy on fridays");
    let err = m.correct(&c, request("not-an-atom", CorrectAction::Negate, None)).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "target_atom", .. }), "{err}");
    let err = m.correct(&c, request("01J9ZK8V3QX7N2M4R6T8W0YB1C", CorrectAction::Negate, None)).unwrap_err();
    assert!(matches!(err, MemoryError::AtomNotFound(_)), "{err}");
    let err = "undo".parse::<CorrectAction>().unwrap_err();
    assert!(err.to_string().contains("'undo'") && err.to_string().contains("confirm_necessary"), "{err}");
    let mut no_reason = request(&atom, CorrectAction::Negate, None);
    no_reason.reason = "  ".into();
    let err = m.correct(&c, no_reason).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidInput { field: "reason", .. }), "{err}");
}
