//! What a web page may do to `hmg serve`: nothing, unless allowed.
//!
//! A server on loopback without tokens trusts whoever can reach it, and a
//! browser is such a someone: any page it shows can send requests to
//! `127.0.0.1` (CSRF) or, through DNS rebinding, make its own name resolve
//! there and read the answers. Three checks on every route close that:
//!
//! - **Host**: on a loopback listen address only `localhost`, `127.0.0.1`,
//!   `[::1]` (and names given with `--allow-host`) are served; a rebinding
//!   page's requests carry its own name and are refused.
//! - **Origin**: a request whose `Origin` is not this server's own origin
//!   (or one given with `--allow-origin`) is refused, and so is one a
//!   browser marks `Sec-Fetch-Site: cross-site` / `same-site` (a page's
//!   `<img>`/form GET carries no `Origin`, but does carry that).
//! - **Content types** that a page may send without a CORS preflight
//!   (`text/plain`, forms, multipart) are refused where JSON is expected
//!   (GraphQL, REST; handlers check it); the SPARQL form post is allowed
//!   only because the Origin check above already held.
//!
//! Allowed origins get CORS answers (preflight and `Access-Control-Allow-*`),
//! so a trusted local web app can use the API. Requests from non-browser
//! clients (no `Origin`, no `Sec-Fetch-Site`) are unaffected.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The browser-safety policy of one server.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    /// Host names served (lowercase, without port); `None`: any.
    hosts: Option<Vec<String>>,
    /// Origins besides the server's own that may call it (`scheme://host[:port]`).
    origins: Vec<String>,
}

impl Guard {
    /// The policy for a server listening on `address` (loopback: the
    /// loopback names plus `extra_hosts`; otherwise `extra_hosts`, or any
    /// host when none are given, since tokens guard such a server).
    pub(crate) fn new(address: std::net::SocketAddr, extra_hosts: &[String], origins: &[String]) -> Guard {
        let mut hosts: Vec<String> = extra_hosts.iter().map(|h| normalize_host(h)).collect();
        if address.ip().is_loopback() {
            hosts.extend(["localhost", "127.0.0.1", "[::1]"].map(str::to_owned));
        } else if hosts.is_empty() {
            return Guard { hosts: None, origins: origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect() };
        } else {
            hosts.push(normalize_host(&address.ip().to_string()));
        }
        Guard { hosts: Some(hosts), origins: origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect() }
    }

    /// The Origin patterns rmcp's own check must accept (ours are enforced
    /// first; this keeps rmcp from refusing what we allowed).
    pub(crate) fn mcp_origins(&self) -> Vec<String> {
        let mut origins = vec!["http://localhost:*".to_owned(), "http://127.0.0.1:*".to_owned(), "http://[::1]:*".to_owned()];
        origins.extend(self.origins.iter().cloned());
        origins
    }

    /// The Host names rmcp's own check must accept (empty: any).
    pub(crate) fn mcp_hosts(&self, address: std::net::SocketAddr) -> Vec<String> {
        match &self.hosts {
            None => Vec::new(),
            Some(hosts) => {
                let mut all = hosts.clone();
                all.extend(hosts.iter().map(|h| format!("{h}:{}", address.port())));
                all.push("::1".to_owned());
                all
            }
        }
    }
}

/// `Example.COM:80` → `example.com`; `[::1]:7411` → `[::1]`.
fn normalize_host(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => format!("[{}]", &rest[..end]),
            None => host,
        };
    }
    if host.matches(':').count() > 1 {
        // A bare IPv6 address.
        return format!("[{host}]");
    }
    host.split(':').next().unwrap_or("").to_owned()
}

/// The middleware: Host and Origin checks, CORS for allowed origins.
pub(crate) async fn guard(State(guard): State<Arc<Guard>>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    if let Some(hosts) = &guard.hosts {
        let Some(host) = &host else {
            return super::error(StatusCode::BAD_REQUEST, "the request has no Host header".to_owned());
        };
        if !hosts.contains(&normalize_host(host)) {
            return super::error(
                StatusCode::FORBIDDEN,
                format!(
                    "Host '{host}' is not served here (allowed: {}); a page that rebinds its name to this address is refused; start hmg serve with --allow-host NAME to serve another name",
                    hosts.join(", ")
                ),
            );
        }
    }
    let origin = headers.get(header::ORIGIN).map(|o| o.to_str().unwrap_or("").trim_end_matches('/').to_ascii_lowercase());
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let same_origin = |origin: &str| {
        host.as_deref().is_some_and(|host| {
            origin == format!("http://{}", host.to_ascii_lowercase()) || origin == format!("https://{}", host.to_ascii_lowercase())
        })
    };
    let explicitly_allowed = origin.as_deref().is_some_and(|o| guard.origins.iter().any(|a| a == o));
    let cross = match origin.as_deref() {
        Some(origin) => !same_origin(origin) && !explicitly_allowed,
        None => fetch_site == "cross-site" || fetch_site == "same-site",
    };
    if cross {
        let from = origin.clone().unwrap_or_else(|| format!("a {fetch_site} page"));
        return super::error(
            StatusCode::FORBIDDEN,
            format!(
                "cross-origin request from {from} refused: only this server's own pages may call it from a browser; start hmg serve with --allow-origin ORIGIN to allow a web app"
            ),
        );
    }
    if explicitly_allowed && request.method() == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        add_cors(response.headers_mut(), origin.as_deref().unwrap_or(""));
        return response;
    }
    let mut response = next.run(request).await;
    if explicitly_allowed {
        add_cors(response.headers_mut(), origin.as_deref().unwrap_or(""));
    }
    response
}

fn add_cors(headers: &mut HeaderMap, origin: &str) {
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, PUT, DELETE, OPTIONS"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id"),
    );
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("mcp-session-id, retry-after"));
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
}

/// Whether the request's `Content-Type` is `application/json` (parameters
/// allowed).
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_normalized() {
        assert_eq!(normalize_host("LocalHost:7411"), "localhost");
        assert_eq!(normalize_host("[::1]:7411"), "[::1]");
        assert_eq!(normalize_host("::1"), "[::1]");
        assert_eq!(normalize_host("127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn a_loopback_server_serves_loopback_names_only() {
        let guard = Guard::new("127.0.0.1:7411".parse().unwrap(), &[], &[]);
        assert_eq!(guard.hosts, Some(vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "[::1]".to_owned()]));
        let open = Guard::new("0.0.0.0:7411".parse().unwrap(), &[], &[]);
        assert_eq!(open.hosts, None);
        let named = Guard::new("0.0.0.0:7411".parse().unwrap(), &["Memory.example".to_owned()], &["http://App.example/".to_owned()]);
        assert_eq!(named.hosts, Some(vec!["memory.example".to_owned(), "0.0.0.0".to_owned()]));
        assert_eq!(named.origins, vec!["http://app.example".to_owned()]);
    }
}
