//! One write transaction on SQLite: [`WriteTx`] over the writer's connection, keeping the
//! pending index in step with the rows it writes.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;
use shoal_engine::artifact::Artifact;
use shoal_engine::definition::TaskDefinition;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::graph::{NodeProgress, Tally};
use shoal_engine::group::GROUP_EXPIRY_SLACK_MS;
use shoal_engine::message::Message;
use shoal_engine::secrets::Secrets;
use shoal_engine::status::TaskState;
use shoal_engine::worker::{Worker, WorkerEvent, WorkerKey, worker_name};
use shoal_engine::{TaskId, Timestamp};

use crate::ops::auth::AuthKind;
use crate::ops::graph::{NewNode, StoredGraph};
use crate::ops::{
    Aftermath, ArtifactTx, AuthTx, CreateLookup, Due, ExpireTx, GraphTx, GroupTx, NewTask, Place, QueueRecords,
    RowChange, Waiting, WorkerTx, WriteTx, pending_run,
};
use crate::outbox::{OutboxEntry, OutboxFeed};
use crate::row::{Backends, Cell, TaskRow, corrupt, insert_cells, json, step_cells};
use crate::sqlite::glance::{Glance, Wake};
use crate::sqlite::parking::Parking;
use crate::sqlite::pending::{PendingIndex, PendingKey, PendingRun};
use crate::sqlite::row::{self, INSERT, N_TASK_COLUMNS, TASK_COLUMNS, UPDATE, raw_json, task_from_row};
use crate::sqlite::{SqliteConfig, artifacts, graph, workers};
use crate::{ArtifactKey, ClaimRequest, StoreError, StoreSettings, TaskEvent, TaskGroup};

/// State the writer thread keeps between transactions.
#[derive(Debug)]
pub(crate) struct WriterState {
    pub(crate) index: PendingIndex,
    pub(crate) next_seq: u64,
    queue_touched: QueueRecords,
    /// Queues recorded active by the batch in progress, published at its commit.
    recorded: Vec<(String, i64)>,
    /// What claims may see without the writer, published at each commit.
    glance: Arc<Glance>,
    /// Runs the batch in progress made pending, woken at its commit.
    pub(crate) wakes: Vec<Wake>,
    /// claimWork calls waiting for runs like those (`parking.rs`).
    pub(crate) parking: Arc<Parking>,
    /// The batch in progress swept `queue_touched` (at this time): the pending index and the
    /// glance forget their quiet queues at its commit.
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

    /// The batch committed: publishes what it changed to the glance, wakes claims for the
    /// runs it made pending, and forgets the index's undo log.
    pub(crate) fn committed(&mut self) {
        let recorded = self.recorded.iter().map(|(queue, at)| (queue.as_str(), *at));
        self.glance.publish(self.index.changed_queues(), recorded);
        self.recorded.clear();
        self.glance.wake(self.wakes.drain(..));
        self.index.commit();
        if let Some(at) = self.sweep_due.take() {
            // As the records did: the queues with nothing pending and no recent record are
            // forgotten in memory; each one's next use looks it up or records it again.
            self.index.forget_empty_queues();
            self.glance.forget_quiet(Timestamp(at));
        }
    }

    /// How many queues the writer, the pending index and the glance remember.
    #[cfg(test)]
    pub(crate) fn queues_remembered(&self) -> (usize, usize, usize) {
        (self.queue_touched.len(), self.index.queue_lengths().count(), self.glance.len())
    }

