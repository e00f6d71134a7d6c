//! Shoal's store application layer: every write operation, written once for both backends
//! over [`WriteTx`] and the per-domain traits each backend implements; the description of a
//! task row (`row/`); and the read side (`reads/`), once over each backend's `ReadDb`. It knows
//! no SQL; `shoal-store` holds the backends and `Store`.
//!
//! An operation loads what it needs through the transaction, lets the engine decide, and
//! writes the outcome back through it; the backend's transaction knows only its SQL (and its
//! own mechanics: SQLite's pending index, PostgreSQL's pipelining and row locks). Every check
//! that can refuse runs before the operation's first write, so a refused operation leaves
//! nothing behind in either backend (SQLite commits batches without savepoints; a PostgreSQL
//! gathering undoes only what was not yet written).
//!
//! SQLite's transaction completes every call at once; its operations are driven by
//! [`ready`]. PostgreSQL's awaits its statements.

// The transaction traits are implemented by `shoal-store`'s two backends only, and each
// operation is called on a concrete transaction: a PostgreSQL operation's future is `Send`
// because its transaction's is, which bounds on the traits could not say of SQLite's.
#![allow(async_fn_in_trait)]
#![warn(missing_docs)]

pub mod artifacts;
pub mod auth;
pub mod documents;
pub mod error;
pub mod expire;
pub mod github;
pub mod graph;
pub mod groups;
pub mod hooks;
pub mod index;
pub mod named_secrets;
pub mod operation;
pub mod page;
mod queue_records;
pub mod reads;
pub mod records;
pub mod row;
pub mod settings;
mod step;
pub mod tasks;
pub mod workers;

pub use auth::{AuthChange, AuthOutcome, ClientEdit};
pub use error::StoreError;
pub use graph::{GraphNode, GraphRecord, GraphRequest};
pub use operation::{Op, Operation, Outcome};
pub use page::Page;
pub use reads::Reads;
pub use records::*;
pub use settings::{DEFAULT_CLAIM_TIMEOUT_SECS, DEFAULT_QUEUE_RETENTION_SECS, StoreSettings};
pub use workers::WorkerChange;

use serde_json::value::RawValue;
use shoal_engine::definition::{Requires, TaskDefinition};
use shoal_engine::dimensions::Dimensions;
use shoal_engine::event::Effects;

use shoal_engine::message::Message;
use shoal_engine::priority::Priority;
use shoal_engine::rejection::Missing;
use shoal_engine::secrets::Secrets;
use shoal_engine::slice::Capacity;
use shoal_engine::status::{RunState, TaskState, TaskStatus};
use shoal_engine::task::Task;

use shoal_engine::{Rejection, TaskId, Timestamp};

pub use artifacts::ArtifactTx;
pub use auth::AuthTx;
pub use documents::DocumentTx;
pub use expire::ExpireTx;
pub use graph::GraphTx;
pub use groups::GroupTx;
pub use queue_records::QueueRecords;
pub use step::{record, settle_resolutions, step};
pub use workers::WorkerTx;

use crate::row::{TaskRow, corrupt};

/// How often at most a queue's last-active time is written.
pub const QUEUE_TOUCH_INTERVAL_MS: i64 = 30_000;

/// Whether a queue recorded active at `at` (milliseconds) needs no new record at `now`.
pub fn queue_recorded_recently(at: i64, now: Timestamp) -> bool {
    at + QUEUE_TOUCH_INTERVAL_MS > now.millis()
}

/// A backend's write transaction: the reads and writes the operations are made of, each
/// domain's in its own trait. Rows a method loads are locked until the commit where the backend
/// locks rows.
pub trait WriteTx:
    TaskTx
    + DependencyTx
    + SecretTx
    + DedupTx
    + ListingTx
    + GroupTx
    + ArtifactTx
    + GraphTx
    + ExpireTx
    + AuthTx
    + WorkerTx
    + DocumentTx
{
    /// The rules' settings.
    fn settings(&self) -> &StoreSettings;

    /// Adds a message to this transaction's outbox.
    fn publish(&mut self, message: Message);

    /// The events this transaction recorded, in order.
    fn events(&mut self) -> &mut Vec<TaskEvent>;
}

