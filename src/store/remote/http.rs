//! The SPARQL 1.1 Protocol over HTTP: POSTed forms (`query=` / `update=`),
//! a request timeout, and the store's authentication (HTTP Basic or Digest
//! with a user and password, or a bearer token).

use std::sync::Mutex;
use std::time::Duration;

use md5::Digest as _;

use super::super::{Result, StoreError};

/// Credentials for the store.
#[derive(Clone, Default)]
pub enum Credentials {
    /// No authentication.
    #[default]
    None,
    /// A user and password: HTTP Basic or Digest, as the store asks.
    Password {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Password { user, .. } => write!(f, "Password {{ user: {user:?}, password: \"…\" }}"),
            Credentials::Bearer(_) => f.write_str("Bearer(\"…\")"),
        }
    }
}

/// The largest answer read from the store.
const MAX_ANSWER_BYTES: u64 = 1 << 30;

/// A Digest challenge remembered between requests.
#[derive(Debug, Clone)]
struct Challenge {
    realm: String,
    nonce: String,
    opaque: Option<String>,
    qop_auth: bool,
    count: u32,
}

/// How the next request authenticates.
#[derive(Debug, Clone)]
enum Scheme {
    Unknown,
    Basic,
    Digest(Challenge),
}

/// An HTTP client for one store.
pub(crate) struct Client {
    agent: ureq::Agent,
    credentials: Credentials,
    scheme: Mutex<Scheme>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("credentials", &self.credentials).finish_non_exhaustive()
    }
}

/// An answer: status and body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    /// The row cap the store says it applied (Virtuoso's
    /// `X-SPARQL-MaxRows`, sent when an answer reaches `ResultSetMaxRows`).
    pub(crate) max_rows: Option<u64>,
}

impl Client {
    pub(crate) fn new(credentials: Credentials, timeout: Duration) -> Client {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(5))))
            .http_status_as_error(false)
            .max_idle_connections_per_host(16)
            .build()
            .new_agent();
        Client { agent, credentials, scheme: Mutex::new(Scheme::Unknown) }
    }

    /// POSTs one form field (`query` or `update`) to `url`, authenticating
    /// as the store asks.
    pub(crate) fn post_form(&self, url: &str, field: &str, text: &str, accept: &str) -> Result<Answer> {
        let unreachable = |message: String| StoreError::Remote { endpoint: url.to_owned(), message };
        for _ in 0..2 {
            let mut request = self.agent.post(url).header("Accept", accept);
            if let Some(authorization) = self.authorization(url)? {
                request = request.header("Authorization", &authorization);
            }
            let mut response =
                request.send_form([(field, text)]).map_err(|e| unreachable(format!("is unreachable or did not answer in time: {e}")))?;
            let status = response.status().as_u16();
            let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let challenge = header("www-authenticate");
            let max_rows = header("x-sparql-maxrows").and_then(|v| v.trim().parse().ok());
            let body = read_body(&mut response).map_err(|e| unreachable(format!("broke off its answer: {e}")))?;
            if status == 401 {
                if let Some(challenge) = challenge
                    && self.learn(&challenge)
                {
                    continue;
                }
                if !matches!(self.credentials, Credentials::None) {
                    break;
                }
            }
            return Ok(Answer { status, body, max_rows });
        }
        Err(unreachable("refused the credentials (HTTP 401); check --store-user / --store-password".to_owned()))
    }

    /// POSTs a JSON body with extra headers (no store authentication: the
    /// writer node checks the node secret).
    pub(crate) fn post_json(&self, url: &str, body: &[u8], headers: &[(&str, &str)]) -> Result<Answer> {
        let unreachable = |message: String| StoreError::Remote { endpoint: url.to_owned(), message };
        let mut request = self.agent.post(url).header("Content-Type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response =
            request.send(body).map_err(|e| unreachable(format!("(the writer node) is unreachable or did not answer in time: {e}")))?;
        let status = response.status().as_u16();
        let body = read_body(&mut response).map_err(|e| unreachable(format!("(the writer node) broke off its answer: {e}")))?;
        Ok(Answer { status, body, max_rows: None })
    }

    /// Remembers how the store wants us to authenticate; `false` when there
    /// is nothing new to try.
    fn learn(&self, header: &str) -> bool {
        let Credentials::Password { .. } = &self.credentials else { return false };
        let mut scheme = self.scheme.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let lower = header.trim_start().to_ascii_lowercase();
        if lower.starts_with("digest") {
            let params = parse_params(header.trim_start()["digest".len()..].trim());
            let get = |key: &str| params.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.clone());
            let Some(nonce) = get("nonce") else { return false };
            // A new nonce (the store restarted, or ours went stale) is worth
            // one more try; the same nonce refused again is a wrong password.
            let retry = match &*scheme {
                Scheme::Digest(known) => known.nonce != nonce,
                _ => true,
            };
            *scheme = Scheme::Digest(Challenge {
                realm: get("realm").unwrap_or_default(),
                nonce,
                opaque: get("opaque"),
                qop_auth: get("qop").is_some_and(|q| q.split(',').any(|q| q.trim().eq_ignore_ascii_case("auth"))),
                count: 0,
            });
            retry
        } else if lower.starts_with("basic") {
            let retry = !matches!(&*scheme, Scheme::Basic);
            *scheme = Scheme::Basic;
            retry
        } else {
            false
        }
    }

    fn authorization(&self, url: &str) -> Result<Option<String>> {
        match &self.credentials {
            Credentials::None => Ok(None),
            Credentials::Bearer(token) => Ok(Some(format!("Bearer {token}"))),
            Credentials::Password { user, password } => {
                let mut scheme = self.scheme.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match &mut *scheme {
                    Scheme::Unknown => Ok(None),
                    Scheme::Basic => Ok(Some(format!("Basic {}", base64(format!("{user}:{password}").as_bytes())))),
                    Scheme::Digest(challenge) => {
                        challenge.count += 1;
                        Ok(Some(digest_header(challenge, user, password, "POST", &request_uri(url))))
                    }
                }
            }
        }
    }
}

