//! Shoal's service layer: the queue's operations over the store, the long-polling claim,
//! and the loop that fires due times.
//!
//! Every operation is one store step; what the step committed decides which waiting workers
//! to wake. This is also the only place that reads the clock.

pub mod auth;
mod claims;
mod clock;
mod counts;
mod due;
mod fleet;
mod live;
mod publish;
mod upload;
mod wakers;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use shoal_blobs::{BlobKey, Blobs};
use shoal_engine::artifact::{check_run_takes_output, check_size};
use shoal_engine::event::Event;
use shoal_engine::rejection::Missing;
use shoal_engine::status::Run;
use shoal_engine::{Rejection, TaskId, Timestamp};
use shoal_store::operation::{FireDue, ForgetArtifacts, ForgetTasks};
use shoal_store::{Committed, Operation, RemoteWork, Store, StoreError};
use tokio::sync::watch;

pub use auth::{Authority, run_auth_refresh};
pub use clock::now;
pub use due::run_due_loop;
pub use fleet::Standing;
pub use live::LogProgress;
pub use publish::{Delivery, Subscription, run_publisher};
pub use shoal_blobs::Appended;
pub use upload::Upload;

pub use crate::claims::ClaimOutcome;
use crate::fleet::Fleet;
use crate::live::LiveLogs;
use crate::wakers::Wakers;

/// How long an idle claimWork waits by default (Taskcluster's 20 s).
pub const DEFAULT_CLAIM_WAIT: Duration = Duration::from_secs(20);

/// Settings of the queue service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// How long an idle claimWork waits before answering with no tasks.
    pub claim_wait: Duration,
    /// How often due times are checked.
    pub due_interval: Duration,
    /// How many bytes artifacts and live logs may hold.
    pub sizes: SizeLimits,
    /// How long a heartbeating worker may stay silent before it is missing and its runs end.
    pub worker_dead_after: Duration,
}

impl ServiceConfig {
    /// How often at most a worker's sighting is written (unless what it says changed): often
    /// enough that a live worker never looks silent, rarely enough that idle polls cost little.
    #[must_use]
    pub fn sighting_interval(&self) -> Duration {
        (self.worker_dead_after / 8).clamp(Duration::from_millis(100), Duration::from_secs(15))
    }

    /// How often a heartbeating worker should call.
    #[must_use]
    pub fn heartbeat_every(&self) -> Duration {
        (self.worker_dead_after / 4).clamp(Duration::from_millis(250), Duration::from_secs(30))
    }
}

impl Default for ServiceConfig {
    fn default() -> ServiceConfig {
        ServiceConfig {
            claim_wait: DEFAULT_CLAIM_WAIT,
            due_interval: Duration::from_millis(250),
            sizes: SizeLimits::default(),
            worker_dead_after: Duration::from_secs(shoal_engine::worker::DEFAULT_DEAD_AFTER_SECS as u64),
        }
    }
}

/// How many bytes uploads may store, so that anyone allowed to upload cannot fill the disk.
#[derive(Debug, Clone, Copy)]
pub struct SizeLimits {
    /// One artifact's bytes.
    pub artifact_bytes: u64,
    /// All the artifact bytes of one run.
    pub run_bytes: u64,
    /// One run's live log.
    pub log_bytes: u64,
}

impl Default for SizeLimits {
    fn default() -> SizeLimits {
        const GIB: u64 = 1024 * 1024 * 1024;
        SizeLimits { artifact_bytes: 8 * GIB, run_bytes: 32 * GIB, log_bytes: GIB }
    }
}

/// The application service (queue, fleet, claims, uploads): cheap to clone, shared by every request.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    /// Set when the server stops: open subscriptions end.
    closing: watch::Sender<bool>,
    store: Store,
    blobs: Blobs,
    wakers: Arc<Wakers>,
    /// The store wakes waiting claims at commit (`Store::wake_at_commit`); else the events do.
    store_wakes: bool,
    live: LiveLogs,
    fleet: Fleet,
    config: ServiceConfig,
}

