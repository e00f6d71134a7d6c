//! The server's own endpoints outside the services: blobs, live logs and the event stream.

use axum::routing::on;

use super::{CREATE_ARTIFACT, GET_ARTIFACT};
use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::Public;
use crate::routes::{blobs, events, logs, meta};

/// The server's own blob endpoint, where putUrls and artifact redirects point (`/blobs/v1`).
pub const BLOB_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "getBlob",
        Get,
        "/{task_id}/{run_id}/{*name}",
        GET_ARTIFACT,
        Experimental,
        blobs::get_blob,
        "An artifact's bytes, stored by the server."
    ),
    endpoint!(
        "putBlob",
        Put,
        "/{task_id}/{run_id}/{*name}",
        CREATE_ARTIFACT,
        Experimental,
        blobs::put_blob,
        "Uploads an artifact's bytes (a putUrl)."
    ),
];

/// Live logs (`/logs/v1`): read by anyone, appended by the run's worker.
pub const LOG_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "readLog",
        Get,
        "/{task_id}/{run_id}",
        Public,
        Experimental,
        logs::read_log,
        "A run's live log, from an offset (or a line), followed while the run runs.",
        query = ["offset", "follow", "tail", "limit", "line"]
    ),
    endpoint!(
        "searchLog",
        Get,
        "/{task_id}/{run_id}/search",
        Public,
        Experimental,
        logs::search_log,
        "Searches a run's whole log: each matching line's number and text, as found.",
        query = ["q"]
    ),
    endpoint!(
        "appendLog",
        Post,
        "/{task_id}/{run_id}",
        CREATE_ARTIFACT,
        Experimental,
        logs::append_log,
        "Appends to a run's live log."
    ),
];

/// The event stream (`/api/events/v1`).
pub const EVENT_ENDPOINTS: &[Endpoint] = &[endpoint!(
    "connect",
    Get,
    "/connect/",
    Public,
    Experimental,
    events::connect,
    "The event stream: messages of the bound exchanges, as server-sent events.",
    query = ["bindings"]
)];

/// Liveness, version and the reference: served by every API (queue, auth, scheduler) alike.
pub const MONITORING: &[Endpoint] = &[
    endpoint!("ping", Get, "/ping", Public, Stable, meta::ping, "Answers while the server is up, with its uptime."),
    endpoint!(
        "lbheartbeat",
        Get,
        "/__lbheartbeat__",
        Public,
        Stable,
        meta::lbheartbeat,
        "Answers while the server is up, for load balancers."
    ),
    endpoint!("version", Get, "/__version__", Public, Stable, meta::version, "The server's version."),
    endpoint!("heartbeat", Get, "/__heartbeat__", Public, Stable, meta::heartbeat, "Answers while the server is up."),
    endpoint!(
        "reference",
        Get,
        "/reference",
        Public,
        Experimental,
        meta::reference,
        "This API's reference, in Taskcluster's api-reference format (also at `/references/<service>/v1/api.json`)."
    ),
];
