//! The loop that fires claim expiries and deadlines from the store's due-time indexes, ends
//! the runs of workers gone silent, and removes expired artifacts and tasks.

use std::future::Future;

use shoal_store::StoreError;

use crate::{Service, now};

/// Runs `step` (one batch) again at once while it fills a batch, at most `max_batches` times:
/// a full batch means more is waiting.
async fn drain<F, Fut>(max_batches: usize, mut step: F, what: &str)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, StoreError>>,
{
    for _ in 0..max_batches {
        match step().await {
            Ok(n_done) if n_done >= DUE_BATCH => {}
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(error = %err, "{what} failed; retrying next tick");
                return;
            }
        }
    }
}

/// Due transitions fired per store step; more are fired at once in the next step.
const DUE_BATCH: usize = 500;
/// Pending-index entries looked at per tick for being idle: 400 a second, so a fleet's
/// 50,000 dimension sets are all looked at every two minutes, at a few percent of a core.
const TIDY_BATCH: usize = 100;
/// Most expiry batches per tick: the sweep keeps up with a fast fleet (10,000 tasks a
/// tick) and still yields to the other due work.
const EXPIRY_BATCHES_PER_TICK: usize = 20;

/// Fires due transitions every `config.due_interval` until `shutdown` resolves.
pub async fn run_due_loop(queue: Service, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(queue.config().due_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        if let Err(err) = queue.expire_artifacts(now(), DUE_BATCH).await {
            tracing::warn!(error = %err, "expiring artifacts failed; retrying next tick");
        }
        // Deleting must keep up with creating, or the disk fills; a larger backlog of expired
        // tasks drains over several ticks.
        let expire = || queue.expire_tasks(now(), DUE_BATCH);
        drain(EXPIRY_BATCHES_PER_TICK, expire, "expiring tasks").await;
        if let Err(err) = queue.tidy_pending_index(TIDY_BATCH).await {
            tracing::warn!(error = %err, "tidying the pending index failed; retrying next tick");
        }
        drain(usize::MAX, || queue.lose_silent_workers(DUE_BATCH), "finding missing workers").await;
        drain(usize::MAX, || queue.fire_due(now(), DUE_BATCH), "firing due transitions").await;
    }
}
