//! `hmg serve`: the HTTP server. `/mcp` (streamable HTTP MCP), `/sparql`
//! (read-only SPARQL 1.1 Protocol), `/healthz` and the OAuth
//! protected-resource metadata; every request is traced.
//!
//! **Invariants:**
//! - Without access tokens the server binds loopback only; any other
//!   address is refused at start with a message saying why.
//! - With tokens, every route but `/healthz` and the metadata needs a bearer
//!   token: 401 with `WWW-Authenticate` without a valid one, 403 when its
//!   scopes do not allow the operation. The token's tenant is the only
//!   tenant a request can reach.
//! - Shutdown (SIGINT / SIGTERM) stops accepting, lets in-flight requests
//!   (and so acknowledged writes) finish, then flushes the store.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::mcp::{HmgServer, ScopeResolver};
use crate::relay::SharedMemory;
use crate::token::{Principal, TokenStore};

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

/// Largest request body.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Parses and checks `--listen`: a non-loopback address needs tokens.
pub fn listen_address(text: &str, tokens_configured: bool) -> Result<SocketAddr, ServeError> {
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
    schema: crate::graphql::HmgSchema,
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
pub fn explorer_dir() -> Option<std::path::PathBuf> {
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

/// POST `/graphql`. A request that is not GraphQL over HTTP, or a document
/// that does not parse or validate, gets 400; field errors keep 200 with
/// `errors` beside the data.
async fn graphql(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    request: Result<async_graphql_axum::GraphQLRequest, async_graphql_axum::rejection::GraphQLRejection>,
) -> Response {
    let request = match request {
        Ok(request) => request.into_inner().data(principal),
        Err(rejection) => {
            let message = match rejection.0 {
                async_graphql::ParseRequestError::InvalidRequest(e) => format!("the body is not a GraphQL request (JSON with a \"query\" string): {e}"),
                async_graphql::ParseRequestError::PayloadTooLarge => "the request body is too large".to_owned(),
                other => format!("malformed GraphQL request: {other}"),
            };
            return error(StatusCode::BAD_REQUEST, message);
        }
    };
    let span = tracing::info_span!("graphql", operation = request.operation_name.as_deref().unwrap_or(""));
    let response = tracing::Instrument::instrument(state.schema.execute(request), span).await;
    let request_error = response.data == async_graphql::Value::Null && !response.errors.is_empty() && response.errors.iter().all(|e| e.path.is_empty());
    let forbidden = response.errors.iter().any(|e| {
        e.extensions.as_ref().and_then(|x| x.get("code")).is_some_and(|code| *code == async_graphql::Value::from("FORBIDDEN"))
    });
    let status = if forbidden {
        StatusCode::FORBIDDEN
    } else if request_error {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut http = async_graphql_axum::GraphQLResponse::from(response).into_response();
    *http.status_mut() = status;
    http
}

/// A JSON error response.
fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message.to_string() }))).into_response()
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
    let mut response = error(StatusCode::UNAUTHORIZED, problem.unwrap_or("authentication required: send Authorization: Bearer <token> (create one with hmg token create)"));
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
    if path == "/healthz" || path.starts_with("/.well-known/") || explorer || documentation {
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
        "scopes_supported": crate::token::SCOPES,
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
    if !principal.read {
        return error(StatusCode::FORBIDDEN, "insufficient scope: SPARQL needs a token with memory:read");
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let text = if method == axum::http::Method::GET {
        if params.update.is_some() {
            return error(StatusCode::BAD_REQUEST, crate::sparql::SparqlError::Update);
        }
        params.query
    } else {
        match content_type.as_str() {
            "application/sparql-query" => match String::from_utf8(body.to_vec()) {
                Ok(text) => Some(text),
                Err(_) => return error(StatusCode::BAD_REQUEST, "the query is not UTF-8"),
            },
            "application/x-www-form-urlencoded" => match form_params(&body) {
                Ok(form) if form.update.is_some() => return error(StatusCode::BAD_REQUEST, crate::sparql::SparqlError::Update),
                Ok(form) => form.query,
                Err(message) => return error(StatusCode::BAD_REQUEST, message),
            },
            "application/sparql-update" => return error(StatusCode::BAD_REQUEST, crate::sparql::SparqlError::Update),
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
        return error(StatusCode::SERVICE_UNAVAILABLE, "the store is open in another hmg process; SPARQL is served by the process that owns it");
    };
    let tenant = principal.tenant.clone();
    let answer = tokio::task::spawn_blocking(move || crate::sparql::answer(&memory, &tenant, &text, &accept, crate::sparql::DEFAULT_TIMEOUT)).await;
    use crate::sparql::SparqlError as E;
    match answer {
        Ok(Ok(answer)) => ([(header::CONTENT_TYPE, answer.media_type)], answer.body).into_response(),
        Ok(Err(e @ (E::Syntax(_) | E::Update | E::Evaluation(_)))) => error(StatusCode::BAD_REQUEST, e),
        Ok(Err(e @ E::TooLarge)) => error(StatusCode::PAYLOAD_TOO_LARGE, e),
        Ok(Err(e @ E::NotAcceptable(_))) => error(StatusCode::NOT_ACCEPTABLE, e),
        Ok(Err(e @ E::Timeout(_))) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(join) => {
            tracing::error!(error = %join, "SPARQL evaluation panicked");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal error while evaluating the query")
        }
    }
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

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`, as in
/// forms); a `%` not followed by two hex digits stays as it is.
pub(crate) fn percent_decode(part: &[u8], plus_is_space: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        let escaped = (part[i] == b'%' && i + 3 <= part.len())
            .then(|| std::str::from_utf8(&part[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
            .flatten();
        match (part[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', None) if plus_is_space => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    out
}

/// `application/x-www-form-urlencoded` pairs (`+` is a space, `%XX` a byte).
fn url_pairs(body: &[u8]) -> Vec<(String, String)> {
    let decode = |part: &[u8]| String::from_utf8_lossy(&percent_decode(part, true)).into_owned();
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|b| *b == b'=') {
            Some(eq) => (decode(&pair[..eq]), decode(&pair[eq + 1..])),
            None => (decode(pair), String::new()),
        })
        .collect()
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

/// The application's routes over `shared`, authenticated with `tokens`.
pub fn router(shared: Arc<SharedMemory>, tokens: Arc<TokenStore>, address: SocketAddr, cancel: tokio_util::sync::CancellationToken) -> Result<Router, ServeError> {
    let local_tenant = crate::scope::os_user();
    let resolver = ScopeResolver { tenant: local_tenant.clone(), directories: Vec::new(), hook_key: None };
    let server = HmgServer::new(Arc::clone(&shared), resolver, format!("http:{local_tenant}"));
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned(), "[::1]".to_owned(), address.to_string()];
    if !address.ip().is_loopback() {
        // A network deployment is reached by its address or any name; tokens guard it.
        hosts.clear();
    }
    let schema = crate::graphql::schema(Arc::clone(&shared));
    let rest = crate::rest::RestState::new(Arc::clone(&shared))?;
    let state = AppState { shared, tokens, local_tenant, schema };
    Ok(Router::new()
        .nest_service("/mcp", crate::mcp::http_service(server, hosts, cancel))
        .route("/sparql", get(sparql).post(sparql))
        .route("/graphql", get(explorer_page).post(graphql))
        .route("/graphql/assets/{name}", get(explorer_asset))
        .merge(crate::rest::routes(rest))
        .route("/healthz", get(healthz))
        .route("/.well-known/oauth-protected-resource", get(protected_resource))
        .route("/.well-known/oauth-protected-resource/mcp", get(protected_resource))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(trace_request))
        .with_state(state))
}

/// Serves until SIGINT or SIGTERM; `ready` hears the bound address.
pub async fn serve(shared: Arc<SharedMemory>, tokens: Arc<TokenStore>, address: SocketAddr, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    let io = |source| ServeError::Io { address: address.to_string(), source };
    let listener = tokio::net::TcpListener::bind(address).await.map_err(io)?;
    let bound = listener.local_addr().map_err(io)?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let app = router(Arc::clone(&shared), tokens, bound, cancel.clone())?;
    ready(bound);
    let stopping = cancel.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing in-flight requests");
            stopping.cancel();
        })
        .await
        .map_err(io)?;
    if let Err(error) = shared.flush() {
        tracing::warn!(%error, "flushing the store at shutdown failed");
    }
    Ok(())
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
