//! agent_brief: sections, visibility, budget, onboarding.

use hmg::{BriefOptions, Caller, HandoffRequest, Scope};

use super::{caller, memory, remember};

#[test]
fn empty_store_gets_the_onboarding_note() {
    let m = memory();
    let brief = m.brief(&caller("hmg"), BriefOptions::default()).unwrap();
    assert!(brief.empty);
    assert!(brief.text.contains("memory_memorize") && brief.text.contains("memory_handoff"));
}

#[test]
fn sections_follow_scope_and_recency() {
    let m = memory();
    let c = caller("hmg");
    remember(&m, &c, "We use PostgreSQL 16 as the main database");
    remember(&m, &c, "部署前必须先跑数据库迁移");
    remember(&m, &caller("other-repo"), "Secret plans of another repository");
    let personal = Caller::new(Scope::tenant("alice"), "test");
    remember(&m, &personal, "回答は簡潔に、日本語でお願いします");
    for summary in ["handoff one: fixed login.py", "handoff two: added tests", "handoff three: released v2", "handoff four: docs"] {
        m.handoff(&c, HandoffRequest::new(summary)).unwrap();
    }
    let lesson_source = remember(&m, &c, "We pasted a key into the CI config");
    m.govern(
        &c,
        hmg::GovernRequest {
            target_atom: lesson_source,
            action: hmg::GovernAction::DeriveLesson,
            reason: "leak".into(),
            lesson_content: Some("Keys belong in the secret store, checked by CI".into()),
        },
    )
    .unwrap();
    let brief = m.brief(&c, BriefOptions::default()).unwrap();
    assert!(!brief.empty);
    let handoffs: Vec<&str> = brief.handoffs.iter().map(|a| a.content.as_str()).collect();
    assert_eq!(handoffs, ["handoff four: docs", "handoff three: released v2", "handoff two: added tests"]);
    assert_eq!(brief.constraints[0].content, "部署前必须先跑数据库迁移");
    assert_eq!(brief.lessons.len(), 1);
    assert!(brief.text.contains("回答は簡潔に"), "tenant-wide memories are shown");
    assert!(!brief.text.contains("Secret plans"), "other repositories are not");
    assert!(!brief.text.contains("We pasted a key"), "sealed originals are not");
    let text_pos = |needle: &str| brief.text.find(needle).unwrap();
    assert!(text_pos("## Latest handoffs") < text_pos("## Constraints"));
}

#[test]
fn the_budget_is_respected() {
    let m = memory();
    let c = caller("hmg");
    for i in 0..200 {
        remember(&m, &c, &format!("Fact number {i} about the build system and its many details"));
    }
    for budget in [300, 1_000, 10_000] {
        let brief = m.brief(&c, BriefOptions { max_chars: budget, ..BriefOptions::default() }).unwrap();
        assert!(brief.text.chars().count() <= budget, "{} > {budget}", brief.text.chars().count());
    }
    let small = m.brief(&c, BriefOptions { max_chars: 300, ..BriefOptions::default() }).unwrap();
    assert!(small.truncated);
}
