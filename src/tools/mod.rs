//! The memory tools of SPEC §3 as data: argument types with JSON Schemas,
//! their decoding (a malformed call names the bad field), and one dispatcher
//! over [`Memory`]. The MCP server, the store relay and any other surface
//! that speaks "tool name + JSON arguments" adapt this module; none of them
//! re-implements a tool.
//!
//! **Invariant:** the `scope` argument never decides where a call acts. It is
//! decoded (so a malformed one is reported) and handed back to the surface,
//! which resolves the scope itself (see [`crate::scope`]).

pub(crate) mod relay;

use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::memory::{
    BriefOptions, Caller, CorrectAction, CorrectRequest, GovernAction, GovernRequest, HandoffRequest, MemorizeRequest, Memory, MemoryError,
};
use crate::recall::RecallRequest;

/// Tool names, in the order hosts list them.
pub(crate) const TOOL_NAMES: &[&str] =
    &["memory_memorize", "memory_recall", "memory_correct", "memory_govern", "memory_handoff", "memory_stats", "reflect"];

/// Why a tool call failed. `Invalid` is the caller's to fix (an MCP tool
/// result with `isError: true`); `Internal` is ours. Serialized (for the
/// relay) as `{"kind", "detail"}`: an internal tag alone cannot hold the
/// variants that carry only a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum ToolError {
    /// The arguments or the request cannot be carried out as sent.
    #[error("{message}")]
    Invalid {
        /// The argument at fault, when one is (`content`, `scope.branch`, …).
        field: Option<String>,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// No such tool.
    #[error("unknown tool '{0}'; the tools are {names}", names = TOOL_NAMES.join(", "))]
    UnknownTool(String),
    /// The caller may not do this (another owner, team or scope; a token
    /// without the needed scope).
    #[error("{0}")]
    Forbidden(String),
    /// The server failed; the request may be retried.
    #[error("internal error: {0}")]
    Internal(String),
    /// The store is out of reach or busy with other writers for now;
    /// nothing was written, retry.
    #[error("temporarily unavailable, nothing was written; retry: {0}")]
    Unavailable(String),
}

impl crate::fault::Classified for ToolError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            ToolError::Invalid { .. } | ToolError::UnknownTool(_) => crate::fault::Fault::Invalid,
            ToolError::Forbidden(_) => crate::fault::Fault::Forbidden,
            ToolError::Internal(_) => crate::fault::Fault::Internal,
            ToolError::Unavailable(_) => crate::fault::Fault::Unavailable,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            ToolError::Invalid { field, .. } => field.as_deref(),
            ToolError::UnknownTool(_) => Some("name"),
            _ => None,
        }
    }
}

impl From<MemoryError> for ToolError {
    fn from(error: MemoryError) -> ToolError {
        use crate::fault::{Classified, Fault};
        match error.fault() {
            Fault::Forbidden => ToolError::Forbidden(error.to_string()),
            Fault::Unavailable => {
                tracing::warn!(%error, "tool call refused: the store is unavailable");
                ToolError::Unavailable(error.to_string())
            }
            fault if fault.is_callers() => ToolError::Invalid { field: error.field().map(str::to_owned), message: error.to_string() },
            _ => {
                tracing::error!(%error, "tool call failed");
                ToolError::Internal(error.to_string())
            }
        }
    }
}

/// The optional `scope` every tool accepts (hosts' hooks inject it; agents
/// need not send it, and what a model sends is overwritten).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScopeInput {
    /// Tenant: the local user name (set by HMG, never by the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Workspace, usually the git remote owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Repository name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Set by `hmg hook pre-tool-use`: proves the scope came from the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
}

/// `memory_memorize` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemorizeArgs {
    /// The memory: one self-contained sentence, in the language of the conversation.
    pub content: String,
    /// Attribution: `user` (said by the user, more authoritative), `agent` (summarised by the agent) or a custom name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Injected by the hook; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeInput>,
}

