//! Shoal's generic worker: long-polls claimWork for its queues (one capacity for all), runs up
//! to `capacity` tasks at once, streams their output to the server, uploads their artifacts
//! and reports how they ended. It reaches the server only through the HTTP client, as a
//! worker on another machine would. On shutdown it stops claiming and hands its runs back
//! (`worker-shutdown`, retried); asked by the server to terminate, it finishes its runs
//! first. It heartbeats, and hears of its runs' cancels on the event stream (`control.rs`).

mod artifacts;
mod cache;
mod chain_of_trust;
mod control;
mod environment;
mod health;
mod image;
pub mod limits;
mod logsink;
mod memory;
mod mount;
mod netns;
pub mod payload;
mod peer;
mod process;
mod proxy;
mod run;
mod sandbox;
mod unpack;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use shoal_client::{Beat, ClaimingWorker, Client};
use tokio_util::sync::CancellationToken;

pub use crate::cache::Cache;
pub use crate::chain_of_trust::SigningKey;
use crate::control::Held;
pub use crate::health::HealthCheck;
pub use crate::image::Registries;
pub use crate::limits::SlotLimits;
pub use crate::sandbox::{Isolation, SLOT_UID_BASE, SandboxOptions};

/// Settings of one worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `provisionerId/workerType`.
    pub task_queue_id: String,
    /// Further task queues it serves after the first, sharing its capacity (one worker).
    pub more_queues: Vec<String>,
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
    /// How tasks are contained.
    pub isolation: Isolation,
    /// What each slot's commands may use.
    pub limits: SlotLimits,
    /// Mount downloads and named caches, kept between tasks ([`Cache::open`] in
    /// `work_dir/cache`).
    pub cache: Arc<Cache>,
    /// A command whose failure puts the worker in maintenance, if any.
    pub health_check: Option<HealthCheck>,
    /// The key that signs runs' chain-of-trust records, if it has one.
    pub signing_key: Option<Arc<SigningKey>>,
    /// Where images named in payloads are pulled from.
    pub registries: Registries,
}

impl WorkerConfig {
    /// Every task queue it serves, its first first.
    pub fn queues(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.task_queue_id).chain(&self.more_queues)
    }
}

