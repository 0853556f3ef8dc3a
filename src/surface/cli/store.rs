//! The commands that need the store in this process (`reindex`, `history`,
//! `export`, `import`, `sparql`, `audit verify`): they read or rebuild more
//! than a tool call carries, so they are refused while another process
//! holds the store.

use crate::fault::Classified;
use std::path::{Path, PathBuf};

use super::args::{AuditCommand, Command};
use super::render::{Output, write_json};
use super::{CliError, Exit, report_bad_input};
use crate::memory::ExportFormat;
use crate::{Caller, Memory, MemoryError};

/// Runs a store command; `None` when `command` is not one.
pub(super) fn run(
    command: Command,
    memory: &Memory,
    caller: &Caller,
    explicit_tenant: Option<&str>,
    o: &mut Output<'_>,
) -> Result<Option<Exit>, CliError> {
    let exit = match command {
        Command::Reindex => reindex(memory, caller, o)?,
        Command::Migrate { to, to_update_url, to_user, to_password, to_token } => {
            let target = if to.starts_with("http://") || to.starts_with("https://") {
                let remote = super::args::RemoteArgs {
                    store_url: Some(to),
                    store_update_url: to_update_url,
                    store_user: to_user,
                    store_password: to_password,
                    store_token: to_token,
                    store_timeout_secs: 120,
                    store_writer: None,
                    node_secret: None,
                };
                let config = remote
                    .config()
                    .map_err(|message| MemoryError::invalid("to", message))?
                    .ok_or_else(|| MemoryError::invalid("to", "no target"))?;
                crate::memory::MigrationTarget::Remote(config)
            } else {
                crate::memory::MigrationTarget::Directory(PathBuf::from(to))
            };
            migrate(memory, target, o)?
        }
        Command::History { atom } => history(memory, caller, &atom, o)?,
        Command::Export { format, all, output } => export(memory, caller, &format, all, output, o)?,
        Command::Import { file } => import(memory, caller, &file, o)?,
        Command::Sparql { file, format } => sparql(memory, caller, &file, &format, o)?,
        Command::Audit { command: AuditCommand::Verify } => verify_audit(memory, explicit_tenant, o)?,
        _ => return Ok(None),
    };
    Ok(Some(exit))
}

/// Whether `command` needs the store in this process.
pub(super) fn needs_store(command: &Command) -> bool {
    matches!(
        command,
        Command::Reindex
            | Command::Migrate { .. }
            | Command::History { .. }
            | Command::Export { .. }
            | Command::Import { .. }
            | Command::Sparql { .. }
            | Command::Audit { .. }
    )
}

fn migrate(memory: &Memory, target: crate::memory::MigrationTarget, o: &mut Output<'_>) -> Result<Exit, CliError> {
    let started = std::time::Instant::now();
    let (copied, verified) = memory.migrate_to(target, &|done, total| {
        tracing::info!(done, total, "migrate: tenants copied");
    })?;
    let ok = verified.iter().all(|v| v.first_broken.is_none());
    let entries: u64 = verified.iter().map(|v| v.entries).sum();
    if o.json {
        write_json(
            o.out,
            &serde_json::json!({ "quads": copied, "tenants": verified.len(), "audit_entries": entries, "audit_intact": ok, "elapsed_ms": started.elapsed().as_millis() as u64 }),
        )?;
    } else {
        writeln!(
            o.out,
            "copied {copied} quads of {} tenant(s) in {:.1} s; audit chains in the target: {} ({entries} entries)",
            verified.len(),
            started.elapsed().as_secs_f64(),
            if ok { "intact" } else { "BROKEN" }
        )?;
    }
    Ok(if ok { Exit::Ok } else { Exit::Internal })
}

fn reindex(memory: &Memory, caller: &Caller, o: &mut Output<'_>) -> Result<Exit, CliError> {
    let started = std::time::Instant::now();
    memory.reindex(&mut |stage, done, total| {
        if done == total || done % 1000 < 64 {
            let _ = writeln!(o.err, "reindex: {stage} {done} / {total}");
        }
    })?;
    let stats = memory.stats(caller)?;
    writeln!(
        o.out,
        "reindexed in {:.1} s: keyword {}, semantic {}",
        started.elapsed().as_secs_f64(),
        stats.indexes.keyword,
        stats.indexes.semantic
    )?;
    Ok(Exit::Ok)
}

fn history(memory: &Memory, caller: &Caller, atom: &str, o: &mut Output<'_>) -> Result<Exit, CliError> {
    let history = memory.history(caller, atom)?;
    if o.json {
        write_json(o.out, &history)?;
    } else {
        writeln!(o.out, "chain of {} (head {}):", history.atom_id, history.head)?;
        for a in &history.chain {
            writeln!(o.out, "  {} [{}] {} — {}", a.atom_id, a.status, a.created_at, a.content)?;
        }
        for a in &history.derived {
            writeln!(o.out, "  derived {} [{} {}] {}", a.atom_id, a.kind, a.status, a.content)?;
        }
        writeln!(o.out, "audit:")?;
        for e in &history.audit {
            writeln!(
                o.out,
                "  #{} {} {} by {}{}",
                e.seq,
                e.time,
                e.action,
                e.actor,
                e.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
            )?;
        }
    }
    Ok(Exit::Ok)
}

