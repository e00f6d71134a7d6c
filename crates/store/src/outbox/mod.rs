//! The transactional outbox's hand-off to the publisher.
//!
//! Messages are written to the outbox table in the transaction of their transition. After the
//! commit they are also handed to this feed (by SQLite's writer; on PostgreSQL by the tail of
//! positioned rows, which carries every server's messages), so the publisher normally never
//! reads them back; the table is for what the feed cannot hold (a long broker outage) and for
//! what a crash left unpublished. The publisher reports how far it got and the store deletes
//! up to there.

pub(crate) mod format;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast};

/// Most committed messages kept in memory for the publisher; beyond, it reads the table.
const MAX_BUFFERED: usize = 65_536;
/// Messages a live subscriber may fall behind by before it is told it missed some.
const TAP_CAPACITY: usize = 16_384;

pub use shoal_ops::OutboxEntry;

/// What the publisher should do next.
#[derive(Debug)]
pub enum Next {
    /// Publish these (in order, starting at the sequence asked for).
    Buffered(Vec<Arc<OutboxEntry>>),
    /// Committed messages from the sequence asked for are only in the table: read them.
    Stored,
    /// Everything committed has been taken; wait for [`OutboxFeed::changed`].
    Idle,
}

/// The committed messages awaiting publication, shared by the writer and the publisher.
#[derive(Debug)]
pub struct OutboxFeed {
    state: Mutex<FeedState>,
    changed: Notify,
    first: u64,
    /// Highest sequence stored when the store opened: those were never on the tap.
    stored_at_open: u64,
    published: AtomicU64,
    trim_requested: AtomicBool,
    tap: broadcast::Sender<Arc<OutboxEntry>>,
}

#[derive(Debug)]
struct FeedState {
    buffered: VecDeque<Arc<OutboxEntry>>,
    /// Highest sequence committed so far.
    committed: u64,
    /// Each commit's last sequence and when it committed, oldest first, until published: how
    /// long publication lags behind.
    marks: VecDeque<(u64, Instant)>,
}

/// Most commits whose times are kept for the publish lag (the rest go unmeasured).
const MAX_MARKS: usize = 4096;

impl OutboxFeed {
    /// A feed over a table holding sequences `first..=committed` (empty when `first > committed`).
    pub(crate) fn new(first: u64, committed: u64) -> OutboxFeed {
        OutboxFeed {
            state: Mutex::new(FeedState { buffered: VecDeque::new(), committed, marks: VecDeque::new() }),
            changed: Notify::new(),
            first,
            stored_at_open: committed,
            published: AtomicU64::new(first.saturating_sub(1)),
            trim_requested: AtomicBool::new(false),
            tap: broadcast::channel(TAP_CAPACITY).0,
        }
    }

    /// The first sequence not yet published when the store opened.
    #[must_use]
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Called after a commit (or, on PostgreSQL, once positioned), with messages in sequence order.
    pub(crate) fn committed(&self, entries: Vec<OutboxEntry>) {
        let Some(last) = entries.last().map(|entry| entry.seq) else { return };
        if let Ok(mut state) = self.state.lock() {
            state.committed = last;
            if state.marks.len() < MAX_MARKS {
                state.marks.push_back((last, Instant::now()));
            }
            let room = MAX_BUFFERED.saturating_sub(state.buffered.len());
            for (n, entry) in entries.into_iter().enumerate() {
                let entry = Arc::new(entry);
                // Nobody listening is fine: the tap is for whoever is connected now.
                let _ = self.tap.send(Arc::clone(&entry));
                // When full, newer messages are dropped from memory (never from the table):
                // the publisher sees the gap and reads them back.
                if n < room {
                    state.buffered.push_back(entry);
                }
            }
        }
        self.changed.notify_one();
    }

    /// Takes up to `max` committed messages starting at sequence `next`.
    pub fn take(&self, next: u64, max: usize) -> Next {
        let Ok(mut state) = self.state.lock() else { return Next::Stored };
        while state.buffered.front().is_some_and(|entry| entry.seq < next) {
            state.buffered.pop_front();
        }
        match state.buffered.front() {
            Some(entry) if entry.seq == next => {
                let n = max.min(state.buffered.len());
                Next::Buffered(state.buffered.drain(..n).collect())
            }
            _ if state.committed >= next => Next::Stored,
            _ => Next::Idle,
        }
    }

