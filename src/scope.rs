//! Scopes: tenant / workspace / repository / branch, their visibility rules,
//! and inference from a working directory's git repository.
//!
//! **Architecture invariant:** agents never choose their scope. Surfaces
//! resolve it (hook, project directory, working directory, client roots) and
//! overwrite anything a model sends.

use std::path::{Path, PathBuf};

/// Longest accepted scope component, in characters.
pub const MAX_SCOPE_COMPONENT_CHARS: usize = 200;

/// Where a memory lives. Atoms without workspace and repository are
/// tenant-wide (personal preferences and the like).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// Tenant: the OS user by default. Tenants never see each other.
    pub tenant_id: String,
    /// Usually the git remote owner.
    pub workspace: Option<String>,
    /// Repository name.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
}

/// A scope component that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// Empty tenant.
    #[error("scope.tenant_id must not be empty")]
    EmptyTenant,
    /// Too long.
    #[error("scope.{field} is longer than {max} characters", max = MAX_SCOPE_COMPONENT_CHARS)]
    TooLong {
        /// Which field.
        field: &'static str,
    },
    /// Control characters.
    #[error("scope.{field} contains control characters")]
    ControlCharacters {
        /// Which field.
        field: &'static str,
    },
}

impl crate::fault::Classified for ScopeError {
    fn fault(&self) -> crate::fault::Fault {
        crate::fault::Fault::Invalid
    }

    fn field(&self) -> Option<&str> {
        Some("scope")
    }
}

/// How an atom's scope relates to the scope of a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Visibility {
    /// Not visible at all.
    Hidden,
    /// Same repository, another branch: visible, ranked below.
    OtherBranch,
    /// Tenant-wide atom.
    TenantWide,
    /// Same repository and branch (or the reader has no branch).
    Same,
}

impl Scope {
    /// A tenant-wide scope.
    pub fn tenant(tenant_id: impl Into<String>) -> Scope {
        Scope { tenant_id: tenant_id.into(), workspace: None, repository: None, branch: None }
    }

    /// Builder: sets the workspace.
    #[must_use]
    pub fn with_workspace(mut self, workspace: impl Into<String>) -> Scope {
        self.workspace = Some(workspace.into());
        self
    }

    /// Builder: sets the repository.
    #[must_use]
    pub fn with_repository(mut self, repository: impl Into<String>) -> Scope {
        self.repository = Some(repository.into());
        self
    }

    /// Builder: sets the branch.
    #[must_use]
    pub fn with_branch(mut self, branch: impl Into<String>) -> Scope {
        self.branch = Some(branch.into());
        self
    }

    /// Trims every component, drops empty optional ones and checks limits.
    pub fn normalized(self) -> Result<Scope, ScopeError> {
        fn clean(field: &'static str, value: Option<String>) -> Result<Option<String>, ScopeError> {
            let Some(value) = value else { return Ok(None) };
            let value = value.trim().to_owned();
            if value.is_empty() {
                return Ok(None);
            }
            if value.chars().count() > MAX_SCOPE_COMPONENT_CHARS {
                return Err(ScopeError::TooLong { field });
            }
            if value.chars().any(char::is_control) {
                return Err(ScopeError::ControlCharacters { field });
            }
            Ok(Some(value))
        }
        let tenant_id = clean("tenant_id", Some(self.tenant_id))?.ok_or(ScopeError::EmptyTenant)?;
        Ok(Scope {
            tenant_id,
            workspace: clean("workspace", self.workspace)?,
            repository: clean("repository", self.repository)?,
            branch: clean("branch", self.branch)?,
        })
    }

    /// Whether atoms written here are visible to every repository of the tenant.
    pub fn is_tenant_wide(&self) -> bool {
        self.workspace.is_none() && self.repository.is_none()
    }

    /// `workspace/repository` (either part empty when unset), or `None` for
    /// a tenant-wide scope: how the indexes key a repository and how the
    /// CLI names one.
    pub fn repository_path(&self) -> Option<String> {
        (!self.is_tenant_wide())
            .then(|| format!("{}/{}", self.workspace.as_deref().unwrap_or(""), self.repository.as_deref().unwrap_or("")))
    }

    /// Whether `self` and `other` name the same repository of the same tenant
    /// (branches may differ). Exact dedup works at this level.
    pub fn same_repository(&self, other: &Scope) -> bool {
        self.tenant_id == other.tenant_id && self.workspace == other.workspace && self.repository == other.repository
    }

