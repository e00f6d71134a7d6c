//! The outbox on a database many servers write at once.
//!
//! Giving each commit its place in the outbox while it commits takes a lock held through the
//! commit, which serializes every write of every server (no group commit: one fsync after
//! another). Instead a transaction *stages* its messages under an id drawn from a sequence as
//! its last statement, and a *sequencing step* (one at a time across all servers) moves staged
//! rows in id order to `outbox_batches`, where they get gapless positions, then notifies every
//! server, each of which *tails* the new rows into its feed (its event stream and publisher).
//!
//! Why id order keeps each task's messages in order: a transaction draws its id after it has
//! locked every row it changes, and holds the locks until it commits, so the next transaction
//! changing the same task draws its id after that commit.
//!
//! Ids are drawn in one order and committed in another, so the step may find a hole: an id
//! drawn by a transaction still running (its row will appear) or by one that rolled back (it
//! never will). The step stops at a hole and notes the snapshot's `xmax`; once every
//! transaction that had started by then has ended (the snapshot `xmin` has passed it), a hole
//! still there is permanent and skipped. A transaction has an id of its own (xid) before it
//! stages: messages come only from transitions, which have written their rows first.
//!
//! A server's tail needs the messages of other servers' rows only: each staged row carries
//! its server's `origin` and a `tag`, and the server keeps what it staged in memory
//! ([`Staged`]) until its tail meets the row, so the database neither reads back nor sends
//! the messages of its own rows (nor does the server parse them again). What memory lacks
//! (a commit whose answer was lost, a row kept past the bound) is read from the table.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal_engine::message::Message;

use super::{PgConn, PgPool};
use crate::StoreError;
use crate::outbox::format::append_row;
use crate::outbox::{OutboxEntry, OutboxFeed};

/// The NOTIFY channel on which a sequencing step announces new positioned rows.
pub(crate) const OUTBOX_CHANNEL: &str = "shoal_outbox";
/// Serializes sequencing steps across servers (held by the step's transaction only).
const SEQUENCE_LOCK: i64 = 0x5_4841_4c01;
/// Held for its session by the one server that publishes to the bus.
pub(crate) const PUBLISH_LOCK: i64 = 0x5_4841_4c02;
/// Staged rows one step moves at most.
const STEP_ROWS: i64 = 1024;
/// How soon a step runs again while it waits on a hole (the sequencer thread waits its
/// [`STEP_PACE`] too; settling does not).
const HOLE_RETRY: Duration = Duration::from_millis(2);
/// How often a step runs with nothing asking for it: picks up rows a server staged just
/// before it died, before it could run its own step.
const IDLE_STEP: Duration = Duration::from_secs(2);
/// The least time between the starts of two sequencing steps a server runs on its own.
/// A step costs the database eight statements and every server a tail, however few rows
/// it moves: under load, one step per pace serves every commit of the pace (1.12× tasks/s
/// at 16 + 16 clients, against 1.07× for 10 ms), at the price of events reaching
/// subscribers up to a pace later. Workers' wake-ups do not wait on it (they are NOTIFYs of
/// their own), nor does settling (it runs its own steps).
const STEP_PACE: Duration = Duration::from_millis(20);
/// Positioned rows read per query when tailing.
const TAIL_ROWS: i64 = 256;
/// Staged transactions whose messages a server keeps at most, and their bytes at most.
/// Under load a row is tailed a pace or two after its commit (tens of rows, hundreds of
/// kilobytes); beyond either bound the oldest are dropped and read back from the table, so
/// a tail held up by a hole, or transactions of huge task graphs, cost no more than that.
const KEPT_ROWS: usize = 512;
const KEPT_BYTES: usize = 32 << 20;

/// Stages a transaction's messages (their count, then `encode`d, the server's origin and
/// the row's tag); the last statement before its commit.
pub(crate) const STAGE: &str = "INSERT INTO outbox_pending (id, count, messages, origin, tag) \
     VALUES (nextval('outbox_ids'), $1, $2, $3, $4)";

/// The messages this server staged whose rows its tail has not met yet, by tag.
pub(crate) struct Staged {
    /// This server in the outbox's rows: random, so that no two servers share it.
    origin: i64,
    next_tag: AtomicI64,
    kept: Mutex<Kept>,
}

/// Kept messages by tag, with their size in bytes.
#[derive(Default)]
struct Kept {
    rows: BTreeMap<i64, (usize, Vec<Message>)>,
    bytes: usize,
}

impl Kept {
    fn insert(&mut self, tag: i64, messages: Vec<Message>) {
        let size: usize = messages
            .iter()
            .map(|m| m.body.len() + m.routing_key.len() + m.cc.iter().map(String::len).sum::<usize>())
            .sum();
        self.bytes += size;
        self.rows.insert(tag, (size, messages));
        while self.rows.len() > KEPT_ROWS || self.bytes > KEPT_BYTES {
            let Some((_, (size, _))) = self.rows.pop_first() else { break };
            self.bytes -= size;
        }
    }

