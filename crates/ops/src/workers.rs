//! The worker registry: sightings, claims, quarantine, termination, and workers found missing
//! (whose runs end at once). Each change stores the record and its new lifecycle events.

use shoal_engine::dimensions::Dimensions;
use shoal_engine::event::Effects;
use shoal_engine::rejection::Missing;
use shoal_engine::worker::{Posted, Sighting, TaskRun, Worker, WorkerEvent, WorkerKey, worker_name};
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::{Claim, StoreError};
use crate::{WriteTx, load_existing, step};

/// A backend's transaction, as the worker operations use it.
pub trait WorkerTx {
    /// A worker's record.
    async fn load_worker(&mut self, key: &WorkerKey) -> Result<Option<Worker>, StoreError>;

    /// Stores a worker's record (inserted or replaced) and its new numbered events, deleting
    /// those older than the [`KEPT_EVENTS`](shoal_engine::worker::KEPT_EVENTS) latest.
    async fn save_worker(&mut self, worker: &Worker, events: &[(u64, WorkerEvent)]) -> Result<(), StoreError>;

    /// Workers that silence makes missing ([`Worker::watched`]) last seen before `cutoff`, at
    /// most `limit`, longest silent first.
    async fn silent_workers(&mut self, cutoff: Timestamp, limit: usize) -> Result<Vec<WorkerKey>, StoreError>;

    /// The dimensions of the workers of `task_queue_id` seen at or after `since`.
    async fn live_worker_dimensions(
        &mut self,
        task_queue_id: &str,
        since: Timestamp,
    ) -> Result<Vec<Dimensions>, StoreError>;

    /// The tasks whose running run worker `key` holds.
    async fn worker_runs(&mut self, key: &WorkerKey) -> Result<Vec<TaskId>, StoreError>;

