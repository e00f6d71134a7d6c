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

/// One endpoint of an API (the queue's, the scheduler's).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Endpoint {
    /// Taskcluster's name, e.g. `claimWork`.
    pub name: &'static str,
    /// HTTP method.
    pub method: &'static str,
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
    ($name:literal, $method:literal, $route:literal, $scopes:expr, $stability:ident, $handler:path) => {
        Endpoint {
            name: $name,
            method: $method,
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

/// Writing a run's artifacts and log.
const CREATE_ARTIFACT: Scopes = Scope("queue:create-artifact:<taskId>/<runId>");

/// Reading an artifact outside `public/` (each name a link leads through).
const GET_ARTIFACT: Scopes = For { var: "name", list: "privateNames", each: &Scope("queue:get-artifact:<name>") };

/// The queue API v1.
pub const ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", "GET", "/ping", Public, Stable, meta::ping),
    endpoint!("lbheartbeat", "GET", "/__lbheartbeat__", Public, Stable, meta::lbheartbeat),
    endpoint!("version", "GET", "/__version__", Public, Stable, meta::version),
    endpoint!("heartbeat", "GET", "/__heartbeat__", Public, Stable, meta::heartbeat),
    endpoint!("reference", "GET", "/reference", Public, Experimental, meta::reference),
    endpoint!("task", "GET", "/task/{task_id}", Public, Stable, tasks::get_task),
    endpoint!("tasks", "POST", "/tasks", Public, Experimental, tasks::get_tasks),
    endpoint!("statuses", "POST", "/tasks/status", Public, Experimental, tasks::get_statuses),
    endpoint!("status", "GET", "/task/{task_id}/status", Public, Stable, tasks::get_status),
    endpoint!("createTask", "PUT", "/task/{task_id}", CREATE_TASK, Stable, tasks::create_task),
    endpoint!(
        "scheduleTask",
        "POST",
        "/task/{task_id}/schedule",
        task_command!("schedule-task"),
        Stable,
        tasks::schedule_task
    ),
    endpoint!("rerunTask", "POST", "/task/{task_id}/rerun", task_command!("rerun-task"), Stable, tasks::rerun_task),
    endpoint!("cancelTask", "POST", "/task/{task_id}/cancel", task_command!("cancel-task"), Stable, tasks::cancel_task),
    endpoint!(
        "changeTaskPriority",
        "POST",
        "/task/{task_id}/priority",
        AnyOf(&[
            Scope("queue:change-task-priority:<taskId>"),
            Scope("queue:change-task-priority-in-queue:<taskQueueId>")
        ]),
        Experimental,
        tasks::change_task_priority
    ),
    endpoint!("listDependentTasks", "GET", "/task/{task_id}/dependents", Public, Stable, tasks::list_dependent_tasks),
    endpoint!(
        "claimWork",
        "POST",
        "/claim-work/{queue}",
        AllOf(&[Scope("queue:claim-work:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Stable,
        claims::claim_work
    ),
    endpoint!(
        "claimTask",
        "POST",
        "/task/{task_id}/runs/{run_id}/claim",
        AllOf(&[Scope("queue:claim-task:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Deprecated,
        claims::claim_task
    ),
    endpoint!(
        "reclaimTask",
        "POST",
        "/task/{task_id}/runs/{run_id}/reclaim",
        Scope("queue:reclaim-task:<taskId>/<runId>"),
        Stable,
        claims::reclaim_task
    ),
    endpoint!(
        "reportCompleted",
        "POST",
        "/task/{task_id}/runs/{run_id}/completed",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_completed
    ),
    endpoint!(
        "reportFailed",
        "POST",
        "/task/{task_id}/runs/{run_id}/failed",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_failed
    ),
    endpoint!(
        "reportException",
        "POST",
        "/task/{task_id}/runs/{run_id}/exception",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_exception
    ),
    endpoint!(
        "createArtifact",
        "POST",
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        CREATE_ARTIFACT,
        Stable,
        artifacts::create_artifact
    ),
    endpoint!(
        "finishArtifact",
        "PUT",
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        CREATE_ARTIFACT,
        Stable,
        artifacts::finish_artifact
    ),
    endpoint!(
        "getArtifact",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::get_artifact
    ),
    endpoint!(
        "getLatestArtifact",
        "GET",
        "/task/{task_id}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::get_latest_artifact
    ),
    endpoint!(
        "listArtifacts",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifacts",
        Public,
        Stable,
        artifacts::list_artifacts
    ),
    endpoint!(
        "listLatestArtifacts",
        "GET",
        "/task/{task_id}/artifacts",
        Public,
        Stable,
        artifacts::list_latest_artifacts
    ),
    endpoint!(
        "artifactInfo",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifact-info/{*name}",
        Public,
        Stable,
        artifacts::artifact_info
    ),
    endpoint!(
        "latestArtifactInfo",
        "GET",
        "/task/{task_id}/artifact-info/{*name}",
        Public,
        Stable,
        artifacts::latest_artifact_info
    ),
    endpoint!(
        "artifact",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifact-content/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::artifact_content
    ),
    endpoint!(
        "latestArtifact",
        "GET",
        "/task/{task_id}/artifact-content/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::latest_artifact_content
    ),
    endpoint!("listTaskGroup", "GET", "/task-group/{group}/list", Public, Stable, groups::list_task_group),
    endpoint!("listTasks", "GET", "/tasks", Public, Experimental, task_list::list_tasks),
    endpoint!("countTasks", "GET", "/tasks/count", Public, Experimental, task_list::count_tasks),
    endpoint!("listFailedTasks", "GET", "/tasks/failed", Public, Experimental, task_list::list_failed_tasks),
    endpoint!("listTaskGroups", "GET", "/task-groups", Public, Experimental, task_list::list_task_groups),
    endpoint!("getTaskGroup", "GET", "/task-group/{group}", Public, Stable, groups::get_task_group),
    endpoint!(
        "sealTaskGroup",
        "POST",
        "/task-group/{group}/seal",
        Scope("queue:seal-task-group:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::seal_task_group
    ),
    endpoint!(
        "cancelTaskGroup",
        "POST",
        "/task-group/{group}/cancel",
        Scope("queue:cancel-task-group:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::cancel_task_group
    ),
    endpoint!(
        "changeTaskGroupPriority",
        "POST",
        "/task-group/{group}/priority",
        Scope("queue:change-task-group-priority:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::change_task_group_priority
    ),
    endpoint!("pendingTasks", "GET", "/pending/{queue}", Public, Deprecated, queues::pending_tasks),
    endpoint!("taskQueueCounts", "GET", "/task-queues/{queue}/counts", Public, Stable, queues::task_queue_counts),
    endpoint!(
        "taskQueueCountsBatch",
        "POST",
        "/task-queues/counts",
        Public,
        Experimental,
        queues::task_queue_counts_batch
    ),
    endpoint!(
        "listPendingTasks",
        "GET",
        "/task-queues/{queue}/pending",
        Public,
        Experimental,
        queues::list_pending_tasks
    ),
    endpoint!(
        "listClaimedTasks",
        "GET",
        "/task-queues/{queue}/claimed",
        Public,
        Experimental,
        queues::list_claimed_tasks
    ),
    endpoint!("listTaskQueues", "GET", "/task-queues", Public, Stable, queues::list_task_queues),
    endpoint!("listProvisioners", "GET", "/provisioners", Public, Deprecated, provisioners::list_provisioners),
    endpoint!(
        "getProvisioner",
        "GET",
        "/provisioners/{provisioner}",
        Public,
        Deprecated,
        provisioners::get_provisioner
    ),
    endpoint!(
        "listWorkerTypes",
        "GET",
        "/provisioners/{provisioner}/worker-types",
        Public,
        Deprecated,
        provisioners::list_worker_types
    ),
    endpoint!(
        "getWorkerType",
        "GET",
        "/provisioners/{provisioner}/worker-types/{worker_type}",
        Public,
        Deprecated,
        provisioners::get_worker_type
    ),
    endpoint!(
        "listWorkers",
        "GET",
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers",
        Public,
        Deprecated,
        workers::list_workers
    ),
    endpoint!(
        "getWorker",
        "GET",
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}",
        Public,
        Deprecated,
        workers::get_worker
    ),
    endpoint!(
        "quarantineWorker",
        "PUT",
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}",
        Scope("queue:quarantine-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::quarantine_worker
    ),
    endpoint!(
        "declareWorker",
        "PUT",
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
        "GET",
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/events",
        Public,
        Experimental,
        workers::worker_events
    ),
    endpoint!(
        "terminateWorker",
        "POST",
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/terminate",
        Scope("queue:terminate-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::terminate_worker
    ),
    endpoint!(
        "workerHeartbeat",
        "POST",
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/heartbeat",
        AllOf(&[Scope("queue:claim-work:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Experimental,
        workers::heartbeat
    ),
    endpoint!(
        "taskQueueDimensions",
        "GET",
        "/task-queues/{queue}/dimensions",
        Public,
        Experimental,
        workers::queue_dimensions
    ),
    endpoint!("getTaskQueue", "GET", "/task-queues/{queue}", Public, Stable, queues::get_task_queue),
];

/// The task-graph scheduler API v1 (seed 000), under `/api/scheduler/v1`.
pub const SCHEDULER_ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", "GET", "/ping", Public, Stable, meta::ping),
    endpoint!("reference", "GET", "/reference", Public, Experimental, meta::reference),
    endpoint!("createTaskGraph", "PUT", "/task-graph/{graph}", GRAPH_TASKS, Experimental, graphs::create_task_graph),
    endpoint!(
        "extendTaskGraph",
        "POST",
        "/task-graph/{graph}/extend",
        GRAPH_TASKS,
        Experimental,
        graphs::extend_task_graph
    ),
    endpoint!("listTaskGraphs", "GET", "/task-graphs", Public, Experimental, graphs::list_task_graphs),
    endpoint!("status", "GET", "/task-graph/{graph}/status", Public, Experimental, graphs::status),
    endpoint!("info", "GET", "/task-graph/{graph}/info", Public, Experimental, graphs::info),
    endpoint!("inspect", "GET", "/task-graph/{graph}/inspect", Public, Experimental, graphs::inspect),
    endpoint!(
        "inspectTask",
        "GET",
        "/task-graph/{graph}/inspect/{task_id}",
        Public,
        Experimental,
        graphs::inspect_task
    ),
];

/// The Auth API v1 (clients, roles, scopes), under `/api/auth/v1`.
pub const AUTH_ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", "GET", "/ping", Public, Stable, meta::ping),
    endpoint!("reference", "GET", "/reference", Public, Experimental, meta::reference),
    endpoint!("listClients", "GET", "/clients/", Public, Stable, auth::list_clients),
    endpoint!("getClient", "GET", "/clients/{client_id}", Public, Stable, auth::get_client),
    endpoint!(
        "createClient",
        "PUT",
        "/clients/{client_id}",
        AllOf(&[Scope("auth:create-client:<clientId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::create_client
    ),
    endpoint!(
        "resetAccessToken",
        "POST",
        "/clients/{client_id}/reset",
        Scope("auth:reset-access-token:<clientId>"),
        Stable,
        auth::reset_access_token
    ),
    endpoint!(
        "updateClient",
        "POST",
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
        "POST",
        "/clients/{client_id}/enable",
        AllOf(&[Scope("auth:enable-client:<clientId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::enable_client
    ),
    endpoint!(
        "disableClient",
        "POST",
        "/clients/{client_id}/disable",
        Scope("auth:disable-client:<clientId>"),
        Stable,
        auth::disable_client
    ),
    endpoint!(
        "deleteClient",
        "DELETE",
        "/clients/{client_id}",
        Scope("auth:delete-client:<clientId>"),
        Stable,
        auth::delete_client
    ),
    endpoint!("listRoles", "GET", "/roles/", Public, Stable, auth::list_roles),
    endpoint!("listRoleIds", "GET", "/roleids/", Public, Stable, auth::list_role_ids),
    endpoint!("getRole", "GET", "/roles/{role_id}", Public, Stable, auth::get_role),
    endpoint!(
        "createRole",
        "PUT",
        "/roles/{role_id}",
        AllOf(&[Scope("auth:create-role:<roleId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::create_role
    ),
    endpoint!(
        "updateRole",
        "POST",
        "/roles/{role_id}",
        AllOf(&[
            Scope("auth:update-role:<roleId>"),
            For { var: "scope", list: "scopesAdded", each: &Scope("<scope>") }
        ]),
        Stable,
        auth::update_role
    ),
    endpoint!(
        "deleteRole",
        "DELETE",
        "/roles/{role_id}",
        Scope("auth:delete-role:<roleId>"),
        Stable,
        auth::delete_role
    ),
    endpoint!("expandScopes", "POST", "/scopes/expand", Public, Stable, auth::expand_scopes),
    endpoint!("currentScopes", "GET", "/scopes/current", Public, Stable, auth::current_scopes),
    endpoint!("testAuthenticate", "POST", "/test-authenticate", Public, Stable, auth::test_authenticate),
];

/// The server's own blob endpoint, where putUrls and artifact redirects point (`/blobs/v1`).
pub const BLOB_ENDPOINTS: &[Endpoint] = &[
    endpoint!("getBlob", "GET", "/{task_id}/{run_id}/{*name}", GET_ARTIFACT, Experimental, blobs::get_blob),
    endpoint!("putBlob", "PUT", "/{task_id}/{run_id}/{*name}", CREATE_ARTIFACT, Experimental, blobs::put_blob),
];

/// Live logs (`/logs/v1`): read by anyone, appended by the run's worker.
pub const LOG_ENDPOINTS: &[Endpoint] = &[
    endpoint!("readLog", "GET", "/{task_id}/{run_id}", Public, Experimental, logs::read_log),
    endpoint!("appendLog", "POST", "/{task_id}/{run_id}", CREATE_ARTIFACT, Experimental, logs::append_log),
];

/// The event stream (`/api/events/v1`).
pub const EVENT_ENDPOINTS: &[Endpoint] =
    &[endpoint!("connect", "GET", "/connect/", Public, Experimental, events::connect)];
