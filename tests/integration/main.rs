//! Integration tests: the public API (the `Memory` facade) and the `hmg`
//! binary, one module per topic.

// A failed unwrap is a failed test (or bench); reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod brief;
mod cli;
mod correct;
mod crash;
mod embed;
mod export;
mod fuzz;
mod govern;
mod hardening;
mod http;
mod layers;
mod mcp;
mod memorize;
mod merge;
mod recall;
mod redaction;
mod reflect;
mod remote;
mod rest;
mod secrets;

use hmg::{Caller, Effect, MemorizeRequest, Memory, Scope};

/// A caller in repository `repo` of tenant `alice`, branch main.
pub fn caller(repo: &str) -> Caller {
    Caller::new(Scope::tenant("alice").with_workspace("acme").with_repository(repo).with_branch("main"), "test")
}

/// An in-memory store.
pub fn memory() -> Memory {
    Memory::open_in_memory().expect("in-memory store opens")
}

/// Memorizes `content` and returns its id, asserting it was applied.
pub fn remember(memory: &Memory, caller: &Caller, content: &str) -> String {
    let outcome = memory.memorize(caller, MemorizeRequest::new(content).with_source("user")).expect("memorize works");
    assert_eq!(outcome.effect, Effect::Applied, "{content}: {outcome:?}");
    outcome.atom_id.expect("applied outcome has an id")
}

/// Parses an id returned by the facade.
pub fn id(text: &str) -> hmg::AtomId {
    hmg::atom::parse_atom_id(text).expect("facade returns valid ids")
}