/// Task rows and the claim line.
pub trait TaskTx {
    /// A task's row.
    async fn load(&mut self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError>;

    /// A task's row with its stored definition (claims return both).
    async fn load_with_definition(&mut self, task_id: TaskId) -> Result<Option<(TaskRow, Box<RawValue>)>, StoreError>;

    /// The pending runs a worker's claim may take, in line order (priority, then arrival),
    /// at most its count, each loaded with its definition.
    async fn claimable(&mut self, request: &ClaimRequest) -> Result<Vec<(TaskRow, Box<RawValue>)>, StoreError>;

    /// Inserts a new task row as it stands, joining the claim line when it is pending.
    async fn insert_task(&mut self, row: &mut TaskRow, new: NewTask<'_>) -> Result<(), StoreError>;

    /// Writes a stepped row's new state; `change` says what moved.
    async fn update_task(&mut self, row: &mut TaskRow, change: &RowChange) -> Result<(), StoreError>;

    /// What createTask needs to judge a new task (see [`CreateLookup`]).
    async fn lookup_create(&mut self, definition: &TaskDefinition, task_id: TaskId)
    -> Result<CreateLookup, StoreError>;

    /// Records that a queue was used (at most once per [`QUEUE_TOUCH_INTERVAL_MS`]).
    async fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError>;

    /// Tasks whose claim expired (`taken_until`) and whose deadline passed, at most `limit`
    /// of each, each earliest first.
    async fn due(&mut self, now: Timestamp, limit: usize) -> Result<Due, StoreError>;
}

/// Dependencies between tasks, and what a resolution entails for its dependents and group.
pub trait DependencyTx {
    /// Records a new task's dependencies and which are satisfied already.
    async fn insert_dependencies(
        &mut self,
        task_id: TaskId,
        definition: &TaskDefinition,
        satisfied: &[bool],
    ) -> Result<(), StoreError>;

    /// Marks `dependent`'s dependency on `required` satisfied.
    async fn mark_satisfied(&mut self, required: TaskId, dependent: TaskId) -> Result<(), StoreError>;

    /// Whether a task still waits for a dependency.
    async fn has_unmet_dependencies(&mut self, task_id: TaskId) -> Result<bool, StoreError>;

    /// What a task's resolution entails, or `None` when the backend judges that later, for
    /// several resolutions at once (a PostgreSQL gathering).
    async fn consequences(
        &mut self,
        task_id: TaskId,
        group: TaskId,
        state: TaskState,
        now: Timestamp,
    ) -> Result<Option<Consequences>, StoreError>;
}

/// Tasks' secrets, kept apart from their rows.
pub trait SecretTx {
    /// Keeps a new task's secrets, apart from its row (SQLite: in their own database file).
    async fn save_secrets(&mut self, task_id: TaskId, secrets: &Secrets) -> Result<(), StoreError>;

    /// A task's secrets, if it has any.
    async fn load_secrets(&mut self, task_id: TaskId) -> Result<Option<Secrets>, StoreError>;
}

/// Completions by properties, for Swarming's dedup.
pub trait DedupTx {
    /// The task that last completed with properties `hash` at or after `since`, if any.
    async fn find_completion(&mut self, hash: &str, since: Timestamp) -> Result<Option<TaskId>, StoreError>;

    /// Records that `task_id`, with properties `hash`, completed at `at`.
    async fn remember_completion(&mut self, hash: &str, task_id: TaskId, at: Timestamp) -> Result<(), StoreError>;

    /// Forgets `task_id`'s completions (it is no longer completed, or it expired).
    async fn forget_completions(&mut self, task_id: TaskId) -> Result<(), StoreError>;
}

/// What listings read beside the rows: tags, and the failed tasks.
pub trait ListingTx {
    /// Files a new task under each of `tags` (as listings name them), at its `created` time.
    async fn index_tags(&mut self, task_id: TaskId, created: Timestamp, tags: &[String]) -> Result<(), StoreError>;

    /// Files `task_id` in the list of failed tasks at `at` (it failed or ended in an
    /// exception), or takes it off (`None`: it runs again).
    async fn file_failure(&mut self, task_id: TaskId, at: Option<Timestamp>) -> Result<(), StoreError>;
}

/// What a new task's row holds beyond the task itself.
#[derive(Debug, Clone, Copy)]
pub struct NewTask<'a> {
    /// The checked definition, serialized as served by task().
    pub definition: &'a str,
    /// The definition's `created`.
    pub created: Timestamp,
}

/// What createTask learns before judging a task.
pub struct CreateLookup {
    /// The task already stored under the id: its definition (serialized) and status.
    pub existing: Option<(String, TaskStatus)>,
    /// The task's group, if it exists (on PostgreSQL already created or extended).
    pub group: Option<TaskGroup>,
    /// For each dependency other than the task itself, in order, its state and expiry.
    pub dependencies: Vec<Option<(TaskState, Timestamp)>>,
}

/// What a resolution entails, as the store finds it.
#[derive(Debug, Default)]
pub struct Consequences {
    /// The task's group, when no unresolved task is left in it.
    pub group_resolved: Option<TaskGroup>,
    /// The dependents still waiting on the task.
    pub waiting: Vec<Waiting>,
}

/// A dependent waiting on a task.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// The dependent.
    pub dependent: TaskId,
    /// What it requires of its dependencies.
    pub requires: Requires,
}

