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

use std::collections::{HashMap, HashSet};
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
    /// What this server staged in the outbox, kept for its tail.
    pub(crate) staged: Arc<outbox::Staged>,
}

/// Where a transaction stood (see [`PgTx::mark`]).
pub(crate) struct Mark {
    /// Events recorded by then.
    pub(crate) events: usize,
    messages: usize,
    resolutions: usize,
    writes: u64,
}

/// A statement not sent yet.
enum HeldBack {
    /// A simple-protocol command (BEGIN, COMMIT).
    Command(&'static str),
    /// A write whose result nothing waits for.
    Write(Statement, Vec<Param>),
    /// New task rows in a row: written by one statement.
    Inserts(Vec<NewRow>),
    /// Task rows' new states in a row, each task at most once: written by one statement.
    Updates(Vec<RowUpdate>),
    /// The transaction's messages, staged in the outbox (their count, `encode`d, and the
    /// tag under which the server keeps them): the last write before the COMMIT.
    Stage(i32, String, i64),
}

impl HeldBack {
    /// Whether this writes the row of `task_id`.
    fn touches(&self, task_id: &str) -> bool {
        match self {
            HeldBack::Inserts(rows) => rows.iter().any(|row| row.task_id == task_id),
            HeldBack::Updates(rows) => rows.iter().any(|row| row.task_id == task_id),
            HeldBack::Command(_) | HeldBack::Write(..) | HeldBack::Stage(..) => false,
        }
    }
}

/// The held-back batch of inserts (`inserts`) or updates that a write of `task_id`'s row
/// can join: the last one, if only batches of the other kind that leave that row alone
/// came after it. The two kinds write different rows, so their order does not matter, and
/// a gathering that interleaves creates and reports still writes one statement of each
/// (a statement costs the database far more than a row). Nothing else is moved across:
/// held-back writes of other tables keep their order.
fn batch_for(held_back: &[HeldBack], task_id: &str, inserts: bool) -> Option<usize> {
    for (index, item) in held_back.iter().enumerate().rev() {
        match item {
            HeldBack::Inserts(_) | HeldBack::Updates(_) if item.touches(task_id) => return None,
            HeldBack::Inserts(_) if inserts => return Some(index),
            HeldBack::Updates(_) if !inserts => return Some(index),
            HeldBack::Inserts(_) | HeldBack::Updates(_) => {}
            HeldBack::Command(_) | HeldBack::Write(..) | HeldBack::Stage(..) => return None,
        }
    }
    None
}

/// A held-back item lowered to what goes on the wire.
enum Lowered {
    Command(&'static str),
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
    /// Writes issued so far (held back or sent): tells whether a part of the transaction wrote.
    writes: u64,
    pub(crate) events: Vec<TaskEvent>,
    /// Messages of this transaction, staged in the outbox with its commit.
    pub(crate) messages: Vec<Message>,
    /// Whether the commit staged messages (a sequencing step is owed).
    pub(crate) staged: bool,
    /// While gathering ([`PgTx::gather_resolutions`]): the resolutions whose consequences
    /// wait for [`PgTx::resolve_gathered`].
    resolutions: Option<Vec<Resolution>>,
    /// Queues whose activity this transaction took it upon itself to record
    /// ([`PgTx::touch_queue`]), with the time it put in the server's map.
    touched: Vec<(String, i64)>,
}

/// A task that resolved, whose group and dependents are yet to hear of it.
struct Resolution {
    task_id: TaskId,
    group: TaskId,
    state: TaskState,
    now: Timestamp,
}

/// What a gathering learned before writing about the tasks it commands, for judging their
/// resolutions without asking again ([`PgTx::resolve_gathered`]).
pub(crate) struct Known {
    /// The tasks it covers.
    pub(crate) covers: HashSet<TaskId>,
    /// Their groups, locked, in id order.
    pub(crate) groups: Vec<TaskGroup>,
    /// Those of their groups that still hold an unresolved task once the transaction commits.
    pub(crate) unresolved: HashSet<TaskId>,
    /// Each task's waiting dependents (id and what they require), in id order.
    pub(crate) waiting: HashMap<TaskId, Vec<(String, String)>>,
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
            writes: 0,
            events: Vec::new(),
            messages: Vec::new(),
            staged: false,
            resolutions: None,
            touched: Vec::new(),
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
        self.writes += 1;
        Ok(())
    }

