//! Telling the other servers which queues gained pending work and which workers' records
//! changed, so their waiting workers are woken (they hear it in `listen.rs`).

use std::sync::mpsc;

use shoal_engine::worker::WorkerKey;

use super::{PgPool, WAKE_CHANNEL, WORKER_CHANNEL};
use crate::StoreError;

/// What one notification tells the other servers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Note {
    /// This queue gained pending work.
    Pending(String),
    /// This worker's record changed in a way that may change whether it may claim.
    Worker(WorkerKey),
}

impl Note {
    /// Its channel, and its payload after the sending server's name.
    fn channel_and_payload(&self) -> (&'static str, String) {
        match self {
            Note::Pending(queue) => (WAKE_CHANNEL, queue.clone()),
            Note::Worker(key) => {
                (WORKER_CHANNEL, format!("{} {} {}", key.task_queue_id, key.worker_group, key.worker_id))
            }
        }
    }
}

/// Starts the thread that sends `notes` to the other servers. Notes arriving while it sends
/// go together. Ends when `notes` closes.
pub(crate) fn start(pool: PgPool, server: String, notes: mpsc::Receiver<Vec<Note>>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("shoal-pg-notify".into())
        .spawn(move || run_notifier(&pool, &server, &notes))
        .map(|_| ())
        .map_err(|err| StoreError::Internal(format!("starting the wake-up notifier: {err}")))
}

fn run_notifier(pool: &PgPool, server: &str, notes: &mpsc::Receiver<Vec<Note>>) {
    while let Ok(first) = notes.recv() {
        let mut all = first;
        all.extend(notes.try_iter().flatten());
        all.sort_unstable();
        all.dedup();
        let (channels, payloads): (Vec<&str>, Vec<String>) = all.iter().map(Note::channel_and_payload).unzip();
        // Outside any transaction: a notifying transaction holds a database-wide lock through
        // its commit, so writes that notified would commit one by one. Lost when the database
        // is away: other servers' workers then find the work at their next long-poll.
        let sent = pool.get().and_then(|mut conn| {
            conn.query(
                "SELECT pg_notify(channel, $1 || ' ' || payload) FROM unnest($2::text[], $3::text[]) AS n(channel, payload)",
                &[&server, &channels, &payloads],
            )?;
            Ok(())
        });
        if let Err(err) = sent {
            tracing::warn!(error = %err, "could not wake other servers' workers");
        }
    }
}
