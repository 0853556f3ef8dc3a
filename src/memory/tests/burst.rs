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

#[test]
fn a_batch_shared_by_the_models_gives_each_memory_its_own_vectors() {
    let memory = Memory::open_with(None, crate::MemoryOptions::default()).expect("the default models (scripts/setup.sh)");
    let models = memory.indexes().semantic();
    assert!(models.len() >= 2, "both default models: {}", models.len());
    let a = caller("api");
    // Enough text to be cut into pieces for both models (English for both,
    // Chinese and Japanese for e5 alone), in mixed order.
    let texts: Vec<String> = (0..18)
        .map(|i| match i % 3 {
            0 => format!("Release {i} of the billing service moved its retries to the staging cluster"),
            1 => format!("第{i}次周会决定把计费服务的重试移到预发布集群"),
            _ => format!("第{i}回の定例で課金サービスのリトライをステージングに移しました"),
        })
        .collect();
    let outcomes = memory.memorize_many(&a, texts.iter().map(|t| MemorizeRequest::new(t.as_str())).collect()).expect("memorize_many works");
    for (text, outcome) in texts.iter().zip(&outcomes) {
        assert_eq!(outcome.effect, Effect::Applied, "{text}");
        let id = crate::atom::parse_atom_id(outcome.atom_id.as_deref().expect("an id")).expect("an atom id");
        let language = crate::text::detect_language(text);
        for model in models {
            let stored = model.vectors.vector_of(id, "alice");
            if !model.understands(language) {
                assert!(stored.is_none(), "{}: no vector of \"{text}\"", model.embedder.id());
                continue;
            }
            let stored = stored.unwrap_or_else(|| panic!("{}: a vector of \"{text}\"", model.embedder.id()));
            let alone = model.embedder.embed_passages(&[text.as_str()]).expect("embeds").remove(0);
            let cosine: f32 = stored.iter().zip(&alone).map(|(p, q)| p * q).sum();
            // The same text's vector; a batch may run other kernels (AMX
            // tiles) than one text alone, so not bit for bit.
            assert!(cosine > 0.999, "{}: \"{text}\" has another text's vector ({cosine})", model.embedder.id());
        }
    }
}
