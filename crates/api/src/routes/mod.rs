//! Handlers, one module per resource.

pub(crate) mod artifacts;
pub(crate) mod auth;
pub(crate) mod blobs;
pub(crate) mod claims;
pub(crate) mod events;
pub(crate) mod github;
pub(crate) mod graphs;
pub(crate) mod groups;
pub(crate) mod hooks;
pub(crate) mod index;
pub(crate) mod logs;
pub(crate) mod meta;
pub(crate) mod provisioners;
pub(crate) mod queues;
pub(crate) mod secrets;
pub(crate) mod task_list;
pub(crate) mod tasks;
pub(crate) mod workers;

use axum::Json;
use serde::Serialize;
use serde_json::Value;
use shoal_engine::status::TaskStatus;

/// The `{status}` envelope most task calls answer with.
#[derive(Serialize)]
pub(crate) struct StatusBody {
    status: TaskStatus,
}

/// Wraps a status in its envelope.
pub(crate) fn status_body(status: TaskStatus) -> Json<StatusBody> {
    Json(StatusBody { status })
}

/// Adds `continuationToken` to a listing when there is more.
pub(crate) fn with_continuation(mut body: Value, continuation: Option<String>) -> Json<Value> {
    if let (Some(token), Some(object)) = (continuation, body.as_object_mut()) {
        object.insert("continuationToken".into(), Value::String(token));
    }
    Json(body)
}
