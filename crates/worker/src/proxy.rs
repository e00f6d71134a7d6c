//! Taskcluster's `taskclusterProxy` for one run: the task calls the server's APIs at
//! `TASKCLUSTER_PROXY_URL` without credentials, and the worker signs each request with the
//! run's credentials narrowed to the task's `scopes` (the task never sees them). The proxy
//! listens on loopback (inside the task's own network namespace when it has no network),
//! answers only below a path of its own and, when the run has a user of its own, only that
//! user's connections; it stops when the run's commands end.

use std::convert::Infallible;
use std::sync::Arc;

use futures_util::TryStreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use shoal_client::Client;
use tokio::task::JoinSet;

/// The APIs the proxy passes on, as Taskcluster's proxy does under `/api/<service>/<version>/`.
const SERVICES: [&str; 6] = ["queue", "scheduler", "auth", "index", "secrets", "hooks"];
/// Largest request body passed on (the largest the server takes: a task graph).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Most connections one run's proxy keeps open at once; more are closed at once.
const MAX_CONNECTIONS: usize = 32;

type ProxyBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A run's proxy, serving until dropped.
pub(crate) struct Proxy {
    url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Serves on `listener` (on 127.0.0.1) for the run `client` acts as, with the task's
    /// `scopes`; `user`, when given, is the only uid whose connections are answered.
    ///
    /// # Errors
    /// When the listener cannot be used.
    pub(crate) fn start(
        listener: std::net::TcpListener,
        client: Client,
        scopes: Vec<String>,
        user: Option<u32>,
    ) -> std::io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        // The run's own path: another local process that finds the port still cannot use it.
        let prefix = format!("/{}", slugid::nice());
        let url = format!("http://127.0.0.1:{port}{prefix}");
        let shared = Arc::new(Shared { client, scopes, prefix });
        let server = tokio::spawn(serve(listener, shared, user));
        Ok(Proxy { url, server })
    }

    /// `TASKCLUSTER_PROXY_URL`: what the task uses as its root URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Its connections are in the task's JoinSet, so they end with it.
        self.server.abort();
    }
}

struct Shared {
    client: Client,
    scopes: Vec<String>,
    prefix: String,
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>, user: Option<u32>) {
    let port = listener.local_addr().map_or(0, |addr| addr.port());
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of descriptors, most likely: let some close before trying again.
                tracing::warn!(error = %err, "a run's proxy could not accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= MAX_CONNECTIONS {
            continue;
        }
        if let Some(user) = user {
            let owner = crate::peer::owner_of(peer, port);
            if owner != Some(user) {
                tracing::warn!(%peer, ?owner, user, "a connection to a run's proxy from another user was refused");
                continue;
            }
        }
        let shared = Arc::clone(&shared);
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(handle(req, &shared).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn handle(req: Request<Incoming>, shared: &Shared) -> Response<ProxyBody> {
    let path = req.uri().path();
    let Some(rest) = path.strip_prefix(shared.prefix.as_str()).filter(|rest| rest.starts_with('/')) else {
        return error(StatusCode::NOT_FOUND, "ResourceNotFound", "no such path on this proxy");
    };
    // Judged as the server will read it: dot segments (`..`, `%2e%2e`) resolved first.
    let Some(rest) = resolved(rest) else {
        return error(StatusCode::BAD_REQUEST, "InputError", "the path is not a valid URL path");
    };
    let service = rest.strip_prefix("/api/").and_then(|api| api.split('/').next()).unwrap_or_default();
    if !SERVICES.contains(&service) || !rest.starts_with(&format!("/api/{service}/v1/")) {
        let message =
            "the proxy passes on /api/<service>/v1/ for queue, scheduler, auth, index, secrets and hooks only";
        return error(StatusCode::NOT_FOUND, "ResourceNotFound", message);
    }
    let target = match req.uri().query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest,
    };
    let method = req.method().clone();
    let headers = passed_on(req.headers());
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            let message = format!("request bodies through the proxy are at most {MAX_BODY} bytes");
            return error(StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge", &message);
        }
        Err(err) => return error(StatusCode::BAD_REQUEST, "InputError", &format!("reading the request body: {err}")),
    };
    match shared.client.forward(method, &target, headers, body, &shared.scopes).await {
        Ok(answer) => {
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if !hop_by_hop(name) && name != header::CONTENT_LENGTH {
                    response = response.header(name, value);
                }
            }
            let stream = answer.bytes_stream().map_ok(Frame::data).map_err(|err| Box::new(err) as _);
            response.body(BodyExt::boxed(StreamBody::new(stream))).unwrap_or_else(|err| {
                error(StatusCode::BAD_GATEWAY, "ProxyError", &format!("the server's answer: {err}"))
            })
        }
        Err(err) => error(StatusCode::BAD_GATEWAY, "ProxyError", &err.to_string()),
    }
}

/// `path` with its dot segments resolved as a URL parser resolves them (`.`, `..` and their
/// percent-encoded forms, `\` as `/`): what the forwarded request will ask for.
fn resolved(path: &str) -> Option<String> {
    let url = reqwest::Url::parse(&format!("http://proxy.invalid{path}")).ok()?;
    Some(url.path().to_owned())
}

/// The request headers passed on: all but the connection's own, `Host` and `Authorization`
/// (the proxy signs), and what a proxy in front of the server would say (`Forwarded`,
/// `X-Forwarded-*`: the server reads the signed port from them).
fn passed_on(headers: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let forwarding = name == header::FORWARDED || name.as_str().starts_with("x-forwarded-");
        let ours = [header::HOST, header::AUTHORIZATION, header::CONTENT_LENGTH].contains(name);
        if !hop_by_hop(name) && !forwarding && !ours {
            kept.append(name, value.clone());
        }
    }
    kept
}

fn hop_by_hop(name: &header::HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

/// An answer in Taskcluster's error shape.
fn error(status: StatusCode, code: &str, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_resolved_before_the_path_is_judged() {
        for (path, seen) in [
            ("/api/queue/v1/../../../metrics", "/metrics"),
            ("/api/queue/v1/%2e%2e/%2E%2e/%2e./metrics", "/metrics"),
            ("/api/queue/v1/..\\..\\..\\metrics", "/metrics"),
            ("/api/queue/v1/task/x/./status", "/api/queue/v1/task/x/status"),
            ("/api/queue/v1/claim-work/p%2Fq", "/api/queue/v1/claim-work/p%2Fq"),
        ] {
            assert_eq!(resolved(path).as_deref(), Some(seen), "{path}");
        }
    }

    #[test]
    fn the_proxy_keeps_end_to_end_headers_and_drops_credentials() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Hawk id=\"forged\""));
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:1"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        headers.insert("x-forwarded-port", HeaderValue::from_static("443"));
        headers.insert(header::FORWARDED, HeaderValue::from_static("for=10.0.0.1"));
        let kept = passed_on(&headers);
        assert_eq!(kept.len(), 1);
        assert!(kept.contains_key(header::CONTENT_TYPE));
    }
}
