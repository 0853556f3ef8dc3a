//! export (JSON Lines and N-Quads) and import (JSON Lines). A JSON Lines
//! export imported into an empty store gives back the same atoms: ids,
//! content, statuses, links, times.
//!
//! Export is a backup made by the tenant's owner: it carries the content of
//! quarantined and sealed atoms (tombstoned atoms have none left).

use std::io::{BufRead, Write};
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::write::{Bulk, Duplicate, admit};
use super::{Caller, Effect, MemorizeOutcome, MemorizeRequest, Memory, MemoryError, Mutation, Result, clean_source};
use crate::atom::{Atom, Epistemic, Kind, Polarity, Status, parse_atom_id};
use crate::scope::{Scope, Visibility};
use crate::store::{self, NamedQuery, StoreError};
use crate::text;

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// One JSON object per atom.
    Jsonl,
    /// The tenant's whole named graph (atoms, scopes, entities, audit chain).
    NQuads,
}

impl FromStr for ExportFormat {
    type Err = MemoryError;
    fn from_str(s: &str) -> Result<ExportFormat> {
        match s.trim() {
            "jsonl" | "json" => Ok(ExportFormat::Jsonl),
            "nquads" | "nq" | "rdf" => Ok(ExportFormat::NQuads),
            other => Err(MemoryError::invalid("format", format!("unknown export format '{other}'; expected jsonl or nquads"))),
        }
    }
}

/// One exported atom (also the full-record import format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportRecord {
    /// ULID.
    pub atom_id: String,
    /// Content (absent once tombstoned).
    pub content: Option<String>,
    /// Kind.
    pub kind: String,
    /// Attribution.
    pub source: String,
    /// Workspace.
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
    /// Epistemic.
    pub epistemic: String,
    /// Polarity.
    pub polarity: String,
    /// Status.
    pub status: String,
    /// RFC 3339.
    pub created_at: String,
    /// Language.
    pub language: String,
    /// Importance.
    pub importance: f64,
    /// Entity names (derived; recomputed on import).
    #[serde(default)]
    pub entities: Vec<String>,
    /// The atom this one replaced.
    #[serde(default)]
    pub supersedes: Option<String>,
    /// Source atoms of a lesson or reflection.
    #[serde(default)]
    pub derived_from: Vec<String>,
    /// Session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// RFC 3339 time after which reflect expires it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl From<&Atom> for ExportRecord {
    fn from(atom: &Atom) -> ExportRecord {
        ExportRecord {
            atom_id: atom.id.to_string(),
            content: atom.content.clone(),
            kind: atom.kind.as_str().to_owned(),
            source: atom.source.clone(),
            workspace: atom.scope.workspace.clone(),
            repository: atom.scope.repository.clone(),
            branch: atom.scope.branch.clone(),
            epistemic: atom.epistemic.as_str().to_owned(),
            polarity: atom.polarity.as_str().to_owned(),
            status: atom.status.as_str().to_owned(),
            created_at: atom.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            language: atom.language.clone(),
            importance: atom.importance,
            entities: atom.entities.clone(),
            supersedes: atom.supersedes.map(|id| id.to_string()),
            derived_from: atom.derived_from.iter().map(ToString::to_string).collect(),
            session_id: atom.session_id.clone(),
            expires_at: atom.expires_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        }
    }
}

/// What became of one import line: the atom, the effect, why.
type LineOutcome = (Option<String>, Effect, Option<String>);

/// Import lines read but not reported yet.
#[derive(Default)]
struct PendingLines {
    /// Each line's index and answer; `None`: it waits for the group's write.
    lines: Vec<PendingLine>,
    /// The requests of the waiting lines, in order.
    requests: Vec<MemorizeRequest>,
}

/// An import line's index and answer; `None`: it waits for its group's
/// write.
type PendingLine = (usize, Option<LineOutcome>);

