//! The mem0-style REST API ("MemoryVG", seed 003, SPEC §7) under
//! `/api/v1/hetamem/vg`, an adapter over the facade like every surface.
//!
//! Scopes: `user_id` → workspace, `agent_id` → repository, `run_id` →
//! branch, inside the tenant of the caller's token (the local user on a
//! loopback server without tokens). A request sees exactly the memories
//! written with the same `user_id` and `agent_id` (an absent one included);
//! `run_id` narrows to one run, and without it every run is seen. Writes
//! acting on an id check it against the ids given, when any are.
//!
//! Ids are atom ULIDs. An id names its evolution chain: GET, PUT, DELETE
//! and history act on the chain's current memory, so an id a client kept
//! from before an update still works (responses carry the current id).
//!
//! PUT is `memory_correct` replace (the old text stays in the chain); DELETE
//! is `memory_correct` negate (out of search and lists, content and history
//! kept), or with `?purge=true` `memory_govern` tombstone of every version
//! (content destroyed, audit trail kept). `DELETE /` negates every active
//! memory of the scope.
//!
//! **Invariants:** no handler writes except through the facade; every
//! error is a JSON `{"detail", "field"}` with a 4xx status (5xx only when
//! the store fails); the OpenAPI document is generated from the same types
//! that decode the requests and is checked in as `schema/openapi.json`.

use crate::fault::{Classified, Fault};
use crate::surface::status;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::atom::{AtomId, Status, parse_atom_id};
use crate::extract::{Extractor, Message};
use crate::memory::{
    AtomFilter, AtomView, Caller, CorrectAction, CorrectRequest, Effect, MAX_PAGE, MemorizeRequest, Memory, MemoryError, MergeEvent,
    MergeResult,
};
use crate::recall::RecallRequest;
use crate::scope::{Scope, ScopeError};
use crate::surface::token::Principal;
use crate::tools::relay::SharedMemory;

/// Where the API is mounted.
pub(crate) const BASE: &str = "/api/v1/hetamem/vg";
/// Most messages in one add.
pub(crate) const MAX_MESSAGES: usize = 200;

/// `user_id`, `agent_id`, `run_id`: which memories a request is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScopeIds {
    /// The user (HMG workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The agent (HMG repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The run or session (HMG branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl ScopeIds {
    fn any(&self) -> bool {
        [&self.user_id, &self.agent_id, &self.run_id].iter().any(|v| v.as_deref().is_some_and(|s| !s.trim().is_empty()))
    }

    /// The HMG scope these ids select in `tenant`.
    fn scope(&self, tenant: &str) -> Result<Scope, ApiError> {
        let scope = Scope {
            tenant_id: tenant.to_owned(),
            workspace: self.user_id.clone(),
            repository: self.agent_id.clone(),
            branch: self.run_id.clone(),
        };
        scope.normalized().map_err(|error| {
            let field = match &error {
                ScopeError::TooLong { field } | ScopeError::ControlCharacters { field } => match *field {
                    "workspace" => "user_id",
                    "repository" => "agent_id",
                    "branch" => "run_id",
                    other => other,
                },
                ScopeError::EmptyTenant => "tenant",
            };
            let message = error
                .to_string()
                .replace("scope.workspace", "user_id")
                .replace("scope.repository", "agent_id")
                .replace("scope.branch", "run_id");
            ApiError::bad(Some(field), message)
        })
    }
}

/// A `user_id`, `agent_id` or `run_id`: 1–200 characters, not blank, no
/// control characters (as `Scope::normalized` checks).
/// `null` is accepted as absent.
fn id_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["string", "null"],
        "minLength": 1,
        "maxLength": crate::scope::MAX_SCOPE_COMPONENT_CHARS,
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*\\S[^\\u0000-\\u001f\\u007f-\\u009f]*$",
    })
}

