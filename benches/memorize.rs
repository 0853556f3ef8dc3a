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
}
