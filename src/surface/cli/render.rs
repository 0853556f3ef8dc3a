//! How each answer is shown: the tool's JSON with `--json` (the contract
//! scripts rely on), else a few readable lines. Each function returns the
//! exit status the answer means.

use std::io::Write;

use serde::Serialize;

use super::{CliError, Exit};
use crate::memory::{Brief, CorrectOutcome, GovernOutcome, HandoffOutcome, MemorizeOutcome, ReflectReport, Stats};
use crate::{Effect, RecallOutcome};

/// Where answers go, and in which form.
pub(super) struct Output<'a> {
    /// `--json`.
    pub(super) json: bool,
    /// Answers.
    pub(super) out: &'a mut dyn Write,
    /// Warnings and progress.
    pub(super) err: &'a mut dyn Write,
}

/// One pretty-printed JSON document.
pub(super) fn write_json(out: &mut dyn Write, value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| std::io::Error::other(e.to_string()))?;
    writeln!(out, "{text}")?;
    Ok(())
}

/// A rejected write exits 2, anything else 0.
pub(super) fn exit_for(effect: Effect) -> Exit {
    match effect {
        Effect::Rejected => Exit::Rejected,
        _ => Exit::Ok,
    }
}

pub(super) fn memorized(o: &mut Output<'_>, outcome: MemorizeOutcome) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &outcome)?;
    } else {
        match outcome.effect {
            Effect::Applied => writeln!(o.out, "memorized {}", outcome.atom_id.as_deref().unwrap_or_default())?,
            Effect::NoOp => writeln!(o.out, "already known as {}", outcome.deduped_with.as_deref().unwrap_or_default())?,
            Effect::Rejected => writeln!(o.out, "rejected: {}", outcome.reason.as_deref().unwrap_or_default())?,
        }
        if !outcome.redactions.is_empty() {
            writeln!(o.out, "redacted: {}", outcome.redactions.join(", "))?;
        }
    }
    Ok(exit_for(outcome.effect))
}

pub(super) fn recalled(o: &mut Output<'_>, outcome: RecallOutcome, scope: &crate::Scope) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &outcome)?;
        return Ok(Exit::Ok);
    }
    if let Some(warning) = &outcome.warning {
        writeln!(o.err, "warning: {warning}")?;
    }
    if outcome.atoms.is_empty() {
        writeln!(o.out, "no memories found")?;
        writeln!(o.err, "{}", searched(scope))?;
    }
    for atom in &outcome.atoms {
        writeln!(o.out, "{:.3}  {}  [{} {}] {}", atom.score, atom.atom_id, atom.kind, atom.source, atom.content)?;
        if let Some(explain) = &atom.explain {
            writeln!(o.out, "       {}", serde_json::to_string(explain).unwrap_or_default())?;
        }
    }
    Ok(Exit::Ok)
}

/// What an empty recall searched, and where else memories may be: the
/// scope comes from the working directory, so a recall run outside the
/// repository an import or an agent wrote to finds nothing and says why.
fn searched(scope: &crate::Scope) -> String {
    let (what, others) = match scope.repository_path() {
        Some(path) => (format!("repository {path} and tenant-wide memories"), "in another repository"),
        None => ("tenant-wide memories only (no git repository here)".to_owned(), "inside a repository"),
    };
    format!(
        "searched tenant '{}': {what}; memories written {others} are found from that repository's directory or with \
         --workspace and --repository",
        scope.tenant_id
    )
}

pub(super) fn corrected(o: &mut Output<'_>, outcome: CorrectOutcome) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &outcome)?;
    } else {
        match (&outcome.effect, &outcome.new_atom_id, &outcome.reason) {
            (Effect::Rejected, _, reason) => writeln!(o.out, "rejected: {}", reason.as_deref().unwrap_or(""))?,
            (_, Some(new_id), _) => writeln!(o.out, "replaced {} with {new_id}", outcome.target_atom)?,
            _ => writeln!(o.out, "corrected {}", outcome.target_atom)?,
        }
    }
    Ok(exit_for(outcome.effect))
}

pub(super) fn governed(o: &mut Output<'_>, outcome: GovernOutcome) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &outcome)?;
    } else {
        match (&outcome.effect, &outcome.lesson_atom_id, &outcome.reason) {
            (Effect::Rejected, _, reason) => writeln!(o.out, "rejected: {}", reason.as_deref().unwrap_or(""))?,
            (_, Some(lesson), _) => writeln!(o.out, "derived lesson {lesson}; sealed {}", outcome.target_atom)?,
            _ => writeln!(o.out, "governed {}", outcome.target_atom)?,
        }
    }
    Ok(exit_for(outcome.effect))
}

pub(super) fn handed_off(o: &mut Output<'_>, outcome: HandoffOutcome) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &outcome)?;
    } else {
        match outcome.effect {
            Effect::Rejected => writeln!(o.out, "rejected: {}", outcome.reason.as_deref().unwrap_or(""))?,
            _ => writeln!(o.out, "handoff stored as {}", outcome.atom_id.as_deref().unwrap_or(""))?,
        }
    }
    Ok(exit_for(outcome.effect))
}

pub(super) fn reflected(o: &mut Output<'_>, report: ReflectReport) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &report)?;
    } else {
        writeln!(o.out, "{}", report.to_text())?;
    }
    Ok(Exit::Ok)
}

pub(super) fn stats(o: &mut Output<'_>, stats: Stats) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &stats)?;
    } else {
        writeln!(
            o.out,
            "atoms: {}\nedges: {}\nindexes: semantic {}, keyword {}, temporal {}, categorical {}\nsnapshot_version: {}",
            stats.atoms,
            stats.edges,
            stats.indexes.semantic,
            stats.indexes.keyword,
            stats.indexes.temporal,
            stats.indexes.categorical,
            stats.snapshot_version
        )?;
    }
    Ok(Exit::Ok)
}

pub(super) fn brief(o: &mut Output<'_>, brief: Brief) -> Result<Exit, CliError> {
    if o.json {
        write_json(o.out, &brief)?;
    } else {
        write!(o.out, "{}", brief.text)?;
    }
    Ok(Exit::Ok)
}