    /// The writer's state at start: the rebuilt index, the sequences where they stood, and
    /// the settings of `config`.
    pub(crate) fn new(
        index: PendingIndex,
        next_seq: u64,
        outbox_seq: u64,
        feed: Arc<OutboxFeed>,
        glance: Arc<Glance>,
        config: &SqliteConfig,
    ) -> WriterState {
        let outbox_trimmed = feed.published_upto();
        glance.publish(index.queue_lengths(), []);
        WriterState {
            index,
            next_seq,
            queue_touched: QueueRecords::default(),
            recorded: Vec::new(),
            glance,
            wakes: Vec::new(),
            parking: Arc::default(),
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
    fn load_row(&self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?1"))?;
        let mut rows = stmt.query([task_id.as_str()])?;
        rows.next()?.map(task_from_row).transpose()
    }

    fn load_row_with_definition(&self, task_id: TaskId) -> Result<Option<(TaskRow, Box<RawValue>)>, StoreError> {
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

    fn ids(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<TaskId>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let ids: Vec<String> = stmt.query_map(params, |row| row.get(0))?.collect::<Result<_, _>>()?;
        ids.iter().map(|id| TaskId::parse(id).ok_or_else(|| corrupt(format!("task id {id}")))).collect()
    }
}

impl WriteTx for Tx<'_> {
    fn settings(&self) -> &StoreSettings {
        &self.state.settings
    }

    /// Gives the message its sequence number; it is written with this transaction's batch and
    /// published once that commits.
    fn publish(&mut self, message: Message) {
        let seq = self.state.outbox_seq + 1;
        self.state.outbox_seq = seq;
        self.messages.push(OutboxEntry { seq, message });
    }

    fn events(&mut self) -> &mut Vec<TaskEvent> {
        &mut self.events
    }

    async fn load(&mut self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        self.load_row(task_id)
    }

    async fn load_with_definition(&mut self, task_id: TaskId) -> Result<Option<(TaskRow, Box<RawValue>)>, StoreError> {
        self.load_row_with_definition(task_id)
    }

    async fn claimable(&mut self, request: &ClaimRequest) -> Result<Vec<(TaskRow, Box<RawValue>)>, StoreError> {
        let found = self.state.index.pop_matching(&request.task_queue_id, &request.dimensions, request.count);
        let mut candidates = Vec::with_capacity(found.len());
        for (_, pending) in found {
            candidates.extend(self.load_row_with_definition(pending.task_id)?);
        }
        Ok(candidates)
    }

    async fn insert_task(&mut self, row: &mut TaskRow, new: NewTask<'_>) -> Result<(), StoreError> {
        if let Some(run_id) = pending_run(&row.task) {
            self.state.next_seq += 1;
            row.pending_seq = Some(self.state.next_seq);
            let key = pending_key(row, row.task.meta.priority.rank(), self.state.next_seq);
            self.state.index.insert(key, PendingRun { task_id: row.task.task_id, run_id });
        }
        let cells = insert_cells(row, &new, Backends::Sqlite)?;
        self.conn.prepare_cached(&INSERT)?.execute(rusqlite::params_from_iter(&cells))?;
        Ok(())
    }

    async fn update_task(&mut self, row: &mut TaskRow, change: &RowChange) -> Result<(), StoreError> {
        let (old_rank, new_rank) = (change.before.priority.rank(), row.task.meta.priority.rank());
        let old_key = change.before.pending_run.zip(row.pending_seq).map(|(_, seq)| {
            let mut key = pending_key(row, old_rank, seq);
            if let Some(dimensions) = &change.moved_from {
                key.dimensions.clone_from(dimensions);
            }
            key
        });
        let new_run = pending_run(&row.task);
        // The index moves only when the run's place, rank or dimensions did.
        if change.place != Place::Keep || old_rank != new_rank || change.moved_from.is_some() {
            if let Some(key) = &old_key {
                self.state.index.remove(key);
            }
            row.pending_seq = match (change.place, &old_key) {
                (Place::None, _) => None,
                (Place::Keep, Some(key)) => Some(key.seq),
                (Place::Keep | Place::Back, _) => {
                    self.state.next_seq += 1;
                    Some(self.state.next_seq)
                }
            };
            if let (Some(run_id), Some(seq)) = (new_run, row.pending_seq) {
                let key = pending_key(row, new_rank, seq);
                self.state.index.insert(key, PendingRun { task_id: row.task.task_id, run_id });
            }
        }
        let task = &row.task;
        let mut cells = step_cells(task)?;
        cells.push(Cell::Int(row.pending_seq.map(|seq| seq as i64)));
        cells.push(Cell::Text(Some(task.task_id.as_str().to_owned())));
        self.conn.prepare_cached(&UPDATE)?.execute(rusqlite::params_from_iter(&cells))?;
        if change.moved_from.is_some() {
            let dimensions = &task.meta.dimensions;
            self.conn.prepare_cached("UPDATE tasks SET dimensions = ?2 WHERE task_id = ?1")?.execute(params![
                task.task_id.as_str(),
                (!dimensions.is_empty()).then(|| json(dimensions)).transpose()?
            ])?;
        }
        if change.priority_changed {
            let mut stmt = self.conn.prepare_cached(
                "UPDATE tasks SET priority = ?2, definition = json_set(definition, '$.priority', json(?2)) \
                 WHERE task_id = ?1",
            )?;
            stmt.execute(params![task.task_id.as_str(), json(&task.meta.priority)?])?;
        }
        Ok(())
    }

    async fn lookup_create(
        &mut self,
        definition: &TaskDefinition,
        task_id: TaskId,
    ) -> Result<CreateLookup, StoreError> {
        let stored: Option<String> = self
            .conn
            .prepare_cached("SELECT definition FROM tasks WHERE task_id = ?1")?
            .query_row([task_id.as_str()], |row| row.get(0))
            .optional()?;
        if let Some(stored) = stored {
            let row = self.load_row(task_id)?.ok_or_else(|| corrupt(format!("task {task_id} vanished")))?;
            return Ok(CreateLookup {
                existing: Some((stored, row.task.status())),
                group: None,
                dependencies: Vec::new(),
            });
        }
        let mut stmt = self.conn.prepare_cached("SELECT state, expires FROM tasks WHERE task_id = ?1")?;
        let mut dependencies = Vec::with_capacity(definition.dependencies.len());
        // Taskcluster allows a task to depend on itself: it then waits for scheduleTask.
        for required in definition.dependencies.iter().filter(|&&required| required != task_id) {
            let found: Option<(String, i64)> =
                stmt.query_row([required.as_str()], |row| Ok((row.get(0)?, row.get(1)?))).optional()?;
            dependencies.push(
                found
                    .map(|(state, expires)| {
                        let state =
                            TaskState::from_name(&state).ok_or_else(|| corrupt(format!("task state {state}")))?;
                        Ok::<_, StoreError>((state, Timestamp(expires)))
                    })
                    .transpose()?,
            );
        }
        let group = row::task_group(self.conn, definition.task_group_id)?;
        Ok(CreateLookup { existing: None, group, dependencies })
    }

    async fn insert_group(&mut self, group: &TaskGroup, created: Timestamp, first: TaskId) -> Result<(), StoreError> {
        if group.task_group_id == first && group.sealed.is_none() {
            // Implied by its namesake's row until it outgrows it (`row::settle_group`).
            return Ok(());
        }
        self.conn
            .prepare_cached(
                "INSERT INTO task_groups (task_group_id, scheduler_id, expires, sealed, created) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                group.task_group_id.as_str(),
                group.scheduler_id,
                group.expires.millis(),
                group.sealed.map(Timestamp::millis),
                created.millis()
            ])?;
        Ok(())
    }

    async fn extend_group(&mut self, group: TaskId, expires: Timestamp) -> Result<(), StoreError> {
        row::settle_group(self.conn, group)?;
        self.conn
            .prepare_cached("UPDATE task_groups SET expires = ?2 WHERE task_group_id = ?1")?
            .execute(params![group.as_str(), expires.millis()])?;
        Ok(())
    }

    async fn insert_dependencies(
        &mut self,
        task_id: TaskId,
        definition: &TaskDefinition,
        satisfied: &[bool],
    ) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO task_dependencies (required_task_id, dependent_task_id, requires, satisfied) \
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (required, done) in definition.dependencies.iter().zip(satisfied) {
            stmt.execute(params![required.as_str(), task_id.as_str(), definition.requires.as_str(), done])?;
        }
        Ok(())
    }

