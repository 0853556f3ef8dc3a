//! The MCP server: the six memory tools over stdio (`hmg mcp`) and
//! streamable HTTP (`/mcp` in `hmg serve`), built on rmcp.
//!
//! **Invariants:**
//! - Tools are adapters: each decodes its arguments ([`crate::tools`]),
//!   resolves the scope here, and runs through [`SharedMemory`]; no tool
//!   logic lives in this module.
//! - A failure the model can fix is a tool result with `isError: true` and a
//!   message naming the field; only malformed protocol traffic becomes a
//!   JSON-RPC error. Tool work runs on blocking threads, so a panic there
//!   becomes an error result, never a crash.
//! - Scope precedence: a hook-injected scope with a valid proof, then
//!   `CLAUDE_PROJECT_DIR`, the server's working directory, the client's
//!   roots (the first that lies in a git repository), else tenant-wide.
//!   Any other scope a model sends is ignored. Over stdio the tenant is the
//!   OS user.

use crate::fault::Classified;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::Value;

use crate::memory::Caller;
use crate::scope::Scope;
use crate::surface::burst::Burst;
use crate::tools::relay::SharedMemory;
use crate::tools::{
    Checked, CorrectArgs, GovernArgs, HandoffArgs, MemorizeArgs, RecallArgs, ReflectArgs, ScopeInput, StatsArgs, ToolCall, ToolError,
};

const MEMORIZE: &str = "Store one long-term memory: a fact, decision, preference or constraint worth keeping across sessions.\n\
- content: one self-contained sentence that makes sense without this conversation (name the project, technology, file or person). Write it in the language the user is using.\n\
- source: `user` when the user said it (more authoritative), `agent` when you concluded it, or a custom name.\n\
No need to recall first: exact duplicates are detected (effect `no_op`, `deduped_with` names the existing atom). If you already saw a memory saying nearly the same thing, update it with memory_correct action `replace` instead of adding a near-duplicate. Secrets (connection strings with passwords, `password=…`, bearer tokens, private keys, API keys) are redacted before anything is stored; still avoid writing secrets in prose. Whether it is a fact, constraint or guess is inferred from the wording. A rejected write (`effect: rejected`) says why. Do not pass `scope`: it is set for you.";

const RECALL: &str = "Search long-term memory. Results are ranked by relevance (score 0–1) from keyword, semantic and graph retrieval together, in any language (English, Chinese, Japanese…).\n\
- query: a noun phrase that keeps the key entities (people, projects, technologies, file names), e.g. `PostgreSQL connection pool settings` — not a chatty question.\n\
- max_results: default 10. include_negated: also return memories marked false (default false).\n\
One recall is usually enough. Use the returned `atom_id` with memory_correct or memory_govern. Do not pass `scope`: it is set for you.";

const CORRECT: &str = "Correct a memory (append-only: the old content stays in the audit chain).\n\
- target_atom: an atom_id from memory_recall. reason: why (recorded in the audit chain).\n\
- action: `negate` (it is false or obsolete; deactivates it; there is no un-negate — if you negated by mistake, replace), `confirm_actual` (now confirmed as fact), `confirm_necessary` (a hard constraint to follow), `demote` (only a possibility), `replace` (new content in `new_content`, required; the old atom stays in the evolution chain).\n\
Only one atom of a chain is in effect: to fix a replacement, replace the newest atom again. A correction aimed at a superseded atom is rejected and names the current one.";

const GOVERN: &str = "Manage a memory's lifecycle.\n\
- target_atom: an atom_id. reason: why (recorded in the audit chain).\n\
- action: `quarantine` (hidden from recall, content kept, undo with `restore`), `seal` (visible to audit only), `tombstone` (logical delete; the content is destroyed), `derive_lesson` (store the redacted lesson in `lesson_content`, required, as a new atom derived from this one; the original is sealed).\n\
If a memory contains leaked sensitive information: derive_lesson when there is a lesson to keep, otherwise seal or tombstone.";

