//! Every endpoint, declared once: name, method, route, scopes, stability, doc. The router, the
//! references (`/references/<service>/v1/api.json`, `reference.rs`) and authorization derive from it.

use axum::routing::{MethodFilter, MethodRouter};
use serde::Serialize;

use shoal_engine::topic::{EXCHANGE_PREFIX, SCHEDULER_EXCHANGE_PREFIX};

use crate::AppState;
use crate::auth::Scopes::{self, AllOf, AnyOf, For, Scope};

/// How settled an endpoint's shape is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stability {
    /// Will not change incompatibly.
    Stable,
    /// May change.
    Experimental,
    /// Kept for old clients.
    Deprecated,
}

/// An endpoint's HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// GET (and HEAD).
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
}

impl Method {
    /// The method's name on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    /// The requests an axum route of this method takes.
    pub(crate) fn filter(self) -> MethodFilter {
        match self {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
            Method::Put => MethodFilter::PUT,
            Method::Delete => MethodFilter::DELETE,
        }
    }
}

/// One endpoint of an API (the queue's, the scheduler's).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Endpoint {
    /// Taskcluster's name, e.g. `claimWork`.
    pub name: &'static str,
    /// HTTP method.
    pub method: Method,
    /// Route under the API's base (`/api/queue/v1`, `/api/scheduler/v1`), in axum syntax; `{queue}` stands for a taskQueueId, which
    /// also matches raw as `{queue}/{queue_wt}`.
    pub route: &'static str,
    /// What the caller must hold, with placeholders the handler fills in.
    pub scopes: Scopes,
    /// Stability.
    pub stability: Stability,
    /// What it does, in a sentence (the reference's title is its first clause).
    pub doc: &'static str,
    /// The schema of its body (`v1/<input>.json` under the service's schemas), if it takes one.
    pub input: Option<&'static str>,
    /// The query-string parameters it reads (all optional).
    pub query: &'static [&'static str],
    /// Builds the method router for `method`.
    #[serde(skip)]
    pub handler: fn(MethodFilter) -> MethodRouter<AppState>,
}

macro_rules! endpoint {
    ($name:literal, $method:ident, $route:literal, $scopes:expr, $stability:ident, $handler:path, $doc:literal
        $(, input = $input:literal)? $(, query = [$($query:literal),*])?) => {
        Endpoint {
            name: $name,
            method: Method::$method,
            route: $route,
            scopes: $scopes,
            stability: Stability::$stability,
            doc: $doc,
            input: endpoint!(@input $($input)?),
            query: &[$($($query),*)?],
            handler: |filter| on(filter, $handler),
        }
    };
    (@input) => {
        None
    };
    (@input $input:literal) => {
        Some($input)
    };
}

/// Requiring `queue:<verb>:<schedulerId>/<taskGroupId>/<taskId>`, or the verb in the task's
/// project, or (legacy) the verb with the scheduler's role, as Taskcluster's task commands do.
macro_rules! task_command {
    ($verb:literal) => {
        AnyOf(&[
            Scope(concat!("queue:", $verb, ":<schedulerId>/<taskGroupId>/<taskId>")),
            Scope(concat!("queue:", $verb, "-in-project:<projectId>")),
            AllOf(&[Scope(concat!("queue:", $verb)), Scope("assume:scheduler-id:<schedulerId>/<taskGroupId>")]),
        ])
    };
}

/// createTask: the task's own scopes, each route's, its project's and scheduler's, and its
/// priority (or a more urgent one) on its queue.
pub const CREATE_TASK: Scopes = AllOf(&[
    For { var: "scope", list: "scopes", each: &Scope("<scope>") },
    For { var: "route", list: "routes", each: &Scope("queue:route:<route>") },
    Scope("queue:create-task:project:<projectId>"),
    Scope("queue:scheduler-id:<schedulerId>"),
    AnyOf(&[For { var: "priority", list: "priorities", each: &Scope("queue:create-task:<priority>:<taskQueueId>") }]),
]);

/// A task graph: what creating each of its tasks needs.
pub(crate) const GRAPH_TASKS: Scopes = For { var: "task", list: "tasks", each: &CREATE_TASK };

/// Extending a graph: Taskcluster's scheduler scope for it, and creating its new tasks.
pub(crate) const EXTEND_GRAPH: Scopes = AllOf(&[Scope("scheduler:extend-task-graph:<taskGraphId>"), GRAPH_TASKS]);

