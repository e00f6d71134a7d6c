//! The embedded SQLite backend.
//!
//! One writer thread owns the write connection and the pending index. It takes every queued
//! operation at once, runs them in one transaction and commits the batch (group commit); a
//! syncer thread (`sync.rs`) fsyncs the WAL while the writer goes on, and answers each caller
//! only once the commit that made its change is durable; its WAL appends reach the file in
//! one write per commit (`walgather.rs`). Readers use a small pool of
//! read-only connections; WAL mode lets them read committed data while the writer works.

mod artifacts;
mod checkpoint;
mod commit_view;
mod documents;
mod domains;
mod graph;
mod outbox;
mod pending;
mod reads;
mod row;
mod schema;
mod sync;
mod tx;
mod waiting_claims;
mod walgather;
mod workers;
mod write;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use shoal_engine::dimensions::Dimensions;
use shoal_engine::event::Event;
use shoal_engine::priority::Priority;
use shoal_engine::{TaskId, Timestamp};
use tokio::sync::{mpsc, oneshot};

use crate::ops::{self, ready};
use crate::outbox::{OutboxEntry, OutboxFeed};
use crate::reads::ReadsOver;
use crate::row::corrupt;
use crate::sqlite::commit_view::Wake;
use crate::sqlite::pending::{PendingIndex, PendingKey, PendingRun};
use crate::sqlite::reads::ReadConn;
use crate::sqlite::tx::{Tx, WriterState};
use crate::{Committed, Op, Outcome, Reads, StoreError};

pub use waiting_claims::{ClaimAnswer, Parked};

/// Most operations committed together.
const MAX_BATCH: usize = 512;
/// Operations that may wait for the writer before callers are slowed down.
const QUEUE_DEPTH: usize = 8192;
/// Published outbox rows are deleted once this many have gathered (or when the writer is idle).
const OUTBOX_TRIM_ROWS: u64 = 8192;
/// Idle read connections kept open.
const MAX_IDLE_READERS: usize = 8;

/// Settings of the SQLite backend.
#[derive(Debug, Clone)]
pub struct SqliteConfig {
    /// Database file (created if missing).
    pub path: PathBuf,
    /// The rules' settings.
    pub settings: crate::StoreSettings,
}

/// The SQLite store; cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Mutex<Option<mpsc::Sender<Box<dyn Job>>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    checkpointer: Mutex<checkpoint::Checkpointer>,
    readers: ReaderPool,
    feed: Arc<OutboxFeed>,
    commit_view: Arc<commit_view::CommitView>,
    waiting: Arc<waiting_claims::WaitingClaims>,
    graph_scheduler_id: String,
}

/// Answers a job's caller once its batch committed (`Ok`) or failed (`Err(reason)`).
pub(crate) type Deliver = Box<dyn FnOnce(Result<(), String>) + Send>;

/// How a job's run went, as far as its batch is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobEnd {
    /// It did its work.
    Done,
    /// The rules refused it; it must not have written anything.
    Refused,
    /// Storage failed under it; the batch cannot commit.
    Failed,
}

/// A unit of work for the writer thread.
trait Job: Send {
    /// Runs inside the batch's transaction; says how it went and how to answer once the
    /// batch's fate is known.
    fn run(self: Box<Self>, tx: &mut Tx<'_>) -> (JobEnd, Deliver);
    /// Answers without running (the batch could not start or already failed).
    fn fail(self: Box<Self>, reason: String);
}

struct WriteJob<T, F> {
    op: F,
    reply: oneshot::Sender<Result<Committed<T>, StoreError>>,
}

impl<T, F> Job for WriteJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send,
{
    fn run(self: Box<Self>, tx: &mut Tx<'_>) -> (JobEnd, Deliver) {
        let WriteJob { op, reply } = *self;
        if reply.is_closed() {
            // The caller went away while this waited (a long poll that timed out on the
            // client's side, a dropped connection). Doing it anyway would, for a claim, hand
            // a run to nobody until its claim expires; every write here is safe to retry.
            return (JobEnd::Done, Box::new(|_| {}));
        }
        let res = op(tx);
        let events = std::mem::take(&mut tx.events);
        if res.is_ok() {
            for event in &events {
                match event.event {
                    Event::Pending { .. } => tx.state.wakes.push(Wake {
                        task_id: event.task_id,
                        task_queue_id: event.task_queue_id.clone(),
                        needs: event.dimensions.clone(),
                    }),
                    // Claimed in the batch that made it pending: nobody need be woken for it.
                    Event::Running { .. } => tx.state.wakes.retain(|wake| wake.task_id != event.task_id),
                    _ => {}
                }
            }
        }
        let outcome = match &res {
            Ok(_) => JobEnd::Done,
            Err(StoreError::Rejected(_)) => JobEnd::Refused,
            Err(_) => JobEnd::Failed,
        };
        let deliver = move |commit: Result<(), String>| {
            let answer = match (res, commit) {
                (Err(err), _) => Err(err),
                (Ok(_), Err(reason)) => Err(StoreError::Unavailable(reason)),
                (Ok(value), Ok(())) => Ok(Committed { value, events }),
            };
            // The caller may have gone away (a closed long poll); its change stands.
            let _ = reply.send(answer);
        };
        (outcome, Box::new(deliver))
    }