const HANDOFF: &str = "Store a session handoff: the summary of a task for whoever continues it. The next session's start-up brief shows the latest handoffs first.\n\
- summary: what was done, why, how it was verified, risks, next steps (free form).\n\
Call it when a task or milestone is finished or the session is about to end. Use memory_memorize for single facts; a handoff covers a whole task.";

const STATS: &str = "Overview of the store for this scope: atom and edge counts, index coverage (semantic, keyword, temporal, categorical) and the snapshot version, which increases with every write. Mostly for hooks and diagnostics; normal work does not need it.";

const REFLECT: &str = "Bounded maintenance pass over your memories (an operator or maintenance tool, not for ordinary requests): summarize recent episodic memories into reflection records, promote evidence repeated across sessions to a durable fact, expire past-due memories, decay the importance of memories not recalled, archive stale unimportant ones.\n\
Run with dry_run=true first to review the candidates and counts; a real run writes every decision with an audit entry, all or nothing, and lists audit_record_ids. \
Dry runs need memory:read, writes memory:write. Filters (path_filter, owner_filter, bucket, scope, team_id) only narrow your boundary; asking for another owner, team or scope is refused. \
Not a search or delete tool: use memory_recall to find memories and memory_govern to remove one.";

const INSTRUCTIONS: &str = "HMG is long-term memory across sessions. Memorize durable facts, decisions, preferences and constraints as you learn them (one self-contained sentence each, in the user's language); recall with noun phrases before relying on assumptions; correct instead of duplicating; hand off at the end of a task. Scope is resolved for you.";

/// Where scopes come from for one server.
#[derive(Debug, Clone)]
pub(crate) struct ScopeResolver {
    /// The tenant every call acts in.
    pub tenant: String,
    /// Directories to infer the repository from, in order (project
    /// directory, working directory); empty over HTTP.
    pub directories: Vec<PathBuf>,
    /// The key proving hook-injected scopes.
    pub hook_key: Option<Vec<u8>>,
}

impl ScopeResolver {
    /// The resolver of a local (stdio) server: the OS user,
    /// `CLAUDE_PROJECT_DIR`, then the working directory.
    pub(crate) fn local(hook_key: Option<Vec<u8>>) -> ScopeResolver {
        let mut directories = Vec::new();
        if let Some(dir) = std::env::var_os("CLAUDE_PROJECT_DIR").filter(|d| !d.is_empty()) {
            directories.push(PathBuf::from(dir));
        }
        if let Ok(dir) = std::env::current_dir() {
            directories.push(dir);
        }
        ScopeResolver { tenant: crate::scope::os_user(), directories, hook_key }
    }

    /// The scope for a call of `tenant` that carried `injected`, from the
    /// hook's proof or this server's directories; `None` when neither gives
    /// a repository (then the client's roots are consulted).
    pub(crate) fn resolve(&self, tenant: &str, injected: Option<&ScopeInput>) -> Option<Scope> {
        if let (Some(key), Some(input)) = (&self.hook_key, injected)
            && let Some(scope) = crate::surface::hook::verified(key, input)
        {
            return Some(Scope { tenant_id: tenant.to_owned(), ..scope });
        }
        if injected.is_some() {
            tracing::debug!("ignoring a scope without a valid hook proof");
        }
        in_repository(tenant, &self.directories)
    }
}

/// The scope of the first directory inside a git repository.
fn in_repository(tenant: &str, directories: &[PathBuf]) -> Option<Scope> {
    directories.iter().map(|dir| crate::scope::infer_scope(tenant, dir)).find(|scope| scope.repository.is_some())
}

/// Decodes `%XX` escapes of a `file://` URI path.
fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let path = uri.strip_prefix("file://")?;
    let path = path.strip_prefix("localhost").unwrap_or(path);
    let out = crate::text::percent_decode(path.as_bytes(), false);
    Some(PathBuf::from(String::from_utf8(out).ok()?))
}