impl Waiting {
    /// A waiting dependent as stored (its id and what it requires, by name).
    pub fn parse(dependent: &str, requires: &str) -> Result<Waiting, StoreError> {
        Ok(Waiting {
            dependent: TaskId::parse(dependent).ok_or_else(|| corrupt(format!("dependent id {dependent}")))?,
            requires: Requires::from_name(requires).ok_or_else(|| corrupt(format!("requires {requires}")))?,
        })
    }
}

/// Tasks whose due times came.
#[derive(Debug, Default)]
pub struct Due {
    /// Claims expired.
    pub expired: Vec<TaskId>,
    /// Deadlines passed.
    pub late: Vec<TaskId>,
}

/// What a transition changed of a stored row, as writing it back cares.
pub struct RowChange {
    /// The row before.
    pub before: PriorRow,
    /// What happens to its place in the claim line.
    pub place: Place,
    /// Whether its priority changed (the stored definition is rewritten).
    pub priority_changed: bool,
    /// The dimensions it required before its pending run moved to another slice.
    pub moved_from: Option<Dimensions>,
}

/// What a row was before a transition.
#[derive(Debug, Clone, Copy)]
pub struct PriorRow {
    /// Its state.
    pub state: TaskState,
    /// Its pending run, if its last run was pending.
    pub pending_run: Option<u32>,
    /// Its priority.
    pub priority: Priority,
    /// The slice its last run was at, for a task with slices.
    pub slice: Option<u32>,
}

impl PriorRow {
    /// What `task` is now, before a transition.
    pub fn of(task: &Task) -> PriorRow {
        PriorRow {
            state: task.state(),
            pending_run: pending_run(task),
            priority: task.meta.priority,
            slice: task.status_slice(),
        }
    }
}

/// Starts a task whose dependencies are met: an idempotent one whose properties completed
/// within the dedup window resolves at once as that completion; any other is scheduled,
/// its slices judged by the live workers.
pub async fn start(tx: &mut impl WriteTx, task: &mut Task, now: Timestamp) -> Result<Effects, StoreError> {
    if let Some(hash) = &task.meta.dedup_hash {
        let since = now.plus_millis(-tx.settings().dedup_window_ms());
        if let Some(original) = tx.find_completion(hash, since).await? {
            return Ok(task.dedupe(original, now)?);
        }
    }
    let capacity = capacity_for(tx, task, now).await?;
    Ok(task.schedule(now, &capacity)?)
}

/// Keeps the dedup table in step with an idempotent task's state: a completion it ran
/// itself may stand for later tasks; once it is anything else (rerun, failed) it may not.
pub async fn note_completion(
    tx: &mut impl WriteTx,
    task: &Task,
    before: TaskState,
    now: Timestamp,
) -> Result<(), StoreError> {
    let Some(hash) = &task.meta.dedup_hash else { return Ok(()) };
    let state = task.state();
    let ran = task.runs().last().is_some_and(|run| run.deduped_from.is_none());
    if state == TaskState::Completed && before != TaskState::Completed && ran {
        tx.remember_completion(hash, task.task_id, now).await?;
    } else if before == TaskState::Completed && state != TaskState::Completed {
        tx.forget_completions(task.task_id).await?;
    }
    Ok(())
}

/// What the queue knows of the live workers that could run `task`: read only for a task
/// with slices (the others are never judged by capacity).
pub async fn capacity_for(tx: &mut impl WriteTx, task: &Task, now: Timestamp) -> Result<Capacity, StoreError> {
    if task.meta.slices.is_empty() {
        return Ok(Capacity::Assumed);
    }
    let since = now.plus_millis(-tx.settings().worker_dead_after_ms());
    Ok(Capacity::Workers(tx.live_worker_dimensions(&task.meta.task_queue_id, since).await?))
}

/// What happens to a row's place in the claim line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Not pending.
    None,
    /// Still the same pending run: it keeps its place (its priority may have moved).
    Keep,
    /// A new pending run: to the back of the line.
    Back,
}

impl Place {
    /// Where a row goes that was `before` and is now `task`.
    pub fn after(before: &PriorRow, task: &Task) -> Place {
        match pending_run(task) {
            None => Place::None,
            run if run == before.pending_run => Place::Keep,
            Some(_) => Place::Back,
        }
    }
}

/// The task's last run, when it is pending.
pub fn pending_run(task: &Task) -> Option<u32> {
    task.runs().last().filter(|run| run.state == RunState::Pending).map(|run| run.run_id)
}

/// A task's row, which must exist.
pub async fn load_existing(tx: &mut impl WriteTx, task_id: TaskId) -> Result<TaskRow, StoreError> {
    match tx.load(task_id).await? {
        Some(row) => Ok(row),
        None => Err(Rejection::from(Missing::Task(task_id)).into()),
    }
}

/// The result of a future that completes without waiting: a SQLite operation, whose
/// statements all run on the calling thread.
pub fn ready<T>(future: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(StoreError::Internal("a synchronous store operation waited".into())),
    }
}
