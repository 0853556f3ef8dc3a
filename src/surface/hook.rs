//! Agent-host hooks (Claude Code's hook JSON; Codex speaks the same shapes):
//! `hmg hook session-start` injects the brief, `hmg hook pre-tool-use`
//! injects the scope into every HMG tool call.
//!
//! **Invariant:** a scope carries a proof that the hook wrote it: an HMAC-like
//! digest of its fields under a per-store key (`hook.key`, mode 0600, never
//! shown to a model). The MCP server trusts an argument scope only with a
//! valid proof; anything else a model sends is ignored.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;

use crate::scope::Scope;
use crate::tools::ScopeInput;

/// Largest hook input read from stdin.
const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;
/// The brief's budget: hosts cap `additionalContext` at 10,000 characters.
pub(crate) const BRIEF_MAX_CHARS: usize = 9_500;

/// Why a hook could not run.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The input is not the host's hook JSON.
    #[error("hook input: {0}")]
    Input(String),
    /// The key file could not be read or created.
    #[error("hook key {path}: {source}")]
    Key {
        /// Key file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The memory failed.
    #[error("{0}")]
    Tool(#[from] crate::tools::ToolError),
}

impl crate::fault::Classified for HookError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            HookError::Input(_) => crate::fault::Fault::Invalid,
            HookError::Key { .. } => crate::fault::Fault::Internal,
            HookError::Tool(error) => error.fault(),
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            HookError::Tool(error) => error.field(),
            _ => None,
        }
    }
}

/// The per-store key proving hook-injected scopes, created on first use.
pub(crate) fn load_or_create_key(store_dir: &Path) -> Result<Vec<u8>, HookError> {
    let path = store_dir.join("hook.key");
    let key_error = |source| HookError::Key { path: path.clone(), source };
    match std::fs::read(&path) {
        Ok(key) if key.len() >= 32 => return Ok(key),
        Ok(_) | Err(_) => {}
    }
    std::fs::create_dir_all(store_dir).map_err(key_error)?;
    let mut key = vec![0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key)).map_err(key_error)?;
    let key = hex::encode(key).into_bytes();
    // Write-then-rename, so two hooks starting together agree on one key.
    let temporary = store_dir.join(format!("hook.key.{}", std::process::id()));
    std::fs::write(&temporary, &key).map_err(key_error)?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600)).map_err(key_error)?;
    if let Err(error) = std::fs::hard_link(&temporary, &path) {
        let _ = std::fs::remove_file(&temporary);
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(key_error(error));
        }
        return std::fs::read(&path).map_err(key_error);
    }
    let _ = std::fs::remove_file(&temporary);
    Ok(key)
}

/// The proof of a scope under `key`.
pub(crate) fn proof(key: &[u8], scope: &Scope) -> String {
    let mut inner = sha2::Sha256::new();
    inner.update(key);
    for field in [Some(scope.tenant_id.as_str()), scope.workspace.as_deref(), scope.repository.as_deref(), scope.branch.as_deref()] {
        inner.update([0x1f]);
        inner.update(field.unwrap_or("\u{0}"));
    }
    let mut outer = sha2::Sha256::new();
    outer.update(key);
    outer.update(inner.finalize());
    hex::encode(outer.finalize())
}

/// The scope a hook injected, when its proof holds.
pub(crate) fn verified(key: &[u8], input: &ScopeInput) -> Option<Scope> {
    let scope = Scope {
        tenant_id: input.tenant_id.clone()?,
        workspace: input.workspace.clone(),
        repository: input.repository.clone(),
        branch: input.branch.clone(),
    };
    let expected = proof(key, &scope);
    let given = input.proof.as_deref()?;
    // Equal length hex strings; compare without early exit.
    (given.len() == expected.len() && given.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0).then_some(scope)
}

/// The scope input a hook injects for `scope`.
pub(crate) fn scope_input(key: &[u8], scope: &Scope) -> ScopeInput {
    ScopeInput {
        tenant_id: Some(scope.tenant_id.clone()),
        workspace: scope.workspace.clone(),
        repository: scope.repository.clone(),
        branch: scope.branch.clone(),
        proof: Some(proof(key, scope)),
    }
}

