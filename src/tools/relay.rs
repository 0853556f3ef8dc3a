//! Sharing one store between processes. RocksDB lets one process open a
//! store; hosts start one `hmg mcp` per session (and hooks run beside them),
//! so the process that holds the store also serves a Unix socket next to it,
//! and every other process sends its tool calls there.
//!
//! **Invariants:**
//! - At most one process has the store open; it alone binds the socket
//!   (a stale socket file is replaced only while holding the store's lock).
//! - A guest whose owner went away takes the store over on its next call;
//!   no call is lost in between (it is retried until a deadline).
//! - The caller (scope and actor) travels with every relayed call: the owner
//!   acts in the guest's resolved scope, never in its own.
//! - Only the OS user can connect (the socket is created mode 0600).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest;

use crate::memory::{Caller, Memory, MemoryError, MemoryOptions};
use crate::scope::Scope;
use crate::tools::{ToolCall, ToolError};

/// How long a call waits for the store to become available.
const TAKEOVER_DEADLINE: Duration = Duration::from_secs(20);
/// Largest relayed request line.
const MAX_LINE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Request {
    tool: String,
    arguments: Value,
    scope: WireScope,
    actor: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireScope {
    tenant_id: String,
    workspace: Option<String>,
    repository: Option<String>,
    branch: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Response {
    Ok(Value),
    Error(ToolError),
}

struct Owner {
    memory: Arc<Memory>,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    listener: Option<std::thread::JoinHandle<()>>,
}

/// How long closing waits for relayed calls still running.
const CLOSE_DEADLINE: Duration = Duration::from_secs(10);

impl Drop for Owner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag, then remove the socket
        // before the store's lock is released (when `memory` drops).
        let _ = UnixStream::connect(&self.socket);
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        // Relayed calls still running hold the store: let them finish, so
        // the store closes here, on this thread, and never under a process
        // that is already exiting (that raced RocksDB's teardown and killed
        // `hmg` with a signal about one run in thirty).
        let started = Instant::now();
        while Arc::strong_count(&self.memory) > 1 && started.elapsed() < CLOSE_DEADLINE {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(error) = self.memory.flush() {
            tracing::warn!(%error, "flushing the store on exit failed");
        }
    }
}

/// A store opened by this process or reached through the process that has it.
pub(crate) struct SharedMemory {
    dir: PathBuf,
    options: MemoryOptions,
    owner: Mutex<Option<Owner>>,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory").field("dir", &self.dir).field("owner", &self.is_owner()).finish()
    }
}

/// The socket of the store in `dir`: inside it, or in the temporary
/// directory when that path would exceed the platform's limit.
pub(crate) fn socket_path(dir: &Path) -> PathBuf {
    let inside = dir.join("hmg.sock");
    if inside.as_os_str().len() < 100 {
        return inside;
    }
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let digest = hex::encode(sha2::Sha256::digest(canonical.as_os_str().as_encoded_bytes()));
    std::env::temp_dir().join(format!("hmg-{}.sock", &digest[..16]))
}

fn is_lock_error(error: &MemoryError) -> bool {
    matches!(error, MemoryError::Store(crate::store::StoreError::Locked { .. } | crate::store::StoreError::NodeLocked { .. }))
}

fn io_error(path: &Path, source: std::io::Error) -> MemoryError {
    MemoryError::Store(crate::store::StoreError::Io { path: path.to_path_buf(), source })
}

impl SharedMemory {
    /// Opens the store in `dir`, or joins the process that has it open.
    pub(crate) fn open(dir: &Path, options: MemoryOptions) -> Result<SharedMemory, MemoryError> {
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let shared = SharedMemory { dir: dir.to_path_buf(), options, owner: Mutex::new(None) };
        if UnixStream::connect(socket_path(dir)).is_err() {
            match shared.take_over() {
                Ok(()) => {}
                Err(error) if is_lock_error(&error) => tracing::info!("the store is open in another process; relaying through it"),
                Err(error) => return Err(error),
            }
        }
        Ok(shared)
    }

    /// The store directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this process has the store open.
    pub(crate) fn is_owner(&self) -> bool {
        self.owner.lock().map(|o| o.is_some()).unwrap_or(false)
    }

    /// The local facade, when this process owns the store.
    pub(crate) fn local(&self) -> Option<Arc<Memory>> {
        self.owner.lock().ok().and_then(|o| o.as_ref().map(|o| Arc::clone(&o.memory)))
    }