    /// Where the transaction stands, to undo what a refused part of it recorded.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            events: self.events.len(),
            messages: self.messages.len(),
            resolutions: self.resolutions.as_ref().map_or(0, Vec::len),
            writes: self.writes,
        }
    }

    /// Forgets the events and messages recorded since `mark`. False when a write was issued
    /// since: only a rollback takes that back.
    pub(crate) fn undo(&mut self, mark: &Mark) -> bool {
        self.events.truncate(mark.events);
        self.messages.truncate(mark.messages);
        if let Some(resolutions) = &mut self.resolutions {
            resolutions.truncate(mark.resolutions);
        }
        self.writes == mark.writes
    }

    /// Sends what was held back and then `queries`, all at once, and returns each query's
    /// rows; the first error (in the order sent) fails the whole.
    pub(crate) async fn pipeline(&mut self, queries: &[(&str, Params<'_>)]) -> Result<Vec<Vec<Row>>, StoreError> {
        let mut statements = Vec::with_capacity(queries.len());
        for (sql, _) in queries {
            statements.push(self.statement(sql).await?);
        }
        let items = std::mem::take(&mut self.held_back);
        let held_back = self.lower(items).await?;
        if !held_back.is_empty() {
            self.begun = true;
        }
        let client: &tokio_postgres::Client = &self.client;
        let mut futures: Vec<Pending<'_>> = Vec::with_capacity(held_back.len() + queries.len());
        for item in &held_back {
            futures.push(match item {
                Lowered::Command(sql) => Box::pin(async move { client.batch_execute(sql).await.map(|()| Vec::new()) }),
                Lowered::Write(statement, params) => Box::pin(async move {
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

    /// The statements and parameters of the held-back items: rows gathered in a row are
    /// written by one statement over arrays, and a run of task-row inserts, updates and the
    /// outbox stage by one statement (a statement costs the database far more than a row).
    async fn lower(&self, items: Vec<HeldBack>) -> Result<Vec<Lowered>, StoreError> {
        let mut lowered = Vec::with_capacity(items.len());
        let mut run = Fused::default();
        for item in items {
            let item = match run.absorb(item) {
                None => continue,
                Some(item) => item,
            };
            if !run.is_empty() {
                lowered.push(self.lower_fused(std::mem::take(&mut run)).await?);
            }
            if let Some(item) = run.absorb(item) {
                lowered.push(match item {
                    HeldBack::Command(sql) => Lowered::Command(sql),
                    HeldBack::Write(statement, params) => Lowered::Write(statement, params),
                    HeldBack::Inserts(_) | HeldBack::Updates(_) | HeldBack::Stage(..) => {
                        unreachable!("an empty run absorbs any write of task rows or the outbox")
                    }
                });
            }
        }
        if !run.is_empty() {
            lowered.push(self.lower_fused(run).await?);
        }
        Ok(lowered)
    }

    /// The one statement writing a run.
    async fn lower_fused(&self, run: Fused) -> Result<Lowered, StoreError> {
        let sql = fused_sql(run.inserts.is_some(), run.updates.is_some(), run.stage.is_some());
        let mut params = run.inserts.map(NewRow::columns).unwrap_or_default();
        params.extend(run.updates.map(RowUpdate::columns).unwrap_or_default());
        if let Some((count, messages, tag)) = run.stage {
            params.push(Box::new(count));
            params.push(Box::new(messages));
            params.push(Box::new(self.shared.staged.origin()));
            params.push(Box::new(tag));
        }
        Ok(Lowered::Write(self.statement(sql).await?, params))
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
        self.staged = !self.messages.is_empty();
        let tag = self.staged.then(|| {
            let (count, encoded) = (self.messages.len() as i32, encode(self.messages.iter()));
            let tag = self.shared.staged.keep(std::mem::take(&mut self.messages));
            self.held_back.push(HeldBack::Stage(count, encoded, tag));
            self.writes += 1;
            tag
        });
        self.held_back.push(HeldBack::Command("COMMIT"));
        self.committing = true;
        let result = self.pipeline(&[]).await.map(|_| ());
        if let (Err(StoreError::Other(_)), Some(tag)) = (&result, tag) {
            // The database refused: nothing was written (a lost connection leaves it unknown).
            self.shared.staged.forget(tag);
        }
        result
    }

    /// Ends a failed transaction. The connection goes back to the pool unless the ROLLBACK
    /// failed too.
    pub(crate) async fn rollback(mut self) {
        self.release_touches();
        if self.begun
            && let Err(err) = self.client.batch_execute("ROLLBACK").await
        {
            tracing::debug!(error = %err, "rollback failed; dropping the connection");
            drop(Object::take(self.client));
        }
    }

    /// Ends a transaction whose connection was lost: the connection leaves the pool. Before
    /// the COMMIT went out nothing was written, so the records it took are given back.
    pub(crate) fn discard(mut self) {
        if !self.committing {
            self.release_touches();
        }
        drop(Object::take(self.client));
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
    /// held back until the next statement, together with the inserts right before it.
    async fn insert(&mut self, row: &TaskRow, definition: &str) -> Result<(), StoreError> {
        let task = &row.task;
        let meta = &task.meta;
        let state = task.state();
        let new = NewRow {
            task_id: task.task_id.as_str().to_owned(),
            task_queue_id: meta.task_queue_id.clone(),
            scheduler_id: meta.scheduler_id.clone(),
            project_id: meta.project_id.clone(),
            task_group_id: meta.task_group_id.as_str().to_owned(),
            priority: json(&meta.priority)?,
            priority_rank: i16::from(meta.priority.rank()),
            retries: meta.retries as i32,
            retries_left: task.retries_left() as i32,
            deadline: meta.deadline.millis(),
            expires: meta.expires.millis(),
            requires: meta.requires.as_str(),
            dimensions: (!meta.dimensions.is_empty()).then(|| json(&meta.dimensions)).transpose()?,
            runs: json(task.runs())?,
            state: state.as_str(),
            taken_until: task.running_until().map(Timestamp::millis),
            deadline_due: (!state.is_resolved()).then_some(meta.deadline.millis()),
            pending: last_pending_run(task).is_some(),
            definition: definition.to_owned(),
            routes: (!meta.routes.is_empty()).then(|| json(&meta.routes)).transpose()?,
            tags: (!meta.tags.is_empty()).then(|| json(&meta.tags)).transpose()?,
        };
        self.writes += 1;
        match batch_for(&self.held_back, &new.task_id, true) {
            Some(index) => {
                if let HeldBack::Inserts(rows) = &mut self.held_back[index] {
                    rows.push(new);
                }
            }
            None => self.held_back.push(HeldBack::Inserts(vec![new])),
        }
        Ok(())
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
        if let Some(resolutions) = &mut self.resolutions {
            resolutions.push(Resolution { task_id, group, state, now });
            return Ok(());
        }
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

    /// From now on, what a resolution entails (its group's resolution, its dependents'
    /// release) waits for [`PgTx::resolve_gathered`], which asks for all of them at once.
    pub(crate) fn gather_resolutions(&mut self) {
        self.resolutions = Some(Vec::new());
    }

    /// Does what the gathered resolutions entail, as [`PgTx::resolved`] does for one: each
    /// group left with no unresolved task published once, and each resolution's dependents
    /// released. Judged together, they see the transaction as it will commit: a group one
    /// operation resolved and a later one extended with a new task is not resolved.
    ///
    /// When `known` covers every resolved task (the gathering asked before writing, with the
    /// groups already locked) no round trip is needed; otherwise one asks: every group locked
    /// (in id order) before any is counted.
    pub(crate) async fn resolve_gathered(&mut self, known: Option<Known>) -> Result<(), StoreError> {
        let Some(resolutions) = self.resolutions.take() else { return Ok(()) };
        if resolutions.is_empty() {
            return Ok(());
        }
        if let Some(known) = known
            && resolutions.iter().all(|resolution| known.covers.contains(&resolution.task_id))
        {
            let touched: HashSet<TaskId> = resolutions.iter().map(|resolution| resolution.group).collect();
            for group in &known.groups {
                if touched.contains(&group.task_group_id) && !known.unresolved.contains(&group.task_group_id) {
                    self.publish(message::group_resolved(group));
                }
            }
            for resolution in &resolutions {
                if let Some(waiting) = known.waiting.get(&resolution.task_id) {
                    self.release_dependents(resolution.task_id, waiting, resolution.state, resolution.now).await?;
                }
            }
            return Ok(());
        }
        let mut groups: Vec<&str> = resolutions.iter().map(|resolution| resolution.group.as_str()).collect();
        groups.sort_unstable();
        groups.dedup();
        let tasks: Vec<&str> = resolutions.iter().map(|resolution| resolution.task_id.as_str()).collect();
        let lock_groups = format!(
            "SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = ANY($1) ORDER BY task_group_id FOR UPDATE"
        );
        let mut answers = self
            .pipeline(&[
                (&lock_groups, &[&groups]),
                (
                    "SELECT g.id FROM unnest($1::text[]) AS g(id) WHERE NOT EXISTS \
                     (SELECT 1 FROM tasks WHERE task_group_id = g.id AND deadline_due IS NOT NULL)",
                    &[&groups],
                ),
                (
                    "SELECT required_task_id, dependent_task_id, requires FROM task_dependencies \
                     WHERE required_task_id = ANY($1) AND NOT satisfied ORDER BY required_task_id, dependent_task_id",
                    &[&tasks],
                ),
            ])
            .await?
            .into_iter();
        let (locked, resolved, waiting) = (
            answers.next().unwrap_or_default(),
            answers.next().unwrap_or_default(),
            answers.next().unwrap_or_default(),
        );
        let resolved: HashSet<&str> = resolved.iter().map(|row| row.get(0)).collect();
        for row in &locked {
            let group = task_group_from_row(row)?;
            if resolved.contains(group.task_group_id.as_str()) {
                self.publish(message::group_resolved(&group));
            }
        }
        let mut waiting_on: HashMap<&str, Vec<(String, String)>> = HashMap::new();
        for row in &waiting {
            let (required, dependent, requires): (&str, &str, &str) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            waiting_on.entry(required).or_default().push((dependent.to_owned(), requires.to_owned()));
        }
        for resolution in &resolutions {
            if let Some(waiting) = waiting_on.get(resolution.task_id.as_str()) {
                self.release_dependents(resolution.task_id, waiting, resolution.state, resolution.now).await?;
            }
        }
        Ok(())
    }

    /// Writes the row. A new pending run draws its place in line, which the row keeps;
    /// otherwise the UPDATE is held back, together with the updates of other tasks right
    /// before it.
    async fn save(&mut self, row: &mut TaskRow, place: Place, priority_changed: bool) -> Result<(), StoreError> {
        let task = &row.task;
        let state = task.state();
        let update = RowUpdate {
            task_id: task.task_id.as_str().to_owned(),
            retries_left: task.retries_left() as i32,
            runs: json(task.runs())?,
            state: state.as_str(),
            taken_until: task.running_until().map(Timestamp::millis),
            deadline_due: (!state.is_resolved()).then_some(task.meta.deadline.millis()),
            place: place.as_str(),
            priority: json(&task.meta.priority)?,
            priority_rank: i16::from(task.meta.priority.rank()),
            priority_changed,
        };
        self.writes += 1;
        match place {
            Place::Back => {
                let params = update.params();
                let params: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|param| &**param as &(dyn ToSql + Sync)).collect();
                let updated = self.query_one(UPDATE_ONE, &params).await?;
                row.pending_seq = updated.get::<_, Option<i64>>(0).map(|seq| seq as u64);
            }
            Place::Keep | Place::None => {
                if place == Place::None {
                    row.pending_seq = None;
                }
                match batch_for(&self.held_back, &update.task_id, false) {
                    Some(index) => {
                        if let HeldBack::Updates(rows) = &mut self.held_back[index] {
                            rows.push(update);
                        }
                    }
                    None => self.held_back.push(HeldBack::Updates(vec![update])),
                }
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
            // Taken before reading, under the map's lock: of the server's transactions that
            // find the record stale at once, one writes it. When each of them wrote it, they
            // queued on the row's lock, each waiting for the one before it to commit
            // (`pg_stat_statements`: 26 upserts of ~89 ms each at a 64-worker run's start).
            let mut touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if touched.get(task_queue_id).is_some_and(|&at| at + QUEUE_TOUCH_INTERVAL_MS > now.millis()) {
                return Ok(());
            }
            touched.insert(task_queue_id.to_owned(), now.millis());
        }
        self.touched.push((task_queue_id.to_owned(), now.millis()));
        // Read first: an upsert locks the queue's row even when it changes nothing, so another
        // server's recent record is left alone.
        let last: Option<i64> = self
            .query_opt("SELECT last_date_active FROM task_queues WHERE task_queue_id = $1", &[&task_queue_id])
            .await?
            .map(|row| row.get(0));
        if let Some(last) = last.filter(|&last| last + QUEUE_TOUCH_INTERVAL_MS > now.millis()) {
            self.touched.pop();
            let mut touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            touched.insert(task_queue_id.to_owned(), last);
            return Ok(());
        }
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
        .await
    }

    /// Gives back the records this transaction took on and will not write (it failed before
    /// its COMMIT), so that the next use of those queues writes them.
    fn release_touches(&mut self) {
        if self.touched.is_empty() {
            return;
        }
        let mut touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (queue, at) in self.touched.drain(..) {
            if touched.get(&queue) == Some(&at) {
                touched.remove(&queue);
            }
        }
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
#[derive(Clone, Copy, PartialEq, Eq)]
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

/// Inserts task rows given column by column, in order (their places in line follow it).
const INSERT_MANY: &str = "INSERT INTO tasks (task_id, task_queue_id, scheduler_id, project_id, task_group_id, \
     priority, priority_rank, retries, retries_left, deadline, expires, requires, dimensions, runs, state, \
     taken_until, deadline_due, pending_seq, definition, routes, tags) \
     SELECT r.task_id, r.task_queue_id, r.scheduler_id, r.project_id, r.task_group_id, r.priority, \
     r.priority_rank, r.retries, r.retries_left, r.deadline, r.expires, r.requires, r.dimensions::jsonb, r.runs, \
     r.state, r.taken_until, r.deadline_due, CASE WHEN r.pending THEN nextval('tasks_pending_seq') END, \
     r.definition, r.routes, r.tags \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int2[], \
     $8::int4[], $9::int4[], $10::int8[], $11::int8[], $12::text[], $13::text[], $14::text[], $15::text[], \
     $16::int8[], $17::int8[], $18::bool[], $19::text[], $20::text[], $21::text[]) WITH ORDINALITY \
     AS r(task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, priority_rank, retries, \
     retries_left, deadline, expires, requires, dimensions, runs, state, taken_until, deadline_due, pending, \
     definition, routes, tags, n) ORDER BY r.n";

/// Writes one task row's new state and tells its place in line: only this form can draw a new
/// place ('back'), since the caller needs it at once.
const UPDATE_ONE: &str = "UPDATE tasks SET retries_left = $2, runs = $3, state = $4, taken_until = $5, \
     deadline_due = $6, \
     pending_seq = CASE $7 WHEN 'keep' THEN pending_seq WHEN 'back' THEN nextval('tasks_pending_seq') END, \
     priority = $8::text, priority_rank = $9, \
     definition = CASE WHEN $10 THEN jsonb_set(definition::jsonb, '{priority}', $8::text::jsonb)::text \
     ELSE definition END \
     WHERE task_id = $1 RETURNING pending_seq";

/// Writes several task rows' new states ('keep' or 'none' only), given column by column.
/// Each task appears once: a row matched twice would take one of the two arbitrarily.
const UPDATE_MANY: &str = "UPDATE tasks SET retries_left = u.retries_left, runs = u.runs, state = u.state, \
     taken_until = u.taken_until, deadline_due = u.deadline_due, \
     pending_seq = CASE u.place WHEN 'keep' THEN tasks.pending_seq END, \
     priority = u.priority, priority_rank = u.priority_rank, \
     definition = CASE WHEN u.priority_changed \
     THEN jsonb_set(tasks.definition::jsonb, '{priority}', u.priority::jsonb)::text ELSE tasks.definition END \
     FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::int8[], $6::int8[], $7::text[], \
     $8::text[], $9::int2[], $10::bool[]) \
     AS u(task_id, retries_left, runs, state, taken_until, deadline_due, place, priority, priority_rank, \
     priority_changed) \
     WHERE tasks.task_id = u.task_id";

/// A run of held-back writes sent as one statement: task rows inserted, task rows updated
/// (none of them inserted by the same run: the parts of a statement do not see each other's
/// rows) and the outbox stage, which comes last.
#[derive(Default)]
struct Fused {
    inserts: Option<Vec<NewRow>>,
    updates: Option<Vec<RowUpdate>>,
    stage: Option<(i32, String, i64)>,
}

impl Fused {
    fn is_empty(&self) -> bool {
        self.inserts.is_none() && self.updates.is_none() && self.stage.is_none()
    }

    /// Takes `item` into the run, or gives it back when it cannot join.
    fn absorb(&mut self, item: HeldBack) -> Option<HeldBack> {
        if self.stage.is_some() {
            return Some(item);
        }
        match item {
            HeldBack::Inserts(rows) if self.inserts.is_none() && !self.updates_any(&rows) => {
                self.inserts = Some(rows);
                None
            }
            HeldBack::Updates(rows) if self.updates.is_none() && !self.inserts_any(&rows) => {
                self.updates = Some(rows);
                None
            }
            HeldBack::Stage(count, messages, tag) => {
                self.stage = Some((count, messages, tag));
                None
            }
            item => Some(item),
        }
    }

    fn updates_any(&self, rows: &[NewRow]) -> bool {
        self.updates
            .as_ref()
            .is_some_and(|updates| rows.iter().any(|row| updates.iter().any(|u| u.task_id == row.task_id)))
    }

    fn inserts_any(&self, rows: &[RowUpdate]) -> bool {
        self.inserts
            .as_ref()
            .is_some_and(|inserts| rows.iter().any(|row| inserts.iter().any(|i| i.task_id == row.task_id)))
    }
}

/// The statement writing a run with the given parts ([`Fused`]).
fn fused_sql(inserts: bool, updates: bool, stage: bool) -> &'static str {
    static FUSED: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        (0..8).map(|parts| build_fused_sql(parts & 1 != 0, parts & 2 != 0, parts & 4 != 0)).collect()
    });
    match (inserts, updates, stage) {
        (true, false, false) => INSERT_MANY,
        (false, true, false) => UPDATE_MANY,
        (false, false, true) => outbox::STAGE,
        _ => &FUSED[usize::from(inserts) | usize::from(updates) << 1 | usize::from(stage) << 2],
    }
}

/// Data-modifying parts of one statement run on one snapshot, in no set order unless the
/// main part reads them: the stage reads the others, so that its outbox id is drawn after
/// every row is written (and locked; see `outbox.rs`).
fn build_fused_sql(inserts: bool, updates: bool, stage: bool) -> String {
    let mut parts = Vec::new();
    let mut counts = Vec::new();
    let mut offset = 0;
    if inserts {
        parts.push(format!("i AS ({INSERT_MANY} RETURNING 1)"));
        counts.push("(SELECT count(*) FROM i) AS ci");
        offset += N_INSERT_PARAMS;
    }
    if updates {
        parts.push(format!("u AS ({} RETURNING 1)", renumber(UPDATE_MANY, offset)));
        counts.push("(SELECT count(*) FROM u) AS cu");
        offset += N_UPDATE_PARAMS;
    }
    let counts = counts.join(", ");
    let main = if stage {
        format!(
            "INSERT INTO outbox_pending (id, count, messages, origin, tag) \
             SELECT nextval('outbox_ids'), ${}, ${}, ${}, ${} FROM {counts}",
            offset + 1,
            offset + 2,
            offset + 3,
            offset + 4
        )
    } else {
        format!("SELECT * FROM {counts}")
    };
    format!("WITH {} {main}", parts.join(", "))
}

/// `sql` with each parameter `$n` renamed `$(n + offset)`.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// Parameters of [`INSERT_MANY`].
const N_INSERT_PARAMS: usize = 21;
/// Parameters of [`UPDATE_MANY`].
const N_UPDATE_PARAMS: usize = 10;

/// One array parameter per named field of `rows`, in the order named.
macro_rules! columns {
    ($rows:expr; $($field:ident),+ $(,)?) => {
        vec![$(Box::new($rows.iter().map(|row| row.$field.clone()).collect::<Vec<_>>()) as Param),+]
    };
}

/// A task row to insert.
struct NewRow {
    task_id: String,
    task_queue_id: String,
    scheduler_id: String,
    project_id: String,
    task_group_id: String,
    priority: String,
    priority_rank: i16,
    retries: i32,
    retries_left: i32,
    deadline: i64,
    expires: i64,
    requires: &'static str,
    dimensions: Option<String>,
    runs: String,
    state: &'static str,
    taken_until: Option<i64>,
    deadline_due: Option<i64>,
    /// Whether it joins the line (draws a place).
    pending: bool,
    definition: String,
    routes: Option<String>,
    tags: Option<String>,
}

impl NewRow {
    /// The parameters of [`INSERT_MANY`]: one array per column.
    fn columns(rows: Vec<NewRow>) -> Vec<Param> {
        columns!(rows; task_id, task_queue_id, scheduler_id, project_id, task_group_id, priority, priority_rank,
            retries, retries_left, deadline, expires, requires, dimensions, runs, state, taken_until, deadline_due,
            pending, definition, routes, tags)
    }
}

/// A task row's new state.
struct RowUpdate {
    task_id: String,
    retries_left: i32,
    runs: String,
    state: &'static str,
    taken_until: Option<i64>,
    deadline_due: Option<i64>,
    /// [`Place::as_str`].
    place: &'static str,
    priority: String,
    priority_rank: i16,
    /// Whether the stored definition's priority is rewritten too.
    priority_changed: bool,
}

impl RowUpdate {
    /// The parameters of [`UPDATE_ONE`].
    fn params(self) -> Vec<Param> {
        vec![
            Box::new(self.task_id),
            Box::new(self.retries_left),
            Box::new(self.runs),
            Box::new(self.state),
            Box::new(self.taken_until),
            Box::new(self.deadline_due),
            Box::new(self.place),
            Box::new(self.priority),
            Box::new(self.priority_rank),
            Box::new(self.priority_changed),
        ]
    }

    /// The parameters of [`UPDATE_MANY`]: one array per column.
    fn columns(rows: Vec<RowUpdate>) -> Vec<Param> {
        columns!(rows; task_id, retries_left, runs, state, taken_until, deadline_due, place, priority, priority_rank,
            priority_changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(task_id: &str) -> NewRow {
        NewRow {
            task_id: task_id.to_owned(),
            task_queue_id: "q/w".into(),
            scheduler_id: "-".into(),
            project_id: "none".into(),
            task_group_id: task_id.to_owned(),
            priority: "\"lowest\"".into(),
            priority_rank: 0,
            retries: 5,
            retries_left: 5,
            deadline: 1,
            expires: 2,
            requires: "all-completed",
            dimensions: None,
            runs: "[]".into(),
            state: "pending",
            taken_until: None,
            deadline_due: Some(1),
            pending: true,
            definition: "{}".into(),
            routes: None,
            tags: None,
        }
    }

    fn update(task_id: &str) -> RowUpdate {
        RowUpdate {
            task_id: task_id.to_owned(),
            retries_left: 5,
            runs: "[]".into(),
            state: "completed",
            taken_until: None,
            deadline_due: None,
            place: "none",
            priority: "\"lowest\"".into(),
            priority_rank: 0,
            priority_changed: false,
        }
    }

    #[test]
    fn interleaved_creates_and_reports_join_one_batch_of_each() {
        let held = vec![
            HeldBack::Command("BEGIN"),
            HeldBack::Inserts(vec![insert("a")]),
            HeldBack::Updates(vec![update("b")]),
        ];
        assert_eq!(batch_for(&held, "c", true), Some(1), "an insert joins the inserts across updates of other rows");
        assert_eq!(batch_for(&held, "c", false), Some(2));
        let held = vec![
            HeldBack::Command("BEGIN"),
            HeldBack::Updates(vec![update("b")]),
            HeldBack::Inserts(vec![insert("a")]),
        ];
        assert_eq!(batch_for(&held, "c", false), Some(1), "an update joins the updates across inserts of other rows");
    }

    #[test]
    fn writes_of_one_row_keep_their_order() {
        let held = vec![HeldBack::Updates(vec![update("a")]), HeldBack::Inserts(vec![insert("b")])];
        assert_eq!(batch_for(&held, "a", false), None, "a second update of a row goes after the first");
        assert_eq!(batch_for(&held, "b", false), None, "an update of a new row goes after its insert");
        let held = vec![HeldBack::Inserts(vec![insert("a")]), HeldBack::Updates(vec![update("b")])];
        assert_eq!(batch_for(&held, "b", true), None);
        assert_eq!(batch_for(&held, "a", true), None);
    }

    #[test]
    fn a_run_of_inserts_updates_and_the_stage_is_one_statement() {
        let mut run = Fused::default();
        assert!(run.absorb(HeldBack::Inserts(vec![insert("a")])).is_none());
        assert!(run.absorb(HeldBack::Updates(vec![update("b")])).is_none());
        assert!(run.absorb(HeldBack::Stage(2, "[]".into(), 1)).is_none());
        assert!(run.absorb(HeldBack::Command("COMMIT")).is_some(), "a command is sent on its own");
        let mut run = Fused::default();
        assert!(run.absorb(HeldBack::Inserts(vec![insert("a")])).is_none());
        assert!(run.absorb(HeldBack::Updates(vec![update("a")])).is_some(), "an update of a row the run inserts");
        assert!(run.absorb(HeldBack::Inserts(vec![insert("c")])).is_some(), "a second batch of inserts");
        let mut run = Fused::default();
        assert!(run.absorb(HeldBack::Stage(1, "[]".into(), 2)).is_none());
        assert!(run.absorb(HeldBack::Updates(vec![update("b")])).is_some(), "nothing comes after the stage");
    }

    #[test]
    fn the_fused_statements_number_their_parameters_in_order() {
        assert_eq!(
            renumber("SELECT $1, $10 FROM t WHERE x = $2 AND y = '$'", 21),
            "SELECT $22, $31 FROM t WHERE x = $23 AND y = '$'"
        );
        let all = fused_sql(true, true, true);
        assert!(all.starts_with("WITH i AS (INSERT INTO tasks"), "{all}");
        assert!(all.contains("$21::text[]") && all.contains("$22::text[]") && all.contains("$31::bool[]"), "{all}");
        assert!(all.ends_with("SELECT nextval('outbox_ids'), $32, $33, $34, $35 FROM (SELECT count(*) FROM i) AS ci, (SELECT count(*) FROM u) AS cu"), "{all}");
        let updates = fused_sql(false, true, true);
        assert!(
            updates.contains("$1::text[]")
                && updates.contains("$10::bool[]")
                && updates.contains("$11, $12, $13, $14 FROM"),
            "{updates}"
        );
        assert_eq!(fused_sql(true, false, false), INSERT_MANY);
        assert_eq!(fused_sql(false, false, true), outbox::STAGE);
        assert!(
            fused_sql(true, true, false)
                .ends_with("SELECT * FROM (SELECT count(*) FROM i) AS ci, (SELECT count(*) FROM u) AS cu")
        );
    }

    #[test]
    fn nothing_moves_across_other_writes() {
        let held = vec![HeldBack::Inserts(vec![insert("a")]), HeldBack::Command("COMMIT")];
        assert_eq!(batch_for(&held, "c", true), None);
        assert_eq!(batch_for(&[], "c", true), None);
        assert_eq!(batch_for(&[HeldBack::Updates(vec![update("a")])], "c", true), None);
    }
}
