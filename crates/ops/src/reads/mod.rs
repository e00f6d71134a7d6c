//! The read side: [`Reads`], every query the API asks of committed state, answered once for
//! both backends by [`over::ReadsOver`] over each backend's [`over::ReadDb`].

mod live;
pub mod over;
pub mod services;

pub use over::{ClaimRecord, GroupFacts, ReadDb, ReadsOver, StoredTask, TaskQuery, TaskStatements, pending_set};
pub use services::ServiceReads;

use shoal_engine::artifact::Artifact;
use shoal_engine::backlog::PendingSet;
use shoal_engine::worker::{Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

use crate::{
    ArtifactKey, AuthSnapshot, ClaimedRun, GroupListing, Page, PendingListing, QueueCounts, RecentGraph, StoreError,
    TagQuery, TaskGroup, TaskQueueInfo, TaskRecord, WorkerListing, WorkerRun,
};

/// The reads every backend answers (see `Store::read`), the services' among them.
pub trait Reads: ServiceReads {
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
    /// The tasks `query` selects, newest (by `created`) first; with neither tag nor creator,
    /// those pending (in line order) or running (by id) now, queue by queue. A page may hold
    /// fewer than `limit` (those filtered out still count), so follow its continuation.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_tagged(&self, query: &TagQuery, after: Option<&str>, limit: usize) -> Result<Page<TaskRecord>, StoreError>;
    /// How many tasks `query` selects.
    ///
    /// # Errors
    /// Storage failure.
    fn count_tagged(&self, query: &TagQuery) -> Result<u64, StoreError>;
    /// Task groups, newest first, each with its name, verdict and counts.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_task_groups(&self, after: Option<&str>, limit: usize) -> Result<Page<GroupListing>, StoreError>;
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
    fn outbox(&self, from: u64, limit: usize) -> Result<Vec<crate::OutboxEntry>, StoreError>;
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
    /// The runs a worker claimed within the queue retention, newest first.
    ///
    /// # Errors
    /// Storage failure or a bad continuation token.
    fn list_worker_runs(
        &self,
        key: &WorkerKey,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<WorkerRun>, StoreError>;
}
