//! [`WriteTx`] (tasks) over SQLite's write transaction, keeping the pending index in step
//! with the rows it writes. The per-domain traits are in `domains.rs`.

use rusqlite::{OptionalExtension, params};
use serde_json::value::RawValue;
use shoal_engine::definition::TaskDefinition;
use shoal_engine::group::GROUP_EXPIRY_SLACK_MS;
use shoal_engine::message::Message;
use shoal_engine::secrets::Secrets;
use shoal_engine::status::TaskState;
use shoal_engine::{TaskId, Timestamp};

use crate::ops::{
    Consequences, CreateLookup, DedupTx, DependencyTx, Due, ListingTx, NewTask, Place, RowChange, SecretTx, TaskTx,
    Waiting, WriteTx, pending_run,
};
use crate::outbox::OutboxEntry;
use crate::row::unresolved;
use crate::row::{Backends, Cell, TaskRow, corrupt, insert_cells, json, step_cells};
use crate::sqlite::pending::{PendingKey, PendingRun};
use crate::sqlite::row::{self, INSERT, UPDATE};
use crate::{ClaimRequest, StoreError, StoreSettings, TaskEvent};

use crate::sqlite::tx::Tx;

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
}

impl TaskTx for Tx<'_> {
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
        cells.push(Cell::Text(Some(std::borrow::Cow::Borrowed(task.task_id.as_str()))));
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

    async fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        self.record_queue(task_queue_id, now)
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
}

impl DependencyTx for Tx<'_> {
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

    async fn consequences(
        &mut self,
        task_id: TaskId,
        group: TaskId,
        _state: TaskState,
        _now: Timestamp,
    ) -> Result<Option<Consequences>, StoreError> {
        // One statement: this runs on every resolution.
        let group_resolved = self
            .conn
            .prepare_cached(concat!(
                "SELECT * FROM (",
                row::group_by_id!(),
                ") WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = ?1 AND ",
                unresolved!(),
                ")"
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
        Ok(Some(Consequences { group_resolved, waiting }))
    }
}

impl SecretTx for Tx<'_> {
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
}

impl DedupTx for Tx<'_> {
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

    async fn forget_completions(&mut self, task_id: TaskId) -> Result<(), StoreError> {
        self.conn.prepare_cached("DELETE FROM completions WHERE task_id = ?1")?.execute([task_id.as_str()])?;
        Ok(())
    }
}

impl ListingTx for Tx<'_> {
    async fn index_tags(&mut self, task_id: TaskId, created: Timestamp, tags: &[String]) -> Result<(), StoreError> {
        let mut stmt =
            self.conn.prepare_cached("INSERT OR IGNORE INTO task_tags (tag, created, task_id) VALUES (?1, ?2, ?3)")?;
        for tag in tags {
            stmt.execute(params![tag, created.millis(), task_id.as_str()])?;
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
