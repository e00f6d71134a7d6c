//! The PostgreSQL backend: many stateless servers on one database.
//!
//! Each operation is one transaction on a pooled connection, run off the async threads.
//! Rows an operation changes are locked as it reads them; claims and due transitions skip
//! rows another server holds, so concurrent servers never hand one run out twice.

mod artifacts;
mod graph;
mod listen;
mod notify;
mod ops;
mod outbox;
mod reads;
mod row;
mod schema;
mod tx;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use postgres::{NoTls, Statement};
use r2d2_postgres::PostgresConnectionManager;
use shoal_engine::artifact::{Artifact, ArtifactRequest};
use shoal_engine::definition::TaskDefinition;
use shoal_engine::priority::Priority;
use shoal_engine::status::TaskStatus;
use shoal_engine::{TaskId, Timestamp};

use crate::outbox::OutboxFeed;
use crate::sqlite::outbox::Bounds;
use crate::{
    ArtifactKey, Claim, ClaimRequest, Committed, GroupCancellation, Reads, StoreError, TaskCommand, TaskGroup,
};
use tx::PgTx;

/// The NOTIFY channel on which commits name the queues that gained pending work.
const WAKE_CHANNEL: &str = "shoal_pending";
/// Sent to the wake-up subscribers when notifications may have been missed (after a
/// reconnect): every waiting worker should look again.
pub const WAKE_ALL: &str = "*";

/// How long settling waits for a transaction that drew an outbox id to end.
const SETTLE_PATIENCE: Duration = Duration::from_secs(10);
/// Attempts of an operation that lost a deadlock or serialization race.
const MAX_ATTEMPTS: usize = 5;

/// The schema version this build migrates databases to.
pub const PG_SCHEMA_VERSION: usize = schema::MIGRATIONS.len();

/// Settings of the PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// `postgres://user[:password]@host[:port]/database[?options]`.
    pub url: String,
    /// Most connections this server keeps open.
    pub max_connections: u32,
    /// How long a request waits for a connection before failing as unavailable.
    pub connect_timeout: Duration,
    /// Seconds a claim holds before it must be renewed.
    pub claim_timeout_secs: i64,
    /// The task-graph scheduler's id, set on every graph task.
    pub graph_scheduler_id: String,
}

impl PgConfig {
    /// Settings for `url` with the defaults.
    #[must_use]
    pub fn new(url: &str) -> PgConfig {
        PgConfig {
            url: url.to_owned(),
            max_connections: 32,
            connect_timeout: Duration::from_secs(5),
            claim_timeout_secs: 1200,
            graph_scheduler_id: shoal_engine::graph::DEFAULT_SCHEDULER_ID.to_owned(),
        }
    }

    fn client_config(&self) -> Result<postgres::Config, StoreError> {
        self.url.parse().map_err(|err| {
            StoreError::Other(format!("database: must be a postgres://user@host:port/database URL ({err})"))
        })
    }

    fn manager(&self) -> Result<Manager, StoreError> {
        Ok(Manager(PostgresConnectionManager::new(self.client_config()?, NoTls)))
    }
}

type Pool = r2d2::Pool<Manager>;

/// A pooled connection and the statements prepared on it.
pub(crate) struct PgConn {
    pub(crate) client: postgres::Client,
    pub(crate) statements: HashMap<String, Statement>,
    /// Set when a request on it failed for want of the database: the pool drops it.
    pub(crate) broken: bool,
}

/// Makes [`PgConn`]s: PostgreSQL connections that keep their prepared statements.
pub(crate) struct Manager(PostgresConnectionManager<NoTls>);

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        Ok(PgConn { client: self.0.connect()?, statements: HashMap::new(), broken: false })
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), postgres::Error> {
        self.0.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.broken || self.0.has_broken(&mut conn.client)
    }
}

/// Holds the pool so that it is dropped off the async threads: each blocking client owns a
/// small runtime, which must not be shut down from inside another runtime.
struct PoolHolder(Option<Pool>);