    /// Deletes up to `limit` worker records (with their events and runs) expired at `now`.
    async fn delete_expired_workers(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError>;

    /// Adds `runs`, claimed by worker `key` at `at`, to its history.
    async fn record_worker_runs(&mut self, key: &WorkerKey, runs: &[TaskRun], at: Timestamp) -> Result<(), StoreError>;

    /// Deletes the runs of worker `key`'s history claimed before `before`.
    async fn trim_worker_runs(&mut self, key: &WorkerKey, before: Timestamp) -> Result<(), StoreError>;

    /// Records that worker `key` claimed `runs` at `now` without reading its record, where
    /// the backend keeps claims apart and folds them into the record as it reads it
    /// ([`Worker::claimed`]), storing `first` (the record and its numbered events) if the
    /// worker has none; `false` where it does not, and the caller writes the record.
    async fn append_claims(
        &mut self,
        key: &WorkerKey,
        runs: &[TaskRun],
        now: Timestamp,
        first: impl FnOnce() -> (Worker, Vec<(u64, WorkerEvent)>),
    ) -> Result<bool, StoreError>;
}

/// A change an operator (or the worker itself) makes to a worker.
#[derive(Debug, Clone)]
pub enum WorkerChange {
    /// Taskcluster's quarantineWorker: no claims until `until` (a time not ahead lifts it).
    Quarantine {
        /// The quarantine's end.
        until: Timestamp,
        /// Why.
        info: String,
    },
    /// Finish the runs, take no more, exit.
    Terminate,
    /// The worker says it exited after being asked to terminate.
    Exited,
    /// Taskcluster's declareWorker: recorded (created when unknown), kept until `expires`.
    Declare {
        /// When the record may be deleted, if given.
        expires: Option<Timestamp>,
    },
    /// An operator puts the worker in maintenance (with why), or takes it out (`None`).
    Maintain {
        /// Why, or `None` to end it.
        message: Option<String>,
    },
    /// The worker posts an event about itself.
    Post {
        /// What kind.
        kind: Posted,
        /// More words (may be empty).
        message: String,
    },
}

/// Stores `worker` with `events`, numbered on from those it recorded before.
async fn save(tx: &mut impl WriteTx, worker: &mut Worker, events: Vec<WorkerEvent>) -> Result<(), StoreError> {
    let numbered = worker.number(events);
    tx.save_worker(worker, &numbered).await
}

/// The record a worker's claim makes when the worker has none: first seen then, with its
/// events numbered.
fn first_by_claim(key: &WorkerKey, now: Timestamp, retention_ms: i64) -> (Worker, Vec<(u64, WorkerEvent)>) {
    let (mut worker, events) = Worker::first(key.clone(), Sighting::default(), now, now.plus_millis(retention_ms));
    let numbered = worker.number(events);
    (worker, numbered)
}

/// The worker `key` called: recorded (first seen, or seen again), as it is now.
pub async fn seen(
    tx: &mut impl WriteTx,
    key: &WorkerKey,
    sighting: Sighting,
    now: Timestamp,
) -> Result<Worker, StoreError> {
    sighting.check()?;
    let expires = now.plus_millis(tx.settings().queue_retention_ms());
    let (mut worker, events) = match tx.load_worker(key).await? {
        Some(mut worker) => {
            let events = worker.seen(sighting, now, expires);
            (worker, events)
        }
        None => Worker::first(key.clone(), sighting, now, expires),
    };
    save(tx, &mut worker, events).await?;
    Ok(worker)
}

/// Adds what `key` just claimed to its recent tasks (recording the worker if it is new).
/// One claim in about this many trims its worker's history (see [`record_claims`]).
const TRIM_EVERY: i64 = 64;

/// Runs on every claimWork that took something; `read` is the record when the operation
/// read it already.
pub async fn record_claims(
    tx: &mut impl WriteTx,
    key: &WorkerKey,
    claims: &[Claim],
    now: Timestamp,
    read: Option<Option<Worker>>,
) -> Result<(), StoreError> {
    if claims.is_empty() {
        return Ok(());
    }
    let runs: Vec<TaskRun> =
        claims.iter().map(|claim| TaskRun { task_id: claim.status.task_id, run_id: claim.run_id }).collect();
    let retention_ms = tx.settings().queue_retention_ms();
    tx.record_worker_runs(key, &runs, now).await?;
    // Now and then (a claim in about 64: at a millisecond that 64 divides), the worker's runs
    // older than the retention go: a history trimmed as it grows, at a small share of the
    // claims' cost. An expired worker's go with it.
    if now.millis() % TRIM_EVERY == 0 {
        tx.trim_worker_runs(key, Timestamp(now.millis().saturating_sub(retention_ms))).await?;
    }
    if tx.append_claims(key, &runs, now, || first_by_claim(key, now, retention_ms)).await? {
        return Ok(());
    }
    let loaded = match read {
        Some(worker) => worker,
        None => tx.load_worker(key).await?,
    };
    // Only the record changes (the claim's sighting was written by the service, at most every
    // few seconds): its indexed columns stay as they are, which keeps this write small.
    let (mut worker, events) = match loaded {
        Some(worker) => (worker, Vec::new()),
        None => first_by_claim(key, now, retention_ms),
    };
    worker.claimed(runs, now);
    tx.save_worker(&worker, &events).await
}

/// Applies `change` to worker `key` on behalf of `client_id`, and but for a declaration to
/// its records in the other task queues it serves (one machine), those that say so too.
pub async fn change(
    tx: &mut impl WriteTx,
    key: &WorkerKey,
    change: &WorkerChange,
    client_id: &str,
    now: Timestamp,
) -> Result<Worker, StoreError> {
    let loaded = tx.load_worker(key).await?;
    let (mut worker, events) = match (change, loaded) {
        (WorkerChange::Declare { expires }, loaded) => {
            let expires = expires.unwrap_or_else(|| now.plus_millis(tx.settings().queue_retention_ms()));
            let (mut worker, mut events) = match loaded {
                Some(worker) => (worker, Vec::new()),
                None => Worker::first(key.clone(), Sighting::default(), now, expires),
            };
            events.extend(worker.seen(Sighting::default(), now, expires));
            worker.expires = expires;
            save(tx, &mut worker, events).await?;
            return Ok(worker);
        }
        (_, None) => return Err(Rejection::from(Missing::Worker(key.clone())).into()),
        (change, Some(mut worker)) => {
            let events = apply(&mut worker, change, client_id, now)?;
            (worker, events)
        }
    };
    save(tx, &mut worker, events).await?;
    for sibling in worker.siblings() {
        let Some(mut record) = tx.load_worker(&sibling).await? else { continue };
        if !worker.is_sibling(&record) {
            continue;
        }
        let events = apply(&mut record, change, client_id, now)?;
        save(tx, &mut record, events).await?;
    }
    Ok(worker)
}

/// What `change` (not a declaration) does to one record.
fn apply(
    worker: &mut Worker,
    change: &WorkerChange,
    client_id: &str,
    now: Timestamp,
) -> Result<Vec<WorkerEvent>, StoreError> {
    Ok(match change {
        WorkerChange::Quarantine { until, info } => worker.quarantine(*until, info.clone(), client_id, now)?,
        WorkerChange::Terminate => worker.request_termination(client_id, now),
        WorkerChange::Exited => worker.exited(now),
        WorkerChange::Maintain { message } => worker.maintain(message.clone(), Some(client_id), now)?,
        WorkerChange::Post { kind, message } => worker.posted(*kind, message.clone(), client_id, now)?,
        WorkerChange::Declare { .. } => Vec::new(),
    })
}

/// Marks missing the heartbeating workers silent since before `cutoff` (at most `limit`) and
/// ends their running runs at once (`claim-expired`, retried while retries remain); says how
/// many workers it marked.
pub async fn lose_silent(
    tx: &mut impl WriteTx,
    cutoff: Timestamp,
    now: Timestamp,
    limit: usize,
) -> Result<usize, StoreError> {
    let silent = tx.silent_workers(cutoff, limit).await?;
    let mut lost = 0;
    for key in silent {
        let Some(mut worker) = tx.load_worker(&key).await? else { continue };
        let events = worker.lose(cutoff, now);
        if events.is_empty() {
            continue;
        }
        lost += 1;
        save(tx, &mut worker, events).await?;
        let name = worker_name(&key.worker_group, &key.worker_id);
        for task_id in tx.worker_runs(&key).await? {
            let mut row = load_existing(tx, task_id).await?;
            step(tx, &mut row, now, |task| {
                let ours = task.running_worker().as_deref() == Some(name.as_str());
                Ok(ours.then(|| task.lose_claim(now)).flatten().unwrap_or_else(Effects::none))
            })
            .await?;
        }
    }
    Ok(lost)
}