    fn fail(self: Box<Self>, reason: String) {
        let _ = self.reply.send(Err(StoreError::Unavailable(reason)));
    }
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database and starts the writer.
    ///
    /// # Errors
    /// When the file cannot be opened or migrated.
    pub fn open(config: &SqliteConfig) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = config.path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|err| StoreError::Unavailable(format!("creating {}: {err}", dir.display())))?;
        }
        // The writer's WAL appends are gathered into one write per commit (`walgather.rs`).
        walgather::register().map_err(StoreError::Unavailable)?;
        let mut conn = Connection::open_with_flags_and_vfs(&config.path, OpenFlags::default(), walgather::NAME)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA cache_size = -4096; \
             PRAGMA temp_store = MEMORY; PRAGMA busy_timeout = 5000; PRAGMA wal_autocheckpoint = 16384;",
        )?;
        conn.set_prepared_statement_cache_capacity(64);
        schema::migrate(&mut conn)?;
        schema::attach_secrets(&conn, &config.path)?;
        let (index, max_seq) = load_pending(&conn)?;
        let bounds = outbox::bounds(&conn)?;
        let feed = Arc::new(OutboxFeed::new(bounds.first, bounds.last));
        tracing::info!(
            path = %config.path.display(),
            pending = index.len(),
            unpublished = bounds.unpublished(),
            "store opened"
        );
        let commit_view = Arc::new(commit_view::CommitView::default());
        let state = WriterState::new(index, max_seq, bounds.last, Arc::clone(&feed), Arc::clone(&commit_view), config);
        let waiting = Arc::clone(&state.waiting);
        let wal = Arc::new(checkpoint::WalState::default());
        let checkpointer = checkpoint::Checkpointer::start(&config.path, Arc::clone(&wal))?;
        let syncer = sync::Syncer::start(&config.path, Arc::clone(&feed))?;
        let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
        let writer = std::thread::Builder::new()
            .name("shoal-store-writer".into())
            .spawn(move || writer_loop(conn, state, receiver, &syncer, &wal))
            .map_err(|err| StoreError::Internal(format!("starting writer: {err}")))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                jobs: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(writer)),
                checkpointer: Mutex::new(checkpointer),
                readers: ReaderPool { path: config.path.clone(), idle: Mutex::new(Vec::new()) },
                feed,
                commit_view,
                waiting,
                graph_scheduler_id: config.settings.graph_scheduler_id.clone(),
            }),
        })
    }

    /// The scheduler id of task-graph tasks.
    pub(crate) fn graph_scheduler_id(&self) -> &str {
        &self.inner.graph_scheduler_id
    }

    /// Runs an operation in the writer's next batch; answers once that batch committed. An
    /// idle worker's claimWork is answered from what the last commit left (`commit_view.rs`),
    /// without queueing behind writes.
    pub(crate) async fn run(&self, op: Op, now: Timestamp) -> Result<Committed<Outcome>, StoreError> {
        if let Op::ClaimWork(claim) = &op
            && self.nothing_to_claim(&claim.request.task_queue_id, now)
        {
            return Ok(Committed { value: Outcome::ClaimWork(Vec::new()), events: Vec::new() });
        }
        self.write(move |tx| ready(op.run(tx, now))).await
    }

    /// Runs `op` in the writer's next batch; answers once that batch committed.
    async fn write<T, F>(&self, op: F) -> Result<Committed<T>, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let sender = self.inner.jobs.lock().map_err(|_| closed())?.clone().ok_or_else(closed)?;
        let (reply, answer) = oneshot::channel();
        sender.send(Box::new(WriteJob { op, reply })).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Wakes waiting claims with `hook` at each commit that makes runs pending (`commit_view.rs`);
    /// false if another hook already is.
    pub(crate) fn wake_at_commit(&self, hook: crate::WakeHook) -> bool {
        self.inner.commit_view.wake_with(hook)
    }

    /// Whether a claimWork on `task_queue_id` at `now` would claim nothing and write nothing,
    /// as the last commit left the queue (`commit_view.rs`).
    pub(crate) fn nothing_to_claim(&self, task_queue_id: &str, now: shoal_engine::Timestamp) -> bool {
        self.inner.commit_view.nothing_to_claim(task_queue_id, now)
    }

    /// Parks a claimWork with the writer until a batch claims a run for it or it leaves
    /// (`waiting_claims.rs`); `clock` is read when the writer claims.
    pub(crate) fn park_claim(&self, request: crate::ClaimRequest, clock: fn() -> shoal_engine::Timestamp) -> Parked {
        self.inner.waiting.park(request, clock)
    }

    pub(crate) fn outbox(&self) -> Arc<OutboxFeed> {
        Arc::clone(&self.inner.feed)
    }

    /// Deletes what was published even when no other write comes to carry the delete.
    pub(crate) async fn trim_outbox(&self) -> Result<(), StoreError> {
        self.inner.feed.request_trim();
        self.write(|_tx| Ok(())).await.map(|_| ())
    }

    pub(crate) async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&dyn Reads) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.readers.with(|conn| query(&ReadsOver(ReadConn(conn)))))
            .await
            .map_err(|err| StoreError::Internal(format!("read task failed: {err}")))?
    }

    /// Lets the writer finish what is queued, then stops it.
    pub(crate) async fn close(&self) {
        let sender = self.inner.jobs.lock().ok().and_then(|mut jobs| jobs.take());
        drop(sender);
        let writer = self.inner.writer.lock().ok().and_then(|mut writer| writer.take());
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
        let inner = Arc::clone(&self.inner);
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut checkpointer) = inner.checkpointer.lock() {
                checkpointer.stop();
            }
        })
        .await;
    }
}