/// Writing a run's artifacts and log.
pub(crate) const CREATE_ARTIFACT: Scopes = Scope("queue:create-artifact:<taskId>/<runId>");

/// Reading an artifact outside `public/` (each name a link leads through).
pub(crate) const GET_ARTIFACT: Scopes =
    For { var: "name", list: "privateNames", each: &Scope("queue:get-artifact:<name>") };

mod auth;
mod github;
mod hooks;
mod index;
mod queue;
mod scheduler;
mod secrets;
mod server;

pub use auth::AUTH_ENDPOINTS;
pub use github::GITHUB_ENDPOINTS;
pub use hooks::HOOKS_ENDPOINTS;
pub use index::INDEX_ENDPOINTS;
pub use queue::ENDPOINTS;
pub use scheduler::SCHEDULER_ENDPOINTS;
pub use secrets::SECRETS_ENDPOINTS;
pub use server::{BLOB_ENDPOINTS, EVENT_ENDPOINTS, LOG_ENDPOINTS, MONITORING};

/// A service Shoal serves under `/api/<name>/v1/`, with its reference's title.
pub struct Service {
    /// `queue`, `auth`, `scheduler`.
    pub name: &'static str,
    /// Its reference's title.
    pub title: &'static str,
    /// Its reference's description.
    pub description: &'static str,
    /// Its endpoints (the monitoring calls come with every service).
    pub endpoints: &'static [Endpoint],
    /// The largest request body it takes.
    pub max_body: usize,
    /// Its exchanges' common prefix, if it publishes any.
    pub exchange_prefix: Option<&'static str>,
}

/// Every service Shoal serves under `/api/<name>/v1/`.
pub const SERVICES: &[Service] = &[
    Service {
        name: "queue",
        title: "Queue Service",
        description: "Tasks, their runs and artifacts, task groups, task queues and their workers: Taskcluster's \
                      Queue API v1, with Shoal's additions (marked Shoal's).",
        endpoints: ENDPOINTS,
        max_body: crate::extract::MAX_BODY_BYTES,
        exchange_prefix: Some(EXCHANGE_PREFIX),
    },
    Service {
        name: "auth",
        title: "Authentication API",
        description: "Clients, roles and scopes: the part of Taskcluster's Auth API v1 that Shoal serves.",
        endpoints: AUTH_ENDPOINTS,
        max_body: crate::extract::MAX_BODY_BYTES,
        exchange_prefix: None,
    },
    Service {
        name: "scheduler",
        title: "Task-Graph Scheduler",
        description: "Task graphs: tasks with the graph tasks they require and their rerun budgets, submitted \
                      and extended as a whole.",
        endpoints: SCHEDULER_ENDPOINTS,
        // A graph carries up to 20,000 task definitions at once.
        max_body: crate::routes::graphs::MAX_GRAPH_BYTES,
        exchange_prefix: Some(SCHEDULER_EXCHANGE_PREFIX),
    },
    Service {
        name: "index",
        title: "Task Index",
        description: "Completed tasks found by name: each route `index.<namespace>` of a completed task indexes it \
                      there (rank, expiry and data from `task.extra.index`), and calls insert, find and list entries.",
        endpoints: INDEX_ENDPOINTS,
        max_body: crate::extract::MAX_BODY_BYTES,
        exchange_prefix: None,
    },
    Service {
        name: "secrets",
        title: "Secrets Service",
        description: "Named secrets, each a JSON object with an expiry, read and written under `secrets:` scopes.",
        endpoints: SECRETS_ENDPOINTS,
        max_body: crate::extract::MAX_BODY_BYTES,
        exchange_prefix: None,
    },
    Service {
        name: "hooks",
        title: "Hooks Service",
        description: "Hooks: task templates (JSON-e) fired on a cron schedule, by a call, or with a trigger token, \
                      each task created with the scopes of the role `hook-id:<hookGroupId>/<hookId>`.",
        endpoints: HOOKS_ENDPOINTS,
        max_body: crate::extract::MAX_BODY_BYTES,
        exchange_prefix: None,
    },
    Service {
        name: "github",
        title: "GitHub Service",
        description: "Pushes and pull requests become tasks: a forge's webhook (GitHub, Gitea, Forgejo) renders the \
                      commit's .taskcluster.yml and creates its tasks with the repository's role; each change is \
                      listed as a build.",
        endpoints: GITHUB_ENDPOINTS,
        // GitHub's deliveries are at most 25 MB.
        max_body: 25 << 20,
        exchange_prefix: None,
    },
];
