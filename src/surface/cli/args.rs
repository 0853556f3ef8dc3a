//! The command line's arguments (clap): global options, scope overrides and
//! every subcommand with its help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// A remote SPARQL 1.1 store instead of the embedded one.
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// Scope overrides (by default inferred from the working directory).
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// A remote SPARQL 1.1 store shared by many HMG nodes (see README, "Scaling
/// out"). With it, `--store` is this node's own directory (its indexes,
/// tokens and keys); the memories live in the remote store.
#[derive(Args, Default, Clone)]
pub struct RemoteArgs {
    /// SPARQL query endpoint of a shared store (e.g. http://127.0.0.1:8890/sparql-auth).
    #[arg(long, global = true, env = "HMG_STORE_URL", value_name = "URL")]
    pub store_url: Option<String>,
    /// SPARQL update endpoint, when it differs from the query endpoint.
    #[arg(long, global = true, env = "HMG_STORE_UPDATE_URL", value_name = "URL")]
    pub store_update_url: Option<String>,
    /// User for the store (HTTP Basic or Digest, as the store asks).
    #[arg(long, global = true, env = "HMG_STORE_USER", value_name = "USER")]
    pub store_user: Option<String>,
    /// Password for the store (prefer the environment variable).
    #[arg(long, global = true, env = "HMG_STORE_PASSWORD", value_name = "PASSWORD", hide_env_values = true)]
    pub store_password: Option<String>,
    /// Bearer token for the store (instead of a user and password).
    #[arg(long, global = true, env = "HMG_STORE_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub store_token: Option<String>,
    /// Longest wait for one request to the store, in seconds.
    #[arg(long, global = true, env = "HMG_STORE_TIMEOUT_SECS", value_name = "SECONDS", default_value_t = 30)]
    pub store_timeout_secs: u64,
    /// The writer node (`http://host:port` of its `hmg serve`) that commits
    /// for every node: needed when the store does not isolate concurrent
    /// updates (Virtuoso). The writer node itself runs without it.
    #[arg(long, global = true, env = "HMG_STORE_WRITER", value_name = "URL")]
    pub store_writer: Option<String>,
    /// The secret nodes share to relay commits to the writer node (and the
    /// writer node to accept them).
    #[arg(long, global = true, env = "HMG_NODE_SECRET", value_name = "SECRET", hide_env_values = true)]
    pub node_secret: Option<String>,
}

impl std::fmt::Debug for RemoteArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteArgs")
            .field("store_url", &self.store_url)
            .field("store_update_url", &self.store_update_url)
            .field("store_user", &self.store_user)
            .field("store_password", &self.store_password.as_ref().map(|_| "…"))
            .field("store_token", &self.store_token.as_ref().map(|_| "…"))
            .field("store_timeout_secs", &self.store_timeout_secs)
            .field("store_writer", &self.store_writer)
            .field("node_secret", &self.node_secret.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RemoteArgs {
    /// The remote store configuration, if a URL is given.
    pub(crate) fn config(&self) -> Result<Option<crate::store::RemoteConfig>, String> {
        let Some(url) = &self.store_url else {
            if self.store_update_url.is_some() || self.store_user.is_some() || self.store_token.is_some() {
                return Err("--store-update-url, --store-user and --store-token need --store-url".to_owned());
            }
            return Ok(None);
        };
        let credentials = match (&self.store_user, &self.store_password, &self.store_token) {
            (Some(_), _, Some(_)) => return Err("give either --store-user/--store-password or --store-token, not both".to_owned()),
            (Some(user), Some(password), None) => {
                crate::store::remote::Credentials::Password { user: user.clone(), password: password.clone() }
            }
            (Some(_), None, None) => return Err("--store-user needs a password (HMG_STORE_PASSWORD)".to_owned()),
            (None, _, Some(token)) => crate::store::remote::Credentials::Bearer(token.clone()),
            (None, _, None) => crate::store::remote::Credentials::None,
        };
        Ok(Some(crate::store::RemoteConfig {
            query_url: url.clone(),
            update_url: self.store_update_url.clone(),
            credentials,
            timeout: std::time::Duration::from_secs(self.store_timeout_secs.max(1)),
            writer: self.store_writer.clone(),
            node_secret: self.node_secret.clone(),
        }))
    }
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
    /// Copy the whole store (every tenant, audit chains included) into an
    /// empty store: a SPARQL endpoint or an embedded store directory.
    Migrate {
        /// The target: http(s)://… (a SPARQL 1.1 store) or a directory.
        #[arg(long, value_name = "URL|DIR")]
        to: String,
        /// The target's update endpoint, when it differs.
        #[arg(long, value_name = "URL")]
        to_update_url: Option<String>,
        /// User for the target store.
        #[arg(long, env = "HMG_TO_USER", value_name = "USER")]
        to_user: Option<String>,
        /// Password for the target store (prefer the environment variable).
        #[arg(long, env = "HMG_TO_PASSWORD", value_name = "PASSWORD", hide_env_values = true)]
        to_password: Option<String>,
        /// Bearer token for the target store.
        #[arg(long, env = "HMG_TO_TOKEN", value_name = "TOKEN", hide_env_values = true)]
        to_token: Option<String>,
    },
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
