//! The loop that fires claim expiries and deadlines from the store's due-time indexes, and
//! removes expired artifacts and tasks.

use std::future::Future;

use crate::{Queue, now};

/// Due transitions fired per store step; more are fired at once in the next step.
const DUE_BATCH: usize = 500;
/// Most expiry batches per tick: the sweep keeps up with a fast fleet (10,000 tasks a
/// tick) and still yields to the other due work.
const EXPIRY_BATCHES_PER_TICK: usize = 20;

/// Fires due transitions every `config.due_interval` until `shutdown` resolves.
pub async fn run_due_loop(queue: Queue, shutdown: impl Future<Output = ()>) {
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
        // In batches, again at once after a full one (up to a bound per tick): deleting must
        // keep up with creating, or the disk fills; a larger backlog drains over several ticks.
        for _ in 0..EXPIRY_BATCHES_PER_TICK {
            match queue.expire_tasks(now(), DUE_BATCH).await {
                Ok(n_deleted) if n_deleted >= DUE_BATCH => continue,
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "expiring tasks failed; retrying next tick");
                    break;
                }
            }
        }
        loop {
            match queue.fire_due(now(), DUE_BATCH).await {
                // A full batch means more may be due: go again without waiting.
                Ok(n_fired) if n_fired >= DUE_BATCH => continue,
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "firing due transitions failed; retrying next tick");
                    break;
                }
            }
        }
    }
}
