//! The keyword index: Tantivy with HMG's multilingual analyzer
//! (`text::analyze`), BM25 scoring.
//!
//! **Architecture invariants**
//! - Derived data: rebuilt from the store; the commit payload records the
//!   store snapshot version it reflects.
//! - Writes are buffered and committed lazily: [`KeywordIndex::refresh`]
//!   (called before every search) commits pending documents, so a recall
//!   always sees every acknowledged write; a crash loses only uncommitted
//!   documents, which the change feed replays at the next open.
//! - Searches are confined to a tenant, its visible repositories and the
//!   requested statuses inside the query itself.
//! - A deleted document's terms stay in its segment's files until the
//!   segment is merged, so after a tombstone [`KeywordIndex::purge`] merges
//!   every segment with deletions and removes the old files. A marker file
//!   written before the tombstone commits makes an interrupted purge finish
//!   at the next open.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tantivy::collector::{Count, TopDocs};
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

use crate::atom::AtomId;
use crate::text::analyze::{self, Mode};

const TOKENIZER: &str = "hmg";
/// Present while deleted documents' terms may remain in segment files.
const PURGE_MARKER: &str = "purge-pending";
/// Writer memory budget.
const WRITER_BUDGET_BYTES: usize = 50_000_000;

/// Errors of the keyword index.
#[derive(Debug, thiserror::Error)]
pub enum KeywordError {
    /// Tantivy failed.
    #[error("keyword index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    /// The index directory could not be opened.
    #[error("keyword index directory: {0}")]
    Directory(#[from] tantivy::directory::error::OpenDirectoryError),
    /// The index on disk failed its checks.
    #[error("keyword index damaged: {0}")]
    Damaged(String),
    /// The purge marker could not be written or removed.
    #[error("keyword index purge marker {path}: {source}")]
    Marker {
        /// The marker file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn io_error(error: std::io::Error) -> KeywordError {
    KeywordError::Tantivy(tantivy::TantivyError::IoError(std::sync::Arc::new(error)))
}

/// What the keyword index stores about an atom.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeywordDoc {
    /// Atom.
    pub atom_id: AtomId,
    /// Tenant.
    pub tenant: String,
    /// `workspace/repository` or empty for tenant-wide atoms.
    pub repo_key: String,
    /// Status.
    pub status: String,
    /// Content plus attribution and entity names.
    pub text: String,
}

#[derive(Clone)]
struct HmgTokenizer;

struct HmgTokenStream {
    tokens: Vec<Token>,
    index: usize,
}

impl TokenStream for HmgTokenStream {
    fn advance(&mut self) -> bool {
        self.index += 1;
        self.index <= self.tokens.len()
    }
    fn token(&self) -> &Token {
        &self.tokens[self.index - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.index - 1]
    }
}

impl Tokenizer for HmgTokenizer {
    type TokenStream<'a> = HmgTokenStream;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> HmgTokenStream {
        let tokens = analyze::analyze(text, Mode::Index)
            .into_iter()
            .enumerate()
            .map(|(position, term)| Token { offset_from: term.from, offset_to: term.to, position, text: term.text, position_length: 1 })
            .collect();
        HmgTokenStream { tokens, index: 0 }
    }
}

struct Fields {
    atom_id: Field,
    tenant: Field,
    repo_key: Field,
    status: Field,
    text: Field,
}

/// The Tantivy index.
pub(crate) struct KeywordIndex {
    dir: Option<PathBuf>,
    index: Index,
    fields: Fields,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
    dirty: AtomicBool,
    pending_version: AtomicU64,
}

impl std::fmt::Debug for KeywordIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeywordIndex").finish_non_exhaustive()
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text_options = TextOptions::default()
        .set_indexing_options(TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqs));
    let fields = Fields {
        atom_id: builder.add_text_field("atom_id", STRING | STORED),
        tenant: builder.add_text_field("tenant", STRING),
        repo_key: builder.add_text_field("repo_key", STRING),
        status: builder.add_text_field("status", STRING),
        text: builder.add_text_field("text", text_options),
    };
    (builder.build(), fields)
}

