//! What the store answers: committed writes, claims, and the records and listings reads return.

use serde::Serialize;
use serde_json::value::RawValue;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::event::Event;
use shoal_engine::message::Message;
use shoal_engine::secrets::Secrets;
use shoal_engine::status::TaskStatus;
use shoal_engine::worker::{Worker, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

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

/// Which tasks a tag listing selects (Swarming's task list): those filed under `tag` (and
/// tagged with each of `also`), of the queue and in the state given, created within
/// `since..=until`.
#[derive(Debug, Clone, Default)]
pub struct TagQuery {
    /// `key:value`.
    pub tag: String,
    /// More tags (`key:value`) every listed task has; they filter the listing `tag` reads.
    pub also: Vec<String>,
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

    /// Whether `task`, created (or filed) at `created`, is one this query selects beyond the
    /// tag or creator it is read by.
    #[must_use]
    pub fn selects(&self, task: &shoal_engine::task::Task, created: Timestamp) -> bool {
        let meta = &task.meta;
        self.state.is_none_or(|state| task.state() == state)
            && self.task_queue_id.as_ref().is_none_or(|queue| *queue == meta.task_queue_id)
            && self.created_by.as_ref().is_none_or(|client| Some(client) == meta.created_by.as_ref())
            && self.since.is_none_or(|since| created >= since)
            && self.until.is_none_or(|until| created <= until)
            && self.also.iter().all(|tag| {
                tag.split_once(':').is_some_and(|(key, value)| meta.tags.get(key).is_some_and(|v| v == value))
            })
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

/// A group as lists show it: with its name, verdict and where its tasks are.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupListing {
    /// The group.
    #[serde(flatten)]
    pub recent: RecentGroup,
    /// Its name (see [`shoal_engine::group::group_name`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its state in one word.
    pub verdict: shoal_engine::group::GroupVerdict,
    /// Where its tasks are.
    pub task_counts: shoal_engine::group::GroupCounts,
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

/// A run a worker claimed, as its history lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerRun {
    /// The task.
    pub task_id: TaskId,
    /// The run.
    pub run_id: u32,
    /// When the worker claimed it.
    pub claimed: Timestamp,
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

/// One claimWork (or claimTask) request.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Queue to claim from.
    pub task_queue_id: String,
    /// Worker group.
    pub worker_group: String,
    /// Worker id.
    pub worker_id: String,
    /// The worker's dimensions.
    pub dimensions: Dimensions,
    /// The worker's software version, if it sent one.
    pub version: Option<String>,
    /// Most tasks to claim.
    pub count: usize,
}

impl ClaimRequest {
    /// The claiming worker, as its runs record it.
    #[must_use]
    pub fn claimant(&self) -> shoal_engine::task::Claimant<'_> {
        shoal_engine::task::Claimant {
            worker_group: &self.worker_group,
            worker_id: &self.worker_id,
            dimensions: Some(&self.dimensions),
            version: self.version.as_deref(),
        }
    }

    /// The claiming worker.
    #[must_use]
    pub fn worker_key(&self) -> WorkerKey {
        WorkerKey {
            task_queue_id: self.task_queue_id.clone(),
            worker_group: self.worker_group.clone(),
            worker_id: self.worker_id.clone(),
        }
    }
}

/// One stored message and its place in the publishing order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Position in the outbox: messages are published in this order.
    pub seq: u64,
    /// The message.
    pub message: Message,
}