impl Drop for PoolHolder {
    fn drop(&mut self) {
        if let Some(pool) = self.0.take() {
            let _ = std::thread::spawn(move || drop(pool)).join();
        }
    }
}

/// A pool of connections to one PostgreSQL database whose schema is current.
#[derive(Clone)]
pub struct PgPool {
    pool: Arc<PoolHolder>,
}

impl PgPool {
    /// Connects and brings the schema up to date (waiting for another server doing the same).
    ///
    /// # Errors
    /// Unavailable when the database cannot be reached; Other for a bad URL or a failed migration.
    pub fn open(config: &PgConfig) -> Result<PgPool, StoreError> {
        let pool = r2d2::Pool::builder()
            .max_size(config.max_connections)
            .min_idle(Some(0))
            .connection_timeout(config.connect_timeout)
            // No test query per checkout (a round trip per request): a connection found
            // broken fails its request with 503 and is then discarded.
            .test_on_check_out(false)
            .build_unchecked(config.manager()?);
        let pool = PgPool { pool: Arc::new(PoolHolder(Some(pool))) };
        let mut client = pool.get()?;
        let applied = schema::migrate(&mut client.client)?;
        tracing::info!(applied, version = schema::MIGRATIONS.len(), "database schema is current");
        drop(client);
        Ok(pool)
    }

    /// The schema version the database is at.
    ///
    /// # Errors
    /// Unavailable when the database cannot be reached.
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        let row = self.get()?.client.query_one("SELECT version FROM shoal_schema", &[])?;
        Ok(row.get::<_, i32>(0) as usize)
    }

    /// How many connections the pool may hold: how many dead ones a restart can leave in it.
    fn max_size(&self) -> usize {
        self.pool.0.as_ref().map_or(0, |pool| pool.max_size() as usize)
    }

    /// A connection from the pool.
    pub(crate) fn get(&self) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        self.pool.0.as_ref().ok_or_else(|| unavailable("closed"))?.get().map_err(unavailable)
    }
}

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<PgInner>,
}

