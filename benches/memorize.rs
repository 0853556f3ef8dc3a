//! Memorize throughput and latency on an on-disk store, up to 10k atoms
//! (override with HMG_BENCH_ATOMS). Synthetic multilingual atoms: English,
//! Chinese and Japanese, with entities, constraints and guesses.
//!
//! Then the write path with the real models (the default ensemble), the way
//! users take it: one memorize at a time, `hmg import` of a JSON Lines file
//! (`Memory::import`), and `memorize_many` (HMG_BENCH_BULK atoms each,
//! default 1000).
//!
//! Run: `cargo bench --bench memorize`

// A failed unwrap is a failed test (or bench); reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use hmg::extract::{Extractor, Message, RuleExtractor};
use hmg::{Caller, Effect, MemorizeRequest, Memory, Scope};

mod common;

use common::{percentile_ms, sentence};

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    println!(
        "{label:<28} n={:<6} p50={:>8.3} ms  p95={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        samples.len(),
        percentile_ms(samples, 0.50),
        percentile_ms(samples, 0.95),
        percentile_ms(samples, 0.99),
        samples.last().map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0),
    );
}

fn main() {
    let n: usize = std::env::var("HMG_BENCH_ATOMS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("temp dir");
    // The write path without a model (embedding cost is reported by the
    // recall bench and `hmg eval`); HMG_BENCH_EMBEDDER=1 includes it.
    let options = if std::env::var_os("HMG_BENCH_EMBEDDER").is_some() {
        hmg::MemoryOptions::default()
    } else {
        hmg::MemoryOptions::default().with_embedder(hmg::EmbedderChoice::Disabled)
    };
    let memory = Memory::open_with(Some(dir.path()), options).expect("store opens");
    let caller = Caller::new(Scope::tenant("bench").with_workspace("acme").with_repository("hmg").with_branch("main"), "bench");

    let mut all = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let outcome = memory.memorize(&caller, MemorizeRequest::new(sentence(i))).expect("memorize");
        all.push(t.elapsed());
        assert_eq!(outcome.effect, Effect::Applied, "synthetic atoms are distinct");
        if (i + 1) % 2_000 == 0 {
            eprintln!("  {} / {n} atoms", i + 1);
        }
    }
    let total = started.elapsed();
    println!("memorize: {n} atoms in {:.2} s = {:.0} atoms/s", total.as_secs_f64(), n as f64 / total.as_secs_f64());
    let mut last = all[all.len().saturating_sub(1_000)..].to_vec();
    report("memorize (all)", &mut all);
    report("memorize (last 1000)", &mut last);

    let mut dedup = Vec::new();
    for i in (0..n).step_by((n / 1_000).max(1)) {
        let t = Instant::now();
        let outcome = memory.memorize(&caller, MemorizeRequest::new(sentence(i))).expect("memorize");
        dedup.push(t.elapsed());
        assert_eq!(outcome.effect, Effect::NoOp);
    }
    report("memorize duplicate (no_op)", &mut dedup);
    let stats = memory.stats(&caller).expect("stats");
    println!("store: {} atoms, {} edges, snapshot_version {}", stats.atoms, stats.edges, stats.snapshot_version);
    drop(memory);
    with_models(&caller);
}

