//! A PostgreSQL write transaction: what the operations read and write through.
//!
//! Unlike SQLite's single writer, several servers write at once, so every row an operation
//! is going to change is locked when read (`FOR UPDATE`), and a task group's row is locked
//! before deciding it has been resolved.
//!
//! Round trips, not the database, bound how fast an operation is, so statements are
//! pipelined: BEGIN goes out with the first statement, and writes whose results nothing
//! waits for (inserts, dependency marks, the outbox row) are held back and sent together
//! with the next statement that is awaited, or with the COMMIT. The database runs them in
//! the order they were issued, so the operation reads as if each had run on its own; an
//! error in a held-back write surfaces at that next statement and rolls everything back.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use deadpool_postgres::Object;
use serde_json::value::RawValue;
use shoal_engine::definition::Requires;
use shoal_engine::event::{Effects, Event};
use shoal_engine::graph::Reaction;
use shoal_engine::message::{self, Message};
use shoal_engine::status::{RunState, TaskState};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::graph;
use crate::postgres::outbox;
use crate::postgres::row::{GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row, task_group_from_row};
use crate::sqlite::outbox::encode;
use crate::sqlite::row::TaskRow;
use crate::sqlite::tx::{QUEUE_RETENTION_MS, QUEUE_TOUCH_INTERVAL_MS, json};
use crate::{StoreError, TaskEvent, TaskGroup};

/// A statement parameter owned by a held-back write.
pub(crate) type Param = Box<dyn ToSql + Send + Sync>;

/// Parameters of a statement awaited at once.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A boxed future of a pipelined statement.
type Pending<'a> = Pin<Box<dyn Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a>>;

/// What every write transaction of one server shares: settings, and what it remembers.
pub(crate) struct TxShared {
    pub(crate) claim_timeout_secs: i64,
    /// The scheduler id of task-graph tasks: only their resolutions are shown to the scheduler.
    pub(crate) graph_scheduler_id: String,
    /// When this server last recorded each queue as active (saves a read per operation).
    pub(crate) queues_touched: std::sync::Mutex<HashMap<String, i64>>,
}

/// A statement not sent yet.
enum HeldBack {
    /// A simple-protocol command (BEGIN, COMMIT).
    Command(&'static str),
    /// A write whose result nothing waits for.
    Write(Statement, Vec<Param>),
}

/// A write transaction in progress.
pub(crate) struct PgTx {
    pub(crate) client: Object,
    pub(crate) shared: Arc<TxShared>,
    held_back: Vec<HeldBack>,
    /// Whether BEGIN has gone out: a ROLLBACK is owed if the operation fails.
    begun: bool,
    /// Whether COMMIT went out: an error after that may hide a commit, so nothing is retried.
    pub(crate) committing: bool,
    pub(crate) events: Vec<TaskEvent>,
    /// Messages of this transaction, staged in the outbox with its commit.
    pub(crate) messages: Vec<Message>,
}

impl PgTx {
    /// A transaction on `client`; BEGIN goes out with its first statement.
    pub(crate) fn begin(client: Object, shared: Arc<TxShared>) -> PgTx {
        PgTx {
            client,
            shared,
            held_back: vec![HeldBack::Command("BEGIN")],
            begun: false,
            committing: false,
            events: Vec::new(),
            messages: Vec::new(),
        }
    }

    /// The statement for `sql`, prepared once per connection: a round trip saved per query.
    async fn statement(&self, sql: &str) -> Result<Statement, StoreError> {
        Ok(self.client.prepare_cached(sql).await?)
    }

    /// Holds a write back until the next statement that is awaited (or the commit).
    pub(crate) async fn defer(&mut self, sql: &str, params: Vec<Param>) -> Result<(), StoreError> {
        let statement = self.statement(sql).await?;
        self.held_back.push(HeldBack::Write(statement, params));
        Ok(())
    }

