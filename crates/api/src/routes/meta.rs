//! Liveness, version and the API reference.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::AppState;

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

/// The endpoint table as JSON (built once by the router): what exists, how to call it.
pub(crate) async fn reference(axum::Extension(reference): axum::Extension<Reference>) -> Json<Value> {
    Json((*reference.0).clone())
}

/// The API reference document.
#[derive(Clone)]
pub(crate) struct Reference(pub(crate) std::sync::Arc<Value>);
