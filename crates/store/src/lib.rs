//! Shoal's store: every operation as one atomic, durable step over the engine's rules.
//!
//! The store loads what a command needs, lets the engine decide, writes the result and the
//! events it caused in one transaction, and only then answers. It is the only crate that
//! knows SQL. [`Store`] is a closed enum over the backends so callers need no generics.

#![warn(missing_docs)]

pub mod outbox;
mod postgres;
mod sqlite;

// The application layer (`shoal-ops`), under the names the backends use for it.
pub(crate) use shoal_ops as ops;
pub(crate) use shoal_ops::{reads, row};

pub use postgres::{
    PG_SCHEMA_VERSION, PgConfig, PgPool, PgStore, REQUEST_TIMEOUT as PG_REQUEST_TIMEOUT, RemoteWork,
    migrate as migrate_postgres,
};
pub use shoal_ops::reads::ServiceReads;
pub use shoal_ops::records::*;
pub use shoal_ops::{
    AuthChange, AuthOutcome, ClientEdit, DEFAULT_CLAIM_TIMEOUT_SECS, DEFAULT_QUEUE_RETENTION_SECS, GraphNode,
    GraphRecord, GraphRequest, Op, Operation, Outcome, Page, Reads, StoreError, StoreSettings, WorkerChange, hooks,
    named_secrets, operation,
};
pub use sqlite::{ClaimAnswer, Parked, SqliteConfig, SqliteStore};

use shoal_engine::worker::WorkerKey;
use shoal_engine::{TaskId, Timestamp};

/// Called with the queue and needs (none: any worker) of a run a commit made pending.
pub type WakeHook = Box<dyn Fn(&str, Option<&shoal_engine::dimensions::Dimensions>) + Send + Sync>;

/// The storage backends.
#[derive(Clone)]
pub enum Store {
    /// Embedded SQLite under a data directory.
    Sqlite(SqliteStore),
    /// PostgreSQL, shared by any number of servers.
    Postgres(PgStore),
}

impl Store {
    /// Runs a write operation (see [`ops::operation`]) in one transaction, alone or gathered
    /// with others, and answers once its commit is durable.
    ///
    /// # Errors
    /// Rejected when the rules refuse it (naming the field); Unavailable, Conflict or another
    /// storage failure otherwise.
    pub async fn run<O: Operation>(&self, op: O, now: Timestamp) -> Result<Committed<O::Output>, StoreError> {
        let Committed { value, events } = match self {
            Store::Sqlite(store) => store.run(op.into(), now).await?,
            Store::Postgres(store) => store.run(op.into(), now).await?,
        };
        let value =
            O::output(value).ok_or_else(|| StoreError::Internal("an operation answered another's outcome".into()))?;
        Ok(Committed { value, events })
    }

    /// Has the store wake waiting claims itself, calling `hook` with the queue and needs of
    /// each run a commit makes pending as soon as it is committed, so that a woken claim's
    /// write follows in the next batch while that commit syncs (embedded SQLite). Says whether
    /// it will; otherwise the caller wakes them from the events each write returns.
    #[must_use]
    pub fn wake_at_commit(&self, hook: WakeHook) -> bool {
        match self {
            Store::Sqlite(store) => store.wake_at_commit(hook),
            Store::Postgres(_) => false,
        }
    }

    /// Parks a claimWork that found nothing, so that the next batch making a run it can take
    /// pending claims it in the same transaction (embedded SQLite); `None` where waiting
    /// claims are only woken. `clock` is read when the claim is made.
    #[must_use]
    pub fn park_claim(&self, request: &ClaimRequest, clock: fn() -> Timestamp) -> Option<Parked> {
        match self {
            Store::Sqlite(store) => Some(store.park_claim(request.clone(), clock)),
            Store::Postgres(_) => None,
        }
    }

    /// The scheduler id the task-graph scheduler gives its tasks.
    #[must_use]
    pub fn graph_scheduler_id(&self) -> &str {
        match self {
            Store::Sqlite(store) => store.graph_scheduler_id(),
            Store::Postgres(store) => store.graph_scheduler_id(),
        }
    }

    /// Tells the other servers on the database that the records of `workers` changed in a way
    /// that may change whether they may claim (nobody to tell with SQLite).
    pub fn workers_changed(&self, workers: Vec<WorkerKey>) {
        if let Store::Postgres(store) = self {
            store.workers_changed(workers);
        }
    }