    /// Sends what was held back and then `queries`, all at once, and returns each query's
    /// rows; the first error (in the order sent) fails the whole.
    pub(crate) async fn pipeline(&mut self, queries: &[(&str, Params<'_>)]) -> Result<Vec<Vec<Row>>, StoreError> {
        let mut statements = Vec::with_capacity(queries.len());
        for (sql, _) in queries {
            statements.push(self.statement(sql).await?);
        }
        let held_back = std::mem::take(&mut self.held_back);
        if !held_back.is_empty() {
            self.begun = true;
        }
        let client: &tokio_postgres::Client = &self.client;
        let mut futures: Vec<Pending<'_>> = Vec::with_capacity(held_back.len() + queries.len());
        for item in &held_back {
            futures.push(match item {
                HeldBack::Command(sql) => Box::pin(async move { client.batch_execute(sql).await.map(|()| Vec::new()) }),
                HeldBack::Write(statement, params) => Box::pin(async move {
                    let params: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(|param| &**param as &(dyn ToSql + Sync)).collect();
                    client.execute(statement, &params).await.map(|_| Vec::new())
                }),
            });
        }
        for (statement, (_, params)) in statements.iter().zip(queries) {
            futures.push(Box::pin(client.query(statement, params)));
        }
        let n_held_back = held_back.len();
        let mut rows = Vec::with_capacity(queries.len());
        for (index, result) in in_order(futures).await.into_iter().enumerate() {
            let result = result?;
            if index >= n_held_back {
                rows.push(result);
            }
        }
        Ok(rows)
    }

    /// One query's rows (after what was held back).
    pub(crate) async fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
        Ok(self.pipeline(&[(sql, params)]).await?.pop().unwrap_or_default())
    }

    /// A query's first row, if any.
    pub(crate) async fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// A query's first row, which must exist.
    pub(crate) async fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, StoreError> {
        self.query_opt(sql, params).await?.ok_or_else(|| StoreError::Other(format!("no row from {sql}")))
    }

    /// Stages the messages and commits, in one round trip with what was held back.
    pub(crate) async fn commit(&mut self) -> Result<(), StoreError> {
        if !self.begun && self.held_back.len() == 1 {
            // Nothing was ever sent: there is nothing to commit.
            self.held_back.clear();
            return Ok(());
        }
        if !self.messages.is_empty() {
            let params: Vec<Param> = vec![Box::new(self.messages.len() as i32), Box::new(encode(self.messages.iter()))];
            self.defer(outbox::STAGE, params).await?;
        }
        self.held_back.push(HeldBack::Command("COMMIT"));
        self.committing = true;
        self.pipeline(&[]).await.map(|_| ())
    }

    /// Ends a failed transaction. The connection goes back to the pool unless the ROLLBACK
    /// failed too.
    pub(crate) async fn rollback(self) {
        if self.begun
            && let Err(err) = self.client.batch_execute("ROLLBACK").await
        {
            tracing::debug!(error = %err, "rollback failed; dropping the connection");
            drop(Object::take(self.client));
        }
    }

    /// Adds `message` to the outbox, written with this transaction.
    pub(crate) fn publish(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Loads a task and locks its row until the commit.
    pub(crate) async fn load(&mut self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1 FOR UPDATE");
        self.query_opt(&sql, &[&task_id.as_str()]).await?.map(|row| task_from_row(&row)).transpose()
    }

    pub(crate) async fn load_existing(&mut self, task_id: TaskId) -> Result<TaskRow, StoreError> {
        self.load(task_id).await?.ok_or_else(|| Rejection::NotFound(format!("task {task_id} not found")).into())
    }

    /// Loads and locks a task together with its stored definition (claims return both).
    pub(crate) async fn load_with_definition(
        &mut self,
        task_id: TaskId,
    ) -> Result<(TaskRow, Box<RawValue>), StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = $1 FOR UPDATE");
        match self.query_opt(&sql, &[&task_id.as_str()]).await? {
            Some(row) => Ok((task_from_row(&row)?, raw_json(&row, N_TASK_COLUMNS)?)),
            None => Err(Rejection::NotFound(format!("task {task_id} not found")).into()),
        }
    }

    /// Loads a task group and locks its row until the commit.
    pub(crate) async fn load_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1 FOR UPDATE");
        self.query_opt(&sql, &[&group.as_str()]).await?.map(|row| task_group_from_row(&row)).transpose()
    }