/// The `hmg` MCP server.
#[derive(Clone)]
pub(crate) struct HmgServer {
    shared: Arc<SharedMemory>,
    /// `memory_memorize` calls waiting to be written together (every
    /// session of this process).
    burst: Arc<Burst>,
    resolver: Arc<ScopeResolver>,
    actor: String,
    roots: Arc<tokio::sync::OnceCell<Vec<PathBuf>>>,
    tool_router: ToolRouter<HmgServer>,
}

impl std::fmt::Debug for HmgServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HmgServer").field("resolver", &self.resolver).field("actor", &self.actor).finish_non_exhaustive()
    }
}

type ToolResult = Result<Json<Value>, String>;

#[tool_router]
impl HmgServer {
    /// A server over `shared`, acting as `actor` in audit entries.
    pub(crate) fn new(shared: Arc<SharedMemory>, resolver: ScopeResolver, actor: impl Into<String>) -> HmgServer {
        HmgServer {
            shared,
            burst: Arc::default(),
            resolver: Arc::new(resolver),
            actor: actor.into(),
            roots: Arc::new(tokio::sync::OnceCell::new()),
            tool_router: HmgServer::tool_router(),
        }
    }

    /// The queue of `memory_memorize` calls this server writes together,
    /// for other surfaces of the same process (GraphQL's `memorize`).
    pub(crate) fn burst(&self) -> Arc<Burst> {
        Arc::clone(&self.burst)
    }

    /// A fresh session of the same server (its own client roots).
    pub(crate) fn session(&self) -> HmgServer {
        HmgServer { roots: Arc::new(tokio::sync::OnceCell::new()), ..self.clone() }
    }