    /// How many messages the row tagged `tag` holds, if kept.
    fn count(&self, tag: i64) -> Option<usize> {
        self.rows.get(&tag).map(|(_, messages)| messages.len())
    }

    fn take(&mut self, tag: i64) -> Option<Vec<Message>> {
        let (size, messages) = self.rows.remove(&tag)?;
        self.bytes -= size;
        Some(messages)
    }
}

impl Staged {
    /// An empty keeper with an origin of its own.
    pub(crate) fn new() -> Staged {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the operating system's randomness.
        let origin = std::collections::hash_map::RandomState::new().build_hasher().finish() as i64;
        Staged { origin, next_tag: AtomicI64::new(1), kept: Mutex::default() }
    }

    /// This server's origin.
    pub(crate) fn origin(&self) -> i64 {
        self.origin
    }

    /// Keeps `messages`, about to be staged; returns the tag their row carries.
    pub(crate) fn keep(&self, messages: Vec<Message>) -> i64 {
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(tag, messages);
        tag
    }

    /// Forgets a row that was never written (its transaction failed before the COMMIT).
    pub(crate) fn forget(&self, tag: i64) {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take(tag);
    }

    /// How many rows are kept, and their bytes (for tests).
    #[cfg(test)]
    fn size(&self) -> (usize, usize) {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (kept.rows.len(), kept.bytes)
    }
}

/// What one sequencing step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    /// Staged rows it positioned.
    pub(crate) moved: usize,
    /// Whether it stopped at a hole that may still fill.
    pub(crate) held: bool,
}