/// Sends the waiting requests as one group (see [`Bulk`]) and reports, in
/// order, every line of the groups that were written.
fn flush_import(
    bulk: &mut Bulk<'_, Vec<PendingLine>>,
    pending: &mut PendingLines,
    report: &mut ImportReport,
    on_line: &mut dyn FnMut(&ImportedLine),
) -> Result<()> {
    let requests = std::mem::take(&mut pending.requests);
    let lines = std::mem::take(&mut pending.lines);
    if requests.is_empty() && lines.is_empty() {
        return Ok(());
    }
    let mut group = Vec::with_capacity(requests.len());
    for request in requests {
        group.push(bulk.prepare(request)?);
    }
    for (outcomes, lines) in bulk.send(group, lines)? {
        report_lines(lines, outcomes, report, on_line);
    }
    Ok(())
}

/// Reports a written group's lines: each its own answer, or the group's
/// next outcome.
fn report_lines(
    lines: Vec<PendingLine>,
    outcomes: Vec<MemorizeOutcome>,
    report: &mut ImportReport,
    on_line: &mut dyn FnMut(&ImportedLine),
) {
    let mut outcomes = outcomes.into_iter();
    for (index, answer) in lines {
        let (atom_id, effect, reason) = match answer {
            Some(outcome) => outcome,
            None => match outcomes.next() {
                Some(outcome) => (outcome.atom_id, outcome.effect, outcome.reason),
                None => (None, Effect::Rejected, Some("internal: no outcome for this line".to_owned())),
            },
        };
        let imported = ImportedLine { line: index + 1, atom_id, effect, reason };
        match imported.effect {
            Effect::Applied => report.applied += 1,
            Effect::NoOp => report.no_op += 1,
            Effect::Rejected => report.rejected += 1,
        }
        on_line(&imported);
    }
}

/// One import line, read.
enum ImportLine {
    /// A full record to restore as it was.
    Restore(Box<ExportRecord>),
    /// A memory to memorize.
    Memorize(MemorizeRequest),
}

/// A simple import line: a memory to memorize.
#[derive(Debug, Clone, Deserialize)]
struct SimpleLine {
    content: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
}

/// What happened to one import line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportedLine {
    /// 1-based line number.
    pub line: usize,
    /// The atom written or matched.
    pub atom_id: Option<String>,
    /// applied / no_op / rejected.
    pub effect: Effect,
    /// Why (not on applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Totals of an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ImportReport {
    /// Lines read (blank lines excluded).
    pub lines: usize,
    /// Atoms written.
    pub applied: usize,
    /// Already present.
    pub no_op: usize,
    /// Refused (each with a reason on its line).
    pub rejected: usize,
}

fn parse_time(field: &'static str, text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| MemoryError::invalid(field, format!("'{text}' is not an RFC 3339 date-time: {e}")))
}

fn parse_enum<T: FromStr<Err = crate::atom::UnknownValue>>(field: &'static str, text: &str) -> Result<T> {
    text.parse().map_err(|e: crate::atom::UnknownValue| MemoryError::invalid(field, e.to_string()))
}

impl Memory {
    /// Writes the caller's memories: JSON Lines of the atoms visible from
    /// the caller's scope (`whole_tenant` for all of the tenant's), or the
    /// tenant's named graph as N-Quads. Returns the number of records.
    #[tracing::instrument(skip(self, out), fields(tenant = %caller.scope.tenant_id))]
    pub fn export(&self, caller: &Caller, format: ExportFormat, whole_tenant: bool, out: &mut dyn Write) -> Result<usize> {
        let tenant = &caller.scope.tenant_id;
        let io_error = |source: std::io::Error| MemoryError::Store(StoreError::Io { path: "<export output>".into(), source });
        match format {
            ExportFormat::NQuads => {
                let quads = self.store.tenant_quads(tenant)?;
                let mut serializer = oxigraph::io::RdfSerializer::from_format(oxigraph::io::RdfFormat::NQuads).for_writer(out);
                for quad in &quads {
                    serializer.serialize_quad(quad).map_err(io_error)?;
                }
                serializer.finish().map_err(io_error)?;
                Ok(quads.len())
            }
            ExportFormat::Jsonl => {
                let mut written = 0;
                for row in self.store.select(NamedQuery::AllAtoms, tenant, &[])? {
                    let Some(id) = row.get("atom").and_then(store::atom_id_of) else { continue };
                    let Some(atom) = self.atom(tenant, id)? else { continue };
                    if !whole_tenant && caller.scope.sees(&atom.scope) == Visibility::Hidden {
                        continue;
                    }
                    let line = serde_json::to_string(&ExportRecord::from(&atom))
                        .map_err(|e| MemoryError::Store(StoreError::Corrupt(e.to_string())))?;
                    writeln!(out, "{line}").map_err(io_error)?;
                    written += 1;
                }
                Ok(written)
            }
        }
    }

