//! `hmg serve`: the HTTP server. `/mcp` (streamable HTTP MCP), `/graphql`
//! (queries, and the explorer page on GET), `/sparql` (read-only SPARQL 1.1
//! Protocol), the REST API under `/api/v1/hetamem/vg`, `/healthz` and the
//! OAuth protected-resource metadata; every request is traced. Error
//! statuses follow the error's [`crate::Fault`]
//! ([`crate::surface::status::http_status`]): 400 invalid, 403 forbidden,
//! 404, 406, 409, 413 too large, 415 (not JSON), 422 over a SPARQL limit,
//! 429 busy (+ `Retry-After`), 503 unavailable, 500 ours.
//!
//! **Invariants:**
//! - Without access tokens the server binds loopback only; any other
//!   address is refused at start with a message saying why.
//! - With tokens, every route but `/healthz`, the metadata, the explorer
//!   page and the OpenAPI document needs a bearer token: 401 with
//!   `WWW-Authenticate` without a valid one, 403 when its scopes do not
//!   allow the operation. The token's tenant is the only tenant a request
//!   can reach.
//! - Browsers: foreign `Host` names and cross-origin requests are refused
//!   on every route ([`guard`]), so a web page can neither drive nor read a
//!   tokenless server.
//! - Cost is bounded: bodies over [`MAX_BODY_BYTES`] get 413 on every route;
//!   text is checked for nesting depth before any parser runs
//!   ([`crate::limits`]); facade work runs on the bounded pool of
//!   [`crate::surface::blocking`] with a deadline; SPARQL runs in a killable,
//!   memory-capped child process, at most [`sparql_slots`] at a time; one
//!   client (token, or peer address) has at most
//!   [`ServeOptions::max_in_flight`] requests in progress (429 +
//!   `Retry-After` past that).
//! - Shutdown (SIGINT / SIGTERM) stops accepting, gives in-flight requests
//!   [`ServeOptions::shutdown_grace`] to finish, then flushes the store and
//!   returns; acknowledged writes are committed before they are answered, so
//!   cutting the rest short loses none.

mod guard;
mod peer;

use crate::fault::{Classified, Fault};
use crate::surface::status;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::surface::mcp::{HmgServer, ScopeResolver};
use crate::surface::token::{Principal, TokenStore};
use crate::tools::relay::SharedMemory;

/// Why the server cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address is not usable.
    #[error("--listen {0}: expected ADDRESS:PORT, for example 127.0.0.1:7411")]
    BadAddress(String),
    /// Serving a network address without authentication.
    #[error(
        "refusing to serve {0} without access tokens: only loopback addresses (127.0.0.1, ::1) may be served unauthenticated; bind 127.0.0.1 or create tokens first"
    )]
    Unauthenticated(SocketAddr),
    /// The extraction endpoint's settings are wrong.
    #[error(transparent)]
    Extractor(#[from] crate::extract::ExtractError),
    /// Socket trouble.
    #[error("cannot serve {address}: {source}")]
    Io {
        /// Address.
        address: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl crate::fault::Classified for ServeError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            ServeError::BadAddress(_) | ServeError::Unauthenticated(_) => crate::fault::Fault::Invalid,
            ServeError::Extractor(error) => error.fault(),
            ServeError::Io { .. } => crate::fault::Fault::Unavailable,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            ServeError::BadAddress(_) | ServeError::Unauthenticated(_) => Some("listen"),
            _ => None,
        }
    }
}

/// Largest request body.
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How a server limits what requests may cost, and whom it serves.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// Host names served besides the loopback names (`--allow-host`).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call the server (`--allow-origin`).
    pub allowed_origins: Vec<String>,
    /// The `hmg` executable that evaluates SPARQL in a child process
    /// (`None`: evaluate in this process, bounded by time and result size
    /// only).
    pub sparql_worker: Option<PathBuf>,
    /// Limits of one SPARQL evaluation.
    pub sparql: crate::surface::sparql::Limits,
    /// Deadline of one request's facade work.
    pub request_deadline: Duration,
    /// Requests one client may have in progress at once.
    pub max_in_flight: usize,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// The secret other nodes present to relay their commits here
    /// (`HMG_NODE_SECRET`; `None`: this node takes no relayed commits).
    pub node_secret: Option<String>,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            sparql_worker: None,
            sparql: crate::surface::sparql::Limits::default(),
            request_deadline: crate::surface::blocking::DEFAULT_DEADLINE,
            max_in_flight: 32,
            shutdown_grace: Duration::from_secs(10),
            node_secret: None,
        }
    }
}

