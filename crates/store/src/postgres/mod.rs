//! The PostgreSQL backend: many stateless servers on one database.
//!
//! Each write operation is one transaction on a pooled asynchronous connection, its
//! statements pipelined (`tx.rs`); reads and the background loops (outbox sequencing,
//! LISTEN/NOTIFY) use blocking connections off the async threads. Rows an operation changes
//! are locked as it reads them; claims and due transitions skip rows another server holds,
//! so concurrent servers never hand one run out twice.

mod config;
mod dimension_sets;
mod documents;
mod domains;
mod gather;
mod graph;
mod listen;
mod logs;
mod notify;
mod outbox;
mod pipeline;
mod pool;
mod reads;
mod row;
mod schema;
mod task_rows;
mod tx;
mod workers;
mod write;

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use postgres::NoTls;
use shoal_engine::Timestamp;

use crate::outbox::OutboxFeed;
use crate::outbox::format::Bounds;
use crate::reads::ReadsOver;
use crate::{Committed, Op, Outcome, Reads, StoreError};
use tx::{PgTx, TxShared};

pub use config::{PgConfig, REQUEST_TIMEOUT};
pub(crate) use pool::PgConn;
pub use pool::PgPool;

/// The NOTIFY channel on which commits name the queues that gained pending work.
const WAKE_CHANNEL: &str = "shoal_pending";
/// The NOTIFY channel on which appends announce a live log's new size
/// (`<server> <taskId> <runId> <size>`), so followers on other servers read at once.
const LOG_CHANNEL: &str = "shoal_log";
/// The NOTIFY channel naming a worker whose record changed in a way that may change whether it
/// may claim (`<server> <taskQueueId> <workerGroup> <workerId>`).
const WORKER_CHANNEL: &str = "shoal_worker";
/// Work that another server's commit gave, as the wake-up subscribers hear of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteWork {
    /// This queue gained pending work.
    Queue(String),
    /// Notifications may have been missed (after a reconnect): every waiting worker should
    /// look again.
    Anywhere,
    /// A worker's record changed through another server (an operator's change, its own
    /// maintenance): what this server remembers of it is stale, and its claims look again.
    Worker(shoal_engine::worker::WorkerKey),
    /// A run's live log grew to `size` bytes through another server.
    Log {
        /// The task.
        task_id: shoal_engine::TaskId,
        /// The run.
        run_id: u32,
        /// Its size now.
        size: u64,
    },
}

/// How long settling waits for a transaction that drew an outbox id to end.
const SETTLE_PATIENCE: Duration = Duration::from_secs(10);
/// Attempts of an operation that lost a deadlock or serialization race.
const MAX_ATTEMPTS: usize = 5;

/// The schema version this build migrates databases to.
pub const PG_SCHEMA_VERSION: usize = schema::MIGRATIONS.len();

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<PgInner>,
}

struct PgInner {
    /// Blocking connections: reads and the background loops.
    pool: PgPool,
    /// Asynchronous connections: write operations.
    writer: deadpool_postgres::Pool,
    shared: Arc<TxShared>,
    feed: Arc<OutboxFeed>,
    tail: Arc<outbox::Tail>,
    /// Asks for a sequencing step (a commit staged messages).
    staged: std::sync::mpsc::Sender<()>,
    /// What other servers' waiting workers are told (queues with new pending work, changed
    /// workers).
    notes: std::sync::mpsc::Sender<Vec<notify::Note>>,
    wake: tokio::sync::broadcast::Sender<RemoteWork>,
    wants_to_publish: Arc<std::sync::atomic::AtomicBool>,
    publishing: tokio::sync::watch::Receiver<bool>,
    listening: Arc<std::sync::atomic::AtomicBool>,
    /// Where creates and task commands are gathered, started with the first (inside the runtime).
    gatherer: std::sync::OnceLock<gather::Gatherer>,
    /// How long a request waits for the database.
    request_timeout: Duration,
    /// This server's name in notifications (see `listen.rs`).
    server: String,
    /// The last dimension set the sweep of idle ones looked at (`dimension_sets.rs`).
    sets_swept: std::sync::Mutex<Vec<u8>>,
}

