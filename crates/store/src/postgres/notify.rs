//! Telling the other servers which queues gained pending work, so their waiting workers are
//! woken (they hear it in `listen.rs`).

use std::sync::mpsc;

use super::{PgPool, WAKE_CHANNEL};
use crate::StoreError;

/// Starts the thread that tells other servers which queues gained pending work (their
/// waiting workers are woken). Queues arriving while it sends go together. Ends when
/// `woken` closes.
pub(crate) fn start(pool: PgPool, server: String, woken: mpsc::Receiver<Vec<String>>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("shoal-pg-notify".into())
        .spawn(move || run_notifier(&pool, &server, &woken))
        .map(|_| ())
        .map_err(|err| StoreError::Internal(format!("starting the wake-up notifier: {err}")))
}

fn run_notifier(pool: &PgPool, server: &str, woken: &mpsc::Receiver<Vec<String>>) {
    while let Ok(first) = woken.recv() {
        let mut queues = first;
        queues.extend(woken.try_iter().flatten());
        queues.sort_unstable();
        queues.dedup();
        // Outside any transaction: a notifying transaction holds a database-wide lock through
        // its commit, so writes that notified would commit one by one. Lost when the database
        // is away: other servers' workers then find the work at their next long-poll.
        let sent = pool.get().and_then(|mut conn| {
            conn.query(
                "SELECT pg_notify($1, $2 || ' ' || queue) FROM unnest($3::text[]) AS queue",
                &[&WAKE_CHANNEL, &server, &queues],
            )?;
            Ok(())
        });
        if let Err(err) = sent {
            tracing::warn!(error = %err, "could not wake other servers' workers");
        }
    }
}
