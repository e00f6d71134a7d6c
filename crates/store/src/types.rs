//! What store operations return.

use serde::Serialize;
use serde_json::value::RawValue;
use shoal_engine::artifact::Artifact;
use shoal_engine::backlog::PendingSet;
use shoal_engine::event::Event;
use shoal_engine::secrets::Secrets;
use shoal_engine::status::TaskStatus;
use shoal_engine::worker::{Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

use crate::{Page, StoreError};

pub use shoal_engine::group::TaskGroup;

/// The result of a committed step and the events it made durable.
#[derive(Debug)]
#[must_use = "the events of a commit must reach the bus and the waiting workers"]
pub struct Committed<T> {
    /// The step's answer.
    pub value: T,
    /// Events of every task the step changed, in order.
    pub events: Vec<TaskEvent>,
}

/// One event of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEvent {
    /// The task.
    pub task_id: TaskId,
    /// Its queue (waiting workers are woken per queue).
    pub task_queue_id: String,
    /// What happened.
    pub event: Event,
    /// For a run become pending, the dimensions it needs (none when it needs none), so only
    /// a worker that can take it is woken.
    pub dimensions: Option<shoal_engine::dimensions::Dimensions>,
}

/// One claimed run, as claimWork answers it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// Status after the claim.
    pub status: TaskStatus,
    /// The claimed run.
    pub run_id: u32,
    /// Worker group.
    pub worker_group: String,
    /// Worker id.
    pub worker_id: String,
    /// Until when the claim holds.
    pub taken_until: Timestamp,
    /// The task definition, as stored.
    pub task: Box<RawValue>,
    /// The task's secrets, handed only to the claiming worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Secrets>,
}

/// What cancelTaskGroup did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCancellation {
    /// The group.
    pub task_group_id: TaskId,
    /// Tasks in the group.
    pub task_group_size: u64,
    /// Tasks this call canceled.
    pub cancelled_count: u64,
    /// Their ids.
    pub task_ids: Vec<TaskId>,
}

/// A task's definition (as stored JSON) and status.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRecord {
    /// Status.
    pub status: TaskStatus,
    /// Definition.
    pub task: Box<RawValue>,
}

/// A claimed run, as listClaimedTasks shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedRun {
    /// The task.
    pub task_id: TaskId,
    /// The run.
    pub run_id: u32,
    /// Worker group.
    pub worker_group: String,
    /// Worker id.
    pub worker_id: String,
    /// When it was claimed.
    pub claimed: Timestamp,
    /// The definition.
    pub task: Box<RawValue>,
}

/// A pending run, as listPendingTasks shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingListing {
    /// The task.
    pub task_id: TaskId,
    /// The run.
    pub run_id: u32,
    /// When it became pending.
    pub inserted: Timestamp,
    /// The definition.
    pub task: Box<RawValue>,
}

/// A task queue workers have used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskQueueInfo {
    /// `provisionerId/workerType`.
    pub task_queue_id: String,
    /// When it may be forgotten.
    pub expires: Timestamp,
    /// Last time a task was created in it or a worker claimed from it.
    pub last_date_active: Timestamp,
    /// Description (empty unless set).
    pub description: String,
    /// `experimental`, `stable` or `deprecated`.
    pub stability: String,
}

/// Pending and claimed counts of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueCounts {
    /// Pending runs.
    pub pending_tasks: u64,
    /// Running runs.
    pub claimed_tasks: u64,
}

/// Names one artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactKey {
    /// The task.
    pub task_id: TaskId,
    /// The run.
    pub run_id: u32,
    /// The artifact's name.
    pub name: String,
}

/// The read side: queries of committed state (each sees the commits made before it); runs on a
/// blocking thread.
/// Which tasks a tag listing selects (Swarming's task list): those filed under `tag`, of the
/// queue and in the state given, created within `since..=until`.
#[derive(Debug, Clone)]
pub struct TagQuery {
    /// `key:value`.
    pub tag: String,
    /// Only this queue's.
    pub task_queue_id: Option<String>,
    /// Only those in this state.
    pub state: Option<shoal_engine::status::TaskState>,
    /// Created at or after.
    pub since: Option<Timestamp>,
    /// Created at or before.
    pub until: Option<Timestamp>,
    /// Only those created by this client; with an empty `tag`, the listing is this client's
    /// tasks.
    pub created_by: Option<String>,
}