/// SPARQL evaluations that may run at once (one per core, at least two).
pub(crate) fn sparql_slots() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

/// Parses and checks `--listen`: a non-loopback address needs tokens.
pub(crate) fn listen_address(text: &str, tokens_configured: bool) -> Result<SocketAddr, ServeError> {
    let address: SocketAddr = text.trim().parse().map_err(|_| ServeError::BadAddress(text.to_owned()))?;
    if !address.ip().is_loopback() && !tokens_configured {
        return Err(ServeError::Unauthenticated(address));
    }
    Ok(address)
}

/// What every handler shares.
#[derive(Clone)]
struct AppState {
    shared: Arc<SharedMemory>,
    tokens: Arc<TokenStore>,
    local_tenant: String,
    schema: crate::surface::graphql::HmgSchema,
    options: Arc<ServeOptions>,
    sparql_slots: Arc<tokio::sync::Semaphore>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// The explorer page (GraphiQL, with its assets served from this server).
const EXPLORER_PAGE: &str = include_str!("explorer.html");
/// The explorer's asset files and their media types.
const EXPLORER_ASSETS: &[(&str, &str)] = &[
    ("graphiql.min.js", "text/javascript; charset=utf-8"),
    ("graphiql.min.css", "text/css; charset=utf-8"),
    ("react.production.min.js", "text/javascript; charset=utf-8"),
    ("react-dom.production.min.js", "text/javascript; charset=utf-8"),
];

/// Where the explorer's assets are installed (`scripts/setup.sh`).
pub(crate) fn explorer_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("HMG_EXPLORER_DIR").map(std::path::PathBuf::from).or_else(|| dirs::data_dir().map(|d| d.join("hmg").join("explorer")))
}

async fn explorer_page() -> axum::response::Html<&'static str> {
    axum::response::Html(EXPLORER_PAGE)
}

async fn explorer_asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let Some((file, media_type)) = EXPLORER_ASSETS.iter().find(|(file, _)| *file == name) else {
        return error(StatusCode::NOT_FOUND, format!("no explorer asset named '{name}'"));
    };
    let Some(dir) = explorer_dir() else {
        return error(StatusCode::NOT_FOUND, "no data directory for the explorer's assets");
    };
    match tokio::fs::read(dir.join(file)).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, *media_type), (header::CACHE_CONTROL, "max-age=3600")], bytes).into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, format!("explorer asset {file} is not installed ({e}); run scripts/setup.sh")),
    }
}

/// POST `/graphql`: `application/json` only (a page may send `text/plain`,
/// forms and multipart cross-origin without a preflight). A request that is
/// not GraphQL over HTTP, a document nested or selected too deep, or one
/// that does not parse or validate gets 400; field errors keep 200 with
/// `errors` beside the data.
async fn graphql(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !guard::is_json(&headers) {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the GraphQL request as JSON with Content-Type: application/json");
    }
    let request = match crate::surface::graphql::decode_request(&body) {
        Ok(request) => request.data(principal),
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let span = tracing::info_span!("graphql", operation = request.operation_name.as_deref().unwrap_or(""));
    let deadline = state.options.request_deadline;
    let response = match tokio::time::timeout(deadline, tracing::Instrument::instrument(state.schema.execute(request), span)).await {
        Ok(response) => response,
        Err(_) => return error(StatusCode::SERVICE_UNAVAILABLE, crate::surface::blocking::Refused::Timeout(deadline.as_secs())),
    };
    let request_error =
        response.data == async_graphql::Value::Null && !response.errors.is_empty() && response.errors.iter().all(|e| e.path.is_empty());
    let code = |wanted: &str| {
        response
            .errors
            .iter()
            .any(|e| e.extensions.as_ref().and_then(|x| x.get("code")).is_some_and(|code| *code == async_graphql::Value::from(wanted)))
    };
    let status = if code(status::graphql_code(Fault::Forbidden)) {
        status::http_status(Fault::Forbidden)
    } else if code(status::graphql_code(Fault::Busy)) && response.data == async_graphql::Value::Null {
        status::http_status(Fault::Busy)
    } else if request_error {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut http = async_graphql_axum::GraphQLResponse::from(response).into_response();
    *http.status_mut() = status;
    status::ask_to_retry(http)
}

/// A JSON error response.
fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message.to_string() }))).into_response()
}

