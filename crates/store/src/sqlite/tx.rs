//! One write transaction's view: task rows, the pending index, and the step that ties the
//! engine's transitions to both.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;
use shoal_engine::definition::Requires;
use shoal_engine::event::{Effects, Event};
use shoal_engine::graph::Reaction;
use shoal_engine::message::{self, Message};
use shoal_engine::status::{RunState, TaskState};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::graph;
use crate::outbox::{OutboxEntry, OutboxFeed};
use crate::pending::{PendingIndex, PendingKey, PendingRun};
use crate::sqlite::row::{self, N_TASK_COLUMNS, TASK_COLUMNS, TaskRow, raw_json, task_from_row};
use crate::{StoreError, TaskEvent};

/// How often at most a queue's last-active time is written.
pub(crate) const QUEUE_TOUCH_INTERVAL_MS: i64 = 30_000;
/// How long a queue is remembered after it was last active.
pub(crate) const QUEUE_RETENTION_MS: i64 = 5 * 24 * 3600 * 1000;

/// State the writer thread keeps between transactions.
#[derive(Debug)]
pub(crate) struct WriterState {
    pub(crate) index: PendingIndex,
    pub(crate) next_seq: u64,
    pub(crate) claim_timeout_secs: i64,
    queue_touched: HashMap<String, i64>,
    /// Sequence of the last message written to the outbox.
    pub(crate) outbox_seq: u64,
    /// Messages up to here have been deleted from the outbox (after publication).
    pub(crate) outbox_trimmed: u64,
    pub(crate) feed: Arc<OutboxFeed>,
    /// The scheduler id of task-graph tasks: only their resolutions are shown to the scheduler.
    pub(crate) graph_scheduler_id: String,
}

impl WriterState {
    /// Forgets which queues were recently recorded: after a rollback some records may be gone.
    pub(crate) fn forget_queue_touches(&mut self) {
        self.queue_touched.clear();
    }

