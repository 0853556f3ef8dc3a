//! The `hmg` command line: argument definitions and the adapter from
//! subcommands to the [`Memory`] facade. The binary only parses, sets up
//! tracing and calls [`run`].
//!
//! Contract (scripts rely on it): `--json` prints one JSON document on stdout
//! with the fields of the matching MCP tool; exit status 0 on success
//! (including `no_op`), 2 for a rejected or invalid request (the JSON is
//! still printed), 1 for internal failures.

pub(crate) mod eval;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::fault::{Classified, Fault};
use crate::memory::{BriefOptions, ExportFormat};
use crate::{Caller, CorrectRequest, Effect, GovernRequest, HandoffRequest, Kind, MemorizeRequest, MemoryError};

/// HMG: local, auditable long-term memory for AI agents.
#[derive(Debug, Parser)]
#[command(name = "hmg", version, about, long_about = None)]
pub struct Cli {
    /// Store directory (default: $XDG_DATA_HOME/hmg, e.g. ~/.local/share/hmg).
    #[arg(long, global = true, env = "HMG_STORE", value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Print one JSON document on stdout instead of readable text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Scope overrides (by default inferred from the working directory).
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Scope overrides.
#[derive(Debug, Args, Default, Clone)]
pub struct ScopeArgs {
    /// Tenant (default: the OS user).
    #[arg(long, global = true)]
    pub tenant: Option<String>,
    /// Workspace (default: the git remote owner).
    #[arg(long, global = true)]
    pub workspace: Option<String>,
    /// Repository (default: the git repository name).
    #[arg(long, global = true)]
    pub repository: Option<String>,
    /// Branch (default: the current git branch).
    #[arg(long, global = true)]
    pub branch: Option<String>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Store one self-contained memory (memory_memorize).
    Memorize {
        /// The memory, one sentence, in the user's language.
        content: String,
        /// user | agent | a custom attribution.
        #[arg(long, default_value = "user")]
        source: String,
        /// fact | episode.
        #[arg(long, default_value = "fact")]
        kind: String,
        /// ISO 8601 time after which `hmg reflect` expires the memory.
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// Search memories with a noun phrase (memory_recall).
    Recall {
        /// What to find: a noun phrase naming the key entities, any language.
        query: String,
        /// At most this many results (1–100).
        #[arg(long, default_value_t = 10)]
        max_results: usize,
        /// Include negated memories.
        #[arg(long)]
        include_negated: bool,
        /// Show each stage's contribution (keyword, semantic, entity, graph, boosts).
        #[arg(long)]
        explain: bool,
    },
    /// Correct a memory (memory_correct): negate, confirm_actual, confirm_necessary, demote, replace.
    Correct {
        /// Atom id.
        atom: String,
        /// Action.
        action: String,
        /// Why (written into the audit chain).
        #[arg(long)]
        reason: String,
        /// New content (required for replace).
        #[arg(long)]
        new_content: Option<String>,
    },
    /// Govern a memory's lifecycle (memory_govern): quarantine, restore, seal, tombstone, derive_lesson.
    Govern {
        /// Atom id.
        atom: String,
        /// Action.
        action: String,
        /// Why (written into the audit chain).
        #[arg(long)]
        reason: String,
        /// Lesson text (required for derive_lesson).
        #[arg(long)]
        lesson_content: Option<String>,
    },
    /// Store a session hand-off summary (memory_handoff).
    Handoff {
        /// What was done, why, verification, risks, next steps.
        summary: String,
        /// Attribution.
        #[arg(long, default_value = "agent")]
        source: String,
    },
    /// Store overview (memory_stats).
    Stats,
    /// Maintenance pass (reflect): summarize, promote, expire, decay, archive. Try --dry-run first.
    Reflect {
        /// Comma-separated actions (default all five; aliases summary, promotion, expiry, importance_decay).
        #[arg(long)]
        actions: Option<String>,
        /// Compute candidates and counts; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Look-back window in hours for summarize/promote (default 24).
        #[arg(long)]
        time_window_hours: Option<f64>,
        /// ISO 8601 start of the window (overrides the hours).
        #[arg(long)]
        since: Option<String>,
        /// ISO 8601 end of the window, and "now" for expire/decay/archive.
        #[arg(long)]
        until: Option<String>,
        /// LIKE pattern over workspace/repository@branch.
        #[arg(long)]
        path_filter: Option<String>,
        /// `%` or your own tenant.
        #[arg(long)]
        owner_filter: Option<String>,
        /// personal, % or a LIKE pattern over repository names.
        #[arg(long)]
        bucket: Option<String>,
        /// Narrow to workspace/repository[@branch] (named --in, as --repository sets the caller's own scope).
        #[arg(long = "in")]
        within: Option<String>,
        /// Team (workspace).
        #[arg(long)]
        team_id: Option<String>,
        /// Candidate budget (default 500, clamped to 5000).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// An atom's evolution chain, derived lessons and audit entries.
    History {
        /// Atom id.
        atom: String,
    },
    /// Export memories as JSON Lines (atoms visible from the scope) or N-Quads (the tenant's graph).
    Export {
        /// jsonl | nquads.
        #[arg(long, default_value = "jsonl")]
        format: String,
        /// Export every atom of the tenant, not only those visible from the scope.
        #[arg(long)]
        all: bool,
        /// Write to a file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Import JSON Lines (an export, or lines with a "content" field); `-` reads stdin.
    Import {
        /// File to read.
        file: PathBuf,
    },
    /// The session brief (what the SessionStart hook injects).
    Brief {
        /// Character budget.
        #[arg(long, default_value_t = 8000)]
        max_chars: usize,
    },
    /// Rebuild every derived index (keyword, semantic, graph) from the store.
    Reindex,
    /// Measure recall quality on a benchmark (JSON Lines of bench/README.md) in a fresh in-memory store.
    Eval {
        /// Memories file.
        #[arg(long)]
        memories: PathBuf,
        /// Queries file.
        #[arg(long)]
        queries: PathBuf,
        /// Write the per-query ranking here ({"query_id", "ranked"} lines).
        #[arg(long)]
        run_out: Option<PathBuf>,
        /// Results ranked per query (at least 10).
        #[arg(long, default_value_t = 50)]
        depth: usize,
        /// Recall parameters to try, `name=value,…` (keyword, semantic, entity,
        /// speaker, segment, segments, part_decay, dialogue_keyword, hop,
        /// window, seeds, long, candidates, degree, …; an
        /// unknown name lists them all). Repeat to score several settings on
        /// one ingestion.
        #[arg(long)]
        tune: Vec<String>,
    },
    /// Run a read-only SPARQL query (a file, or - for stdin) against the local store, confined to the tenant.
    Sparql {
        /// Query file, or `-` for standard input.
        file: PathBuf,
        /// Result format: json, xml, csv, tsv (graphs: turtle, ntriples).
        #[arg(long, default_value = "json")]
        format: String,
    },
    /// Show what HMG would store of a text: secrets replaced by
    /// [REDACTED:kind] (nothing is written). Reads each line of stdin with `-`.
    Redact {
        /// The text, or `-` to redact standard input line by line.
        text: String,
    },
    /// Evaluates one SPARQL query for `hmg serve` in a separate process
    /// (internal: started by the server, never by hand).
    #[command(hide = true, name = "sparql-worker")]
    SparqlWorker {
        /// A read-only checkpoint of the store.
        #[arg(long)]
        snapshot: PathBuf,
        /// The tenant whose graph the query sees.
        #[arg(long)]
        tenant: String,
        /// The media type to answer in.
        #[arg(long)]
        accept: String,
        /// Time limit.
        #[arg(long)]
        timeout_ms: u64,
        /// Largest serialized result.
        #[arg(long)]
        max_result_bytes: usize,
        /// Memory limit of this process.
        #[arg(long)]
        max_memory_bytes: u64,
    },
    /// Serve the memory tools over MCP on stdin/stdout (for agent hosts).
    Mcp,
    /// Serve HTTP: `/mcp` (streamable HTTP MCP) and `/healthz`.
    Serve {
        /// Address to listen on (loopback only without access tokens).
        #[arg(long, default_value = "127.0.0.1:7411")]
        listen: String,
        /// Another Host name to serve (besides localhost, 127.0.0.1 and [::1] on loopback); repeatable.
        #[arg(long = "allow-host", env = "HMG_ALLOW_HOSTS", value_delimiter = ',', value_name = "NAME")]
        allow_hosts: Vec<String>,
        /// A browser origin allowed to call the server (e.g. http://localhost:3000); repeatable. Others are refused.
        #[arg(long = "allow-origin", env = "HMG_ALLOW_ORIGINS", value_delimiter = ',', value_name = "ORIGIN")]
        allow_origins: Vec<String>,
        /// Seconds shutdown (SIGINT/SIGTERM) waits for in-flight requests.
        #[arg(long, default_value_t = 10)]
        shutdown_grace_secs: u64,
    },
    /// Access tokens for `hmg serve`.
    Token {
        /// What to do.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Agent-host hooks.
    Hook {
        /// Which hook.
        #[command(subcommand)]
        command: HookCommand,
    },
    /// Audit chain tools.
    Audit {
        /// What to do.
        #[command(subcommand)]
        command: AuditCommand,
    },
}

/// `hmg hook …`: agent-host hooks speaking the host's hook JSON on stdin/stdout.
#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// SessionStart: prints the brief as `additionalContext`.
    SessionStart,
    /// PreToolUse: allows the call and injects the scope into its input.
    PreToolUse,
}

/// `hmg token …`: access tokens for the HTTP surfaces.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for the tenant (`--tenant`, default the OS user); the secret is shown once.
    ///
    /// memory:read reads (recall, GraphQL queries, SPARQL, REST search and
    /// lists, reflect dry runs). memory:write writes and implies memory:read:
    /// every write answers with what it found (a duplicate's id, the memory
    /// a REST add updated), so a write-only token could not be read-blind.
    Create {
        /// Granted scope: memory:read, memory:write (implies read); repeat or comma-separate.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// A label.
        #[arg(long)]
        name: Option<String>,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token by id.
    Revoke {
        /// Token id (from `hmg token list`).
        id: String,
    },
}

/// `hmg audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Recompute every tenant's hash chain and report the first broken link.
    Verify,
}

/// Failures of the CLI adapter.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The facade failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Writing output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    /// No store directory could be determined.
    #[error("no store directory: pass --store DIR or set HMG_STORE")]
    NoStore,
    /// An evaluation failed.
    #[error(transparent)]
    Eval(#[from] crate::surface::cli::eval::EvalError),
    /// The HTTP server could not start.
    #[error(transparent)]
    Serve(#[from] crate::surface::http::ServeError),
    /// A hook could not run.
    #[error(transparent)]
    Hook(#[from] crate::surface::hook::HookError),
    /// Token management failed.
    #[error(transparent)]
    Token(#[from] crate::surface::token::TokenError),
    /// A tool relayed to the store's owner failed.
    #[error(transparent)]
    Tool(#[from] crate::tools::ToolError),
    /// The command needs the store in this process, and another has it.
    #[error(
        "the store at {} is open in another hmg process (an MCP server or hmg serve); memorize, recall, correct, govern, handoff, stats and brief go through it, but this command needs the store itself: stop that process and retry",
        .0.display()
    )]
    InUse(PathBuf),

    /// An input file could not be read.
    #[error("cannot read {path}: {source}")]
    Input {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl Classified for CliError {
    fn fault(&self) -> Fault {
        match self {
            CliError::Memory(error) => error.fault(),
            CliError::Eval(error) => error.fault(),
            CliError::Serve(error) => error.fault(),
            CliError::Hook(error) => error.fault(),
            CliError::Token(error) => error.fault(),
            CliError::Tool(error) => error.fault(),
            CliError::Input { .. } => Fault::Invalid,
            CliError::NoStore | CliError::InUse(_) => Fault::Unavailable,
            CliError::Output(_) => Fault::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            CliError::Memory(error) => error.field(),
            CliError::Eval(error) => error.field(),
            CliError::Serve(error) => error.field(),
            CliError::Hook(error) => error.field(),
            CliError::Token(error) => error.field(),
            CliError::Tool(error) => error.field(),
            _ => None,
        }
    }
}

/// The exit status of a fault: the caller's own errors are [`Exit::Rejected`].
fn exit_of(fault: Fault) -> Exit {
    if fault.is_callers() { Exit::Rejected } else { Exit::Internal }
}

/// Exit statuses of the CLI contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, including no_op.
    Ok = 0,
    /// Internal failure.
    Internal = 1,
    /// Rejected or invalid request.
    Rejected = 2,
}

/// The default store directory.
pub(crate) fn default_store_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("hmg"))
}

/// Resolves the caller: the working directory's git scope and the OS user,
/// with command-line overrides.
pub(crate) fn resolve_caller(args: &ScopeArgs) -> Caller {
    let tenant = args.tenant.clone().unwrap_or_else(crate::scope::os_user);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut scope = crate::scope::infer_scope(&tenant, &cwd);
    if args.workspace.is_some() {
        scope.workspace = args.workspace.clone();
    }
    if args.repository.is_some() {
        scope.repository = args.repository.clone();
    }
    if args.branch.is_some() {
        scope.branch = args.branch.clone();
    }
    Caller::new(scope, format!("cli:{}", crate::scope::os_user()))
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| std::io::Error::other(e.to_string()))?;
    writeln!(out, "{text}")?;
    Ok(())
}

fn exit_for(effect: Effect) -> Exit {
    match effect {
        Effect::Rejected => Exit::Rejected,
        _ => Exit::Ok,
    }
}

/// Runs one command. Caller errors (invalid input, unknown atom) are
/// printed — as `{"error": …}` JSON with `--json` — and give [`Exit::Rejected`].
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Exit, CliError> {
    let json = cli.json;
    match execute(cli, out, err) {
        Err(error) if exit_of(error.fault()) == Exit::Rejected => report_bad_input(&error.to_string(), error.field(), json, out, err),
        other => other,
    }
}

/// The caller's own error (a bad field, an unknown atom, a file that cannot
/// be used): `{"error", "field"}` with `--json`, the message on stderr, exit 2.
fn report_bad_input(message: &str, field: Option<&str>, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> Result<Exit, CliError> {
    if json {
        write_json(out, &serde_json::json!({ "error": message, "field": field }))?;
    }
    writeln!(err, "error: {message}")?;
    Ok(Exit::Rejected)
}

fn execute(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Exit, CliError> {
    if let Command::Eval { memories, queries, run_out, depth, tune } = &cli.command {
        let options = crate::MemoryOptions::default();
        let reports = crate::surface::cli::eval::run(memories, queries, run_out.as_deref(), *depth, options, tune, &mut |line| {
            let _ = writeln!(err, "eval: {line}");
        })?;
        if cli.json {
            match &reports[..] {
                [report] => write_json(out, report)?,
                reports => write_json(out, &reports)?,
            }
        } else {
            for report in &reports {
                crate::surface::cli::eval::render(report, out)?;
            }
        }
        return Ok(Exit::Ok);
    }
    if let Command::Redact { text } = &cli.command {
        return redact_command(text, cli.json, out);
    }
    if let Command::SparqlWorker { snapshot, tenant, accept, timeout_ms, max_result_bytes, max_memory_bytes } = &cli.command {
        let limits = crate::surface::sparql::Limits {
            timeout: std::time::Duration::from_millis(*timeout_ms),
            max_result_bytes: *max_result_bytes,
            max_memory_bytes: *max_memory_bytes,
        };
        let code = crate::surface::sparql::run_worker(snapshot, tenant, accept, limits, &mut std::io::stdin(), out)?;
        return Ok(if code == 0 { Exit::Ok } else { Exit::Rejected });
    }
    if matches!(cli.command, Command::Mcp | Command::Serve { .. } | Command::Hook { .. }) {
        return serve(cli, out);
    }
    if let Command::Token { command } = &cli.command {
        let dir = cli.store.clone().or_else(default_store_dir).ok_or(CliError::NoStore)?;
        return tokens(&dir, command, cli.scope.tenant.clone(), cli.json, out, err);
    }
    let caller = resolve_caller(&cli.scope);
    // `audit verify` checks every tenant unless one is named with --tenant.
    let explicit_tenant = cli.scope.tenant.clone();
    let json = cli.json;
    let dir = cli.store.or_else(default_store_dir).ok_or(CliError::NoStore)?;
    let shared = crate::tools::relay::SharedMemory::open(&dir, crate::MemoryOptions::default())?;
    let exit = dispatch(cli.command, &shared, &caller, explicit_tenant, json, out, err)?;
    shared.flush()?;
    Ok(exit)
}

/// `hmg token create|list|revoke` (no store lock needed: tokens live in
/// their own file, which a running server reloads).
fn tokens(
    dir: &std::path::Path,
    command: &TokenCommand,
    tenant: Option<String>,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Exit, CliError> {
    let store = crate::surface::token::TokenStore::new(dir);
    match command {
        TokenCommand::Create { scopes, name } => {
            let tenant = tenant.unwrap_or_else(crate::scope::os_user);
            let (record, secret) = store.create(&tenant, scopes, name.clone())?;
            if json {
                write_json(
                    out,
                    &serde_json::json!({ "id": record.id, "tenant": record.tenant, "scopes": record.scopes, "token": secret }),
                )?;
            } else {
                writeln!(out, "{secret}")?;
                writeln!(err, "token {} for tenant {} ({}); shown once, store it now", record.id, record.tenant, record.scopes.join(", "))?;
            }
        }
        TokenCommand::List => {
            let tokens = store.list()?;
            if json {
                let listed: Vec<_> = tokens
                    .iter()
                    .map(|t| serde_json::json!({ "id": t.id, "name": t.name, "tenant": t.tenant, "scopes": t.scopes, "created_at": t.created_at, "revoked_at": t.revoked_at }))
                    .collect();
                write_json(out, &listed)?;
            } else {
                for t in &tokens {
                    let state = t.revoked_at.as_deref().map_or("active".to_owned(), |at| format!("revoked {at}"));
                    writeln!(out, "{}  {}  {}  {}  {}", t.id, t.tenant, t.scopes.join(","), state, t.name.as_deref().unwrap_or(""))?;
                }
            }
        }
        TokenCommand::Revoke { id } => {
            let record = store.revoke(id)?;
            if json {
                write_json(out, &serde_json::json!({ "id": record.id, "revoked_at": record.revoked_at }))?;
            } else {
                writeln!(out, "revoked {}", record.id)?;
            }
        }
    }
    Ok(Exit::Ok)
}

/// `hmg redact`: the text as HMG would store it, and the kinds removed.
fn redact_command(text: &str, json: bool, out: &mut dyn Write) -> Result<Exit, CliError> {
    let mut show = |line: &str| -> Result<(), CliError> {
        let redaction = crate::text::redact(line);
        if json {
            write_json(out, &serde_json::json!({ "text": redaction.text, "redactions": redaction.kinds }))?;
        } else {
            writeln!(out, "{}", redaction.text)?;
        }
        Ok(())
    };
    if text == "-" {
        for line in std::io::BufRead::lines(std::io::stdin().lock()) {
            show(&line?)?;
        }
    } else {
        show(text)?;
    }
    Ok(Exit::Ok)
}

/// The long-running and host-facing commands: `mcp`, `serve`, `hook`.
/// They share the store with other processes through [`crate::tools::relay`].
fn serve(cli: Cli, out: &mut dyn Write) -> Result<Exit, CliError> {
    let dir = cli.store.or_else(default_store_dir).ok_or(CliError::NoStore)?;
    if cli.scope.tenant.is_some() || cli.scope.workspace.is_some() || cli.scope.repository.is_some() || cli.scope.branch.is_some() {
        return Err(MemoryError::invalid(
            "scope",
            "--tenant, --workspace, --repository and --branch do not apply here: the tenant is the OS user and the scope is resolved per call",
        )
        .into());
    }
    // Blocking work is bounded by `crate::surface::blocking`; the thread pool under it
    // is capped too, and idle threads go away quickly after a burst.
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .max_blocking_threads(crate::surface::blocking::MAX_BLOCKING_THREADS)
            .thread_keep_alive(crate::surface::blocking::BLOCKING_KEEP_ALIVE)
            .build()
    };
    match cli.command {
        Command::Hook { command: HookCommand::PreToolUse } => {
            let input = crate::surface::hook::read_input(&mut std::io::stdin())?;
            let key = crate::surface::hook::load_or_create_key(&dir)?;
            let output = crate::surface::hook::pre_tool_use(&input, &crate::scope::os_user(), &key)?;
            write_json(out, &output)?;
            Ok(Exit::Ok)
        }
        Command::Hook { command: HookCommand::SessionStart } => {
            let input = crate::surface::hook::read_input(&mut std::io::stdin())?;
            let shared = crate::tools::relay::SharedMemory::open(&dir, crate::MemoryOptions::default())?;
            let output = crate::surface::hook::session_start(&input, &crate::scope::os_user(), &shared)?;
            write_json(out, &output)?;
            shared.flush()?;
            Ok(Exit::Ok)
        }
        Command::Mcp => {
            let key = match crate::surface::hook::load_or_create_key(&dir) {
                Ok(key) => Some(key),
                Err(error) => {
                    tracing::warn!(%error, "hook-injected scopes cannot be verified; scopes come from the working directory");
                    None
                }
            };
            let shared = std::sync::Arc::new(crate::tools::relay::SharedMemory::open(&dir, crate::MemoryOptions::default())?);
            let server = crate::surface::mcp::HmgServer::new(
                std::sync::Arc::clone(&shared),
                crate::surface::mcp::ScopeResolver::local(key),
                format!("mcp:{}", crate::scope::os_user()),
            );
            runtime()?.block_on(crate::surface::mcp::serve_stdio(server))?;
            shared.flush()?;
            Ok(Exit::Ok)
        }
        Command::Serve { listen, allow_hosts, allow_origins, shutdown_grace_secs } => {
            let tokens = std::sync::Arc::new(crate::surface::token::TokenStore::new(&dir));
            let address = crate::surface::http::listen_address(&listen, tokens.any_active()?)?;
            let shared = std::sync::Arc::new(crate::tools::relay::SharedMemory::open(&dir, crate::MemoryOptions::default())?);
            let options = crate::surface::http::ServeOptions {
                allowed_hosts: allow_hosts,
                allowed_origins: allow_origins,
                sparql_worker: std::env::current_exe().ok(),
                shutdown_grace: std::time::Duration::from_secs(shutdown_grace_secs),
                ..crate::surface::http::ServeOptions::default()
            };
            let runtime = runtime()?;
            let served = runtime.block_on(crate::surface::http::serve(shared, tokens, address, options, |bound| {
                eprintln!("hmg: serving http://{bound} (MCP at /mcp, GraphQL and its explorer at /graphql, SPARQL at /sparql, REST at /api/v1/hetamem/vg)");
            }));
            // Work abandoned at the end of the grace period is not waited for.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            served?;
            Ok(Exit::Ok)
        }
        _ => Ok(Exit::Ok),
    }
}

/// Runs a tool through the process that holds the store (this CLI could
/// not open it) and reads its output back as the facade's type.
fn relayed<T: serde::de::DeserializeOwned>(
    shared: &crate::tools::relay::SharedMemory,
    caller: &Caller,
    tool: &str,
    arguments: serde_json::Value,
) -> Result<T, CliError> {
    let call = crate::tools::ToolCall::decode(tool, arguments)?;
    let value = shared.call(call, caller)?;
    serde_json::from_value(value)
        .map_err(|e| CliError::Tool(crate::tools::ToolError::Internal(format!("unexpected answer from the store's owner: {e}"))))
}

fn dispatch(
    command: Command,
    shared: &crate::tools::relay::SharedMemory,
    caller: &Caller,
    explicit_tenant: Option<String>,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Exit, CliError> {
    let caller = caller.clone();
    // The tool commands run here when this process holds the store, else
    // through the process that does (an MCP server, hmg serve); the others
    // need the store here.
    let local = shared.local();
    let in_use = || CliError::InUse(shared.dir().to_path_buf());
    let memory_here = || local.as_deref().ok_or_else(in_use);
    match command {
        Command::Memorize { content, source, kind, expires_at } => {
            let kind: Kind = kind.parse().map_err(|e: crate::atom::UnknownValue| MemoryError::invalid("kind", e.to_string()))?;
            let expires_at = expires_at.as_deref().map(|t| crate::memory::parse_iso8601("expires_at", t)).transpose()?;
            let outcome: crate::MemorizeOutcome = match (&local, kind) {
                (Some(memory), kind) => {
                    let mut request = MemorizeRequest::new(content).with_source(source).with_kind(kind);
                    request.expires_at = expires_at;
                    memory.memorize(&caller, request)?
                }
                (None, Kind::Fact) if expires_at.is_none() => {
                    relayed(shared, &caller, "memory_memorize", serde_json::json!({ "content": content, "source": source }))?
                }
                (None, _) => return Err(in_use()),
            };
            if json {
                write_json(out, &outcome)?;
            } else {
                match outcome.effect {
                    Effect::Applied => writeln!(out, "memorized {}", outcome.atom_id.unwrap_or_default())?,
                    Effect::NoOp => writeln!(out, "already known as {}", outcome.deduped_with.unwrap_or_default())?,
                    Effect::Rejected => writeln!(out, "rejected: {}", outcome.reason.unwrap_or_default())?,
                }
                if !outcome.redactions.is_empty() {
                    writeln!(out, "redacted: {}", outcome.redactions.join(", "))?;
                }
            }
            Ok(exit_for(outcome.effect))
        }
        Command::Recall { query, max_results, include_negated, explain } => {
            let outcome: crate::RecallOutcome = match &local {
                Some(memory) => memory
                    .recall(&caller, crate::RecallRequest { max_results, include_negated, explain, ..crate::RecallRequest::new(query) })?,
                None => relayed(
                    shared,
                    &caller,
                    "memory_recall",
                    serde_json::json!({ "query": query, "max_results": max_results, "include_negated": include_negated, "explain": explain }),
                )?,
            };
            if json {
                write_json(out, &outcome)?;
            } else {
                if let Some(warning) = &outcome.warning {
                    writeln!(err, "warning: {warning}")?;
                }
                if outcome.atoms.is_empty() {
                    writeln!(out, "no memories found")?;
                }
                for atom in &outcome.atoms {
                    writeln!(out, "{:.3}  {}  [{} {}] {}", atom.score, atom.atom_id, atom.kind, atom.source, atom.content)?;
                    if let Some(explain) = &atom.explain {
                        writeln!(out, "       {}", serde_json::to_string(explain).unwrap_or_default())?;
                    }
                }
            }
            Ok(Exit::Ok)
        }
        Command::Reindex => {
            let memory = memory_here()?;
            let started = std::time::Instant::now();
            memory.reindex(&mut |stage, done, total| {
                if done == total || done % 1000 < 64 {
                    let _ = writeln!(err, "reindex: {stage} {done} / {total}");
                }
            })?;
            let stats = memory.stats(&caller)?;
            writeln!(
                out,
                "reindexed in {:.1} s: keyword {}, semantic {}",
                started.elapsed().as_secs_f64(),
                stats.indexes.keyword,
                stats.indexes.semantic
            )?;
            Ok(Exit::Ok)
        }
        // `execute` runs evaluations before any store is opened (they use a
        // fresh in-memory one), so they never reach this dispatcher.
        Command::Eval { .. }
        | Command::SparqlWorker { .. }
        | Command::Redact { .. }
        | Command::Mcp
        | Command::Serve { .. }
        | Command::Hook { .. }
        | Command::Token { .. } => Ok(Exit::Ok),
        Command::Correct { atom, action, reason, new_content } => {
            let outcome: crate::CorrectOutcome = match &local {
                Some(memory) => {
                    memory.correct(&caller, CorrectRequest { target_atom: atom, action: action.parse()?, reason, new_content })?
                }
                None => relayed(
                    shared,
                    &caller,
                    "memory_correct",
                    serde_json::json!({ "target_atom": atom, "action": action, "reason": reason, "new_content": new_content }),
                )?,
            };
            if json {
                write_json(out, &outcome)?;
            } else {
                match (&outcome.effect, &outcome.new_atom_id, &outcome.reason) {
                    (Effect::Rejected, _, reason) => writeln!(out, "rejected: {}", reason.as_deref().unwrap_or(""))?,
                    (_, Some(new_id), _) => writeln!(out, "replaced {} with {new_id}", outcome.target_atom)?,
                    _ => writeln!(out, "corrected {}", outcome.target_atom)?,
                }
            }
            Ok(exit_for(outcome.effect))
        }
        Command::Govern { atom, action, reason, lesson_content } => {
            let outcome: crate::GovernOutcome = match &local {
                Some(memory) => {
                    memory.govern(&caller, GovernRequest { target_atom: atom, action: action.parse()?, reason, lesson_content })?
                }
                None => relayed(
                    shared,
                    &caller,
                    "memory_govern",
                    serde_json::json!({ "target_atom": atom, "action": action, "reason": reason, "lesson_content": lesson_content }),
                )?,
            };
            if json {
                write_json(out, &outcome)?;
            } else {
                match (&outcome.effect, &outcome.lesson_atom_id, &outcome.reason) {
                    (Effect::Rejected, _, reason) => writeln!(out, "rejected: {}", reason.as_deref().unwrap_or(""))?,
                    (_, Some(lesson), _) => writeln!(out, "derived lesson {lesson}; sealed {}", outcome.target_atom)?,
                    _ => writeln!(out, "governed {}", outcome.target_atom)?,
                }
            }
            Ok(exit_for(outcome.effect))
        }
        Command::Handoff { summary, source } => {
            let outcome: crate::HandoffOutcome = match &local {
                Some(memory) => memory.handoff(&caller, HandoffRequest { summary, source: Some(source) })?,
                None => relayed(shared, &caller, "memory_handoff", serde_json::json!({ "summary": summary, "source": source }))?,
            };
            if json {
                write_json(out, &outcome)?;
            } else {
                match outcome.effect {
                    Effect::Rejected => writeln!(out, "rejected: {}", outcome.reason.as_deref().unwrap_or(""))?,
                    _ => writeln!(out, "handoff stored as {}", outcome.atom_id.as_deref().unwrap_or(""))?,
                }
            }
            Ok(exit_for(outcome.effect))
        }
        Command::Reflect {
            actions,
            dry_run,
            time_window_hours,
            since,
            until,
            path_filter,
            owner_filter,
            bucket,
            within,
            team_id,
            limit,
        } => {
            let args = crate::tools::ReflectArgs {
                actions_csv: actions,
                dry_run: Some(dry_run),
                time_window_hours,
                since,
                until,
                path_filter,
                owner_filter,
                bucket,
                scope: within,
                team_id,
                limit,
                bound_scope: None,
            };
            let report: crate::ReflectReport = match &local {
                Some(memory) => memory.reflect(&caller, args.request())?,
                None => relayed(
                    shared,
                    &caller,
                    "reflect",
                    serde_json::to_value(&args).map_err(|e| CliError::Tool(crate::tools::ToolError::Internal(e.to_string())))?,
                )?,
            };
            if json {
                write_json(out, &report)?;
            } else {
                writeln!(out, "{}", report.to_text())?;
            }
            Ok(Exit::Ok)
        }
        Command::Stats => {
            let stats: crate::Stats = match &local {
                Some(memory) => memory.stats(&caller)?,
                None => relayed(shared, &caller, "memory_stats", serde_json::json!({}))?,
            };
            if json {
                write_json(out, &stats)?;
            } else {
                writeln!(
                    out,
                    "atoms: {}\nedges: {}\nindexes: semantic {}, keyword {}, temporal {}, categorical {}\nsnapshot_version: {}",
                    stats.atoms,
                    stats.edges,
                    stats.indexes.semantic,
                    stats.indexes.keyword,
                    stats.indexes.temporal,
                    stats.indexes.categorical,
                    stats.snapshot_version
                )?;
            }
            Ok(Exit::Ok)
        }
        Command::History { atom } => {
            let memory = memory_here()?;
            let history = memory.history(&caller, &atom)?;
            if json {
                write_json(out, &history)?;
            } else {
                writeln!(out, "chain of {} (head {}):", history.atom_id, history.head)?;
                for a in &history.chain {
                    writeln!(out, "  {} [{}] {} — {}", a.atom_id, a.status, a.created_at, a.content)?;
                }
                for a in &history.derived {
                    writeln!(out, "  derived {} [{} {}] {}", a.atom_id, a.kind, a.status, a.content)?;
                }
                writeln!(out, "audit:")?;
                for e in &history.audit {
                    writeln!(
                        out,
                        "  #{} {} {} by {}{}",
                        e.seq,
                        e.time,
                        e.action,
                        e.actor,
                        e.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
                    )?;
                }
            }
            Ok(Exit::Ok)
        }
        Command::Export { format, all, output } => {
            let memory = memory_here()?;
            let format: ExportFormat = format.parse()?;
            let count = match output {
                Some(path) => {
                    let mut file = std::fs::File::create(&path).map_err(|source| CliError::Input { path: path.clone(), source })?;
                    let count = memory.export(&caller, format, all, &mut file)?;
                    file.sync_all()?;
                    writeln!(err, "exported {count} records to {}", path.display())?;
                    count
                }
                None => memory.export(&caller, format, all, out)?,
            };
            tracing::info!(count, "export finished");
            Ok(Exit::Ok)
        }
        Command::Import { file } => {
            let memory = memory_here()?;
            let reader: Box<dyn std::io::BufRead> = if file.as_os_str() == "-" {
                Box::new(std::io::BufReader::new(std::io::stdin()))
            } else {
                let handle = std::fs::File::open(&file).map_err(|source| CliError::Input { path: file.clone(), source })?;
                Box::new(std::io::BufReader::new(handle))
            };
            let mut reader = reader;
            let mut progress_error = None;
            let report = memory.import(&caller, &mut reader, &mut |line| {
                // One line per committed record: an acknowledgement.
                let result = if json {
                    serde_json::to_string(line).map_err(|e| std::io::Error::other(e.to_string())).and_then(|t| writeln!(out, "{t}"))
                } else {
                    writeln!(
                        out,
                        "line {}: {} {}{}",
                        line.line,
                        line.effect.as_str(),
                        line.atom_id.as_deref().unwrap_or("-"),
                        line.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
                    )
                };
                let result = result.and_then(|()| out.flush());
                if let Err(error) = result {
                    progress_error.get_or_insert(error);
                }
            })?;
            if let Some(error) = progress_error {
                return Err(CliError::Output(error));
            }
            writeln!(
                err,
                "imported {} lines: {} applied, {} no_op, {} rejected",
                report.lines, report.applied, report.no_op, report.rejected
            )?;
            Ok(if report.rejected > 0 { Exit::Rejected } else { Exit::Ok })
        }
        Command::Sparql { file, format } => {
            let memory = memory_here()?;
            let text = if file.as_os_str() == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
                text
            } else {
                std::fs::read_to_string(&file).map_err(|source| CliError::Input { path: file.clone(), source })?
            };
            let accept = match format.as_str() {
                "json" => "application/sparql-results+json",
                "xml" => "application/sparql-results+xml",
                "csv" => "text/csv",
                "tsv" => "text/tab-separated-values",
                "turtle" => "text/turtle",
                "ntriples" => "application/n-triples",
                other => {
                    return Err(MemoryError::invalid(
                        "format",
                        format!("unknown format '{other}'; expected json, xml, csv, tsv, turtle or ntriples"),
                    )
                    .into());
                }
            };
            // Evaluated like the server does: in a worker process over a
            // read-only checkpoint, so the limits hold.
            let limits = crate::surface::sparql::Limits::default();
            let answer = match (memory.store().read_snapshot().map_err(MemoryError::from)?, std::env::current_exe()) {
                (Some(snapshot), Ok(worker)) => tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(
                    crate::surface::sparql::answer_isolated(&worker, snapshot.dir(), &caller.scope.tenant_id, &text, accept, limits),
                ),
                _ => crate::surface::sparql::answer(memory.store(), &caller.scope.tenant_id, &text, accept, limits),
            };
            match answer {
                Ok(answer) => {
                    out.write_all(&answer.body)?;
                    Ok(Exit::Ok)
                }
                Err(error @ crate::surface::sparql::SparqlError::NotAcceptable(_)) => Err(MemoryError::invalid(
                    "format",
                    format!("{error}: a SELECT/ASK query takes json, xml, csv or tsv; CONSTRUCT/DESCRIBE take turtle or ntriples"),
                )
                .into()),
                Err(error) => report_bad_input(&error.to_string(), None, json, out, err),
            }
        }
        Command::Brief { max_chars } => {
            let brief: crate::Brief = match &local {
                Some(memory) => memory.brief(&caller, BriefOptions { max_chars, ..BriefOptions::default() })?,
                None => relayed(shared, &caller, "agent_brief", serde_json::json!({ "max_chars": max_chars }))?,
            };
            if json {
                write_json(out, &brief)?;
            } else {
                write!(out, "{}", brief.text)?;
            }
            Ok(Exit::Ok)
        }
        Command::Audit { command: AuditCommand::Verify } => {
            let memory = memory_here()?;
            let results = memory.verify_audit(explicit_tenant.as_deref())?;
            let ok = results.iter().all(|r| r.first_broken.is_none());
            if json {
                let tenants: Vec<_> = results
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "tenant": r.tenant,
                            "entries": r.entries,
                            "ok": r.first_broken.is_none(),
                            "first_broken": r.first_broken.as_ref().map(|b| serde_json::json!({
                                "seq": b.seq, "entry": b.entry.map(|e| e.to_string()), "problem": b.problem,
                            })),
                        })
                    })
                    .collect();
                write_json(out, &serde_json::json!({ "ok": ok, "tenants": tenants }))?;
            } else {
                for r in &results {
                    match &r.first_broken {
                        None => writeln!(out, "tenant {}: {} entries, chain intact", r.tenant, r.entries)?,
                        Some(b) => writeln!(
                            out,
                            "tenant {}: BROKEN at entry #{} ({}): {}",
                            r.tenant,
                            b.seq,
                            b.entry.map(|e| e.to_string()).unwrap_or_default(),
                            b.problem
                        )?,
                    }
                }
                if results.is_empty() {
                    writeln!(out, "no audit entries yet")?;
                }
            }
            Ok(if ok { Exit::Ok } else { Exit::Rejected })
        }
    }
}
