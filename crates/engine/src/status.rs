//! Runs and task status, in Taskcluster's wire shape.

use serde::{Deserialize, Serialize};

use crate::dimensions::Dimensions;
use crate::priority::Priority;
use crate::slice::SliceAt;
use crate::{TaskId, Timestamp};

/// State of a task: that of its last run, or `unscheduled` before the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Waiting for dependencies (or scheduleTask).
    Unscheduled,
    /// Waiting for a worker.
    Pending,
    /// Claimed by a worker.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished unsuccessfully.
    Failed,
    /// Ended by an exception.
    Exception,
}

impl TaskState {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Unscheduled => "unscheduled",
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Exception => "exception",
        }
    }

    /// Parses the wire name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<TaskState> {
        [
            TaskState::Unscheduled,
            TaskState::Pending,
            TaskState::Running,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Exception,
        ]
        .into_iter()
        .find(|state| state.as_str() == name)
    }

    /// Whether no further run will start without a rerun.
    #[must_use]
    pub fn is_resolved(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Exception)
    }
}

/// Why a run was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCreated {
    /// First run, scheduled normally.
    Scheduled,
    /// Automatic retry after an infrastructure failure.
    Retry,
    /// Automatic retry the task asked for (intermittent-task).
    TaskRetry,
    /// Explicit rerunTask.
    Rerun,
    /// Created only to hold an exception (canceled or deadline before any run).
    Exception,
}

/// Why a run was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonResolved {
    /// reportCompleted.
    Completed,
    /// reportFailed.
    Failed,
    /// The deadline passed first.
    DeadlineExceeded,
    /// cancelTask or cancelTaskGroup.
    Canceled,
    /// The worker stopped reclaiming.
    ClaimExpired,
    /// The worker shut down (retried).
    WorkerShutdown,
    /// The worker could not understand the payload.
    MalformedPayload,
    /// The worker lacked a resource.
    ResourceUnavailable,
    /// The worker hit an internal error.
    InternalError,
    /// The task asked to be retried.
    IntermittentTask,
    /// Kept for compatibility; never produced.
    Superseded,
}

/// The reasons a worker may give to reportException.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerException {
    /// The worker shut down (retried).
    WorkerShutdown,
    /// The worker could not understand the payload.
    MalformedPayload,
    /// The worker lacked a resource.
    ResourceUnavailable,
    /// The worker hit an internal error.
    InternalError,
    /// Kept for compatibility.
    Superseded,
    /// The task asked to be retried.
    IntermittentTask,
}

impl WorkerException {
    /// Every reason, in Taskcluster's order.
    pub const ALL: [WorkerException; 6] = [
        WorkerException::WorkerShutdown,
        WorkerException::MalformedPayload,
        WorkerException::ResourceUnavailable,
        WorkerException::InternalError,
        WorkerException::Superseded,
        WorkerException::IntermittentTask,
    ];

    /// The reason's wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerException::WorkerShutdown => "worker-shutdown",
            WorkerException::MalformedPayload => "malformed-payload",
            WorkerException::ResourceUnavailable => "resource-unavailable",
            WorkerException::InternalError => "internal-error",
            WorkerException::Superseded => "superseded",
            WorkerException::IntermittentTask => "intermittent-task",
        }
    }

    /// The reason named `name`, if a worker may give it.
    #[must_use]
    pub fn from_name(name: &str) -> Option<WorkerException> {
        WorkerException::ALL.into_iter().find(|reason| reason.as_str() == name)
    }
}

impl From<WorkerException> for ReasonResolved {
    fn from(reason: WorkerException) -> ReasonResolved {
        match reason {
            WorkerException::WorkerShutdown => ReasonResolved::WorkerShutdown,
            WorkerException::MalformedPayload => ReasonResolved::MalformedPayload,
            WorkerException::ResourceUnavailable => ReasonResolved::ResourceUnavailable,
            WorkerException::InternalError => ReasonResolved::InternalError,
            WorkerException::Superseded => ReasonResolved::Superseded,
            WorkerException::IntermittentTask => ReasonResolved::IntermittentTask,
        }
    }
}

/// State of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Waiting for a worker.
    Pending,
    /// Claimed.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished unsuccessfully.
    Failed,
    /// Ended by an exception.
    Exception,
}

impl RunState {
    /// Whether the run is over.
    #[must_use]
    pub fn is_resolved(self) -> bool {
        matches!(self, RunState::Completed | RunState::Failed | RunState::Exception)
    }

    /// The task state this run gives its task when it is the last one.
    #[must_use]
    pub fn task_state(self) -> TaskState {
        match self {
            RunState::Pending => TaskState::Pending,
            RunState::Running => TaskState::Running,
            RunState::Completed => TaskState::Completed,
            RunState::Failed => TaskState::Failed,
            RunState::Exception => TaskState::Exception,
        }
    }
}

