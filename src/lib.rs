//! HMG: a local, auditable knowledge-memory server for AI agents.
//!
//! Agents write and recall long-term memories through MCP tools; humans
//! inspect memory and its history through GraphQL; auditors query it with
//! SPARQL; Rust programs embed it through [`Memory`], the facade every
//! surface adapts. Oxigraph (RocksDB on disk) is the source of truth; see
//! `ARCHITECTURE.md` for the module map and invariants.
//!
//! ```
//! use hmg::{Caller, Memory, MemorizeRequest, Scope};
//!
//! let memory = Memory::open_in_memory()?;
//! let caller = Caller::new(Scope::tenant("alice"), "example");
//! memory.memorize(&caller, MemorizeRequest::new("部署前必须先跑数据库迁移").with_source("user"))?;
//! let brief = memory.brief(&caller, Default::default())?;
//! assert!(brief.text.contains("部署前必须先跑数据库迁移"));
//! # Result::<_, Box<dyn std::error::Error>>::Ok(())
//! ```

// Foundation: plain data and text, no I/O.
pub mod atom;
pub mod extract;
pub(crate) mod fact;
pub mod fault;
pub(crate) mod limits;
pub(crate) mod recent;
pub mod scope;
pub mod text;
pub(crate) mod vocab;
// The source of truth and its derived indexes.
pub(crate) mod index;
pub(crate) mod store;
// Recall, then the facade over everything below it (the Rust SDK).
pub mod memory;
pub mod recall;
// The memory tools as data, and the adapters that expose them.
pub(crate) mod surface;
pub(crate) mod tools;

pub use fault::{Classified, Fault};
pub use index::IndexError;
pub use index::embed;
/// Authentication to a remote SPARQL store.
pub use store::remote::Credentials as StoreCredentials;
pub use store::{RemoteConfig, StoreError};

/// The `hmg` command line, for the binary.
pub mod cli {
    pub use crate::surface::cli::{Cli, Exit, run};
}

pub use atom::{Atom, AtomId, Epistemic, Kind, Polarity, Status};
pub use memory::{
    AtomView, AuditView, Brief, BriefOptions, Caller, ChainEvent, CorrectAction, CorrectOutcome, CorrectRequest, Effect, EmbedderChoice,
    ExportFormat, GovernAction, GovernOutcome, GovernRequest, HandoffOutcome, HandoffRequest, History, ImportReport, ImportedLine,
    MEMORIZE_BATCH, MemorizeOutcome, MemorizeRequest, Memory, MemoryError, MemoryOptions, MergeEvent, MergeResult, MigrationTarget,
    ReflectAction, ReflectReport, ReflectRequest, Stats,
};
pub use recall::{RecallConfig, RecallOutcome, RecallRequest, RecalledAtom};
pub use scope::Scope;
