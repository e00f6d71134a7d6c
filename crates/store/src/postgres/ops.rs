//! The write operations on PostgreSQL, each run in one transaction.

use shoal_engine::definition::TaskDefinition;
use shoal_engine::event::{Effects, Event};
use shoal_engine::message;
use shoal_engine::priority::Priority;
use shoal_engine::status::{TaskState, TaskStatus};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::postgres::row::{
    GROUP_COLUMN_COUNT, GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row, task_group_from_row,
};
use crate::postgres::tx::{Params, PgTx};
use crate::sqlite::row::TaskRow;
use crate::sqlite::tx::json;
use crate::{Claim, ClaimRequest, GroupCancellation, StoreError, TaskCommand, TaskGroup};

/// How long a task group outlives its latest-expiring task (as in SQLite).
pub(crate) const GROUP_EXPIRY_SLACK_MS: i64 = 3600 * 1000;

pub(crate) async fn create_task(
    tx: &mut PgTx,
    definition: &TaskDefinition,
    task_id: TaskId,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let text = json(definition)?;
    let group = definition.task_group_id;
    let expires = definition.expires.millis() + GROUP_EXPIRY_SLACK_MS;
    // Taskcluster allows a task to depend on itself: it then waits for scheduleTask.
    let others: Vec<&str> =
        definition.dependencies.iter().filter(|&&required| required != task_id).map(TaskId::as_str).collect();
    let others_params: Vec<[&(dyn ToSql + Sync); 1]> = others.iter().map(|id| [id as _]).collect();
    // One round trip: the dependencies, then the group, in the order locks are taken
    // everywhere (tasks before their group). The dependencies are share-locked: one resolving
    // on another server now either committed before (its state is read here) or waits for
    // this transaction and then releases this task. The group is created or extended and its
    // row locked either way (two servers may race to create it; a group sealed by another
    // server's committed transaction is seen here). The group's statement also reads the
    // stored definition, if any (a plain read, so its place among the locks does not matter).
    // When the task already exists, the locks and the group's expiry (already this late)
    // change nothing.
    let upsert = format!(
        "WITH g AS (INSERT INTO task_groups AS g (task_group_id, scheduler_id, expires, sealed) \
         VALUES ($1, $2, $3, NULL) \
         ON CONFLICT (task_group_id) DO UPDATE SET expires = greatest(g.expires, excluded.expires) \
         RETURNING {GROUP_COLUMNS}) \
         SELECT g.*, (SELECT definition FROM tasks WHERE task_id = $4) FROM g"
    );
    let group_params: [&(dyn ToSql + Sync); 4] =
        [&group.as_str(), &definition.scheduler_id, &expires, &task_id.as_str()];
    let mut queries: Vec<(&str, Params<'_>)> = Vec::with_capacity(others.len() + 1);
    for params in &others_params {
        queries.push(("SELECT state, expires FROM tasks WHERE task_id = $1 FOR SHARE", params));
    }
    queries.push((&upsert, &group_params));
    let mut answers = tx.pipeline(&queries).await?;
    let group_rows = answers.pop().unwrap_or_default();
    let group_row = group_rows.first().ok_or_else(|| StoreError::Other("group upsert returned no row".into()))?;
    if let Some(existing) = group_row.try_get::<_, Option<&str>>(GROUP_COLUMN_COUNT)? {
        if existing != text {
            return Err(
                Rejection::Conflict(format!("task {task_id} already exists with a different definition")).into()
            );
        }
        return Ok(tx.load_existing(task_id).await?.task.status());
    }
    let answers = answers.into_iter();
    let satisfied = dependencies_satisfied(definition, task_id, answers)?;
    // A refusal rolls the extension back.
    task_group_from_row(group_row)?.admit(&definition.scheduler_id)?;
    for (required, done) in definition.dependencies.iter().zip(&satisfied) {
        tx.defer(
            "INSERT INTO task_dependencies (required_task_id, dependent_task_id, requires, satisfied) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            vec![
                Box::new(required.as_str().to_owned()),
                Box::new(task_id.as_str().to_owned()),
                Box::new(definition.requires.as_str()),
                Box::new(*done),
            ],
        )
        .await?;
    }
    tx.touch_queue(&definition.task_queue_id, now).await?;
    let mut row = TaskRow { task: Task::new(task_id, definition), pending_seq: None };
    tx.record(&row.task, vec![Event::Defined]);
    if satisfied.iter().all(|done| *done) {
        tx.step_new(&mut row, now, |task| task.schedule(now), &text).await?;
    } else {
        tx.insert_unscheduled(&row, &text).await?;
    }
    Ok(row.task.status())
}

