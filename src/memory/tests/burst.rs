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

/// `n` distinct short memories, English, Chinese and Japanese in turn.
fn short_memories(from: usize, n: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| match i % 3 {
            0 => format!("Build {i} of the billing service passed on the first try"),
            1 => format!("第{i}号服务的重试移到了预发布集群"),
            _ => format!("サービス{i}のリトライをステージングに移した"),
        })
        .collect()
}

#[test]
fn groups_fly_ahead_and_land_in_order_each_with_its_own_vectors() {
    let memory = Memory::open_with(None, crate::MemoryOptions::default()).expect("the default models (scripts/setup.sh)");
    let a = caller("api");
    let first = short_memories(0, crate::MEMORIZE_BATCH);
    let second = short_memories(1_000, crate::MEMORIZE_BATCH);
    let third = short_memories(2_000, 20);
    // Where there is more than one core, a group this size is embedded in
    // per-core parts, which is what flies ahead.
    let bytes = first.iter().map(String::len).sum();
    assert_eq!(crate::index::embed::split_parts(first.len(), bytes) > 1, crate::index::embed::engine_count() > 1);
    // Restatements of the group before (in flight while this one is
    // checked) and of the group itself, between new memories: each with
    // the position of what it restates.
    let mut sent: Vec<(String, Option<usize>)> = first.iter().map(|t| (t.clone(), None)).collect();
    sent.push((format!("  {}. ", first[5].to_uppercase()), Some(5)));
    sent.extend(second.iter().take(10).map(|t| (t.clone(), None)));
    sent.push((first[63].clone(), Some(63)));
    let second_at = sent.len();
    sent.extend(second.iter().skip(10).map(|t| (t.clone(), None)));
    sent.push((second[0].clone(), Some(first.len() + 1)));
    sent.extend(third.iter().map(|t| (t.clone(), None)));
    assert_eq!(sent[first.len() + 1].0, second[0]);
    assert_eq!(sent[second_at].0, second[10]);
    let texts: Vec<String> = sent.iter().map(|(t, _)| t.clone()).collect();
    let version = memory.snapshot_version().expect("a version");
    let outcomes = memory.memorize_many(&a, texts.iter().map(|t| MemorizeRequest::new(t.as_str())).collect()).expect("memorize_many works");
    assert_eq!(outcomes.len(), texts.len());
    assert_eq!(memory.snapshot_version().expect("a version"), version + 3, "one transaction per group of new memories");
    for ((text, restates), outcome) in sent.iter().zip(&outcomes) {
        match restates {
            Some(at) => assert_eq!((outcome.effect, &outcome.deduped_with), (Effect::NoOp, &outcomes[*at].atom_id), "{text}"),
            None => assert_eq!(outcome.effect, Effect::Applied, "{text}: {outcome:?}"),
        }
    }
    // Every new memory is written and indexed once the call returns, with
    // its own vector (the last group's too), and audited.
    let e5 = &memory.indexes().semantic()[0];
    for (text, outcome) in texts.iter().zip(&outcomes).filter(|(_, o)| o.effect == Effect::Applied).step_by(7) {
        let id = crate::atom::parse_atom_id(outcome.atom_id.as_deref().expect("an id")).expect("an atom id");
        assert_eq!(memory.atom("alice", id).expect("reads").and_then(|atom| atom.content).as_deref(), Some(text.as_str()));
        let stored = e5.vectors.vector_of(id, "alice").unwrap_or_else(|| panic!("a vector of \"{text}\""));
        let alone = e5.embedder.embed_passages(&[text.as_str()]).expect("embeds").remove(0);
        let cosine: f32 = stored.iter().zip(&alone).map(|(p, q)| p * q).sum();
        assert!(cosine > 0.999, "\"{text}\" has another text's vector ({cosine})");
    }
    let last = outcomes.last().and_then(|o| o.atom_id.clone()).expect("the last memory's id");
    assert_eq!(memory.history(&a, &last).expect("its history").audit.len(), 1);
    assert!(memory.verify_audit(None).expect("verifies").iter().all(|t| t.first_broken.is_none()));
}

/// Reads `good` then fails, as a pipe whose writer died.
struct Failing {
    good: std::io::Cursor<Vec<u8>>,
}

impl std::io::Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.good.read(buf)? {
            0 => Err(std::io::Error::other("the writer went away")),
            n => Ok(n),
        }
    }
}

#[test]
fn an_import_that_fails_part_way_writes_and_reports_every_group_before_the_failure() {
    use std::io::Read;
    let memory = Memory::open_with(None, crate::MemoryOptions::default()).expect("the default models (scripts/setup.sh)");
    let a = caller("api");
    // Groups of 1, 2, 4 … 64 lines: 127 lines in seven groups, the last
    // of them in flight when the input fails; 23 lines wait for a group.
    let lines: Vec<String> = short_memories(0, 150).iter().map(|t| serde_json::json!({ "content": t }).to_string()).collect();
    let mut input = std::io::BufReader::new(Failing { good: std::io::Cursor::new(format!("{}\n", lines.join("\n")).into_bytes()) });
    let version = memory.snapshot_version().expect("a version");
    let mut acks = Vec::new();
    let outcome = memory.import(&a, &mut input, &mut |line| acks.push(line.clone()));
    let error = outcome.expect_err("the input failed");
    assert!(error.to_string().contains("went away"), "{error}");
    assert_eq!(acks.iter().map(|ack| ack.line).collect::<Vec<_>>(), (1..=127).collect::<Vec<_>>(), "every written line, in order");
    for ack in &acks {
        assert_eq!(ack.effect, Effect::Applied, "line {}: {:?}", ack.line, ack.reason);
        let id = crate::atom::parse_atom_id(ack.atom_id.as_deref().expect("an id")).expect("an atom id");
        assert!(memory.atom("alice", id).expect("reads").is_some(), "line {} acknowledged but not written", ack.line);
    }
    assert_eq!(memory.snapshot_version().expect("a version"), version + 7, "one transaction per group, nothing more");
    assert_eq!(memory.indexes().semantic()[0].vectors.count("alice"), 127, "every written line is indexed");
    assert!(input.read(&mut [0u8; 1]).is_err(), "the input stays failed");
}
