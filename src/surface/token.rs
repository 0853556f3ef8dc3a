//! Access tokens for the HTTP surfaces: `hmg token create|list|revoke`.
//!
//! **Invariants:**
//! - A token is bound to one tenant and carries scopes `memory:read` and/or
//!   `memory:write`; only its SHA-256 is stored (`<store>/tokens.json`, mode
//!   0600). The secret is shown once, at creation.
//! - The file is replaced atomically (write, then rename), so a running
//!   server, which reloads it when it changes, never reads half a file.
//! - A revoked token stays listed (who had access, until when) and never
//!   authenticates again.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The read scope.
pub(crate) const READ: &str = "memory:read";
/// The write scope.
pub(crate) const WRITE: &str = "memory:write";
/// Every scope.
pub(crate) const SCOPES: &[&str] = &[READ, WRITE];

/// Token errors.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A bad argument.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// Which argument.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// No token with this id.
    #[error("no token with id '{0}' (see hmg token list)")]
    NotFound(String),
    /// The token file could not be read or written.
    #[error("token file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What happened.
        message: String,
    },
}

impl crate::fault::Classified for TokenError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            TokenError::Invalid { .. } => crate::fault::Fault::Invalid,
            TokenError::NotFound(_) => crate::fault::Fault::NotFound,
            TokenError::File { .. } => crate::fault::Fault::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            TokenError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// One stored token (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TokenRecord {
    /// Public id (a ULID), used to revoke.
    pub id: String,
    /// A label.
    #[serde(default)]
    pub name: Option<String>,
    /// The tenant it acts in.
    pub tenant: String,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, once revoked.
    #[serde(default)]
    pub revoked_at: Option<String>,
}

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    /// Tenant.
    pub tenant: String,
    /// May read (`memory:read`, or `memory:write`, which implies it: every
    /// write answers with what it found, so write-only could not be blind).
    pub read: bool,
    /// May write.
    pub write: bool,
    /// The token used (`None`: the local user on a loopback server without tokens).
    pub token_id: Option<String>,
}

impl Principal {
    /// The local user, with every scope.
    pub(crate) fn local(tenant: impl Into<String>) -> Principal {
        Principal { tenant: tenant.into(), read: true, write: true, token_id: None }
    }

    /// The one access check of every surface: `what` (a route, a tool, a
    /// GraphQL operation) needs `memory:write` when it `writes`, else
    /// `memory:read`.
    pub(crate) fn require(&self, writes: bool, what: &str) -> Result<(), Denied> {
        let (allowed, needed) = if writes { (self.write, "memory:write") } else { (self.read, "memory:read") };
        if allowed { Ok(()) } else { Err(Denied(format!("insufficient scope: {what} needs a token with {needed}"))) }
    }

    /// Actor name for audit entries.
    pub(crate) fn actor(&self, surface: &str) -> String {
        match &self.token_id {
            Some(id) => format!("{surface}:token:{id}"),
            None => format!("{surface}:{}", self.tenant),
        }
    }
}

/// A principal's token lacks the scope a request needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Denied(String);

impl crate::fault::Classified for Denied {
    fn fault(&self) -> crate::fault::Fault {
        crate::fault::Fault::Forbidden
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<TokenRecord>,
}

/// The tokens of one store.
#[derive(Debug)]
pub(crate) struct TokenStore {
    path: PathBuf,
    cache: Mutex<Option<(Option<SystemTime>, Vec<TokenRecord>)>>,
}

fn hash(secret: &str) -> String {
    hex::encode(sha2::Sha256::digest(secret.trim().as_bytes()))
}

impl TokenStore {
    /// The tokens of the store in `dir`.
    pub(crate) fn new(dir: &Path) -> TokenStore {
        TokenStore { path: dir.join("tokens.json"), cache: Mutex::new(None) }
    }

    fn file_error(&self, message: impl Into<String>) -> TokenError {
        TokenError::File { path: self.path.clone(), message: message.into() }
    }

    fn read(&self) -> Result<Vec<TokenRecord>, TokenError> {
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((seen, tokens)) = cache.as_ref()
            && *seen == modified
            && modified.is_some()
        {
            return Ok(tokens.clone());
        }
        let tokens = match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice::<TokenFile>(&bytes).map_err(|e| self.file_error(format!("not a token file: {e}")))?.tokens,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(self.file_error(error.to_string())),
        };
        *cache = Some((modified, tokens.clone()));
        Ok(tokens)
    }

