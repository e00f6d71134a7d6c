//! Every endpoint, declared once: name, method, route, scopes, stability. The router, the
//! API reference (`GET /api/queue/v1/reference`) and, later, authorization derive from it.

use axum::routing::{MethodFilter, MethodRouter, on};
use serde::Serialize;

use crate::AppState;
use crate::routes::{artifacts, claims, graphs, groups, meta, queues, tasks};

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
    /// Scope expression the caller will need (not enforced yet).
    pub scopes: &'static str,
    /// Stability.
    pub stability: Stability,
    /// Builds the method router for `method`.
    #[serde(skip)]
    pub handler: fn(MethodFilter) -> MethodRouter<AppState>,
}

macro_rules! endpoint {
    ($name:literal, $method:literal, $route:literal, $scopes:literal, $stability:ident, $handler:path) => {
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

/// The queue API v1.
pub const ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", "GET", "/ping", "", Stable, meta::ping),
    endpoint!("lbheartbeat", "GET", "/__lbheartbeat__", "", Stable, meta::lbheartbeat),
    endpoint!("version", "GET", "/__version__", "", Stable, meta::version),
    endpoint!("heartbeat", "GET", "/__heartbeat__", "", Stable, meta::heartbeat),
    endpoint!("reference", "GET", "/reference", "", Experimental, meta::reference),
    endpoint!("task", "GET", "/task/{task_id}", "queue:get-task:<taskId>", Stable, tasks::get_task),
    endpoint!("tasks", "POST", "/tasks", "queue:get-task:<taskId> for each", Experimental, tasks::get_tasks),
    endpoint!("statuses", "POST", "/tasks/status", "queue:status:<taskId> for each", Experimental, tasks::get_statuses),
    endpoint!("status", "GET", "/task/{task_id}/status", "queue:status:<taskId>", Stable, tasks::get_status),
    endpoint!(
        "createTask",
        "PUT",
        "/task/{task_id}",
        "queue:create-task:<priority>:<taskQueueId> ...",
        Stable,
        tasks::create_task
    ),
    endpoint!(
        "scheduleTask",
        "POST",
        "/task/{task_id}/schedule",
        "queue:schedule-task:<schedulerId>/<taskGroupId>/<taskId>",
        Stable,
        tasks::schedule_task
    ),
    endpoint!(
        "rerunTask",
        "POST",
        "/task/{task_id}/rerun",
        "queue:rerun-task:<schedulerId>/<taskGroupId>/<taskId>",
        Stable,
        tasks::rerun_task
    ),
    endpoint!(
        "cancelTask",
        "POST",
        "/task/{task_id}/cancel",
        "queue:cancel-task:<schedulerId>/<taskGroupId>/<taskId>",
        Stable,
        tasks::cancel_task
    ),
    endpoint!(
        "changeTaskPriority",
        "POST",
        "/task/{task_id}/priority",
        "queue:change-task-priority:<taskId>",
        Experimental,
        tasks::change_task_priority
    ),
    endpoint!(
        "listDependentTasks",
        "GET",
        "/task/{task_id}/dependents",
        "queue:list-dependent-tasks:<taskId>",
        Stable,
        tasks::list_dependent_tasks
    ),
    endpoint!(
        "claimWork",
        "POST",
        "/claim-work/{queue}",
        "queue:claim-work:<taskQueueId> + queue:worker-id:<workerGroup>/<workerId>",
        Stable,
        claims::claim_work
    ),
    endpoint!(
        "claimTask",
        "POST",
        "/task/{task_id}/runs/{run_id}/claim",
        "queue:claim-task:<taskQueueId> + queue:worker-id:<workerGroup>/<workerId>",
        Deprecated,
        claims::claim_task
    ),
    endpoint!(
        "reclaimTask",
        "POST",
        "/task/{task_id}/runs/{run_id}/reclaim",
        "queue:reclaim-task:<taskId>/<runId>",
        Stable,
        claims::reclaim_task
    ),
    endpoint!(
        "reportCompleted",
        "POST",
        "/task/{task_id}/runs/{run_id}/completed",
        "queue:resolve-task:<taskId>/<runId>",
        Stable,
        claims::report_completed
    ),
    endpoint!(
        "reportFailed",
        "POST",
        "/task/{task_id}/runs/{run_id}/failed",
        "queue:resolve-task:<taskId>/<runId>",
        Stable,
        claims::report_failed
    ),
    endpoint!(
        "reportException",
        "POST",
        "/task/{task_id}/runs/{run_id}/exception",
        "queue:resolve-task:<taskId>/<runId>",
        Stable,
        claims::report_exception
    ),
    endpoint!(
        "createArtifact",
        "POST",
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        "queue:create-artifact:<taskId>/<runId>",
        Stable,
        artifacts::create_artifact
    ),
    endpoint!(
        "finishArtifact",
        "PUT",
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        "queue:create-artifact:<taskId>/<runId>",
        Stable,
        artifacts::finish_artifact
    ),
    endpoint!(
        "getArtifact",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        "queue:get-artifact:<name>",
        Stable,
        artifacts::get_artifact
    ),
    endpoint!(
        "getLatestArtifact",
        "GET",
        "/task/{task_id}/artifacts/{*name}",
        "queue:get-artifact:<name>",
        Stable,
        artifacts::get_latest_artifact
    ),
    endpoint!(
        "listArtifacts",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifacts",
        "queue:list-artifacts:<taskId>:<runId>",
        Stable,
        artifacts::list_artifacts
    ),
    endpoint!(
        "listLatestArtifacts",
        "GET",
        "/task/{task_id}/artifacts",
        "queue:list-artifacts:<taskId>",
        Stable,
        artifacts::list_latest_artifacts
    ),
    endpoint!(
        "artifactInfo",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifact-info/{*name}",
        "queue:list-artifacts:<taskId>:<runId>",
        Stable,
        artifacts::artifact_info
    ),
    endpoint!(
        "latestArtifactInfo",
        "GET",
        "/task/{task_id}/artifact-info/{*name}",
        "queue:list-artifacts:<taskId>",
        Stable,
        artifacts::latest_artifact_info
    ),
    endpoint!(
        "artifact",
        "GET",
        "/task/{task_id}/runs/{run_id}/artifact-content/{*name}",
        "queue:get-artifact:<name>",
        Stable,
        artifacts::artifact_content
    ),
    endpoint!(
        "latestArtifact",
        "GET",
        "/task/{task_id}/artifact-content/{*name}",
        "queue:get-artifact:<name>",
        Stable,
        artifacts::latest_artifact_content
    ),
    endpoint!(
        "listTaskGroup",
        "GET",
        "/task-group/{group}/list",
        "queue:list-task-group:<taskGroupId>",
        Stable,
        groups::list_task_group
    ),
    endpoint!(
        "getTaskGroup",
        "GET",
        "/task-group/{group}",
        "queue:list-task-group:<taskGroupId>",
        Stable,
        groups::get_task_group
    ),
    endpoint!(
        "sealTaskGroup",
        "POST",
        "/task-group/{group}/seal",
        "queue:seal-task-group:<schedulerId>/<taskGroupId>",
        Experimental,
        groups::seal_task_group
    ),
    endpoint!(
        "cancelTaskGroup",
        "POST",
        "/task-group/{group}/cancel",
        "queue:cancel-task-group:<schedulerId>/<taskGroupId>",
        Experimental,
        groups::cancel_task_group
    ),
    endpoint!(
        "changeTaskGroupPriority",
        "POST",
        "/task-group/{group}/priority",
        "queue:change-task-group-priority:<schedulerId>/<taskGroupId>",
        Experimental,
        groups::change_task_group_priority
    ),
    endpoint!(
        "pendingTasks",
        "GET",
        "/pending/{queue}",
        "queue:pending-count:<taskQueueId>",
        Deprecated,
        queues::pending_tasks
    ),
    endpoint!(
        "taskQueueCounts",
        "GET",
        "/task-queues/{queue}/counts",
        "queue:pending-count:<taskQueueId> + queue:claimed-count:<taskQueueId>",
        Stable,
        queues::task_queue_counts
    ),
    endpoint!(
        "listPendingTasks",
        "GET",
        "/task-queues/{queue}/pending",
        "queue:pending-list:<taskQueueId>",
        Experimental,
        queues::list_pending_tasks
    ),
    endpoint!(
        "listClaimedTasks",
        "GET",
        "/task-queues/{queue}/claimed",
        "queue:claimed-list:<taskQueueId>",
        Experimental,
        queues::list_claimed_tasks
    ),
    endpoint!("listTaskQueues", "GET", "/task-queues", "queue:list-task-queues", Stable, queues::list_task_queues),
    endpoint!(
        "getTaskQueue",
        "GET",
        "/task-queues/{queue}",
        "queue:get-task-queue:<taskQueueId>",
        Stable,
        queues::get_task_queue
    ),
];

/// The task-graph scheduler API v1 (seed 000), under `/api/scheduler/v1`.
pub const SCHEDULER_ENDPOINTS: &[Endpoint] = &[
    endpoint!("ping", "GET", "/ping", "", Stable, meta::ping),
    endpoint!("reference", "GET", "/reference", "", Experimental, meta::reference),
    endpoint!(
        "createTaskGraph",
        "PUT",
        "/task-graph/{graph}",
        "scheduler:create-task-graph",
        Experimental,
        graphs::create_task_graph
    ),
    endpoint!(
        "extendTaskGraph",
        "POST",
        "/task-graph/{graph}/extend",
        "scheduler:extend-task-graph:<taskGraphId>",
        Experimental,
        graphs::extend_task_graph
    ),
    endpoint!("status", "GET", "/task-graph/{graph}/status", "", Experimental, graphs::status),
    endpoint!("info", "GET", "/task-graph/{graph}/info", "", Experimental, graphs::info),
    endpoint!("inspect", "GET", "/task-graph/{graph}/inspect", "", Experimental, graphs::inspect),
    endpoint!("inspectTask", "GET", "/task-graph/{graph}/inspect/{task_id}", "", Experimental, graphs::inspect_task),
];
