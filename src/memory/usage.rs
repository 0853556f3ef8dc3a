//! Recall usage: `lastRecalledAt` and `recallCount` on the atoms a recall
//! returned. Bookkeeping, not a change of memory (no audit entry, not
//! indexed), so it is batched rather than costing a store write per recall.
//!
//! A one-shot process (a CLI `hmg recall`, a session-start hook) parks its
//! stamps in `usage.journal` in the store directory instead of committing
//! them: the commit, the index versions it moves and the memtable flush at
//! exit were 36 ms of a 190 ms cold recall at 10k memories (and each exit's
//! small flush left level-0 files that later opens compacted). Every other
//! process applies a journal it finds when it opens the store, so whatever
//! reads usage (a server, `hmg show`, SPARQL) sees it; a parking process
//! commits once the journal holds [`USAGE_BATCH`] atoms.
//!
//! **Invariants:** stamps are never lost while the store directory lives
//! (a process that dies before parking loses at most its own, as before);
//! the journal is removed only after the commit holding its stamps; a
//! crash between that commit and the removal counts those recalls twice
//! (a counter, not a memory). A journal that cannot be read is logged and
//! set aside, never an error of the process opening the store.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use oxigraph::model::{GraphNameRef, Literal, Term};
use serde::{Deserialize, Serialize};

use super::{Memory, MemoryError, Result, literal_value};
use crate::atom::AtomId;
use crate::store;
use crate::vocab::hmg;

/// Recall usage not yet written: (tenant, atom) → (last recalled, recalls).
/// A crash may lose the last few seconds of it, never a memory.
#[derive(Debug)]
pub(super) struct Usage {
    pending: Stamps,
    since: std::time::Instant,
    /// What the journal holds (a parking process: read at open, then
    /// extended by each park); committed with `pending`.
    parked: Stamps,
}

/// (tenant, atom) → (last recalled, recalls).
type Stamps = HashMap<(String, AtomId), (DateTime<Utc>, u64)>;

fn add(stamps: &mut Stamps, tenant: &str, id: AtomId, at: DateTime<Utc>, recalls: u64) {
    let entry = stamps.entry((tenant.to_owned(), id)).or_insert((at, 0));
    entry.0 = entry.0.max(at);
    entry.1 = entry.1.saturating_add(recalls);
}

impl Usage {
    pub(super) fn new() -> Usage {
        Usage { pending: HashMap::new(), since: std::time::Instant::now(), parked: HashMap::new() }
    }

    fn is_due(&self) -> bool {
        !self.pending.is_empty() && (self.pending.len() >= USAGE_BATCH || self.since.elapsed() >= USAGE_MAX_AGE)
    }
}

/// Pending usage stamps written once there are this many…
const USAGE_BATCH: usize = 256;
/// …or once the oldest is this old.
const USAGE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(10);
/// A deferring process commits in the recall itself once this many batches
/// are pending (its caller did not commit them).
const OVERDUE_BATCHES: usize = 4;
/// A journal larger than this is not one this module wrote (256 lines of
/// well under 200 bytes): set aside unread.
const JOURNAL_MAX_BYTES: u64 = 1 << 20;

/// The journal of a store in `dir`.
pub(super) fn journal_path(dir: &Path) -> PathBuf {
    dir.join("usage.journal")
}

/// One line of the journal.
#[derive(Serialize, Deserialize)]
struct Parked {
    tenant: String,
    atom: String,
    at: DateTime<Utc>,
    recalls: u64,
}

/// The journal's stamps (none when there is no journal). A damaged journal
/// is renamed aside (`usage.journal.bad`) and logged.
fn read_journal(path: &Path) -> Vec<(String, AtomId, DateTime<Utc>, u64)> {
    let text = match std::fs::metadata(path) {
        Ok(meta) if meta.len() > JOURNAL_MAX_BYTES => Err(format!("{} bytes, more than any journal HMG writes", meta.len())),
        Ok(_) => std::fs::read_to_string(path).map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => Err(e.to_string()),
    };
    let parsed = text.and_then(|text| {
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let parked: Parked = serde_json::from_str(line).map_err(|e| format!("a line is not a usage stamp: {e}"))?;
                let id: AtomId = parked.atom.parse().map_err(|_| format!("{:?} is not an atom id", parked.atom))?;
                Ok((parked.tenant, id, parked.at, parked.recalls))
            })
            .collect::<std::result::Result<Vec<_>, String>>()
    });
    parsed.unwrap_or_else(|error| {
        tracing::warn!(path = %path.display(), %error, "recall usage journal unreadable; set aside as usage.journal.bad");
        let _ = std::fs::rename(path, path.with_extension("journal.bad"));
        Vec::new()
    })
}

impl Memory {
    /// Notes that a recall returned `ids`: `lastRecalledAt` = now and
    /// `recallCount` + 1, written in batches (see [`USAGE_BATCH`]).
    pub(crate) fn record_recalls(&self, tenant: &str, ids: &[AtomId]) -> Result<()> {
        let now = Memory::now();
        let (due, overdue) = {
            let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if usage.pending.is_empty() {
                usage.since = std::time::Instant::now();
            }
            for id in ids {
                add(&mut usage.pending, tenant, *id, now, 1);
            }
            (usage.is_due(), usage.pending.len() >= OVERDUE_BATCHES * USAGE_BATCH)
        };
        // A parking process keeps its stamps for the journal (or commits
        // them at exit, once there are a batch); a deferring one (a server)
        // commits them after answering, unless its caller never does.
        if due && !self.park_usage && (!self.defer_usage || overdue) { self.flush_usage() } else { Ok(()) }
    }

