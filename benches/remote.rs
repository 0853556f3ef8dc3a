//! The embedded store against a remote SPARQL store (a throwaway Virtuoso
//! started with `scripts/virtuoso.sh`), same data: memorize latency,
//! recall latency at N atoms, write throughput of one node, and how long a
//! fresh node takes to catch up with a store of N atoms. The write path
//! and recall without a model (HMG_BENCH_EMBEDDER=1 includes it), so the
//! figures compare the stores, not the embedding.
//!
//! Run: `cargo bench --bench remote` (HMG_BENCH_ATOMS, default 10000).

// A failed unwrap is a failed bench; reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use hmg::{Caller, MemorizeRequest, Memory, MemoryOptions, RecallRequest, Scope};

mod common;

use common::{Virtuoso, percentile_ms, sentence};

fn options() -> MemoryOptions {
    if std::env::var_os("HMG_BENCH_EMBEDDER").is_some() {
        MemoryOptions::default()
    } else {
        MemoryOptions::default().with_embedder(hmg::EmbedderChoice::Disabled)
    }
}

fn stats(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    (percentile_ms(samples, 0.50), percentile_ms(samples, 0.95))
}

struct Figures {
    load_per_s: f64,
    memorize: (f64, f64),
    recall: (f64, f64),
}

fn measure(label: &str, memory: &Memory, n: usize) -> Figures {
    let caller = Caller::new(Scope::tenant("bench").with_workspace("acme").with_repository("hmg").with_branch("main"), "bench");
    let started = Instant::now();
    let mut writes = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        memory.memorize(&caller, MemorizeRequest::new(sentence(i))).unwrap();
        writes.push(t.elapsed());
        if (i + 1) % 1000 == 0 {
            eprintln!("  {label}: {} / {n} atoms", i + 1);
        }
    }
    let load_per_s = n as f64 / started.elapsed().as_secs_f64();
    let mut last: Vec<Duration> = writes[writes.len().saturating_sub(500)..].to_vec();
    let mut recalls = Vec::new();
    for i in 0..200 {
        let query = sentence((i * 37) % n).split_whitespace().take(4).collect::<Vec<_>>().join(" ");
        let t = Instant::now();
        memory.recall(&caller, RecallRequest { record: false, ..RecallRequest::new(query) }).unwrap();
        recalls.push(t.elapsed());
    }
    Figures { load_per_s, memorize: stats(&mut last), recall: stats(&mut recalls) }
}

fn main() {
    let n: usize = std::env::var("HMG_BENCH_ATOMS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let tmp = tempfile::tempdir().unwrap();
    let embedded = Memory::open_with(Some(&tmp.path().join("embedded")), options()).unwrap();
    let local = measure("embedded", &embedded, n);
    drop(embedded);

    let virtuoso = Virtuoso::start(&tmp.path().join("virtuoso"));
    let node = Memory::open_with(Some(&tmp.path().join("node")), options().with_remote(virtuoso.config())).unwrap();
    let remote = measure("virtuoso", &node, n);
    drop(node);

    let started = Instant::now();
    let fresh = Memory::open_with(Some(&tmp.path().join("fresh-node")), options().with_remote(virtuoso.config())).unwrap();
    let catch_up = started.elapsed();
    drop(fresh);

    println!("store comparison at {n} atoms (same synthetic data; no embedding model unless HMG_BENCH_EMBEDDER=1)");
    println!("{:<34} {:>12} {:>12} {:>8}", "", "embedded", "virtuoso", "ratio");
    let row = |name: &str, a: f64, b: f64| println!("{name:<34} {a:>12.2} {b:>12.2} {:>7.1}x", b / a);
    row("load (memorize one by one), /s", local.load_per_s, remote.load_per_s);
    row("memorize p50 (last 500), ms", local.memorize.0, remote.memorize.0);
    row("memorize p95 (last 500), ms", local.memorize.1, remote.memorize.1);
    row("recall p50, ms", local.recall.0, remote.recall.0);
    row("recall p95, ms", local.recall.1, remote.recall.1);
    println!("fresh node catching up with {n} atoms: {:.1} s", catch_up.as_secs_f64());
}