/// `POST /add`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("anyOf" = [
    {"required": ["user_id"], "properties": {"user_id": {"type": "string"}}},
    {"required": ["agent_id"], "properties": {"agent_id": {"type": "string"}}},
    {"required": ["run_id"], "properties": {"run_id": {"type": "string"}}},
]))]
pub(crate) struct AddRequest {
    /// The conversation, in chat-completions format. A single assistant
    /// message caches an answer.
    #[schemars(length(min = 1, max = 200))]
    pub messages: Vec<Message>,
    /// The user.
    #[serde(default)]
    #[schemars(schema_with = "id_schema")]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default)]
    #[schemars(schema_with = "id_schema")]
    pub agent_id: Option<String>,
    /// The run.
    #[serde(default)]
    #[schemars(schema_with = "id_schema")]
    pub run_id: Option<String>,
    /// Extract facts and merge them (default true); false stores each
    /// message's text as it is.
    #[serde(default)]
    pub infer: Option<bool>,
    /// Decide and explain without writing: each result says what would
    /// happen and why (the slot, the cue, the memory matched).
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// `POST /add` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct AddResponse {
    /// One entry per fact: ADD, UPDATE, DELETE or NONE.
    pub results: Vec<MergeResult>,
    /// Set when the configured extraction endpoint failed and the built-in
    /// extractor answered instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `POST /search`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("anyOf" = [
    {"required": ["user_id"], "properties": {"user_id": {"type": "string"}}},
    {"required": ["agent_id"], "properties": {"agent_id": {"type": "string"}}},
    {"required": ["run_id"], "properties": {"run_id": {"type": "string"}}},
]))]
pub(crate) struct SearchRequest {
    /// What to find, in any language.
    #[schemars(length(min = 1, max = 2000), extend("pattern" = "\\S"))]
    pub query: String,
    /// The user.
    #[serde(default)]
    #[schemars(schema_with = "id_schema")]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default)]
    #[schemars(schema_with = "id_schema")]
    pub agent_id: Option<String>,
    /// The run.
    #[serde(default)]
    #[schemars(schema_with = "id_schema")]
    pub run_id: Option<String>,
    /// Most results (default 10, 1–100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
    /// Drop results scoring below this (0–1).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub threshold: Option<f32>,
}

/// One search result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct SearchHit {
    /// Memory id (atom ULID).
    pub id: String,
    /// The fact.
    pub memory: String,
    /// Relevance, 0–1 (≥ 0.85: high confidence).
    pub score: f32,
    /// RFC 3339.
    pub created_at: String,
}

/// `POST /search` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct SearchResponse {
    /// Best first.
    pub results: Vec<SearchHit>,
}

/// A stored memory.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct MemoryItem {
    /// Memory id (the current version's atom ULID).
    pub id: String,
    /// The fact.
    pub memory: String,
    /// RFC 3339 creation time of this version.
    pub created_at: String,
    /// `active`, or `negated` once deleted.
    pub status: String,
    /// The user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl MemoryItem {
    fn of(view: &AtomView) -> MemoryItem {
        MemoryItem {
            id: view.atom_id.clone(),
            memory: view.content.clone(),
            created_at: view.created_at.clone(),
            status: view.status.as_str().to_owned(),
            user_id: view.scope.workspace.clone(),
            agent_id: view.scope.repository.clone(),
            run_id: view.scope.branch.clone(),
        }
    }
}

/// The query string of every route but add and search.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub(crate) struct RouteQuery {
    /// The user (on one memory: the user it must belong to).
    #[serde(default)]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The run.
    #[serde(default)]
    pub run_id: Option<String>,
    /// List: page size (default 100, 1–200).
    #[serde(default)]
    pub limit: Option<u32>,
    /// List: `next_cursor` of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    /// DELETE of one memory: destroy the content of every version
    /// (tombstone) instead of marking the memory deleted.
    #[serde(default)]
    pub purge: Option<bool>,
}

impl RouteQuery {
    fn ids(&self) -> ScopeIds {
        ScopeIds { user_id: self.user_id.clone(), agent_id: self.agent_id.clone(), run_id: self.run_id.clone() }
    }
}

/// `GET /` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ListResponse {
    /// Newest first.
    pub results: Vec<MemoryItem>,
    /// Pass as `after` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `PUT /{memory_id}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateRequest {
    /// The new text.
    #[schemars(length(min = 1, max = 4000), extend("pattern" = "\\S"))]
    pub data: String,
}

/// Answer of PUT and DELETE.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ChangeResponse {
    /// What happened, in words.
    pub message: String,
    /// The memory now (PUT: the new version's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// UPDATE or DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<MergeEvent>,
    /// PUT: the new text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// PUT: the text it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_memory: Option<String>,
    /// DELETE /: how many memories were deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<usize>,
}

/// One event of a memory's history.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct HistoryEvent {
    /// The audit entry.
    pub id: String,
    /// The version the event is about (ADD, UPDATE: the new one).
    pub memory_id: String,
    /// ADD, UPDATE or DELETE.
    pub event: MergeEvent,
    /// Text before (UPDATE, DELETE).
    pub old_memory: Option<String>,
    /// Text after (ADD, UPDATE).
    pub new_memory: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// Who.
    pub actor: String,
    /// Why.
    pub reason: Option<String>,
}

