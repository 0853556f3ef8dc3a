//! Whose fault an error is, decided once.
//!
//! Every layer's error type says which [`Fault`] each of its variants is
//! ([`Classified`]); every surface maps a fault to its own vocabulary in one
//! place (HTTP status, GraphQL `code`, CLI exit status, MCP `isError`), so
//! "is this the caller's error, and which field" is never decided twice.

/// The class of an error, as a caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// The request is malformed; [`Classified::field`] names the field when one is at fault.
    Invalid,
    /// What the request names does not exist (in the caller's tenant).
    NotFound,
    /// The caller may not do this.
    Forbidden,
    /// The data changed between reading and writing; nothing was written.
    Conflict,
    /// The request itself is larger than allowed.
    TooLarge,
    /// A well-formed request whose evaluation went over a limit (time,
    /// memory, result size); a narrower request may pass.
    OverLimit,
    /// No answer in a form the caller accepts.
    Unacceptable,
    /// Too much work in flight; retry shortly.
    Busy,
    /// The service cannot answer now (timed out, held by another process,
    /// a dependency down); retry later.
    Unavailable,
    /// A failure on our side.
    Internal,
}

impl Fault {
    /// Whether the caller can fix this by changing the request.
    pub fn is_callers(self) -> bool {
        !matches!(self, Fault::Busy | Fault::Unavailable | Fault::Internal)
    }
}

/// An error that knows its [`Fault`].
pub trait Classified: std::fmt::Display {
    /// The class of this error.
    fn fault(&self) -> Fault;

    /// The request field at fault, as named on the wire (`content`,
    /// `scope.branch`, …), when one is.
    fn field(&self) -> Option<&str> {
        None
    }
}