/// `hmg memorize` arguments: memory_memorize's, plus what only the command
/// line sets (the kind, an expiry). Not an MCP tool: it travels between
/// local processes through the relay as `hmg_memorize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LocalMemorizeArgs {
    /// The memory.
    pub content: String,
    /// Attribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// fact (default), handoff, lesson, episode or reflection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// ISO 8601 time after which the memory expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `memory_recall` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallArgs {
    /// What to find: a noun phrase keeping the key entities (people, projects, technologies, file names), not a chatty question.
    pub query: String,
    /// Most results returned (default 10, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_results: Option<u32>,
    /// Also return negated memories (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_negated: Option<bool>,
    /// Return each retrieval stage's contribution per result (default false; for diagnosis).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<bool>,
    /// Injected by the hook; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeInput>,
}

/// A correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CorrectActionArg {
    /// Mark false and deactivate (there is no un-negate).
    Negate,
    /// Confirm as fact.
    ConfirmActual,
    /// Confirm as a hard constraint.
    ConfirmNecessary,
    /// Demote to a guess.
    Demote,
    /// Replace with `new_content` (a new atom; the old one stays in the evolution chain).
    Replace,
}

/// `memory_correct` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CorrectArgs {
    /// The atom to correct (an `atom_id` from memory_recall).
    pub target_atom: String,
    /// negate | confirm_actual | confirm_necessary | demote | replace.
    pub action: CorrectActionArg,
    /// Why; written to the audit chain.
    pub reason: String,
    /// The new content (required for replace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_content: Option<String>,
    /// Inherited from the target atom; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeInput>,
}

/// A lifecycle action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GovernActionArg {
    /// Out of recall, content kept, restorable.
    Quarantine,
    /// Undo a quarantine.
    Restore,
    /// Audit-only.
    Seal,
    /// Logical delete; the content is destroyed.
    Tombstone,
    /// A new redacted lesson (`lesson_content`) derived from the atom, which is sealed.
    DeriveLesson,
}

/// `memory_govern` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GovernArgs {
    /// The atom to govern.
    pub target_atom: String,
    /// quarantine | restore | seal | tombstone | derive_lesson.
    pub action: GovernActionArg,
    /// Why; written to the audit chain.
    pub reason: String,
    /// The redacted lesson (required for derive_lesson).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lesson_content: Option<String>,
    /// Inherited from the target atom; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeInput>,
}

/// `memory_handoff` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HandoffArgs {
    /// The handoff: what was done, why, how it was verified, risks, next steps.
    pub summary: String,
    /// Attribution (default `agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Injected by the hook; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeInput>,
}

/// `memory_stats` arguments (none besides the injected scope).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsArgs {
    /// Injected by the hook; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeInput>,
}

/// `reflect` arguments (seed 004). The hook injects the session's scope as
/// `bound_scope`: `scope` is the seed's narrowing filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReflectArgs {
    /// Comma-separated actions: summarize, promote, expire, decay, archive (default all; aliases summary, promotion, expiry, importance_decay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions_csv: Option<String>,
    /// Compute candidates and counts without writing (default false). Prefer true when reviewing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Positive look-back window in hours for summarize/promote (default 24); `since` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_window_hours: Option<f64>,
    /// ISO 8601 start of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// ISO 8601 end of the window (default now; also "now" for expire/decay/archive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// LIKE pattern over the logical path workspace/repository@branch (default %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_filter: Option<String>,
    /// Owner: % or yourself (default: the authenticated owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_filter: Option<String>,
    /// personal (tenant-wide memories), % (default) or a LIKE pattern over repository names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// Narrow to workspace/repository[@branch] inside your boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Team (workspace); must match your bound team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    /// Candidate budget (default 500, clamped to 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// Injected by the hook; do not send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_scope: Option<ScopeInput>,
}

