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

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{PgConn, PgPool};
use crate::StoreError;
use crate::outbox::{OutboxEntry, OutboxFeed};
use crate::sqlite::outbox::append_row;

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

/// Stages a transaction's messages (their count, then `encode`d); the last statement
/// before its commit.
pub(crate) const STAGE: &str =
    "INSERT INTO outbox_pending (id, count, messages) VALUES (nextval('outbox_ids'), $1, $2)";

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
        "WITH moved AS (DELETE FROM outbox_pending WHERE id = ANY($2) RETURNING id, count, messages) \
         INSERT INTO outbox_batches (first_seq, last_seq, messages) \
         SELECT $1 + sum(count) OVER w - count, $1 + sum(count) OVER w - 1, messages FROM moved \
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
    feed: std::sync::Arc<OutboxFeed>,
    tailed: Mutex<u64>,
}

impl Tail {
    /// A tail whose feed already holds everything up to `tailed`.
    pub(crate) fn new(feed: std::sync::Arc<OutboxFeed>, tailed: u64) -> Tail {
        Tail { feed, tailed: Mutex::new(tailed) }
    }

    /// Hands every positioned row not yet handed over to the feed, in order.
    pub(crate) fn catch_up(&self, conn: &mut PgConn) -> Result<(), StoreError> {
        let mut tailed = self.tailed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            // From the row holding `tailed + 1` on, found by the key: rows already tailed
            // (and not yet trimmed) are not scanned.
            let rows = conn.query(
                "SELECT first_seq, last_seq, messages FROM outbox_batches WHERE last_seq > $1 AND first_seq >= \
                 coalesce((SELECT first_seq FROM outbox_batches WHERE first_seq <= $1 ORDER BY first_seq DESC LIMIT 1), 0) \
                 ORDER BY first_seq LIMIT $2",
                &[&(*tailed as i64), &TAIL_ROWS],
            )?;
            let mut entries: Vec<OutboxEntry> = Vec::new();
            for row in &rows {
                let stored = (row.try_get::<_, i64>(0)? as u64, row.try_get::<_, i64>(1)? as u64, row.try_get(2)?);
                append_row(&mut entries, stored, *tailed + 1, usize::MAX)?;
            }
            if let Some(last) = entries.last() {
                *tailed = last.seq;
                self.feed.committed(entries);
            }
            if rows.len() < TAIL_ROWS as usize {
                return Ok(());
            }
        }
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
        .map_err(|err| StoreError::Other(format!("starting the outbox sequencer: {err}")))
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