fn export(
    memory: &Memory,
    caller: &Caller,
    format: &str,
    all: bool,
    output: Option<PathBuf>,
    o: &mut Output<'_>,
) -> Result<Exit, CliError> {
    let format: ExportFormat = format.parse()?;
    let count = match output {
        Some(path) => {
            let mut file = std::fs::File::create(&path).map_err(|source| CliError::Input { path: path.clone(), source })?;
            let count = memory.export(caller, format, all, &mut file)?;
            file.sync_all()?;
            writeln!(o.err, "exported {count} records to {}", path.display())?;
            count
        }
        None => memory.export(caller, format, all, o.out)?,
    };
    tracing::info!(count, "export finished");
    Ok(Exit::Ok)
}

fn import(memory: &Memory, caller: &Caller, file: &Path, o: &mut Output<'_>) -> Result<Exit, CliError> {
    let reader: Box<dyn std::io::BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let handle = std::fs::File::open(file).map_err(|source| CliError::Input { path: file.to_path_buf(), source })?;
        Box::new(std::io::BufReader::new(handle))
    };
    let mut reader = reader;
    let mut progress_error = None;
    let report = memory.import(caller, &mut reader, &mut |line| {
        // One line per committed record: an acknowledgement.
        let result = if o.json {
            serde_json::to_string(line).map_err(|e| std::io::Error::other(e.to_string())).and_then(|t| writeln!(o.out, "{t}"))
        } else {
            writeln!(
                o.out,
                "line {}: {} {}{}",
                line.line,
                line.effect.as_str(),
                line.atom_id.as_deref().unwrap_or("-"),
                line.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            )
        };
        let result = result.and_then(|()| o.out.flush());
        if let Err(error) = result {
            progress_error.get_or_insert(error);
        }
    })?;
    if let Some(error) = progress_error {
        return Err(CliError::Output(error));
    }
    // Content lines are written in the caller's scope, taken from the
    // working directory: an import run inside a checkout is seen by agents
    // in that repository only, so the summary says where they went.
    let scope = &caller.scope;
    let place = scope.repository_path().map_or_else(|| "tenant-wide".to_owned(), |path| format!("repository {path}"));
    writeln!(
        o.err,
        "imported {} lines: {} applied, {} no_op, {} rejected (new memories: tenant {}, {place})",
        report.lines, report.applied, report.no_op, report.rejected, scope.tenant_id
    )?;
    Ok(if report.rejected > 0 { Exit::Rejected } else { Exit::Ok })
}

fn sparql(memory: &Memory, caller: &Caller, file: &Path, format: &str, o: &mut Output<'_>) -> Result<Exit, CliError> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        text
    } else {
        std::fs::read_to_string(file).map_err(|source| CliError::Input { path: file.to_path_buf(), source })?
    };
    let accept = match format {
        "json" => "application/sparql-results+json",
        "xml" => "application/sparql-results+xml",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "turtle" => "text/turtle",
        "ntriples" => "application/n-triples",
        other => {
            return Err(MemoryError::invalid(
                "format",
                format!("unknown format '{other}'; expected json, xml, csv, tsv, turtle or ntriples"),
            )
            .into());
        }
    };
    // Evaluated like the server does: in a worker process over a
    // read-only checkpoint, so the limits hold.
    let limits = crate::surface::sparql::Limits::default();
    let answer = match (memory.store().read_snapshot().map_err(MemoryError::from)?, std::env::current_exe()) {
        (Some(snapshot), Ok(worker)) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(crate::surface::sparql::answer_isolated(&worker, snapshot.dir(), &caller.scope.tenant_id, &text, accept, limits)),
        _ => crate::surface::sparql::answer(memory.store(), &caller.scope.tenant_id, &text, accept, limits),
    };
    match answer {
        Ok(answer) => {
            o.out.write_all(&answer.body)?;
            Ok(Exit::Ok)
        }
        Err(error @ crate::surface::sparql::SparqlError::NotAcceptable(_)) => Err(MemoryError::invalid(
            "format",
            format!("{error}: a SELECT/ASK query takes json, xml, csv or tsv; CONSTRUCT/DESCRIBE take turtle or ntriples"),
        )
        .into()),
        Err(error) => report_bad_input(&error.to_string(), error.field(), o.json, o.out, o.err),
    }
}

fn verify_audit(memory: &Memory, explicit_tenant: Option<&str>, o: &mut Output<'_>) -> Result<Exit, CliError> {
    let results = memory.verify_audit(explicit_tenant)?;
    let ok = results.iter().all(|r| r.first_broken.is_none());
    if o.json {
        let tenants: Vec<_> = results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "tenant": r.tenant,
                    "entries": r.entries,
                    "ok": r.first_broken.is_none(),
                    "first_broken": r.first_broken.as_ref().map(|b| serde_json::json!({
                        "seq": b.seq, "entry": b.entry.map(|e| e.to_string()), "problem": b.problem,
                    })),
                })
            })
            .collect();
        write_json(o.out, &serde_json::json!({ "ok": ok, "tenants": tenants }))?;
    } else {
        for r in &results {
            match &r.first_broken {
                None => writeln!(o.out, "tenant {}: {} entries, chain intact", r.tenant, r.entries)?,
                Some(b) => writeln!(
                    o.out,
                    "tenant {}: BROKEN at entry #{} ({}): {}",
                    r.tenant,
                    b.seq,
                    b.entry.map(|e| e.to_string()).unwrap_or_default(),
                    b.problem
                )?,
            }
        }
        if results.is_empty() {
            writeln!(o.out, "no audit entries yet")?;
        }
    }
    Ok(if ok { Exit::Ok } else { Exit::Rejected })
}