/// Each dependency's state and expiry (`found`: one answer per dependency other than the
/// task itself), judged by the engine.
fn dependencies_satisfied(
    definition: &TaskDefinition,
    task_id: TaskId,
    found: impl Iterator<Item = Vec<Row>>,
) -> Result<Vec<bool>, StoreError> {
    let found = found
        .map(|rows| {
            rows.first()
                .map(|row| {
                    let (state, expires): (&str, i64) = (row.try_get(0)?, row.try_get(1)?);
                    Ok((TaskState::from_name(state).unwrap_or(TaskState::Unscheduled), Timestamp(expires)))
                })
                .transpose()
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(shoal_engine::group::dependencies_satisfied(definition, task_id, found)?)
}

pub(crate) async fn apply(
    tx: &mut PgTx,
    task_id: TaskId,
    command: &TaskCommand,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let mut row = tx.load_existing(task_id).await?;
    apply_loaded(tx, &mut row, command, now).await
}

/// Runs `command` on a task already loaded (and locked).
pub(crate) async fn apply_loaded(
    tx: &mut PgTx,
    row: &mut TaskRow,
    command: &TaskCommand,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let claim_timeout = tx.shared.claim_timeout_secs;
    tx.step(row, now, |task| match *command {
        TaskCommand::Schedule => task.schedule(now),
        TaskCommand::Reclaim { run_id } => task.reclaim(run_id, now, claim_timeout),
        TaskCommand::Resolve { run_id, resolution } => task.resolve(run_id, resolution, now),
        TaskCommand::Cancel => task.cancel(now),
        TaskCommand::Rerun => task.rerun(now),
        TaskCommand::ChangePriority(priority) => task.change_priority(priority, now),
    })
    .await?;
    Ok(row.task.status())
}

/// Claims pending runs in line order (priority, then arrival) whose dimensions the worker
/// matches; rows another server is claiming right now are skipped rather than waited for.
pub(crate) async fn claim_work(
    tx: &mut PgTx,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Vec<Claim>, StoreError> {
    tx.touch_queue(&request.task_queue_id, now).await?;
    let mut claims = Vec::with_capacity(request.count);
    if request.count == 0 {
        return Ok(claims);
    }
    let worker = json(&request.dimensions)?;
    let rows = tx.query(claimable(false), &[&request.task_queue_id, &(request.count as i64), &worker]).await?;
    for found in &rows {
        claims.extend(claim_found(tx, found, request, now, |_| true).await?);
    }
    Ok(claims)
}

/// Claims, for the worker of `request`, the run of a task a [`claimable`] query `found`;
/// none when the task has no run, `fresh` turns it down, or its run stopped being claimable
/// (its deadline passed: the deadline will resolve it).
pub(crate) async fn claim_found(
    tx: &mut PgTx,
    found: &Row,
    request: &ClaimRequest,
    now: Timestamp,
    fresh: impl FnOnce(TaskId) -> bool,
) -> Result<Option<Claim>, StoreError> {
    let row = task_from_row(found)?;
    let Some(run_id) = row.task.runs().last().map(|run| run.run_id) else { return Ok(None) };
    if !fresh(row.task.task_id) {
        return Ok(None);
    }
    let definition = raw_json(found, N_TASK_COLUMNS)?;
    let mark = tx.mark();
    match claim_loaded(tx, row, definition, run_id, &request.worker_group, &request.worker_id, now).await {
        Ok(claim) => Ok(Some(claim)),
        Err(StoreError::Rejected(_)) if tx.undo(&mark) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The pending tasks of queue `$1` whose dimensions the worker's (`$3`, JSON) match, at most
/// `$2`, in line order (priority, then arrival), locked; those other transactions hold are
/// skipped rather than waited for. `excluding`: not the tasks of `$4` either (those this
/// transaction locked already, which `SKIP LOCKED` would not skip).
pub(crate) fn claimable(excluding: bool) -> &'static str {
    static SQL: std::sync::LazyLock<[String; 2]> =
        std::sync::LazyLock::new(|| [claimable_sql(false), claimable_sql(true)]);
    &SQL[usize::from(excluding)]
}

fn claimable_sql(excluding: bool) -> String {
    // The dimension rule of `Dimensions::matched_by`, in SQL, so that matching work behind
    // any number of tasks this worker cannot run is found: every key the task names must be
    // among the worker's with at least one value the task accepts.
    format!(
        "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_queue_id = $1 AND state = 'pending' \
         AND (dimensions IS NULL OR NOT EXISTS ( \
             SELECT 1 FROM jsonb_each(dimensions) AS wanted(key, accepted) WHERE NOT EXISTS ( \
                 SELECT 1 FROM jsonb_array_elements_text($3::text::jsonb -> wanted.key) AS have(value) \
                 WHERE wanted.accepted ? have.value))) {}\
         ORDER BY priority_rank, pending_seq LIMIT $2 FOR UPDATE SKIP LOCKED",
        if excluding { "AND NOT task_id = ANY($4) " } else { "" }
    )
}

pub(crate) async fn claim_run(
    tx: &mut PgTx,
    task_id: TaskId,
    run_id: u32,
    worker_group: &str,
    worker_id: &str,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let (row, definition) = tx.load_with_definition(task_id).await?;
    claim_loaded(tx, row, definition, run_id, worker_group, worker_id, now).await
}

/// Claims run `run_id` of a task already loaded (and locked) with its definition.
async fn claim_loaded(
    tx: &mut PgTx,
    mut row: TaskRow,
    definition: Box<serde_json::value::RawValue>,
    run_id: u32,
    worker_group: &str,
    worker_id: &str,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let claim_timeout = tx.shared.claim_timeout_secs;
    tx.step(&mut row, now, |task| task.claim(run_id, worker_group, worker_id, now, claim_timeout)).await?;
    let taken_until = row.task.running_until().unwrap_or(now);
    Ok(Claim {
        status: row.task.status(),
        run_id,
        worker_group: worker_group.to_owned(),
        worker_id: worker_id.to_owned(),
        taken_until,
        task: definition,
    })
}

/// Fires claim expiries, then deadlines, that are due at `now`; rows another server is
/// firing are skipped, so each fires exactly once.
pub(crate) async fn fire_due(tx: &mut PgTx, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let (now_ms, limit) = (now.millis(), limit as i64);
    let mut due = tx
        .pipeline(&[
            (
                "SELECT task_id FROM tasks WHERE taken_until <= $1 ORDER BY taken_until LIMIT $2 \
                 FOR UPDATE SKIP LOCKED",
                &[&now_ms, &limit],
            ),
            (
                "SELECT task_id FROM tasks WHERE deadline_due <= $1 ORDER BY deadline_due LIMIT $2 \
                 FOR UPDATE SKIP LOCKED",
                &[&now_ms, &limit],
            ),
        ])
        .await?
        .into_iter()
        .map(|rows| rows.iter().filter_map(|row| TaskId::parse(row.get(0))).collect::<Vec<_>>());
    let (expired, late) = (due.next().unwrap_or_default(), due.next().unwrap_or_default());
    let n_fired = expired.len() + late.len();
    for task_id in expired {
        let mut row = tx.load_existing(task_id).await?;
        tx.step(&mut row, now, |task| Ok(task.expire_claim(now).unwrap_or_else(Effects::none))).await?;
    }
    for task_id in late {
        let mut row = tx.load_existing(task_id).await?;
        tx.step(&mut row, now, |task| Ok(task.exceed_deadline(now).unwrap_or_else(Effects::none))).await?;
    }
    Ok(n_fired)
}

pub(crate) async fn seal_task_group(tx: &mut PgTx, group: TaskId, now: Timestamp) -> Result<TaskGroup, StoreError> {
    let mut found = existing_group(tx, group).await?;
    if found.sealed.is_none() {
        tx.defer(
            "UPDATE task_groups SET sealed = $2 WHERE task_group_id = $1",
            vec![Box::new(group.as_str().to_owned()), Box::new(now.millis())],
        )
        .await?;
        found.sealed = Some(now);
        tx.publish(message::group_sealed(&found));
    }
    Ok(found)
}

async fn existing_group(tx: &mut PgTx, group: TaskId) -> Result<TaskGroup, StoreError> {
    tx.load_group(group).await?.ok_or_else(|| Rejection::NotFound(format!("task group {group} not found")).into())
}

async fn unresolved_members(tx: &mut PgTx, group: TaskId) -> Result<Vec<TaskId>, StoreError> {
    let rows = tx
        .query(
            "SELECT task_id FROM tasks WHERE task_group_id = $1 AND deadline_due IS NOT NULL ORDER BY task_id",
            &[&group.as_str()],
        )
        .await?;
    Ok(rows.iter().filter_map(|row| TaskId::parse(row.get(0))).collect())
}

pub(crate) async fn cancel_task_group(
    tx: &mut PgTx,
    group: TaskId,
    now: Timestamp,
) -> Result<GroupCancellation, StoreError> {
    let found = existing_group(tx, group).await?;
    if found.sealed.is_none() {
        return Err(Rejection::Conflict(format!("task group {group} must be sealed before it can be canceled")).into());
    }
    let size: i64 =
        tx.query_one("SELECT COUNT(*) FROM tasks WHERE task_group_id = $1", &[&group.as_str()]).await?.get(0);
    let mut task_ids = Vec::new();
    for task_id in unresolved_members(tx, group).await? {
        let mut row = tx.load_existing(task_id).await?;
        let n_events = tx.events.len();
        match tx.step(&mut row, now, |task| task.cancel(now)).await {
            Ok(()) if tx.events.len() > n_events => task_ids.push(task_id),
            Ok(()) | Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(GroupCancellation {
        task_group_id: group,
        task_group_size: size as u64,
        cancelled_count: task_ids.len() as u64,
        task_ids,
    })
}

pub(crate) async fn change_task_group_priority(
    tx: &mut PgTx,
    group: TaskId,
    priority: Priority,
    now: Timestamp,
) -> Result<Vec<TaskId>, StoreError> {
    let found = existing_group(tx, group).await?;
    let mut changed = Vec::new();
    for task_id in unresolved_members(tx, group).await? {
        let mut row = tx.load_existing(task_id).await?;
        let n_events = tx.events.len();
        match tx.step(&mut row, now, |task| task.change_priority(priority, now)).await {
            Ok(()) if tx.events.len() > n_events => changed.push(task_id),
            Ok(()) | Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    tx.publish(message::group_priority_changed(&found, priority, changed.len() as u64));
    Ok(changed)
}