fn closed() -> StoreError {
    StoreError::Unavailable("the store is shut down".into())
}

/// Rebuilds the pending index from the rows: the index is a cache of `state = 'pending'`.
/// Columns are read borrowed and the queue name and dimensions reused across rows, so the
/// rebuild allocates little beyond the index itself.
fn load_pending(conn: &Connection) -> Result<(PendingIndex, u64), StoreError> {
    let mut index = PendingIndex::default();
    let mut stmt = conn.prepare(
        "SELECT task_id, task_queue_id, dimensions, priority, pending_seq, json_array_length(runs) - 1 \
         FROM tasks WHERE state = 'pending'",
    )?;
    let mut rows = stmt.query([])?;
    let mut max_seq = 0;
    let mut key = PendingKey { task_queue_id: String::new(), dimensions: Dimensions::default(), rank: 0, seq: 0 };
    let mut last_dimensions: Option<String> = None;
    let mut last_priority = (String::new(), 0u8);
    while let Some(row) = rows.next()? {
        let text = |idx: usize| row.get_ref(idx).and_then(|value| value.as_str().map_err(Into::into));
        let task_id = TaskId::parse(text(0)?).ok_or_else(|| corrupt("bad task id"))?;
        let queue = text(1)?;
        if key.task_queue_id != queue {
            queue.clone_into(&mut key.task_queue_id);
        }
        let dimensions = row.get_ref(2)?.as_str_or_null().map_err(rusqlite::Error::from)?;
        if dimensions != last_dimensions.as_deref() {
            key.dimensions = match dimensions {
                None => Dimensions::default(),
                Some(json) => serde_json::from_str(json).map_err(corrupt)?,
            };
            last_dimensions = dimensions.map(str::to_owned);
        }
        let priority = text(3)?;
        if priority != last_priority.0 {
            let parsed: Priority = serde_json::from_str(priority).map_err(corrupt)?;
            last_priority = (priority.to_owned(), parsed.rank());
        }
        key.rank = last_priority.1;
        key.seq = row.get::<_, i64>(4)? as u64;
        max_seq = max_seq.max(key.seq);
        index.restore(&key, PendingRun { task_id, run_id: row.get(5)? });
    }
    Ok((index, max_seq))
}

