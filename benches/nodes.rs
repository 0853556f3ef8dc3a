//! Write throughput of `hmg serve` nodes, the way a deployment runs them:
//! real server processes, writers posting GraphQL `memorize` over HTTP.
//!
//! Scenarios, each on fresh stores (a throwaway Virtuoso from
//! `scripts/virtuoso.sh` for the remote ones), same writers and duration:
//! - embedded, 1 node, 1 tenant (the reference);
//! - Virtuoso, 1 node, 1 tenant;
//! - Virtuoso, 2 nodes (B relays its commits to writer node A), 1 tenant;
//! - Virtuoso, 2 nodes, 2 tenants (each node's writers in their own tenant).
//!
//! Reports acknowledged writes per second, refusals (503 after the bounded
//! retries), and the p50/p95 of acknowledged writes, with ratios against
//! the one-node Virtuoso figure. No embedding model in the nodes
//! (`HMG_EMBEDDER=none`; HMG_BENCH_EMBEDDER=1 keeps it), so the figures
//! compare the store paths.
//!
//! Run: `cargo bench --bench nodes` (HMG_BENCH_SECONDS per scenario,
//! default 20; HMG_BENCH_WRITERS in all, default 8; HMG_BENCH_EMBEDDED=1
//! runs the embedded scenario only; HMG_BENCH_BIN serves another `hmg`
//! binary, to compare two builds in one sitting).

// A failed unwrap is a failed bench; reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{Virtuoso, percentile_ms};

const NODE_SECRET: &str = "bench-node-secret";

/// One `hmg serve` process, killed on drop.
struct Node {
    child: Child,
    url: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hmg(dir: &Path) -> Command {
    let binary = std::env::var_os("HMG_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_hmg").into());
    let mut command = Command::new(binary);
    command.arg("--store").arg(dir).env("USER", "bench").env_remove("HMG_STORE_URL");
    if std::env::var_os("HMG_BENCH_EMBEDDER").is_none() {
        command.env("HMG_EMBEDDER", "none");
    }
    command
}

