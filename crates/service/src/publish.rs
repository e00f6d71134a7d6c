//! The publisher: drains the outbox into the bus in commit order, at least once, and the
//! subscriptions of the server's own event stream.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shoal_bus::Bus;
use shoal_engine::message::Message;
use shoal_engine::topic::{Binding, message_keys};
use shoal_store::Store;
use shoal_store::outbox::{Next, OutboxEntry};
use tokio::sync::{broadcast, watch};

/// Messages published per bus call.
const PUBLISH_BATCH: usize = 2048;
/// How long the publisher waits for more work before deleting what it published.
const TRIM_AFTER_IDLE: Duration = Duration::from_millis(200);
/// How often the publisher deletes what it published while it is busy.
const TRIM_EVERY: Duration = Duration::from_secs(1);
/// Longest wait between attempts while the broker is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Publishes every committed message to `bus` until `shutdown` resolves; what is left is
/// published after the next start. Meanwhile the bus is kept connected with its exchanges
/// declared, so consumers can bind before the first message (a broker that is down is
/// retried in the background; nothing else waits for it).
pub async fn run_publisher(store: Store, bus: Bus, shutdown: impl Future<Output = ()>) {
    tokio::select! {
        () = publish(store, &bus, shutdown) => {}
        () = bus.keep_connected() => {}
    }
}

/// [`run_publisher`]'s publishing loop.
async fn publish(store: Store, bus: &Bus, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    tracing::info!(bus = %bus.describe(), "publishing events");
    let feed = store.outbox();
    'turn: loop {
        // With several servers on one database one publishes; the others wait their turn,
        // dropping from memory what the publishing server takes care of.
        let mut next = loop {
            tokio::select! {
                () = &mut shutdown => return,
                turn = store.publishing_turn() => match turn {
                    Ok(next) => break next,
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot take the publishing turn; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
                () = feed.changed() => feed.forget_buffered(),
            }
        };
        let mut untrimmed = false;
        let mut trimmed_at = tokio::time::Instant::now();
        loop {
            if !store.is_publishing() {
                tracing::warn!("another server publishes the outbox now");
                continue 'turn;
            }
            let entries = match feed.take(next, PUBLISH_BATCH) {
                Next::Buffered(entries) => entries,
                Next::Stored => {
                    let from = next;
                    match store.read(move |reads| reads.outbox(from, PUBLISH_BATCH)).await {
                        Ok(entries) => {
                            let entries: Vec<_> = entries.into_iter().map(Arc::new).collect();
                            feed.replay(&entries);
                            entries
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "reading the outbox failed; retrying");
                            tokio::select! {
                                () = &mut shutdown => return,
                                () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                            }
                        }
                    }
                }
                Next::Idle => {
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = feed.changed() => {}
                        // Deletes normally ride on the next write; when none comes, make one.
                        () = tokio::time::sleep(TRIM_AFTER_IDLE), if untrimmed => {
                            untrimmed = store.trim_outbox().await.is_err();
                        }
                    }
                    continue;
                }
            };
            let Some(last) = entries.last().map(|entry| entry.seq) else { continue };
            tokio::select! {
                () = &mut shutdown => return,
                () = publish_until_taken(bus, &entries) => {}
            }
            if let Some(lag) = feed.published(last) {
                metrics::histogram!("shoal_publish_lag_seconds").record(lag.as_secs_f64());
            }
            untrimmed = true;
            next = last + 1;
            // Under steady load the publisher is never idle: delete what it published now and then.
            if trimmed_at.elapsed() >= TRIM_EVERY {
                trimmed_at = tokio::time::Instant::now();
                untrimmed = store.trim_outbox().await.is_err();
            }
        }
    }
}

/// Publishes `entries`, retrying with backoff for as long as the bus refuses them.
async fn publish_until_taken(bus: &Bus, entries: &[Arc<OutboxEntry>]) {
    let messages: Vec<&Message> = entries.iter().map(|entry| &entry.message).collect();
    let mut backoff = Duration::from_millis(100);
    loop {
        match bus.publish(&messages).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(error = %err, retry_in_ms = backoff.as_millis() as u64, "publishing failed; the outbox keeps the messages");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// A live subscription to the server's own exchange.
pub struct Subscription {
    bindings: Vec<Binding>,
    tap: broadcast::Receiver<Arc<OutboxEntry>>,
    closing: watch::Receiver<bool>,
}

/// What a subscription yields next.
#[derive(Debug)]
pub enum Delivery {
    /// A matching message, with its place in the outbox.
    Message(Arc<OutboxEntry>),
    /// The subscriber fell behind and missed this many messages; it should resync.
    Missed(u64),
    /// The server is shutting down.
    Closed,
}

impl Subscription {
    /// Whether a binding matches `message`: its keys are split once for all the bindings, and
    /// only when one of them is on its exchange.
    fn wants(&self, message: &Message) -> bool {
        if !self.bindings.iter().any(|binding| binding.exchange == message.exchange) {
            return false;
        }
        let keys = message_keys(message);
        self.bindings.iter().any(|binding| binding.matches_keys(message.exchange, &keys))
    }

    pub(crate) fn new(store: &Store, bindings: Vec<Binding>, closing: watch::Receiver<bool>) -> Subscription {
        Subscription { bindings, tap: store.outbox().tap(), closing }
    }

    /// Waits for the next message any binding matches.
    pub async fn next(&mut self) -> Delivery {
        loop {
            let received = tokio::select! {
                received = self.tap.recv() => received,
                _ = self.closing.wait_for(|closing| *closing) => return Delivery::Closed,
            };
            match received {
                Ok(entry) if self.wants(&entry.message) => return Delivery::Message(entry),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n_missed)) => return Delivery::Missed(n_missed),
                Err(broadcast::error::RecvError::Closed) => return Delivery::Closed,
            }
        }
    }
}
