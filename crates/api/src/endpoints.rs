//! Every endpoint, declared once: name, method, route, scopes, stability. The router, the
//! API reference (`GET /api/<service>/v1/reference`) and authorization derive from it.

use axum::routing::{MethodFilter, MethodRouter, on};
use serde::Serialize;

use crate::AppState;
use crate::auth::Scopes::{self, AllOf, AnyOf, For, Public, Scope};
use crate::routes::{
    artifacts, auth, blobs, claims, events, graphs, groups, logs, meta, provisioners, queues, task_list, tasks, workers,
};

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
    /// Builds the method router for `method`.
    #[serde(skip)]
    pub handler: fn(MethodFilter) -> MethodRouter<AppState>,
}

macro_rules! endpoint {
    ($name:literal, $method:ident, $route:literal, $scopes:expr, $stability:ident, $handler:path) => {
        Endpoint {
            name: $name,
            method: Method::$method,
            route: $route,
            scopes: $scopes,
            stability: Stability::$stability,
            handler: |filter| on(filter, $handler),
        }
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
const GRAPH_TASKS: Scopes = For { var: "task", list: "tasks", each: &CREATE_TASK };

/// Extending a graph: Taskcluster's scheduler scope for it, and creating its new tasks.
const EXTEND_GRAPH: Scopes = AllOf(&[Scope("scheduler:extend-task-graph:<taskGraphId>"), GRAPH_TASKS]);

/// Writing a run's artifacts and log.
const CREATE_ARTIFACT: Scopes = Scope("queue:create-artifact:<taskId>/<runId>");

/// Reading an artifact outside `public/` (each name a link leads through).
const GET_ARTIFACT: Scopes = For { var: "name", list: "privateNames", each: &Scope("queue:get-artifact:<name>") };

/// The queue API v1.
pub const ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", Get, "/ping", Public, Stable, meta::ping),
    endpoint!("lbheartbeat", Get, "/__lbheartbeat__", Public, Stable, meta::lbheartbeat),
    endpoint!("version", Get, "/__version__", Public, Stable, meta::version),
    endpoint!("heartbeat", Get, "/__heartbeat__", Public, Stable, meta::heartbeat),
    endpoint!("reference", Get, "/reference", Public, Experimental, meta::reference),
    endpoint!("task", Get, "/task/{task_id}", Public, Stable, tasks::get_task),
    endpoint!("tasks", Post, "/tasks", Public, Experimental, tasks::get_tasks),
    endpoint!("statuses", Post, "/tasks/status", Public, Experimental, tasks::get_statuses),
    endpoint!("status", Get, "/task/{task_id}/status", Public, Stable, tasks::get_status),
    endpoint!("createTask", Put, "/task/{task_id}", CREATE_TASK, Stable, tasks::create_task),
    endpoint!(
        "scheduleTask",
        Post,
        "/task/{task_id}/schedule",
        task_command!("schedule-task"),
        Stable,
        tasks::schedule_task
    ),
    endpoint!("rerunTask", Post, "/task/{task_id}/rerun", task_command!("rerun-task"), Stable, tasks::rerun_task),
    endpoint!("cancelTask", Post, "/task/{task_id}/cancel", task_command!("cancel-task"), Stable, tasks::cancel_task),
    endpoint!(
        "changeTaskPriority",
        Post,
        "/task/{task_id}/priority",
        AnyOf(&[
            Scope("queue:change-task-priority:<taskId>"),
            Scope("queue:change-task-priority-in-queue:<taskQueueId>")
        ]),
        Experimental,
        tasks::change_task_priority
    ),
    endpoint!("listDependentTasks", Get, "/task/{task_id}/dependents", Public, Stable, tasks::list_dependent_tasks),
    endpoint!(
        "claimWork",
        Post,
        "/claim-work/{queue}",
        AllOf(&[Scope("queue:claim-work:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Stable,
        claims::claim_work
    ),
    endpoint!(
        "claimTask",
        Post,
        "/task/{task_id}/runs/{run_id}/claim",
        AllOf(&[Scope("queue:claim-task:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Deprecated,
        claims::claim_task
    ),
    endpoint!(
        "reclaimTask",
        Post,
        "/task/{task_id}/runs/{run_id}/reclaim",
        Scope("queue:reclaim-task:<taskId>/<runId>"),
        Stable,
        claims::reclaim_task
    ),
    endpoint!(
        "reportCompleted",
        Post,
        "/task/{task_id}/runs/{run_id}/completed",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_completed
    ),
    endpoint!(
        "reportFailed",
        Post,
        "/task/{task_id}/runs/{run_id}/failed",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_failed
    ),
    endpoint!(
        "reportException",
        Post,
        "/task/{task_id}/runs/{run_id}/exception",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_exception
    ),
    endpoint!(
        "createArtifact",
        Post,
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        CREATE_ARTIFACT,
        Stable,
        artifacts::create_artifact
    ),
    endpoint!(
        "finishArtifact",
        Put,
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        CREATE_ARTIFACT,
        Stable,
        artifacts::finish_artifact
    ),
    endpoint!(
        "getArtifact",
        Get,
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::get_artifact
    ),
    endpoint!(
        "getLatestArtifact",
        Get,
        "/task/{task_id}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::get_latest_artifact
    ),
    endpoint!(
        "listArtifacts",
        Get,
        "/task/{task_id}/runs/{run_id}/artifacts",
        Public,
        Stable,
        artifacts::list_artifacts
    ),
    endpoint!(
        "listLatestArtifacts",
        Get,
        "/task/{task_id}/artifacts",
        Public,
        Stable,
        artifacts::list_latest_artifacts
    ),
    endpoint!(
        "artifactInfo",
        Get,
        "/task/{task_id}/runs/{run_id}/artifact-info/{*name}",
        Public,
        Stable,
        artifacts::artifact_info
    ),
    endpoint!(
        "latestArtifactInfo",
        Get,
        "/task/{task_id}/artifact-info/{*name}",
        Public,
        Stable,
        artifacts::latest_artifact_info
    ),
    endpoint!(
        "artifact",
        Get,
        "/task/{task_id}/runs/{run_id}/artifact-content/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::artifact_content
    ),
    endpoint!(
        "latestArtifact",
        Get,
        "/task/{task_id}/artifact-content/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::latest_artifact_content
    ),
    endpoint!("listTaskGroup", Get, "/task-group/{group}/list", Public, Stable, groups::list_task_group),
    endpoint!("listTasks", Get, "/tasks", Public, Experimental, task_list::list_tasks),
    endpoint!("countTasks", Get, "/tasks/count", Public, Experimental, task_list::count_tasks),
    endpoint!("listFailedTasks", Get, "/tasks/failed", Public, Experimental, task_list::list_failed_tasks),
    endpoint!("listTaskGroups", Get, "/task-groups", Public, Experimental, task_list::list_task_groups),
    endpoint!("getTaskGroup", Get, "/task-group/{group}", Public, Stable, groups::get_task_group),
    endpoint!(
        "sealTaskGroup",
        Post,
        "/task-group/{group}/seal",
        Scope("queue:seal-task-group:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::seal_task_group
    ),
    endpoint!(
        "cancelTaskGroup",
        Post,
        "/task-group/{group}/cancel",
        Scope("queue:cancel-task-group:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::cancel_task_group
    ),
    endpoint!(
        "changeTaskGroupPriority",
        Post,
        "/task-group/{group}/priority",
        Scope("queue:change-task-group-priority:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::change_task_group_priority
    ),
    endpoint!("pendingTasks", Get, "/pending/{queue}", Public, Deprecated, queues::pending_tasks),
    endpoint!("taskQueueCounts", Get, "/task-queues/{queue}/counts", Public, Stable, queues::task_queue_counts),
    endpoint!(
        "taskQueueCountsBatch",
        Post,
        "/task-queues/counts",
        Public,
        Experimental,
        queues::task_queue_counts_batch
    ),
    endpoint!(
        "listPendingTasks",
        Get,
        "/task-queues/{queue}/pending",
        Public,
        Experimental,
        queues::list_pending_tasks
    ),
    endpoint!(
        "listClaimedTasks",
        Get,
        "/task-queues/{queue}/claimed",
        Public,
        Experimental,
        queues::list_claimed_tasks
    ),
    endpoint!("listTaskQueues", Get, "/task-queues", Public, Stable, queues::list_task_queues),
    endpoint!("listProvisioners", Get, "/provisioners", Public, Deprecated, provisioners::list_provisioners),
    endpoint!("getProvisioner", Get, "/provisioners/{provisioner}", Public, Deprecated, provisioners::get_provisioner),
    endpoint!(
        "listWorkerTypes",
        Get,
        "/provisioners/{provisioner}/worker-types",
        Public,
        Deprecated,
        provisioners::list_worker_types
    ),
    endpoint!(
        "getWorkerType",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}",
        Public,
        Deprecated,
        provisioners::get_worker_type
    ),
    endpoint!(
        "listWorkers",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers",
        Public,
        Deprecated,
        workers::list_workers
    ),
    endpoint!(
        "getWorker",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}",
        Public,
        Deprecated,
        workers::get_worker
    ),
    endpoint!(
        "quarantineWorker",
        Put,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}",
        Scope("queue:quarantine-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::quarantine_worker
    ),
    endpoint!(
        "declareWorker",
        Put,
        "/provisioners/{provisioner}/worker-types/{worker_type}/{worker_group}/{worker_id}",
        AllOf(&[For {
            var: "property",
            list: "properties",
            each: &Scope("queue:declare-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>#<property>"),
        }]),
        Experimental,
        workers::declare_worker
    ),
    endpoint!(
        "workerEvents",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/events",
        Public,
        Experimental,
        workers::worker_events
    ),
    endpoint!(
        "terminateWorker",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/terminate",
        Scope("queue:terminate-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::terminate_worker
    ),
    endpoint!(
        "maintainWorker",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/maintenance",
        Scope("queue:maintain-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::maintain_worker
    ),
    endpoint!(
        "postWorkerEvent",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/events",
        Scope("queue:post-worker-event:<provisionerId>/<workerType>/<workerGroup>/<workerId>#<kind>"),
        Experimental,
        workers::post_worker_event
    ),
    endpoint!(
        "workerHeartbeat",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/heartbeat",
        AllOf(&[Scope("queue:claim-work:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Experimental,
        workers::heartbeat
    ),
    endpoint!(
        "taskQueueDimensions",
        Get,
        "/task-queues/{queue}/dimensions",
        Public,
        Experimental,
        workers::queue_dimensions
    ),
    endpoint!("taskQueueBacklog", Get, "/task-queues/{queue}/backlog", Public, Experimental, workers::queue_backlog),
    endpoint!("getTaskQueue", Get, "/task-queues/{queue}", Public, Stable, queues::get_task_queue),
];

/// The task-graph scheduler API v1 (seed 000), under `/api/scheduler/v1`.
pub const SCHEDULER_ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", Get, "/ping", Public, Stable, meta::ping),
    endpoint!("reference", Get, "/reference", Public, Experimental, meta::reference),
    endpoint!("createTaskGraph", Put, "/task-graph/{graph}", GRAPH_TASKS, Experimental, graphs::create_task_graph),
    endpoint!(
        "extendTaskGraph",
        Post,
        "/task-graph/{graph}/extend",
        EXTEND_GRAPH,
        Experimental,
        graphs::extend_task_graph
    ),
    endpoint!("listTaskGraphs", Get, "/task-graphs", Public, Experimental, graphs::list_task_graphs),
    endpoint!("status", Get, "/task-graph/{graph}/status", Public, Experimental, graphs::status),
    endpoint!("info", Get, "/task-graph/{graph}/info", Public, Experimental, graphs::info),
    endpoint!("inspect", Get, "/task-graph/{graph}/inspect", Public, Experimental, graphs::inspect),
    endpoint!("inspectTask", Get, "/task-graph/{graph}/inspect/{task_id}", Public, Experimental, graphs::inspect_task),
];

/// The Auth API v1 (clients, roles, scopes), under `/api/auth/v1`.
pub const AUTH_ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", Get, "/ping", Public, Stable, meta::ping),
    endpoint!("reference", Get, "/reference", Public, Experimental, meta::reference),
    endpoint!("listClients", Get, "/clients/", Public, Stable, auth::list_clients),
    endpoint!("client", Get, "/clients/{client_id}", Public, Stable, auth::get_client),
    endpoint!(
        "createClient",
        Put,
        "/clients/{client_id}",
        AllOf(&[Scope("auth:create-client:<clientId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::create_client
    ),
    endpoint!(
        "resetAccessToken",
        Post,
        "/clients/{client_id}/reset",
        Scope("auth:reset-access-token:<clientId>"),
        Stable,
        auth::reset_access_token
    ),
    endpoint!(
        "updateClient",
        Post,
        "/clients/{client_id}",
        AllOf(&[
            Scope("auth:update-client:<clientId>"),
            For { var: "scope", list: "scopesAdded", each: &Scope("<scope>") },
        ]),
        Stable,
        auth::update_client
    ),
    endpoint!(
        "enableClient",
        Post,
        "/clients/{client_id}/enable",
        AllOf(&[Scope("auth:enable-client:<clientId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::enable_client
    ),
    endpoint!(
        "disableClient",
        Post,
        "/clients/{client_id}/disable",
        Scope("auth:disable-client:<clientId>"),
        Stable,
        auth::disable_client
    ),
    endpoint!(
        "deleteClient",
        Delete,
        "/clients/{client_id}",
        Scope("auth:delete-client:<clientId>"),
        Stable,
        auth::delete_client
    ),
    endpoint!("listRoles", Get, "/roles/", Public, Stable, auth::list_roles),
    endpoint!("listRoleIds", Get, "/roleids/", Public, Stable, auth::list_role_ids),
    endpoint!("role", Get, "/roles/{role_id}", Public, Stable, auth::get_role),
    endpoint!(
        "createRole",
        Put,
        "/roles/{role_id}",
        AllOf(&[Scope("auth:create-role:<roleId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::create_role
    ),
    endpoint!(
        "updateRole",
        Post,
        "/roles/{role_id}",
        AllOf(&[
            Scope("auth:update-role:<roleId>"),
            For { var: "scope", list: "scopesAdded", each: &Scope("<scope>") }
        ]),
        Stable,
        auth::update_role
    ),
    endpoint!("deleteRole", Delete, "/roles/{role_id}", Scope("auth:delete-role:<roleId>"), Stable, auth::delete_role),
    endpoint!("expandScopes", Post, "/scopes/expand", Public, Stable, auth::expand_scopes),
    endpoint!("currentScopes", Get, "/scopes/current", Public, Stable, auth::current_scopes),
    endpoint!("testAuthenticate", Post, "/test-authenticate", Public, Stable, auth::test_authenticate),
    endpoint!(
        "testAuthenticateGet",
        Get,
        "/test-authenticate-get/",
        Scope("test:authenticate-get"),
        Stable,
        auth::test_authenticate_get
    ),
    endpoint!(
        "listAuditHistory",
        Get,
        "/clients/{client_id}/audit",
        Scope("auth:client-audit-history:<clientId>"),
        Stable,
        auth::list_audit_history
    ),
    endpoint!(
        "getEntityHistory",
        Get,
        "/audit/{entity_type}/{entity_id}",
        Scope("auth:audit-history:<entityType>"),
        Stable,
        auth::get_entity_history
    ),
    endpoint!("lbheartbeat", Get, "/__lbheartbeat__", Public, Stable, meta::lbheartbeat),
    endpoint!("version", Get, "/__version__", Public, Stable, meta::version),
    endpoint!("heartbeat", Get, "/__heartbeat__", Public, Stable, meta::heartbeat),
];

/// The server's own blob endpoint, where putUrls and artifact redirects point (`/blobs/v1`).
pub const BLOB_ENDPOINTS: &[Endpoint] = &[
    endpoint!("getBlob", Get, "/{task_id}/{run_id}/{*name}", GET_ARTIFACT, Experimental, blobs::get_blob),
    endpoint!("putBlob", Put, "/{task_id}/{run_id}/{*name}", CREATE_ARTIFACT, Experimental, blobs::put_blob),
];

/// Live logs (`/logs/v1`): read by anyone, appended by the run's worker.
pub const LOG_ENDPOINTS: &[Endpoint] = &[
    endpoint!("readLog", Get, "/{task_id}/{run_id}", Public, Experimental, logs::read_log),
    endpoint!("appendLog", Post, "/{task_id}/{run_id}", CREATE_ARTIFACT, Experimental, logs::append_log),
];

/// The event stream (`/api/events/v1`).
pub const EVENT_ENDPOINTS: &[Endpoint] =
    &[endpoint!("connect", Get, "/connect/", Public, Experimental, events::connect)];