/// Reads the hook's JSON object from `input`.
pub(crate) fn read_input(input: &mut dyn Read) -> Result<serde_json::Map<String, Value>, HookError> {
    let mut text = String::new();
    input.take(MAX_INPUT_BYTES).read_to_string(&mut text).map_err(|e| HookError::Input(e.to_string()))?;
    crate::limits::check_nesting(&text, crate::limits::Syntax::Json, 64).map_err(|e| HookError::Input(e.to_string()))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(HookError::Input("expected a JSON object on stdin".to_owned())),
        Err(e) => Err(HookError::Input(format!("not JSON: {e}"))),
    }
}

#[derive(Debug, Deserialize)]
struct CommonInput {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    hook_event_name: Option<String>,
}

/// The directory a hook event happened in: its `cwd`, else the project
/// directory the host exports, else the process's.
fn event_dir(cwd: Option<&str>) -> PathBuf {
    cwd.filter(|c| !c.trim().is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from))
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."))
}

fn common(input: &serde_json::Map<String, Value>, event: &str) -> Result<CommonInput, HookError> {
    let common: CommonInput = serde_json::from_value(Value::Object(input.clone())).map_err(|e| HookError::Input(e.to_string()))?;
    if let Some(name) = &common.hook_event_name
        && name != event
    {
        return Err(HookError::Input(format!("hook_event_name is '{name}', this command handles {event}")));
    }
    Ok(common)
}

/// `hmg hook session-start`: the brief for the session's scope as
/// `additionalContext`.
pub(crate) fn session_start(
    input: &serde_json::Map<String, Value>,
    tenant: &str,
    shared: &crate::tools::relay::SharedMemory,
) -> Result<Value, HookError> {
    let common = common(input, "SessionStart")?;
    let scope = crate::scope::infer_scope(tenant, &event_dir(common.cwd.as_deref()));
    let caller = crate::memory::Caller::new(scope, "hook:session-start");
    let brief = shared.call(crate::tools::ToolCall::Brief { max_chars: BRIEF_MAX_CHARS }, &caller)?;
    let text = brief.get("text").and_then(Value::as_str).unwrap_or_default();
    let text: String = text.chars().take(BRIEF_MAX_CHARS).collect();
    Ok(json!({ "hookSpecificOutput": { "hookEventName": "SessionStart", "additionalContext": text } }))
}

/// `hmg hook pre-tool-use`: allows the call and returns its input with the
/// scope of the event's directory (every original field kept).
pub(crate) fn pre_tool_use(input: &serde_json::Map<String, Value>, tenant: &str, key: &[u8]) -> Result<Value, HookError> {
    let common = common(input, "PreToolUse")?;
    let mut tool_input = match input.get("tool_input") {
        Some(Value::Object(map)) => map.clone(),
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(_) => return Err(HookError::Input("tool_input must be a JSON object".to_owned())),
    };
    let scope = crate::scope::infer_scope(tenant, &event_dir(common.cwd.as_deref()));
    let injected = serde_json::to_value(scope_input(key, &scope)).map_err(|e| HookError::Input(e.to_string()))?;
    // reflect's own `scope` is a narrowing filter the caller chose: the
    // session's scope goes beside it.
    let tool_name = input.get("tool_name").and_then(Value::as_str).unwrap_or("");
    let key_name = if tool_name.ends_with("__reflect") { "bound_scope" } else { "scope" };
    tool_input.insert(key_name.to_owned(), injected);
    Ok(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": Value::Object(tool_input),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_binds_every_field() {
        let key = b"0123456789abcdef0123456789abcdef".to_vec();
        let scope = Scope::tenant("alice").with_workspace("acme").with_repository("api").with_branch("main");
        let input = scope_input(&key, &scope);
        assert_eq!(verified(&key, &input), Some(scope.clone()));
        let forged = ScopeInput { repository: Some("other".to_owned()), ..input.clone() };
        assert_eq!(verified(&key, &forged), None);
        assert_eq!(verified(b"another key, just as long, 32 b.", &input), None);
        assert_eq!(verified(&key, &ScopeInput { proof: None, ..input }), None);
        // Moving text between fields changes the proof.
        let a = Scope::tenant("t").with_workspace("ab").with_repository("c");
        let b = Scope::tenant("t").with_workspace("a").with_repository("bc");
        assert_ne!(proof(&key, &a), proof(&key, &b));
    }
}
