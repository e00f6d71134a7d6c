//! What a server hears from the others, on one dedicated connection: the queues their commits
//! gave pending work (so a worker long-polling here is woken within milliseconds), the workers
//! whose records they changed (quarantine, termination, maintenance), live logs that grew, and new
//! positioned outbox rows (tailed into this server's feed, so its event stream carries every
//! server's messages). The same connection holds the publishing lock when this server is the
//! one publishing to the bus: it is released by the database when the connection dies.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::NoTls;
use postgres::fallible_iterator::FallibleIterator;
use tokio::sync::{broadcast, watch};

use super::outbox::{OUTBOX_CHANNEL, PUBLISH_LOCK, Tail};
use super::{LOG_CHANNEL, PgConn, RemoteWork, WAKE_CHANNEL, WORKER_CHANNEL};
use crate::StoreError;

/// How often the listener checks whether the store is gone or wants to publish.
const POLL: Duration = Duration::from_millis(200);
/// Longest wait between reconnection attempts while the database is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The listener's shared state.
pub(crate) struct Listener {
    pub(crate) config: postgres::Config,
    /// This server's name in wake-up notifications (its own are already handled locally).
    pub(crate) server: String,
    pub(crate) wake: broadcast::Sender<RemoteWork>,
    pub(crate) tail: Arc<Tail>,
    /// Set when this server's publisher wants to publish.
    pub(crate) wants_to_publish: Arc<AtomicBool>,
    /// Whether this server holds the publishing lock.
    pub(crate) publishing: watch::Sender<bool>,
    /// Turns false when the store is dropped; the thread then ends.
    pub(crate) listening: Arc<AtomicBool>,
}

/// Starts the listener thread.
pub(crate) fn start(listener: Listener) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("shoal-pg-listen".into())
        .spawn(move || run(&listener))
        .map(|_| ())
        .map_err(|err| StoreError::Internal(format!("starting the listener: {err}")))
}

fn run(listener: &Listener) {
    let mut backoff = Duration::from_millis(100);
    let mut first = true;
    while listener.listening.load(Ordering::Relaxed) {
        let mut client = match listener.config.connect(NoTls).and_then(|mut client| {
            client.batch_execute(&format!(
                "LISTEN {WAKE_CHANNEL}; LISTEN {OUTBOX_CHANNEL}; LISTEN {LOG_CHANNEL}; LISTEN {WORKER_CHANNEL}"
            ))?;
            Ok(client)
        }) {
            Ok(client) => PgConn::new(client),
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for other servers' work; retrying");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        if !first {
            // Whatever was notified while we were away is lost: have everyone look again.
            let _ = listener.wake.send(RemoteWork::Anywhere);
        }
        first = false;
        if let Err(err) = serve(listener, &mut client) {
            tracing::warn!(error = %err, "the listening connection failed; reconnecting");
        }
        listener.publishing.send_replace(false);
    }
}

/// Serves one connection until it fails or the store is dropped.
fn serve(listener: &Listener, conn: &mut PgConn) -> Result<(), StoreError> {
    listener.tail.catch_up(conn)?;
    while listener.listening.load(Ordering::Relaxed) {
        if listener.wants_to_publish.load(Ordering::Relaxed) && !*listener.publishing.borrow() {
            let won: bool = conn.client.query_one("SELECT pg_try_advisory_lock($1)", &[&PUBLISH_LOCK])?.get(0);
            if won {
                tracing::info!("this server publishes the outbox");
                listener.publishing.send_replace(true);
            }
        }
        let mut notifications = Vec::new();
        let first = conn.client.notifications().timeout_iter(POLL).next()?;
        if let Some(notification) = first {
            notifications.push(notification);
            // Whatever else has arrived is served with it (one tail for many steps).
            notifications.extend(conn.client.notifications().iter().collect::<Vec<_>>()?);
        } else if conn.client.is_closed() {
            return Err(StoreError::Unavailable("listening connection closed".into()));
        }
        let mut tail = false;
        for notification in &notifications {
            if notification.channel() == OUTBOX_CHANNEL {
                tail = true;
            } else if notification.channel() == LOG_CHANNEL {
                if let Some(grown) = remote_log(notification.payload(), &listener.server) {
                    let _ = listener.wake.send(grown);
                }
            } else if notification.channel() == WORKER_CHANNEL {
                if let Some(changed) = remote_worker(notification.payload(), &listener.server) {
                    let _ = listener.wake.send(changed);
                }
            } else if let Some(queue) = remote_queue(notification.payload(), &listener.server) {
                // Nobody waiting is fine.
                let _ = listener.wake.send(RemoteWork::Queue(queue.to_owned()));
            }
        }
        if tail {
            listener.tail.catch_up(conn)?;
        }
    }
    Ok(())
}

/// The live log a growth notification names, unless this server sent it.
fn remote_log(payload: &str, server: &str) -> Option<RemoteWork> {
    let mut parts = payload.split(' ');
    let (sender, task_id, run_id, size) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if sender == server {
        return None;
    }
    let task_id = shoal_engine::TaskId::parse(task_id)?;
    Some(RemoteWork::Log { task_id, run_id: run_id.parse().ok()?, size: size.parse().ok()? })
}

/// The worker a change notification names, unless this server sent it.
fn remote_worker(payload: &str, server: &str) -> Option<RemoteWork> {
    let mut parts = payload.splitn(4, ' ');
    let (sender, task_queue_id, worker_group, worker_id) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if sender == server {
        return None;
    }
    Some(RemoteWork::Worker(shoal_engine::worker::WorkerKey {
        task_queue_id: task_queue_id.to_owned(),
        worker_group: worker_group.to_owned(),
        worker_id: worker_id.to_owned(),
    }))
}

/// The queue a wake-up names, unless this server sent it (its workers were woken locally).
fn remote_queue<'a>(payload: &'a str, server: &str) -> Option<&'a str> {
    match payload.split_once(' ') {
        Some((sender, _)) if sender == server => None,
        Some((_, queue)) => Some(queue),
        None => Some(payload),
    }
}

#[cfg(test)]
mod tests {
    use shoal_engine::worker::WorkerKey;

    use super::*;

    #[test]
    fn own_wake_ups_are_ignored() {
        assert_eq!(remote_queue("a1 prov/wt", "a1"), None);
        assert_eq!(remote_queue("b2 prov/wt", "a1"), Some("prov/wt"));
        assert_eq!(remote_queue("prov/wt", "a1"), Some("prov/wt"));
        assert!(remote_log("a1 fN1SbArXTPSVFNUvaOlinQ 0 17", "a1").is_none(), "its own growth");
        let grown = remote_log("b2 fN1SbArXTPSVFNUvaOlinQ 3 17", "a1");
        assert!(matches!(grown, Some(RemoteWork::Log { run_id: 3, size: 17, .. })), "{grown:?}");
        assert!(remote_log("b2 not-a-slugid 3 17", "a1").is_none());
        assert_eq!(remote_worker("a1 prov/wt g w", "a1"), None, "its own change");
        let changed = remote_worker("b2 prov/wt g w", "a1");
        let key =
            |id: &str| WorkerKey { task_queue_id: "prov/wt".into(), worker_group: "g".into(), worker_id: id.into() };
        assert_eq!(changed, Some(RemoteWork::Worker(key("w"))));
        assert_eq!(remote_worker("b2 prov/wt g", "a1"), None, "a worker id is missing");
    }
}
