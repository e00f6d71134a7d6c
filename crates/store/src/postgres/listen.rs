//! Cross-server wake-up: a dedicated connection LISTENs for the queues other servers' commits
//! gave pending work, so a worker long-polling here is woken within milliseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::NoTls;
use postgres::fallible_iterator::FallibleIterator;
use tokio::sync::broadcast;

use super::{WAKE_ALL, WAKE_CHANNEL};
use crate::StoreError;

/// How often the listener checks whether the store is gone.
const POLL: Duration = Duration::from_millis(500);
/// Longest wait between reconnection attempts while the database is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Starts the listener thread; it ends once `listening` turns false.
pub(crate) fn start(
    config: postgres::Config,
    wake: broadcast::Sender<String>,
    listening: Arc<AtomicBool>,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("shoal-pg-listen".into())
        .spawn(move || run(&config, &wake, &listening))
        .map(|_| ())
        .map_err(|err| StoreError::Other(format!("starting the listener: {err}")))
}

fn run(config: &postgres::Config, wake: &broadcast::Sender<String>, listening: &AtomicBool) {
    let mut backoff = Duration::from_millis(100);
    let mut first = true;
    while listening.load(Ordering::Relaxed) {
        let mut client = match config.connect(NoTls).and_then(|mut client| {
            client.batch_execute(&format!("LISTEN {WAKE_CHANNEL}"))?;
            Ok(client)
        }) {
            Ok(client) => client,
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
            let _ = wake.send(WAKE_ALL.to_owned());
        }
        first = false;
        while listening.load(Ordering::Relaxed) {
            let next = client.notifications().timeout_iter(POLL).next();
            match next {
                Ok(Some(notification)) => {
                    // Nobody waiting is fine.
                    let _ = wake.send(notification.payload().to_owned());
                }
                Ok(None) => {
                    if client.is_closed() {
                        break;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "the listening connection failed; reconnecting");
                    break;
                }
            }
        }
    }
}