    async fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        self.record_queue(task_queue_id, now)
    }

    async fn aftermath(
        &mut self,
        task_id: TaskId,
        group: TaskId,
        _state: TaskState,
        _now: Timestamp,
    ) -> Result<Option<Aftermath>, StoreError> {
        // One statement: this runs on every resolution.
        let group_resolved = self
            .conn
            .prepare_cached(concat!(
                "SELECT * FROM (",
                row::group_by_id!(),
                ") WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = ?1 AND deadline_due IS NOT NULL)"
            ))?
            .query_row(params![group.as_str(), GROUP_EXPIRY_SLACK_MS], |row| row::task_group_from_row(group, row))
            .optional()?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT dependent_task_id, requires FROM task_dependencies WHERE required_task_id = ?1 AND satisfied = 0 \
             ORDER BY dependent_task_id",
        )?;
        let found: Vec<(String, String)> =
            stmt.query_map([task_id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))?.collect::<Result<_, _>>()?;
        let waiting =
            found.iter().map(|(dependent, requires)| Waiting::parse(dependent, requires)).collect::<Result<_, _>>()?;
        Ok(Some(Aftermath { group_resolved, waiting }))
    }

    async fn mark_satisfied(&mut self, required: TaskId, dependent: TaskId) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE task_dependencies SET satisfied = 1 WHERE required_task_id = ?1 AND dependent_task_id = ?2",
            )?
            .execute(params![required.as_str(), dependent.as_str()])?;
        Ok(())
    }

    async fn has_unmet_dependencies(&mut self, task_id: TaskId) -> Result<bool, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM task_dependencies WHERE dependent_task_id = ?1 AND satisfied = 0 LIMIT 1")?;
        Ok(stmt.exists([task_id.as_str()])?)
    }

    async fn due(&mut self, now: Timestamp, limit: usize) -> Result<Due, StoreError> {
        let bounds = params![now.millis(), limit as i64];
        Ok(Due {
            expired: self
                .ids("SELECT task_id FROM tasks WHERE taken_until <= ?1 ORDER BY taken_until LIMIT ?2", bounds)?,
            late: self
                .ids("SELECT task_id FROM tasks WHERE deadline_due <= ?1 ORDER BY deadline_due LIMIT ?2", bounds)?,
        })
    }

    async fn save_secrets(&mut self, task_id: TaskId, secrets: &Secrets) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO secrets.task_secrets (task_id, secrets) VALUES (?1, ?2)")?
            .execute(params![task_id.as_str(), secrets.expose()])?;
        Ok(())
    }

    async fn load_secrets(&mut self, task_id: TaskId) -> Result<Option<Secrets>, StoreError> {
        let text: Option<String> = self
            .conn
            .prepare_cached("SELECT secrets FROM secrets.task_secrets WHERE task_id = ?1")?
            .query_row([task_id.as_str()], |row| row.get(0))
            .optional()?;
        Ok(text.map(Secrets::from_stored))
    }

    async fn find_completion(&mut self, hash: &str, since: Timestamp) -> Result<Option<TaskId>, StoreError> {
        let found: Option<String> = self
            .conn
            .prepare_cached("SELECT task_id FROM completions WHERE hash = ?1 AND completed >= ?2")?
            .query_row(params![hash, since.millis()], |row| row.get(0))
            .optional()?;
        found.map(|id| TaskId::parse(&id).ok_or_else(|| corrupt(format!("task id {id}")))).transpose()
    }

    async fn remember_completion(&mut self, hash: &str, task_id: TaskId, at: Timestamp) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO completions (hash, task_id, completed) VALUES (?1, ?2, ?3)")?
            .execute(params![hash, task_id.as_str(), at.millis()])?;
        Ok(())
    }

    async fn index_tags(
        &mut self,
        task_id: TaskId,
        created: Timestamp,
        tags: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        let mut stmt =
            self.conn.prepare_cached("INSERT OR IGNORE INTO task_tags (tag, created, task_id) VALUES (?1, ?2, ?3)")?;
        for (key, value) in tags {
            stmt.execute(params![format!("{key}:{value}"), created.millis(), task_id.as_str()])?;
        }
        Ok(())
    }

    async fn file_failure(&mut self, task_id: TaskId, at: Option<Timestamp>) -> Result<(), StoreError> {
        match at {
            Some(at) => self
                .conn
                .prepare_cached("INSERT OR IGNORE INTO task_tags (tag, created, task_id) VALUES (?1, ?2, ?3)")?
                .execute(params![crate::FAILED_TAG, at.millis(), task_id.as_str()])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM task_tags WHERE tag = ?1 AND task_id = ?2")?
                .execute(params![crate::FAILED_TAG, task_id.as_str()])?,
        };
        Ok(())
    }

    async fn forget_completions(&mut self, task_id: TaskId) -> Result<(), StoreError> {
        self.conn.prepare_cached("DELETE FROM completions WHERE task_id = ?1")?.execute([task_id.as_str()])?;
        Ok(())
    }
}