impl TagQuery {
    /// The client whose tasks it lists, when it names no tag (the API asks for one or the
    /// other); otherwise `created_by` only filters the tag's tasks.
    #[must_use]
    pub fn creator_listing(&self) -> Option<&str> {
        self.created_by.as_deref().filter(|_| self.tag.is_empty())
    }
}

/// The reserved tag failed tasks (failed or exception) are filed under, newest first; user tags
/// are all `key:value`, so none can be it.
pub const FAILED_TAG: &str = "failed";

/// A group as the listing of recent groups shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentGroup {
    /// The group.
    #[serde(flatten)]
    pub group: TaskGroup,
    /// When its first task arrived (0 for groups made before Shoal dated them).
    pub created: Timestamp,
    /// Whether every task of it is resolved (until another joins it, if it is not sealed).
    pub resolved: bool,
}

/// A graph as the listing of recent graphs shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentGraph {
    /// Its status, metadata and tags, as `/info` shows them.
    #[serde(flatten)]
    pub graph: crate::GraphRecord,
    /// When it was created.
    pub created: Timestamp,
}

/// The reads every backend answers (see [`Store::read`]).
pub trait Reads {
    /// One artifact of a run.
    ///
    /// # Errors
    /// Storage failure.
    fn artifact(&self, task_id: TaskId, run_id: u32, name: &str) -> Result<Option<Artifact>, StoreError>;
    /// A run's artifacts by name.
    ///
    /// # Errors
    /// Storage failure.
    fn list_artifacts(
        &self,
        task_id: TaskId,
        run_id: u32,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Artifact>, StoreError>;
    /// Artifacts expired at `now`, oldest first.
    ///
    /// # Errors
    /// Storage failure.
    fn expired_artifacts(&self, now: Timestamp, limit: usize) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError>;
    /// The bytes of a run's uploaded blobs, by their records (what the run's uploads used).
    ///
    /// # Errors
    /// Storage failure.
    fn run_bytes(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError>;
    /// A task's definition and status.
    ///
    /// # Errors
    /// Storage failure.
    fn task(&self, task_id: TaskId) -> Result<Option<TaskRecord>, StoreError>;
    /// A task graph's status, description and counts.
    ///
    /// # Errors
    /// Storage failure.
    fn task_graph(&self, task_graph_id: TaskId) -> Result<Option<crate::GraphRecord>, StoreError>;
    /// Every task of a graph, by label.
    ///
    /// # Errors
    /// Storage failure.
    fn graph_nodes(&self, task_graph_id: TaskId) -> Result<Vec<crate::GraphNode>, StoreError>;
    /// A task group.
    ///
    /// # Errors
    /// Storage failure.
    fn task_group(&self, group: TaskId) -> Result<Option<TaskGroup>, StoreError>;
    /// The known tasks among `ids` (unknown ones left out), in their order, from the one after
    /// the task id `after`: at most `limit` and, beyond the first, at most 8 MiB of definitions.
    ///
    /// # Errors
    /// Storage failure, or a token that is not one of `ids`.
    fn tasks_by_id(&self, ids: &[TaskId], after: Option<&str>, limit: usize) -> Result<Page<TaskRecord>, StoreError>;
    /// Members of a group, by task id.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_task_group(&self, group: TaskId, after: Option<&str>, limit: usize)
    -> Result<Page<TaskRecord>, StoreError>;
    /// The tasks `query` selects, newest (by `created`) first. A page may hold fewer than
    /// `limit` (those filtered out still count), so follow its continuation.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_tagged(&self, query: &TagQuery, after: Option<&str>, limit: usize) -> Result<Page<TaskRecord>, StoreError>;
    /// How many tasks `query` selects.
    ///
    /// # Errors
    /// Storage failure.
    fn count_tagged(&self, query: &TagQuery) -> Result<u64, StoreError>;
    /// Task groups, newest first.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_task_groups(&self, after: Option<&str>, limit: usize) -> Result<Page<RecentGroup>, StoreError>;
    /// Task graphs, newest first.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_task_graphs(&self, after: Option<&str>, limit: usize) -> Result<Page<RecentGraph>, StoreError>;
    /// Tasks that depend on `task_id`, by task id.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_dependents(
        &self,
        task_id: TaskId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError>;
    /// Pending and claimed counts of a queue.
    ///
    /// # Errors
    /// Storage failure.
    fn queue_counts(&self, task_queue_id: &str) -> Result<QueueCounts, StoreError>;
    /// The dimension sets of at most `scan` of a queue's pending runs (the longest-waiting, as
    /// the backend's pending index orders them), with how many wait on each and since when
    /// (the backlog's raw counts).
    ///
    /// # Errors
    /// Storage failure.
    fn pending_sets(&self, task_queue_id: &str, scan: usize) -> Result<Vec<PendingSet>, StoreError>;
    /// Pending runs of a queue, oldest first.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_pending(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<PendingListing>, StoreError>;
    /// Claimed runs of a queue.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_claimed(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<ClaimedRun>, StoreError>;
    /// Known task queues, by id.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_task_queues(&self, after: Option<&str>, limit: usize) -> Result<Page<TaskQueueInfo>, StoreError>;
    /// One task queue.
    ///
    /// # Errors
    /// Storage failure.
    fn task_queue(&self, task_queue_id: &str) -> Result<Option<TaskQueueInfo>, StoreError>;
    /// Outbox messages from sequence `from` on, in order.
    ///
    /// # Errors
    /// Storage failure.
    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<crate::outbox::OutboxEntry>, StoreError>;
    /// Resolved tasks expired at `now`, earliest first, at most `limit`, each with its number
    /// of runs (whose live logs go with it).
    ///
    /// # Errors
    /// Storage failure.
    fn expired_tasks(&self, now: Timestamp, limit: usize) -> Result<Vec<(TaskId, u32)>, StoreError>;
    /// The auth generation: it moves on with every change to clients and roles.
    ///
    /// # Errors
    /// Storage failure.
    fn auth_generation(&self) -> Result<i64, StoreError>;
    /// Every client and role, with the generation they are of.
    ///
    /// # Errors
    /// Storage failure.
    fn auth_snapshot(&self) -> Result<AuthSnapshot, StoreError>;

    /// A worker, with the tasks whose running runs it holds.
    ///
    /// # Errors
    /// Storage failure.
    fn worker(&self, key: &WorkerKey) -> Result<Option<(Worker, Vec<TaskId>)>, StoreError>;

    /// A queue's workers by group and id that `keep` keeps (given each with whether it holds
    /// a running run), a page of at most `limit` after `after` (a token of this listing).
    ///
    /// # Errors
    /// Invalid for a token this listing did not issue; storage failure.
    fn list_workers(
        &self,
        task_queue_id: &str,
        after: Option<&str>,
        limit: usize,
        keep: &dyn Fn(&Worker, bool) -> bool,
    ) -> Result<Page<WorkerListing>, StoreError>;

    /// A worker's history, newest first: its kept lifecycle events, and the claims and
    /// resolutions of its recent tasks' runs.
    ///
    /// # Errors
    /// Storage failure.
    fn worker_events(&self, key: &WorkerKey) -> Result<Vec<WorkerEvent>, StoreError>;
}

/// A worker as listings show it.
#[derive(Debug, Clone)]
pub struct WorkerListing {
    /// The record.
    pub worker: Worker,
    /// Whether it holds a running run.
    pub busy: bool,
}

/// Every client and role as stored.
#[derive(Debug, Clone, Default)]
pub struct AuthSnapshot {
    /// The auth generation they are of.
    pub generation: i64,
    /// Clients, by id.
    pub clients: Vec<shoal_engine::auth::client::Client>,
    /// Roles, by id.
    pub roles: Vec<shoal_engine::auth::client::Role>,
}