/// Positions staged rows, in id order, up to the first hole that may still fill.
pub(crate) fn sequence(conn: &mut PgConn) -> Result<Step, StoreError> {
    let lock = conn.prepared("SELECT pg_advisory_xact_lock($1)")?;
    // The newest row by its key, not max(last_seq): an index probe, not a scan.
    let read_state = conn.prepared(
        "SELECT sequenced_id, gap_id, gap_xmax, \
         greatest(published, (SELECT last_seq FROM outbox_batches ORDER BY first_seq DESC LIMIT 1)) \
         FROM outbox_state",
    )?;
    // The snapshot columns come from the same snapshot as the rows.
    let read_staged = conn.prepared(
        "SELECT id, count, pg_snapshot_xmin(pg_current_snapshot())::text::bigint, \
         pg_snapshot_xmax(pg_current_snapshot())::text::bigint FROM outbox_pending ORDER BY id LIMIT $1",
    )?;
    // One statement whatever the number of rows: positions follow id order.
    let move_rows = conn.prepared(
        "WITH moved AS (DELETE FROM outbox_pending WHERE id = ANY($2) RETURNING id, count, messages, origin, tag) \
         INSERT INTO outbox_batches (first_seq, last_seq, messages, origin, tag) \
         SELECT $1 + sum(count) OVER w - count, $1 + sum(count) OVER w - 1, messages, origin, tag FROM moved \
         WINDOW w AS (ORDER BY id)",
    )?;
    let write_state = conn.prepared("UPDATE outbox_state SET sequenced_id = $1, gap_id = $2, gap_xmax = $3")?;
    let notify = conn.prepared("SELECT pg_notify($1, $2)")?;
    let mut tx = conn.client.transaction()?;
    tx.execute(&lock, &[&SEQUENCE_LOCK])?;
    // Read committed: statements after the lock see the previous step's commit.
    let state = tx.query_one(&read_state, &[])?;
    let (sequenced, gap_id, gap_xmax, last_seq): (i64, Option<i64>, Option<i64>, i64) =
        (state.get(0), state.get(1), state.get(2), state.get(3));
    let rows = tx.query(&read_staged, &[&STEP_ROWS])?;
    let mut expected = sequenced + 1;
    let mut n_messages: i64 = 0;
    let mut hole: Option<(i64, i64)> = None;
    let mut moved: Vec<i64> = Vec::new();
    for row in &rows {
        let (id, count, xmin, xmax): (i64, i32, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
        if id > expected {
            // Every transaction that could have drawn `expected` has ended: it rolled back.
            let permanent = gap_id == Some(expected) && gap_xmax.is_some_and(|seen| xmin >= seen);
            if !permanent {
                let seen = if gap_id == Some(expected) { gap_xmax.unwrap_or(xmax) } else { xmax };
                hole = Some((expected, seen));
                break;
            }
            tracing::debug!(skipped = id - expected, from = expected, "outbox ids never committed");
        }
        n_messages += i64::from(count);
        moved.push(id);
        expected = expected.max(id + 1);
    }
    let held = hole.is_some();
    if !moved.is_empty() {
        tx.execute(&move_rows, &[&(last_seq + 1), &moved])?;
    }
    if !moved.is_empty() || hole.map(|(id, _)| id) != gap_id {
        tx.execute(&write_state, &[&(expected - 1), &hole.map(|(id, _)| id), &hole.map(|(_, xmax)| xmax)])?;
    }
    if !moved.is_empty() {
        tx.execute(&notify, &[&OUTBOX_CHANNEL, &(last_seq + n_messages).to_string()])?;
    }
    tx.commit()?;
    Ok(Step { moved: moved.len(), held })
}

/// Runs steps until nothing staged before the call is left; Unavailable when a hole stays
/// open longer than `patience`.
pub(crate) fn sequence_all(conn: &mut PgConn, patience: Duration) -> Result<(), StoreError> {
    let give_up = std::time::Instant::now() + patience;
    loop {
        let step = sequence(conn)?;
        if step.held {
            if std::time::Instant::now() > give_up {
                return Err(StoreError::Unavailable("outbox: a transaction holding a message id has not ended".into()));
            }
            std::thread::sleep(HOLE_RETRY);
        } else if step.moved < STEP_ROWS as usize {
            return Ok(());
        }
    }
}

/// How far this server has handed positioned rows to its feed; shared by whoever tails.
pub(crate) struct Tail {
    feed: Arc<OutboxFeed>,
    staged: Arc<Staged>,
    tailed: Mutex<u64>,
    /// Rows whose messages came from memory, and from the table.
    served: [std::sync::atomic::AtomicU64; 2],
}

/// A positioned row as the tail reads it: its messages are absent when this server staged
/// it (the row's tag says which it kept).
struct TailRow {
    first_seq: u64,
    last_seq: u64,
    messages: Option<String>,
    tag: Option<i64>,
}

impl Tail {
    /// A tail whose feed already holds everything up to `tailed`.
    pub(crate) fn new(feed: Arc<OutboxFeed>, staged: Arc<Staged>, tailed: u64) -> Tail {
        Tail { feed, staged, tailed: Mutex::new(tailed), served: Default::default() }
    }

    /// Hands every positioned row not yet handed over to the feed, in order.
    pub(crate) fn catch_up(&self, conn: &mut PgConn) -> Result<(), StoreError> {
        let mut tailed = self.tailed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let mut rows = self.read(conn, *tailed, Some(self.staged.origin))?;
            let entries = match self.entries(&rows, *tailed)? {
                Some(entries) => entries,
                None => {
                    // Memory lacks one of this server's rows: the page again, messages and all.
                    rows = self.read(conn, *tailed, None)?;
                    self.entries(&rows, *tailed)?.unwrap_or_default()
                }
            };
            if let Some(last) = entries.last() {
                *tailed = last.seq;
                self.feed.committed(entries);
            }
            if rows.len() < TAIL_ROWS as usize {
                return Ok(());
            }
        }
    }

    /// Rows from the one holding `tailed + 1` on; without the messages of `origin`'s rows.
    fn read(&self, conn: &mut PgConn, tailed: u64, origin: Option<i64>) -> Result<Vec<TailRow>, StoreError> {
        // Found by the key: rows already tailed (and not yet trimmed) are not scanned.
        let rows = conn.query(
            "SELECT first_seq, last_seq, CASE WHEN origin = $3 THEN NULL ELSE messages END, tag \
             FROM outbox_batches WHERE last_seq > $1 AND first_seq >= \
             coalesce((SELECT first_seq FROM outbox_batches WHERE first_seq <= $1 ORDER BY first_seq DESC LIMIT 1), 0) \
             ORDER BY first_seq LIMIT $2",
            &[&(tailed as i64), &TAIL_ROWS, &origin],
        )?;
        rows.iter()
            .map(|row| {
                Ok(TailRow {
                    first_seq: row.try_get::<_, i64>(0)? as u64,
                    last_seq: row.try_get::<_, i64>(1)? as u64,
                    messages: row.try_get(2)?,
                    tag: row.try_get(3)?,
                })
            })
            .collect()
    }

    /// The entries of `rows` after `tailed`, this server's own from memory; None when memory
    /// lacks one of them (then nothing is taken from it). Rows read with their messages
    /// never lack anything.
    fn entries(&self, rows: &[TailRow], tailed: u64) -> Result<Option<Vec<OutboxEntry>>, StoreError> {
        let mut kept = self.staged.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let own = |row: &TailRow| row.messages.is_none().then_some(row.tag).flatten();
        let complete = rows.iter().all(|row| {
            let count = row.last_seq + 1 - row.first_seq;
            match (&row.messages, own(row)) {
                (Some(_), _) => true,
                (None, Some(tag)) => kept.count(tag).is_some_and(|kept| kept as u64 == count),
                (None, None) => false,
            }
        });
        if !complete {
            return Ok(None);
        }
        let mut entries = Vec::new();
        let (mut mine, mut theirs) = (0, 0);
        for row in rows {
            match (&row.messages, own(row)) {
                (Some(text), _) => {
                    theirs += 1;
                    append_row(&mut entries, (row.first_seq, row.last_seq, text), tailed + 1, usize::MAX)?;
                }
                (None, tag) => {
                    mine += 1;
                    let messages = tag.and_then(|tag| kept.take(tag)).unwrap_or_default();
                    let seqs = row.first_seq..=row.last_seq;
                    entries.extend(
                        seqs.zip(messages)
                            .filter(|(seq, _)| *seq > tailed)
                            .map(|(seq, message)| OutboxEntry { seq, message }),
                    );
                }
            }
        }
        self.served[0].fetch_add(mine, Ordering::Relaxed);
        self.served[1].fetch_add(theirs, Ordering::Relaxed);
        Ok(Some(entries))
    }

    /// Rows served from memory and from the table so far.
    pub(crate) fn served(&self) -> (u64, u64) {
        (self.served[0].load(Ordering::Relaxed), self.served[1].load(Ordering::Relaxed))
    }
}

