//! `Memory::memorize_calls`: calls that arrived together (an MCP burst) are
//! written together, each answered as if it came alone.

use super::{caller, memory};
use crate::atom::Kind;
use crate::{Caller, Effect, MemorizeOutcome, MemorizeRequest, Memory, Scope};

/// What an answer says, with ids replaced by the position of the call
/// whose write they name (`None`: not a write of these calls).
fn shape(answers: &[crate::memory::Result<MemorizeOutcome>]) -> Vec<String> {
    let ids: Vec<Option<String>> = answers.iter().map(|a| a.as_ref().ok().and_then(|o| o.atom_id.clone())).collect();
    let at = |id: &Option<String>| id.as_ref().and_then(|id| ids.iter().position(|i| i.as_ref() == Some(id)));
    answers
        .iter()
        .map(|a| match a {
            Ok(o) => format!("{:?} {:?} {:?} {:?} {:?}", o.effect, at(&o.atom_id), at(&o.deduped_with), o.reason, o.redactions),
            Err(e) => format!("error {e}"),
        })
        .collect()
}

fn calls() -> Vec<(Caller, MemorizeRequest)> {
    let a = caller("api");
    let b = Caller::new(a.scope.clone(), "another agent");
    let other_repo = caller("web");
    let bad_scope = Caller::new(Scope::tenant("alice").with_workspace("acme\u{7}"), "test");
    vec![
        (a.clone(), MemorizeRequest::new("The API rate limit is 100 requests per minute")),
        (b.clone(), MemorizeRequest::new("主数据库用 PostgreSQL 16")),
        (a.clone(), MemorizeRequest::new("The API rate limit is 100 requests per minute")),
        // Another agent in the same repository restates it: a duplicate.
        (b.clone(), MemorizeRequest::new("The API rate limit is 100 requests per minute")),
        // Another repository keeps its own.
        (other_repo.clone(), MemorizeRequest::new("The API rate limit is 100 requests per minute")),
        (a.clone(), MemorizeRequest::new("   ")),
        (a.clone(), MemorizeRequest::new("handoffs come from memory_handoff").with_kind(Kind::Handoff)),
        (bad_scope, MemorizeRequest::new("A memory in a scope that cannot be")),
        (a.clone(), MemorizeRequest::new("Token for staging: ghp_DCTbyvHNsG9eh6Yo4gfqrc5XlrWi0B26R08q")),
        (other_repo, MemorizeRequest::new("デプロイの前にマイグレーションを実行すること")),
        (a, MemorizeRequest::new("デプロイの前にマイグレーションを実行すること")),
    ]
}

#[test]
fn calls_written_together_are_answered_as_if_each_came_alone() {
    let together = memory();
    let answers = together.memorize_calls(calls());
    let alone = memory();
    let one_by_one: Vec<_> = calls().into_iter().map(|(caller, request)| alone.memorize(&caller, request)).collect();
    assert_eq!(shape(&answers), shape(&one_by_one));
    let effects: Vec<Option<Effect>> = answers.iter().map(|a| a.as_ref().ok().map(|o| o.effect)).collect();
    use Effect::{Applied, NoOp, Rejected};
    assert_eq!(
        effects,
        [
            Some(Applied),
            Some(Applied),
            Some(NoOp),
            Some(NoOp),
            Some(Applied),
            Some(Rejected),
            None,
            None,
            Some(Applied),
            Some(Applied),
            Some(Applied)
        ],
        "{answers:#?}"
    );
    // Every write is stored, once, and audited.
    let stats = |memory: &Memory, c: &Caller| memory.stats(c).unwrap().atoms;
    assert_eq!(stats(&together, &caller("api")), stats(&alone, &caller("api")));
    assert_eq!(stats(&together, &caller("api")), 6, "the tenant's atoms");
    let chain = together.verify_audit(Some("alice")).unwrap();
    assert!(chain[0].first_broken.is_none(), "{chain:?}");
    assert_eq!(chain[0].entries, alone.verify_audit(Some("alice")).unwrap()[0].entries, "one audit entry per write");
}

#[test]
fn one_call_alone_is_written_as_memorize_writes_it() {
    let memory = memory();
    let answers = memory.memorize_calls(vec![(caller("api"), MemorizeRequest::new("A lone call"))]);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].as_ref().unwrap().effect, Effect::Applied);
    assert!(memory.memorize_calls(Vec::new()).is_empty());
}