fn writer_loop(
    mut conn: Connection,
    mut state: WriterState,
    mut jobs: mpsc::Receiver<Box<dyn Job>>,
    syncer: &sync::Syncer,
    wal: &checkpoint::WalState,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    while let Some(job) = jobs.blocking_recv() {
        // Woken by the first job, the writer often preempts the request thread that sent it,
        // on the same core, in the middle of its round of ready connections. Giving the core
        // back lets that round finish first: 1.07x throughput for the same busy time
        // (docs/performance.md, eleventh part).
        std::thread::yield_now();
        batch.push(job);
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if syncer.failed() {
            for job in batch.drain(..) {
                job.fail("the database could not be synced to disk; restart the server".into());
            }
            continue;
        }
        run_batch(&mut conn, &mut state, syncer, &mut batch, &jobs);
        if wal.restart_due() {
            // Between batches no transaction is open, so the WAL can start over.
            if let Err(err) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
                tracing::warn!(error = %err, "restarting the WAL failed; will retry");
            }
            wal.restarted();
        }
    }
    tracing::debug!("store writer stopped");
}

/// Runs a batch in one transaction, commits it and hands it to `syncer`, which answers its
/// callers once it is on disk.
///
/// There is no savepoint per job (SQLite would copy every page a job touches into a
/// sub-journal): a refused job must not have written (checked with `total_changes` and the
/// index's undo mark), and a job whose storage failed aborts the whole batch, whose callers
/// are all told to retry.
fn run_batch(
    conn: &mut Connection,
    state: &mut WriterState,
    syncer: &sync::Syncer,
    batch: &mut Vec<Box<dyn Job>>,
    waiting: &mpsc::Receiver<Box<dyn Job>>,
) {
    let changes = conn.total_changes();
    if let Err(err) = conn.prepare_cached("BEGIN IMMEDIATE").and_then(|mut begin| begin.execute([])) {
        tracing::error!(error = %err, "cannot begin a write transaction");
        for job in batch.drain(..) {
            job.fail(err.to_string());
        }
        return;
    }
    let mut failure: Option<String> = None;
    let outbox_seq = state.outbox_seq;
    // Published messages are deleted in the batch that comes after; a crash before that
    // commit publishes them again (at least once).
    // Deleting in large ranges frees whole pages; deleting a few rows per batch rewrites the
    // pages just appended. The publisher's idle trim (an empty batch) deletes the rest.
    let published = state.feed.published_upto();
    let trim = published >= state.outbox_trimmed + OUTBOX_TRIM_ROWS
        || (published > state.outbox_trimmed && state.feed.take_trim_request());
    if trim && let Err(err) = outbox::trim(conn, published) {
        tracing::error!(error = %err, "trimming the outbox failed");
        failure = Some(err.to_string());
    }
    let mut ran = Ran { failure, messages: Vec::new(), deliveries: Vec::with_capacity(batch.len()) };
    for job in batch.drain(..) {
        run_job(conn, state, job, &mut ran);
    }
    // Runs the batch made pending go to claims parked with the writer, in this transaction,
    // when nothing else waits for the writer: then the claims delay nobody's commit and save
    // a commit and a sync of their own. Under load they run in the next batch, as woken
    // claims, while this one syncs.
    if ran.failure.is_none() && waiting.is_empty() {
        let before = ran.deliveries.len();
        for job in hand_outs(state) {
            run_job(conn, state, job, &mut ran);
        }
        // The waiting workers are answered first: the others only hear their change is done.
        let handed = ran.deliveries.len() - before;
        ran.deliveries.rotate_right(handed);
    }
    let Ran { mut failure, messages, deliveries } = ran;
    if failure.is_none()
        && let Err(err) = outbox::insert(conn, &messages)
    {
        tracing::error!(error = %err, "writing the outbox failed");
        failure = Some(err.to_string());
    }
    let commit = match failure {
        Some(reason) => Err(reason),
        None => conn.prepare_cached("COMMIT").and_then(|mut commit| commit.execute([])).map(drop).map_err(|err| {
            tracing::error!(error = %err, "commit failed; the batch is rolled back");
            err.to_string()
        }),
    };
    match commit {
        Ok(()) => {
            state.committed();
            if trim {
                state.outbox_trimmed = published;
            }
            let wrote = conn.total_changes() != changes || !messages.is_empty();
            syncer.sync(sync::Unsynced { deliveries, messages, wrote });
        }
        Err(reason) => {
            let _ = conn.execute_batch("ROLLBACK");
            state.rolled_back();
            state.outbox_seq = outbox_seq;
            for deliver in deliveries {
                deliver(Err(reason.clone()));
            }
        }
    }
}