/// An error.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ErrorBody {
    /// What is wrong and how to fix it.
    pub detail: String,
    /// The request field at fault, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// A failed request.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, field: Option<&str>, detail: impl Into<String>) -> ApiError {
        ApiError { status, body: ErrorBody { detail: detail.into(), field: field.map(str::to_owned) } }
    }

    fn bad(field: Option<&str>, detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, field, detail)
    }

    fn not_found(id: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, Some("memory_id"), format!("no memory {id} here"))
    }
}

impl ApiError {
    /// The one mapping of an error to a REST answer: its fault's status
    /// (not found names `memory_id`, the only id a route takes).
    fn classified(error: &dyn Classified) -> ApiError {
        let fault = error.fault();
        let field = error.field().or((fault == Fault::NotFound).then_some("memory_id"));
        if !fault.is_callers() {
            tracing::error!(%error, "REST request failed");
        }
        let detail = if fault == Fault::Internal { format!("internal error: {error}") } else { error.to_string() };
        ApiError::new(status::http_status(fault), field, detail)
    }
}

impl From<MemoryError> for ApiError {
    fn from(error: MemoryError) -> ApiError {
        ApiError::classified(&error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        status::ask_to_retry((self.status, axum::Json(self.body)).into_response())
    }
}

type ApiResult<T> = Result<axum::Json<T>, ApiError>;

/// Builds, in the background, what the first add would build at first
/// use (the extraction rules, the merge's readings of facts, the
/// redaction patterns): the first add after a start took ~85 ms more
/// than the next ones. The models' batch warm-up runs beside it.
pub(crate) fn warm_up(shared: &Arc<SharedMemory>) {
    let Some(memory) = shared.local() else { return };
    let warm = move || {
        let started = std::time::Instant::now();
        let messages: Vec<Message> = [
            "Hi! I moved to Porto last May and I run 5 km every Sunday with Ana. My token is sk-warmupwarmupwarmupwarmup00.",
            "我每周日和老李跑五公里，我们买了一辆蓝色的自行车。",
            "毎週日曜日に田中さんと5キロ走ります。京都で第3回のワークショップに参加しました。",
        ]
        .iter()
        .map(|text| Message { role: "user".to_owned(), content: (*text).to_owned() })
        .collect();
        if let Ok(extraction) = crate::extract::extract_with_fallback(None, &messages) {
            memory.warm_up_merge(&extraction.facts);
        }
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "REST add ready");
    };
    if let Err(error) = std::thread::Builder::new().name("hmg-warm-add".into()).spawn(warm) {
        tracing::warn!(%error, "could not prepare the REST add in the background; the first add does");
    }
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct RestState {
    shared: Arc<SharedMemory>,
    extractor: Option<Arc<dyn Extractor>>,
}

impl RestState {
    /// Over `shared`, with the extraction endpoint configured in the
    /// environment, if any (see [`crate::extract::EndpointConfig`]).
    pub(crate) fn new(shared: Arc<SharedMemory>) -> Result<RestState, crate::extract::ExtractError> {
        let extractor = crate::extract::EndpointConfig::from_env()?.map(|config| {
            tracing::info!(?config, "REST add extracts facts with an OpenAI-compatible endpoint");
            Arc::new(crate::extract::OpenAiExtractor::new(config)) as Arc<dyn Extractor>
        });
        Ok(RestState { shared, extractor })
    }
}

/// The API's routes, under [`BASE`] (the list also with a trailing slash).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(state: RestState) -> Router<S> {
    Router::new()
        .route(BASE, get(list).delete(delete_all))
        .route(&format!("{BASE}/"), get(list).delete(delete_all))
        .route(&format!("{BASE}/add"), post(add))
        .route(&format!("{BASE}/search"), post(search))
        .route(&format!("{BASE}/openapi.json"), get(openapi_json))
        .route(&format!("{BASE}/{{memory_id}}"), get(get_one).put(update).delete(delete_one))
        .route(&format!("{BASE}/{{memory_id}}/history"), get(history))
        .with_state(state)
}

/// The principal's memory, for reading (`write` false) or writing.
fn access(state: &RestState, principal: &Principal, write: bool) -> Result<Arc<Memory>, ApiError> {
    principal.require(write, "this route").map_err(|denied| ApiError::classified(&denied))?;
    state.shared.local().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "the store is open in another hmg process; the REST API is served by the process that owns it",
        )
    })
}

/// Runs facade work on the shared bounded pool ([`crate::surface::blocking`]): a
/// full pool is 429, a deadline 503, a panic 500.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    match crate::surface::blocking::run(crate::surface::blocking::DEFAULT_DEADLINE, work).await {
        Ok(result) => result,
        Err(refused) => Err(ApiError::classified(&refused)),
    }
}

