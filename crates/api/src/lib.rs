//! Shoal's HTTP face: the Taskcluster Queue API v1 under `/api/queue/v1`, built from the
//! endpoint table in [`endpoints`]. Handlers parse input into typed values, call the queue
//! service once, and render its answer; this crate never touches storage directly.

pub mod auth;
pub mod endpoints;
pub mod error;
pub mod extract;
mod forge;
mod per_address;
pub mod prometheus;
pub(crate) mod reference;
mod routes;
pub mod schedule;
mod serve;
mod ui;

pub use per_address::Subscribers;
pub use serve::ConnectionLimits;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use shoal_service::Authority;
use tokio::net::TcpListener;

use crate::auth::nonces::Nonces;
use crate::auth::{Caller, Scopes};
use crate::endpoints::{BLOB_ENDPOINTS, EVENT_ENDPOINTS, Endpoint, LOG_ENDPOINTS, MONITORING, SERVICES, Service};
use crate::error::ApiError;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The queue service.
    pub queue: shoal_service::Service,
    /// Clients, roles and the server's signing key.
    pub auth: Authority,
    /// Nonces of signed requests seen lately.
    pub nonces: Arc<Nonces>,
    /// When the server started (for ping's uptime).
    pub started: Instant,
    /// The server's public root URL (no trailing slash), for URLs it hands out.
    pub root_url: String,
    /// Open event streams and live-log follows per client address.
    pub subscribers: Subscribers,
    /// The secret a forge signs its webhook deliveries with (none: deliveries are refused).
    pub github_webhook_secret: Option<Arc<str>>,
    /// The program that renders a push's `.taskcluster.yml` in a process of its own, under
    /// limits (`shoal`, whose `render-taskcluster-yml` does it); `None` renders in this one.
    pub github_renderer: Option<std::path::PathBuf>,
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    // Installed before any request, so nothing counted is lost.
    prometheus::handle();
    // Artifact uploads stream to disk; they are not held to the JSON body limit.
    let blobs = api_router(&state, BLOB_ENDPOINTS, None, extract::MAX_BODY_BYTES).layer(DefaultBodyLimit::disable());
    let logs = api_router(&state, LOG_ENDPOINTS, None, routes::logs::MAX_CHUNK_BYTES)
        .layer(DefaultBodyLimit::max(routes::logs::MAX_CHUNK_BYTES));
    let events = api_router(&state, EVENT_ENDPOINTS, None, extract::MAX_BODY_BYTES);
    let mut app = Router::new();
    for service in SERVICES {
        let api = api_router(&state, service.endpoints, Some(service), service.max_body)
            .layer(DefaultBodyLimit::max(service.max_body));
        app = app.nest(&format!("/api/{}/v1", service.name), api);
    }
    app.route("/metrics", axum::routing::get(prometheus::serve))
        .route("/references/manifest.json", axum::routing::get(reference::manifest))
        .route("/references/{service}/v1/{file}", axum::routing::get(reference::document))
        .route("/schemas/{service}/v1/{file}", axum::routing::get(reference::schema))
        .merge(ui::routes())
        .nest("/blobs/v1", blobs)
        .nest("/logs/v1", logs)
        .nest("/api/events/v1", events)
        .fallback(ui::fallback)
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .with_state(state)
}

/// One API's routes from its endpoint table, each authenticating its caller and reporting
/// its endpoint's name in errors, with the API's reference document when it has a name.
fn api_router(
    state: &AppState,
    endpoints: &'static [Endpoint],
    service: Option<&'static Service>,
    max_body: usize,
) -> Router<AppState> {
    let mut api: Router<AppState> = Router::new();
    // A service (queue, auth, scheduler) also answers the monitoring calls.
    let monitoring: &'static [Endpoint] = if service.is_some() { MONITORING } else { &[] };
    for endpoint in monitoring.iter().chain(endpoints) {
        let filter = endpoint.method.filter();
        // Only what authentication needs, so a request clones three handles, not the state.
        let gate =
            auth::Gate { auth: state.auth.clone(), nonces: Arc::clone(&state.nonces), queue: state.queue.clone() };
        let routed = (endpoint.handler)(filter).layer(middleware::from_fn(move |req: Request, next: Next| {
            around_endpoint(gate.clone(), endpoint, max_body, req, next)
        }));
        let raw = endpoint.route.replace("{queue}", "{queue}/{queue_wt}");
        if raw != endpoint.route {
            api = api.route(&raw, routed.clone());
        }
        // Taskcluster's clients drop a route's trailing slash (`/clients/` is sent as `/clients`).
        if let Some(bare) = endpoint.route.strip_suffix('/').filter(|bare| !bare.is_empty()) {
            api = api.route(bare, routed.clone());
        }
        api = api.route(endpoint.route, routed);
    }
    match service {
        None => api,
        Some(service) => {
            api.layer(axum::Extension(routes::meta::Reference(Arc::new(reference::api_reference(service)))))
        }
    }
}

/// Authenticates the caller, runs the handler, and renders an [`ApiError`] it left as
/// Taskcluster's error body with `requestInfo`.
async fn around_endpoint(
    gate: auth::Gate,
    endpoint: &'static Endpoint,
    max_body: usize,
    req: Request,
    next: Next,
) -> Response {
    // A refcount bump, not a copy: most requests never need it.
    let uri = req.uri().clone();
    let started = std::time::Instant::now();
    let res = match auth::authenticate(&gate, endpoint, req, max_body).await {
        Err(err) => err.into_response(),
        Ok(req) => {
            let checked = req.extensions().get::<Caller>().map(|caller| Arc::clone(&caller.checked));
            let res = next.run(req).await;
            let unchecked = !matches!(endpoint.scopes, Scopes::Public)
                && !checked.is_some_and(|flag| flag.load(std::sync::atomic::Ordering::Relaxed));
            if unchecked && !res.status().is_client_error() && !res.status().is_server_error() {
                // Fail closed: an endpoint with scopes whose handler never asked for them.
                tracing::error!(endpoint = endpoint.name, "handler answered without checking scopes");
                ApiError::internal().into_response()
            } else {
                res
            }
        }
    };
    metrics::histogram!("shoal_request_duration_seconds", "endpoint" => endpoint.name, "status" => status_class(res.status()))
        .record(started.elapsed().as_secs_f64());
    let Some(err) = res.extensions().get::<ApiError>().cloned() else {
        return res;
    };
    let body = json!({
        "code": err.code,
        "message": err.message,
        "requestInfo": {"method": endpoint.name, "path": uri.path(), "time": shoal_service::now()},
    });
    (err.status, axum::Json(body)).into_response()
}

/// A response's status as a label with few values: `2xx` … `5xx`.
fn status_class(status: axum::http::StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// Serves `router(state)` on `listener` under the default [`ConnectionLimits`] until
/// `shutdown` resolves, then finishes open requests.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, ConnectionLimits::default(), shutdown).await
}

/// [`serve`] under `limits`.
///
/// # Errors
/// When the listener fails.
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve::serve(listener, router(state), limits, shutdown).await
}
