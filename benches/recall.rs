//! Recall latency at 10k and 100k atoms (override with HMG_BENCH_SIZES, e.g.
//! "10000,100000"), p50/p95, without and with query embedding, for short
//! queries and a ten-turn dialogue pasted as a query, and the memory use of
//! the open store.
//!
//! The vector index is filled by a deterministic stand-in embedder (hashed
//! word vectors, 384 dimensions) so the whole search path — keyword, vector
//! search (exact or HNSW), entities, graph expansion, hydration — runs at
//! full size without spending hours embedding 100k synthetic sentences; the
//! real model's query-embedding time is measured separately and reported
//! added to it.
//!
//! Run: `cargo bench --bench recall`

// A failed unwrap is a failed test (or bench); reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile_ms, rss_mib, sentence};
use hmg::embed::{EmbedError, Embedder};
use hmg::{Caller, EmbedderChoice, MemorizeRequest, Memory, MemoryOptions, RecallRequest, Scope};

struct HashEmbedder;

impl HashEmbedder {
    fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; 384];
        for term in hmg::text::analyze::terms(text, hmg::text::analyze::Mode::Query) {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in term.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
            for k in 0..4 {
                let slot = ((h >> (k * 16)) % 384) as usize;
                v[slot] += if (h >> (k + 60)) & 1 == 0 { 1.0 } else { -1.0 };
            }
        }
        hmg::embed::normalize(&mut v);
        v
    }
}

impl Embedder for HashEmbedder {
    fn id(&self) -> &str {
        "bench-hash:384"
    }
    fn dims(&self) -> usize {
        384
    }
    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| HashEmbedder::vector(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        Ok(HashEmbedder::vector(text))
    }
}

const QUERIES: &[&str] = &[
    "PostgreSQL restart config change",
    "billing service incident",
    "Redis 迁移 集群",
    "キャッシュ 障害 原因",
    "ledger-sync region",
    "老李 配置变更",
    "Kubernetes retry request",
    "src/login.py incident",
];

