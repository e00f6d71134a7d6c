//! Why the rules refuse a command: closed reasons, each with the message a client reads.

use crate::{TaskId, Timestamp};

/// A refused command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A field breaks a rule of the schema (400 InputValidationError).
    #[error("{field}: {rule}")]
    Invalid {
        /// The JSON path of the offending field, e.g. `metadata.name`.
        field: String,
        /// The rule it breaks, e.g. `must be at most 255 characters`.
        rule: String,
    },
    /// The input is well-formed but refers to things that do not fit (400 InputError).
    #[error("{0}")]
    Input(String),
    /// The command conflicts with the current state (409 RequestConflict).
    #[error(transparent)]
    Conflict(#[from] Conflict),
    /// The command names something that does not exist (404 ResourceNotFound).
    #[error(transparent)]
    NotFound(#[from] Missing),
    /// Bytes beyond a size limit (413 InputTooLarge).
    #[error("{what} may hold at most {limit} bytes")]
    TooLarge {
        /// What is full, e.g. `artifact public/build.tar`.
        what: String,
        /// Its limit.
        limit: u64,
    },
}

impl Rejection {
    /// A field that breaks a rule.
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Rejection {
        Rejection::Invalid { field: field.into(), rule: rule.into() }
    }
}

/// Why a command conflicts with the current state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// createTask again under an existing id with another definition.
    #[error("task {0} already exists with a different definition")]
    TaskRedefined(TaskId),
    /// A task joining a group of another scheduler.
    #[error("task group {group} belongs to schedulerId {owner}, not {scheduler_id}")]
    GroupOfAnotherScheduler {
        /// The group.
        group: TaskId,
        /// Its scheduler.
        owner: String,
        /// The joining task's scheduler.
        scheduler_id: String,
    },
    /// A task joining a sealed group.
    #[error("task group {0} is sealed; no task may be added")]
    GroupSealed(TaskId),
    /// cancelTaskGroup on a group not sealed.
    #[error("task group {0} must be sealed before it can be canceled")]
    GroupNotSealed(TaskId),
    /// A task graph created again under an existing id with another definition.
    #[error("task graph {0} already exists with a different definition")]
    GraphRedefined(TaskId),
    /// A task graph whose id is a task group's already.
    #[error("task group {0} already exists: a task graph needs a taskGraphId of its own")]
    GraphGroupTaken(TaskId),
    /// A task graph extended after its group was sealed.
    #[error("task group {0} is sealed: the graph cannot gain tasks")]
    GraphSealed(TaskId),
    /// A task at its limit of runs.
    #[error("task {task_id} already has {max} runs")]
    TooManyRuns {
        /// The task.
        task_id: TaskId,
        /// The limit.
        max: usize,
    },
    /// changeTaskPriority of a resolved task.
    #[error("task {0} is resolved; its priority cannot change")]
    PriorityOfResolved(TaskId),
    /// A command that needs the task before its deadline.
    #[error("task {task_id} passed its deadline {deadline}")]
    DeadlinePassed {
        /// The task.
        task_id: TaskId,
        /// Its deadline.
        deadline: Timestamp,
    },
    /// A command on a run that a later run replaced.
    #[error("run {run_id} of task {task_id} is not the last run")]
    NotLastRun {
        /// The task.
        task_id: TaskId,
        /// The run.
        run_id: u32,
    },
    /// A command on a run in another state than it needs.
    #[error("run {run_id} of task {task_id} {is_not}")]
    RunState {
        /// The task.
        task_id: TaskId,
        /// The run.
        run_id: u32,
        /// What it is not, e.g. `is not pending`.
        is_not: &'static str,
    },
    /// An artifact replaced in a way its kind forbids.
    #[error("artifact {name} already exists as {kind} and cannot be changed that way")]
    ArtifactUnchangeable {
        /// The artifact.
        name: String,
        /// Its storage type.
        kind: &'static str,
    },
    /// An artifact's expiry moved earlier.
    #[error("artifact {name} expires {expires}; expiry may only move later")]
    ArtifactExpiresEarlier {
        /// The artifact.
        name: String,
        /// Its expiry.
        expires: Timestamp,
    },
    /// Bytes sent for an artifact other than an upload.
    #[error("artifact {name} is a {kind}, not an upload")]
    NotAnUpload {
        /// The artifact.
        name: String,
        /// Its storage type.
        kind: &'static str,
    },
    /// finishArtifact before the bytes are there.
    #[error("artifact {0} has not been uploaded; PUT its bytes to the putUrl first")]
    NotUploaded(String),
    /// Bytes sent again for an upload whose bytes are there.
    #[error("artifact {0} is already uploaded; its bytes are written once")]
    AlreadyUploaded(String),
    /// Live-log output for a run that ended.
    #[error("run {0} is not running; its log is closed")]
    LogClosed(u32),
    /// An artifact for a resolved run.
    #[error("run {0} is resolved; it takes no more artifacts")]
    RunResolved(u32),
    /// A client or role created under an id already taken.
    #[error("client {0} already exists")]
    ClientExists(String),
    /// A role created under an id already taken.
    #[error("role {0} already exists")]
    RoleExists(String),
    /// createHook under an id taken by another definition.
    #[error("hook {0} already exists")]
    HookExists(String),
    /// Live-log output sent past the log's end.
    #[error("offset {offset} is past the end of the log ({size} bytes); send from offset {size}")]
    LogGap {
        /// Where the chunk would start.
        offset: u64,
        /// The log's size.
        size: u64,
    },
}

/// What a command names that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    /// A task.
    #[error("task {0} not found")]
    Task(TaskId),
    /// A run of a task.
    #[error("run {run_id} of task {task_id} not found")]
    Run {
        /// The task.
        task_id: TaskId,
        /// The run.
        run_id: u32,
    },
    /// A task group.
    #[error("task group {0} not found")]
    Group(TaskId),
    /// A task graph.
    #[error("task graph {0} not found")]
    Graph(TaskId),
    /// An artifact of a run.
    #[error("artifact {name} of run {run_id} of task {task_id} not found")]
    Artifact {
        /// The task.
        task_id: TaskId,
        /// The run.
        run_id: u32,
        /// The artifact.
        name: String,
    },
    /// A client.
    #[error("client {0} not found")]
    Client(String),
    /// A role.
    #[error("role {0} not found")]
    Role(String),
    /// A hook (`<hookGroupId>/<hookId>`).
    #[error("hook {0} not found")]
    Hook(String),
    /// An index entry, or nothing indexed at a namespace.
    #[error("no task is indexed at {0}")]
    Indexed(String),
    /// A secret of the Secrets service (expired ones are gone).
    #[error("secret {0} not found")]
    Secret(String),
    /// An artifact a link names.
    #[error("artifact {0} not found")]
    LinkTarget(String),
    /// Bytes sent for an artifact not created.
    #[error("artifact {0} not found; create it first")]
    NotCreated(String),
    /// An upload whose bytes are not there.
    #[error("artifact {0} has not been uploaded")]
    NotUploaded(String),
    /// A worker of a task queue.
    #[error("worker {0} not found")]
    Worker(crate::worker::WorkerKey),
    /// A task queue.
    #[error("task queue {0} not found")]
    TaskQueue(String),
}