impl Service {
    /// A queue over `store`, keeping artifact bytes in `blobs`.
    #[must_use]
    pub fn new(store: Store, blobs: Blobs, config: ServiceConfig) -> Service {
        let closing = watch::channel(false).0;
        let elsewhere = store.pending_elsewhere();
        let fleet = Fleet::new(config.sighting_interval().as_millis() as i64);
        let wakers = Arc::new(Wakers::default());
        let woken = Arc::clone(&wakers);
        let store_wakes = store.wake_at_commit(Box::new(move |queue, needs| woken.wake(queue, needs)));
        let live = LiveLogs::default();
        let inner = Inner { closing, store, blobs, wakers, store_wakes, live, fleet, config };
        let queue = Service { inner: Arc::new(inner) };
        if let Some(elsewhere) = elsewhere {
            tokio::spawn(wake_on_remote_work(Arc::downgrade(&queue.inner), elsewhere));
            // A run may end through another server (its report sent there, its claim expiry
            // or deadline fired there): the feed carries every server's messages.
            let tap = queue.inner.store.outbox().tap();
            tokio::spawn(end_logs_of_runs_ended_elsewhere(Arc::downgrade(&queue.inner), tap));
        }
        queue
    }

    /// Where artifact bytes live.
    #[must_use]
    pub fn blobs(&self) -> &Blobs {
        &self.inner.blobs
    }

    /// claimWork calls held on this server (waiting for work or looking).
    #[must_use]
    pub fn claims_waiting(&self) -> usize {
        self.inner.wakers.waiting()
    }