/// A bearer token for `tenant`, minted in the node's own directory.
fn token(dir: &Path, tenant: &str) -> String {
    let out = hmg(dir)
        .args(["--tenant", tenant, "token", "create", "--json", "--scope", "memory:read", "--scope", "memory:write"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    answer["token"].as_str().unwrap().to_owned()
}

fn serve(dir: &Path, env: &[(String, String)]) -> Node {
    let mut child = hmg(dir)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("hmg serve announces its address").unwrap();
        if let Some(rest) = line.split("serving ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Node { child, url }
}

/// What the writers of one scenario saw.
#[derive(Default)]
struct Tally {
    acknowledged: Vec<Duration>,
    refused: usize,
    failed: usize,
}

/// `writers` threads, each posting memorize to its (url, token) until the
/// deadline.
fn drive(targets: &[(String, String)], writers: usize, seconds: f64) -> (Tally, f64) {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (url, token) = targets[w % targets.len()].clone();
            let tally = Arc::clone(&tally);
            std::thread::spawn(move || {
                let agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(120)))
                    .build()
                    .new_agent();
                let mut i = 0;
                while Instant::now() < deadline {
                    let content = common::sentence(w * 1_000_000 + i);
                    i += 1;
                    let body = serde_json::json!({
                        "query": "mutation($c: String!) { memorize(content: $c, source: \"user\") { effect atomId } }",
                        "variables": { "c": content },
                    });
                    let t = Instant::now();
                    let answer = agent
                        .post(format!("{url}/graphql"))
                        .header("Authorization", &format!("Bearer {token}"))
                        .content_type("application/json")
                        .send(body.to_string().as_bytes())
                        .map(|mut r| (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()));
                    let elapsed = t.elapsed();
                    let mut tally = tally.lock().unwrap();
                    match answer {
                        Ok((200, text)) if text.contains("\"atomId\":\"") => tally.acknowledged.push(elapsed),
                        Ok((status, text)) if status == 503 || text.contains("UNAVAILABLE") => tally.refused += 1,
                        Ok((status, text)) => {
                            if tally.failed < 3 {
                                eprintln!("  unexpected answer {status}: {}", &text[..text.len().min(300)]);
                            }
                            tally.failed += 1;
                        }
                        Err(error) => {
                            eprintln!("  request failed: {error}");
                            tally.failed += 1;
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let tally = Arc::try_unwrap(tally).ok().unwrap().into_inner().unwrap();
    (tally, elapsed)
}

struct Row {
    name: &'static str,
    per_s: f64,
    p50: f64,
    p95: f64,
    refused: usize,
    failed: usize,
}

#[derive(Clone, Copy)]
enum Shape {
    Embedded,
    OneNode,
    TwoNodesOneTenant,
    TwoNodesTwoTenants,
}

fn scenario(name: &'static str, shape: Shape, writers: usize, seconds: f64) -> Row {
    eprintln!("{name}: {writers} writers for {seconds} s");
    let tmp = tempfile::tempdir().unwrap();
    let (dir_a, dir_b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let virtuoso = match shape {
        Shape::Embedded => None,
        _ => Some(Virtuoso::start(&tmp.path().join("virtuoso"))),
    };
    let store_env = virtuoso.as_ref().map(Virtuoso::env).unwrap_or_default();
    let mut nodes = Vec::new();
    let targets = match shape {
        Shape::Embedded | Shape::OneNode => {
            let token = token(&dir_a, "team");
            nodes.push(serve(&dir_a, &store_env));
            vec![(nodes[0].url.clone(), token)]
        }
        Shape::TwoNodesOneTenant | Shape::TwoNodesTwoTenants => {
            let second_tenant = if matches!(shape, Shape::TwoNodesOneTenant) { "team" } else { "other-team" };
            let (token_a, token_b) = (token(&dir_a, "team"), token(&dir_b, second_tenant));
            let mut env_a = store_env.clone();
            env_a.push(("HMG_NODE_SECRET".to_owned(), NODE_SECRET.to_owned()));
            nodes.push(serve(&dir_a, &env_a));
            let mut env_b = env_a.clone();
            env_b.push(("HMG_STORE_WRITER".to_owned(), nodes[0].url.clone()));
            nodes.push(serve(&dir_b, &env_b));
            vec![(nodes[0].url.clone(), token_a), (nodes[1].url.clone(), token_b)]
        }
    };
    let (mut tally, elapsed) = drive(&targets, writers, seconds);
    drop(nodes);
    drop(virtuoso);
    tally.acknowledged.sort();
    Row {
        name,
        per_s: tally.acknowledged.len() as f64 / elapsed,
        p50: percentile_ms(&tally.acknowledged, 0.50),
        p95: percentile_ms(&tally.acknowledged, 0.95),
        refused: tally.refused,
        failed: tally.failed,
    }
}

fn main() {
    let seconds: f64 = std::env::var("HMG_BENCH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20.0);
    let writers: usize = std::env::var("HMG_BENCH_WRITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let mut rows = vec![scenario("embedded, 1 node, 1 tenant", Shape::Embedded, writers, seconds)];
    if std::env::var_os("HMG_BENCH_EMBEDDED").is_none() {
        rows.push(scenario("virtuoso, 1 node, 1 tenant", Shape::OneNode, writers, seconds));
        rows.push(scenario("virtuoso, 2 nodes, 1 tenant", Shape::TwoNodesOneTenant, writers, seconds));
        rows.push(scenario("virtuoso, 2 nodes, 2 tenants", Shape::TwoNodesTwoTenants, writers, seconds));
    }
    // The one-node Virtuoso figure, or the embedded one when it ran alone.
    let reference = rows.get(1).unwrap_or(&rows[0]).per_s.max(f64::MIN_POSITIVE);
    println!(
        "write throughput, {writers} writers posting GraphQL memorize for {seconds} s per scenario (no embedding model unless HMG_BENCH_EMBEDDER=1)"
    );
    println!("{:<30} {:>10} {:>8} {:>9} {:>9} {:>8} {:>7}", "", "writes/s", "vs 1node", "p50 ms", "p95 ms", "refused", "failed");
    for row in &rows {
        println!(
            "{:<30} {:>10.1} {:>7.2}x {:>9.1} {:>9.1} {:>8} {:>7}",
            row.name,
            row.per_s,
            row.per_s / reference,
            row.p50,
            row.p95,
            row.refused,
            row.failed
        );
    }
}