impl KeywordIndex {
    /// Opens the index in `dir` (created if needed), or in RAM. An index on
    /// disk that cannot be opened or fails its checks (unreadable
    /// `meta.json`, a missing or damaged segment file, another schema) is
    /// derived data: it is logged, deleted and started afresh at version 0,
    /// so the change feed rebuilds it from the store.
    pub(crate) fn open(dir: Option<&Path>) -> Result<KeywordIndex, KeywordError> {
        let Some(dir) = dir else {
            let (schema, fields) = schema();
            return KeywordIndex::with_index(Index::create_in_ram(schema), fields, None);
        };
        // Tantivy may also panic on bytes it cannot decode: damage all the same.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| KeywordIndex::open_checked(dir)))
            .unwrap_or_else(|_| Err(KeywordError::Damaged("reading the index panicked".to_owned())));
        match opened {
            Ok(index) => Ok(index),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "the keyword index is damaged; rebuilding it from the store");
                let purge_owed = dir.join(PURGE_MARKER).exists();
                std::fs::remove_dir_all(dir).map_err(io_error)?;
                let index = KeywordIndex::open_checked(dir)?;
                if purge_owed {
                    index.mark_purge_pending()?;
                }
                Ok(index)
            }
        }
    }

    /// Opens (or creates) the index in `dir` and checks it: the schema,
    /// every file's checksum, and every segment's term dictionaries.
    fn open_checked(dir: &Path) -> Result<KeywordIndex, KeywordError> {
        let (schema, fields) = schema();
        std::fs::create_dir_all(dir).map_err(io_error)?;
        let index = Index::open_or_create(tantivy::directory::MmapDirectory::open(dir)?, schema.clone())?;
        if index.schema() != schema {
            return Err(KeywordError::Damaged("the index was built with another schema".to_owned()));
        }
        let damaged = index.validate_checksum()?;
        if !damaged.is_empty() {
            let files: Vec<String> = damaged.iter().map(|p| p.display().to_string()).collect();
            return Err(KeywordError::Damaged(format!("files failing their checksum: {}", files.join(", "))));
        }
        let index = KeywordIndex::with_index(index, fields, Some(dir))?;
        let searcher = index.reader.searcher();
        for segment in searcher.segment_readers() {
            for field in [index.fields.atom_id, index.fields.tenant, index.fields.repo_key, index.fields.status, index.fields.text] {
                segment.inverted_index(field)?;
            }
        }
        Ok(index)
    }

    fn with_index(index: Index, fields: Fields, dir: Option<&Path>) -> Result<KeywordIndex, KeywordError> {
        index.tokenizers().register(TOKENIZER, HmgTokenizer);
        let writer = index.writer_with_num_threads(1, WRITER_BUDGET_BYTES)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let applied = applied_version_of(&index);
        Ok(KeywordIndex {
            dir: dir.map(Path::to_path_buf),
            index,
            fields,
            writer: Mutex::new(writer),
            reader,
            dirty: AtomicBool::new(false),
            pending_version: AtomicU64::new(applied),
        })
    }

    /// The store snapshot version the committed index reflects.
    pub(crate) fn applied_version(&self) -> u64 {
        applied_version_of(&self.index)
    }

    /// The newest store version applied, committed or not.
    pub(crate) fn marked_version(&self) -> u64 {
        self.pending_version.load(Ordering::SeqCst).max(self.applied_version())
    }

    /// Adds or replaces an atom's document (visible after the next refresh).
    pub(crate) fn upsert(&self, doc: &KeywordDoc, version: u64) -> Result<(), KeywordError> {
        let writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = doc.atom_id.to_string();
        writer.delete_term(Term::from_field_text(self.fields.atom_id, &id));
        writer.add_document(doc!(
            self.fields.atom_id => id,
            self.fields.tenant => doc.tenant.as_str(),
            self.fields.repo_key => doc.repo_key.as_str(),
            self.fields.status => doc.status.as_str(),
            self.fields.text => doc.text.as_str(),
        ))?;
        self.mark(version);
        Ok(())
    }

    /// Removes an atom's document.
    pub(crate) fn remove(&self, atom_id: AtomId, version: u64) {
        let writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        writer.delete_term(Term::from_field_text(self.fields.atom_id, &atom_id.to_string()));
        self.mark(version);
    }

    /// Records that everything up to `version` has been handed to the writer.
    pub(crate) fn mark(&self, version: u64) {
        self.pending_version.fetch_max(version, Ordering::SeqCst);
        self.dirty.store(true, Ordering::SeqCst);
    }

    /// Records that the write committed as `version` changed no document,
    /// when every earlier version is marked (else a catch-up replays it).
    /// Nothing is pending for a search to commit: [`KeywordIndex::persist`]
    /// commits the version.
    pub(crate) fn skip(&self, version: u64) {
        if self.marked_version() + 1 == version {
            self.pending_version.fetch_max(version, Ordering::SeqCst);
        }
    }

    /// Commits pending documents, or a version that moved without any
    /// (skipped writes), so the next open starts from it.
    pub(crate) fn persist(&self) -> Result<(), KeywordError> {
        if self.pending_version.load(Ordering::SeqCst) > self.applied_version() {
            self.dirty.store(true, Ordering::SeqCst);
        }
        self.refresh()
    }

    /// Commits pending documents (if any) and reloads the reader.
    pub(crate) fn refresh(&self) -> Result<(), KeywordError> {
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let mut writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let version = self.pending_version.load(Ordering::SeqCst);
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(&version.to_string());
        prepared.commit()?;
        self.reader.reload()?;
        Ok(())
    }

    /// Records, durably, that deleted documents' terms must be purged: call
    /// before the write that destroys content commits.
    pub(crate) fn mark_purge_pending(&self) -> Result<(), KeywordError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(PURGE_MARKER);
        let marker = |source| KeywordError::Marker { path: path.clone(), source };
        let file = std::fs::File::create(&path).map_err(marker)?;
        file.sync_all().map_err(marker)?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(marker)
    }

    /// Whether a purge was marked and has not finished.
    pub(crate) fn purge_pending(&self) -> bool {
        self.dir.as_ref().is_some_and(|dir| dir.join(PURGE_MARKER).exists())
    }

    /// Commits pending deletions, merges every segment holding deleted
    /// documents (a merge keeps only live documents and their terms) and
    /// removes the files no longer used; then clears the purge marker.
    pub(crate) fn purge(&self) -> Result<(), KeywordError> {
        self.refresh()?;
        {
            let mut writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let with_deletes: Vec<tantivy::index::SegmentId> =
                self.index.searchable_segment_metas()?.into_iter().filter(|m| m.has_deletes()).map(|m| m.id()).collect();
            if !with_deletes.is_empty() {
                writer.merge(&with_deletes).wait()?;
            }
            writer.garbage_collect_files().wait()?;
        }
        self.reader.reload()?;
        if let Some(dir) = &self.dir {
            let path = dir.join(PURGE_MARKER);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(KeywordError::Marker { path, source }),
            }
        }
        Ok(())
    }

    /// Deletes every document (before a rebuild).
    pub(crate) fn clear(&self) -> Result<(), KeywordError> {
        let writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        writer.delete_all_documents()?;
        self.pending_version.store(0, Ordering::SeqCst);
        self.dirty.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Documents of `tenant` in the committed index.
    pub(crate) fn count(&self, tenant: &str) -> Result<u64, KeywordError> {
        self.refresh()?;
        let query = TermQuery::new(Term::from_field_text(self.fields.tenant, tenant), IndexRecordOption::Basic);
        Ok(self.reader.searcher().search(&query, &Count)? as u64)
    }

    /// BM25 search for `query` among `tenant`'s atoms in `repo_keys` with a
    /// status in `statuses`; best first.
    pub(crate) fn search(
        &self,
        tenant: &str,
        repo_keys: &[String],
        statuses: &[&str],
        query: &str,
        limit: usize,
    ) -> Result<Vec<(AtomId, f32)>, KeywordError> {
        self.refresh()?;
        self.search_committed(tenant, repo_keys, statuses, query, limit)
    }

    /// [`KeywordIndex::search`] over the documents committed so far, without
    /// committing those pending (a commit and reload cost 10–20 ms): for a
    /// caller after older atoms, who reads the newest from the store and
    /// the status of each hit from the store too.
    pub(crate) fn search_committed(
        &self,
        tenant: &str,
        repo_keys: &[String],
        statuses: &[&str],
        query: &str,
        limit: usize,
    ) -> Result<Vec<(AtomId, f32)>, KeywordError> {
        let terms = analyze::terms(query, Mode::Query);
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let filter = |field: Field, values: &mut dyn Iterator<Item = &str>| -> Box<dyn Query> {
            let any: Vec<(Occur, Box<dyn Query>)> = values
                .map(|v| {
                    let q: Box<dyn Query> = Box::new(TermQuery::new(Term::from_field_text(field, v), IndexRecordOption::Basic));
                    (Occur::Should, q)
                })
                .collect();
            Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(any)), 0.0))
        };
        let text: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(Term::from_field_text(self.fields.text, t), IndexRecordOption::WithFreqs));
                (Occur::Should, q)
            })
            .collect();
        let query = BooleanQuery::new(vec![
            (Occur::Must, filter(self.fields.tenant, &mut std::iter::once(tenant))),
            (Occur::Must, filter(self.fields.repo_key, &mut repo_keys.iter().map(String::as_str))),
            (Occur::Must, filter(self.fields.status, &mut statuses.iter().copied())),
            (Occur::Must, Box::new(BooleanQuery::new(text))),
        ]);
        let searcher = self.reader.searcher();
        let hits = searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())?;
        let mut results = Vec::with_capacity(hits.len());
        for (score, address) in hits {
            let stored: TantivyDocument = searcher.doc(address)?;
            if let Some(id) = stored.get_first(self.fields.atom_id).and_then(|v| v.as_str()).and_then(|s| s.parse().ok()) {
                results.push((id, score));
            }
        }
        Ok(results)
    }
}