    /// The store, for reads.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &ServiceConfig {
        &self.inner.config
    }

    /// Subscribes to every message committed from now on that one of `bindings` matches.
    #[must_use]
    pub fn subscribe(&self, bindings: Vec<shoal_engine::topic::Binding>) -> Subscription {
        Subscription::new(&self.inner.store, bindings, self.inner.closing.subscribe())
    }

    /// Ends every open subscription (the server is stopping).
    pub fn close_subscriptions(&self) {
        self.inner.closing.send_replace(true);
    }

    /// Wakes the workers waiting on every queue where a run became pending (unless the store
    /// woke them at commit), and ends the live logs of runs that ended.
    fn committed<T>(&self, committed: Committed<T>) -> T {
        counts::count(&committed.events);
        for event in &committed.events {
            match event.event {
                Event::Pending { .. } if !self.inner.store_wakes => {
                    self.inner.wakers.wake(&event.task_queue_id, event.dimensions.as_ref());
                }
                Event::Completed { run_id } | Event::Failed { run_id } | Event::Exception { run_id } => {
                    self.inner.live.finish(event.task_id, run_id);
                }
                _ => {}
            }
        }
        committed.value
    }

    /// One run, as committed.
    async fn load_run(&self, task_id: TaskId, run_id: u32) -> Result<Run, StoreError> {
        let record = self.inner.store.read(move |reads| reads.task(task_id)).await?;
        let record = record.ok_or(Rejection::NotFound(Missing::Task(task_id)))?;
        let run =
            record.status.runs.get(run_id as usize).ok_or(Rejection::NotFound(Missing::Run { task_id, run_id }))?;
        Ok(run.clone())
    }

    /// Appends a chunk of a running run's output at `offset`.
    ///
    /// # Errors
    /// NotFound for an unknown task or run; Conflict when the run is not running;
    /// Unavailable when the bytes cannot be stored.
    pub async fn append_log(
        &self,
        task_id: TaskId,
        run_id: u32,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Appended, StoreError> {
        check_run_takes_output(&self.load_run(task_id, run_id).await?)?;
        let limit = self.inner.config.sizes.log_bytes;
        check_size(|| format!("the live log of run {run_id} of task {task_id}"), offset + bytes.len() as u64, limit)?;
        let (log, _) = self.inner.live.entry(task_id, run_id);
        // One append at a time per run: the size check and the write must not interleave.
        let _guard = log.append.lock().await;
        let appended = if self.inner.store.keeps_logs() {
            match self.inner.store.append_log(task_id, run_id, offset, bytes.to_vec()).await? {
                shoal_store::LogAppend::Size(size) => Appended::Size(size),
                shoal_store::LogAppend::Gap(size) => Appended::Gap(size),
            }
        } else {
            self.inner
                .blobs
                .append_log(task_id.as_str(), run_id, offset, bytes)
                .await
                .map_err(|err| StoreError::Unavailable(format!("writing a live log: {err}")))?
        };
        if let Appended::Size(size) = appended {
            log.progress.send_modify(|progress| progress.size = progress.size.max(size));
        }
        Ok(appended)
    }

    /// Whether a run's live log may grow through other servers (logs kept in the database),
    /// so that a follower here must look for itself now and then.
    #[must_use]
    pub fn logs_shared(&self) -> bool {
        self.inner.store.keeps_logs()
    }

    /// The size of a run's live log now.
    ///
    /// # Errors
    /// Unavailable when it cannot be read.
    pub async fn log_size(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
        if self.inner.store.keeps_logs() {
            return self.inner.store.log_size(task_id, run_id).await;
        }
        self.inner
            .blobs
            .log_size(task_id.as_str(), run_id)
            .await
            .map_err(|err| StoreError::Unavailable(format!("reading a live log: {err}")))
    }

    /// Up to `max` bytes of a run's live log from `offset`.
    ///
    /// # Errors
    /// Unavailable when it cannot be read.
    pub async fn read_log(&self, task_id: TaskId, run_id: u32, offset: u64, max: usize) -> Result<Vec<u8>, StoreError> {
        if self.inner.store.keeps_logs() {
            return self.inner.store.read_log(task_id, run_id, offset, max).await;
        }
        self.inner
            .blobs
            .read_log(task_id.as_str(), run_id, offset, max)
            .await
            .map_err(|err| StoreError::Unavailable(format!("reading a live log: {err}")))
    }

    /// Watches a run's live log: its size now and whenever it grows, and when it ends.
    ///
    /// # Errors
    /// NotFound for an unknown task or run.
    pub async fn watch_log(&self, task_id: TaskId, run_id: u32) -> Result<watch::Receiver<LogProgress>, StoreError> {
        // Register first, then look: an end that comes after the look then reaches the entry.
        let (log, fresh) = self.inner.live.entry(task_id, run_id);
        let receiver = log.progress.subscribe();
        if fresh {
            let size = self.log_size(task_id, run_id).await?;
            log.progress.send_modify(|progress| progress.size = progress.size.max(size));
        }
        if self.load_run(task_id, run_id).await?.state.is_resolved() {
            self.inner.live.finish(task_id, run_id);
        }
        Ok(receiver)
    }

    /// Runs a write operation (`shoal_store::operation`) now; what its commit caused is
    /// published, counted and woken on as for every write.
    ///
    /// # Errors
    /// As the store.
    pub async fn run<O: Operation>(&self, op: O) -> Result<O::Output, StoreError> {
        self.run_at(op, now()).await
    }

    /// Runs a write operation as of `at` (the due loop's and expiry's own time).
    async fn run_at<O: Operation>(&self, op: O, at: Timestamp) -> Result<O::Output, StoreError> {
        let committed = self.inner.store.run(op, at).await?;
        Ok(self.committed(committed))
    }

    /// Deletes expired artifacts, bytes first, then records (so a crash in between leaves a
    /// record to retry, never orphaned bytes); returns how many were removed.
    ///
    /// # Errors
    /// As the store, or Unavailable when bytes cannot be deleted.
    pub async fn expire_artifacts(&self, at: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let expired = self.inner.store.read(move |reads| reads.expired_artifacts(at, limit)).await?;
        let mut keys = Vec::with_capacity(expired.len());
        for (key, artifact) in expired {
            let blob = BlobKey { task_id: key.task_id.as_str(), run_id: key.run_id, name: &key.name };
            self.inner
                .blobs
                .delete(&blob, artifact.object.as_deref())
                .await
                .map_err(|err| StoreError::Unavailable(format!("deleting an expired artifact: {err}")))?;
            keys.push(key);
        }
        self.run(ForgetArtifacts { keys }).await
    }

    /// Deletes resolved tasks past their `expires`: their files first (live logs, what is left
    /// of their artifacts' bytes), then their records, the groups and graphs they leave
    /// empty, and task queues past their retention; returns how many tasks were deleted.
    ///
    /// # Errors
    /// As the store, or Unavailable when files cannot be deleted.
    pub async fn expire_tasks(&self, at: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let expired = self.inner.store.read(move |reads| reads.expired_tasks(at, limit)).await?;
        let mut task_ids = Vec::with_capacity(expired.len());
        for (task_id, runs) in expired {
            self.inner
                .blobs
                .delete_task(task_id.as_str(), runs)
                .await
                .map_err(|err| StoreError::Unavailable(format!("deleting an expired task's files: {err}")))?;
            task_ids.push(task_id);
        }
        let deleted = self.run_at(ForgetTasks { task_ids, limit }, at).await?;
        metrics::counter!("shoal_tasks_expired_total").increment(deleted as u64);
        Ok(deleted)
    }

    /// Forgets up to `limit` entries of the store's pending index that hold nothing any more.
    ///
    /// # Errors
    /// As the store.
    pub async fn tidy_pending_index(&self, limit: usize) -> Result<(), StoreError> {
        self.inner.store.tidy_pending_index(limit).await
    }

    /// Fires what is due now; returns how many transitions fired.
    ///
    /// # Errors
    /// As the store.
    pub async fn fire_due(&self, at: Timestamp, limit: usize) -> Result<usize, StoreError> {
        self.run_at(FireDue { limit }, at).await
    }
}