    /// Drops what is held in memory for the publisher (another server publishes it).
    pub fn forget_buffered(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.buffered.clear();
            state.marks.clear();
        }
    }

    /// Messages committed and not yet published by this server.
    #[must_use]
    pub fn backlog(&self) -> u64 {
        let committed = self.state.lock().map_or(0, |state| state.committed);
        committed.saturating_sub(self.published_upto())
    }

    /// Every message as it commits, in commit order (the in-process exchange listens here).
    #[must_use]
    pub fn tap(&self) -> broadcast::Receiver<Arc<OutboxEntry>> {
        self.tap.subscribe()
    }

    /// Puts messages read back from the table on the tap, if they were stored before this
    /// process started (later ones were on the tap when they committed).
    pub fn replay(&self, entries: &[Arc<OutboxEntry>]) {
        for entry in entries.iter().filter(|entry| entry.seq <= self.stored_at_open) {
            let _ = self.tap.send(Arc::clone(entry));
        }
    }

    /// Waits until something was committed since the last call.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Records that every message up to `seq` has been published (the writer deletes them);
    /// answers how long the oldest of them waited since its commit, when that was measured.
    pub fn published(&self, seq: u64) -> Option<Duration> {
        self.published.fetch_max(seq, Ordering::Relaxed);
        let mut state = self.state.lock().ok()?;
        let mut oldest = None;
        while let Some(&(_, at)) = state.marks.front().filter(|(last, _)| *last <= seq) {
            oldest.get_or_insert(at);
            state.marks.pop_front();
        }
        oldest.map(|at| at.elapsed())
    }

    /// Asks the writer to delete everything published with its next batch, however little.
    pub(crate) fn request_trim(&self) {
        self.trim_requested.store(true, Ordering::Relaxed);
    }

    /// Whether a trim was asked for since the last call.
    pub(crate) fn take_trim_request(&self) -> bool {
        self.trim_requested.swap(false, Ordering::Relaxed)
    }

    /// Highest sequence published.
    pub(crate) fn published_upto(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use shoal_engine::message::{Exchange, Message};

    use super::*;

    fn entry(seq: u64) -> OutboxEntry {
        let message = Message {
            exchange: Exchange::TaskPending,
            routing_key: seq.to_string(),
            cc: Vec::new(),
            body: "{}".into(),
        };
        OutboxEntry { seq, message }
    }

    fn seqs(next: Next) -> Vec<u64> {
        match next {
            Next::Buffered(entries) => entries.iter().map(|entry| entry.seq).collect(),
            other => panic!("expected buffered entries, got {other:?}"),
        }
    }

    #[test]
    fn what_was_stored_before_the_feed_is_read_back() {
        let feed = OutboxFeed::new(3, 5);
        assert!(matches!(feed.take(3, 10), Next::Stored));
        feed.committed(vec![entry(6), entry(7)]);
        assert!(matches!(feed.take(3, 10), Next::Stored), "6 and 7 are buffered but 3..=5 come first");
        assert_eq!(seqs(feed.take(6, 10)), vec![6, 7]);
        assert!(matches!(feed.take(8, 10), Next::Idle));
    }

    #[test]
    fn a_full_feed_falls_back_to_the_table() {
        let feed = OutboxFeed::new(1, 0);
        feed.committed((1..=MAX_BUFFERED as u64 + 10).map(entry).collect());
        let n = MAX_BUFFERED as u64;
        assert_eq!(seqs(feed.take(1, MAX_BUFFERED)).len(), MAX_BUFFERED);
        assert!(matches!(feed.take(n + 1, 10), Next::Stored), "the dropped ones are read back");
        feed.committed(vec![entry(n + 11)]);
        assert!(matches!(feed.take(n + 1, 10), Next::Stored));
        assert_eq!(seqs(feed.take(n + 11, 10)), vec![n + 11]);
    }

    #[test]
    fn backlog_and_lag_follow_what_is_published() {
        let feed = OutboxFeed::new(1, 0);
        feed.committed(vec![entry(1), entry(2)]);
        feed.committed(vec![entry(3)]);
        assert_eq!(feed.backlog(), 3);
        assert!(feed.published(2).is_some(), "the first commit's wait is measured");
        assert_eq!(feed.backlog(), 1);
        assert!(feed.published(2).is_none(), "nothing newly published");
        assert!(feed.published(3).is_some());
        assert_eq!(feed.backlog(), 0);
    }

    #[test]
    fn published_only_moves_forward() {
        let feed = OutboxFeed::new(1, 0);
        let _ = feed.published(9);
        let _ = feed.published(4);
        assert_eq!(feed.published_upto(), 9);
    }
}
