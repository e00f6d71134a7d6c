//! The queue's worker calls: sightings (claims, heartbeats, reclaims), operators' changes, and
//! heartbeating workers found missing.

use shoal_engine::Timestamp;
use shoal_engine::worker::{Sighting, Worker, WorkerKey};
use shoal_store::operation::{ChangeWorker, LoseSilentWorkers, WorkerSeen};
use shoal_store::{StoreError, WorkerChange};

use crate::fleet::Standing;
use crate::{Inner, Service, now};

impl Service {
    /// Records that worker `key` called, as `sighting` says (written at most every
    /// [`sighting_interval`](crate::ServiceConfig::sighting_interval) unless it changed); answers
    /// whether it may claim.
    ///
    /// # Errors
    /// As the store (Invalid for a bad sighting).
    pub async fn worker_seen(&self, key: &WorkerKey, sighting: Sighting) -> Result<Standing, StoreError> {
        let now = now();
        if let Some(standing) = self.inner.fleet.fresh(key, &sighting, now) {
            return Ok(standing);
        }
        let writing = self.inner.fleet.writing(key);
        let worker =
            self.inner.store.run(WorkerSeen { key: key.clone(), sighting: sighting.clone() }, now).await?.value;
        let before = writing.written(&sighting, &worker, now);
        let standing = worker.standing(now);
        if sighting.maintenance.is_some() && before.is_none_or(|before| before.maintenance != standing.maintenance) {
            // Out of its maintenance, a worker's waiting claims look again at once; other
            // servers forget what they remember of it either way.
            if !standing.maintenance {
                self.inner.wakers.wake_queue(&key.task_queue_id);
            }
            self.inner.store.workers_changed(vec![key.clone()]);
        }
        Ok(standing)
    }

    /// A worker's heartbeat; `exiting` says it exits now, as it was asked to.
    ///
    /// # Errors
    /// As the store.
    pub async fn heartbeat(&self, key: &WorkerKey, sighting: Sighting, exiting: bool) -> Result<Standing, StoreError> {
        if exiting {
            let worker = self.change_worker(key.clone(), WorkerChange::Exited, String::new()).await?;
            return Ok(worker.standing(now()));
        }
        self.worker_seen(key, sighting).await
    }

    /// Quarantines, terminates or declares a worker on behalf of `client_id`; the claims its
    /// queue's workers are waiting on look again, here and on the other servers, so a worker
    /// asked to stop hears it at once.
    ///
    /// # Errors
    /// As the store (NotFound for an unknown worker, but declare creates it).
    pub async fn change_worker(
        &self,
        key: WorkerKey,
        change: WorkerChange,
        client_id: String,
    ) -> Result<Worker, StoreError> {
        let now = now();
        let writing = self.inner.fleet.writing(&key);
        let worker = self.inner.store.run(ChangeWorker { key, change, client_id }, now).await?.value;
        writing.changed(&worker, now);
        self.inner.wakers.wake_queue(&worker.key.task_queue_id);
        // The change reached its records in the other queues it serves too.
        let siblings: Vec<WorkerKey> = worker.siblings().collect();
        for sibling in &siblings {
            self.inner.changed_elsewhere(sibling);
        }
        self.inner.store.workers_changed(std::iter::once(worker.key.clone()).chain(siblings).collect());
        Ok(worker)
    }

    /// Marks missing the heartbeating workers silent past the dead-after time (at most
    /// `limit`) and ends their runs at once, retried elsewhere; says how many it marked.
    ///
    /// # Errors
    /// As the store.
    pub async fn lose_silent_workers(&self, limit: usize) -> Result<usize, StoreError> {
        let now = now();
        let dead_after = i64::try_from(self.inner.config.worker_dead_after.as_millis()).unwrap_or(i64::MAX);
        let cutoff = Timestamp(now.millis().saturating_sub(dead_after));
        self.run_at(LoseSilentWorkers { cutoff, limit }, now).await
    }
}

impl Inner {
    /// `key`'s record was changed by another operation (a change reaching a sibling record,
    /// or another server's): what is remembered of it is stale, and its queue's claims look.
    pub(crate) fn changed_elsewhere(&self, key: &WorkerKey) {
        self.fleet.forget(key);
        self.wakers.wake_queue(&key.task_queue_id);
    }
}
