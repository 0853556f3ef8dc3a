//! Group commit of `memory_memorize` calls, for every surface of a process
//! that takes them one request at a time (MCP over stdio and HTTP,
//! GraphQL's `memorize`).

use std::sync::Arc;

use serde_json::Value;

use crate::memory::Caller;
use crate::tools::ToolCall;
use crate::tools::relay::SharedMemory;

/// Group commit of `memory_memorize` calls (MCP's, and GraphQL's
/// `memorize` in `hmg serve`: one queue per server). A call that finds nobody
/// writing starts a writer with the calls queued so far (its own at least);
/// the calls that arrive meanwhile wait here, costing no thread and no
/// permit of [`crate::surface::blocking`], and the next writer takes them
/// all: one facade call, one embedding batch per model, one transaction per
/// caller ([`ToolCall::run_burst`]). Pipelined calls (an agent's parallel
/// tool calls, a client's burst) are thus written together; a lone call is
/// written alone at once, as before.
///
/// **Invariants:** each call gets the answer it would have had alone (in
/// arrival order); its answer comes after its memory is committed; the
/// writer runs on its own task, so a client that goes away cannot strand
/// the calls of others; a refusal of the blocking pool (busy, timeout,
/// panic) is every call of that batch's answer.
#[derive(Default)]
pub(crate) struct Burst {
    state: std::sync::Mutex<BurstState>,
}

#[derive(Default)]
struct BurstState {
    queue: Vec<(ToolCall, Caller, tokio::sync::oneshot::Sender<Answer>)>,
    /// A writer task is running.
    writing: bool,
}

/// One call's answer from the blocking pool.
type Answer = Result<Result<Value, crate::tools::ToolError>, crate::surface::blocking::Refused>;

/// The most calls one writer takes.
const BURST_MAX: usize = 256;

impl Burst {
    fn state(&self) -> std::sync::MutexGuard<'_, BurstState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `call` and waits for its answer.
    pub(crate) async fn submit(burst: &Arc<Burst>, shared: &Arc<SharedMemory>, call: ToolCall, caller: Caller) -> Answer {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let start = {
            let mut state = burst.state();
            state.queue.push((call, caller, reply));
            !std::mem::replace(&mut state.writing, true)
        };
        if start {
            tokio::spawn(Burst::write(Arc::clone(burst), Arc::clone(shared)));
        }
        answer.await.unwrap_or(Err(crate::surface::blocking::Refused::Panicked))
    }

    /// Writes batches until the queue is empty.
    async fn write(burst: Arc<Burst>, shared: Arc<SharedMemory>) {
        loop {
            let batch: Vec<_> = {
                let mut state = burst.state();
                if state.queue.is_empty() {
                    state.writing = false;
                    return;
                }
                let take = state.queue.len().min(BURST_MAX);
                state.queue.drain(..take).collect()
            };
            let (calls, replies): (Vec<(ToolCall, Caller)>, Vec<_>) =
                batch.into_iter().map(|(call, caller, reply)| ((call, caller), reply)).unzip();
            let span = tracing::info_span!("memorize_burst", calls = calls.len());
            let shared = Arc::clone(&shared);
            let answers = tracing::Instrument::instrument(
                crate::surface::blocking::run(crate::surface::blocking::DEFAULT_DEADLINE, move || shared.call_burst(calls)),
                span,
            )
            .await;
            match answers {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(refused) => {
                    for reply in replies {
                        let _ = reply.send(Err(refused.clone()));
                    }
                }
            }
        }
    }
}
