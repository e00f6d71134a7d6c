//! Liveness, version and the API reference.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;

pub(crate) async fn ping(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "alive": true, "uptime": state.started.elapsed().as_secs_f64() }))
}

pub(crate) async fn lbheartbeat() -> Json<Value> {
    Json(json!({}))
}

pub(crate) async fn heartbeat() -> Json<Value> {
    Json(json!({}))
}

pub(crate) async fn version() -> Json<Value> {
    Json(
        json!({ "source": "https://github.com/shoal-ci/shoal", "version": env!("CARGO_PKG_VERSION"), "commit": "", "build": "" }),
    )
}

/// listWorkers, getWorker, quarantineWorker, declareWorker: not served yet.
pub(crate) async fn no_worker_registry() -> ApiError {
    not_registered("workers (listWorkers, getWorker, quarantineWorker, declareWorker)")
}

/// listProvisioners, getProvisioner, listWorkerTypes, getWorkerType: not served yet.
pub(crate) async fn no_provisioner_registry() -> ApiError {
    not_registered("provisioners and worker types (listProvisioners, getProvisioner, listWorkerTypes, getWorkerType)")
}

/// The answer to a worker-registry call: says so and what to use instead; a 404, not a
/// 5xx, so clients do not retry it.
fn not_registered(call: &str) -> ApiError {
    ApiError::not_found(format!(
        "Shoal keeps no registry of {call} yet; list task queues with listTaskQueues (GET /task-queues) \
         and getTaskQueue (GET /task-queues/<provisionerId>/<workerType>), and a queue's claimed runs, \
         with the worker of each, with listClaimedTasks"
    ))
}

/// The endpoint table as JSON (built once by the router): what exists, how to call it.
pub(crate) async fn reference(axum::Extension(reference): axum::Extension<Reference>) -> Json<Value> {
    Json((*reference.0).clone())
}

/// The API reference document.
#[derive(Clone)]
pub(crate) struct Reference(pub(crate) std::sync::Arc<Value>);