impl GroupTx for Tx<'_> {
    async fn load_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        row::task_group(self.conn, group)
    }

    async fn seal_group(&mut self, group: TaskId, at: Timestamp) -> Result<(), StoreError> {
        row::settle_group(self.conn, group)?;
        self.conn
            .prepare_cached("UPDATE task_groups SET sealed = ?2 WHERE task_group_id = ?1")?
            .execute(params![group.as_str(), at.millis()])?;
        Ok(())
    }

    async fn group_size(&mut self, group: TaskId) -> Result<u64, StoreError> {
        let size: i64 = self
            .conn
            .prepare_cached(
                "SELECT (SELECT COUNT(*) FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id) \
                 + (SELECT COUNT(*) FROM tasks WHERE task_id = ?1 AND task_group_id = ?1)",
            )?
            .query_row([group.as_str()], |row| row.get(0))?;
        Ok(size as u64)
    }

    async fn unresolved_members(&mut self, group: TaskId) -> Result<Vec<TaskId>, StoreError> {
        self.ids(
            "SELECT task_id FROM tasks WHERE task_group_id = ?1 AND deadline_due IS NOT NULL ORDER BY task_id",
            [group.as_str()],
        )
    }
}

impl ArtifactTx for Tx<'_> {
    async fn stored_artifact(&mut self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError> {
        artifacts::stored(self.conn, key.task_id, key.run_id, &key.name)
    }

    async fn put_artifact(&mut self, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError> {
        artifacts::put(self.conn, key, artifact)
    }

    async fn delete_artifacts(&mut self, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
        artifacts::delete(self.conn, keys)
    }
}

impl GraphTx for Tx<'_> {
    async fn load_graph(&mut self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError> {
        graph::graph(self.conn, task_graph_id)
    }

    async fn insert_graph(&mut self, graph: &StoredGraph, now: Timestamp) -> Result<(), StoreError> {
        graph::insert(self.conn, graph, now)
    }

    async fn save_tally(&mut self, task_graph_id: TaskId, tally: Tally) -> Result<(), StoreError> {
        graph::save_tally(self.conn, task_graph_id, tally)
    }

    async fn graph_labels(&mut self, task_graph_id: TaskId) -> Result<Vec<(String, TaskId, String)>, StoreError> {
        graph::labels(self.conn, task_graph_id)
    }

    async fn insert_node(&mut self, node: &NewNode<'_>) -> Result<(), StoreError> {
        graph::insert_node(self.conn, node)
    }

    async fn load_node(&mut self, task_id: TaskId) -> Result<Option<(TaskId, NodeProgress)>, StoreError> {
        graph::node(self.conn, task_id)
    }

    async fn save_node(&mut self, task_id: TaskId, progress: NodeProgress) -> Result<(), StoreError> {
        graph::save_node(self.conn, task_id, progress)
    }
}

impl ExpireTx for Tx<'_> {
    async fn task_expires(&mut self, task_id: TaskId) -> Result<Option<Timestamp>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT expires FROM tasks WHERE task_id = ?1")?
            .query_row([task_id.as_str()], |row| row.get(0))
            .optional()?
            .map(Timestamp))
    }

    async fn delete_expired_task(&mut self, task_id: TaskId, now: Timestamp) -> Result<Option<TaskId>, StoreError> {
        // A namesake going before its group's members leaves them the group's own row.
        let members = self
            .conn
            .prepare_cached(
                "SELECT 1 FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id AND EXISTS \
                 (SELECT 1 FROM tasks WHERE task_id = ?1 AND task_group_id = ?1 AND expires <= ?2 \
                 AND deadline_due IS NULL) LIMIT 1",
            )?
            .exists(params![task_id.as_str(), now.millis()])?;
        if members {
            row::settle_group(self.conn, task_id)?;
        }
        let group: Option<String> = self
            .conn
            .prepare_cached(
                "DELETE FROM tasks WHERE task_id = ?1 AND expires <= ?2 AND deadline_due IS NULL \
                 RETURNING task_group_id",
            )?
            .query_row(params![task_id.as_str(), now.millis()], |row| row.get(0))
            .optional()?;
        let Some(group) = group else { return Ok(None) };
        for sql in [
            "DELETE FROM task_dependencies WHERE required_task_id = ?1",
            "DELETE FROM task_dependencies WHERE dependent_task_id = ?1",
            "DELETE FROM artifacts WHERE task_id = ?1",
            "DELETE FROM graph_tasks WHERE task_id = ?1",
            "DELETE FROM secrets.task_secrets WHERE task_id = ?1",
            "DELETE FROM completions WHERE task_id = ?1",
            "DELETE FROM task_tags WHERE task_id = ?1",
        ] {
            self.conn.prepare_cached(sql)?.execute([task_id.as_str()])?;
        }
        Ok(Some(TaskId::parse(&group).ok_or_else(|| corrupt(format!("task group id {group}")))?))
    }

    async fn delete_group_if_empty(&mut self, group: TaskId) -> Result<(), StoreError> {
        let empty = self
            .conn
            .prepare_cached(
                "SELECT NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = ?1 AND task_group_id <> task_id) \
                 AND NOT EXISTS (SELECT 1 FROM tasks WHERE task_id = ?1 AND task_group_id = ?1)",
            )?
            .query_row([group.as_str()], |row| row.get::<_, bool>(0))?;
        if empty {
            self.conn.prepare_cached("DELETE FROM task_groups WHERE task_group_id = ?1")?.execute([group.as_str()])?;
            self.conn.prepare_cached("DELETE FROM task_graphs WHERE task_graph_id = ?1")?.execute([group.as_str()])?;
        }
        Ok(())
    }

    async fn delete_expired_queues(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "DELETE FROM task_queues WHERE task_queue_id IN \
                 (SELECT task_queue_id FROM task_queues WHERE expires <= ?1 LIMIT ?2)",
            )?
            .execute(params![now.millis(), limit as i64])?;
        Ok(())
    }
}

