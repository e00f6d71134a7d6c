//! Shoal's HTTP face: the Taskcluster Queue API v1 under `/api/queue/v1`, built from the
//! endpoint table in [`endpoints`]. Handlers parse input into typed values, call the queue
//! service once, and render its answer; this crate never touches storage directly.

pub mod endpoints;
pub mod error;
pub mod extract;
mod routes;
mod serve;

pub use serve::ConnectionLimits;

use std::future::Future;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use shoal_service::Queue;
use tokio::net::TcpListener;

use crate::endpoints::{ENDPOINTS, Endpoint, SCHEDULER_ENDPOINTS};
use crate::error::ApiError;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The queue service.
    pub queue: Queue,
    /// When the server started (for ping's uptime).
    pub started: Instant,
    /// The server's public root URL (no trailing slash), for URLs it hands out.
    pub root_url: String,
    /// Open event streams per client address.
    pub subscribers: Subscribers,
}

/// Open event streams per client address, so that no one client holds them all.
#[derive(Clone, Default)]
pub struct Subscribers(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>);

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let api = api_router(ENDPOINTS, "queue");
    let scheduler = api_router(SCHEDULER_ENDPOINTS, "scheduler")
        // A graph carries up to 20,000 task definitions at once.
        .layer(DefaultBodyLimit::max(routes::graphs::MAX_GRAPH_BYTES));
    let blob_routes = axum::routing::get(routes::blobs::get_blob)
        .put(routes::blobs::put_blob)
        // Artifact uploads stream to disk; they are not held to the JSON body limit.
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .nest("/api/queue/v1", api)
        .nest("/api/scheduler/v1", scheduler)
        .route("/blobs/v1/{task_id}/{run_id}/{*name}", blob_routes)
        .route("/api/events/v1/connect", axum::routing::get(routes::events::connect))
        .route("/api/events/v1/connect/", axum::routing::get(routes::events::connect))
        .route(
            "/logs/v1/{task_id}/{run_id}",
            axum::routing::get(routes::logs::read_log)
                .post(routes::logs::append_log)
                .layer(DefaultBodyLimit::max(routes::logs::MAX_CHUNK_BYTES)),
        )
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .with_state(state)
}

/// One API's routes from its endpoint table, each reporting its endpoint's name in errors,
/// with its reference document.
fn api_router(endpoints: &'static [Endpoint], service_name: &str) -> Router<AppState> {
    let mut api: Router<AppState> = Router::new();
    for endpoint in endpoints {
        let filter = match endpoint.method {
            "GET" => axum::routing::MethodFilter::GET,
            "PUT" => axum::routing::MethodFilter::PUT,
            _ => axum::routing::MethodFilter::POST,
        };
        let name = endpoint.name;
        let routed = (endpoint.handler)(filter)
            .layer(middleware::from_fn(move |req: Request, next: Next| add_request_info(name, req, next)));
        let raw = endpoint.route.replace("{queue}", "{queue}/{queue_wt}");
        if raw != endpoint.route {
            api = api.route(&raw, routed.clone());
        }
        api = api.route(endpoint.route, routed);
    }
    api.layer(axum::Extension(routes::meta::Reference(std::sync::Arc::new(json!({
        "apiVersion": "v1",
        "serviceName": service_name,
        "entries": endpoints,
    })))))
}

/// Renders an [`ApiError`] left by a handler as Taskcluster's error body with `requestInfo`.
async fn add_request_info(name: &'static str, req: Request, next: Next) -> Response {
    // A refcount bump, not a copy: most requests never need it.
    let uri = req.uri().clone();
    let res = next.run(req).await;
    let Some(err) = res.extensions().get::<ApiError>().cloned() else {
        return res;
    };
    let body = json!({
        "code": err.code,
        "message": err.message,
        "requestInfo": {"method": name, "path": uri.path(), "time": shoal_service::now()},
    });
    (err.status, axum::Json(body)).into_response()
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
