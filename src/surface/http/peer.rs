//! Who is on the other end of a connection, and whether they are still
//! there.
//!
//! hyper does not read from an HTTP/1 connection while a request is being
//! handled, so it never notices a client that gave up: the handler (and a
//! SPARQL worker under it) would run to the end for nobody. Each accepted
//! connection therefore gets a watcher on a duplicate of its socket that
//! peeks for end-of-file and cancels the connection's [`Peer::gone`] token;
//! [`cancel_when_gone`] drops the handler's future when it fires (which
//! kills a SPARQL worker: it is `kill_on_drop`). The watcher ends, and
//! closes its duplicate, once hyper is done with the connection.
//!
//! A client that half-closes its sending side and then waits for the answer
//! looks like one that left; HTTP clients do not do that.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use tokio_util::sync::CancellationToken;

/// The connect-info of `hmg serve`'s connections.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// The client's address.
    pub(crate) address: SocketAddr,
    /// Cancelled when the client closes the connection.
    pub(crate) gone: CancellationToken,
    /// Alive while hyper holds the connection (its service keeps a clone).
    _held: Arc<()>,
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, tokio::net::TcpListener>) -> Peer {
        let gone = CancellationToken::new();
        let held = Arc::new(());
        match stream.io().as_fd().try_clone_to_owned() {
            Ok(fd) => {
                let socket = std::net::TcpStream::from(fd);
                match socket.set_nonblocking(true).map(|()| tokio::net::TcpStream::from_std(socket)) {
                    Ok(Ok(watched)) => {
                        tokio::spawn(watch(watched, gone.clone(), Arc::downgrade(&held)));
                    }
                    Ok(Err(error)) | Err(error) => tracing::debug!(%error, "cannot watch a connection"),
                }
            }
            Err(error) => tracing::debug!(%error, "cannot watch a connection"),
        }
        Peer { address: *stream.remote_addr(), gone, _held: held }
    }
}

/// Peeks at the socket until the client closes it (then cancels `gone`) or
/// hyper lets go of the connection.
async fn watch(socket: tokio::net::TcpStream, gone: CancellationToken, held: Weak<()>) {
    let mut byte = [0u8; 1];
    loop {
        tokio::select! {
            peeked = socket.peek(&mut byte) => match peeked {
                Ok(0) | Err(_) => {
                    gone.cancel();
                    return;
                }
                // The next request is waiting for hyper to read it.
                Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            },
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        if held.strong_count() == 0 {
            return;
        }
    }
}

/// Drops the rest of the request's handling when its client has left.
pub(crate) async fn cancel_when_gone(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let Some(gone) = request.extensions().get::<ConnectInfo<Peer>>().map(|info| info.0.gone.clone()) else {
        return next.run(request).await;
    };
    let path = request.uri().path().to_owned();
    tokio::select! {
        response = next.run(request) => response,
        () = gone.cancelled() => {
            tracing::info!(%path, "the client closed the connection; its request was stopped");
            // Nobody reads this answer.
            StatusCode::REQUEST_TIMEOUT.into_response()
        }
    }
}