    #[tool(
        name = "memory_memorize",
        description = MEMORIZE,
        input_schema = crate::tools::schema_of::<MemorizeArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::MemorizeOutcome>(),
        annotations(title = "Memorize", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_memorize(
        &self,
        Parameters(args): Parameters<Checked<MemorizeArgs>>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        self.run(args.0.map(ToolCall::Memorize), &context).await
    }

    #[tool(
        name = "memory_recall",
        description = RECALL,
        input_schema = crate::tools::schema_of::<RecallArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::RecallOutcome>(),
        annotations(title = "Recall", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_recall(&self, Parameters(args): Parameters<Checked<RecallArgs>>, context: RequestContext<RoleServer>) -> ToolResult {
        self.run(args.0.map(ToolCall::Recall), &context).await
    }

    #[tool(
        name = "memory_correct",
        description = CORRECT,
        input_schema = crate::tools::schema_of::<CorrectArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::CorrectOutcome>(),
        annotations(title = "Correct a memory", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_correct(&self, Parameters(args): Parameters<Checked<CorrectArgs>>, context: RequestContext<RoleServer>) -> ToolResult {
        self.run(args.0.map(ToolCall::Correct), &context).await
    }

    #[tool(
        name = "memory_govern",
        description = GOVERN,
        input_schema = crate::tools::schema_of::<GovernArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::GovernOutcome>(),
        annotations(title = "Govern a memory", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_govern(&self, Parameters(args): Parameters<Checked<GovernArgs>>, context: RequestContext<RoleServer>) -> ToolResult {
        self.run(args.0.map(ToolCall::Govern), &context).await
    }

    #[tool(
        name = "memory_handoff",
        description = HANDOFF,
        input_schema = crate::tools::schema_of::<HandoffArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::HandoffOutcome>(),
        annotations(title = "Session handoff", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_handoff(&self, Parameters(args): Parameters<Checked<HandoffArgs>>, context: RequestContext<RoleServer>) -> ToolResult {
        self.run(args.0.map(ToolCall::Handoff), &context).await
    }

    #[tool(
        name = "memory_stats",
        description = STATS,
        input_schema = crate::tools::schema_of::<StatsArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::Stats>(),
        annotations(title = "Store statistics", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_stats(&self, Parameters(args): Parameters<Checked<StatsArgs>>, context: RequestContext<RoleServer>) -> ToolResult {
        self.run(args.0.map(ToolCall::Stats), &context).await
    }

    #[tool(
        name = "reflect",
        description = REFLECT,
        input_schema = crate::tools::schema_of::<ReflectArgs>(),
        output_schema = crate::tools::output_schema_of::<crate::ReflectReport>(),
        annotations(title = "Reflect (maintenance)", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn reflect(
        &self,
        Parameters(args): Parameters<Checked<ReflectArgs>>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, String> {
        let value = self.run_value(args.0.map(ToolCall::Reflect), &context).await?;
        // The text is the seed's report; the structured content is the whole report.
        let text = match serde_json::from_value::<crate::ReflectReport>(value.clone()) {
            Ok(report) => report.to_text(),
            Err(error) => return Err(format!("internal error: unreadable reflect report: {error}")),
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(value);
        Ok(result)
    }
}

/// The one mapping of an error to an MCP answer: every fault is a tool
/// result with `isError: true` whose text the model reads (the caller's
/// faults say what to change); faults on our side are logged too.
fn answer_error(error: &dyn Classified) -> String {
    if !error.fault().is_callers() {
        tracing::error!(%error, fault = ?error.fault(), "tool call failed");
    }
    error.to_string()
}

impl HmgServer {
    /// Runs the call; its structured output is the tool result.
    async fn run(&self, call: Result<ToolCall, ToolError>, context: &RequestContext<RoleServer>) -> ToolResult {
        self.run_value(call, context).await.map(Json)
    }

    /// Resolves the scope and runs the call on a blocking thread.
    async fn run_value(&self, call: Result<ToolCall, ToolError>, context: &RequestContext<RoleServer>) -> Result<Value, String> {
        let call = call.map_err(|e| e.to_string())?;
        // Over HTTP the authenticated principal decides the tenant and what
        // the call may do; over stdio it is the OS user with every right.
        let (tenant, actor) = match context.extensions.get::<axum::http::request::Parts>() {
            Some(parts) => {
                let principal = parts
                    .extensions
                    .get::<crate::surface::token::Principal>()
                    .ok_or_else(|| "unauthenticated: send an access token (Authorization: Bearer …)".to_owned())?;
                principal.require(call.writes(), call.name()).map_err(|denied| answer_error(&denied))?;
                (principal.tenant.clone(), principal.actor("mcp-http"))
            }
            None => (self.resolver.tenant.clone(), self.actor.clone()),
        };
        let scope = match self.resolver.resolve(&tenant, call.scope()) {
            Some(scope) => scope,
            None => in_repository(&tenant, &self.roots(context).await).unwrap_or_else(|| Scope::tenant(tenant.clone())),
        };
        let caller = Caller::new(scope, actor);
        let span = tracing::info_span!("mcp_call", tool = call.name(), scope = %caller.scope.display());
        let shared = Arc::clone(&self.shared);
        // The span travels with the blocking work; an entered guard must not
        // be held across the await (it would tag other tasks on this thread).
        // `blocking::run` carries the current span (this one) to the work.
        let answer = if matches!(call, ToolCall::Memorize(_)) {
            tracing::Instrument::instrument(Burst::submit(&self.burst, &shared, call, caller), span.clone()).await
        } else {
            tracing::Instrument::instrument(
                crate::surface::blocking::run(crate::surface::blocking::DEFAULT_DEADLINE, move || shared.call(call, &caller)),
                span.clone(),
            )
            .await
        };
        span.in_scope(|| match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(answer_error(&error)),
            Err(refused) => Err(answer_error(&refused)),
        })
    }

    /// The client's roots (asked once per session, only when they could
    /// matter). Roots are deprecated by SEP-2577 but hosts of the older
    /// protocol generation still send them.
    #[allow(deprecated)]
    async fn roots(&self, context: &RequestContext<RoleServer>) -> Vec<PathBuf> {
        self.roots
            .get_or_init(|| async {
                let supported = context.peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some());
                if !supported {
                    return Vec::new();
                }
                match tokio::time::timeout(Duration::from_secs(3), context.peer.list_roots()).await {
                    Ok(Ok(result)) => result.roots.iter().filter_map(|root| file_uri_path(&root.uri)).collect(),
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "roots/list failed");
                        Vec::new()
                    }
                    Err(_) => Vec::new(),
                }
            })
            .await
            .clone()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for HmgServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("hmg", env!("CARGO_PKG_VERSION"))
                    .with_title("HMG memory")
                    .with_description("Local, auditable long-term memory for agents"),
            )
            .with_instructions(INSTRUCTIONS)
    }
}

/// Serves MCP over stdin/stdout until the client disconnects.
///
/// A front reads stdin first and answers what the protocol library would
/// otherwise drop or die on: a line that is not JSON gets `-32700`, one
/// that is not a JSON-RPC message `-32600`; before `initialize`, a
/// notification is ignored (it needs no answer) and any other request gets
/// `-32002`. Everything else goes to rmcp as it came.
pub(crate) async fn serve_stdio(server: HmgServer) -> Result<(), std::io::Error> {
    use rmcp::ServiceExt;
    let (server_in, front_out) = tokio::io::duplex(1 << 20);
    let (front_in, server_out) = tokio::io::duplex(1 << 20);
    let stdout = Arc::new(tokio::sync::Mutex::new(tokio::io::stdout()));
    let replies = tokio::spawn(copy_lines(front_in, Arc::clone(&stdout)));
    let front = tokio::spawn(front(tokio::io::stdin(), front_out, stdout));
    let running = server.serve((server_in, server_out)).await.map_err(std::io::Error::other);
    let result = match running {
        Ok(running) => running.waiting().await.map(|_| ()).map_err(std::io::Error::other),
        Err(error) => Err(error),
    };
    front.abort();
    let _ = replies.await;
    result
}

/// A JSON-RPC error response (also `/mcp`'s answer to a body nested too deep).
pub(crate) fn jsonrpc_error(id: Value, code: i64, message: impl Into<String>) -> Value {
    serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message.into() } })
}

/// Writes one line to the shared stdout; false once stdout is gone.
async fn write_line(stdout: &tokio::sync::Mutex<tokio::io::Stdout>, line: &str) -> bool {
    use tokio::io::AsyncWriteExt;
    let mut out = stdout.lock().await;
    out.write_all(format!("{line}\n").as_bytes()).await.is_ok() && out.flush().await.is_ok()
}

/// Copies rmcp's output to stdout a whole line at a time (the front writes
/// its own answers between lines).
async fn copy_lines(from: tokio::io::DuplexStream, stdout: Arc<tokio::sync::Mutex<tokio::io::Stdout>>) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if !write_line(&stdout, &line).await {
            return;
        }
    }
}