fn main() {
    if let Ok(filter) = std::env::var("HMG_LOG") {
        tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(tracing_subscriber::EnvFilter::new(filter)).init();
    }
    let sizes: Vec<usize> = std::env::var("HMG_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let caller = Caller::new(Scope::tenant("bench").with_workspace("acme").with_repository("hmg").with_branch("main"), "bench");

    // The real models' query embedding, measured on their own (an English
    // query asks every model of the default ensemble).
    let mut embed_samples = Vec::new();
    let mut dialogue_embedding: Option<(f64, f64)> = None;
    let dialogue = common::DIALOGUE.join("\n");
    match hmg::embed::from_env() {
        Ok(models) if !models.is_empty() => {
            for round in 0..5 {
                for q in QUERIES {
                    let t = Instant::now();
                    for model in &models {
                        let _ = model.embed_query(&format!("{q} {round}"));
                    }
                    embed_samples.push(t.elapsed());
                }
            }
            embed_samples.sort();
            let ids: Vec<&str> = models.iter().map(|m| m.id()).collect();
            println!(
                "query embedding ({}): p50={:.3} ms p95={:.3} ms",
                ids.join(" + "),
                percentile_ms(&embed_samples, 0.5),
                percentile_ms(&embed_samples, 0.95)
            );
            // A dialogue query embedded as recall embeds it (every model
            // side by side, the older parts pooled from each model's pass
            // over the whole, the latest parts their own: `own_parts`): a
            // recall on a store of a few memories with the real models,
            // where the search costs next to nothing. A fresh dialogue
            // each time, every line new (no part from the query cache).
            let small_dir = tempfile::tempdir().expect("temp dir");
            let mut small = Memory::open_with(Some(small_dir.path()), MemoryOptions::default()).expect("store with the models opens");
            for i in 0..20 {
                small.memorize(&caller, MemorizeRequest::new(sentence(i))).expect("memorize");
            }
            let _ = small.recall(&caller, RecallRequest::new(format!("{dialogue} (warm up)")));
            // Beside it, every part in a pass of its own (as before the
            // older parts were pooled), rounds alternated.
            let pooled = hmg::RecallConfig::default();
            let every_part = hmg::RecallConfig { own_parts: pooled.max_segments, ..pooled.clone() };
            let (mut dialogue_samples, mut every_part_samples) = (Vec::new(), Vec::new());
            for round in 0..40 {
                let (config, samples) =
                    if round % 2 == 0 { (&pooled, &mut dialogue_samples) } else { (&every_part, &mut every_part_samples) };
                small.set_recall_config(config.clone());
                let t = Instant::now();
                let fresh: Vec<String> = common::DIALOGUE.iter().map(|line| format!("{line} ({round})")).collect();
                small.recall(&caller, RecallRequest { record: false, ..RecallRequest::new(fresh.join("\n")) }).expect("recall");
                samples.push(t.elapsed());
            }
            dialogue_samples.sort();
            every_part_samples.sort();
            println!(
                "dialogue query embedding, as recall embeds it (10 turns; recall on 20 memories): p50={:.3} ms p95={:.3} ms \
                 (every part its own pass: p50={:.3} ms p95={:.3} ms)",
                percentile_ms(&dialogue_samples, 0.5),
                percentile_ms(&dialogue_samples, 0.95),
                percentile_ms(&every_part_samples, 0.5),
                percentile_ms(&every_part_samples, 0.95)
            );
            dialogue_embedding = Some((percentile_ms(&dialogue_samples, 0.5), percentile_ms(&dialogue_samples, 0.95)));
        }
        Ok(_) => println!("query embedding: no model configured"),
        Err(error) => println!("query embedding: model unavailable: {error}"),
    }

    for n in sizes {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = MemoryOptions::default().with_embedder(EmbedderChoice::Given(Arc::new(HashEmbedder)));
        let memory = Memory::open_with(Some(dir.path()), options).expect("store opens");
        let started = Instant::now();
        for i in 0..n {
            memory.memorize(&caller, MemorizeRequest::new(sentence(i))).expect("memorize");
            if (i + 1) % 20_000 == 0 {
                eprintln!("  {} / {n} atoms", i + 1);
            }
        }
        memory.persist_indexes().expect("persist");
        eprintln!("  ingested {n} atoms in {:.1} s", started.elapsed().as_secs_f64());
        // Warm-up (first search commits and loads the reader).
        let _ = memory.recall(&caller, RecallRequest::new("warm up"));
        let mut samples: Vec<Duration> = Vec::new();
        // The same queries without recording usage (lastRecalledAt,
        // recallCount: one small store write per recall), interleaved so
        // both see the same machine load.
        let mut unrecorded: Vec<Duration> = Vec::new();
        for round in 0..25 {
            for q in QUERIES {
                let t = Instant::now();
                let outcome = memory.recall(&caller, RecallRequest::new(format!("{q} {round}"))).expect("recall");
                samples.push(t.elapsed());
                assert!(!outcome.atoms.is_empty());
                let t = Instant::now();
                memory
                    .recall(&caller, RecallRequest { record: false, ..RecallRequest::new(format!("{q} {round} again")) })
                    .expect("recall");
                unrecorded.push(t.elapsed());
            }
        }
        samples.sort();
        unrecorded.sort();
        println!(
            "recall at {n:>6} atoms without recording usage: p50={:.3} ms p95={:.3} ms (recording costs {:.2}x at p50)",
            percentile_ms(&unrecorded, 0.5),
            percentile_ms(&unrecorded, 0.95),
            percentile_ms(&samples, 0.5) / percentile_ms(&unrecorded, 0.5).max(1e-9)
        );
        let p50 = percentile_ms(&samples, 0.5);
        let p95 = percentile_ms(&samples, 0.95);
        println!("recall at {n:>6} atoms, query embedding excluded: p50={p50:.3} ms p95={p95:.3} ms (n={})", samples.len());
        if !embed_samples.is_empty() {
            println!(
                "recall at {n:>6} atoms, query embedding included: p50={:.3} ms p95={:.3} ms",
                p50 + percentile_ms(&embed_samples, 0.5),
                p95 + percentile_ms(&embed_samples, 0.95)
            );
        }
        let mut dialogue_recall: Vec<Duration> = (0..40)
            .map(|round| {
                let t = Instant::now();
                memory
                    .recall(&caller, RecallRequest { record: false, ..RecallRequest::new(format!("{dialogue} ({round})")) })
                    .expect("recall");
                t.elapsed()
            })
            .collect();
        dialogue_recall.sort();
        let (d50, d95) = (percentile_ms(&dialogue_recall, 0.5), percentile_ms(&dialogue_recall, 0.95));
        println!("dialogue recall at {n:>6} atoms, query embedding excluded: p50={d50:.3} ms p95={d95:.3} ms");
        if let Some((e50, e95)) = dialogue_embedding {
            println!("dialogue recall at {n:>6} atoms, query embedding included: p50={:.3} ms p95={:.3} ms", d50 + e50, d95 + e95);
        }
        // An agent in another repository of the same tenant: it sees its
        // own 100 memories (and none of the tenant-wide ones here), and one
        // in a repository without any sees nothing. Their vector searches
        // run over a graph full of vectors they may not see.
        let elsewhere = Caller::new(Scope::tenant("bench").with_workspace("acme").with_repository("elsewhere"), "bench");
        let nowhere = Caller::new(Scope::tenant("bench").with_workspace("acme").with_repository("nowhere"), "bench");
        for i in 0..100 {
            memory.memorize(&elsewhere, MemorizeRequest::new(sentence(n + i))).expect("memorize");
        }
        for (label, who, finds) in [("a repository of 100", &elsewhere, true), ("an empty repository", &nowhere, false)] {
            let mut confined: Vec<Duration> = Vec::new();
            for round in 0..25 {
                for q in QUERIES {
                    let request = RecallRequest { record: false, ..RecallRequest::new(format!("{q} {round}")) };
                    let t = Instant::now();
                    let outcome = memory.recall(who, request).expect("recall");
                    confined.push(t.elapsed());
                    assert!(finds || outcome.atoms.is_empty(), "an empty repository finds nothing");
                }
            }
            confined.sort();
            println!(
                "recall at {n:>6} atoms from {label}, query embedding excluded: p50={:.3} ms p95={:.3} ms",
                percentile_ms(&confined, 0.5),
                percentile_ms(&confined, 0.95)
            );
        }
        let stats = memory.stats(&caller).expect("stats");
        println!(
            "store at {n:>6} atoms: rss={:.0} MiB, keyword={}, semantic={}, edges={}",
            rss_mib(),
            stats.indexes.keyword,
            stats.indexes.semantic,
            stats.edges
        );
    }
}