impl ReflectArgs {
    /// The facade's request.
    pub(crate) fn request(&self) -> crate::memory::ReflectRequest {
        crate::memory::ReflectRequest {
            actions_csv: self.actions_csv.clone(),
            dry_run: self.dry_run.unwrap_or(false),
            time_window_hours: self.time_window_hours,
            since: self.since.clone(),
            until: self.until.clone(),
            path_filter: self.path_filter.clone(),
            owner_filter: self.owner_filter.clone(),
            bucket: self.bucket.clone(),
            scope: self.scope.clone(),
            team_id: self.team_id.clone(),
            limit: self.limit,
            fail_after_writes: None,
        }
    }
}

/// Arguments that were decoded, or the message naming what is wrong with
/// them. Its schema is `T`'s; decoding never fails at the protocol level, so
/// a malformed call becomes a tool error the model can read and fix.
#[derive(Debug, Clone)]
pub(crate) struct Checked<T>(pub Result<T, ToolError>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Checked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Checked<T>, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(Checked(decode(value)))
    }
}

impl<T: JsonSchema> JsonSchema for Checked<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// Decodes arguments; the error names the offending field.
pub(crate) fn decode<T: DeserializeOwned>(value: Value) -> Result<T, ToolError> {
    let value = match value {
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    if !value.is_object() {
        return Err(ToolError::Invalid { field: None, message: "arguments must be a JSON object".to_owned() });
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        // serde names a missing or unknown field in its message, not its path.
        let field = if path == "." { backticked(&inner) } else { Some(path) };
        let message = match &field {
            Some(field) if !inner.contains(&format!("`{field}`")) => format!("{field}: {inner}"),
            _ => inner,
        };
        ToolError::Invalid { field, message }
    })
}

/// The first `name` quoted in backticks in a serde message.
fn backticked(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(message[start..end].to_owned())
}

/// The JSON Schema of what `T` serializes to (an output schema: fields
/// skipped when empty are optional) as an MCP schema object, with every
/// subschema inline: clients validate each structured result against it,
/// and the MCP Python SDK's validator resolved a `$ref` per recalled
/// memory (10 results: 1.40 → 0.76 ms of every `memory_recall` call at
/// the client).
pub(crate) fn output_schema_of<T: JsonSchema>() -> Arc<Map<String, Value>> {
    schema_with::<T>(schemars::generate::SchemaSettings::draft2020_12().for_serialize())
}

/// The JSON Schema of what `T` accepts (an input schema), with every
/// subschema inline: several MCP hosts do not resolve `$ref` in a tool's
/// input schema (GitHub Copilot CLI, Kiro, opencode, LM Studio; "can't
/// resolve reference #/$defs/…"), and either list no tools or cannot build
/// the arguments.
pub(crate) fn schema_of<T: JsonSchema>() -> Arc<Map<String, Value>> {
    schema_with::<T>(schemars::generate::SchemaSettings::draft2020_12().for_deserialize())
}

/// `T`'s schema under `settings`, every subschema inline (both kinds of
/// schema want it, see above).
fn schema_with<T: JsonSchema>(mut settings: schemars::generate::SchemaSettings) -> Arc<Map<String, Value>> {
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    match serde_json::to_value(schema) {
        Ok(mut value) => {
            strip_integer_formats(&mut value);
            match value {
                Value::Object(map) => Arc::new(map),
                _ => Arc::new(Map::new()),
            }
        }
        Err(_) => Arc::new(Map::new()),
    }
}

/// Removes schemars' `uint32`-style formats: they are not JSON Schema
/// formats, and validators (the MCP Inspector's among them) warn about each.
/// The `minimum` next to them still says what they meant.
pub(crate) fn strip_integer_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("format").and_then(Value::as_str).is_some_and(|f| f.starts_with("uint") || f.starts_with("int")) {
                map.remove("format");
            }
            map.values_mut().for_each(strip_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_integer_formats),
        _ => {}
    }
}

