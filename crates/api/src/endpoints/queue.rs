//! The queue API v1, under `/api/queue/v1`.

use axum::routing::on;

use super::{CREATE_ARTIFACT, CREATE_TASK, GET_ARTIFACT};
use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::{AllOf, AnyOf, For, Public, Scope};
use crate::routes::{artifacts, claims, groups, provisioners, queues, task_list, tasks, workers};

/// The queue API v1.
pub const ENDPOINTS: &[Endpoint] = &[
    endpoint!("task", Get, "/task/{task_id}", Public, Stable, tasks::get_task, "A task's definition."),
    endpoint!(
        "tasks",
        Post,
        "/tasks",
        Public,
        Experimental,
        tasks::get_tasks,
        "Several tasks' definitions, paged.",
        input = "tasks-request",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "statuses",
        Post,
        "/tasks/status",
        Public,
        Experimental,
        tasks::get_statuses,
        "Several tasks' statuses, paged.",
        input = "tasks-request",
        query = ["continuationToken", "limit"]
    ),
    endpoint!("status", Get, "/task/{task_id}/status", Public, Stable, tasks::get_status, "A task's status."),
    endpoint!(
        "taskResult",
        Get,
        "/task/{task_id}/result",
        Public,
        Experimental,
        tasks::get_result,
        "Shoal's facts about a task beyond its status (Swarming's task result): its creator, slice, dedup and each run's worker dimensions, worker version and stats."
    ),
    endpoint!(
        "taskResults",
        Post,
        "/tasks/result",
        Public,
        Experimental,
        tasks::get_results,
        "`taskResult` for several tasks, paged.",
        input = "tasks-request",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "createTask",
        Put,
        "/task/{task_id}",
        CREATE_TASK,
        Stable,
        tasks::create_task,
        "Creates a task; creating the same definition again answers the same status.",
        input = "create-task-request"
    ),
    endpoint!(
        "scheduleTask",
        Post,
        "/task/{task_id}/schedule",
        task_command!("schedule-task"),
        Stable,
        tasks::schedule_task,
        "Makes a task that waits on its dependencies pending now."
    ),
    endpoint!(
        "rerunTask",
        Post,
        "/task/{task_id}/rerun",
        task_command!("rerun-task"),
        Stable,
        tasks::rerun_task,
        "Adds a run to a resolved task."
    ),
    endpoint!(
        "cancelTask",
        Post,
        "/task/{task_id}/cancel",
        task_command!("cancel-task"),
        Stable,
        tasks::cancel_task,
        "Resolves a task's run as exception/canceled."
    ),
    endpoint!(
        "changeTaskPriority",
        Post,
        "/task/{task_id}/priority",
        AnyOf(&[
            Scope("queue:change-task-priority:<taskId>"),
            Scope("queue:change-task-priority-in-queue:<taskQueueId>")
        ]),
        Experimental,
        tasks::change_task_priority,
        "Changes a task's priority.",
        input = "change-task-priority-request"
    ),
    endpoint!(
        "listDependentTasks",
        Get,
        "/task/{task_id}/dependents",
        Public,
        Stable,
        tasks::list_dependent_tasks,
        "The tasks that depend on a task, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "claimWork",
        Post,
        "/claim-work/{queue}",
        AllOf(&[Scope("queue:claim-work:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Stable,
        claims::claim_work,
        "Claims up to `tasks` pending runs of a task queue, waiting up to 20 s for one.",
        input = "claim-work-request"
    ),
    endpoint!(
        "claimTask",
        Post,
        "/task/{task_id}/runs/{run_id}/claim",
        AllOf(&[Scope("queue:claim-task:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Deprecated,
        claims::claim_task,
        "Claims one named run (kept for old workers).",
        input = "task-claim-request"
    ),
    endpoint!(
        "reclaimTask",
        Post,
        "/task/{task_id}/runs/{run_id}/reclaim",
        Scope("queue:reclaim-task:<taskId>/<runId>"),
        Stable,
        claims::reclaim_task,
        "Extends a run's claim and answers fresh credentials."
    ),
    endpoint!(
        "reportCompleted",
        Post,
        "/task/{task_id}/runs/{run_id}/completed",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_completed,
        "Resolves a running run as completed (Shoal takes an optional `{stats}` body)."
    ),
    endpoint!(
        "reportFailed",
        Post,
        "/task/{task_id}/runs/{run_id}/failed",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_failed,
        "Resolves a running run as failed (Shoal takes an optional `{stats}` body)."
    ),
    endpoint!(
        "reportException",
        Post,
        "/task/{task_id}/runs/{run_id}/exception",
        Scope("queue:resolve-task:<taskId>/<runId>"),
        Stable,
        claims::report_exception,
        "Resolves a running run as exception, with a reason.",
        input = "task-exception-request"
    ),
    endpoint!(
        "createArtifact",
        Post,
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        CREATE_ARTIFACT,
        Stable,
        artifacts::create_artifact,
        "Creates an artifact of a running run; an s3 or object artifact answers where to upload it.",
        input = "post-artifact-request"
    ),
    endpoint!(
        "finishArtifact",
        Put,
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        CREATE_ARTIFACT,
        Stable,
        artifacts::finish_artifact,
        "Marks an uploaded artifact present.",
        input = "finish-artifact-request"
    ),
    endpoint!(
        "getArtifact",
        Get,
        "/task/{task_id}/runs/{run_id}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::get_artifact,
        "Redirects to an artifact of a run."
    ),
    endpoint!(
        "getLatestArtifact",
        Get,
        "/task/{task_id}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::get_latest_artifact,
        "Redirects to an artifact of a task's latest run."
    ),
    endpoint!(
        "listArtifacts",
        Get,
        "/task/{task_id}/runs/{run_id}/artifacts",
        Public,
        Stable,
        artifacts::list_artifacts,
        "A run's artifacts, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listLatestArtifacts",
        Get,
        "/task/{task_id}/artifacts",
        Public,
        Stable,
        artifacts::list_latest_artifacts,
        "The artifacts of a task's latest run, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "artifactInfo",
        Get,
        "/task/{task_id}/runs/{run_id}/artifact-info/{*name}",
        Public,
        Stable,
        artifacts::artifact_info,
        "An artifact's description."
    ),
    endpoint!(
        "latestArtifactInfo",
        Get,
        "/task/{task_id}/artifact-info/{*name}",
        Public,
        Stable,
        artifacts::latest_artifact_info,
        "An artifact of the latest run, described."
    ),
    endpoint!(
        "artifact",
        Get,
        "/task/{task_id}/runs/{run_id}/artifact-content/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::artifact_content,
        "How to read an artifact of a run."
    ),
    endpoint!(
        "latestArtifact",
        Get,
        "/task/{task_id}/artifact-content/{*name}",
        GET_ARTIFACT,
        Stable,
        artifacts::latest_artifact_content,
        "How to read an artifact of a task's latest run."
    ),
    endpoint!(
        "listTaskGroup",
        Get,
        "/task-group/{group}/list",
        Public,
        Stable,
        groups::list_task_group,
        "A task group's tasks with their statuses, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listTasks",
        Get,
        "/tasks",
        Public,
        Experimental,
        task_list::list_tasks,
        "Tasks by tags or creator, newest first, or what is pending or running now, paged (Shoal's; Swarming's task list).",
        query = ["tag", "createdBy", "taskQueueId", "state", "since", "until", "continuationToken", "limit"]
    ),
    endpoint!(
        "countTasks",
        Get,
        "/tasks/count",
        Public,
        Experimental,
        task_list::count_tasks,
        "Counts tasks by tag or creator (Shoal's).",
        query = ["tag", "createdBy", "taskQueueId", "state", "since", "until"]
    ),
    endpoint!(
        "listFailedTasks",
        Get,
        "/tasks/failed",
        Public,
        Experimental,
        task_list::list_failed_tasks,
        "Tasks that failed lately, newest first, paged (Shoal's).",
        query = ["createdBy", "taskQueueId", "state", "since", "until", "continuationToken", "limit"]
    ),
    endpoint!(
        "listTaskGroups",
        Get,
        "/task-groups",
        Public,
        Experimental,
        task_list::list_task_groups,
        "Task groups, newest first, paged (Shoal's).",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "getTaskGroup",
        Get,
        "/task-group/{group}",
        Public,
        Stable,
        groups::get_task_group,
        "A task group's scheduler, expiry and seal."
    ),
    endpoint!(
        "sealTaskGroup",
        Post,
        "/task-group/{group}/seal",
        Scope("queue:seal-task-group:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::seal_task_group,
        "Seals a task group: no task may join it any more."
    ),
    endpoint!(
        "cancelTaskGroup",
        Post,
        "/task-group/{group}/cancel",
        Scope("queue:cancel-task-group:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::cancel_task_group,
        "Cancels every unresolved task of a task group."
    ),
    endpoint!(
        "changeTaskGroupPriority",
        Post,
        "/task-group/{group}/priority",
        Scope("queue:change-task-group-priority:<schedulerId>/<taskGroupId>"),
        Experimental,
        groups::change_task_group_priority,
        "Changes the priority of every unresolved task of a task group.",
        input = "change-task-priority-request"
    ),
    endpoint!(
        "pendingTasks",
        Get,
        "/pending/{queue}",
        Public,
        Deprecated,
        queues::pending_tasks,
        "How many runs of a task queue are pending (kept for old clients)."
    ),
    endpoint!(
        "taskQueueCounts",
        Get,
        "/task-queues/{queue}/counts",
        Public,
        Stable,
        queues::task_queue_counts,
        "How many runs of a task queue are pending and claimed."
    ),
    endpoint!(
        "taskQueueCountsBatch",
        Post,
        "/task-queues/counts",
        Public,
        Experimental,
        queues::task_queue_counts_batch,
        "`taskQueueCounts` for several task queues.",
        input = "task-queue-counts-request"
    ),
    endpoint!(
        "listPendingTasks",
        Get,
        "/task-queues/{queue}/pending",
        Public,
        Experimental,
        queues::list_pending_tasks,
        "A task queue's pending runs, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listClaimedTasks",
        Get,
        "/task-queues/{queue}/claimed",
        Public,
        Experimental,
        queues::list_claimed_tasks,
        "A task queue's claimed runs, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listTaskQueues",
        Get,
        "/task-queues",
        Public,
        Stable,
        queues::list_task_queues,
        "The task queues seen, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listProvisioners",
        Get,
        "/provisioners",
        Public,
        Deprecated,
        provisioners::list_provisioners,
        "The provisioners: the first halves of the task queues seen.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "getProvisioner",
        Get,
        "/provisioners/{provisioner}",
        Public,
        Deprecated,
        provisioners::get_provisioner,
        "One provisioner."
    ),
    endpoint!(
        "listWorkerTypes",
        Get,
        "/provisioners/{provisioner}/worker-types",
        Public,
        Deprecated,
        provisioners::list_worker_types,
        "A provisioner's worker types, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "getWorkerType",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}",
        Public,
        Deprecated,
        provisioners::get_worker_type,
        "One worker type."
    ),
    endpoint!(
        "listWorkers",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers",
        Public,
        Deprecated,
        workers::list_workers,
        "A task queue's workers, paged (Shoal also filters by `dimension` and `state`).",
        query = ["quarantined", "dimension", "state", "continuationToken", "limit"]
    ),
    endpoint!(
        "getWorker",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}",
        Public,
        Deprecated,
        workers::get_worker,
        "One worker, with its recent tasks and quarantine."
    ),
    endpoint!(
        "quarantineWorker",
        Put,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}",
        Scope("queue:quarantine-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::quarantine_worker,
        "Holds a worker from claiming until a time (a time not ahead releases it).",
        input = "quarantine-worker-request"
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
        workers::declare_worker,
        "Records a worker before it claims, with its expiry.",
        input = "update-worker-request"
    ),
    endpoint!(
        "workerEvents",
        Get,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/events",
        Public,
        Experimental,
        workers::worker_events,
        "A worker's history, newest first (Shoal's)."
    ),
    endpoint!(
        "terminateWorker",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/terminate",
        Scope("queue:terminate-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::terminate_worker,
        "Asks a worker to finish its runs and exit (Shoal's)."
    ),
    endpoint!(
        "maintainWorker",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/maintenance",
        Scope("queue:maintain-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>"),
        Experimental,
        workers::maintain_worker,
        "Puts a worker in maintenance, or ends it (Shoal's).",
        input = "maintain-worker-request"
    ),
    endpoint!(
        "postWorkerEvent",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/events",
        Scope("queue:post-worker-event:<provisionerId>/<workerType>/<workerGroup>/<workerId>#<kind>"),
        Experimental,
        workers::post_worker_event,
        "Records an event a worker posts: error, rebooting, shutdown or log (Shoal's).",
        input = "post-worker-event-request"
    ),
    endpoint!(
        "workerHeartbeat",
        Post,
        "/provisioners/{provisioner}/worker-types/{worker_type}/workers/{worker_group}/{worker_id}/heartbeat",
        AllOf(&[Scope("queue:claim-work:<taskQueueId>"), Scope("queue:worker-id:<workerGroup>/<workerId>")]),
        Experimental,
        workers::heartbeat,
        "A worker says it is alive, with its dimensions and caches; answers whether to stop (Shoal's).",
        input = "worker-heartbeat-request"
    ),
    endpoint!(
        "taskQueueDimensions",
        Get,
        "/task-queues/{queue}/dimensions",
        Public,
        Experimental,
        workers::queue_dimensions,
        "The dimensions of a task queue's live workers, counted (Shoal's)."
    ),
    endpoint!(
        "taskQueueWorkers",
        Get,
        "/task-queues/{queue}/workers",
        Public,
        Experimental,
        workers::list_fleet_workers,
        "A task queue's workers with Shoal's fields (state, dimensions), paged; filters as listWorkers.",
        query = ["quarantined", "dimension", "state", "continuationToken", "limit"]
    ),
    endpoint!(
        "taskQueueWorker",
        Get,
        "/task-queues/{queue}/workers/{worker_group}/{worker_id}",
        Public,
        Experimental,
        workers::get_fleet_worker,
        "One worker with Shoal's fields: state, dimensions, version, running tasks, caches, maintenance."
    ),
    endpoint!(
        "listWorkerRuns",
        Get,
        "/task-queues/{queue}/workers/{worker_group}/{worker_id}/runs",
        Public,
        Experimental,
        workers::list_worker_runs,
        "The runs a worker claimed within the queue retention, newest first, paged (Shoal's).",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "taskQueueBacklog",
        Get,
        "/task-queues/{queue}/backlog",
        Public,
        Experimental,
        workers::queue_backlog,
        "A task queue's pending runs by the dimensions they wait on, and who could take them (Shoal's)."
    ),
    endpoint!("getTaskQueue", Get, "/task-queues/{queue}", Public, Stable, queues::get_task_queue, "One task queue."),
];