    /// Opens the store and serves the socket.
    fn take_over(&self) -> Result<(), MemoryError> {
        let mut owner = self.owner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if owner.is_some() {
            return Ok(());
        }
        let memory = Arc::new(Memory::open_with(Some(&self.dir), self.options.clone())?);
        let socket = socket_path(&self.dir);
        // We hold the store's lock, so any socket file left is stale.
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).map_err(|e| io_error(&socket, e))?;
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
        let stop = Arc::new(AtomicBool::new(false));
        let serving = Arc::clone(&memory);
        let stopping = Arc::clone(&stop);
        let listener = std::thread::Builder::new()
            .name("hmg-relay".to_owned())
            .spawn(move || serve(listener, serving, stopping))
            .map_err(|e| io_error(&socket, e))?;
        tracing::info!(socket = %socket.display(), "store opened; serving other processes");
        *owner = Some(Owner { memory, socket, stop, listener: Some(listener) });
        Ok(())
    }

    /// Runs `call` for `caller`: here when this process owns the store,
    /// otherwise through the owner, taking over if the owner is gone.
    pub(crate) fn call(&self, call: ToolCall, caller: &Caller) -> Result<Value, ToolError> {
        let deadline = Instant::now() + TAKEOVER_DEADLINE;
        loop {
            if let Some(memory) = self.local() {
                let answer = call.run(&memory, caller);
                commit_usage_after(&memory);
                return answer;
            }
            match relay(&socket_path(&self.dir), &call, caller) {
                Ok(response) => return response,
                Err(error) => tracing::debug!(%error, "relay unavailable; trying to open the store"),
            }
            match self.take_over() {
                Ok(()) => continue,
                Err(error) if is_lock_error(&error) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Err(error) => return Err(ToolError::Internal(format!("the store is not available: {error}"))),
            }
        }
    }

    /// [`SharedMemory::call`] for calls that arrived together: in this
    /// process, through [`ToolCall::run_burst`]; relayed, one by one.
    pub(crate) fn call_burst(&self, calls: Vec<(ToolCall, Caller)>) -> Vec<Result<Value, ToolError>> {
        if let Some(memory) = self.local() {
            let answers = ToolCall::run_burst(&memory, calls);
            commit_usage_after(&memory);
            return answers;
        }
        if calls.len() > 1
            && let Ok(answers) = relay_burst(&socket_path(&self.dir), &calls)
            && answers.len() == calls.len()
        {
            return answers;
        }
        // No owner to take it (or an older one): one by one, which takes the
        // store over if need be. Memorize calls are idempotent, so a burst
        // the owner ran before its answer was lost is answered again the same.
        calls.into_iter().map(|(call, caller)| self.call(call, &caller)).collect()
    }

    /// Flushes the store when this process owns it.
    pub(crate) fn flush(&self) -> Result<(), MemoryError> {
        match self.local() {
            Some(memory) => memory.flush(),
            None => Ok(()),
        }
    }
}

/// Sends one call to the owner. An I/O error means no owner answered.
impl Request {
    fn new(call: &ToolCall, caller: &Caller) -> Request {
        Request {
            tool: call.name().to_owned(),
            arguments: call.arguments(),
            scope: WireScope {
                tenant_id: caller.scope.tenant_id.clone(),
                workspace: caller.scope.workspace.clone(),
                repository: caller.scope.repository.clone(),
                branch: caller.scope.branch.clone(),
            },
            actor: caller.actor.clone(),
        }
    }

    /// The call and the caller it was sent for.
    fn call(self) -> (Result<ToolCall, ToolError>, Caller) {
        let scope = Scope {
            tenant_id: self.scope.tenant_id,
            workspace: self.scope.workspace,
            repository: self.scope.repository,
            branch: self.scope.branch,
        };
        (ToolCall::decode(&self.tool, self.arguments), Caller::new(scope, self.actor))
    }
}

impl From<Result<Value, ToolError>> for Response {
    fn from(answer: Result<Value, ToolError>) -> Response {
        match answer {
            Ok(value) => Response::Ok(value),
            Err(error) => Response::Error(error),
        }
    }
}

impl From<Response> for Result<Value, ToolError> {
    fn from(response: Response) -> Result<Value, ToolError> {
        match response {
            Response::Ok(value) => Ok(value),
            Response::Error(error) => Err(error),
        }
    }
}

/// Sends one JSON line to the owner and reads its one-line answer.
fn exchange<T: serde::de::DeserializeOwned>(socket: &Path, request: &impl Serialize) -> std::io::Result<T> {
    let mut stream = UnixStream::connect(socket)?;
    let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    if reader.read_line(&mut answer)? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the store's owner closed the connection"));
    }
    serde_json::from_str(&answer).map_err(std::io::Error::other)
}