/// Decodes a JSON body; the error names the field.
fn json_body<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")) {
        return Err(ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, None, "send the body as JSON with Content-Type: application/json"));
    }
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad(None, "the body is not UTF-8"))?;
    crate::limits::check_nesting(text, crate::limits::Syntax::Json, crate::limits::JSON_MAX_NESTING)
        .map_err(|e| ApiError::bad(None, e.to_string()))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ApiError::bad(None, format!("the body is not valid JSON: {e}")))?;
    crate::tools::decode(value).map_err(|e| ApiError::classified(&e))
}

fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(q)| q).map_err(|e| ApiError::bad(None, format!("bad query string: {}", e.body_text())))
}

fn memory_id(path: Result<Path<String>, PathRejection>) -> Result<(String, AtomId), ApiError> {
    let Path(text) = path.map_err(|e| ApiError::bad(Some("memory_id"), e.body_text()))?;
    let id = parse_atom_id(&text).map_err(|e| ApiError::bad(Some("memory_id"), e.to_string()))?;
    Ok((text, id))
}

fn require_ids(ids: &ScopeIds) -> Result<(), ApiError> {
    if ids.any() {
        Ok(())
    } else {
        Err(ApiError::bad(Some("user_id"), "name the memories' owner: at least one of user_id, agent_id or run_id is required"))
    }
}

fn caller_for(principal: &Principal, scope: Scope) -> Caller {
    Caller::new(scope, principal.actor("rest"))
}

/// The current version of the memory `id` names, checked against `ids`.
fn current(memory: &Memory, principal: &Principal, text: &str, id: AtomId, ids: &ScopeIds) -> Result<crate::atom::Atom, ApiError> {
    let tenant = &principal.tenant;
    let head = match memory.chain_head(tenant, id) {
        Ok(head) => head,
        Err(MemoryError::AtomNotFound(_)) => return Err(ApiError::not_found(text)),
        Err(error) => return Err(error.into()),
    };
    let atom = memory.atom(tenant, head)?.ok_or_else(|| ApiError::not_found(text))?;
    if ids.any() {
        let wanted = ids.scope(tenant)?;
        if !wanted.holds_exactly(&atom.scope) {
            return Err(ApiError::not_found(text));
        }
    }
    Ok(atom)
}

