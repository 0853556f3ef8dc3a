//! `hmg serve`: the HTTP server. `/mcp` (streamable HTTP MCP) and
//! `/healthz`; every request is traced.
//!
//! **Invariants:**
//! - Without access tokens the server binds loopback only; any other
//!   address is refused at start with a message saying why.
//! - Shutdown (SIGINT / SIGTERM) stops accepting, lets in-flight requests
//!   (and so acknowledged writes) finish, then flushes the store.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::mcp::{HmgServer, ScopeResolver};
use crate::relay::SharedMemory;

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

/// Parses and checks `--listen`.
pub fn listen_address(text: &str) -> Result<SocketAddr, ServeError> {
    let address: SocketAddr = text.trim().parse().map_err(|_| ServeError::BadAddress(text.to_owned()))?;
    if !address.ip().is_loopback() {
        return Err(ServeError::Unauthenticated(address));
    }
    Ok(address)
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

/// The application's routes over `shared`.
pub fn router(shared: Arc<SharedMemory>, address: SocketAddr, cancel: tokio_util::sync::CancellationToken) -> Router {
    let resolver = ScopeResolver { tenant: crate::scope::os_user(), directories: Vec::new(), hook_key: None };
    let server = HmgServer::new(shared, resolver, format!("http:{}", crate::scope::os_user()));
    let hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned(), "[::1]".to_owned(), address.to_string()];
    Router::new()
        .nest_service("/mcp", crate::mcp::http_service(server, hosts, cancel))
        .route("/healthz", get(healthz))
        .layer(axum::middleware::from_fn(trace_request))
}

/// Serves until SIGINT or SIGTERM; `ready` hears the bound address.
pub async fn serve(shared: Arc<SharedMemory>, address: SocketAddr, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    let io = |source| ServeError::Io { address: address.to_string(), source };
    let listener = tokio::net::TcpListener::bind(address).await.map_err(io)?;
    let bound = listener.local_addr().map_err(io)?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let app = router(Arc::clone(&shared), bound, cancel.clone());
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
