//! Tests of the facade together with the store beneath it: golden rows of
//! every named query, and tampering with the audit chain. They reach below
//! the facade (into the store), so they live in the crate.

mod audit;
mod burst;
mod cards;
mod listing;
mod queries;
mod reopen;
mod usage;

use crate::{AtomId, Caller, Effect, MemorizeRequest, Memory, Scope};

/// A caller in repository `repo` of tenant `alice`, branch main.
fn caller(repo: &str) -> Caller {
    Caller::new(Scope::tenant("alice").with_workspace("acme").with_repository(repo).with_branch("main"), "test")
}

fn memory() -> Memory {
    Memory::open_in_memory().expect("in-memory store opens")
}

/// Memorizes `content` and returns its id, asserting it was applied.
fn remember(memory: &Memory, caller: &Caller, content: &str) -> String {
    let outcome = memory.memorize(caller, MemorizeRequest::new(content).with_source("user")).expect("memorize works");
    assert_eq!(outcome.effect, Effect::Applied, "{content}: {outcome:?}");
    outcome.atom_id.expect("applied outcome has an id")
}

fn id(text: &str) -> AtomId {
    crate::atom::parse_atom_id(text).expect("facade returns valid ids")
}
