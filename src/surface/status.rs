//! A [`Fault`] in the vocabulary of the web surfaces, in one place: the HTTP
//! status (server routes, REST, SPARQL), the GraphQL `code` extension, and
//! the `Retry-After` a client gets when it should come back.

use axum::http::{HeaderValue, StatusCode};

use crate::fault::Fault;

/// Seconds a client is asked to wait when the server is busy.
pub(crate) const RETRY_AFTER_SECS: u64 = 2;

/// The HTTP status of a fault.
pub(crate) fn http_status(fault: Fault) -> StatusCode {
    match fault {
        Fault::Invalid => StatusCode::BAD_REQUEST,
        Fault::NotFound => StatusCode::NOT_FOUND,
        Fault::Forbidden => StatusCode::FORBIDDEN,
        Fault::Conflict => StatusCode::CONFLICT,
        Fault::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Fault::OverLimit => StatusCode::UNPROCESSABLE_ENTITY,
        Fault::Unacceptable => StatusCode::NOT_ACCEPTABLE,
        Fault::Busy => StatusCode::TOO_MANY_REQUESTS,
        Fault::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The `Retry-After` header value for a fault, when the client should retry.
pub(crate) fn retry_after(fault: Fault) -> Option<HeaderValue> {
    (fault == Fault::Busy).then(|| HeaderValue::from(RETRY_AFTER_SECS))
}

/// The GraphQL error `code` of a fault.
pub(crate) fn graphql_code(fault: Fault) -> &'static str {
    match fault {
        Fault::Invalid => "BAD_USER_INPUT",
        Fault::NotFound => "NOT_FOUND",
        Fault::Forbidden => "FORBIDDEN",
        Fault::Conflict => "CONFLICT",
        Fault::TooLarge => "TOO_LARGE",
        Fault::OverLimit => "OVER_LIMIT",
        Fault::Unacceptable => "NOT_ACCEPTABLE",
        Fault::Busy => "BUSY",
        Fault::Unavailable => "UNAVAILABLE",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Fault; 10] = [
        Fault::Invalid,
        Fault::NotFound,
        Fault::Forbidden,
        Fault::Conflict,
        Fault::TooLarge,
        Fault::OverLimit,
        Fault::Unacceptable,
        Fault::Busy,
        Fault::Unavailable,
        Fault::Internal,
    ];

    #[test]
    fn every_fault_has_its_own_status_and_code() {
        let statuses: std::collections::HashSet<_> = ALL.iter().map(|f| http_status(*f)).collect();
        let codes: std::collections::HashSet<_> = ALL.iter().map(|f| graphql_code(*f)).collect();
        assert_eq!((statuses.len(), codes.len()), (ALL.len(), ALL.len()));
        for fault in ALL {
            let status = http_status(fault);
            assert_eq!(status.is_client_error(), fault.is_callers() || fault == Fault::Busy, "{fault:?} → {status}");
            assert_eq!(retry_after(fault).is_some(), fault == Fault::Busy, "only a busy server asks to come back");
        }
    }
}