/// One attempt at a task. Only the engine's transitions create or change runs, which keeps
/// the fields consistent with `state` (a resolved run has a reason, a running one a worker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Index in the task's runs.
    pub run_id: u32,
    /// Current state.
    pub state: RunState,
    /// Why it exists.
    pub reason_created: ReasonCreated,
    /// Why it ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_resolved: Option<ReasonResolved>,
    /// Worker group of the claiming worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_group: Option<String>,
    /// Id of the claiming worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// The dimensions the claiming worker had when it claimed (Swarming's `bot_dimensions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_dimensions: Option<Dimensions>,
    /// The claiming worker's software version when it claimed (Swarming's `bot_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_version: Option<String>,
    /// Until when the claim holds without a reclaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_until: Option<Timestamp>,
    /// When it became pending.
    pub scheduled: Timestamp,
    /// When it was claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Timestamp>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Timestamp>,
    /// The slice it waited on (or ran on), for a task with slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<SliceAt>,
    /// What its worker measured (Swarming's performance stats), if it reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<RunStats>,
    /// The task whose completion stands for this run, which no worker ran (Swarming's dedup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduped_from: Option<TaskId>,
}

/// What a worker measured of a run, as it reported them with the run's resolution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunStats {
    /// Milliseconds from the claim to the first command's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_ms: Option<u64>,
    /// Milliseconds spent placing mounts and named caches (part of `setup_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_ms: Option<u64>,
    /// Bytes downloaded for mounts (0 when all came from the worker's cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_fetched: Option<u64>,
    /// Milliseconds the commands ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ms: Option<u64>,
    /// Milliseconds the artifacts took to upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_ms: Option<u64>,
    /// Bytes of artifacts uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_uploaded: Option<u64>,
    /// The last command's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The most memory the commands' processes held at once, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// Which time limit stopped the commands, when one did (Swarming's TIMED_OUT; the run's
    /// `reasonResolved` stays Taskcluster's `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<TimeLimit>,
    /// Which of the worker's limits on a slot ended the commands, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_exceeded: Option<SlotLimit>,
}

/// A limit a worker puts on each slot's commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SlotLimit {
    /// Processes and threads at once.
    Processes,
    /// Resident memory of the commands' processes.
    Memory,
    /// The private `/tmp` is full.
    Tmp,
    /// Bytes in the task directory.
    Disk,
}

impl SlotLimit {
    /// The name a worker's flag and the run's stats give it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SlotLimit::Processes => "processes",
            SlotLimit::Memory => "memory",
            SlotLimit::Tmp => "tmp",
            SlotLimit::Disk => "disk",
        }
    }
}

/// A time limit of a task's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeLimit {
    /// `maxRunTime`: the commands ran too long.
    #[serde(rename = "maxRunTime")]
    MaxRunTime,
    /// `ioTimeout`: the commands were silent too long.
    #[serde(rename = "ioTimeout")]
    IoTimeout,
}

/// The status structure every status-returning call sends. It serializes as Taskcluster's
/// `task-status.json` allows, and no more: Shoal's own facts (the creator, slices, dedup, what
/// a run's worker had and measured) are kept here but served by [`crate::result::TaskResult`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The task.
    pub task_id: TaskId,
    /// Legacy half of the queue id.
    pub provisioner_id: String,
    /// Legacy half of the queue id.
    pub worker_type: String,
    /// Queue.
    pub task_queue_id: String,
    /// Scheduler.
    pub scheduler_id: String,
    /// Project.
    pub project_id: String,
    /// Group.
    pub task_group_id: TaskId,
    /// Current priority.
    pub priority: Priority,
    /// Deadline.
    pub deadline: Timestamp,
    /// Expiry.
    pub expires: Timestamp,
    /// Automatic retries left.
    pub retries_left: u32,
    /// State.
    pub state: TaskState,
    /// Runs, oldest first (each in Taskcluster's shape on the wire).
    #[serde(serialize_with = "taskcluster_runs")]
    pub runs: Vec<Run>,
    /// The authenticated client that created the task (absent for tasks made before Shoal
    /// recorded it); Swarming's `authenticated`. Not in Taskcluster's status.
    #[serde(skip)]
    pub created_by: Option<String>,
}

/// For a task with slices, the index of the slice its last run (of `runs`) waits or ran on.
#[must_use]
pub fn current_slice(runs: &[Run]) -> Option<u32> {
    runs.last().and_then(|run| run.slice).map(|at| at.index)
}

impl TaskStatus {
    /// For a task with slices, the index of the slice its last run waits or ran on.
    #[must_use]
    pub fn current_slice(&self) -> Option<u32> {
        current_slice(&self.runs)
    }

    /// For a deduped task, the task whose completion stands for it.
    #[must_use]
    pub fn deduped_from(&self) -> Option<TaskId> {
        self.runs.last().and_then(|run| run.deduped_from)
    }
}

/// A run's fields that Taskcluster's `task-status.json` allows.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskclusterRun<'a> {
    run_id: u32,
    state: RunState,
    reason_created: ReasonCreated,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason_resolved: Option<ReasonResolved>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    taken_until: Option<Timestamp>,
    scheduled: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    started: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolved: Option<Timestamp>,
}

fn taskcluster_runs<S: serde::Serializer>(runs: &[Run], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(runs.iter().map(|run| TaskclusterRun {
        run_id: run.run_id,
        state: run.state,
        reason_created: run.reason_created,
        reason_resolved: run.reason_resolved,
        worker_group: run.worker_group.as_deref(),
        worker_id: run.worker_id.as_deref(),
        taken_until: run.taken_until,
        scheduled: run.scheduled,
        started: run.started,
        resolved: run.resolved,
    }))
}