    /// Whether usage stamps are due for a commit that no thread is making.
    pub(crate) fn usage_due(&self) -> bool {
        !self.park_usage
            && !self.usage_flushing.load(std::sync::atomic::Ordering::Acquire)
            && self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_due()
    }

    /// Commits the usage stamps if they are due and no other thread is
    /// committing them: what a deferring server calls after answering a
    /// call ([`crate::MemoryOptions::defer_usage`]).
    pub fn flush_usage_if_due(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if !self.usage_due() || self.usage_flushing.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Cleared however the commit ends (a panic included), or no server
        // would commit usage again.
        struct Clear<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _clear = Clear(&self.usage_flushing);
        self.flush_usage()
    }

    /// Takes in the stamps a one-shot process parked (at open): a parking
    /// process keeps them, to park again with its own; any other commits
    /// them now.
    pub(super) fn take_parked_usage(&self) {
        let Some(journal) = &self.usage_journal else { return };
        let parked = read_journal(journal);
        if parked.is_empty() {
            return;
        }
        {
            let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (tenant, id, at, recalls) in parked {
                add(&mut usage.parked, &tenant, id, at, recalls);
            }
        }
        if !self.park_usage
            && let Err(error) = self.flush_usage()
        {
            tracing::warn!(%error, "could not write the parked recall usage; it stays pending");
        }
    }

    /// Where a process's pending stamps go when it closes: a parking
    /// process adds them to the journal (committing the lot once it holds
    /// [`USAGE_BATCH`] atoms), any other commits them.
    pub(super) fn settle_usage(&self) -> Result<()> {
        let Some(journal) = self.usage_journal.as_ref().filter(|_| self.park_usage) else { return self.flush_usage() };
        let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if usage.pending.is_empty() {
            return Ok(());
        }
        let mut parked = usage.parked.clone();
        for ((tenant, id), (at, recalls)) in &usage.pending {
            add(&mut parked, tenant, *id, *at, *recalls);
        }
        if parked.len() >= USAGE_BATCH {
            drop(usage);
            return self.flush_usage();
        }
        // Written by rename; not synced (bookkeeping: a power loss may cost
        // the last stamps, as a crash of a server does).
        let mut lines = String::new();
        for ((tenant, id), (at, recalls)) in &parked {
            let parked = Parked { tenant: tenant.clone(), atom: id.to_string(), at: *at, recalls: *recalls };
            lines.push_str(&serde_json::to_string(&parked).map_err(|e| MemoryError::invalid("usage", e.to_string()))?);
            lines.push('\n');
        }
        let io = |source| MemoryError::Store(store::StoreError::Io { path: journal.clone(), source });
        let tmp = journal.with_extension("journal.tmp");
        std::fs::write(&tmp, lines).map_err(io)?;
        std::fs::rename(&tmp, journal).map_err(io)?;
        usage.pending.clear();
        usage.parked = parked;
        Ok(())
    }

    /// Writes the pending recall usage, parked stamps included (one
    /// transaction); then the journal that held them is gone.
    pub(crate) fn flush_usage(&self) -> Result<()> {
        let (pending, parked) = {
            let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let parked = std::mem::take(&mut usage.parked);
            let mut pending = parked.clone();
            for ((tenant, id), (at, recalls)) in std::mem::take(&mut usage.pending) {
                add(&mut pending, &tenant, id, at, recalls);
            }
            (pending, parked)
        };
        if pending.is_empty() {
            return Ok(());
        }
        let written = self.store.write(|tx| {
            for ((tenant, id), (at, recalls)) in &pending {
                let graph_node = store::tenant_graph(tenant);
                let graph: GraphNameRef<'_> = graph_node.as_ref().into();
                let iri = store::atom_iri(*id);
                // A tombstoned or unknown atom keeps no usage.
                if tx.object(iri.as_ref(), hmg::STATUS, graph)?.is_none() {
                    continue;
                }
                let count = tx
                    .object(iri.as_ref(), hmg::RECALL_COUNT, graph)?
                    .as_ref()
                    .and_then(literal_value)
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(0);
                tx.set(iri.as_ref(), hmg::LAST_RECALLED_AT, &Term::Literal(crate::store::audit::datetime_literal(*at)), graph)?;
                tx.set(
                    iri.as_ref(),
                    hmg::RECALL_COUNT,
                    &Term::Literal(Literal::from(count + i64::try_from(*recalls).unwrap_or(i64::MAX))),
                    graph,
                )?;
            }
            Ok::<_, MemoryError>(tx.version()?)
        });
        let version = match written {
            Ok(version) => version,
            Err(error) => {
                // The journal's stamps stay (its file is still there, and a
                // later commit removes it); this process's own are dropped,
                // as before the journal.
                let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for ((tenant, id), (at, recalls)) in parked {
                    add(&mut usage.parked, &tenant, id, at, recalls);
                }
                return Err(error);
            }
        };
        // Usage is not indexed.
        self.indexes.skip(version);
        if let Some(journal) = &self.usage_journal
            && let Err(error) = std::fs::remove_file(journal)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, path = %journal.display(), "could not remove the recall usage journal; its stamps may count twice");
        }
        Ok(())
    }
}