impl AuthTx for Tx<'_> {
    async fn load_auth(&mut self, kind: AuthKind, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT body FROM auth_entities WHERE kind = ?1 AND id = ?2")?
            .query_row([kind.as_str(), id], |row| row.get(0))
            .optional()?)
    }

    async fn all_auth(&mut self, kind: AuthKind) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT body FROM auth_entities WHERE kind = ?1 ORDER BY id")?;
        let rows = stmt.query_map([kind.as_str()], |row| row.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    async fn save_auth(&mut self, kind: AuthKind, id: &str, body: Option<&str>) -> Result<(), StoreError> {
        match body {
            Some(body) => self
                .conn
                .prepare_cached(
                    "INSERT INTO auth_entities (kind, id, body) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body",
                )?
                .execute(params![kind.as_str(), id, body])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM auth_entities WHERE kind = ?1 AND id = ?2")?
                .execute([kind.as_str(), id])?,
        };
        Ok(())
    }

    async fn bump_auth_generation(&mut self) -> Result<(), StoreError> {
        self.conn.prepare_cached("UPDATE auth_state SET generation = generation + 1")?.execute([])?;
        Ok(())
    }

    async fn signing_token(&mut self, candidate: &str) -> Result<String, StoreError> {
        self.conn
            .prepare_cached("UPDATE auth_state SET signing_token = ?1 WHERE signing_token IS NULL")?
            .execute([candidate])?;
        Ok(self.conn.prepare_cached("SELECT signing_token FROM auth_state")?.query_row([], |row| row.get(0))?)
    }
}