    pub(crate) fn new(
        index: PendingIndex,
        next_seq: u64,
        claim_timeout_secs: i64,
        outbox_seq: u64,
        feed: Arc<OutboxFeed>,
        graph_scheduler_id: String,
    ) -> WriterState {
        let outbox_trimmed = feed.published_upto();
        WriterState {
            index,
            next_seq,
            claim_timeout_secs,
            queue_touched: HashMap::new(),
            outbox_seq,
            outbox_trimmed,
            feed,
            graph_scheduler_id,
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
    /// Adds `message` to the outbox, to be written with this transaction's batch and
    /// published once it commits.
    pub(crate) fn publish(&mut self, message: Message) {
        let seq = self.state.outbox_seq + 1;
        self.state.outbox_seq = seq;
        self.messages.push(OutboxEntry { seq, message });
    }

    pub(crate) fn load(&self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?1"))?;
        let mut rows = stmt.query([task_id.as_str()])?;
        match rows.next()? {
            Some(row) => task_from_row(row).map(Some),
            None => Ok(None),
        }
    }

    /// Loads a task together with its stored definition (for claims, which return both).
    pub(crate) fn load_with_definition(&self, task_id: TaskId) -> Result<(TaskRow, Box<RawValue>), StoreError> {
        let mut stmt =
            self.conn.prepare_cached(&format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = ?1"))?;
        let mut rows = stmt.query([task_id.as_str()])?;
        match rows.next()? {
            Some(row) => Ok((task_from_row(row)?, raw_json(row, N_TASK_COLUMNS)?)),
            None => Err(Rejection::NotFound(format!("task {task_id} not found")).into()),
        }
    }

    pub(crate) fn load_existing(&self, task_id: TaskId) -> Result<TaskRow, StoreError> {
        self.load(task_id)?.ok_or_else(|| Rejection::NotFound(format!("task {task_id} not found")).into())
    }

    pub(crate) fn definition(&self, task_id: TaskId) -> Result<Option<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT definition FROM tasks WHERE task_id = ?1")?;
        Ok(stmt.query_row([task_id.as_str()], |row| row.get(0)).optional()?)
    }

    /// Inserts a new task row as it stands (the caller has already run its first transition).
    pub(crate) fn insert(&mut self, row: &TaskRow, definition: &str) -> Result<(), StoreError> {
        let task = &row.task;
        let meta = &task.meta;
        let state = task.state();
        let dimensions = (!meta.dimensions.is_empty()).then(|| json(&meta.dimensions)).transpose()?;
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO tasks (task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, \
             retries, retries_left, deadline, expires, requires, dimensions, runs, state, taken_until, \
             deadline_due, pending_seq, definition, routes, tags) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
        )?;
        stmt.execute(params![
            task.task_id.as_str(),
            meta.task_queue_id,
            meta.scheduler_id,
            meta.project_id,
            meta.task_group_id.as_str(),
            json(&meta.priority)?,
            meta.retries,
            task.retries_left(),
            meta.deadline.millis(),
            meta.expires.millis(),
            meta.requires.as_str(),
            dimensions,
            json(task.runs())?,
            state.as_str(),
            task.running_until().map(Timestamp::millis),
            (!state.is_resolved()).then_some(meta.deadline.millis()),
            row.pending_seq.map(|seq| seq as i64),
            definition,
            (!meta.routes.is_empty()).then(|| json(&meta.routes)).transpose()?,
            (!meta.tags.is_empty()).then(|| json(&meta.tags)).transpose()?,
        ])?;
        Ok(())
    }

    /// Runs one engine transition on `row`, then keeps the pending index, the row, the due
    /// times and the dependents in step with the result, all in this transaction.
    pub(crate) fn step(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
    ) -> Result<(), StoreError> {
        self.step_and_persist(row, now, transition, Persist::Update)
    }

    /// [`Tx::step`] for a task not yet stored: the row is inserted in its stepped state, one
    /// write instead of an insert and an update.
    pub(crate) fn step_new(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
        definition: &str,
    ) -> Result<(), StoreError> {
        self.step_and_persist(row, now, transition, Persist::Insert { definition })
    }

    fn step_and_persist(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
        persist: Persist<'_>,
    ) -> Result<(), StoreError> {
        let old_key = pending_key(row);
        let old_run = last_pending_run(&row.task);
        let old_priority = row.task.meta.priority;
        let was = row.task.state();
        let was_resolved = was.is_resolved();
        let effects = transition(&mut row.task)?;

        let new_run = last_pending_run(&row.task);
        let keeps_place =
            old_run.is_some() && old_run == new_run && old_priority.rank() == row.task.meta.priority.rank();
        if !keeps_place {
            if let Some(key) = &old_key {
                self.state.index.remove(key);
            }
            row.pending_seq = None;
            if let Some(run_id) = new_run {
                // Keep its place in line when only the priority moved; a new run joins the back.
                let seq = match (old_run == new_run, old_key.as_ref()) {
                    (true, Some(key)) => key.seq,
                    _ => {
                        self.state.next_seq += 1;
                        self.state.next_seq
                    }
                };
                row.pending_seq = Some(seq);
                let key = pending_key(row).ok_or_else(|| StoreError::Other("pending key vanished".into()))?;
                self.state.index.insert(key, PendingRun { task_id: row.task.task_id, run_id });
            }
        }
        match persist {
            Persist::Update => self.save(row, old_priority != row.task.meta.priority)?,
            Persist::Insert { definition } => self.insert(row, definition)?,
        }
        self.record(&row.task, effects.0)?;
        let state = row.task.state();
        if was_resolved != state.is_resolved()
            && row.task.meta.scheduler_id == self.state.graph_scheduler_id
            && graph::ready(graph::react(self, &row.task, was, now))? == Reaction::Rerun
        {
            // The graph runs it again at once: to its dependents and its group it never
            // resolved.
            return self.rerun_for_graph(row, now);
        }
        if !was_resolved && state.is_resolved() {
            self.release_dependents(row.task.task_id, state, now)?;
            self.check_group_resolved(row.task.meta.task_group_id)?;
        }
        Ok(())
    }

    /// Runs a graph's failed task again (not generic: `step` would instantiate itself forever).
    fn rerun_for_graph(&mut self, row: &mut TaskRow, now: Timestamp) -> Result<(), StoreError> {
        self.step(row, now, |task| task.rerun(now))
    }

    /// Records what happened to `task`: its events (for the waiting workers) and their
    /// messages (into the outbox), from the task as the events left it.
    pub(crate) fn record(&mut self, task: &Task, events: Vec<Event>) -> Result<(), StoreError> {
        for message in message::task_messages(task, &events) {
            self.publish(message);
        }
        self.events.extend(events.into_iter().map(|event| TaskEvent {
            task_id: task.task_id,
            task_queue_id: task.meta.task_queue_id.clone(),
            event,
        }));
        Ok(())
    }

    /// Publishes task-group-resolved when the group has no unresolved task left.
    fn check_group_resolved(&mut self, group: TaskId) -> Result<(), StoreError> {
        // One statement: this runs on every resolution.
        let mut stmt = self.conn.prepare_cached(
            "SELECT scheduler_id, expires, sealed FROM task_groups WHERE task_group_id = ?1 \
             AND NOT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = ?1 AND deadline_due IS NOT NULL)",
        )?;
        let resolved = stmt.query_row([group.as_str()], |row| row::task_group_from_row(group, row)).optional()?;
        if let Some(found) = resolved {
            self.publish(message::group_resolved(&found));
        }
        Ok(())
    }

    fn save(&mut self, row: &TaskRow, priority_changed: bool) -> Result<(), StoreError> {
        let task = &row.task;
        let state = task.state();
        let deadline_due = (!state.is_resolved()).then_some(task.meta.deadline.millis());
        let mut stmt = self.conn.prepare_cached(
            "UPDATE tasks SET retries_left = ?2, runs = ?3, state = ?4, taken_until = ?5, deadline_due = ?6, \
             pending_seq = ?7 WHERE task_id = ?1",
        )?;
        stmt.execute(params![
            task.task_id.as_str(),
            task.retries_left(),
            json(task.runs())?,
            state.as_str(),
            task.running_until().map(Timestamp::millis),
            deadline_due,
            row.pending_seq.map(|seq| seq as i64),
        ])?;
        if priority_changed {
            let priority = json(&task.meta.priority)?;
            let mut stmt = self.conn.prepare_cached(
                "UPDATE tasks SET priority = ?2, definition = json_set(definition, '$.priority', json(?2)) \
                 WHERE task_id = ?1",
            )?;
            stmt.execute(params![task.task_id.as_str(), priority])?;
        }
        Ok(())
    }

    /// Marks the dependency on `required` satisfied for each dependent whose `requires` this
    /// resolution meets, and schedules each dependent whose last unmet dependency this was.
    fn release_dependents(&mut self, required: TaskId, state: TaskState, now: Timestamp) -> Result<(), StoreError> {
        let waiting: Vec<(String, String)> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT dependent_task_id, requires FROM task_dependencies WHERE required_task_id = ?1 AND satisfied = 0",
            )?;
            stmt.query_map([required.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))?.collect::<Result<_, _>>()?
        };
        let mut released = Vec::with_capacity(waiting.len());
        for (dependent, requires) in waiting {
            let requires = Requires::from_name(&requires).ok_or_else(|| StoreError::Other("bad requires".into()))?;
            if !requires.satisfied_by(state) {
                continue;
            }
            let mut stmt = self.conn.prepare_cached(
                "UPDATE task_dependencies SET satisfied = 1 WHERE required_task_id = ?1 AND dependent_task_id = ?2",
            )?;
            stmt.execute(params![required.as_str(), dependent])?;
            released.push(dependent);
        }
        for dependent in released {
            let dependent = TaskId::parse(&dependent).ok_or_else(|| StoreError::Other("bad dependent id".into()))?;
            if self.has_unmet_dependencies(dependent)? {
                continue;
            }
            let Some(mut row) = self.load(dependent)? else {
                continue;
            };
            match self.step(&mut row, now, |task| task.schedule(now)) {
                // Past its deadline the dependent is left for the deadline to resolve.
                Ok(()) | Err(StoreError::Rejected(_)) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    pub(crate) fn has_unmet_dependencies(&self, task_id: TaskId) -> Result<bool, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM task_dependencies WHERE dependent_task_id = ?1 AND satisfied = 0 LIMIT 1")?;
        Ok(stmt.exists([task_id.as_str()])?)
    }

    /// Records that a queue was used, at most once per interval per queue.
    pub(crate) fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        let fresh =
            self.state.queue_touched.get(task_queue_id).is_some_and(|&at| at + QUEUE_TOUCH_INTERVAL_MS > now.millis());
        if fresh {
            return Ok(());
        }
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO task_queues (task_queue_id, expires, last_date_active, description, stability) \
             VALUES (?1, ?2, ?3, '', 'experimental') \
             ON CONFLICT (task_queue_id) DO UPDATE SET expires = excluded.expires, \
             last_date_active = excluded.last_date_active",
        )?;
        stmt.execute(params![task_queue_id, now.millis() + QUEUE_RETENTION_MS, now.millis()])?;
        self.state.queue_touched.insert(task_queue_id.to_owned(), now.millis());
        Ok(())
    }
}

/// How a stepped row reaches the table.
enum Persist<'a> {
    /// The row exists: update its mutable columns.
    Update,
    /// The row is new: insert it whole.
    Insert { definition: &'a str },
}

fn last_pending_run(task: &Task) -> Option<u32> {
    task.runs().last().filter(|run| run.state == RunState::Pending).map(|run| run.run_id)
}

/// Where the row's pending run sits in the index, if it is pending.
pub(crate) fn pending_key(row: &TaskRow) -> Option<PendingKey> {
    last_pending_run(&row.task)?;
    Some(PendingKey {
        task_queue_id: row.task.meta.task_queue_id.clone(),
        dimensions: row.task.meta.dimensions.clone(),
        rank: row.task.meta.priority.rank(),
        seq: row.pending_seq?,
    })
}

pub(crate) fn json(value: &(impl serde::Serialize + ?Sized)) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Other(format!("encoding json: {err}")))
}
