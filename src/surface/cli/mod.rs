//! The `hmg` command line: [`args`] (clap definitions), [`tools`] (the
//! tool-shaped commands, through the same dispatcher as MCP, locally or
//! relayed), [`store`] (commands that need the store in this process),
//! [`render`] (answers as JSON or text), [`eval`]. The binary only parses,
//! sets up tracing and calls [`run`].
//!
//! Contract (scripts rely on it): `--json` prints one JSON document on stdout
//! with the fields of the matching MCP tool; the exit status follows the
//! error's [`crate::Fault`]: 0 on success (including `no_op`), 2 for the
//! caller's error — a rejected or invalid request, an unknown id, a missing
//! permission (`{"error", "field"}` with `--json`) — and 1 for failures on
//! HMG's side.

mod args;
pub(crate) mod eval;
mod render;
mod store;
mod tools;

use std::io::Write;
use std::path::PathBuf;

pub use args::Cli;
pub(crate) use args::{Command, HookCommand, ScopeArgs, TokenCommand};
use render::{Output, write_json};

use crate::fault::{Classified, Fault};
use crate::{Caller, MemoryError};

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
    // Commands that embed prepare the models while the store and indexes
    // open (a cold `hmg recall` at 10k memories: 0.27–0.32 → 0.22–0.26 s);
    // the others never load them.
    let embeds = matches!(
        cli.command,
        Command::Mcp
            | Command::Serve { .. }
            | Command::Recall { .. }
            | Command::Memorize { .. }
            | Command::Import { .. }
            | Command::Handoff { .. }
    );
    // One-shot reads park their recall usage rather than commit it at exit
    // (a cold `hmg recall` at 10k memories: 189 → 153 ms; see memory/usage.rs).
    let park_usage = matches!(cli.command, Command::Recall { .. } | Command::Hook { command: HookCommand::SessionStart });
    // Servers commit due usage stamps after answering (see `tools::relay`).
    let defer_usage = matches!(cli.command, Command::Mcp | Command::Serve { .. });
    // The HTTP server's writes come in batches (a REST add's facts): its
    // models prepare the tiles at start, not at the first add (~80 ms).
    let batches = matches!(cli.command, Command::Serve { .. });
    let options =
        memory_options(&cli)?.with_warm_up(embeds).with_warm_batches(batches).with_park_usage(park_usage).with_defer_usage(defer_usage);
    if matches!(cli.command, Command::Mcp | Command::Serve { .. } | Command::Hook { .. }) {
        return serve(cli, options, out);
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
    let shared = crate::tools::relay::SharedMemory::open(&dir, options)?;
    let exit = dispatch(cli.command, &shared, &caller, explicit_tenant, json, out, err)?;
    shared.flush()?;
    Ok(exit)
}

/// The options every command opens the memory with: the remote store, if
/// one is named.
fn memory_options(cli: &Cli) -> Result<crate::MemoryOptions, CliError> {
    let remote = cli.remote.config().map_err(|message| MemoryError::invalid("store_url", message))?;
    Ok(crate::MemoryOptions { remote, ..crate::MemoryOptions::default() })
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
fn serve(cli: Cli, options: crate::MemoryOptions, out: &mut dyn Write) -> Result<Exit, CliError> {
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
            let shared = crate::tools::relay::SharedMemory::open(&dir, options.clone())?;
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
            let shared = std::sync::Arc::new(crate::tools::relay::SharedMemory::open(&dir, options.clone())?);
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
            let shared = std::sync::Arc::new(crate::tools::relay::SharedMemory::open(&dir, options.clone())?);
            let options = crate::surface::http::ServeOptions {
                allowed_hosts: allow_hosts,
                allowed_origins: allow_origins,
                sparql_worker: std::env::current_exe().ok(),
                shutdown_grace: std::time::Duration::from_secs(shutdown_grace_secs),
                node_secret: cli.remote.node_secret.clone().filter(|_| cli.remote.store_url.is_some() && cli.remote.store_writer.is_none()),
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

/// The commands that act on memory: tool-shaped ones through the shared
/// dispatcher, store commands on the store held here.
fn dispatch(
    command: Command,
    shared: &crate::tools::relay::SharedMemory,
    caller: &Caller,
    explicit_tenant: Option<String>,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Exit, CliError> {
    if store::needs_store(&command) {
        let memory = shared.local().ok_or_else(|| CliError::InUse(shared.dir().to_path_buf()))?;
        let mut output = Output { json, out, err };
        return Ok(store::run(command, &memory, caller, explicit_tenant.as_deref(), &mut output)?.unwrap_or(Exit::Ok));
    }
    // `execute` runs the other commands (eval, serve, token, …) before any
    // store is opened, so they never reach this dispatcher.
    Ok(tools::run(command, shared, caller, json, out, err)?.unwrap_or(Exit::Ok))
}