/// 413, naming the limit.
fn too_large() -> Response {
    error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is larger than the limit of {MAX_BODY_BYTES} bytes"))
}

fn metadata_url(headers: &HeaderMap) -> String {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    format!("http://{host}/.well-known/oauth-protected-resource")
}

fn unauthorized(headers: &HeaderMap, problem: Option<&str>) -> Response {
    let mut challenge = format!("Bearer realm=\"hmg\", resource_metadata=\"{}\"", metadata_url(headers));
    if let Some(problem) = problem {
        challenge.push_str(&format!(", error=\"invalid_token\", error_description=\"{problem}\""));
    }
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        problem.unwrap_or("authentication required: send Authorization: Bearer <token> (create one with hmg token create)"),
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// Bearer authentication: puts the request's [`Principal`] in its extensions.
async fn authenticate(State(state): State<AppState>, mut request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = request.uri().path();
    let explorer = request.method() == axum::http::Method::GET && (path == "/graphql" || path.starts_with("/graphql/assets/"));
    let documentation = path == concat!("/api/v1/hetamem/vg", "/openapi.json");
    // A relayed commit is authenticated by the node secret, in its handler.
    let relayed = path == crate::store::remote::relay::COMMIT_PATH;
    if path == "/healthz" || path.starts_with("/.well-known/") || explorer || documentation || relayed {
        return next.run(request).await;
    }
    let tokens = Arc::clone(&state.tokens);
    let presented = match request.headers().get(header::AUTHORIZATION).map(|v| v.to_str()) {
        None => None,
        Some(Ok(value)) => match value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")) {
            Some(secret) => Some(secret.trim().to_owned()),
            None => return unauthorized(request.headers(), Some("the Authorization header must be Bearer <token>")),
        },
        Some(Err(_)) => return unauthorized(request.headers(), Some("the Authorization header is not valid text")),
    };
    let principal = match presented {
        Some(secret) => match tokens.authenticate(&secret) {
            Ok(Some(principal)) => principal,
            Ok(None) => return unauthorized(request.headers(), Some("unknown or revoked token")),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        None => match tokens.any_active() {
            Ok(false) => Principal::local(state.local_tenant.clone()),
            Ok(true) => return unauthorized(request.headers(), None),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
    };
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// RFC 9728 protected-resource metadata for the MCP endpoint.
async fn protected_resource(headers: HeaderMap) -> axum::Json<serde_json::Value> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    axum::Json(serde_json::json!({
        "resource": format!("http://{host}/mcp"),
        "authorization_servers": [],
        "bearer_methods_supported": ["header"],
        "scopes_supported": crate::surface::token::SCOPES,
        "resource_name": "HMG memory",
        "resource_documentation": "Create tokens with `hmg token create --scope memory:read --scope memory:write`",
    }))
}

#[derive(Debug, serde::Deserialize)]
struct SparqlParams {
    query: Option<String>,
    update: Option<String>,
}

/// `/sparql`: GET `?query=`, POST `application/sparql-query` or a form.
async fn sparql(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    method: axum::http::Method,
    headers: HeaderMap,
    Query(params): Query<SparqlParams>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(denied) = principal.require(false, "SPARQL") {
        return classified(&denied);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let text = if method == axum::http::Method::GET {
        if params.update.is_some() {
            return classified(&crate::surface::sparql::SparqlError::Update);
        }
        params.query
    } else {
        match content_type.as_str() {
            "application/sparql-query" => match String::from_utf8(body.to_vec()) {
                Ok(text) => Some(text),
                Err(_) => return error(StatusCode::BAD_REQUEST, "the query is not UTF-8"),
            },
            "application/x-www-form-urlencoded" => match form_params(&body) {
                Ok(form) if form.update.is_some() => return classified(&crate::surface::sparql::SparqlError::Update),
                Ok(form) => form.query,
                Err(message) => return error(StatusCode::BAD_REQUEST, message),
            },
            "application/sparql-update" => return classified(&crate::surface::sparql::SparqlError::Update),
            other => {
                return error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!("unsupported Content-Type '{other}': send application/sparql-query or application/x-www-form-urlencoded"),
                );
            }
        }
    };
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "missing query: pass ?query=… or a query body");
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let Some(memory) = state.shared.local() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the store is open in another hmg process; SPARQL is served by the process that owns it",
        );
    };
    use crate::surface::sparql::SparqlError as E;
    let Ok(_slot) = Arc::clone(&state.sparql_slots).try_acquire_owned() else {
        return classified(&E::Busy);
    };
    let tenant = principal.tenant.clone();
    let limits = state.options.sparql;
    let answer = match &state.options.sparql_worker {
        // A remote store evaluates the query itself.
        Some(worker) if !memory.store().is_shared() => {
            let snapshot = match crate::surface::blocking::run(state.options.request_deadline, move || memory.store().read_snapshot()).await
            {
                Ok(Ok(Some(snapshot))) => snapshot,
                Ok(Ok(None)) => return error(StatusCode::SERVICE_UNAVAILABLE, "SPARQL needs a store on disk"),
                Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot take a read snapshot of the store: {e}")),
                Err(refused) => return classified(&refused),
            };
            crate::surface::sparql::answer_isolated(worker, snapshot.dir(), &tenant, &text, &accept, limits).await
        }
        _ => match crate::surface::blocking::run(limits.timeout + Duration::from_secs(1), move || {
            crate::surface::sparql::answer(memory.store(), &tenant, &text, &accept, limits)
        })
        .await
        {
            Ok(answer) => answer,
            Err(refused) => return classified(&refused),
        },
    };
    match answer {
        Ok(answer) => ([(header::CONTENT_TYPE, answer.media_type)], answer.body).into_response(),
        Err(e) => classified(&e),
    }
}