#[tracing::instrument(name = "rest_add", skip_all)]
async fn add(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<AddResponse> {
    let mut request: AddRequest = json_body(&headers, &body)?;
    // Secrets leave the messages before anything reads them: the built-in
    // extractor, an external extraction endpoint, the merge.
    for message in &mut request.messages {
        message.content = crate::text::redact(&message.content).text;
    }
    let ids = ScopeIds { user_id: request.user_id.clone(), agent_id: request.agent_id.clone(), run_id: request.run_id.clone() };
    require_ids(&ids)?;
    if request.messages.is_empty() {
        return Err(ApiError::bad(Some("messages"), "no messages: send at least one {\"role\", \"content\"}"));
    }
    if request.messages.len() > MAX_MESSAGES {
        return Err(ApiError::bad(Some("messages"), format!("{} messages; at most {MAX_MESSAGES} per add", request.messages.len())));
    }
    let memory = access(&state, &principal, true)?;
    let caller = caller_for(&principal, ids.scope(&principal.tenant)?);
    let extractor = state.extractor.clone();
    blocking(move || {
        let source = if request.messages.iter().any(|m| m.role == "user") { "user" } else { "agent" };
        let dry_run = request.dry_run == Some(true);
        if request.infer == Some(false) && dry_run {
            let results = request
                .messages
                .iter()
                .filter(|m| m.role != "system")
                .map(|m| MergeResult {
                    id: None,
                    memory: m.content.clone(),
                    event: MergeEvent::Add,
                    previous_memory: None,
                    reason: None,
                    why: Some("infer: false stores each message as it is".to_owned()),
                })
                .collect();
            return Ok(axum::Json(AddResponse { results, warnings: Vec::new() }));
        }
        if request.infer == Some(false) {
            // Each message as it is, written together (one embedding batch
            // per model), each deduplicated as a lone memorize would be.
            let messages: Vec<&Message> = request.messages.iter().filter(|m| m.role != "system").collect();
            let requests = messages
                .iter()
                .map(|m| MemorizeRequest::new(m.content.clone()).with_source(if m.role == "user" { "user" } else { "agent" }))
                .collect();
            let outcomes = memory.memorize_many(&caller, requests)?;
            let results = messages
                .into_iter()
                .zip(outcomes)
                .map(|(message, outcome)| {
                    let (id, event) = match outcome.effect {
                        Effect::Applied => (outcome.atom_id, MergeEvent::Add),
                        _ => (outcome.deduped_with, MergeEvent::None),
                    };
                    MergeResult { id, memory: message.content.clone(), event, previous_memory: None, reason: outcome.reason, why: None }
                })
                .collect();
            return Ok(axum::Json(AddResponse { results, warnings: Vec::new() }));
        }
        let extraction = crate::extract::extract_with_fallback(extractor.as_deref(), &request.messages)
            .map_err(|e| ApiError::bad(Some("messages"), e.to_string()))?;
        let results = memory.merge_facts_with(&caller, &extraction.facts, source, dry_run)?;
        tracing::info!(facts = extraction.facts.len(), "added");
        Ok(axum::Json(AddResponse { results, warnings: extraction.warning.into_iter().collect() }))
    })
    .await
}

#[tracing::instrument(name = "rest_search", skip_all)]
async fn search(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<SearchResponse> {
    let request: SearchRequest = json_body(&headers, &body)?;
    let ids = ScopeIds { user_id: request.user_id.clone(), agent_id: request.agent_id.clone(), run_id: request.run_id.clone() };
    require_ids(&ids)?;
    let limit = request.limit.unwrap_or(10);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad(Some("limit"), "must be between 1 and 100"));
    }
    let threshold = request.threshold.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&threshold) {
        return Err(ApiError::bad(Some("threshold"), "must be between 0 and 1"));
    }
    let memory = access(&state, &principal, false)?;
    let caller = caller_for(&principal, ids.scope(&principal.tenant)?);
    blocking(move || {
        let outcome = memory
            .recall(&caller, RecallRequest { max_results: limit as usize, strict_scope: true, ..RecallRequest::new(request.query) })?;
        let results = outcome
            .atoms
            .into_iter()
            .filter(|a| a.score >= threshold)
            .map(|a| SearchHit { id: a.atom_id, memory: a.content, score: a.score, created_at: a.created_at })
            .collect();
        Ok(axum::Json(SearchResponse { results }))
    })
    .await
}

/// The active memories of exactly `scope` (its user, agent and, if given, run).
fn scope_filter(scope: &Scope) -> AtomFilter {
    AtomFilter {
        workspace: scope.workspace.clone(),
        repository: scope.repository.clone(),
        branch: scope.branch.clone(),
        status: Some(Status::Active),
        exact_scope: true,
        ..AtomFilter::default()
    }
}

#[tracing::instrument(name = "rest_list", skip_all)]
async fn list(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    q: Result<Query<RouteQuery>, QueryRejection>,
) -> ApiResult<ListResponse> {
    let q = query(q)?;
    let ids = q.ids();
    require_ids(&ids)?;
    let scope = ids.scope(&principal.tenant)?;
    let limit = q.limit.unwrap_or(100) as usize;
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad(Some("limit"), format!("must be between 1 and {MAX_PAGE}")));
    }
    let memory = access(&state, &principal, false)?;
    let caller = caller_for(&principal, scope);
    let filter = scope_filter(&caller.scope);
    blocking(move || {
        let after = q.after.as_deref().filter(|a| !a.trim().is_empty());
        let page = memory.list_atoms(&caller, &filter, after, limit)?;
        Ok(axum::Json(ListResponse { results: page.atoms.iter().map(MemoryItem::of).collect(), next_cursor: page.next_cursor }))
    })
    .await
}

#[tracing::instrument(name = "rest_get", skip_all)]
async fn get_one(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    q: Result<Query<RouteQuery>, QueryRejection>,
) -> ApiResult<MemoryItem> {
    let (text, id) = memory_id(path)?;
    let q = query(q)?;
    let ids = q.ids();
    let memory = access(&state, &principal, false)?;
    blocking(move || {
        let atom = current(&memory, &principal, &text, id, &ids)?;
        Ok(axum::Json(MemoryItem::of(&AtomView::from(&atom))))
    })
    .await
}