    /// Forgets up to `limit` entries of the pending index that hold nothing any more: on
    /// PostgreSQL dimension sets with no pending task (SQLite's index drops them at once).
    ///
    /// # Errors
    /// Unavailable or Other on storage failure.
    pub async fn tidy_pending_index(&self, limit: usize) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Postgres(store) => store.forget_idle_dimension_sets(limit).await,
        }
    }

    /// Queues that gained pending work through another server's commit;
    /// `None` when no other server can write (embedded SQLite).
    #[must_use]
    pub fn pending_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<RemoteWork>> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(store) => Some(store.pending_anywhere()),
        }
    }

    /// The committed messages awaiting publication.
    #[must_use]
    pub fn outbox(&self) -> std::sync::Arc<outbox::OutboxFeed> {
        match self {
            Store::Sqlite(store) => store.outbox(),
            Store::Postgres(store) => store.outbox(),
        }
    }

    /// Deletes published messages from the outbox now rather than with the next write.
    ///
    /// # Errors
    /// Unavailable or Other on storage failure.
    pub async fn trim_outbox(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.trim_outbox().await,
            Store::Postgres(store) => store.trim_outbox().await,
        }
    }

    /// Waits until every message committed before the call is in [`Store::outbox`]'s feed
    /// (with several servers on one database, messages reach the feed shortly after commit).
    ///
    /// # Errors
    /// Unavailable or Other on storage failure.
    pub async fn settle_outbox(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Postgres(store) => store.settle_outbox().await,
        }
    }

    /// Waits until this server is the one that publishes the outbox (with several servers on
    /// one database, one at a time does); returns the first sequence not yet published.
    ///
    /// # Errors
    /// Unavailable when the database cannot be reached.
    pub async fn publishing_turn(&self) -> Result<u64, StoreError> {
        match self {
            Store::Sqlite(store) => Ok(store.outbox().first()),
            Store::Postgres(store) => store.publishing_turn().await,
        }
    }

    /// Whether this server still is the one that publishes.
    #[must_use]
    pub fn is_publishing(&self) -> bool {
        match self {
            Store::Sqlite(_) => true,
            Store::Postgres(store) => store.is_publishing(),
        }
    }

    /// Runs `query` on committed state, off the async threads. Each of its queries sees what
    /// was committed when it started; a query of several parts is not one snapshot (a commit
    /// may land between two of them).
    ///
    /// # Errors
    /// Whatever the query returns, or Unavailable when no connection can be had.
    pub async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&dyn Reads) -> Result<T, StoreError> + Send + 'static,
    {
        match self {
            Store::Sqlite(store) => store.read(query).await,
            Store::Postgres(store) => store.read(query).await,
        }
    }

    /// Whether live logs are kept in the database (PostgreSQL: shared by every server on it)
    /// rather than in each server's blob directory (SQLite: one server).
    #[must_use]
    pub fn keeps_logs(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// Appends `bytes`, which belong at `offset`, to a run's live log kept in the database.
    ///
    /// # Errors
    /// Internal when this store keeps no logs ([`Store::keeps_logs`]); storage failure.
    pub async fn append_log(
        &self,
        task_id: TaskId,
        run_id: u32,
        offset: u64,
        bytes: Vec<u8>,
    ) -> Result<LogAppend, StoreError> {
        match self {
            Store::Postgres(store) => store.append_log(task_id, run_id, offset, bytes).await,
            Store::Sqlite(_) => Err(no_logs()),
        }
    }

    /// The size of a run's live log kept in the database.
    ///
    /// # Errors
    /// As [`Store::append_log`].
    pub async fn log_size(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
        match self {
            Store::Postgres(store) => store.log_size(task_id, run_id).await,
            Store::Sqlite(_) => Err(no_logs()),
        }
    }

    /// Up to `max` bytes of a run's live log kept in the database, from `offset`.
    ///
    /// # Errors
    /// As [`Store::append_log`].
    pub async fn read_log(&self, task_id: TaskId, run_id: u32, offset: u64, max: usize) -> Result<Vec<u8>, StoreError> {
        match self {
            Store::Postgres(store) => store.read_log(task_id, run_id, offset, max).await,
            Store::Sqlite(_) => Err(no_logs()),
        }
    }

    /// Stops the writer after it finishes what it has.
    pub async fn close(&self) {
        match self {
            Store::Sqlite(store) => store.close().await,
            Store::Postgres(store) => store.close().await,
        }
    }
}

fn no_logs() -> StoreError {
    StoreError::Internal("live logs are kept by the blob store with SQLite".into())
}

/// What an append to a live log did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogAppend {
    /// The log now has this many bytes (a resent chunk adds nothing).
    Size(u64),
    /// The chunk starts past the end: the log has only this many bytes.
    Gap(u64),
}