/// Ends the live logs followed here whose runs ended through any server; ends with the queue.
async fn end_logs_of_runs_ended_elsewhere(
    queue: std::sync::Weak<Inner>,
    mut feed: tokio::sync::broadcast::Receiver<Arc<shoal_store::outbox::OutboxEntry>>,
) {
    loop {
        let received = feed.recv().await;
        let Some(inner) = queue.upgrade() else { return };
        match received {
            Ok(entry) => {
                if let Some((task_id, run_id)) = entry.message.ended_run() {
                    inner.live.finish(task_id, run_id);
                }
            }
            // Missed some: ask the store about every run followed here.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                let queue = Service { inner };
                for (task_id, run_id) in queue.inner.live.open() {
                    match queue.load_run(task_id, run_id).await {
                        Ok(run) if !run.state.is_resolved() => {}
                        // Resolved, or no such task or run any more.
                        Ok(_) | Err(StoreError::Rejected(_)) => queue.inner.live.finish(task_id, run_id),
                        // The database is away: the next lag or ended run looks again.
                        Err(_) => {}
                    }
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Wakes the workers waiting here for queues other servers gave work; ends with the queue.
async fn wake_on_remote_work(
    queue: std::sync::Weak<Inner>,
    mut elsewhere: tokio::sync::broadcast::Receiver<RemoteWork>,
) {
    loop {
        let received = elsewhere.recv().await;
        let Some(inner) = queue.upgrade() else { return };
        match received {
            Ok(RemoteWork::Anywhere) => {
                inner.fleet.forget_all();
                inner.wakers.wake_all();
            }
            // What another server committed: its needs are unknown, so all look.
            Ok(RemoteWork::Queue(task_queue_id)) => inner.wakers.wake_queue(&task_queue_id),
            // Changed through another server: read its record again, and its claims look.
            Ok(RemoteWork::Worker(key)) => inner.changed_elsewhere(&key),
            // A live log followed here grew through another server.
            Ok(RemoteWork::Log { task_id, run_id, size }) => inner.live.grown(task_id, run_id, size),
            // Missed some: everyone looks again.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                inner.fleet.forget_all();
                inner.wakers.wake_all();
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}