    /// Imports JSON Lines: full records (as exported, with `atom_id`) are
    /// restored as they were, each in its own transaction; lines with only
    /// `content` (and optionally `source`, `kind`, `session_id`,
    /// `created_at`, `expires_at`) are memorized in groups of consecutive
    /// lines, one at first and doubling up to [`super::MEMORIZE_BATCH`] (one
    /// embedding call per model and one transaction per group; see
    /// [`Memory::memorize_many`]).
    /// `on_line` hears about each line, in order, after it committed.
    pub fn import(&self, caller: &Caller, input: &mut dyn BufRead, on_line: &mut dyn FnMut(&ImportedLine)) -> Result<ImportReport> {
        let mut report = ImportReport::default();
        let mut bulk = Bulk::new(self, caller)?;
        match self.import_lines(caller, input, on_line, &mut bulk, &mut report) {
            Ok(()) => Ok(report),
            Err(error) => {
                // The group on its way is written and reported, as it would
                // have been before the error.
                match bulk.land() {
                    Ok(landed) => landed.into_iter().for_each(|(outcomes, lines)| report_lines(lines, outcomes, &mut report, on_line)),
                    Err(landing) => tracing::error!(error = %landing, "the group before a failed import line could not be written"),
                }
                Err(error)
            }
        }
    }

    /// [`Memory::import`]'s lines, through `bulk` (a group in flight when an
    /// error returns is the caller's to land).
    fn import_lines(
        &self,
        caller: &Caller,
        input: &mut dyn BufRead,
        on_line: &mut dyn FnMut(&ImportedLine),
        bulk: &mut Bulk<'_, Vec<PendingLine>>,
        report: &mut ImportReport,
    ) -> Result<()> {
        let mut pending = PendingLines::default();
        // Groups grow from one line to a full batch: the first line is
        // acknowledged as soon as one memorize would be, a long import
        // runs at batch speed.
        let mut group = 1;
        for (index, line) in input.lines().enumerate() {
            let line = line.map_err(|source| MemoryError::Store(StoreError::Io { path: "<import input>".into(), source }))?;
            if line.trim().is_empty() {
                continue;
            }
            report.lines += 1;
            let answered = match self.read_import_line(&line) {
                Ok(ImportLine::Memorize(request)) => {
                    pending.requests.push(request);
                    None
                }
                Ok(ImportLine::Restore(record)) => {
                    // Every line before it is written first (in order).
                    flush_import(bulk, &mut pending, report, on_line)?;
                    if let Some((outcomes, lines)) = bulk.land()? {
                        report_lines(lines, outcomes, report, on_line);
                    }
                    Some(self.restore(caller, *record))
                }
                Err(error) => Some(Err(error)),
            };
            let answer = match answered {
                None => None,
                Some(Ok(outcome)) => Some(outcome),
                Some(Err(error)) if crate::fault::Classified::fault(&error).is_callers() => {
                    Some((None, Effect::Rejected, Some(error.to_string())))
                }
                Some(Err(error)) => return Err(error),
            };
            pending.lines.push((index, answer));
            // Rejected lines are reported soon too, not held to the end.
            if pending.requests.len() >= group || pending.lines.len() >= 4 * super::MEMORIZE_BATCH {
                flush_import(bulk, &mut pending, report, on_line)?;
                group = (group * 2).min(super::MEMORIZE_BATCH);
            }
        }
        flush_import(bulk, &mut pending, report, on_line)?;
        if let Some((outcomes, lines)) = bulk.land()? {
            report_lines(lines, outcomes, report, on_line);
        }
        Ok(())
    }