    /// Inserts a new task row as it stands (the caller has already run its first transition);
    /// held back until the next statement.
    async fn insert(&mut self, row: &TaskRow, definition: &str) -> Result<(), StoreError> {
        let task = &row.task;
        let meta = &task.meta;
        let state = task.state();
        let dimensions = (!meta.dimensions.is_empty()).then(|| json(&meta.dimensions)).transpose()?;
        let routes = (!meta.routes.is_empty()).then(|| json(&meta.routes)).transpose()?;
        let tags = (!meta.tags.is_empty()).then(|| json(&meta.tags)).transpose()?;
        let params: Vec<Param> = vec![
            Box::new(task.task_id.as_str().to_owned()),
            Box::new(meta.task_queue_id.clone()),
            Box::new(meta.scheduler_id.clone()),
            Box::new(meta.project_id.clone()),
            Box::new(meta.task_group_id.as_str().to_owned()),
            Box::new(json(&meta.priority)?),
            Box::new(i16::from(meta.priority.rank())),
            Box::new(meta.retries as i32),
            Box::new(task.retries_left() as i32),
            Box::new(meta.deadline.millis()),
            Box::new(meta.expires.millis()),
            Box::new(meta.requires.as_str()),
            Box::new(dimensions),
            Box::new(json(task.runs())?),
            Box::new(state.as_str()),
            Box::new(task.running_until().map(Timestamp::millis)),
            Box::new((!state.is_resolved()).then_some(meta.deadline.millis())),
            Box::new(last_pending_run(task).is_some()),
            Box::new(definition.to_owned()),
            Box::new(routes),
            Box::new(tags),
        ];
        self.defer(
            "INSERT INTO tasks (task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, \
             priority_rank, retries, retries_left, deadline, expires, requires, dimensions, runs, state, \
             taken_until, deadline_due, pending_seq, definition, routes, tags) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::text::jsonb, $14, $15, $16, $17, \
             CASE WHEN $18 THEN nextval('tasks_pending_seq') END, $19, $20, $21)",
            params,
        )
        .await
    }

    /// Runs one engine transition on `row`, then writes the row, its due times, its place in
    /// line, its messages and its dependents' release, all in this transaction.
    pub(crate) async fn step(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
    ) -> Result<(), StoreError> {
        self.step_and_persist(row, now, transition, None).await
    }

    /// [`PgTx::step`] behind a pointer: a step's own steps (a dependent's release, a
    /// graph's rerun) go through it, since a future cannot contain itself.
    fn step_boxed<'a>(
        &'a mut self,
        row: &'a mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection> + Send + 'a,
    ) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>> {
        Box::pin(self.step(row, now, transition))
    }

    /// [`PgTx::step`] for a task not yet stored: the row is inserted in its stepped state.
    pub(crate) async fn step_new(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
        definition: &str,
    ) -> Result<(), StoreError> {
        self.step_and_persist(row, now, transition, Some(definition)).await
    }

    /// Inserts a task that waits for its dependencies (no transition yet).
    pub(crate) async fn insert_unscheduled(&mut self, row: &TaskRow, definition: &str) -> Result<(), StoreError> {
        self.insert(row, definition).await
    }

    async fn step_and_persist(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
        new: Option<&str>,
    ) -> Result<(), StoreError> {
        let before = Before::of(&row.task);
        let effects = transition(&mut row.task)?;
        self.persist(row, now, before, effects, new).await
    }

