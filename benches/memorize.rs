//! Memorize throughput and latency on an on-disk store, up to 10k atoms
//! (override with HMG_BENCH_ATOMS). Synthetic multilingual atoms: English,
//! Chinese and Japanese, with entities, constraints and guesses.
//!
//! Run: `cargo bench --bench memorize`

use std::time::{Duration, Instant};

use hmg::{Caller, Effect, MemorizeRequest, Memory, Scope};

const SUBJECTS: &[&str] = &["PostgreSQL", "Redis", "tokio", "the billing service", "src/login.py", "Kubernetes", "老李", "田中さん"];
const EN: &[&str] = &[
    "{s} must be restarted after config change #{i}",
    "{s} probably caused incident #{i}",
    "We moved {s} to region eu-{i}",
    "If {s} times out, retry request #{i} twice",
];
const ZH: &[&str] = &["{s} 第{i}号配置变更后必须重启", "第{i}次事故可能是{s}导致的", "我们把{s}迁移到了第{i}个集群"];
const JA: &[&str] = &["{s} は設定変更 {i} の後に必ず再起動する", "障害 {i} の原因はたぶん {s} だ", "{s} をクラスタ {i} に移行した"];

fn sentence(i: usize) -> String {
    let subject = SUBJECTS[i % SUBJECTS.len()];
    let templates = match i % 3 {
        0 => EN,
        1 => ZH,
        _ => JA,
    };
    templates[(i / 3) % templates.len()].replace("{s}", subject).replace("{i}", &i.to_string())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn report(label: &str, samples: &mut Vec<Duration>) {
    samples.sort();
    println!(
        "{label:<28} n={:<6} p50={:>8.3} ms  p95={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        samples.len(),
        percentile(samples, 0.50).as_secs_f64() * 1e3,
        percentile(samples, 0.95).as_secs_f64() * 1e3,
        percentile(samples, 0.99).as_secs_f64() * 1e3,
        samples.last().map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0),
    );
}

fn main() {
    let n: usize = std::env::var("HMG_BENCH_ATOMS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let memory = Memory::open(dir.path()).expect("store opens");
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
}
