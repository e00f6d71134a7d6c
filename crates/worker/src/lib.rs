//! Shoal's generic worker: long-polls claimWork for its queue, runs up to `capacity` tasks at
//! once, streams their output to the server, uploads their artifacts and reports how they
//! ended. It reaches the server only through the HTTP client, as a worker on another machine
//! would. On shutdown it stops claiming and hands its runs back (`worker-shutdown`, retried).

mod artifacts;
mod logsink;
pub mod payload;
mod process;
mod run;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use shoal_client::Client;
use tokio_util::sync::CancellationToken;

/// Settings of one worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `provisionerId/workerType`.
    pub task_queue_id: String,
    /// Worker group.
    pub worker_group: String,
    /// Worker id.
    pub worker_id: String,
    /// Dimensions this worker has (key -> values), sent with every claim.
    pub dimensions: Value,
    /// Most tasks run at once.
    pub capacity: u32,
    /// Where task directories are made.
    pub work_dir: PathBuf,
    /// Time between SIGTERM and SIGKILL when a task is stopped.
    pub grace: Duration,
}

/// Pause after a failed claim before trying again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// Claims and runs tasks until `shutdown` resolves, then hands back what is running.
pub async fn run(client: Client, config: WorkerConfig, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    let stopping = CancellationToken::new();
    let mut running = tokio::task::JoinSet::new();
    // Each running task has a slot (and the slot's directory); finished tasks give theirs back.
    let mut free_slots: Vec<usize> = (0..config.capacity as usize).rev().collect();
    loop {
        while let Some(done) = running.try_join_next() {
            free_slots.extend(done.ok());
        }
        let free = free_slots.len() as u32;
        if free == 0 {
            tokio::select! {
                () = &mut shutdown => break,
                done = running.join_next() => {
                    free_slots.extend(done.and_then(Result::ok));
                    continue;
                }
            }
        }
        let claims = tokio::select! {
            () = &mut shutdown => break,
            claims = client.claim_work(&config.task_queue_id, &config.worker_group, &config.worker_id, free, &config.dimensions) => claims,
        };
        match claims {
            Ok(claims) => {
                for claim in claims {
                    tracing::info!(task.id = %claim.status.task_id, run.id = claim.run_id, "claimed");
                    // claimWork hands out at most `free` runs, one per free slot.
                    let Some(slot) = free_slots.pop() else {
                        tracing::error!(task.id = %claim.status.task_id, "more runs claimed than free slots; the run will expire");
                        continue;
                    };
                    // The run's own credentials, when the server handed them out; the worker's
                    // otherwise (a server without them).
                    let client = match &claim.credentials {
                        Some(credentials) => client.with_credentials(Some(credentials.clone())),
                        None => client.clone(),
                    };
                    let (config, stopping) = (config.clone(), stopping.clone());
                    running.spawn(async move {
                        run::run_claim(client, config, claim, slot, stopping).await;
                        slot
                    });
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "claimWork failed; retrying");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(CLAIM_RETRY) => {}
                }
            }
        }
    }
    while running.try_join_next().is_some() {}
    tracing::info!(running = running.len(), "shutting down: stopping running tasks and handing them back");
    stopping.cancel();
    while running.join_next().await.is_some() {}
}
