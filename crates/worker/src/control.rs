//! What the server tells a running worker besides work: heartbeats answer whether to
//! terminate, and the event stream says at once when a run this worker holds ended by an
//! exception (canceled, deadline, a blocked graph), so its process stops within a second
//! rather than at the next reclaim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_client::{Beat, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::WorkerConfig;
use crate::health::Verdict;

/// Pause before calling again after a failed heartbeat or a lost event stream.
const RETRY: Duration = Duration::from_secs(1);
/// Heartbeat interval until the server says otherwise.
const FIRST_INTERVAL: Duration = Duration::from_secs(10);

/// The runs this worker holds, each with the token that revokes it.
#[derive(Clone, Default)]
pub(crate) struct Held(Arc<Mutex<HashMap<(String, u32), CancellationToken>>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u32), CancellationToken>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds a run; the token is cancelled when the server revokes it.
    pub(crate) fn hold(&self, task_id: &str, run_id: u32) -> CancellationToken {
        let token = CancellationToken::new();
        self.lock().insert((task_id.to_owned(), run_id), token.clone());
        token
    }

    /// Lets a run go (it was reported or revoked).
    pub(crate) fn release(&self, task_id: &str, run_id: u32) {
        self.lock().remove(&(task_id.to_owned(), run_id));
    }

    /// Revokes a run, when it is held.
    fn revoke(&self, task_id: &str, run_id: u32) {
        if let Some(token) = self.lock().get(&(task_id.to_owned(), run_id)) {
            token.cancel();
        }
    }
}

/// Heartbeats until `done`, at the interval the server asks for and when the named caches
/// held or the health check's verdict change; cancels `terminate` when the server asks this
/// worker to stop.
pub(crate) async fn heartbeat(
    client: Client,
    config: WorkerConfig,
    mut health: Option<watch::Receiver<Verdict>>,
    terminate: CancellationToken,
    done: CancellationToken,
) {
    let mut every = FIRST_INTERVAL;
    loop {
        let caches = config.cache.names();
        let verdict = health.as_mut().map(|verdict| verdict.borrow_and_update().clone());
        let beat = Beat {
            dimensions: &config.dimensions,
            caches: &caches,
            maintenance: verdict.as_ref().map(Option::as_deref),
            exiting: false,
        };
        // Each queue's record is kept alive; an answer's standing holds for all of them.
        let mut answer = None;
        for queue in config.queues() {
            let beaten = client.heartbeat(queue, &config.worker_group, &config.worker_id, &beat).await;
            let failed = beaten.is_err();
            answer = Some(beaten);
            if failed {
                break;
            }
        }
        let wait = match answer.expect("one queue at least") {
            Ok(standing) => {
                if standing.terminate && !terminate.is_cancelled() {
                    tracing::info!("the server asks this worker to terminate: finishing the running tasks");
                    terminate.cancel();
                }
                every = Duration::from_secs_f64(standing.heartbeat_every.clamp(0.1, 600.0));
                every
            }
            Err(err) => {
                tracing::warn!(error = %err, "heartbeat failed; retrying");
                RETRY.min(every)
            }
        };
        let verdict_changed = async {
            let Some(verdict) = health.as_mut() else { return std::future::pending().await };
            if verdict.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
            // The registry lists the named caches a worker holds: told soon after they change.
            () = config.cache.named_changed() => {}
            // Maintenance is said at once.
            () = verdict_changed => {}
        }
    }
}

/// Revokes at once each held run the event stream says ended by an exception; reconnects
/// after a lost stream (meanwhile refused reclaims still revoke runs) until `done`.
pub(crate) async fn listen_for_exceptions(client: Client, config: WorkerConfig, held: Held, done: CancellationToken) {
    let bindings: Vec<(String, String)> = config
        .queues()
        .map(|queue| {
            let (provisioner_id, worker_type) = queue.split_once('/').unwrap_or_default();
            let (group, id) = (&config.worker_group, &config.worker_id);
            ("task-exception".to_owned(), format!("primary.*.*.{group}.{id}.{provisioner_id}.{worker_type}.#"))
        })
        .collect();
    loop {
        let connected = tokio::select! {
            () = done.cancelled() => return,
            connected = client.listen(&bindings) => connected,
        };
        match connected {
            Ok(mut stream) => loop {
                let next = tokio::select! {
                    () = done.cancelled() => return,
                    next = stream.next_message() => next,
                };
                match next {
                    Ok(Some(message)) => {
                        let payload = &message["payload"];
                        let task_id = payload["status"]["taskId"].as_str().unwrap_or_default();
                        let run_id = payload["runId"].as_u64().and_then(|run| u32::try_from(run).ok());
                        if let Some(run_id) = run_id {
                            tracing::info!(
                                task.id = task_id,
                                run.id = run_id,
                                "the run ended by an exception; stopping it"
                            );
                            held.revoke(task_id, run_id);
                        }
                    }
                    Ok(None) => break,
                    Err(err) => {
                        tracing::warn!(error = %err, "the event stream failed; reconnecting");
                        break;
                    }
                }
            },
            Err(err) => tracing::warn!(error = %err, "cannot listen for canceled runs; retrying"),
        }
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}