/// The write path with embeddings.
fn with_models(caller: &Caller) {
    let n: usize = std::env::var("HMG_BENCH_BULK").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let memory = Memory::open(dir.path()).expect("store opens");
    let models: Vec<&str> = memory.indexes().semantic().iter().map(|s| s.embedder.id()).collect();
    assert!(!models.is_empty(), "the models are needed (scripts/setup.sh): {:?}", memory.indexes().semantic_note());
    println!("with embeddings ({})", models.join(" + "));
    // Distinct texts per case (offsets), so no case dedups another's.
    let mut one = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        memory.memorize(caller, MemorizeRequest::new(sentence(1_000_000 + i))).expect("memorize");
        one.push(t.elapsed());
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    println!("  one at a time: {rate:.0} memories/s");
    report("  memorize with embeddings", &mut one);

    let input: String =
        (0..n).map(|i| format!("{}\n", serde_json::json!({ "content": sentence(2_000_000 + i), "source": "user" }))).collect();
    let started = Instant::now();
    let imported = memory.import(caller, &mut input.as_bytes(), &mut |_| {}).expect("import");
    assert_eq!(imported.applied, n);
    println!("  import (JSON Lines): {:.0} memories/s", n as f64 / started.elapsed().as_secs_f64());

    let requests: Vec<MemorizeRequest> = (0..n).map(|i| MemorizeRequest::new(sentence(3_000_000 + i))).collect();
    let started = Instant::now();
    let outcomes = memory.memorize_many(caller, requests).expect("memorize_many");
    assert!(outcomes.iter().all(|o| o.effect == Effect::Applied));
    println!("  memorize_many: {:.0} memories/s", n as f64 / started.elapsed().as_secs_f64());

    // A chat per add: the REST `add` without HTTP (its `infer: false` is
    // `memorize_many`, above). A scope of its own, as a REST user has.
    let caller = Caller::new(caller.scope.clone().with_branch("chat"), "bench");
    let mut per_add = Vec::new();
    let (mut facts, mut events) = (0usize, std::collections::BTreeMap::<String, usize>::new());
    let started = Instant::now();
    for chat in 0..n / CHAT_MESSAGES {
        let messages: Vec<Message> =
            (0..CHAT_MESSAGES).map(|m| Message { role: "user".to_owned(), content: chat_line(chat * CHAT_MESSAGES + m) }).collect();
        let t = Instant::now();
        let said = RuleExtractor.extract(&messages).expect("extract");
        let results = memory.merge_facts(&caller, &said, "user").expect("merge");
        per_add.push(t.elapsed());
        facts += said.len();
        for r in &results {
            *events.entry(format!("{:?}", r.event)).or_default() += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let added = events.get("Add").copied().unwrap_or(0);
    println!(
        "  chat add ({CHAT_MESSAGES} messages): {:.0} facts/s, {:.0} added/s ({facts} facts: {events:?})",
        facts as f64 / seconds,
        added as f64 / seconds
    );
    report("  chat add", &mut per_add);
}

/// User messages per chat in the `add` case.
const CHAT_MESSAGES: usize = 10;

/// One user message of a chat: a first-person fact, English, Chinese or
/// Japanese; every other one names no number (the merge then asks the
/// sentence model whether it restates a memory).
fn chat_line(i: usize) -> String {
    const NUMBERED: &[&str] = &[
        "I visited {c} in May for workshop {i}.",
        "我在{c}参加了第{i}次研讨会。",
        "{c}で第{i}回のワークショップに参加しました。",
        "My team ships release {i} of the {x} app on Friday.",
    ];
    const PLAIN: &[&str] = &[
        "I want to learn {x} with {p} someday.",
        "My neighbour {p} grows {x} on the {c} balcony.",
        "我想和{p}一起学{x}。",
        "{p}さんは{c}で{x}を育てています。",
    ];
    const PEOPLE: &[&str] = &["Ana", "Kenji", "Li Wei", "Priya", "Mateo", "Sofia", "Yuki", "Omar"];
    const THINGS: &[&str] = &["pottery", "sourdough", "chess", "origami", "kayaking", "calligraphy", "ukulele", "bonsai", "salsa"];
    const PLACES: &[&str] = &["Porto", "Kyoto", "Berlin", "Lima", "Osaka", "Chengdu", "Quito"];
    let templates = if i.is_multiple_of(2) { NUMBERED } else { PLAIN };
    templates[(i / 2) % templates.len()]
        .replace("{i}", &i.to_string())
        .replace("{p}", PEOPLE[(i / 8) % PEOPLE.len()])
        .replace("{x}", THINGS[(i / 64) % THINGS.len()])
        .replace("{c}", PLACES[(i / 576) % PLACES.len()])
}