#[tracing::instrument(name = "rest_update", skip_all)]
async fn update(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    q: Result<Query<RouteQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<ChangeResponse> {
    let (text, id) = memory_id(path)?;
    let q = query(q)?;
    let request: UpdateRequest = json_body(&headers, &body)?;
    let ids = q.ids();
    let memory = access(&state, &principal, true)?;
    blocking(move || {
        let atom = current(&memory, &principal, &text, id, &ids)?;
        if atom.status != Status::Active {
            return Err(ApiError::not_found(&text));
        }
        let previous = atom.visible_content().to_owned();
        let caller = caller_for(&principal, atom.scope.clone());
        let correction = CorrectRequest {
            target_atom: atom.id.to_string(),
            action: CorrectAction::Replace,
            reason: "updated through the REST API".to_owned(),
            new_content: Some(request.data.clone()),
        };
        let outcome = memory.correct(&caller, correction)?;
        match (outcome.effect, outcome.new_atom_id) {
            (Effect::Applied, Some(new_id)) => Ok(axum::Json(ChangeResponse {
                message: "Memory updated successfully!".to_owned(),
                id: Some(new_id),
                event: Some(MergeEvent::Update),
                memory: Some(request.data),
                previous_memory: Some(previous),
                deleted: None,
            })),
            (_, _) => Err(ApiError::bad(Some("data"), outcome.reason.unwrap_or_else(|| "the update was not applied".to_owned()))),
        }
    })
    .await
}

#[tracing::instrument(name = "rest_delete", skip_all)]
async fn delete_one(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    q: Result<Query<RouteQuery>, QueryRejection>,
) -> ApiResult<ChangeResponse> {
    let (text, id) = memory_id(path)?;
    let q = query(q)?;
    let purge = q.purge.unwrap_or(false);
    let ids = q.ids();
    let memory = access(&state, &principal, true)?;
    blocking(move || {
        let atom = current(&memory, &principal, &text, id, &ids)?;
        let caller = caller_for(&principal, atom.scope.clone());
        if purge {
            // Every version's content destroyed, in one transaction.
            let destroyed = memory.purge_chain(&caller, &atom.id.to_string(), "purged through the REST API")?;
            let versions = memory.chain(&caller, atom.id)?.len();
            tracing::info!(destroyed, versions, "purged");
            return Ok(axum::Json(ChangeResponse {
                message: "Memory purged: the content of every version is destroyed; the audit trail remains.".to_owned(),
                id: Some(atom.id.to_string()),
                event: Some(MergeEvent::Delete),
                memory: None,
                previous_memory: None,
                deleted: Some(versions),
            }));
        }
        if atom.status != Status::Active {
            return Err(ApiError::not_found(&text));
        }
        let request = CorrectRequest {
            target_atom: atom.id.to_string(),
            action: CorrectAction::Negate,
            reason: "deleted through the REST API".to_owned(),
            new_content: None,
        };
        let outcome = memory.correct(&caller, request)?;
        if outcome.effect != Effect::Applied {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                None,
                outcome.reason.unwrap_or_else(|| "the memory could not be deleted".to_owned()),
            ));
        }
        Ok(axum::Json(ChangeResponse {
            message: "Memory deleted successfully!".to_owned(),
            id: Some(atom.id.to_string()),
            event: Some(MergeEvent::Delete),
            memory: None,
            previous_memory: None,
            deleted: Some(1),
        }))
    })
    .await
}

#[tracing::instrument(name = "rest_delete_all", skip_all)]
async fn delete_all(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    q: Result<Query<RouteQuery>, QueryRejection>,
) -> ApiResult<ChangeResponse> {
    let q = query(q)?;
    if q.purge.is_some() {
        return Err(ApiError::bad(Some("purge"), "purge applies to one memory (DELETE /{memory_id}?purge=true)"));
    }
    let ids = q.ids();
    require_ids(&ids)?;
    let scope = ids.scope(&principal.tenant)?;
    let memory = access(&state, &principal, true)?;
    blocking(move || {
        let caller = caller_for(&principal, scope);
        let deleted = memory.negate_all(&caller, &scope_filter(&caller.scope), "deleted through the REST API (DELETE all in scope)")?;
        Ok(axum::Json(ChangeResponse {
            message: format!("{deleted} memories deleted"),
            id: None,
            event: Some(MergeEvent::Delete),
            memory: None,
            previous_memory: None,
            deleted: Some(deleted),
        }))
    })
    .await
}

#[tracing::instrument(name = "rest_history", skip_all)]
async fn history(
    State(state): State<RestState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    q: Result<Query<RouteQuery>, QueryRejection>,
) -> ApiResult<Vec<HistoryEvent>> {
    let (text, id) = memory_id(path)?;
    let q = query(q)?;
    let ids = q.ids();
    let memory = access(&state, &principal, false)?;
    blocking(move || {
        let atom = current(&memory, &principal, &text, id, &ids)?;
        let caller = caller_for(&principal, atom.scope.clone());
        let events = memory
            .chain_events(&caller, &atom.id.to_string())?
            .into_iter()
            .map(|e| HistoryEvent {
                id: e.audit_id,
                memory_id: e.atom_id,
                event: e.event,
                old_memory: e.old_content,
                new_memory: e.new_content,
                created_at: e.time,
                actor: e.actor,
                reason: e.reason,
            })
            .collect();
        Ok(axum::Json(events))
    })
    .await
}

