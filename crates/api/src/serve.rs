//! Accepting connections as a server on a hostile network must: a request head must arrive
//! within a time limit (slow clients are closed, not held), so must each piece of a body, idle
//! keep-alive connections are closed, and open connections are capped below the descriptor
//! limit; a connection over the cap is answered 503 at once and closed, never left hanging.
//! Long polls and event streams are answered requests, so none of this cuts them short.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::per_address::PerAddress;

/// The address a request's connection came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub(crate) std::net::IpAddr);

/// Limits on connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a request head (or the next one on a kept-alive connection) may take to arrive.
    pub header_timeout: Duration,
    /// How long a request body may go without sending anything.
    pub body_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections one client address may hold open at once, every kind of request
    /// counted (long polls, event streams and live-log follows among them).
    pub max_connections_per_address: usize,
}

impl ConnectionLimits {
    /// One client address's share of a cap of `max_connections` unless configured: a
    /// sixteenth, so that one address cannot take every place (at least one).
    #[must_use]
    pub fn default_share(max_connections: usize) -> usize {
        (max_connections / 16).max(1)
    }
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_address: ConnectionLimits::default_share(4096),
        }
    }
}

/// How long accepting waits after the operating system refused to accept (out of
/// descriptors), so that a full table is not spun on.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What a connection over the cap is told before it is closed.
fn busy() -> &'static [u8] {
    static BUSY: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| refusal("too many open connections"));
    &BUSY
}

/// What a connection over its address's share is told before it is closed.
fn over_share() -> &'static [u8] {
    static OVER: std::sync::LazyLock<Vec<u8>> =
        std::sync::LazyLock::new(|| refusal("too many open connections from this client address"));
    &OVER
}

/// A whole 503 answer saying `what`.
fn refusal(what: &str) -> Vec<u8> {
    let body = format!(r#"{{"code":"ServiceUnavailable","message":"{what}; retry later","requestInfo":{{}}}}"#);
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then waits for the open
/// connections' requests to finish.
///
/// # Errors
/// Never in practice: accept errors (descriptors exhausted) are waited out.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(limits.body_timeout));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let per_address = PerAddress::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // HTTP/1.1, as Taskcluster's clients and workers speak it.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accepting a connection failed; retrying shortly");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(place) = per_address.take(peer.ip(), limits.max_connections_per_address) else {
            tokio::spawn(refuse(stream, over_share()));
            continue;
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tokio::spawn(refuse(stream, busy()));
            continue;
        };
        let _ = stream.set_nodelay(true);
        // Handlers that limit per client (event streams) read the peer from the request. The
        // router is shared, not layered per connection (that would rebuild every route).
        let router = TowerToHyperService::new(app.clone());
        let peer = PeerAddr(peer.ip());
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(peer);
            hyper::service::Service::call(&router, req)
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A connection closed by a timeout or by its client is an ordinary end.
            let _ = connection.await;
            drop((permit, place));
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// Tells a connection over a cap that the server is busy (`answer`), and closes it.
async fn refuse(mut stream: TcpStream, answer: &'static [u8]) {
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(answer)).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answers_are_well_formed() {
        for answer in [busy(), over_share()] {
            let text = std::str::from_utf8(answer).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            let length: usize =
                head.lines().find_map(|line| line.strip_prefix("content-length: ")).unwrap().parse().unwrap();
            assert_eq!(body.len(), length);
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(value["code"], "ServiceUnavailable");
        }
    }
}