/// The one mapping of an error to an answer of the server's own routes:
/// `{"error"}` with its fault's status, `Retry-After` when busy.
pub(crate) fn classified(error: &dyn Classified) -> Response {
    let fault = error.fault();
    if !fault.is_callers() {
        tracing::error!(%error, "request failed");
    }
    status::ask_to_retry(self::error(status::http_status(fault), error))
}

/// 429 with `Retry-After`, for limits the server checks itself.
fn too_many(message: String) -> Response {
    status::ask_to_retry(error(status::http_status(Fault::Busy), message))
}

fn form_params(body: &[u8]) -> Result<SparqlParams, String> {
    let mut params = SparqlParams { query: None, update: None };
    for (key, value) in url_pairs(body) {
        match key.as_str() {
            "query" => params.query = Some(value),
            "update" => params.update = Some(value),
            _ => {}
        }
    }
    if params.query.is_none() && params.update.is_none() && !body.is_empty() && !body.contains(&b'=') {
        return Err("the form body is not name=value pairs".to_owned());
    }
    Ok(params)
}

/// `application/x-www-form-urlencoded` pairs (`+` is a space, `%XX` a byte).
fn url_pairs(body: &[u8]) -> Vec<(String, String)> {
    let decode = |part: &[u8]| String::from_utf8_lossy(&crate::text::percent_decode(part, true)).into_owned();
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|b| *b == b'=') {
            Some(eq) => (decode(&pair[..eq]), decode(&pair[eq + 1..])),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// The writer node's commit endpoint: another node's commit, applied here
/// one at a time (see [`crate::store::remote::relay`]).
async fn relayed_commit(State(state): State<AppState>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    use crate::store::remote::relay::{self, RelayError};
    let Some(expected) = state.options.node_secret.clone() else {
        return error(StatusCode::NOT_FOUND, "this node takes no relayed commits (start the writer node with HMG_NODE_SECRET)");
    };
    let given = headers.get(relay::SECRET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !relay::secret_matches(&expected, given) {
        return error(StatusCode::UNAUTHORIZED, "wrong or missing node secret");
    }
    let Some(memory) = state.shared.local() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "this node does not have the store open");
    };
    match crate::surface::blocking::run(state.options.request_deadline, move || relay::apply(memory.store(), &body)).await {
        Ok(Ok(committed)) => axum::Json(relay::answer_body(committed)).into_response(),
        Ok(Err(error @ (RelayError::Malformed(_) | RelayError::Refused(_)))) => self::error(StatusCode::BAD_REQUEST, error),
        Ok(Err(RelayError::Store(store))) => self::error(StatusCode::SERVICE_UNAVAILABLE, store),
        Err(refused) => classified(&refused),
    }
}

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