async fn openapi_json() -> axum::Json<serde_json::Value> {
    axum::Json(openapi())
}

/// The OpenAPI 3.1 document of these routes, generated from the types
/// that decode and encode them.
pub(crate) fn openapi() -> serde_json::Value {
    use serde_json::json;
    let (components, id_schema) = openapi_components();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "HMG MemoryVG API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "mem0-style memory API of HMG. user_id → workspace, agent_id → repository, run_id → branch of the caller's tenant. Add extracts facts and merges them (ADD, UPDATE = replace, DELETE = negate, NONE); nothing is lost from history.",
        },
        "servers": [{ "url": BASE }],
        "components": {
            "schemas": components,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer", "description": "Created with `hmg token create`; a loopback server without tokens needs none." } },
        },
        "security": [{ "bearer": [] }, {}],
        "paths": openapi_paths(&id_schema),
    })
}

/// The request and response schemas (`#/components/schemas/…`), and the
/// schema of an id parameter.
fn openapi_components() -> (serde_json::Value, serde_json::Value) {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.definitions_path = "#/components/schemas/".into();
    let mut generator = settings.into_generator();
    let schema = |value: schemars::Schema| serde_json::to_value(value).unwrap_or_default();
    let add_req = schema(AddRequest::json_schema(&mut generator));
    let search_req = schema(SearchRequest::json_schema(&mut generator));
    let update_req = schema(UpdateRequest::json_schema(&mut generator));
    let mut out_generator = {
        let mut settings = schemars::generate::SchemaSettings::draft2020_12().for_serialize();
        settings.definitions_path = "#/components/schemas/".into();
        settings.into_generator()
    };
    let add_res = schema(AddResponse::json_schema(&mut out_generator));
    let search_res = schema(SearchResponse::json_schema(&mut out_generator));
    let list_res = schema(ListResponse::json_schema(&mut out_generator));
    let item = schema(MemoryItem::json_schema(&mut out_generator));
    let change = schema(ChangeResponse::json_schema(&mut out_generator));
    let history = schema(HistoryEvent::json_schema(&mut out_generator));
    let error = schema(ErrorBody::json_schema(&mut out_generator));
    let mut components = serde_json::Map::new();
    for (name, value) in generator.take_definitions(true).into_iter().chain(out_generator.take_definitions(true)) {
        components.insert(name, value);
    }
    for (name, value) in [
        ("AddRequest", add_req),
        ("SearchRequest", search_req),
        ("UpdateRequest", update_req),
        ("AddResponse", add_res),
        ("SearchResponse", search_res),
        ("ListResponse", list_res),
        ("MemoryItem", item),
        ("ChangeResponse", change),
        ("HistoryEvent", history),
        ("ErrorBody", error),
    ] {
        components.insert(name.to_owned(), value);
    }
    let mut components = serde_json::Value::Object(components);
    crate::tools::strip_integer_formats(&mut components);
    // A query parameter is a string or absent, never null.
    let mut id_schema = serde_json::to_value(id_schema(&mut generator)).unwrap_or_default();
    id_schema["type"] = serde_json::json!("string");
    (components, id_schema)
}

fn reference(name: &str) -> serde_json::Value {
    serde_json::json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn content(name: &str) -> serde_json::Value {
    serde_json::json!({ "application/json": { "schema": reference(name) } })
}

/// A route's responses: `ok` as 200 and the error `codes` it can answer.
fn responses(ok: serde_json::Value, codes: &[&str]) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for code in codes {
        let description = match *code {
            "400" => "Malformed request: the detail says what is wrong, and field which field",
            "401" => "Missing or unknown access token",
            "403" => "The token lacks the scope this route needs",
            "404" => "No such memory in the selected scope",
            "409" => "The memory changed meanwhile; nothing was written",
            "413" => "Body larger than 1 MiB",
            "415" => "Body not sent as application/json",
            _ => "The store is held by another process",
        };
        map.insert((*code).to_owned(), serde_json::json!({ "description": description, "content": content("ErrorBody") }));
    }
    map.insert("200".to_owned(), ok);
    serde_json::Value::Object(map)
}