/// A memorize request for `content`, attributed to `source` when given.
fn memorize_request(content: String, source: Option<String>) -> MemorizeRequest {
    let request = MemorizeRequest::new(content);
    match source {
        Some(source) => request.with_source(source),
        None => request,
    }
}

/// A decoded call of one tool.
#[derive(Debug, Clone)]
pub(crate) enum ToolCall {
    /// memory_memorize.
    Memorize(MemorizeArgs),
    /// `hmg memorize` (any kind, an expiry; not an MCP tool).
    LocalMemorize(LocalMemorizeArgs),
    /// memory_recall.
    Recall(RecallArgs),
    /// memory_correct.
    Correct(CorrectArgs),
    /// memory_govern.
    Govern(GovernArgs),
    /// memory_handoff.
    Handoff(HandoffArgs),
    /// memory_stats.
    Stats(StatsArgs),
    /// reflect.
    Reflect(ReflectArgs),
    /// The session-start brief (for hooks; not an MCP tool).
    Brief {
        /// Upper bound on the text, in characters.
        max_chars: usize,
    },
}

impl ToolCall {
    /// Decodes `arguments` for the tool `name`.
    pub(crate) fn decode(name: &str, arguments: Value) -> Result<ToolCall, ToolError> {
        Ok(match name {
            "memory_memorize" => ToolCall::Memorize(decode(arguments)?),
            "hmg_memorize" => ToolCall::LocalMemorize(decode(arguments)?),
            "memory_recall" => ToolCall::Recall(decode(arguments)?),
            "memory_correct" => ToolCall::Correct(decode(arguments)?),
            "memory_govern" => ToolCall::Govern(decode(arguments)?),
            "memory_handoff" => ToolCall::Handoff(decode(arguments)?),
            "memory_stats" => ToolCall::Stats(decode(arguments)?),
            "reflect" => ToolCall::Reflect(decode(arguments)?),
            "agent_brief" => {
                let max_chars = arguments.get("max_chars").and_then(Value::as_u64).unwrap_or(BriefOptions::default().max_chars as u64);
                ToolCall::Brief { max_chars: usize::try_from(max_chars).unwrap_or(usize::MAX) }
            }
            other => return Err(ToolError::UnknownTool(other.to_owned())),
        })
    }