fn relay(socket: &Path, call: &ToolCall, caller: &Caller) -> std::io::Result<Result<Value, ToolError>> {
    exchange::<Response>(socket, &Request::new(call, caller)).map(Into::into)
}

/// Relays calls that arrived together as one line (a JSON array), which
/// the owner runs together ([`ToolCall::run_burst`]); answers in order.
fn relay_burst(socket: &Path, calls: &[(ToolCall, Caller)]) -> std::io::Result<Vec<Result<Value, ToolError>>> {
    let requests: Vec<Request> = calls.iter().map(|(call, caller)| Request::new(call, caller)).collect();
    Ok(exchange::<Vec<Response>>(socket, &requests)?.into_iter().map(Into::into).collect())
}

fn serve(listener: UnixListener, memory: Arc<Memory>, stop: Arc<AtomicBool>) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let memory = Arc::clone(&memory);
        let spawned = std::thread::Builder::new().name("hmg-relay-call".to_owned()).spawn(move || {
            if let Err(error) = answer(stream, &memory) {
                tracing::debug!(%error, "relay connection ended");
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot serve a relayed call");
        }
    }
}

fn answer(stream: UnixStream, memory: &Arc<Memory>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(std::io::Read::take(stream.try_clone()?, MAX_LINE_BYTES));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let malformed = |error: serde_json::Error| ToolError::Invalid { field: None, message: format!("malformed relay request: {error}") };
    let mut out = if line.trim_start().starts_with('[') {
        // Calls that arrived together at the guest: run together here.
        let responses: Vec<Response> = match serde_json::from_str::<Vec<Request>>(&line) {
            Err(error) => vec![Response::Error(malformed(error))],
            Ok(requests) => {
                let _span = tracing::info_span!("relayed_burst", calls = requests.len()).entered();
                let mut answers: Vec<Option<Result<Value, ToolError>>> = Vec::with_capacity(requests.len());
                let mut runnable = Vec::new();
                let mut slots = Vec::new();
                for (at, request) in requests.into_iter().enumerate() {
                    match request.call() {
                        (Ok(call), caller) => {
                            runnable.push((call, caller));
                            slots.push(at);
                            answers.push(None);
                        }
                        (Err(error), _) => answers.push(Some(Err(error))),
                    }
                }
                for (at, answer) in slots.into_iter().zip(ToolCall::run_burst(memory, runnable)) {
                    answers[at] = Some(answer);
                }
                answers.into_iter().flatten().map(Response::from).collect()
            }
        };
        serde_json::to_vec(&responses).map_err(std::io::Error::other)?
    } else {
        let response = match serde_json::from_str::<Request>(&line) {
            Err(error) => Response::Error(malformed(error)),
            Ok(request) => {
                let _span = tracing::info_span!("relayed", tool = %request.tool).entered();
                let (call, caller) = request.call();
                call.and_then(|call| call.run(memory, &caller)).into()
            }
        };
        serde_json::to_vec(&response).map_err(std::io::Error::other)?
    };
    out.push(b'\n');
    let mut stream = stream;
    stream.write_all(&out)?;
    stream.flush()?;
    commit_usage_after(memory);
    Ok(())
}