async fn trace_request(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let span = tracing::info_span!("http", method = %request.method(), path = %request.uri().path());
    let started = std::time::Instant::now();
    let response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    span.in_scope(|| tracing::info!(status = response.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "request"));
    response
}

/// Refuses bodies over [`MAX_BODY_BYTES`] on every route (413 naming the
/// limit), by their declared length, and caps the body stream for routes
/// whose handlers read it themselves (MCP).
async fn limit_body(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let limit = if request.uri().path() == crate::store::remote::relay::COMMIT_PATH {
        crate::store::remote::relay::MAX_COMMIT_BYTES
    } else {
        MAX_BODY_BYTES
    };
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return too_large();
    }
    let request = request.map(|body| axum::body::Body::new(http_body_util::Limited::new(body, limit)));
    let response = next.run(request).await;
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE
        && response.headers().get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"text/plain"))
    {
        // axum's own rejection (a chunked body past the limit): say which limit.
        return too_large();
    }
    response
}

/// `/mcp` bodies get the same nesting check as every other JSON body, answered
/// as a JSON-RPC parse error (rmcp's own parser would stop at depth 128 with
/// a 415).
async fn mcp_nesting(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return too_large();
    };
    if let Ok(text) = std::str::from_utf8(&bytes)
        && let Err(too_deep) = crate::limits::check_nesting(text, crate::limits::Syntax::Json, crate::limits::JSON_MAX_NESTING)
    {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(crate::surface::mcp::jsonrpc_error(serde_json::Value::Null, -32700, format!("Parse error: {too_deep}"))),
        )
            .into_response();
    }
    next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

