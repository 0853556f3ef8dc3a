//! A [`Fault`] in the vocabulary of the web surfaces, in one place: the HTTP
//! status (server routes, REST, SPARQL), the GraphQL `code` extension, and
//! the `Retry-After` a client gets when it should come back.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

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

/// Asks the client to come back later (`Retry-After`) when `response` says
/// the server is busy (429), whichever surface built it.
pub(crate) fn ask_to_retry(mut response: Response) -> Response {
    if response.status() == http_status(Fault::Busy) {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    response
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
            let response = ask_to_retry(axum::response::IntoResponse::into_response(status));
            assert_eq!(
                response.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes().to_vec()),
                (fault == Fault::Busy).then(|| b"2".to_vec()),
                "only a busy server asks to come back, after {RETRY_AFTER_SECS} s"
            );
        }
    }
}