fn applied_version_of(index: &Index) -> u64 {
    index.load_metas().ok().and_then(|m| m.payload).and_then(|p| p.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: AtomId, repo: &str, status: &str, text: &str) -> KeywordDoc {
        KeywordDoc { atom_id: id, tenant: "t".into(), repo_key: repo.into(), status: status.into(), text: text.into() }
    }

    #[test]
    fn bm25_search_is_confined_and_multilingual() {
        let index = KeywordIndex::open(None).unwrap();
        let ids: Vec<AtomId> = (0..5).map(|_| ulid::Ulid::generate()).collect();
        index.upsert(&doc(ids[0], "a/r", "active", "主数据库用 PostgreSQL 16"), 1).unwrap();
        index.upsert(&doc(ids[1], "a/r", "active", "キャッシュサーバーは Redis"), 2).unwrap();
        index.upsert(&doc(ids[2], "a/other", "active", "PostgreSQL in another repo"), 3).unwrap();
        index.upsert(&doc(ids[3], "a/r", "negated", "PostgreSQL 15 was wrong"), 4).unwrap();
        index.upsert(&doc(ids[4], "", "active", "Caroline went hiking"), 5).unwrap();
        let repos = vec!["a/r".to_owned(), String::new()];
        let hits = index.search("t", &repos, &["active"], "PostgreSQL", 10).unwrap();
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [ids[0]]);
        let hits = index.search("t", &repos, &["active", "negated"], "postgresql", 10).unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(index.search("t", &repos, &["active"], "数据库", 10).unwrap()[0].0, ids[0]);
        assert_eq!(index.search("t", &repos, &["active"], "サーバー", 10).unwrap()[0].0, ids[1]);
        assert_eq!(index.search("t", &repos, &["active"], "hike", 10).unwrap()[0].0, ids[4]);
        assert!(index.search("other-tenant", &repos, &["active"], "PostgreSQL", 10).unwrap().is_empty());
        assert_eq!(index.applied_version(), 5);
        index.remove(ids[0], 6);
        assert!(index.search("t", &repos, &["active"], "PostgreSQL", 10).unwrap().is_empty());
        assert_eq!(index.count("t").unwrap(), 4);
    }

    /// A skipped version (usage stamps) costs a search no commit; a
    /// persist commits it, and a reopened index starts from it.
    #[test]
    fn a_skipped_version_is_committed_by_persist_not_by_search() {
        let dir = tempfile::tempdir().unwrap();
        let id = ulid::Ulid::generate();
        let repos = vec!["a/r".to_owned()];
        {
            let index = KeywordIndex::open(Some(dir.path())).unwrap();
            index.upsert(&doc(id, "a/r", "active", "老李的猫叫咪咪"), 1).unwrap();
            assert_eq!(index.search("t", &repos, &["active"], "猫", 10).unwrap().len(), 1);
            assert_eq!(index.applied_version(), 1);
            index.skip(3);
            assert_eq!(index.marked_version(), 1, "version 2 may hold a document");
            index.skip(2);
            assert_eq!(index.marked_version(), 2);
            assert_eq!(index.search("t", &repos, &["active"], "田中さん", 10).unwrap().len(), 0);
            assert_eq!(index.applied_version(), 1, "the search committed nothing");
            index.persist().unwrap();
            assert_eq!(index.applied_version(), 2);
        }
        let reopened = KeywordIndex::open(Some(dir.path())).unwrap();
        assert_eq!(reopened.marked_version(), 2);
        assert_eq!(reopened.search("t", &repos, &["active"], "cat 猫", 10).unwrap()[0].0, id);
    }
}