    /// Writes what a transition did. Not generic over the transition: the steps it takes
    /// itself (a dependent's release, a graph's rerun) would otherwise instantiate it anew
    /// for each, forever.
    async fn persist(
        &mut self,
        row: &mut TaskRow,
        now: Timestamp,
        before: Before,
        effects: Effects,
        new: Option<&str>,
    ) -> Result<(), StoreError> {
        let was_resolved = before.state.is_resolved();
        match new {
            Some(definition) => self.insert(row, definition).await?,
            None => {
                let new_run = last_pending_run(&row.task);
                // A run keeps its place in line when only its priority moved; a new run joins the back.
                let place = match new_run {
                    None => Place::None,
                    Some(_) if before.pending_run == new_run => Place::Keep,
                    Some(_) => Place::Back,
                };
                self.save(row, place, before.priority != row.task.meta.priority).await?;
            }
        }
        self.record(&row.task, effects.0);
        let state = row.task.state();
        if was_resolved != state.is_resolved()
            && row.task.meta.scheduler_id == self.shared.graph_scheduler_id
            && graph::react(self, &row.task, before.state, now).await? == Reaction::Rerun
        {
            // The graph runs it again at once: to its dependents and its group it never
            // resolved.
            return self.step_boxed(row, now, |task| task.rerun(now)).await;
        }
        if !was_resolved && state.is_resolved() {
            self.resolved(row.task.task_id, row.task.meta.task_group_id, state, now).await?;
        }
        Ok(())
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

    /// After a task resolved: publishes task-group-resolved when its group has no unresolved
    /// task left, and releases the dependents this resolution satisfies.
    ///
    /// The questions go out in one round trip (with the task's held-back UPDATE before them). The group's row is locked before its tasks are counted: that serializes the
    /// resolutions of a group's last tasks across servers, since the count (READ COMMITTED
    /// takes a new snapshot per statement) then sees every resolution committed before the
    /// lock was granted. Releasing the dependents after the count changes nothing in it: a
    /// dependent is unresolved whether scheduled or not.
    async fn resolved(
        &mut self,
        task_id: TaskId,
        group: TaskId,
        state: TaskState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let lock_group = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1 FOR UPDATE");
        let (task, group) = (task_id.as_str(), group.as_str());
        // The count and the waiting dependents in one statement, after the lock: one row
        // per waiting dependent, or one row of NULLs when none waits.
        let mut answers = self
            .pipeline(&[
                (&lock_group, &[&group]),
                (
                    "SELECT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = $1 AND deadline_due IS NOT NULL), \
                     d.dependent_task_id, d.requires FROM (SELECT 1) AS one LEFT JOIN task_dependencies d \
                     ON d.required_task_id = $2 AND NOT d.satisfied ORDER BY d.dependent_task_id",
                    &[&group, &task],
                ),
            ])
            .await?
            .into_iter();
        let (found, after) = (answers.next().unwrap_or_default(), answers.next().unwrap_or_default());
        let unresolved = after.first().map(|row| row.try_get::<_, bool>(0)).transpose()?.unwrap_or(false);
        if let Some(found) = found.first()
            && !unresolved
        {
            self.publish(message::group_resolved(&task_group_from_row(found)?));
        }
        let mut waiting = Vec::new();
        for row in &after {
            if let (Some(dependent), Some(requires)) =
                (row.try_get::<_, Option<&str>>(1)?, row.try_get::<_, Option<&str>>(2)?)
            {
                waiting.push((dependent.to_owned(), requires.to_owned()));
            }
        }
        if !waiting.is_empty() {
            self.release_dependents(task_id, &waiting, state, now).await?;
        }
        Ok(())
    }

    /// Writes the row. A new pending run draws its place in line, which the row keeps;
    /// otherwise the UPDATE is held back.
    async fn save(&mut self, row: &mut TaskRow, place: Place, priority_changed: bool) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE tasks SET retries_left = $2, runs = $3, state = $4, taken_until = $5, \
             deadline_due = $6, \
             pending_seq = CASE $7 WHEN 'keep' THEN pending_seq WHEN 'back' THEN nextval('tasks_pending_seq') END, \
             priority = $8::text, priority_rank = $9, \
             definition = CASE WHEN $10 THEN jsonb_set(definition::jsonb, '{priority}', $8::text::jsonb)::text \
             ELSE definition END \
             WHERE task_id = $1 RETURNING pending_seq";
        let task = &row.task;
        let state = task.state();
        let params: Vec<Param> = vec![
            Box::new(task.task_id.as_str().to_owned()),
            Box::new(task.retries_left() as i32),
            Box::new(json(task.runs())?),
            Box::new(state.as_str()),
            Box::new(task.running_until().map(Timestamp::millis)),
            Box::new((!state.is_resolved()).then_some(task.meta.deadline.millis())),
            Box::new(place.as_str()),
            Box::new(json(&task.meta.priority)?),
            Box::new(i16::from(task.meta.priority.rank())),
            Box::new(priority_changed),
        ];
        match place {
            Place::Back => {
                let params: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|param| &**param as &(dyn ToSql + Sync)).collect();
                let updated = self.query_one(SQL, &params).await?;
                row.pending_seq = updated.get::<_, Option<i64>>(0).map(|seq| seq as u64);
            }
            Place::Keep => self.defer(SQL, params).await?,
            Place::None => {
                self.defer(SQL, params).await?;
                row.pending_seq = None;
            }
        }
        Ok(())
    }

    /// Marks the dependency on `required` satisfied for each `waiting` dependent whose
    /// `requires` this resolution meets, and schedules each whose last unmet dependency it was.
    async fn release_dependents(
        &mut self,
        required: TaskId,
        waiting: &[(String, String)],
        state: TaskState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut released = Vec::with_capacity(waiting.len());
        for (dependent, requires) in waiting {
            let requires = Requires::from_name(requires).ok_or_else(|| StoreError::Other("bad requires".into()))?;
            if requires.satisfied_by(state) {
                released.push(TaskId::parse(dependent).ok_or_else(|| StoreError::Other("bad dependent id".into()))?);
            }
        }
        for dependent in released {
            // Lock the dependent before counting what it still waits for: two of its
            // dependencies resolving at once on two servers then see each other's release.
            let Some(mut row) = self.load(dependent).await? else { continue };
            self.defer(
                "UPDATE task_dependencies SET satisfied = TRUE WHERE required_task_id = $1 AND dependent_task_id = $2",
                vec![Box::new(required.as_str().to_owned()), Box::new(dependent.as_str().to_owned())],
            )
            .await?;
            if self.has_unmet_dependencies(dependent).await? {
                continue;
            }
            match self.step_boxed(&mut row, now, |task| task.schedule(now)).await {
                // Past its deadline the dependent is left for the deadline to resolve.
                Ok(()) | Err(StoreError::Rejected(_)) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    pub(crate) async fn has_unmet_dependencies(&mut self, task_id: TaskId) -> Result<bool, StoreError> {
        let sql = "SELECT 1 FROM task_dependencies WHERE dependent_task_id = $1 AND NOT satisfied LIMIT 1";
        Ok(self.query_opt(sql, &[&task_id.as_str()]).await?.is_some())
    }

    /// Records that a queue was used, at most once per interval per queue and server.
    pub(crate) async fn touch_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        {
            let touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if touched.get(task_queue_id).is_some_and(|&at| at + QUEUE_TOUCH_INTERVAL_MS > now.millis()) {
                return Ok(());
            }
        }
        // Read first: an upsert locks the queue's row even when it changes nothing, and every
        // claim on the queue would then wait for the others' commits.
        let last: Option<i64> = self
            .query_opt("SELECT last_date_active FROM task_queues WHERE task_queue_id = $1", &[&task_queue_id])
            .await?
            .map(|row| row.get(0));
        // What the row says once this transaction commits: another server's recent touch, or ours.
        let recorded = match last {
            Some(last) if last + QUEUE_TOUCH_INTERVAL_MS > now.millis() => last,
            _ => now.millis(),
        };
        if recorded == now.millis() {
            self.defer(
                "INSERT INTO task_queues (task_queue_id, expires, last_date_active, description, stability) \
                 VALUES ($1, $2, $3, '', 'experimental') \
                 ON CONFLICT (task_queue_id) DO UPDATE SET expires = excluded.expires, \
                 last_date_active = excluded.last_date_active",
                vec![
                    Box::new(task_queue_id.to_owned()),
                    Box::new(now.millis() + QUEUE_RETENTION_MS),
                    Box::new(now.millis()),
                ],
            )
            .await?;
        }
        // Remembered before the commit: if it rolls back, the queue's activity lags by at
        // most one interval (it is reported at that granularity anyway).
        let mut touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        touched.insert(task_queue_id.to_owned(), recorded);
        Ok(())
    }
}

/// Drives `futures` to completion, polling each first in the order given: a statement's
/// request goes out when its future is first polled, so this sends them in that order.
async fn in_order<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut results: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, result) in futures.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *result = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    results.into_iter().flatten().collect()
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

/// What a row was before a transition, as far as writing it back cares.
struct Before {
    state: TaskState,
    pending_run: Option<u32>,
    priority: shoal_engine::priority::Priority,
}

impl Before {
    fn of(task: &Task) -> Before {
        Before { state: task.state(), pending_run: last_pending_run(task), priority: task.meta.priority }
    }
}

fn last_pending_run(task: &Task) -> Option<u32> {
    task.runs().last().filter(|run| run.state == RunState::Pending).map(|run| run.run_id)
}