    /// Whether `atom_scope` is exactly this scope: same tenant, workspace and
    /// repository, and the same branch when `self` names one (the REST API's
    /// filter: `user_id`, `agent_id`, `run_id` all match).
    pub fn holds_exactly(&self, atom_scope: &Scope) -> bool {
        self.same_repository(atom_scope) && self.branch.as_ref().is_none_or(|b| atom_scope.branch.as_ref() == Some(b))
    }

    /// How an atom written in `atom_scope` appears to a reader in `self`.
    pub fn sees(&self, atom_scope: &Scope) -> Visibility {
        if self.tenant_id != atom_scope.tenant_id {
            return Visibility::Hidden;
        }
        if atom_scope.is_tenant_wide() {
            return Visibility::TenantWide;
        }
        if !self.same_repository(atom_scope) {
            return Visibility::Hidden;
        }
        match (&self.branch, &atom_scope.branch) {
            (Some(mine), Some(theirs)) if mine != theirs => Visibility::OtherBranch,
            _ => Visibility::Same,
        }
    }

    /// A short human-readable form: `tenant/workspace/repository@branch`.
    pub fn display(&self) -> String {
        let mut text = self.tenant_id.clone();
        if let Some(w) = &self.workspace {
            text.push('/');
            text.push_str(w);
        }
        if let Some(r) = &self.repository {
            text.push('/');
            text.push_str(r);
        }
        if let Some(b) = &self.branch {
            text.push('@');
            text.push_str(b);
        }
        text
    }
}

/// The OS user name, the default tenant: `USER`, `LOGNAME` or `USERNAME`,
/// else the name of the home directory, else `local`.
pub fn os_user() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .or_else(|| dirs::home_dir().and_then(|home| home.file_name().map(|n| n.to_string_lossy().into_owned())).filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "local".to_owned())
}

/// What a git working directory says about its repository.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitFacts {
    /// Top-level directory of the working tree.
    pub top_level: Option<PathBuf>,
    /// Remote owner (`origin` first, else the first remote).
    pub owner: Option<String>,
    /// Repository name from the remote, else the top-level folder name.
    pub name: Option<String>,
    /// Current branch (`None` when HEAD is detached).
    pub branch: Option<String>,
}

/// Infers a scope for `tenant` from `dir`: the enclosing git repository's
/// remote owner, name and current branch. Outside a repository the scope is
/// tenant-wide.
pub fn infer_scope(tenant: &str, dir: &Path) -> Scope {
    let facts = git_facts(dir);
    Scope { tenant_id: tenant.to_owned(), workspace: facts.owner, repository: facts.name, branch: facts.branch }
}

/// Reads git metadata from files (no `git` process): works from any
/// subdirectory and in linked worktrees.
pub fn git_facts(dir: &Path) -> GitFacts {
    let Some((top_level, git_dir)) = find_git_dir(dir) else {
        return GitFacts::default();
    };
    let common_dir =
        std::fs::read_to_string(git_dir.join("commondir")).ok().map(|rel| git_dir.join(rel.trim())).unwrap_or_else(|| git_dir.clone());
    let branch =
        std::fs::read_to_string(git_dir.join("HEAD")).ok().and_then(|head| head.trim().strip_prefix("ref: refs/heads/").map(str::to_owned));
    let remote_url = std::fs::read_to_string(common_dir.join("config")).ok().and_then(|config| remote_url(&config));
    let (owner, name) = match remote_url.as_deref().and_then(owner_and_name) {
        Some((owner, name)) => (owner, Some(name)),
        None => (None, None),
    };
    let name = name.or_else(|| top_level.file_name().map(|n| n.to_string_lossy().into_owned()));
    GitFacts { top_level: Some(top_level), owner, name, branch }
}

fn find_git_dir(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let start = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    for candidate in start.ancestors() {
        let dot_git = candidate.join(".git");
        if dot_git.is_dir() {
            return Some((candidate.to_path_buf(), dot_git));
        }
        if dot_git.is_file() {
            let text = std::fs::read_to_string(&dot_git).ok()?;
            let target = text.trim().strip_prefix("gitdir:")?.trim();
            let target = candidate.join(target);
            return Some((candidate.to_path_buf(), target));
        }
    }
    None
}

