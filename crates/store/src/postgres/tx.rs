//! A PostgreSQL write transaction: what the operations read and write through.
//!
//! Unlike SQLite's single writer, several servers write at once, so every row an operation
//! is going to change is locked when read (`FOR UPDATE`), and a task group's row is locked
//! before deciding it has been resolved.

use std::collections::HashMap;

use postgres::{Statement, Transaction};
use serde_json::value::RawValue;
use shoal_engine::definition::Requires;
use shoal_engine::event::{Effects, Event};
use shoal_engine::graph::Reaction;
use shoal_engine::message::{self, Message};
use shoal_engine::status::{RunState, TaskState};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::graph;
use crate::postgres::row::{GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row, task_group_from_row};
use crate::sqlite::row::TaskRow;
use crate::sqlite::tx::{QUEUE_RETENTION_MS, QUEUE_TOUCH_INTERVAL_MS, json};
use crate::{StoreError, TaskEvent, TaskGroup};

/// A write transaction in progress.
pub(crate) struct PgTx<'a> {
    pub(crate) tx: Transaction<'a>,
    /// The connection's prepared statements, by SQL text (they outlive transactions).
    pub(crate) statements: &'a mut HashMap<String, Statement>,
    pub(crate) claim_timeout_secs: i64,
    /// The scheduler id of task-graph tasks: only their resolutions are shown to the scheduler.
    pub(crate) graph_scheduler_id: &'a str,
    /// When this server last recorded each queue as active (saves a read per operation).
    pub(crate) queues_touched: &'a std::sync::Mutex<HashMap<String, i64>>,
    pub(crate) events: Vec<TaskEvent>,
    /// Messages of this transaction, numbered from 1 until the commit gives them their place.
    pub(crate) messages: Vec<Message>,
}

