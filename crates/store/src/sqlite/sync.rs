//! Making committed batches durable beside the writer.
//!
//! The writer commits with `synchronous = NORMAL` (SQLite appends the batch's frames to the
//! WAL without an fsync) and hands each committed batch here. This thread syncs the WAL once
//! for every batch that has gathered, and only then answers their callers and hands their
//! messages to the outbox feed, so nobody hears of a change before it is on disk, while the
//! writer already runs the next batch. Read connections may see a batch up to one sync
//! early; only the machine going down within that sync would undo it, and then nobody had
//! been told it happened.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use crate::StoreError;
use crate::outbox::{OutboxEntry, OutboxFeed};
use crate::sqlite::Deliver;

/// Committed batches that may wait for a sync before the writer is held back.
const IN_FLIGHT: usize = 64;

/// A batch committed but not yet synced.
pub(crate) struct Unsynced {
    /// Its callers' answers.
    pub(crate) deliveries: Vec<Deliver>,
    /// Its messages, in sequence order.
    pub(crate) messages: Vec<OutboxEntry>,
    /// Whether it changed anything (a batch of empty claims did not: nothing to sync).
    pub(crate) wrote: bool,
}

/// The running syncer; finishes what was handed to it when dropped.
pub(crate) struct Syncer {
    batches: Option<mpsc::SyncSender<Unsynced>>,
    handle: Option<JoinHandle<()>>,
    failed: Arc<AtomicBool>,
}

impl Syncer {
    /// Starts syncing the WAL of the database at `path`.
    pub(crate) fn start(path: &Path, feed: Arc<OutboxFeed>) -> Result<Syncer, StoreError> {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        // SQLite made the WAL when it opened the database; fsync is per file, not per
        // descriptor, so this one syncs what SQLite wrote through its own.
        let wal = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&wal)
            .map_err(|err| StoreError::Unavailable(format!("opening {}: {err}", Path::new(&wal).display())))?;
        let failed = Arc::new(AtomicBool::new(false));
        let (batches, received) = mpsc::sync_channel(IN_FLIGHT);
        let flag = Arc::clone(&failed);
        let handle = std::thread::Builder::new()
            .name("shoal-store-sync".into())
            .spawn(move || run(|| wal.sync_data(), &received, &feed, &flag))
            .map_err(|err| StoreError::Internal(format!("starting the syncer: {err}")))?;
        Ok(Syncer { batches: Some(batches), handle: Some(handle), failed })
    }

    /// Whether a sync failed: what was committed since may not be on disk, so the writer
    /// must take nothing more until the server restarts (and SQLite recovers the WAL).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Hands over a committed batch; waits while too many are unsynced.
    pub(crate) fn sync(&self, batch: Unsynced) {
        if let Some(batches) = &self.batches
            && let Err(mpsc::SendError(batch)) = batches.send(batch)
        {
            answer(batch.deliveries, &Err("the store's syncer stopped".into()));
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.batches.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Answers what `received` hands over, syncing with `sync` first when any of it wrote.
fn run(
    mut sync: impl FnMut() -> std::io::Result<()>,
    received: &mpsc::Receiver<Unsynced>,
    feed: &OutboxFeed,
    failed: &AtomicBool,
) {
    let mut gathered = Vec::new();
    while let Ok(batch) = received.recv() {
        gathered.push(batch);
        gathered.extend(received.try_iter());
        let synced = if failed.load(Ordering::Acquire) {
            Err("an earlier sync of the database failed; restart the server".to_owned())
        } else if !gathered.iter().any(|batch| batch.wrote) {
            // What these batches read was synced with the batches before them, which are
            // answered first.
            Ok(())
        } else {
            sync().map_err(|err| {
                // As PostgreSQL learnt, after a failed fsync the kernel may have dropped the
                // dirty pages: retrying could "succeed" without them. Stop taking writes.
                tracing::error!(error = %err, "syncing the WAL failed; the store takes no more writes until restarted");
                failed.store(true, Ordering::Release);
                format!("syncing the database failed: {err}")
            })
        };
        for batch in gathered.drain(..) {
            if synced.is_ok() {
                feed.committed(batch.messages);
            }
            answer(batch.deliveries, &synced);
        }
    }
}

fn answer(deliveries: Vec<Deliver>, outcome: &Result<(), String>) {
    for deliver in deliveries {
        deliver(outcome.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A batch whose answer is recorded in `answers` under `name`.
    fn batch(name: &'static str, wrote: bool, answers: &Arc<Mutex<Vec<(&'static str, bool)>>>) -> Unsynced {
        let answers = Arc::clone(answers);
        let deliver: Deliver = Box::new(move |outcome| answers.lock().unwrap().push((name, outcome.is_ok())));
        Unsynced { deliveries: vec![deliver], messages: Vec::new(), wrote }
    }

    /// Runs the syncer over `batches` (all handed over before it starts) with `sync`; the
    /// answers in order, and how many syncs it made.
    fn answers(
        batches: Vec<(&'static str, bool)>,
        mut sync: impl FnMut() -> std::io::Result<()>,
    ) -> (Vec<(&'static str, bool)>, usize, bool) {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (sender, received) = mpsc::sync_channel(IN_FLIGHT);
        for (name, wrote) in batches {
            sender.send(batch(name, wrote, &answers)).unwrap();
        }
        drop(sender);
        let (feed, failed, mut syncs) = (OutboxFeed::new(1, 0), AtomicBool::new(false), 0);
        run(
            || {
                syncs += 1;
                sync()
            },
            &received,
            &feed,
            &failed,
        );
        let answered = answers.lock().unwrap().clone();
        (answered, syncs, failed.load(Ordering::Acquire))
    }

    #[test]
    fn gathered_batches_are_answered_in_order_after_one_sync() {
        let (answered, syncs, failed) = answers(vec![("a", true), ("b", true), ("c", false)], || Ok(()));
        assert_eq!(answered, vec![("a", true), ("b", true), ("c", true)]);
        assert_eq!(syncs, 1, "one sync for everything that gathered");
        assert!(!failed);
    }

    #[test]
    fn batches_that_wrote_nothing_need_no_sync() {
        let (answered, syncs, _) = answers(vec![("empty claim", false), ("another", false)], || Ok(()));
        assert_eq!(answered, vec![("empty claim", true), ("another", true)]);
        assert_eq!(syncs, 0);
    }

    #[test]
    fn a_failed_sync_fails_its_batches_and_every_later_one() {
        let (answered, syncs, failed) = answers(vec![("a", true)], || Err(std::io::Error::other("disk gone")));
        assert_eq!(answered, vec![("a", false)]);
        assert_eq!(syncs, 1);
        assert!(failed, "the writer is told to take nothing more");

        // Once failed, nothing is answered as written, even what needs no sync.
        let answers_after = Arc::new(Mutex::new(Vec::new()));
        let (sender, received) = mpsc::sync_channel(IN_FLIGHT);
        sender.send(batch("later", true, &answers_after)).unwrap();
        sender.send(batch("later read", false, &answers_after)).unwrap();
        drop(sender);
        let failed = AtomicBool::new(true);
        run(|| panic!("no sync after a failure"), &received, &OutboxFeed::new(1, 0), &failed);
        assert_eq!(*answers_after.lock().unwrap(), vec![("later", false), ("later read", false)]);
    }
}