impl Drop for PgInner {
    fn drop(&mut self) {
        self.listening.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl PgStore {
    /// Tells the other servers that the records of `workers` changed, so that they read them
    /// again and their waiting claims look again.
    pub(crate) fn workers_changed(&self, workers: Vec<shoal_engine::worker::WorkerKey>) {
        if !workers.is_empty() {
            let _ = self.inner.notes.send(workers.into_iter().map(notify::Note::Worker).collect());
        }
    }

    /// The scheduler id of task-graph tasks.
    pub(crate) fn graph_scheduler_id(&self) -> &str {
        &self.inner.shared.settings.graph_scheduler_id
    }

    /// Connects, migrates, and picks up the outbox where the database has it.
    ///
    /// # Errors
    /// As [`PgPool::open`].
    pub fn open(config: &PgConfig) -> Result<PgStore, StoreError> {
        let pool = PgPool::open(config)?;
        let mut client = pool.get()?;
        let row = client.client.query_one(
            "SELECT (SELECT min(first_seq) FROM outbox_batches), \
             (SELECT last_seq FROM outbox_batches ORDER BY first_seq DESC LIMIT 1), \
             (SELECT published FROM outbox_state)",
            &[],
        )?;
        let bounds = Bounds::new(row.get(0), row.get(1), row.get(2));
        drop(client);
        let feed = Arc::new(OutboxFeed::new(bounds.first, bounds.last));
        let staged_here = Arc::new(outbox::Staged::new());
        let tail = Arc::new(outbox::Tail::new(Arc::clone(&feed), Arc::clone(&staged_here), bounds.last));
        let wake = tokio::sync::broadcast::channel(1024).0;
        let listening = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let wants_to_publish = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (publishing_tx, publishing) = tokio::sync::watch::channel(false);
        // Names this server in wake-ups, so it can ignore its own: unique enough across
        // processes and machines (a clash only costs a missed remote wake-up).
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let server = format!("{:x}.{:x}", std::process::id(), nanos.as_nanos());
        let server_name = server.clone();
        listen::start(listen::Listener {
            config: config.client_config()?,
            server: server.clone(),
            wake: wake.clone(),
            tail: Arc::clone(&tail),
            wants_to_publish: Arc::clone(&wants_to_publish),
            publishing: publishing_tx,
            listening: Arc::clone(&listening),
        })?;
        let (staged, steps) = std::sync::mpsc::channel();
        outbox::start_sequencer(pool.clone(), steps)?;
        let (notes, to_send) = std::sync::mpsc::channel();
        notify::start(pool.clone(), server, to_send)?;
        let inner = PgInner {
            pool,
            writer: config.writer()?,
            shared: Arc::new(TxShared {
                settings: config.settings.clone(),
                queues_touched: std::sync::Mutex::default(),
                staged: staged_here,
            }),
            feed,
            tail,
            staged,
            notes,
            wake,
            wants_to_publish,
            publishing,
            listening,
            gatherer: std::sync::OnceLock::new(),
            request_timeout: config.request_timeout,
            server: server_name,
            sets_swept: std::sync::Mutex::default(),
        };
        Ok(PgStore { inner: Arc::new(inner) })
    }

    /// Outbox rows this server's tail has taken from its memory (rows it staged) and from
    /// the table (other servers' rows, and its own that memory no longer held).
    #[must_use]
    pub fn outbox_rows_tailed(&self) -> (u64, u64) {
        self.inner.tail.served()
    }

    /// Queues that gained pending work on any server, as their commits land.
    #[must_use]
    pub fn pending_anywhere(&self) -> tokio::sync::broadcast::Receiver<RemoteWork> {
        self.inner.wake.subscribe()
    }

    /// Waits for `work` on the database at most the request timeout, then gives up on it as
    /// unavailable: a database that hangs (its disk stalled, its process frozen) or a network
    /// that went silent would otherwise hold every request until it came back. What was
    /// already sent finishes or fails on its own; what had not yet started is dropped.
    async fn within<T>(&self, work: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        let timeout = self.inner.request_timeout;
        tokio::time::timeout(timeout, work).await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!("the database did not answer within {} ms", timeout.as_millis())))
        })
    }

    /// Runs blocking `work` (`what`, for the error) on a blocking thread, [`within`](Self::within)
    /// the request timeout.
    async fn blocking<T, F>(&self, what: &str, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&PgInner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let task = tokio::task::spawn_blocking(move || work(&inner));
        self.within(async { task.await.map_err(|err| StoreError::Internal(format!("{what} task failed: {err}")))? })
            .await
    }

    /// Runs `op` on `args` in one transaction, retrying it when it lost a race to another
    /// server or found its connection dead before committing. It runs to its end even when
    /// the caller stops waiting (a connection must not go back to the pool mid-transaction),
    /// but does not start an attempt for a caller that has gone.
    pub(crate) async fn write<A, T, F>(&self, args: A, op: F) -> Result<Committed<T>, StoreError>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t> Fn(&'t mut PgTx, &'t A) -> TxFuture<'t, T> + Send + Sync + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let (reply, answer) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut attempt, mut lost) = (1, 0);
            let result = loop {
                let client = match inner.writer.get().await {
                    Ok(client) => client,
                    Err(err) => break Err(unavailable(err)),
                };
                if reply.is_closed() {
                    return;
                }
                let mut tx = PgTx::begin(client, Arc::clone(&inner.shared));
                let result = match op(&mut tx, &args).await {
                    Ok(value) => tx.commit().await.map(|()| value),
                    Err(err) => Err(err),
                };
                let err = match result {
                    Ok(value) => break Ok(inner.committed(value, tx)),
                    Err(err) => err,
                };
                match err {
                    StoreError::Conflict(text) if attempt < MAX_ATTEMPTS => {
                        tracing::debug!(error = %text, attempt, "transaction lost a race; retrying");
                        attempt += 1;
                        tx.rollback().await;
                    }
                    // The connection died (the database restarted, or it was closed while
                    // idle). Before the COMMIT went out nothing can have been written, so the
                    // operation runs again on another. Every pooled connection may have died
                    // with the database; each one found dead is dropped, so a fresh one comes
                    // within the pool's size (while the database is away, `get` fails).
                    StoreError::Unavailable(text) if !tx.committing && lost < inner.writer.status().max_size => {
                        tracing::debug!(error = %text, "connection lost before the commit; retrying");
                        lost += 1;
                        tx.discard();
                    }
                    StoreError::Unavailable(text) => {
                        tx.discard();
                        break Err(StoreError::Unavailable(text));
                    }
                    err => {
                        tx.rollback().await;
                        break Err(err);
                    }
                }
            };
            let _ = reply.send(result);
        });
        self.within(async { answer.await.map_err(|_| StoreError::Internal("the write task failed".into()))? }).await
    }

    /// Runs an operation: creates without dependencies, task commands and claims are
    /// gathered with the writes that arrive with them (`gather/mod.rs`); any other runs in a
    /// transaction of its own.
    pub(crate) async fn run(&self, op: Op, now: Timestamp) -> Result<Committed<Outcome>, StoreError> {
        if !gather::gathers(&op) {
            return self.alone(op, now).await;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        match self.gatherer().submit(gather::Job { op, now, reply }) {
            Ok(()) => {
                self.within(async {
                    answer.await.map_err(|_| StoreError::Internal("the operation was dropped unanswered".into()))?
                })
                .await
            }
            Err(job) => self.alone(job.op, job.now).await,
        }
    }

    /// Runs an operation in a transaction of its own.
    pub(crate) async fn alone(&self, op: Op, now: Timestamp) -> Result<Committed<Outcome>, StoreError> {
        self.write(op, move |tx, op| Box::pin(op.run(tx, now))).await
    }

    /// This server's gathering lanes, started with its first gathered write.
    fn gatherer(&self) -> &gather::Gatherer {
        self.inner.gatherer.get_or_init(|| gather::Gatherer::start(&Arc::downgrade(&self.inner)))
    }

    pub(crate) fn outbox(&self) -> Arc<OutboxFeed> {
        Arc::clone(&self.inner.feed)
    }

    /// Deletes fully published outbox rows and records how far publication went.
    pub(crate) async fn trim_outbox(&self) -> Result<(), StoreError> {
        let published = self.inner.feed.published_upto() as i64;
        self.write(published, |tx, published| {
            Box::pin(async move {
                // Bounded by the key too, so the index finds the rows.
                tx.defer(
                    "DELETE FROM outbox_batches WHERE first_seq <= $1 AND last_seq <= $1",
                    vec![Box::new(*published)],
                )
                .await?;
                tx.defer("UPDATE outbox_state SET published = greatest(published, $1)", vec![Box::new(*published)])
                    .await
            })
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&dyn Reads) -> Result<T, StoreError> + Send + 'static,
    {
        self.blocking("read", move |inner| {
            let mut attempt = 1;
            loop {
                let mut client = inner.pool.get()?;
                let result = query(&ReadsOver(reads::PgReads(RefCell::new(&mut client))));
                // A pooled connection that died while idle (the database restarted) fails
                // its first use: the read is repeated on a fresh one; the dead one is dropped.
                // The error, not `is_closed`, decides: the client may learn that its socket
                // closed only after the request failed on it. A read is safe to repeat, and
                // every pooled connection may be dead: each is dropped, so a fresh one comes
                // within the pool's size (while the database is away, `get` itself fails).
                match result {
                    Err(StoreError::Unavailable(err)) if attempt <= inner.pool.max_size() => {
                        tracing::debug!(error = %err, "read failed for want of the database; retrying on a fresh connection");
                        client.broken = true;
                        attempt += 1;
                    }
                    result => return result,
                }
            }
        })
        .await
    }

    /// Waits until every message committed before the call (by any server) is in this
    /// server's feed: positioned, and tailed.
    pub(crate) async fn settle_outbox(&self) -> Result<(), StoreError> {
        self.blocking("settle", |inner| {
            let mut conn = inner.pool.get()?;
            outbox::sequence_all(&mut conn, SETTLE_PATIENCE)?;
            inner.tail.catch_up(&mut conn)
        })
        .await
    }

    /// Waits until this server is the one publishing (one server at a time does); returns
    /// the first sequence not yet published.
    pub(crate) async fn publishing_turn(&self) -> Result<u64, StoreError> {
        self.inner.wants_to_publish.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut publishing = self.inner.publishing.clone();
        publishing
            .wait_for(|publishing| *publishing)
            .await
            .map_err(|_| StoreError::Unavailable("the listener stopped".into()))?;
        let published: i64 =
            self.read_with(|client| Ok(client.query_one("SELECT published FROM outbox_state", &[])?.get(0))).await?;
        Ok(published as u64 + 1)
    }

    /// Whether this server still holds the publishing lock.
    pub(crate) fn is_publishing(&self) -> bool {
        *self.inner.publishing.borrow()
    }

    async fn read_with<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut postgres::Client) -> Result<T, StoreError> + Send + 'static,
    {
        self.blocking("read", move |inner| query(&mut inner.pool.get()?.client)).await
    }

    /// Positions what this server staged, so its messages are ready for whoever publishes.
    pub(crate) async fn close(&self) {
        if let Err(err) = self.settle_outbox().await {
            tracing::warn!(error = %err, "outbox not sequenced at close; another server (or the next start) will");
        }
    }
}

/// An operation's future, borrowing its transaction and arguments.
type TxFuture<'t, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 't>>;

impl PgInner {
    /// What a committed transaction leaves: its events; wake-ups for other servers' waiting
    /// workers and a sequencing step for its messages are asked for.
    fn committed<T>(&self, value: T, tx: PgTx) -> Committed<T> {
        let PgTx { events, staged, .. } = tx;
        let mut woken: Vec<notify::Note> = events
            .iter()
            .filter(|event| matches!(event.event, shoal_engine::event::Event::Pending { .. }))
            .map(|event| notify::Note::Pending(event.task_queue_id.clone()))
            .collect();
        woken.dedup();
        // The threads are gone only when the store is: nobody is left to tell.
        if !woken.is_empty() {
            let _ = self.notes.send(woken);
        }
        if staged {
            let _ = self.staged.send(());
        }
        Committed { value, events }
    }
}

/// Applies pending migrations to the database at `url` (`shoal migrate`); returns how many.
///
/// # Errors
/// As [`PgPool::open`].
pub fn migrate(url: &str) -> Result<usize, StoreError> {
    let mut client = PgConfig::new(url).client_config()?.connect(NoTls)?;
    schema::migrate(&mut client)
}

pub(crate) fn unavailable(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("database unreachable: {err}"))
}