/// Commits due recall usage (a deferring server's memory, after an answer;
/// [`MemoryOptions::defer_usage`]) on a thread of its own at the lowest CPU
/// priority, so neither this answer nor the next ones wait for it: a batch
/// of 256 stamps is 10–20 ms of CPU, and committed beside the next recalls
/// it was their 95th percentile at 10k memories over `hmg mcp` (one recall
/// in 27 slowed by 3–6 ms). Stamps a starved commit has not taken stay
/// pending, and a recall that finds four batches pending commits them
/// itself. A failure is logged, as a recall logs its own.
pub(crate) fn commit_usage_after(memory: &Arc<Memory>) {
    if !memory.usage_due() {
        return;
    }
    let memory = Arc::clone(memory);
    let spawned = std::thread::Builder::new().name("hmg-usage".to_owned()).spawn(move || {
        lowest_priority();
        if let Err(error) = memory.flush_usage_if_due() {
            tracing::warn!(%error, "could not record recall usage");
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "no thread to record recall usage on; it is recorded by a later recall");
    }
}

/// Puts the calling thread at the lowest CPU priority: on Linux
/// `SCHED_IDLE`, which runs it only on a core no other thread wants, and
/// which an unprivileged thread cannot leave (so only threads that end
/// after their one job call this). Elsewhere, nothing.
#[allow(unsafe_code)]
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is only read.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower the usage thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::commit_usage_after;
    use crate::{Caller, EmbedderChoice, MemorizeRequest, Memory, MemoryOptions, RecallRequest, Scope};

    /// A server's memory leaves due stamps to it; after an answer they are
    /// committed on a thread of their own, once, and all of them.
    #[test]
    fn due_usage_is_committed_after_an_answer_in_the_background() {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = MemoryOptions::default().with_embedder(EmbedderChoice::Disabled).with_defer_usage(true);
        let memory = Arc::new(Memory::open_with(Some(dir.path()), options).expect("store opens"));
        let caller = Caller::new(Scope::tenant("alice").with_workspace("acme").with_repository("api"), "test");
        // 27 groups of ten sharing a rare word: 270 atoms stamped, past a
        // batch of 256.
        let requests = (0..270).map(|i| MemorizeRequest::new(format!("Deploy step {i} of pipeline zq{:03}x waits", i / 10))).collect();
        memory.memorize_many(&caller, requests).expect("memorize");
        for g in 0..27 {
            let found = memory.recall(&caller, RecallRequest::new(format!("zq{g:03}x"))).expect("recall");
            assert_eq!(found.atoms.len(), 10);
        }
        assert!(memory.usage_due());
        let before = memory.snapshot_version().expect("version");
        commit_usage_after(&memory);
        commit_usage_after(&memory);
        let deadline = Instant::now() + Duration::from_secs(60);
        while memory.snapshot_version().expect("version") == before {
            assert!(Instant::now() < deadline, "the stamps were not committed");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(memory.snapshot_version().expect("version"), before + 1, "one commit, not one per call");
        assert!(!memory.usage_due());
    }

    /// What the owner answers to one line on its socket.
    fn owner_answers(memory: &Arc<Memory>, line: &str) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let (mut guest, owner) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        guest.write_all(format!("{line}\n").as_bytes()).expect("write");
        super::answer(owner, memory).expect("answered");
        let mut reply = String::new();
        std::io::BufReader::new(guest).read_line(&mut reply).expect("read");
        serde_json::from_str(&reply).expect("a JSON answer")
    }

    /// A burst relayed as one line is answered call by call, in order: a
    /// call that cannot be decoded fails alone; a malformed line is one error.
    #[test]
    fn a_relayed_burst_is_answered_call_by_call() {
        let memory = Arc::new(Memory::open_in_memory().expect("store"));
        let request = |tool: &str, arguments: serde_json::Value| {
            serde_json::json!({"tool": tool, "arguments": arguments, "actor": "guest",
                "scope": {"tenant_id": "alice", "workspace": "acme", "repository": "api", "branch": null}})
        };
        let burst = serde_json::json!([
            request("memory_memorize", serde_json::json!({"content": "Relayed memory one"})),
            request("memory_memorize", serde_json::json!({"contents": "a typo"})),
            request("memory_teleport", serde_json::json!({})),
            request("memory_memorize", serde_json::json!({"content": "两条记忆中的第二条"})),
            request("memory_memorize", serde_json::json!({"content": "Relayed memory one"})),
        ]);
        let answers = owner_answers(&memory, &burst.to_string());
        let answers = answers.as_array().expect("an array for an array");
        assert_eq!(answers.len(), 5, "{answers:?}");
        assert_eq!(answers[0]["ok"]["effect"], "applied", "{answers:?}");
        assert!(answers[1]["error"].to_string().contains("contents"), "{answers:?}");
        assert!(answers[2]["error"].to_string().contains("memory_teleport"), "{answers:?}");
        assert_eq!(answers[3]["ok"]["effect"], "applied", "{answers:?}");
        assert_eq!(answers[4]["ok"]["effect"], "no_op", "{answers:?}");
        assert_eq!(answers[4]["ok"]["deduped_with"], answers[0]["ok"]["atom_id"]);
        assert_eq!(owner_answers(&memory, "[]"), serde_json::json!([]));
        let malformed = owner_answers(&memory, "[{\"tool\": 5}");
        assert!(malformed.as_array().is_some_and(|a| a.len() == 1 && a[0]["error"].to_string().contains("malformed")), "{malformed}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    #[allow(unsafe_code)]
    fn the_usage_thread_runs_at_idle_priority() {
        let policy = std::thread::spawn(|| {
            super::lowest_priority();
            // SAFETY: reads the calling thread's policy.
            unsafe { libc::sched_getscheduler(0) }
        })
        .join()
        .expect("thread");
        assert_eq!(policy, libc::SCHED_IDLE);
        // SAFETY: as above, on this thread, which was left alone.
        assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
    }
}
