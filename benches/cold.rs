//! A cold `hmg recall` from the command line, the path a hook or a script
//! takes when no server is running: a new process opens the store, its
//! indexes and the models, answers one short query and exits. Timed at the
//! caller, process start to exit, on a store of 10k memories (English,
//! Chinese and Japanese) imported once by `hmg import`.
//!
//! Each query is new (a round number appended), so no cache answers it.
//! Also timed: the same with `HMG_EMBEDDER=none` (store, keyword and graph
//! only: the floor under the models) and `hmg stats` (a command that loads
//! no model).
//!
//! Run: `cargo bench --features e5 --bench cold` (`HMG_BENCH_MEMORIES`,
//! default 10000; `HMG_BENCH_ROUNDS`, default 20; `HMG_BENCH_STORE` reuses
//! a store directory, imported on first use; `HMG_BENCH_OLD_BIN` times
//! another `hmg` too, each round alternating which of the two goes first,
//! so both see the same machine).

// A failed unwrap is a failed bench; reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{percentile_ms, sentence};

const QUERIES: &[&str] = &[
    "what did we decide about the billing retries",
    "老李的猫叫什么名字？",
    "田中さんの好きな食べ物は何ですか",
    "PostgreSQL restart after config change",
];

fn number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(default)
}

fn hmg(store: &Path) -> Command {
    hmg_of(Path::new(env!("CARGO_BIN_EXE_hmg")), store)
}

fn hmg_of(binary: &Path, store: &Path) -> Command {
    let mut command = Command::new(binary);
    command.arg("--store").arg(store).env("USER", "bench").env("HMG_LOG", "error").env_remove("HMG_STORE_URL");
    command
}

/// Imports `n` memories into `store` unless it already holds them.
fn prepare(store: &Path, n: usize) {
    let ready = store.join(format!("bench-ready-{n}"));
    if ready.exists() {
        return;
    }
    std::fs::create_dir_all(store).unwrap();
    let started = Instant::now();
    let mut child = hmg(store).args(["import", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for i in 0..n {
            writeln!(stdin, "{}", serde_json::json!({ "content": sentence(i) })).unwrap();
        }
    }
    assert!(child.wait().unwrap().success(), "hmg import failed");
    println!("imported {n} memories in {:.1} s", started.elapsed().as_secs_f64());
    std::fs::write(ready, b"").unwrap();
}

fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "  {label:<40} n={:<3} p25={:>6.0} ms  p50={:>6.0} ms  p75={:>6.0} ms",
        samples.len(),
        percentile_ms(&samples, 0.25),
        percentile_ms(&samples, 0.5),
        percentile_ms(&samples, 0.75)
    );
}

/// Builds round `i`'s command for a binary.
type MakeCommand<'a> = dyn Fn(&Path, usize) -> Command + 'a;

/// Runs `command` to its end; how long it took.
fn run(mut command: Command) -> Duration {
    let started = Instant::now();
    let out = command.stdout(Stdio::null()).stderr(Stdio::piped()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    started.elapsed()
}

/// Times `rounds` runs of each binary (after one untimed run each, which
/// warms the page cache), alternating which goes first.
fn time(binaries: &[&Path], rounds: usize, make: impl Fn(&Path, usize) -> Command) -> Vec<Vec<Duration>> {
    for binary in binaries {
        run(make(binary, 0));
    }
    let mut samples = vec![Vec::with_capacity(rounds); binaries.len()];
    for i in 1..=rounds {
        let order: Vec<usize> = if i % 2 == 0 { (0..binaries.len()).collect() } else { (0..binaries.len()).rev().collect() };
        for b in order {
            samples[b].push(run(make(binaries[b], i)));
        }
    }
    samples
}

fn main() {
    let n = number("HMG_BENCH_MEMORIES", 10_000);
    let rounds = number("HMG_BENCH_ROUNDS", 20);
    let kept = std::env::var_os("HMG_BENCH_STORE").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let store = kept.unwrap_or_else(|| tmp.path().join("store"));
    prepare(&store, n);
    let old = std::env::var_os("HMG_BENCH_OLD_BIN").map(std::path::PathBuf::from);
    let new = Path::new(env!("CARGO_BIN_EXE_hmg"));
    let binaries: Vec<(&str, &Path)> = match &old {
        Some(old) => vec![("old ", old.as_path()), ("new ", new)],
        None => vec![("", new)],
    };
    let paths: Vec<&Path> = binaries.iter().map(|b| b.1).collect();
    println!("cold CLI at {n} memories ({rounds} rounds each, process start to exit)");
    let query = |i: usize| format!("{} {i}", QUERIES[i % QUERIES.len()]);
    let cases: [(&str, &MakeCommand); 3] = [
        ("hmg recall (both models)", &|binary, i| {
            let mut c = hmg_of(binary, &store);
            c.args(["recall", &query(i)]);
            c
        }),
        ("hmg recall, HMG_EMBEDDER=none", &|binary, i| {
            let mut c = hmg_of(binary, &store);
            c.env("HMG_EMBEDDER", "none").args(["recall", &query(i)]);
            c
        }),
        ("hmg stats", &|binary, _| {
            let mut c = hmg_of(binary, &store);
            c.arg("stats");
            c
        }),
    ];
    for (label, make) in cases {
        for ((name, _), samples) in binaries.iter().zip(time(&paths, rounds, make)) {
            report(&format!("{name}{label}"), samples);
        }
    }
}