/// Guards what the worker holds from the tasks it runs as its own user: its memory and
/// environment (its credentials) become unreadable to its other processes (not dumpable, so
/// `/proc/<pid>/environ` and `mem` belong to root; each task's `exec` makes the task dumpable
/// again), and `work_dir` is made (or tightened to) 0700, refused when another user owns it
/// (a shared `/tmp` could hold one planted by someone else).
///
/// # Errors
/// When the directory cannot be made, is not ours, or the process cannot be marked.
pub fn guard(work_dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    nix::sys::prctl::set_dumpable(false).map_err(std::io::Error::from)?;
    std::fs::create_dir_all(work_dir)?;
    let metadata = std::fs::symlink_metadata(work_dir)?;
    if !metadata.is_dir() || metadata.uid() != nix::unistd::geteuid().as_raw() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("the work directory {} is not a directory of this user's", work_dir.display()),
        ));
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(work_dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Gives the worker the dimension `id: <workerId>` (Swarming's bots have it), so a task can
/// name one machine, unless its configuration says otherwise.
fn with_id_dimension(config: &mut WorkerConfig) {
    if !config.dimensions.is_object() {
        config.dimensions = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(dimensions) = &mut config.dimensions {
        dimensions.entry("id").or_insert_with(|| Value::Array(vec![Value::String(config.worker_id.clone())]));
    }
}

/// Pause after a failed claim before trying again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// Claims and runs tasks until `shutdown` resolves (then hands back what is running) or the
/// server asks this worker to terminate (then finishes what is running, says it exits, and
/// returns).
pub async fn run(client: Client, mut config: WorkerConfig, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    with_id_dimension(&mut config);
    if matches!(config.isolation, Isolation::Bubblewrap(_)) && nix::unistd::geteuid().is_root() {
        // Inherited by every command; each slot user is held to it, root (this worker) is not.
        if let Err(err) = limits::hold_slot_users(config.limits.processes) {
            tracing::warn!(error = %err, "cannot set the slots' process limit (RLIMIT_NPROC)");
        }
    }
    let stopping = CancellationToken::new();
    let terminate = CancellationToken::new();
    let done = CancellationToken::new();
    let held = Held::default();
    // Checked once before the first claim: a worker that starts unhealthy claims nothing.
    let mut health = match config.health_check.clone() {
        Some(check) => {
            let first = health::verdict(&check).await;
            if let Some(why) = &first {
                tracing::warn!(reason = %why, "unhealthy: in maintenance, claiming nothing");
            }
            let (verdicts, verdict) = tokio::sync::watch::channel(first);
            tokio::spawn(health::keep_checking(check, verdicts, done.clone()));
            Some(verdict)
        }
        None => None,
    };
    let beats = health.clone();
    tokio::spawn(control::heartbeat(client.clone(), config.clone(), beats, terminate.clone(), done.clone()));
    tokio::spawn(control::listen_for_exceptions(client.clone(), config.clone(), held.clone(), done.clone()));
    let mut running = tokio::task::JoinSet::new();
    // Each running task has a slot (and the slot's directory); finished tasks give theirs back.
    let mut free_slots: Vec<usize> = (0..config.capacity as usize).rev().collect();
    let shut_down = loop {
        while let Some(done) = running.try_join_next() {
            free_slots.extend(done.ok());
        }
        let free = free_slots.len() as u32;
        if free == 0 {
            tokio::select! {
                () = &mut shutdown => break true,
                () = terminate.cancelled() => break false,
                done = running.join_next() => {
                    free_slots.extend(done.and_then(Result::ok));
                    continue;
                }
            }
        }
        // In maintenance by its own check: claims nothing until the check passes again.
        if let Some(verdict) = health.as_mut()
            && verdict.borrow_and_update().is_some()
        {
            tokio::select! {
                () = &mut shutdown => break true,
                () = terminate.cancelled() => break false,
                _ = verdict.changed() => continue,
                done = running.join_next(), if !running.is_empty() => {
                    free_slots.extend(done.and_then(Result::ok));
                    continue;
                }
            }
        }
        let caches = config.cache.names();
        let worker = ClaimingWorker {
            worker_group: &config.worker_group,
            worker_id: &config.worker_id,
            dimensions: &config.dimensions,
            caches: Some(&caches),
            more_queues: &config.more_queues,
        };
        let answer = tokio::select! {
            () = &mut shutdown => break true,
            () = terminate.cancelled() => break false,
            answer = client.claim_for_worker(&config.task_queue_id, &worker, free) => answer,
        };
        match answer {
            Ok(answer) => {
                if answer.terminate {
                    tracing::info!("the server asks this worker to terminate: finishing the running tasks");
                    terminate.cancel();
                }
                for claim in answer.tasks {
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
                    let (config, stopping, held) = (config.clone(), stopping.clone(), held.clone());
                    running.spawn(async move {
                        run::run_claim(client, config, claim, slot, stopping, held).await;
                        slot
                    });
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "claimWork failed; retrying");
                tokio::select! {
                    () = &mut shutdown => break true,
                    () = tokio::time::sleep(CLAIM_RETRY) => {}
                }
            }
        }
    };
    let shut_down = shut_down || {
        tracing::info!(running = running.len(), "terminating: waiting for the running tasks");
        let finished = async { while running.join_next().await.is_some() {} };
        tokio::select! {
            () = &mut shutdown => true,
            () = finished => false,
        }
    };
    let (queue, group, id) = (&config.task_queue_id, &config.worker_group, &config.worker_id);
    if shut_down {
        while running.try_join_next().is_some() {}
        tracing::info!(running = running.len(), "shutting down: stopping running tasks and handing them back");
        stopping.cancel();
        while running.join_next().await.is_some() {}
        // Said so, the registry shows it exited rather than missing (needs
        // queue:post-worker-event:<queue>/<group>/<id>#shutdown).
        if let Err(err) = client.post_worker_event(queue, group, id, "shutdown", "shut down by a signal").await {
            tracing::warn!(error = %err, "telling the server this worker shuts down failed");
        }
    } else {
        let caches = config.cache.names();
        let beat = Beat { dimensions: &config.dimensions, caches: &caches, maintenance: None, exiting: true };
        match client.heartbeat(queue, group, id, &beat).await {
            Ok(_) => tracing::info!("terminated as asked"),
            Err(err) => tracing::warn!(error = %err, "telling the server this worker exits failed"),
        }
    }
    done.cancel();
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_work_directory_is_private_and_the_process_not_dumpable() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
        super::guard(&work).unwrap();
        assert_eq!(std::fs::metadata(&work).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(super::guard(&file).is_err(), "not a directory");
    }
}