/// What the front does with one line from the client.
#[derive(Debug, PartialEq)]
enum FrontLine {
    /// Pass it to rmcp (`true`: it is the `initialize` request).
    Forward(bool),
    /// Nothing to do.
    Ignore,
    /// Answer this error instead.
    Answer(Value),
}

/// Classifies one stdin line; `initialized` says whether `initialize` went by.
fn front_line(line: &str, initialized: bool) -> FrontLine {
    let error = |id: Value, code: i64, message: String| FrontLine::Answer(jsonrpc_error(id, code, message));
    if line.trim().is_empty() {
        return FrontLine::Ignore;
    }
    if let Err(e) = crate::limits::check_nesting(line, crate::limits::Syntax::Json, 64) {
        return error(Value::Null, -32700, format!("Parse error: {e}"));
    }
    let message: Value = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(e) => return error(Value::Null, -32700, format!("Parse error: the line is not JSON ({e})")),
    };
    let Some(object) = message.as_object() else {
        let what =
            if message.is_array() { "batches are not supported; send one message per line" } else { "a message must be a JSON object" };
        return error(Value::Null, -32600, format!("Invalid Request: {what}"));
    };
    let id = object.get("id").cloned();
    let valid_id = id.as_ref().is_none_or(|id| id.is_string() || id.is_number());
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || !valid_id {
        return error(
            if valid_id { id.unwrap_or(Value::Null) } else { Value::Null },
            -32600,
            "Invalid Request: expected a JSON-RPC 2.0 message (\"jsonrpc\": \"2.0\", a string or number id)".to_owned(),
        );
    }
    let method = object.get("method").and_then(Value::as_str);
    if initialized {
        return FrontLine::Forward(false);
    }
    match (method, id) {
        (Some("initialize"), Some(id)) => {
            let params_ok = object.get("params").and_then(|p| p.get("protocolVersion")).is_some_and(Value::is_string);
            if params_ok {
                FrontLine::Forward(true)
            } else {
                error(id, -32602, "Invalid params: initialize needs params.protocolVersion (a string)".to_owned())
            }
        }
        (Some(_), None) | (None, None) => FrontLine::Ignore,
        (_, Some(id)) => error(id, -32002, "Server not initialized: send initialize first".to_owned()),
    }
}