/// The URL of `origin`, else of the first remote, from a git config file.
fn remote_url(config: &str) -> Option<String> {
    let mut current_remote: Option<String> = None;
    let mut first: Option<String> = None;
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            current_remote = line.strip_prefix("[remote \"").and_then(|rest| rest.strip_suffix("\"]")).map(str::to_owned);
            continue;
        }
        let Some(remote) = &current_remote else { continue };
        let Some((key, value)) = line.split_once('=') else { continue };
        if key.trim() == "url" {
            let url = value.trim().to_owned();
            if remote == "origin" {
                return Some(url);
            }
            first.get_or_insert(url);
        }
    }
    first
}

/// `(owner, name)` from a remote URL: `https://host/owner/name.git`,
/// `git@host:owner/name.git`, `ssh://git@host/group/sub/name`, a local path.
pub fn owner_and_name(url: &str) -> Option<(Option<String>, String)> {
    let url = url.trim().trim_end_matches('/');
    let path = if let Some((_, rest)) = url.split_once("://") {
        rest.split_once('/').map(|(_, path)| path).unwrap_or("")
    } else if let Some((host, path)) = url.split_once(':') {
        if host.contains('/') { url } else { path }
    } else {
        url
    };
    let path = path.trim_end_matches(".git");
    let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let name = parts.pop()?.to_owned();
    let owner = parts.pop().map(str::to_owned);
    Some((owner, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_give_owner_and_name() {
        let cases = [
            ("https://github.com/HMG-AI/hmg.git", Some("HMG-AI"), "hmg"),
            ("git@github.com:qiankun/HMG-DEV.git", Some("qiankun"), "HMG-DEV"),
            ("ssh://git@gitlab.example.com/group/sub/proj", Some("sub"), "proj"),
            ("/srv/git/local-repo.git", Some("git"), "local-repo"),
        ];
        for (url, owner, name) in cases {
            let (o, n) = owner_and_name(url).unwrap();
            assert_eq!(o.as_deref(), owner, "{url}");
            assert_eq!(n, name, "{url}");
        }
    }

    #[test]
    fn origin_wins_over_other_remotes() {
        let config =
            "[core]\n\tbare = false\n[remote \"upstream\"]\n\turl = https://h/up/x.git\n[remote \"origin\"]\n\turl = https://h/me/x.git\n";
        assert_eq!(remote_url(config).as_deref(), Some("https://h/me/x.git"));
    }

    #[test]
    fn a_repository_path_names_workspace_and_repository_and_tenant_wide_has_none() {
        assert_eq!(Scope::tenant("t").repository_path(), None);
        assert_eq!(Scope::tenant("t").with_branch("main").repository_path(), None, "a branch alone is tenant-wide");
        let scope = Scope::tenant("t").with_workspace("acme").with_repository("widgets").with_branch("main");
        assert_eq!(scope.repository_path().as_deref(), Some("acme/widgets"), "the branch is not part of it");
        assert_eq!(Scope::tenant("t").with_repository("仓库").repository_path().as_deref(), Some("/仓库"));
        assert_eq!(Scope::tenant("t").with_workspace("チーム").repository_path().as_deref(), Some("チーム/"));
    }

    #[test]
    fn visibility_rules() {
        let reader = Scope::tenant("t").with_workspace("w").with_repository("r").with_branch("main");
        assert_eq!(reader.sees(&Scope::tenant("t")), Visibility::TenantWide);
        assert_eq!(reader.sees(&reader.clone()), Visibility::Same);
        assert_eq!(reader.sees(&reader.clone().with_branch("dev")), Visibility::OtherBranch);
        assert_eq!(reader.sees(&reader.clone().with_repository("other")), Visibility::Hidden);
        assert_eq!(reader.sees(&Scope::tenant("u")), Visibility::Hidden);
    }

    #[test]
    fn normalization_checks_limits() {
        assert_eq!(Scope::tenant("  ").normalized(), Err(ScopeError::EmptyTenant));
        let long = "x".repeat(MAX_SCOPE_COMPONENT_CHARS + 1);
        assert!(Scope::tenant("t").with_branch(long).normalized().is_err());
        let s = Scope::tenant(" t ").with_branch(" ").normalized().unwrap();
        assert_eq!(s, Scope::tenant("t"));
    }
}