/// An answer's body, up to [`MAX_ANSWER_BYTES`].
fn read_body(response: &mut ureq::http::Response<ureq::Body>) -> std::result::Result<Vec<u8>, ureq::Error> {
    response.body_mut().with_config().limit(MAX_ANSWER_BYTES).read_to_vec()
}

/// The path and query of a URL (what Digest signs).
fn request_uri(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    match after_scheme.find('/') {
        Some(index) => after_scheme[index..].to_owned(),
        None => "/".to_owned(),
    }
}

fn md5_hex(text: &str) -> String {
    hex::encode(md5::Md5::digest(text.as_bytes()))
}

/// RFC 7616 Digest (MD5, `qop=auth` when offered, RFC 2069 otherwise).
fn digest_header(challenge: &Challenge, user: &str, password: &str, method: &str, uri: &str) -> String {
    let ha1 = md5_hex(&format!("{user}:{}:{password}", challenge.realm));
    let ha2 = md5_hex(&format!("{method}:{uri}"));
    let mut header = format!("Digest username=\"{user}\", realm=\"{}\", nonce=\"{}\", uri=\"{uri}\"", challenge.realm, challenge.nonce);
    if challenge.qop_auth {
        let nc = format!("{:08x}", challenge.count);
        let cnonce = ulid::Ulid::generate().to_string().to_ascii_lowercase();
        let response = md5_hex(&format!("{ha1}:{}:{nc}:{cnonce}:auth:{ha2}", challenge.nonce));
        header.push_str(&format!(", qop=auth, nc={nc}, cnonce=\"{cnonce}\", response=\"{response}\""));
    } else {
        let response = md5_hex(&format!("{ha1}:{}:{ha2}", challenge.nonce));
        header.push_str(&format!(", response=\"{response}\""));
    }
    if let Some(opaque) = &challenge.opaque {
        header.push_str(&format!(", opaque=\"{opaque}\""));
    }
    header.push_str(", algorithm=MD5");
    header
}

/// `key="value", key=value, …` of an authentication challenge.
fn parse_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].trim().to_owned();
        rest = &rest[eq + 1..];
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            let value = quoted[..end].to_owned();
            rest = quoted.get(end + 1..).unwrap_or("");
            value
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            let value = rest[..end].trim().to_owned();
            rest = &rest[end..];
            value
        };
        params.push((key, value));
    }
    params
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_rfc_2617_example() {
        // RFC 2617 §3.5 (GET /dir/index.html, Mufasa / Circle Of Life).
        let challenge = Challenge {
            realm: "testrealm@host.com".into(),
            nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093".into(),
            opaque: Some("5ccc069c403ebaf9f0171e9517f40e41".into()),
            qop_auth: false,
            count: 1,
        };
        let header = digest_header(&challenge, "Mufasa", "Circle Of Life", "GET", "/dir/index.html");
        // Without qop: MD5(HA1:nonce:HA2).
        let ha1 = md5_hex("Mufasa:testrealm@host.com:Circle Of Life");
        let ha2 = md5_hex("GET:/dir/index.html");
        assert!(header.contains(&format!("response=\"{}\"", md5_hex(&format!("{ha1}:{}:{ha2}", challenge.nonce)))));
        assert!(header.contains("opaque=\"5ccc069c403ebaf9f0171e9517f40e41\""));
    }

    #[test]
    fn challenge_parameters_parse_quoted_and_bare() {
        let params = parse_params(r#"realm="SPARQL", domain="/sparql-auth", nonce="a,b", qop="auth", stale=false"#);
        assert_eq!(params[0], ("realm".into(), "SPARQL".into()));
        assert_eq!(params[2], ("nonce".into(), "a,b".into()));
        assert_eq!(params[4], ("stale".into(), "false".into()));
    }

    #[test]
    fn request_uri_and_base64() {
        assert_eq!(request_uri("http://127.0.0.1:8890/sparql-auth"), "/sparql-auth");
        assert_eq!(request_uri("https://h/a/b?x=1"), "/a/b?x=1");
        assert_eq!(request_uri("http://h"), "/");
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
    }
}