impl PgTx<'_> {
    /// The statement for `sql`, prepared once per connection: a round trip saved per query.
    pub(crate) fn prepare(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(sql)?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Adds `message` to the outbox, written with this transaction.
    pub(crate) fn publish(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Loads a task and locks its row until the commit.
    pub(crate) fn load(&mut self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1 FOR UPDATE");
        let statement = self.prepare(&sql)?;
        self.tx.query_opt(&statement, &[&task_id.as_str()])?.map(|row| task_from_row(&row)).transpose()
    }

    pub(crate) fn load_existing(&mut self, task_id: TaskId) -> Result<TaskRow, StoreError> {
        self.load(task_id)?.ok_or_else(|| Rejection::NotFound(format!("task {task_id} not found")).into())
    }

    /// Loads and locks a task together with its stored definition (claims return both).
    pub(crate) fn load_with_definition(&mut self, task_id: TaskId) -> Result<(TaskRow, Box<RawValue>), StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = $1 FOR UPDATE");
        let statement = self.prepare(&sql)?;
        match self.tx.query_opt(&statement, &[&task_id.as_str()])? {
            Some(row) => Ok((task_from_row(&row)?, raw_json(&row, N_TASK_COLUMNS)?)),
            None => Err(Rejection::NotFound(format!("task {task_id} not found")).into()),
        }
    }

    pub(crate) fn definition(&mut self, task_id: TaskId) -> Result<Option<String>, StoreError> {
        let statement = self.prepare("SELECT definition FROM tasks WHERE task_id = $1")?;
        Ok(self.tx.query_opt(&statement, &[&task_id.as_str()])?.map(|row| row.get(0)))
    }

    /// Loads a task group and locks its row until the commit.
    pub(crate) fn load_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1 FOR UPDATE");
        let statement = self.prepare(&sql)?;
        self.tx.query_opt(&statement, &[&group.as_str()])?.map(|row| task_group_from_row(&row)).transpose()
    }

    /// Inserts a new task row as it stands (the caller has already run its first transition).
    fn insert(&mut self, row: &TaskRow, definition: &str) -> Result<(), StoreError> {
        let task = &row.task;
        let meta = &task.meta;
        let state = task.state();
        let dimensions = (!meta.dimensions.is_empty()).then(|| json(&meta.dimensions)).transpose()?;
        let routes = (!meta.routes.is_empty()).then(|| json(&meta.routes)).transpose()?;
        let tags = (!meta.tags.is_empty()).then(|| json(&meta.tags)).transpose()?;
        let statement = self.prepare(
            "INSERT INTO tasks (task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, \
             priority_rank, retries, retries_left, deadline, expires, requires, dimensions, runs, state, \
             taken_until, deadline_due, pending_seq, definition, routes, tags) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::text::jsonb, $14, $15, $16, $17, \
             CASE WHEN $18 THEN nextval('tasks_pending_seq') END, $19, $20, $21)",
        )?;
        self.tx.execute(
            &statement,
            &[
                &task.task_id.as_str(),
                &meta.task_queue_id,
                &meta.scheduler_id,
                &meta.project_id,
                &meta.task_group_id.as_str(),
                &json(&meta.priority)?,
                &i16::from(meta.priority.rank()),
                &(meta.retries as i32),
                &(task.retries_left() as i32),
                &meta.deadline.millis(),
                &meta.expires.millis(),
                &meta.requires.as_str(),
                &dimensions,
                &json(task.runs())?,
                &state.as_str(),
                &task.running_until().map(Timestamp::millis),
                &(!state.is_resolved()).then_some(meta.deadline.millis()),
                &last_pending_run(task).is_some(),
                &definition,
                &routes,
                &tags,
            ],
        )?;
        Ok(())
    }

    /// Runs one engine transition on `row`, then writes the row, its due times, its place in
    /// line, its messages and its dependents' release, all in this transaction.
    pub(crate) fn step(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
    ) -> Result<(), StoreError> {
        self.step_and_persist(row, now, transition, None)
    }

    /// [`PgTx::step`] for a task not yet stored: the row is inserted in its stepped state.
    pub(crate) fn step_new(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
        definition: &str,
    ) -> Result<(), StoreError> {
        self.step_and_persist(row, now, transition, Some(definition))
    }

    /// Inserts a task that waits for its dependencies (no transition yet).
    pub(crate) fn insert_unscheduled(&mut self, row: &TaskRow, definition: &str) -> Result<(), StoreError> {
        self.insert(row, definition)
    }

    fn step_and_persist(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
        new: Option<&str>,
    ) -> Result<(), StoreError> {
        let old_run = last_pending_run(&row.task);
        let old_priority = row.task.meta.priority;
        let was = row.task.state();
        let was_resolved = was.is_resolved();
        let effects = transition(&mut row.task)?;
        let has_dependents = match new {
            // Nothing can depend on a task before it exists.
            Some(definition) => {
                self.insert(row, definition)?;
                false
            }
            None => {
                let new_run = last_pending_run(&row.task);
                // A run keeps its place in line when only its priority moved; a new run joins the back.
                let place = match new_run {
                    None => Place::None,
                    Some(_) if old_run == new_run => Place::Keep,
                    Some(_) => Place::Back,
                };
                self.save(row, place, old_priority != row.task.meta.priority)?
            }
        };
        self.record(&row.task, effects.0);
        let state = row.task.state();
        if was_resolved != state.is_resolved()
            && row.task.meta.scheduler_id == self.graph_scheduler_id
            && graph::react(self, &row.task, was, now)? == Reaction::Rerun
        {
            // The graph runs it again at once: to its dependents and its group it never
            // resolved.
            return self.rerun_for_graph(row, now);
        }
        if !was_resolved && state.is_resolved() {
            if has_dependents {
                self.release_dependents(row.task.task_id, state, now)?;
            }
            self.check_group_resolved(row.task.meta.task_group_id)?;
        }
        Ok(())
    }

    /// Runs a graph's failed task again (not generic: `step` would instantiate itself forever).
    fn rerun_for_graph(&mut self, row: &mut TaskRow, now: Timestamp) -> Result<(), StoreError> {
        self.step(row, now, |task| task.rerun(now))
    }

    /// Records what happened to `task`: its events and their messages.
    pub(crate) fn record(&mut self, task: &Task, events: Vec<Event>) {
        for message in message::task_messages(task, &events) {
            self.publish(message);
        }
        self.events.extend(events.into_iter().map(|event| TaskEvent {
            task_id: task.task_id,
            task_queue_id: task.meta.task_queue_id.clone(),
            event,
        }));
    }

    /// Publishes task-group-resolved when the group has no unresolved task left.
    fn check_group_resolved(&mut self, group: TaskId) -> Result<(), StoreError> {
        // Locking the group row first serializes the resolutions of its last tasks across
        // servers: the second to commit sees the first's resolution (READ COMMITTED takes a
        // new snapshot per statement) and no resolution is missed.
        let Some(found) = self.load_group(group)? else { return Ok(()) };
        let statement =
            self.prepare("SELECT 1 FROM tasks WHERE task_group_id = $1 AND deadline_due IS NOT NULL LIMIT 1")?;
        if self.tx.query_opt(&statement, &[&group.as_str()])?.is_none() {
            self.publish(message::group_resolved(&found));
        }
        Ok(())
    }

    /// Writes the row; says whether tasks wait on it (an unsatisfied dependency names it).
    fn save(&mut self, row: &mut TaskRow, place: Place, priority_changed: bool) -> Result<bool, StoreError> {
        let task = &row.task;
        let state = task.state();
        let deadline_due = (!state.is_resolved()).then_some(task.meta.deadline.millis());
        let statement = self.prepare(
            "UPDATE tasks SET retries_left = $2, runs = $3, state = $4, taken_until = $5, deadline_due = $6, \
             pending_seq = CASE $7 WHEN 'keep' THEN pending_seq WHEN 'back' THEN nextval('tasks_pending_seq') END, \
             priority = $8::text, priority_rank = $9, \
             definition = CASE WHEN $10 THEN jsonb_set(definition::jsonb, '{priority}', $8::text::jsonb)::text \
             ELSE definition END \
             WHERE task_id = $1 RETURNING pending_seq, \
             EXISTS (SELECT 1 FROM task_dependencies WHERE required_task_id = $1 AND NOT satisfied)",
        )?;
        let updated = self.tx.query_one(
            &statement,
            &[
                &task.task_id.as_str(),
                &(task.retries_left() as i32),
                &json(task.runs())?,
                &state.as_str(),
                &task.running_until().map(Timestamp::millis),
                &deadline_due,
                &place.as_str(),
                &json(&task.meta.priority)?,
                &i16::from(task.meta.priority.rank()),
                &priority_changed,
            ],
        )?;
        row.pending_seq = updated.get::<_, Option<i64>>(0).map(|seq| seq as u64);
        // The row has been locked since it was loaded, so this statement's snapshot has every
        // dependency recorded on it (a creator records one holding a share lock on it).
        Ok(updated.get(1))
    }

    /// Marks the dependency on `required` satisfied for each dependent whose `requires` this
    /// resolution meets, and schedules each dependent whose last unmet dependency this was.
    fn release_dependents(&mut self, required: TaskId, state: TaskState, now: Timestamp) -> Result<(), StoreError> {
        let statement = self.prepare(
            "SELECT dependent_task_id, requires FROM task_dependencies \
             WHERE required_task_id = $1 AND NOT satisfied ORDER BY dependent_task_id",
        )?;
        let waiting = self.tx.query(&statement, &[&required.as_str()])?;
        let mut released = Vec::with_capacity(waiting.len());
        for row in waiting {
            let (dependent, requires): (String, &str) = (row.get(0), row.get(1));
            let requires = Requires::from_name(requires).ok_or_else(|| StoreError::Other("bad requires".into()))?;
            if requires.satisfied_by(state) {
                released.push(dependent);
            }
        }
        for dependent in released {
            let dependent = TaskId::parse(&dependent).ok_or_else(|| StoreError::Other("bad dependent id".into()))?;
            // Lock the dependent before counting what it still waits for: two of its
            // dependencies resolving at once on two servers then see each other's release.
            let Some(mut row) = self.load(dependent)? else { continue };
            let statement = self.prepare(
                "UPDATE task_dependencies SET satisfied = TRUE WHERE required_task_id = $1 AND dependent_task_id = $2",
            )?;
            self.tx.execute(&statement, &[&required.as_str(), &dependent.as_str()])?;
            if self.has_unmet_dependencies(dependent)? {
                continue;
            }
            match self.step(&mut row, now, |task| task.schedule(now)) {
                // Past its deadline the dependent is left for the deadline to resolve.
                Ok(()) | Err(StoreError::Rejected(_)) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    pub(crate) fn has_unmet_dependencies(&mut self, task_id: TaskId) -> Result<bool, StoreError> {
        let statement = self
            .tx
            .prepare("SELECT 1 FROM task_dependencies WHERE dependent_task_id = $1 AND NOT satisfied LIMIT 1")?;
        Ok(self.tx.query_opt(&statement, &[&task_id.as_str()])?.is_some())
    }

    /// Records that a queue was used, at most once per interval per queue and server.
    pub(crate) fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        {
            let touched = self.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if touched.get(task_queue_id).is_some_and(|&at| at + QUEUE_TOUCH_INTERVAL_MS > now.millis()) {
                return Ok(());
            }
        }
        // Read first: an upsert locks the queue's row even when it changes nothing, and every
        // claim on the queue would then wait for the others' commits.
        let statement = self.prepare("SELECT last_date_active FROM task_queues WHERE task_queue_id = $1")?;
        let last: Option<i64> = self.tx.query_opt(&statement, &[&task_queue_id])?.map(|row| row.get(0));
        // What the row says once this transaction commits: another server's recent touch, or ours.
        let recorded = match last {
            Some(last) if last + QUEUE_TOUCH_INTERVAL_MS > now.millis() => last,
            _ => now.millis(),
        };
        if recorded == now.millis() {
            let statement = self.prepare(
                "INSERT INTO task_queues (task_queue_id, expires, last_date_active, description, stability) \
                 VALUES ($1, $2, $3, '', 'experimental') \
                 ON CONFLICT (task_queue_id) DO UPDATE SET expires = excluded.expires, \
                 last_date_active = excluded.last_date_active",
            )?;
            self.tx.execute(&statement, &[&task_queue_id, &(now.millis() + QUEUE_RETENTION_MS), &now.millis()])?;
        }
        // Remembered before the commit: if it rolls back, the queue's activity lags by at
        // most one interval (it is reported at that granularity anyway).
        let mut touched = self.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        touched.insert(task_queue_id.to_owned(), recorded);
        Ok(())
    }
}

/// What happens to a row's place in the claim line.
#[derive(Clone, Copy)]
enum Place {
    /// Not pending.
    None,
    /// Still the same pending run.
    Keep,
    /// A new pending run: to the back of the line.
    Back,
}

impl Place {
    fn as_str(self) -> &'static str {
        match self {
            Place::None => "none",
            Place::Keep => "keep",
            Place::Back => "back",
        }
    }
}

fn last_pending_run(task: &Task) -> Option<u32> {
    task.runs().last().filter(|run| run.state == RunState::Pending).map(|run| run.run_id)
}
