//! One write transaction on SQLite over the writer's connection, and the state the writer
//! keeps between them (`write.rs` implements [`crate::ops::WriteTx`] over it, `domains.rs`
//! the per-domain traits).

use std::sync::Arc;

use rusqlite::{Connection, params};
use serde_json::value::RawValue;
use shoal_engine::{TaskId, Timestamp};

use crate::ops::QueueRecords;
use crate::outbox::{OutboxEntry, OutboxFeed};
use crate::row::{TaskRow, corrupt};
use crate::sqlite::SqliteConfig;
use crate::sqlite::commit_view::{CommitView, Wake};
use crate::sqlite::pending::PendingIndex;
use crate::sqlite::row::{N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row};
use crate::sqlite::waiting_claims::WaitingClaims;
use crate::{StoreError, StoreSettings, TaskEvent};

/// State the writer thread keeps between transactions.
#[derive(Debug)]
pub(crate) struct WriterState {
    pub(crate) index: PendingIndex,
    pub(crate) next_seq: u64,
    queue_touched: QueueRecords,
    /// Queues recorded active by the batch in progress, published at its commit.
    recorded: Vec<(String, i64)>,
    /// What claims may see without the writer, published at each commit.
    commit_view: Arc<CommitView>,
    /// Runs the batch in progress made pending, woken at its commit.
    pub(crate) wakes: Vec<Wake>,
    /// claimWork calls waiting for runs like those (`waiting_claims.rs`).
    pub(crate) waiting: Arc<WaitingClaims>,
    /// The batch in progress swept `queue_touched` (at this time): the pending index and the
    /// commit_view forget their quiet queues at its commit.
    sweep_due: Option<i64>,
    /// Sequence of the last message written to the outbox.
    pub(crate) outbox_seq: u64,
    /// Messages up to here have been deleted from the outbox (after publication).
    pub(crate) outbox_trimmed: u64,
    pub(crate) feed: Arc<OutboxFeed>,
    pub(crate) settings: StoreSettings,
}

impl WriterState {
    /// The batch was rolled back: nothing it did is published or woken, and which queues were
    /// recently recorded is forgotten (some of those records may be gone).
    pub(crate) fn rolled_back(&mut self) {
        self.index.rollback_to(0);
        self.queue_touched.clear();
        self.recorded.clear();
        self.wakes.clear();
    }

    /// The batch committed: publishes what it changed to the commit_view, wakes claims for the
    /// runs it made pending, and forgets the index's undo log.
    pub(crate) fn committed(&mut self) {
        let recorded = self.recorded.iter().map(|(queue, at)| (queue.as_str(), *at));
        self.commit_view.publish(self.index.changed_queues(), recorded);
        self.recorded.clear();
        self.commit_view.wake(self.wakes.drain(..));
        self.index.commit();
        if let Some(at) = self.sweep_due.take() {
            // As the records did: the queues with nothing pending and no recent record are
            // forgotten in memory; each one's next use looks it up or records it again.
            self.index.forget_empty_queues();
            self.commit_view.forget_quiet(Timestamp(at));
        }
    }

    /// How many queues the writer, the pending index and the commit_view remember.
    #[cfg(test)]
    pub(crate) fn queues_remembered(&self) -> (usize, usize, usize) {
        (self.queue_touched.len(), self.index.queue_lengths().count(), self.commit_view.len())
    }

    /// The writer's state at start: the rebuilt index, the sequences where they stood, and
    /// the settings of `config`.
    pub(crate) fn new(
        index: PendingIndex,
        next_seq: u64,
        outbox_seq: u64,
        feed: Arc<OutboxFeed>,
        commit_view: Arc<CommitView>,
        config: &SqliteConfig,
    ) -> WriterState {
        let outbox_trimmed = feed.published_upto();
        commit_view.publish(index.queue_lengths(), []);
        WriterState {
            index,
            next_seq,
            queue_touched: QueueRecords::default(),
            recorded: Vec::new(),
            commit_view,
            wakes: Vec::new(),
            waiting: Arc::default(),
            sweep_due: None,
            outbox_seq,
            outbox_trimmed,
            feed,
            settings: config.settings.clone(),
        }
    }
}

/// A write transaction in progress.
pub(crate) struct Tx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) state: &'a mut WriterState,
    pub(crate) events: Vec<TaskEvent>,
    /// Messages this operation wrote to the outbox.
    pub(crate) messages: Vec<OutboxEntry>,
}

impl Tx<'_> {
    pub(crate) fn load_row(&self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?1"))?;
        let mut rows = stmt.query([task_id.as_str()])?;
        rows.next()?.map(task_from_row).transpose()
    }

    pub(crate) fn load_row_with_definition(
        &self,
        task_id: TaskId,
    ) -> Result<Option<(TaskRow, Box<RawValue>)>, StoreError> {
        let mut stmt =
            self.conn.prepare_cached(&format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = ?1"))?;
        let mut rows = stmt.query([task_id.as_str()])?;
        match rows.next()? {
            Some(row) => Ok(Some((task_from_row(row)?, raw_json(row, N_TASK_COLUMNS)?))),
            None => Ok(None),
        }
    }

    /// Records that a queue was used, at most once per interval per queue.
    pub(crate) fn record_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        if self.state.queue_touched.recent(task_queue_id, now) {
            return Ok(());
        }
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO task_queues (task_queue_id, expires, last_date_active, description, stability) \
             VALUES (?1, ?2, ?3, '', 'experimental') \
             ON CONFLICT (task_queue_id) DO UPDATE SET expires = excluded.expires, \
             last_date_active = excluded.last_date_active",
        )?;
        stmt.execute(params![task_queue_id, now.millis() + self.state.settings.queue_retention_ms(), now.millis()])?;
        if self.state.queue_touched.insert(task_queue_id, now.millis()) {
            self.state.sweep_due = Some(now.millis());
        }
        self.state.recorded.push((task_queue_id.to_owned(), now.millis()));
        Ok(())
    }

    pub(crate) fn ids(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<TaskId>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let ids: Vec<String> = stmt.query_map(params, |row| row.get(0))?.collect::<Result<_, _>>()?;
        ids.iter().map(|id| TaskId::parse(id).ok_or_else(|| corrupt(format!("task id {id}")))).collect()
    }
}