/// Starts the thread that runs sequencing steps after commits that staged messages (one
/// step serves every commit that arrived while the previous one ran or the pace held it
/// back). Ends when `staged` closes.
pub(crate) fn start_sequencer(pool: PgPool, staged: mpsc::Receiver<()>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("shoal-pg-outbox".into())
        .spawn(move || run_sequencer(&pool, &staged))
        .map(|_| ())
        .map_err(|err| StoreError::Internal(format!("starting the outbox sequencer: {err}")))
}

fn run_sequencer(pool: &PgPool, staged: &mpsc::Receiver<()>) {
    // Rows staged while no server ran steps (all were down) are picked up at start.
    let mut due = true;
    let mut held = false;
    let mut last_step: Option<Instant> = None;
    loop {
        let wait = if held { HOLE_RETRY } else { IDLE_STEP };
        match staged.recv_timeout(if due { Duration::ZERO } else { wait }) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // A commit after a quiet spell is stepped at once; under load the commits of a pace
        // wait for one step together.
        if let Some(rest) = last_step.and_then(|last| STEP_PACE.checked_sub(last.elapsed())) {
            std::thread::sleep(rest);
        }
        staged.try_iter().for_each(drop);
        last_step = Some(Instant::now());
        match pool.get().and_then(|mut conn| sequence(&mut conn)) {
            Ok(step) => {
                held = step.held;
                due = step.moved >= STEP_ROWS as usize;
            }
            Err(err) => {
                tracing::warn!(error = %err, "outbox sequencing failed; retrying");
                due = true;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_engine::message::Exchange;

    /// A message of `size` bytes (its key and body).
    fn message(key: &str, size: usize) -> Message {
        let body = "x".repeat(size - key.len());
        Message { exchange: Exchange::TaskDefined, routing_key: key.into(), cc: Vec::new(), body }
    }

    #[test]
    fn a_server_keeps_its_newest_staged_rows_and_forgets_refused_ones() {
        let staged = Staged::new();
        assert_ne!(staged.origin(), Staged::new().origin(), "each server its own origin");
        let first = staged.keep(vec![message("first", 10)]);
        let tags: Vec<i64> = (0..KEPT_ROWS).map(|_| staged.keep(vec![message("k", 10)])).collect();
        assert!(tags.windows(2).all(|pair| pair[0] < pair[1]) && first < tags[0], "tags increase");
        assert_eq!(staged.size(), (KEPT_ROWS, KEPT_ROWS * 10));
        assert!(staged.kept.lock().unwrap().count(first).is_none(), "the oldest went first");
        staged.forget(tags[0]);
        assert_eq!(staged.size(), (KEPT_ROWS - 1, (KEPT_ROWS - 1) * 10));
    }

    #[test]
    fn a_server_keeps_no_more_bytes_than_the_bound() {
        let staged = Staged::new();
        let big = staged.keep(vec![message("big", KEPT_BYTES - 100)]);
        let small = staged.keep(vec![message("s", 50)]);
        assert_eq!(staged.size(), (2, KEPT_BYTES - 50));
        let next = staged.keep(vec![message("s", 100)]);
        let kept = staged.kept.lock().unwrap();
        assert!(kept.count(big).is_none() && kept.count(small) == Some(1) && kept.count(next) == Some(1));
        assert_eq!(kept.bytes, 150, "the oldest rows go until the rest fit");
    }
}