/// Decrements a client's in-flight count when its request ends.
struct InFlight {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// At most [`ServeOptions::max_in_flight`] requests per client (its token,
/// or its address) until their answers start; 429 + `Retry-After` beyond.
async fn admit(State(state): State<AppState>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let token = request.extensions().get::<Principal>().and_then(|p| p.token_id.clone());
    let peer = request.extensions().get::<ConnectInfo<peer::Peer>>().map(|c| c.0.address.ip().to_string());
    let key = match (token, peer) {
        (Some(token), _) => format!("token:{token}"),
        (None, Some(peer)) => format!("peer:{peer}"),
        (None, None) => "local".to_owned(),
    };
    let guard = {
        let mut counts = state.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = counts.entry(key.clone()).or_insert(0);
        if *count >= state.options.max_in_flight {
            drop(counts);
            tracing::warn!(client = %key, limit = state.options.max_in_flight, "too many requests in flight");
            return too_many(format!(
                "too many requests in progress from this client (limit {}); retry shortly",
                state.options.max_in_flight
            ));
        }
        *count += 1;
        InFlight { counts: Arc::clone(&state.in_flight), key }
    };
    let response = next.run(request).await;
    drop(guard);
    response
}

/// The application's routes over `shared`, authenticated with `tokens`.
pub(crate) fn router(
    shared: Arc<SharedMemory>,
    tokens: Arc<TokenStore>,
    address: SocketAddr,
    cancel: tokio_util::sync::CancellationToken,
    options: ServeOptions,
) -> Result<Router, ServeError> {
    let local_tenant = crate::scope::os_user();
    let resolver = ScopeResolver { tenant: local_tenant.clone(), directories: Vec::new(), hook_key: None };
    let server = HmgServer::new(Arc::clone(&shared), resolver, format!("http:{local_tenant}"));
    let browser = Arc::new(guard::Guard::new(address, &options.allowed_hosts, &options.allowed_origins));
    let schema = crate::surface::graphql::schema(Arc::clone(&shared), server.burst());
    let rest = crate::surface::rest::RestState::new(Arc::clone(&shared))?;
    let state = AppState {
        shared,
        tokens,
        local_tenant,
        schema,
        sparql_slots: Arc::new(tokio::sync::Semaphore::new(sparql_slots())),
        in_flight: Arc::new(Mutex::new(HashMap::new())),
        options: Arc::new(options),
    };
    Ok(Router::new()
        .nest_service(
            "/mcp",
            tower::Layer::layer(
                &axum::middleware::from_fn(mcp_nesting),
                crate::surface::mcp::http_service(server, browser.mcp_hosts(address), browser.mcp_origins(), cancel),
            ),
        )
        .route("/sparql", get(sparql).post(sparql))
        .route("/graphql", get(explorer_page).post(graphql))
        .route("/graphql/assets/{name}", get(explorer_asset))
        .merge(crate::surface::rest::routes(rest))
        .route("/healthz", get(healthz))
        .route(
            crate::store::remote::relay::COMMIT_PATH,
            axum::routing::post(relayed_commit).layer(DefaultBodyLimit::max(crate::store::remote::relay::MAX_COMMIT_BYTES)),
        )
        .route("/.well-known/oauth-protected-resource", get(protected_resource))
        .route("/.well-known/oauth-protected-resource/mcp", get(protected_resource))
        .layer(axum::middleware::from_fn(peer::cancel_when_gone))
        .layer(axum::middleware::from_fn_with_state(state.clone(), admit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(limit_body))
        .layer(axum::middleware::from_fn_with_state(browser, guard::guard))
        .layer(axum::middleware::from_fn(trace_request))
        .with_state(state))
}

/// Serves until SIGINT or SIGTERM; `ready` hears the bound address. After
/// the signal, in-flight requests get `options.shutdown_grace` to finish.
pub(crate) async fn serve(
    shared: Arc<SharedMemory>,
    tokens: Arc<TokenStore>,
    address: SocketAddr,
    options: ServeOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let io = |source| ServeError::Io { address: address.to_string(), source };
    let listener = tokio::net::TcpListener::bind(address).await.map_err(io)?;
    let bound = listener.local_addr().map_err(io)?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let grace = options.shutdown_grace;
    let app = router(Arc::clone(&shared), tokens, bound, cancel.clone(), options)?;
    crate::surface::rest::warm_up(&shared);
    ready(bound);
    let stopping = cancel.clone();
    let server = axum::serve(listener, app.into_make_service_with_connect_info::<peer::Peer>()).with_graceful_shutdown(async move {
        shutdown_signal().await;
        tracing::info!(grace_s = grace.as_secs(), "shutting down: finishing in-flight requests");
        stopping.cancel();
    });
    let deadline = async {
        cancel.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    let usage = tokio::spawn(commit_usage(Arc::clone(&shared)));
    tokio::select! {
        result = server => result.map_err(io)?,
        () = deadline => tracing::warn!(grace_s = grace.as_secs(), "shutdown grace period over; leaving the requests still in flight unanswered"),
    }
    usage.abort();
    if let Err(error) = shared.flush() {
        tracing::warn!(%error, "flushing the store at shutdown failed");
    }
    Ok(())
}

/// Commits due recall usage once a second, off every answer: REST and
/// GraphQL recalls reach the memory directly, and the server's memory
/// leaves due stamps to its caller (`MemoryOptions::defer_usage`; MCP calls
/// commit them after answering, in `tools::relay`).
async fn commit_usage(shared: Arc<SharedMemory>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let Some(memory) = shared.local() {
            crate::tools::relay::commit_usage_after(&memory);
        }
    }
}

async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