/// What the jobs of a batch left so far.
struct Ran {
    /// Why the batch fails, once a job failed: the rest are answered with it.
    failure: Option<String>,
    messages: Vec<OutboxEntry>,
    deliveries: Vec<Deliver>,
}

/// Runs one job of a batch in its transaction.
fn run_job(conn: &mut Connection, state: &mut WriterState, job: Box<dyn Job>, ran: &mut Ran) {
    if let Some(reason) = &ran.failure {
        job.fail(reason.clone());
        return;
    }
    let (changes, mark) = (conn.total_changes(), state.index.mark());
    let mut tx = Tx { conn, state, events: Vec::new(), messages: Vec::new() };
    // A panic is a bug in one operation: contain it so the writer (and every later
    // write) survives. The batch is rolled back; the panicking job's caller sees its
    // reply dropped, which reads as "unavailable, retry".
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(&mut tx)));
    let written = std::mem::take(&mut tx.messages);
    let Ok((outcome, deliver)) = run else {
        tracing::error!("a store operation panicked; its batch is rolled back");
        ran.failure = Some("internal error: a store operation panicked".into());
        return;
    };
    match outcome {
        JobEnd::Done => ran.messages.extend(written),
        JobEnd::Refused if conn.total_changes() == changes && state.index.mark() == mark && written.is_empty() => {}
        JobEnd::Refused => {
            tracing::error!("a refused operation wrote before refusing; its batch is rolled back");
            ran.failure = Some("internal error: a refused operation wrote".into());
        }
        JobEnd::Failed => ran.failure = Some("a storage operation failed; nothing in its batch was committed".into()),
    }
    ran.deliveries.push(deliver);
}

/// A claim for parked claimWork calls that can take the runs the batch made pending (longest
/// parked first, each call counted for as many runs as it asks for); see `waiting_claims.rs`. Runs
/// none of them takes still wake a waiting claim at the commit.
fn hand_outs(state: &WriterState) -> Vec<Box<dyn Job>> {
    let mut jobs: Vec<Box<dyn Job>> = Vec::new();
    // Per queue, runs the calls taken so far may still claim.
    let mut covered: HashMap<&str, usize> = HashMap::new();
    for Wake { task_queue_id: queue, needs, .. } in &state.wakes {
        let covered = covered.entry(queue).or_default();
        if *covered > 0 {
            *covered -= 1;
            continue;
        }
        let Some((call, reply)) = state.waiting.take(queue, needs.as_ref()) else { continue };
        *covered = call.request.count.saturating_sub(1);
        let op = move |tx: &mut Tx<'_>| ready(ops::tasks::claim_parked(tx, &call.request, (call.clock)()));
        jobs.push(Box::new(WriteJob { op, reply }));
    }
    jobs
}

/// Read-only connections, reused.
struct ReaderPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReaderPool {
    fn with<T>(&self, query: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.execute_batch("PRAGMA busy_timeout = 5000; PRAGMA cache_size = -4096;")?;
                // The services' secret documents are read here too (read-only, as the main one).
                conn.execute(
                    "ATTACH DATABASE ?1 AS secrets",
                    [self.path.with_file_name("secrets.db").to_string_lossy()],
                )?;
                conn.set_prepared_statement_cache_capacity(32);
                conn
            }
        };
        let res = query(&conn);
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_READERS
        {
            idle.push(conn);
        }
        res
    }
}

#[cfg(test)]
mod tests;