    /// The tool's name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ToolCall::Memorize(_) => "memory_memorize",
            ToolCall::LocalMemorize(_) => "hmg_memorize",
            ToolCall::Recall(_) => "memory_recall",
            ToolCall::Correct(_) => "memory_correct",
            ToolCall::Govern(_) => "memory_govern",
            ToolCall::Handoff(_) => "memory_handoff",
            ToolCall::Stats(_) => "memory_stats",
            ToolCall::Reflect(_) => "reflect",
            ToolCall::Brief { .. } => "agent_brief",
        }
    }

    /// The scope the arguments carried, if any (for the surface to judge).
    pub(crate) fn scope(&self) -> Option<&ScopeInput> {
        match self {
            ToolCall::Memorize(a) => a.scope.as_ref(),
            ToolCall::LocalMemorize(_) => None,
            ToolCall::Recall(a) => a.scope.as_ref(),
            ToolCall::Correct(a) => a.scope.as_ref(),
            ToolCall::Govern(a) => a.scope.as_ref(),
            ToolCall::Handoff(a) => a.scope.as_ref(),
            ToolCall::Stats(a) => a.scope.as_ref(),
            ToolCall::Reflect(a) => a.bound_scope.as_ref(),
            ToolCall::Brief { .. } => None,
        }
    }

    /// Re-encodes the call (for relaying it to another process).
    pub(crate) fn arguments(&self) -> Value {
        let value = match self {
            ToolCall::Memorize(a) => serde_json::to_value(a),
            ToolCall::LocalMemorize(a) => serde_json::to_value(a),
            ToolCall::Recall(a) => serde_json::to_value(a),
            ToolCall::Correct(a) => serde_json::to_value(a),
            ToolCall::Govern(a) => serde_json::to_value(a),
            ToolCall::Handoff(a) => serde_json::to_value(a),
            ToolCall::Stats(a) => serde_json::to_value(a),
            ToolCall::Reflect(a) => serde_json::to_value(a),
            ToolCall::Brief { max_chars } => Ok(serde_json::json!({ "max_chars": max_chars })),
        };
        value.unwrap_or(Value::Null)
    }

    /// Whether the tool changes memory (a reflect dry run does not).
    pub(crate) fn writes(&self) -> bool {
        match self {
            ToolCall::Recall(_) | ToolCall::Stats(_) | ToolCall::Brief { .. } => false,
            ToolCall::Reflect(a) => !a.dry_run.unwrap_or(false),
            _ => true,
        }
    }

    /// Runs the call for `caller` (whose scope the surface resolved) and
    /// returns the tool's structured output.
    pub(crate) fn run(self, memory: &Memory, caller: &Caller) -> Result<Value, ToolError> {
        let span = tracing::info_span!("tool", tool = self.name(), tenant = %caller.scope.tenant_id, actor = %caller.actor);
        let _entered = span.enter();
        let value = match self {
            ToolCall::Memorize(a) => serde_json::to_value(memory.memorize(caller, memorize_request(a.content, a.source))?),
            ToolCall::LocalMemorize(a) => {
                let mut request = memorize_request(a.content, a.source);
                if let Some(kind) = a.kind {
                    let kind = kind.parse::<crate::atom::Kind>().map_err(|e| MemoryError::invalid("kind", e.to_string()))?;
                    request = request.with_kind(kind);
                }
                request.expires_at = a.expires_at.as_deref().map(|t| crate::memory::parse_iso8601("expires_at", t)).transpose()?;
                serde_json::to_value(memory.memorize(caller, request)?)
            }
            ToolCall::Recall(a) => {
                let request = RecallRequest {
                    max_results: a.max_results.map_or(10, |n| n as usize),
                    include_negated: a.include_negated.unwrap_or(false),
                    explain: a.explain.unwrap_or(false),
                    ..RecallRequest::new(a.query)
                };
                serde_json::to_value(memory.recall(caller, request)?)
            }
            ToolCall::Correct(a) => {
                let action = match a.action {
                    CorrectActionArg::Negate => CorrectAction::Negate,
                    CorrectActionArg::ConfirmActual => CorrectAction::ConfirmActual,
                    CorrectActionArg::ConfirmNecessary => CorrectAction::ConfirmNecessary,
                    CorrectActionArg::Demote => CorrectAction::Demote,
                    CorrectActionArg::Replace => CorrectAction::Replace,
                };
                let request = CorrectRequest { target_atom: a.target_atom, action, reason: a.reason, new_content: a.new_content };
                serde_json::to_value(memory.correct(caller, request)?)
            }
            ToolCall::Govern(a) => {
                let action = match a.action {
                    GovernActionArg::Quarantine => GovernAction::Quarantine,
                    GovernActionArg::Restore => GovernAction::Restore,
                    GovernActionArg::Seal => GovernAction::Seal,
                    GovernActionArg::Tombstone => GovernAction::Tombstone,
                    GovernActionArg::DeriveLesson => GovernAction::DeriveLesson,
                };
                let request = GovernRequest { target_atom: a.target_atom, action, reason: a.reason, lesson_content: a.lesson_content };
                serde_json::to_value(memory.govern(caller, request)?)
            }
            ToolCall::Handoff(a) => serde_json::to_value(memory.handoff(caller, HandoffRequest { summary: a.summary, source: a.source })?),
            ToolCall::Stats(_) => serde_json::to_value(memory.stats(caller)?),
            ToolCall::Reflect(a) => serde_json::to_value(memory.reflect(caller, a.request())?),
            ToolCall::Brief { max_chars } => {
                let options = BriefOptions { max_chars, ..BriefOptions::default() };
                serde_json::to_value(memory.brief(caller, options)?)
            }
        };
        value.map_err(|e| ToolError::Internal(format!("cannot encode the result: {e}")))
    }

    /// Runs calls that arrived together, each for its caller, answering
    /// each as [`ToolCall::run`] would: the `memory_memorize` calls through
    /// [`Memory::memorize_calls`] (each caller's new memories embedded and
    /// written together), any other call on its own.
    pub(crate) fn run_burst(memory: &Memory, calls: Vec<(ToolCall, Caller)>) -> Vec<Result<Value, ToolError>> {
        let mut answers: Vec<(usize, Result<Value, ToolError>)> = Vec::with_capacity(calls.len());
        let mut memorize: Vec<(usize, (Caller, MemorizeRequest))> = Vec::new();
        for (at, (call, caller)) in calls.into_iter().enumerate() {
            match call {
                ToolCall::Memorize(a) => memorize.push((at, (caller, memorize_request(a.content, a.source)))),
                other => answers.push((at, other.run(memory, &caller))),
            }
        }
        let (at, memorize): (Vec<usize>, Vec<(Caller, MemorizeRequest)>) = memorize.into_iter().unzip();
        let outcomes = memory
            .memorize_calls(memorize)
            .into_iter()
            .map(|outcome| serde_json::to_value(outcome?).map_err(|e| ToolError::Internal(format!("cannot encode the result: {e}"))));
        answers.extend(at.into_iter().zip(outcomes));
        answers.sort_by_key(|(at, _)| *at);
        answers.into_iter().map(|(_, answer)| answer).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_call_names_the_field() {
        let cases = [
            (serde_json::json!({}), "content"),
            (serde_json::json!({"content": 5}), "content"),
            (serde_json::json!({"content": "x", "sauce": "user"}), "sauce"),
            (serde_json::json!({"content": "x", "scope": {"branch": 3}}), "scope.branch"),
        ];
        for (arguments, field) in cases {
            match ToolCall::decode("memory_memorize", arguments.clone()) {
                Err(ToolError::Invalid { field: Some(f), message }) => {
                    assert_eq!(f, field, "{arguments}: {message}");
                    assert!(message.contains(field), "{message}");
                }
                other => panic!("{arguments}: {other:?}"),
            }
        }
        match ToolCall::decode("memory_correct", serde_json::json!({"target_atom": "x", "action": "undo", "reason": "r"})) {
            Err(ToolError::Invalid { field: Some(f), message }) => {
                assert_eq!(f, "action");
                assert!(message.contains("negate"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Every error crosses the relay: each kind survives JSON both ways.
    #[test]
    fn every_tool_error_round_trips_through_json() {
        let errors = [
            ToolError::Invalid { field: Some("content".to_owned()), message: "empty".to_owned() },
            ToolError::Invalid { field: None, message: "malformed".to_owned() },
            ToolError::UnknownTool("memory_teleport".to_owned()),
            ToolError::Forbidden("another owner's atom".to_owned()),
            ToolError::Internal("a bug".to_owned()),
            ToolError::Unavailable("the store is busy".to_owned()),
        ];
        for error in errors {
            let json = serde_json::to_string(&error).unwrap_or_else(|e| panic!("{error:?}: {e}"));
            assert_eq!(serde_json::from_str::<ToolError>(&json).unwrap(), error, "{json}");
        }
    }

    #[test]
    fn schemas_make_only_the_seed_fields_required() {
        let schema = schema_of::<CorrectArgs>();
        let required: Vec<&str> = schema["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(required, ["target_atom", "action", "reason"]);
        let schema = schema_of::<StatsArgs>();
        assert!(schema.get("required").is_none_or(|r| r.as_array().is_some_and(Vec::is_empty)));
    }
}