impl WorkerTx for Tx<'_> {
    async fn load_worker(&mut self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        workers::load(self.conn, key)
    }

    async fn save_worker(&mut self, worker: &Worker, events: &[(u64, WorkerEvent)]) -> Result<(), StoreError> {
        workers::save(self.conn, worker, events)
    }

    async fn silent_workers(&mut self, cutoff: Timestamp, limit: usize) -> Result<Vec<WorkerKey>, StoreError> {
        workers::silent(self.conn, cutoff, limit)
    }

    async fn live_worker_dimensions(
        &mut self,
        task_queue_id: &str,
        since: Timestamp,
    ) -> Result<Vec<Dimensions>, StoreError> {
        workers::live_dimensions(self.conn, task_queue_id, since)
    }

    async fn worker_runs(&mut self, key: &WorkerKey) -> Result<Vec<TaskId>, StoreError> {
        let name = worker_name(&key.worker_group, &key.worker_id);
        self.ids(
            "SELECT task_id FROM tasks WHERE state = 'running' AND task_queue_id = ?1 AND worker = ?2",
            params![key.task_queue_id, name],
        )
    }

    async fn delete_expired_workers(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        workers::delete_expired(self.conn, now, limit)
    }
}

/// Where a pending row sits in the index, at priority `rank` and place `seq`.
fn pending_key(row: &TaskRow, rank: u8, seq: u64) -> PendingKey {
    PendingKey {
        task_queue_id: row.task.meta.task_queue_id.clone(),
        dimensions: row.task.meta.dimensions.clone(),
        rank,
        seq,
    }
}
