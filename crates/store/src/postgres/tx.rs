//! A PostgreSQL write transaction: what the operations read and write through
//! (`write.rs` implements [`crate::ops::WriteTx`] over it, `domains.rs` the per-domain traits).
//!
//! Unlike SQLite's single writer, several servers write at once, so every row an operation
//! is going to change is locked when read (`FOR UPDATE`), and a task group's row is locked
//! before deciding it has been resolved. Statements are pipelined (`pipeline.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::Object;
use serde_json::value::RawValue;
use shoal_engine::message::Message;
use shoal_engine::status::TaskState;
use shoal_engine::worker::{TaskRun, Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::ops::index::Offer;
use crate::ops::{self, Consequences, NewTask, Place, Waiting};
use crate::outbox::format::encode;
use crate::postgres::gather::Gathered;
use crate::postgres::outbox;
use crate::postgres::pipeline::{Fused, HeldBack, Lowered, Param, Params, Pending, batch_for, fused_sql, in_order};
use crate::postgres::row::{GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row, task_group_from_row};
use crate::postgres::task_rows::{NewRow, RowUpdate, UPDATE_ONE};
use crate::row::TaskRow;
use crate::row::unresolved;
use crate::{StoreError, TaskEvent, TaskGroup};

/// What every write transaction of one server shares: settings, and what it remembers.
pub(crate) struct TxShared {
    /// The rules' settings.
    pub(crate) settings: crate::StoreSettings,
    /// When this server last recorded each queue as active (saves a read per operation).
    pub(crate) queues_touched: std::sync::Mutex<ops::QueueRecords>,
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
    offers: usize,
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
    /// While a gathering's operations run: what its first round trip found, which serves
    /// their reads (`gather/served.rs`).
    pub(crate) gathered: Option<Box<Gathered>>,
    /// Queues whose activity this transaction took it upon itself to record
    /// ([`PgTx::touch_queue`]), with the time it put in the server's map.
    touched: Vec<(String, i64)>,
    /// Claims appended by [`PgTx::append_worker_claims`], written with the commit.
    pub(crate) claims: Vec<(WorkerKey, TaskRun, Timestamp)>,
    /// Entries offered to the Index, settled together just before the commit
    /// (`documents.rs`): a gathering's completions read their namespaces in one round trip.
    pub(crate) index_offers: Vec<Offer>,
    /// The record (and numbered events) each claiming worker gets if it has none yet.
    pub(crate) first_records: BTreeMap<WorkerKey, (Worker, Vec<(u64, WorkerEvent)>)>,
    /// The numbers of the appended claims folded into each worker record read with its lock,
    /// deleted when the record is stored.
    pub(crate) claims_folded: HashMap<WorkerKey, Vec<i64>>,
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
    /// Each task's waiting dependents, in id order.
    pub(crate) waiting: HashMap<TaskId, Vec<Waiting>>,
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
            gathered: None,
            touched: Vec::new(),
            claims: Vec::new(),
            index_offers: Vec::new(),
            first_records: BTreeMap::new(),
            claims_folded: HashMap::new(),
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
            offers: self.index_offers.len(),
        }
    }

    /// Forgets the events and messages recorded since `mark`. False when a write was issued
    /// since: only a rollback takes that back.
    pub(crate) fn undo(&mut self, mark: &Mark) -> bool {
        self.events.truncate(mark.events);
        self.messages.truncate(mark.messages);
        self.index_offers.truncate(mark.offers);
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
        self.query_opt(sql, params).await?.ok_or_else(|| StoreError::Corrupt(format!("no row from {sql}")))
    }

    /// Stages the messages and commits, in one round trip with what was held back.
    pub(crate) async fn commit(&mut self) -> Result<(), StoreError> {
        if !self.index_offers.is_empty() {
            // One read for every entry the transaction's completions offered; the writes go
            // out with the commit, each kind's rows in key order.
            let offers = std::mem::take(&mut self.index_offers);
            ops::index::settle(self, offers).await?;
        }
        if !self.begun && self.held_back.len() == 1 {
            // Nothing was ever sent: there is nothing to commit.
            self.held_back.clear();
            return Ok(());
        }
        // The claims go after the stage, which goes out in one statement with the task rows
        // written before it: between them, they would part the two.
        let stage_at = self.held_back.len();
        if !self.claims.is_empty() {
            self.write_claims().await?;
        }
        self.staged = !self.messages.is_empty();
        let tag = self.staged.then(|| {
            let (count, encoded) = (self.messages.len() as i32, encode(self.messages.iter()));
            let tag = self.shared.staged.keep(std::mem::take(&mut self.messages));
            self.held_back.insert(stage_at, HeldBack::Stage(count, encoded, tag));
            self.writes += 1;
            tag
        });
        self.held_back.push(HeldBack::Command("COMMIT"));
        self.committing = true;
        let result = self.pipeline(&[]).await.map(|_| ());
        let refused =
            matches!(&result, Err(err) if !matches!(err, StoreError::Unavailable(_) | StoreError::Rejected(_)));
        if let (true, Some(tag)) = (refused, tag) {
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

    /// Loads a task and locks its row until the commit.
    pub(crate) async fn lock_task(&mut self, task_id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1 FOR UPDATE");
        self.query_opt(&sql, &[&task_id.as_str()]).await?.map(|row| task_from_row(&row)).transpose()
    }

    /// Loads and locks a task together with its stored definition (claims return both).
    pub(crate) async fn lock_task_with_definition(
        &mut self,
        task_id: TaskId,
    ) -> Result<Option<(TaskRow, Box<RawValue>)>, StoreError> {
        let sql = format!("SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_id = $1 FOR UPDATE");
        match self.query_opt(&sql, &[&task_id.as_str()]).await? {
            Some(row) => Ok(Some((task_from_row(&row)?, raw_json(&row, N_TASK_COLUMNS)?))),
            None => Ok(None),
        }
    }

    /// Loads a task group and locks its row until the commit.
    pub(crate) async fn lock_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1 FOR UPDATE");
        self.query_opt(&sql, &[&group.as_str()]).await?.map(|row| task_group_from_row(&row)).transpose()
    }

    /// Inserts a new task row as it stands (the caller has already run its first transition);
    /// held back until the next statement, together with the inserts right before it.
    pub(crate) fn insert(&mut self, row: &TaskRow, new: &NewTask<'_>) -> Result<(), StoreError> {
        let new = NewRow::new(row, new)?;
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

    /// What a resolution entails: whether the task's group has no unresolved task left, and
    /// the dependents waiting on it; while gathering, nothing yet (`resolve_gathered` asks
    /// for all the gathering's resolutions at once).
    ///
    /// The questions go out in one round trip (with the task's held-back UPDATE before them).
    /// The group's row is locked before its tasks are counted: that serializes the
    /// resolutions of a group's last tasks across servers, since the count (READ COMMITTED
    /// takes a new snapshot per statement) then sees every resolution committed before the
    /// lock was granted. Releasing the dependents after the count changes nothing in it: a
    /// dependent is unresolved whether scheduled or not.
    pub(crate) async fn resolution(
        &mut self,
        task_id: TaskId,
        group: TaskId,
        state: TaskState,
        now: Timestamp,
    ) -> Result<Option<Consequences>, StoreError> {
        if let Some(resolutions) = &mut self.resolutions {
            resolutions.push(Resolution { task_id, group, state, now });
            return Ok(None);
        }
        let lock_group = format!("SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = $1 FOR UPDATE");
        let (task, group) = (task_id.as_str(), group.as_str());
        // The count and the waiting dependents in one statement, after the lock: one row
        // per waiting dependent, or one row of NULLs when none waits.
        let mut answers = self
            .pipeline(&[
                (&lock_group, &[&group]),
                (
                    concat!(
                        "SELECT EXISTS (SELECT 1 FROM tasks WHERE task_group_id = $1 AND ",
                        unresolved!(),
                        "), d.dependent_task_id, d.requires FROM (SELECT 1) AS one LEFT JOIN task_dependencies d \
                         ON d.required_task_id = $2 AND NOT d.satisfied ORDER BY d.dependent_task_id"
                    ),
                    &[&group, &task],
                ),
            ])
            .await?
            .into_iter();
        let (found, after) = (answers.next().unwrap_or_default(), answers.next().unwrap_or_default());
        let unresolved = after.first().map(|row| row.try_get::<_, bool>(0)).transpose()?.unwrap_or(false);
        let group_resolved = match found.first() {
            Some(found) if !unresolved => Some(task_group_from_row(found)?),
            _ => None,
        };
        let mut waiting = Vec::new();
        for row in &after {
            if let (Some(dependent), Some(requires)) =
                (row.try_get::<_, Option<&str>>(1)?, row.try_get::<_, Option<&str>>(2)?)
            {
                waiting.push(Waiting::parse(dependent, requires)?);
            }
        }
        Ok(Some(Consequences { group_resolved, waiting }))
    }

    /// From now on, what a resolution entails (its group's resolution, its dependents'
    /// release) waits for [`PgTx::resolve_gathered`], which asks for all of them at once.
    /// Ends serving a gathering's operations from its first round trip: the queues they
    /// recorded as active are written, in id order. Answers what was found, as the writes
    /// left it.
    pub(crate) async fn end_gathering(&mut self) -> Result<Box<Gathered>, StoreError> {
        let mut gathered = self.gathered.take().ok_or_else(|| StoreError::Internal("no gathering to end".into()))?;
        let mut touched = std::mem::take(&mut gathered.touched);
        touched.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        touched.dedup_by(|(a, _), (b, _)| a == b);
        for (queue, now) in touched {
            self.record_queue(&queue, now).await?;
        }
        Ok(gathered)
    }

    pub(crate) fn gather_resolutions(&mut self) {
        self.resolutions = Some(Vec::new());
    }

    /// Does what the gathered resolutions entail, as [`PgTx::resolution`] tells for one: each
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
        let touched: HashSet<TaskId> = resolutions.iter().map(|resolution| resolution.group).collect();
        let (emptied, mut waiting) = match known {
            Some(known) if resolutions.iter().all(|resolution| known.covers.contains(&resolution.task_id)) => {
                let emptied: Vec<TaskGroup> = known
                    .groups
                    .into_iter()
                    .filter(|group| {
                        touched.contains(&group.task_group_id) && !known.unresolved.contains(&group.task_group_id)
                    })
                    .collect();
                (emptied, known.waiting)
            }
            _ => self.ask_consequences(&resolutions, &touched).await?,
        };
        let resolved = resolutions
            .iter()
            .map(|resolution| {
                let waiting = waiting.remove(&resolution.task_id).unwrap_or_default();
                (resolution.task_id, resolution.state, resolution.now, waiting)
            })
            .collect();
        ops::settle_resolutions(self, &emptied, resolved).await
    }

    /// What the gathered resolutions entail, asked in one round trip: the groups they left
    /// with no unresolved task (every group locked, in id order, before any is counted), and
    /// who waits on each resolved task.
    async fn ask_consequences(
        &mut self,
        resolutions: &[Resolution],
        touched: &HashSet<TaskId>,
    ) -> Result<(Vec<TaskGroup>, HashMap<TaskId, Vec<Waiting>>), StoreError> {
        let mut groups: Vec<&str> = touched.iter().map(TaskId::as_str).collect();
        groups.sort_unstable();
        let tasks: Vec<&str> = resolutions.iter().map(|resolution| resolution.task_id.as_str()).collect();
        let lock_groups = format!(
            "SELECT {GROUP_COLUMNS} FROM task_groups WHERE task_group_id = ANY($1) ORDER BY task_group_id FOR UPDATE"
        );
        let mut answers = self
            .pipeline(&[
                (&lock_groups, &[&groups]),
                (
                    concat!(
                        "SELECT g.id FROM unnest($1::text[]) AS g(id) WHERE NOT EXISTS \
                         (SELECT 1 FROM tasks WHERE task_group_id = g.id AND ",
                        unresolved!(),
                        ")"
                    ),
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
        let (locked, resolved, after) = (
            answers.next().unwrap_or_default(),
            answers.next().unwrap_or_default(),
            answers.next().unwrap_or_default(),
        );
        let resolved: HashSet<&str> = resolved.iter().map(|row| row.get(0)).collect();
        let mut emptied = Vec::new();
        for row in &locked {
            let group = task_group_from_row(row)?;
            if resolved.contains(group.task_group_id.as_str()) {
                emptied.push(group);
            }
        }
        let mut waiting: HashMap<TaskId, Vec<Waiting>> = HashMap::new();
        for row in &after {
            let (required, dependent, requires): (&str, &str, &str) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            let required = TaskId::parse(required).ok_or_else(|| StoreError::Corrupt(format!("bad id {required}")))?;
            waiting.entry(required).or_default().push(Waiting::parse(dependent, requires)?);
        }
        Ok((emptied, waiting))
    }

    /// Writes the row. A new pending run draws its place in line, which the row keeps;
    /// otherwise the UPDATE is held back, together with the updates of other tasks right
    /// before it.
    pub(crate) async fn save(
        &mut self,
        row: &mut TaskRow,
        place: Place,
        priority_changed: bool,
        moved: bool,
    ) -> Result<(), StoreError> {
        let update = RowUpdate::new(&row.task, place, priority_changed, moved)?;
        self.writes += 1;
        match place {
            Place::Back => {
                let params = update.params();
                let params: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|param| &**param as &(dyn ToSql + Sync)).collect();
                let updated = self.query_one(&UPDATE_ONE, &params).await?;
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

    /// Records that a queue was used, at most once per interval per queue and server.
    pub(crate) async fn record_queue(&mut self, task_queue_id: &str, now: Timestamp) -> Result<(), StoreError> {
        {
            // Taken before reading, under the map's lock: of the server's transactions that
            // find the record stale at once, one writes it. When each of them wrote it, they
            // queued on the row's lock, each waiting for the one before it to commit
            // (`pg_stat_statements`: 26 upserts of ~89 ms each at a 64-worker run's start).
            let mut touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if touched.recent(task_queue_id, now) {
                return Ok(());
            }
            touched.insert(task_queue_id, now.millis());
        }
        self.touched.push((task_queue_id.to_owned(), now.millis()));
        // Read first: an upsert locks the queue's row even when it changes nothing, so another
        // server's recent record is left alone.
        let last: Option<i64> = self
            .query_opt("SELECT last_date_active FROM task_queues WHERE task_queue_id = $1", &[&task_queue_id])
            .await?
            .map(|row| row.get(0));
        if let Some(last) = last.filter(|&last| ops::queue_recorded_recently(last, now)) {
            self.touched.pop();
            let mut touched = self.shared.queues_touched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            touched.insert(task_queue_id, last);
            return Ok(());
        }
        self.defer(
            "INSERT INTO task_queues (task_queue_id, expires, last_date_active, description, stability) \
             VALUES ($1, $2, $3, '', 'experimental') \
             ON CONFLICT (task_queue_id) DO UPDATE SET expires = excluded.expires, \
             last_date_active = excluded.last_date_active",
            vec![
                Box::new(task_queue_id.to_owned()),
                Box::new(now.millis() + self.shared.settings.queue_retention_ms()),
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
            touched.forget(&queue, at);
        }
    }
}