/// Reads the client's lines, forwards the good ones to rmcp, answers the rest.
async fn front(stdin: tokio::io::Stdin, mut to_server: tokio::io::DuplexStream, stdout: Arc<tokio::sync::Mutex<tokio::io::Stdout>>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut lines = tokio::io::BufReader::new(stdin).lines();
    let mut initialized = false;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(error) => {
                // Not UTF-8: answer and go on with the next line.
                tracing::debug!(%error, "unreadable stdin line");
                if !write_line(&stdout, &jsonrpc_error(Value::Null, -32700, format!("Parse error: {error}")).to_string()).await {
                    break;
                }
                continue;
            }
        };
        match front_line(&line, initialized) {
            FrontLine::Forward(is_initialize) => {
                initialized |= is_initialize;
                if to_server.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                    break;
                }
            }
            FrontLine::Ignore => tracing::debug!("ignored a message before initialize"),
            FrontLine::Answer(answer) => {
                if !write_line(&stdout, &answer.to_string()).await {
                    break;
                }
            }
        }
    }
    let _ = to_server.shutdown().await;
}

/// The streamable HTTP service for `/mcp`: Origin validation on
/// (`allowed_origins`), `Host` checked against `allowed_hosts` (empty:
/// any). The server's own guard checks both first, on every route.
pub(crate) fn http_service(
    server: HmgServer,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    cancel: tokio_util::sync::CancellationToken,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    HmgServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_allowed_origins(allowed_origins)
        .with_max_request_body_bytes(1024 * 1024)
        .with_cancellation_token(cancel);
    StreamableHttpService::new(move || Ok(server.session()), Default::default(), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_descriptions_stay_under_two_kilobytes() {
        for text in [MEMORIZE, RECALL, CORRECT, GOVERN, HANDOFF, STATS, REFLECT] {
            assert!(text.len() < 2048, "{} bytes: {text}", text.len());
        }
    }

    #[test]
    fn served_schemas_hold_every_subschema_inline() {
        // A client validates each result against the output schemas: a
        // `$ref` costs it a lookup per nested value (`tools::output_schema_of`).
        // Hosts that do not resolve `$ref` in input schemas must still see
        // every argument, nested ones included (`tools::schema_of`).
        let tools = HmgServer::tool_router().list_all();
        assert_eq!(tools.len(), 7, "{:?}", tools.iter().map(|t| &t.name).collect::<Vec<_>>());
        for tool in &tools {
            let output = tool.output_schema.as_ref().unwrap_or_else(|| panic!("{} has no output schema", tool.name));
            for schema in [&tool.input_schema, output] {
                let text = serde_json::to_string(&**schema).unwrap();
                assert!(!text.contains("\"$ref\"") && !text.contains("\"$defs\""), "{}: {text}", tool.name);
            }
            assert_eq!(tool.input_schema.get("type").and_then(serde_json::Value::as_str), Some("object"), "{}", tool.name);
        }
        // The nested types are still described: a recalled memory's kind.
        let recall = tools.iter().find(|t| t.name == "memory_recall").and_then(|t| t.output_schema.clone()).expect("memory_recall");
        let kinds = &recall["properties"]["atoms"]["items"]["properties"]["kind"]["enum"];
        assert!(kinds.as_array().is_some_and(|k| k.iter().any(|v| v == "fact")), "{recall:?}");
        let input =
            |name: &str| tools.iter().find(|t| t.name == name).map(|t| serde_json::Value::Object((*t.input_schema).clone())).expect(name);
        // And where arguments use them: correct's action, govern's action,
        // recall's scope.
        let correct = input("memory_correct");
        let actions = serde_json::to_string(&correct["properties"]["action"]).unwrap();
        assert!(actions.contains("confirm_actual") && actions.contains("replace"), "{actions}");
        let govern = input("memory_govern");
        let actions = serde_json::to_string(&govern["properties"]["action"]).unwrap();
        assert!(actions.contains("tombstone") && actions.contains("quarantine"), "{actions}");
        let recall = input("memory_recall");
        let scope = serde_json::to_string(&recall["properties"]["scope"]).unwrap();
        assert!(scope.contains("\"repository\"") && scope.contains("\"workspace\""), "{scope}");
    }

    #[test]
    fn a_model_cannot_choose_its_scope() {
        let key = b"0123456789abcdef0123456789abcdef".to_vec();
        let resolver = ScopeResolver { tenant: "alice".to_owned(), directories: Vec::new(), hook_key: Some(key.clone()) };
        let forged = ScopeInput { tenant_id: Some("bob".to_owned()), repository: Some("secret".to_owned()), ..ScopeInput::default() };
        assert_eq!(resolver.resolve("alice", Some(&forged)), None, "falls through to roots, then tenant-wide");
        let hooked = crate::surface::hook::scope_input(&key, &Scope::tenant("alice").with_workspace("acme").with_repository("api"));
        assert_eq!(resolver.resolve("alice", Some(&hooked)), Some(Scope::tenant("alice").with_workspace("acme").with_repository("api")));
    }

    #[test]
    fn the_stdio_front_answers_protocol_errors() {
        let code = |answer: FrontLine| match answer {
            FrontLine::Answer(value) => value["error"]["code"].as_i64(),
            _ => None,
        };
        assert_eq!(code(front_line("garbage", false)), Some(-32700));
        assert_eq!(code(front_line(&"[".repeat(10_000), true)), Some(-32700));
        assert_eq!(code(front_line("[]", true)), Some(-32600));
        assert_eq!(code(front_line(r#"{"id": 1, "method": "tools/list"}"#, true)), Some(-32600));
        assert_eq!(front_line(r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#, false), FrontLine::Ignore);
        assert_eq!(code(front_line(r#"{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}"#, false)), Some(-32002));
        assert_eq!(code(front_line(r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}"#, false)), Some(-32602));
        let init = r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}"#;
        assert_eq!(front_line(init, false), FrontLine::Forward(true));
        assert_eq!(front_line(r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}"#, true), FrontLine::Forward(false));
    }

    #[test]
    fn file_uris_decode() {
        assert_eq!(file_uri_path("file:///home/a/my%20repo"), Some(PathBuf::from("/home/a/my repo")));
        assert_eq!(file_uri_path("https://x"), None);
    }
}