struct PgInner {
    pool: PgPool,
    claim_timeout_secs: i64,
    graph_scheduler_id: String,
    queues_touched: std::sync::Mutex<HashMap<String, i64>>,
    feed: Arc<OutboxFeed>,
    tail: Arc<outbox::Tail>,
    /// Asks for a sequencing step (a commit staged messages).
    staged: std::sync::mpsc::Sender<()>,
    /// Queues that gained pending work, for other servers' waiting workers.
    woken: std::sync::mpsc::Sender<Vec<String>>,
    wake: tokio::sync::broadcast::Sender<String>,
    wants_to_publish: Arc<std::sync::atomic::AtomicBool>,
    publishing: tokio::sync::watch::Receiver<bool>,
    listening: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for PgInner {
    fn drop(&mut self) {
        self.listening.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl PgStore {
    /// Connects, migrates, and picks up the outbox where the database has it.
    ///
    /// # Errors
    /// As [`PgPool::open`].
    pub fn open(config: &PgConfig) -> Result<PgStore, StoreError> {
        let pool = PgPool::open(config)?;
        let mut client = pool.get()?;
        let row = client.client.query_one(
            "SELECT (SELECT min(first_seq) FROM outbox_batches), (SELECT max(last_seq) FROM outbox_batches), \
             (SELECT published FROM outbox_state)",
            &[],
        )?;
        let bounds = Bounds::new(row.get(0), row.get(1), row.get(2));
        drop(client);
        let feed = Arc::new(OutboxFeed::new(bounds.first, bounds.last));
        let tail = Arc::new(outbox::Tail::new(Arc::clone(&feed), bounds.last));
        let wake = tokio::sync::broadcast::channel(1024).0;
        let listening = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let wants_to_publish = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (publishing_tx, publishing) = tokio::sync::watch::channel(false);
        // Names this server in wake-ups, so it can ignore its own: unique enough across
        // processes and machines (a clash only costs a missed remote wake-up).
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let server = format!("{:x}.{:x}", std::process::id(), nanos.as_nanos());
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
        let (woken, wake_ups) = std::sync::mpsc::channel();
        notify::start(pool.clone(), server, wake_ups)?;
        let inner = PgInner {
            pool,
            claim_timeout_secs: config.claim_timeout_secs,
            graph_scheduler_id: config.graph_scheduler_id.clone(),
            queues_touched: std::sync::Mutex::default(),
            feed,
            tail,
            staged,
            woken,
            wake,
            wants_to_publish,
            publishing,
            listening,
        };
        Ok(PgStore { inner: Arc::new(inner) })
    }

    /// Queues that gained pending work on any server (or [`WAKE_ALL`]), as their commits land.
    #[must_use]
    pub fn pending_anywhere(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.inner.wake.subscribe()
    }

    /// Runs `op` in one transaction, retrying it when it lost a deadlock to another server.
    async fn write<T, F>(&self, op: F) -> Result<Committed<T>, StoreError>
    where
        T: Send + 'static,
        F: Fn(&mut PgTx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut client = inner.pool.get()?;
            let (mut attempt, mut stale) = (1, 0);
            loop {
                match run_transaction(&mut client, &inner, &op) {
                    Err(TxError::Retry(err)) if attempt < MAX_ATTEMPTS => {
                        tracing::debug!(error = %err, attempt, "transaction lost a race; retrying");
                        attempt += 1;
                    }
                    // The pooled connection died while idle (the database restarted): nothing
                    // was sent, so take another. Every pooled connection may have died with
                    // the database; each one found dead is dropped, so a fresh one comes
                    // within the pool's size.
                    Err(TxError::Stale(err)) if stale < inner.pool.max_size() => {
                        tracing::debug!(error = %err, "pooled connection was closed; reconnecting");
                        stale += 1;
                        client.broken = true;
                        client = inner.pool.get()?;
                    }
                    Err(TxError::Retry(err) | TxError::Stale(err) | TxError::Store(err)) => {
                        if matches!(err, StoreError::Unavailable(_)) {
                            client.broken = true;
                        }
                        return Err(err);
                    }
                    Ok(committed) => return Ok(committed),
                }
            }
        })
        .await
        .map_err(|err| StoreError::Other(format!("write task failed: {err}")))?
    }

    pub(crate) async fn create_task(
        &self,
        definition: TaskDefinition,
        task_id: TaskId,
        now: Timestamp,
    ) -> Result<Committed<TaskStatus>, StoreError> {
        self.write(move |tx| ops::create_task(tx, &definition, task_id, now)).await
    }

    pub(crate) async fn create_graph(
        &self,
        request: crate::graph::GraphRequest,
        now: Timestamp,
    ) -> Result<Committed<shoal_engine::message::GraphStatus>, StoreError> {
        self.write(move |tx| crate::graph::create(tx, &request, now)).await
    }

    pub(crate) async fn extend_graph(
        &self,
        task_graph_id: TaskId,
        input: shoal_engine::graph::ExtensionInput,
        now: Timestamp,
    ) -> Result<Committed<shoal_engine::message::GraphStatus>, StoreError> {
        self.write(move |tx| crate::graph::extend(tx, task_graph_id, &input, now)).await
    }

    pub(crate) async fn apply(
        &self,
        task_id: TaskId,
        command: TaskCommand,
        now: Timestamp,
    ) -> Result<Committed<TaskStatus>, StoreError> {
        self.write(move |tx| ops::apply(tx, task_id, &command, now)).await
    }

    pub(crate) async fn claim_work(
        &self,
        request: ClaimRequest,
        now: Timestamp,
    ) -> Result<Committed<Vec<Claim>>, StoreError> {
        self.write(move |tx| ops::claim_work(tx, &request, now)).await
    }

    pub(crate) async fn claim_task(
        &self,
        task_id: TaskId,
        run_id: u32,
        worker_group: String,
        worker_id: String,
        now: Timestamp,
    ) -> Result<Committed<Claim>, StoreError> {
        self.write(move |tx| ops::claim_run(tx, task_id, run_id, &worker_group, &worker_id, now)).await
    }

    pub(crate) async fn fire_due(&self, now: Timestamp, limit: usize) -> Result<Committed<usize>, StoreError> {
        self.write(move |tx| ops::fire_due(tx, now, limit)).await
    }

    pub(crate) async fn seal_task_group(
        &self,
        group: TaskId,
        now: Timestamp,
    ) -> Result<Committed<TaskGroup>, StoreError> {
        self.write(move |tx| ops::seal_task_group(tx, group, now)).await
    }

    pub(crate) async fn cancel_task_group(
        &self,
        group: TaskId,
        now: Timestamp,
    ) -> Result<Committed<GroupCancellation>, StoreError> {
        self.write(move |tx| ops::cancel_task_group(tx, group, now)).await
    }

    pub(crate) async fn change_task_group_priority(
        &self,
        group: TaskId,
        priority: Priority,
        now: Timestamp,
    ) -> Result<Committed<Vec<TaskId>>, StoreError> {
        self.write(move |tx| ops::change_task_group_priority(tx, group, priority, now)).await
    }

    pub(crate) async fn create_artifact(
        &self,
        key: ArtifactKey,
        request: ArtifactRequest,
        now: Timestamp,
    ) -> Result<Committed<Artifact>, StoreError> {
        self.write(move |tx| artifacts::create(tx, &key, request.clone(), now)).await
    }

    pub(crate) async fn artifact_uploaded(&self, key: ArtifactKey) -> Result<Committed<Artifact>, StoreError> {
        self.write(move |tx| artifacts::uploaded(tx, &key)).await
    }

    pub(crate) async fn forget_artifacts(&self, keys: Vec<ArtifactKey>) -> Result<Committed<usize>, StoreError> {
        self.write(move |tx| artifacts::forget(tx, &keys)).await
    }

    pub(crate) fn outbox(&self) -> Arc<OutboxFeed> {
        Arc::clone(&self.inner.feed)
    }

    /// Deletes fully published outbox rows and records how far publication went.
    pub(crate) async fn trim_outbox(&self) -> Result<(), StoreError> {
        let published = self.inner.feed.published_upto() as i64;
        self.write(move |tx| {
            tx.tx.execute("DELETE FROM outbox_batches WHERE last_seq <= $1", &[&published])?;
            tx.tx.execute("UPDATE outbox_state SET published = greatest(published, $1)", &[&published])?;
            Ok(())
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&dyn Reads) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut attempt = 1;
            loop {
                let mut client = inner.pool.get()?;
                let result = query(&reads::PgReads(RefCell::new(&mut client.client)));
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
        .map_err(|err| StoreError::Other(format!("read task failed: {err}")))?
    }

    /// Waits until every message committed before the call (by any server) is in this
    /// server's feed: positioned, and tailed.
    pub(crate) async fn settle_outbox(&self) -> Result<(), StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.pool.get()?;
            outbox::sequence_all(&mut conn.client, SETTLE_PATIENCE)?;
            inner.tail.catch_up(&mut conn.client)
        })
        .await
        .map_err(|err| StoreError::Other(format!("settle task failed: {err}")))?
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
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || query(&mut inner.pool.get()?.client))
            .await
            .map_err(|err| StoreError::Other(format!("read task failed: {err}")))?
    }

    /// Positions what this server staged, so its messages are ready for whoever publishes.
    pub(crate) async fn close(&self) {
        if let Err(err) = self.settle_outbox().await {
            tracing::warn!(error = %err, "outbox not sequenced at close; another server (or the next start) will");
        }
    }
}

