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

pub mod atom;
pub mod audit;
pub mod blocking;
pub mod cli;
pub mod embed;
pub mod eval;
pub mod extract;
pub mod graph;
pub mod graphql;
pub mod hook;
pub mod indexes;
pub mod keyword;
pub(crate) mod limits;
pub mod mcp;
pub mod memory;
pub mod recall;
pub mod relay;
pub mod rest;
pub mod scope;
pub mod server;
pub mod sparql;
pub mod store;
pub mod text;
pub mod token;
pub mod tools;
pub mod vector;
pub mod vocab;

pub use atom::{Atom, AtomId, Epistemic, Kind, Polarity, Status};
pub use memory::{
    AtomView, AuditView, Brief, BriefOptions, Caller, ChainEvent, CorrectAction, CorrectOutcome, CorrectRequest, Effect,
    ExportFormat, GovernAction, GovernOutcome, GovernRequest, MergeEvent, MergeResult, HandoffOutcome, HandoffRequest, History, ImportReport,
    ImportedLine, MemorizeOutcome, MemorizeRequest, Memory, MemoryError, MemoryOptions, EmbedderChoice, ReflectAction, ReflectReport,
    ReflectRequest, Stats,
};
pub use recall::{RecallConfig, RecallOutcome, RecallRequest, RecalledAtom};
pub use scope::Scope;