    fn read_import_line(&self, line: &str) -> Result<ImportLine> {
        crate::limits::check_nesting(line, crate::limits::Syntax::Json, crate::limits::JSON_MAX_NESTING)
            .map_err(|e| MemoryError::invalid("line", e.to_string()))?;
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| MemoryError::invalid("line", format!("not valid JSON: {e}")))?;
        if value.get("atom_id").is_some() {
            let record: ExportRecord =
                serde_json::from_value(value).map_err(|e| MemoryError::invalid("line", format!("not an export record: {e}")))?;
            return Ok(ImportLine::Restore(Box::new(record)));
        }
        let simple: SimpleLine = serde_json::from_value(value)
            .map_err(|e| MemoryError::invalid("line", format!("expected an object with a \"content\" string: {e}")))?;
        let mut request = MemorizeRequest::new(simple.content);
        request.source = simple.source;
        request.session_id = simple.session_id;
        if let Some(kind) = simple.kind {
            request.kind = parse_enum("kind", &kind)?;
        }
        if let Some(created_at) = simple.created_at {
            request.created_at = Some(parse_time("created_at", &created_at)?);
        }
        if let Some(expires_at) = simple.expires_at {
            request.expires_at = Some(parse_time("expires_at", &expires_at)?);
        }
        Ok(ImportLine::Memorize(request))
    }

    fn restore(&self, caller: &Caller, record: ExportRecord) -> Result<LineOutcome> {
        let tenant = &caller.scope.tenant_id;
        let id = parse_atom_id(&record.atom_id).map_err(|e| MemoryError::invalid("atom_id", e.to_string()))?;
        if self.atom(tenant, id)?.is_some() {
            return Ok((Some(id.to_string()), Effect::NoOp, Some("an atom with this id already exists".to_owned())));
        }
        let status: Status = parse_enum("status", &record.status)?;
        let content = match (&record.content, status) {
            (Some(content), _) => match admit("content", content, super::MAX_HANDOFF_CHARS) {
                Ok(admitted) => Some(admitted.text),
                Err(reason) => return Ok((None, Effect::Rejected, Some(reason))),
            },
            (None, Status::Tombstoned) => None,
            (None, _) => return Err(MemoryError::invalid("content", "only tombstoned atoms may come without content")),
        };
        let scope = Scope { tenant_id: tenant.clone(), workspace: record.workspace, repository: record.repository, branch: record.branch }
            .normalized()?;
        if let Some(content) = &content
            && status == Status::Active
            && let Some(Duplicate::Existing(existing)) = self.find_duplicate(&scope, content)?
        {
            return Ok((Some(existing.to_string()), Effect::NoOp, Some(format!("exact duplicate of {existing}"))));
        }
        let parse_id = |field: &'static str, text: &str| parse_atom_id(text).map_err(|e| MemoryError::invalid(field, e.to_string()));
        let importance = record.importance;
        if !(0.0..=1.0).contains(&importance) {
            return Err(MemoryError::invalid("importance", format!("{importance} is outside 0–1")));
        }
        let atom = Atom {
            id,
            kind: parse_enum::<Kind>("kind", &record.kind)?,
            source: clean_source(Some(record.source.as_str()), "agent")?,
            scope,
            epistemic: parse_enum::<Epistemic>("epistemic", &record.epistemic)?,
            polarity: parse_enum::<Polarity>("polarity", &record.polarity)?,
            status,
            created_at: parse_time("created_at", &record.created_at)?,
            language: record.language,
            importance,
            entities: Vec::new(),
            supersedes: record.supersedes.as_deref().map(|s| parse_id("supersedes", s)).transpose()?,
            derived_from: record.derived_from.iter().map(|s| parse_id("derived_from", s)).collect::<Result<_>>()?,
            session_id: record.session_id,
            expires_at: record.expires_at.as_deref().map(|t| parse_time("expires_at", t)).transpose()?,
            last_recalled_at: None,
            recall_count: 0,
            last_decayed_at: None,
            content,
        };
        let entities = atom.content.as_deref().map(text::extract_entities).unwrap_or_default();
        self.apply(caller, Mutation { created: Some((&atom, entities.as_slice())), ..Mutation::new("import") })?;
        Ok((Some(id.to_string()), Effect::Applied, None))
    }
}