enum TxError {
    /// Lost a deadlock or serialization race: the whole operation may run again.
    Retry(StoreError),
    /// The connection was found closed before the transaction began.
    Stale(StoreError),
    Store(StoreError),
}

fn run_transaction<T>(
    conn: &mut PgConn,
    inner: &PgInner,
    op: &impl Fn(&mut PgTx<'_>) -> Result<T, StoreError>,
) -> Result<Committed<T>, TxError> {
    let classify = |err: postgres::Error| {
        let retry = err.code().is_some_and(|code| {
            *code == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                || *code == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
        });
        if retry { TxError::Retry(err.into()) } else { TxError::Store(err.into()) }
    };
    let PgConn { client, statements, .. } = conn;
    let transaction = client
        .transaction()
        .map_err(|err| if client_lost(&err) { TxError::Stale(err.into()) } else { classify(err) })?;
    let mut tx = PgTx {
        tx: transaction,
        statements,
        claim_timeout_secs: inner.claim_timeout_secs,
        graph_scheduler_id: &inner.graph_scheduler_id,
        queues_touched: &inner.queues_touched,
        events: Vec::new(),
        messages: Vec::new(),
    };
    let value = match op(&mut tx) {
        Ok(value) => value,
        // A refusal rolls the transaction back (dropping it does): nothing is half-written.
        Err(StoreError::Other(text)) if is_retryable_text(&text) => {
            return Err(TxError::Retry(StoreError::Other(text)));
        }
        Err(err) => return Err(TxError::Store(err)),
    };
    let PgTx { tx: mut transaction, events, messages, .. } = tx;
    let staged = !messages.is_empty();
    if staged {
        outbox::stage(&mut transaction, &messages).map_err(classify)?;
    }
    transaction.commit().map_err(classify)?;
    let mut woken: Vec<String> = events
        .iter()
        .filter(|event| matches!(event.event, shoal_engine::event::Event::Pending { .. }))
        .map(|event| event.task_queue_id.clone())
        .collect();
    woken.dedup();
    // The threads are gone only when the store is: nobody is left to tell.
    if !woken.is_empty() {
        let _ = inner.woken.send(woken);
    }
    if staged {
        let _ = inner.staged.send(());
    }
    Ok(Committed { value, events })
}

/// Whether `err` says the connection is gone (the server closed it or the socket failed).
fn client_lost(err: &postgres::Error) -> bool {
    err.is_closed() || err.as_db_error().is_none_or(|db| db.code().code().starts_with("57P"))
}

/// Whether a converted error (whose text starts with its SQLSTATE) is a lost deadlock or
/// serialization race.
fn is_retryable_text(text: &str) -> bool {
    text.starts_with("40P01:") || text.starts_with("40001:")
}

/// Applies pending migrations to the database at `url` (`shoal migrate`); returns how many.
///
/// # Errors
/// As [`PgPool::open`].
pub fn migrate(url: &str) -> Result<usize, StoreError> {
    let mut client = PgConfig::new(url).client_config()?.connect(NoTls)?;
    schema::migrate(&mut client)
}

fn unavailable(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("database unreachable: {err}"))
}

impl From<postgres::Error> for StoreError {
    fn from(err: postgres::Error) -> StoreError {
        // Lost connections, a server shutting down or refusing connections: retryable (503).
        let transient = err.is_closed()
            || err.code().is_some_and(|code| {
                let code = code.code();
                code.starts_with("08") || code.starts_with("57P") || code == "53300"
            })
            || (err.code().is_none()
                && std::error::Error::source(&err).is_some_and(|source| source.is::<std::io::Error>()));
        // postgres::Error's own text is only "db error"; the server's message says what failed.
        let text = match err.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => err.to_string(),
        };
        if transient { StoreError::Unavailable(text) } else { StoreError::Other(text) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_name_the_field() {
        let Err(err) = PgConfig::new("mysql://nope").manager() else { panic!("refused") };
        assert!(err.to_string().contains("database: must be a postgres://"), "{err}");
    }
}