/// Every route with its parameters and answers.
fn openapi_paths(id_schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::json;
    let id_param = |name: &str, description: &str, location: &str| json!({ "name": name, "in": location, "required": false, "description": description, "schema": id_schema.clone() });
    let scope_params = || {
        vec![
            id_param("user_id", "The user (HMG workspace).", "query"),
            id_param("agent_id", "The agent (HMG repository).", "query"),
            id_param("run_id", "The run (HMG branch).", "query"),
        ]
    };
    let memory_id = json!({ "name": "memory_id", "in": "path", "required": true, "description": "Memory id (atom ULID); any version of the memory.", "schema": { "type": "string", "pattern": "^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$" } });
    let with_id = |extra: Vec<serde_json::Value>| {
        let mut params = vec![memory_id.clone()];
        params.extend(scope_params());
        params.extend(extra);
        serde_json::Value::Array(params)
    };
    let ok = |name: &str, description: &str| json!({ "description": description, "content": content(name) });
    let with = responses;
    let mut list_params = scope_params();
    list_params
        .push(json!({ "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": 200 } }));
    list_params.push(json!({ "name": "after", "in": "query", "required": false, "schema": { "type": "string" } }));
    let purge = json!({ "name": "purge", "in": "query", "required": false, "description": "Destroy the content of every version (tombstone) instead of marking the memory deleted.", "schema": { "type": "boolean" } });
    let common = ["400", "401", "403", "413", "503"];
    json!({
        "/add": { "post": {
            "operationId": "add",
            "summary": "Extract facts from messages and merge them into memory",
            "requestBody": { "required": true, "content": content("AddRequest") },
            "responses": with(ok("AddResponse", "One result per fact"), &[&common[..], &["415"]].concat()),
        }},
        "/search": { "post": {
            "operationId": "search",
            "summary": "Search memories (keyword + semantic + graph, fused); score > 0.85 is high confidence",
            "requestBody": { "required": true, "content": content("SearchRequest") },
            "responses": with(ok("SearchResponse", "Best first"), &[&common[..], &["415"]].concat()),
        }},
        "/": {
            "get": {
                "operationId": "list",
                "summary": "List the active memories of a scope, newest first",
                "parameters": list_params,
                "responses": with(ok("ListResponse", "One page"), &common),
            },
            "delete": {
                "operationId": "delete_all",
                "summary": "Delete (negate) every active memory of a scope",
                "parameters": scope_params(),
                "responses": with(ok("ChangeResponse", "How many were deleted"), &common),
            },
        },
        "/{memory_id}": {
            "get": {
                "operationId": "get",
                "summary": "The current version of a memory",
                "parameters": with_id(vec![]),
                "responses": with(ok("MemoryItem", "The memory"), &[&common[..], &["404"]].concat()),
            },
            "put": {
                "operationId": "update",
                "summary": "Replace a memory's text (a new version; the old one stays in its history)",
                "parameters": with_id(vec![]),
                "requestBody": { "required": true, "content": content("UpdateRequest") },
                "responses": with(ok("ChangeResponse", "The new version"), &[&common[..], &["404", "409", "415"]].concat()),
            },
            "delete": {
                "operationId": "delete",
                "summary": "Delete a memory: negate it (history kept), or purge=true to destroy every version's content",
                "parameters": with_id(vec![purge]),
                "responses": with(ok("ChangeResponse", "Deleted"), &[&common[..], &["404", "409"]].concat()),
            },
        },
        "/{memory_id}/history": { "get": {
            "operationId": "history",
            "summary": "The ADD / UPDATE / DELETE events of a memory, from its audit chain",
            "parameters": with_id(vec![]),
            "responses": with(json!({ "description": "Oldest first", "content": { "application/json": { "schema": { "type": "array", "items": reference("HistoryEvent") } } } }), &[&common[..], &["404"]].concat()),
        }},
        "/openapi.json": { "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [{}],
            "responses": { "200": { "description": "OpenAPI 3.1", "content": { "application/json": { "schema": { "type": "object" } } } } },
        }},
    })
}

#[cfg(test)]
mod tests {
    /// The checked-in OpenAPI document matches the code;
    /// `HMG_UPDATE_OPENAPI=1` rewrites it.
    #[test]
    fn the_checked_in_openapi_document_matches_the_code() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/openapi.json");
        let document = serde_json::to_string_pretty(&super::openapi()).unwrap() + "\n";
        if std::env::var_os("HMG_UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, &document).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == document,
            "schema/openapi.json is out of date: run HMG_UPDATE_OPENAPI=1 cargo test --release --features e5 --lib openapi"
        );
    }
}