    fn write(&self, tokens: &[TokenRecord]) -> Result<(), TokenError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.file_error(e.to_string()))?;
        }
        let temporary = self.path.with_extension(format!("json.{}", std::process::id()));
        let bytes = serde_json::to_vec_pretty(&TokenFile { tokens: tokens.to_vec() }).map_err(|e| self.file_error(e.to_string()))?;
        std::fs::write(&temporary, bytes).map_err(|e| self.file_error(e.to_string()))?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600)).map_err(|e| self.file_error(e.to_string()))?;
        std::fs::rename(&temporary, &self.path).map_err(|e| self.file_error(e.to_string()))?;
        *self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        Ok(())
    }

    /// Creates a token; returns its record and the secret (shown once).
    pub(crate) fn create(&self, tenant: &str, scopes: &[String], name: Option<String>) -> Result<(TokenRecord, String), TokenError> {
        // A label is stored text: a secret pasted into it is redacted.
        let name = name.map(|n| crate::text::redact(&n).text);
        let tenant = tenant.trim();
        if tenant.is_empty() || tenant.chars().any(char::is_control) || tenant.chars().count() > crate::scope::MAX_SCOPE_COMPONENT_CHARS {
            return Err(TokenError::Invalid {
                field: "tenant",
                message: "a tenant name without control characters, at most 200 characters".to_owned(),
            });
        }
        let mut granted: Vec<String> = Vec::new();
        for scope in scopes.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            if !SCOPES.contains(&scope) {
                return Err(TokenError::Invalid {
                    field: "scope",
                    message: format!("unknown scope '{scope}'; expected {}", SCOPES.join(" or ")),
                });
            }
            if !granted.iter().any(|g| g == scope) {
                granted.push(scope.to_owned());
            }
        }
        if granted.is_empty() {
            return Err(TokenError::Invalid { field: "scope", message: format!("give at least one scope: {}", SCOPES.join(", ")) });
        }
        let mut random = [0u8; 24];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").map_err(|e| self.file_error(e.to_string()))?, &mut random)
            .map_err(|e| self.file_error(e.to_string()))?;
        let secret = format!("hmg_{}", hex::encode(random));
        let record = TokenRecord {
            id: ulid::Ulid::generate().to_string(),
            name,
            tenant: tenant.to_owned(),
            scopes: granted,
            hash: hash(&secret),
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            revoked_at: None,
        };
        let mut tokens = self.read()?;
        tokens.push(record.clone());
        self.write(&tokens)?;
        Ok((record, secret))
    }

    /// Every token, revoked ones included.
    pub(crate) fn list(&self) -> Result<Vec<TokenRecord>, TokenError> {
        self.read()
    }

    /// Revokes the token with this id.
    pub(crate) fn revoke(&self, id: &str) -> Result<TokenRecord, TokenError> {
        let mut tokens = self.read()?;
        let token = tokens.iter_mut().find(|t| t.id.eq_ignore_ascii_case(id.trim())).ok_or_else(|| TokenError::NotFound(id.to_owned()))?;
        if token.revoked_at.is_none() {
            token.revoked_at = Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        let revoked = token.clone();
        self.write(&tokens)?;
        Ok(revoked)
    }

    /// Whether any token is active (then every request must carry one).
    pub(crate) fn any_active(&self) -> Result<bool, TokenError> {
        Ok(self.read()?.iter().any(|t| t.revoked_at.is_none()))
    }

    /// The principal of a presented secret, if it is an active token.
    pub(crate) fn authenticate(&self, secret: &str) -> Result<Option<Principal>, TokenError> {
        let presented = hash(secret);
        Ok(self.read()?.into_iter().find(|t| t.revoked_at.is_none() && t.hash == presented).map(|t| Principal {
            read: t.scopes.iter().any(|s| s == READ || s == WRITE),
            write: t.scopes.iter().any(|s| s == WRITE),
            tenant: t.tenant,
            token_id: Some(t.id),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_authenticate_until_revoked_and_only_hashes_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::new(dir.path());
        assert!(!store.any_active().unwrap());
        let (record, secret) = store.create("alice", &["memory:read".to_owned()], Some("ci".to_owned())).unwrap();
        let text = std::fs::read_to_string(dir.path().join("tokens.json")).unwrap();
        assert!(!text.contains(&secret) && text.contains(&record.hash));
        let principal = store.authenticate(&secret).unwrap().unwrap();
        assert_eq!((principal.tenant.as_str(), principal.read, principal.write), ("alice", true, false));
        assert!(store.authenticate("hmg_wrong").unwrap().is_none());
        let (_, writer) = store.create("alice", &["memory:write".to_owned()], None).unwrap();
        let principal = store.authenticate(&writer).unwrap().unwrap();
        assert_eq!((principal.read, principal.write), (true, true), "memory:write implies memory:read");
        store.revoke(&record.id).unwrap();
        assert!(store.authenticate(&secret).unwrap().is_none());
        assert!(matches!(store.create("alice", &["memory:admin".to_owned()], None), Err(TokenError::Invalid { field: "scope", .. })));
        assert!(matches!(store.revoke("nope"), Err(TokenError::NotFound(_))));
    }
}
