//! The one place surfaces run blocking facade work (store reads and writes,
//! recall, embedding) from async handlers: a bounded pool with a deadline.
//!
//! **Invariants:**
//! - At most [`permits`] facade calls run at once across every surface of a
//!   process (MCP, GraphQL, REST, SPARQL snapshots); a call waits at most
//!   until its deadline for a permit, then gets [`Refused::Busy`]. So abuse
//!   can queue requests but never multiply threads: tokio's own blocking
//!   pool is capped too (`hmg serve` builds its runtime with
//!   [`MAX_BLOCKING_THREADS`]).
//! - The work keeps the caller's tracing span.
//! - A caller that stops waiting (deadline, client gone) does not stop the
//!   work, which keeps its permit until it ends: facade calls are short and
//!   atomic, and an acknowledged write is never half done.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Semaphore;

/// Cap of tokio's blocking thread pool in `hmg serve` and `hmg mcp`.
pub(crate) const MAX_BLOCKING_THREADS: usize = 32;
/// How long an idle blocking thread lives (tokio's default is 10 s).
pub(crate) const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(2);
/// Default deadline of one facade call made for a request.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// Why a call did not run to an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// Every permit stayed taken until the deadline.
    #[error("the server is busy: every worker stayed taken for {0} s; retry shortly")]
    Busy(u64),
    /// The work ran past the deadline (it finishes in the background).
    #[error("the request ran longer than {0} s; it was abandoned (a write still completes or not as a whole)")]
    Timeout(u64),
    /// The work panicked.
    #[error("internal error: the request failed unexpectedly; nothing was acknowledged")]
    Panicked,
}

impl crate::fault::Classified for Refused {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            Refused::Busy(_) => crate::fault::Fault::Busy,
            Refused::Timeout(_) => crate::fault::Fault::Unavailable,
            Refused::Panicked => crate::fault::Fault::Internal,
        }
    }
}

/// How many facade calls may run at once: two per core, at least four.
pub(crate) fn permits() -> usize {
    std::thread::available_parallelism().map_or(4, |n| (n.get() * 2).max(4))
}

fn semaphore() -> &'static Arc<Semaphore> {
    static PERMITS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    PERMITS.get_or_init(|| Arc::new(Semaphore::new(permits())))
}

/// Runs `work` on a blocking thread once a permit is free, within
/// `deadline` (waiting included), in the current tracing span.
pub(crate) async fn run<T: Send + 'static>(deadline: Duration, work: impl FnOnce() -> T + Send + 'static) -> Result<T, Refused> {
    let started = tokio::time::Instant::now();
    let permit = match tokio::time::timeout(deadline, Arc::clone(semaphore()).acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        _ => return Err(Refused::Busy(deadline.as_secs())),
    };
    let span = tracing::Span::current();
    let handle = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        span.in_scope(work)
    });
    let left = deadline.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, handle).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(join)) => {
            tracing::error!(error = %join, "blocking work panicked");
            Err(Refused::Panicked)
        }
        Err(_) => {
            tracing::warn!(deadline_s = deadline.as_secs(), "request abandoned at its deadline");
            Err(Refused::Timeout(deadline.as_secs()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_past_its_deadline_is_abandoned_and_panics_are_contained() {
        assert_eq!(run(Duration::from_secs(5), || 7).await, Ok(7));
        let slow = run(Duration::from_millis(100), || std::thread::sleep(Duration::from_millis(600))).await;
        assert_eq!(slow, Err(Refused::Timeout(0)));
        #[allow(clippy::panic)]
        let panicked = run(Duration::from_secs(5), || -> u8 { panic!("boom") }).await;
        assert_eq!(panicked, Err(Refused::Panicked));
    }
}
