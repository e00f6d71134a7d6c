//! The write operations on PostgreSQL, each run in one transaction.

use shoal_engine::definition::TaskDefinition;
use shoal_engine::event::{Effects, Event};
use shoal_engine::message;
use shoal_engine::priority::Priority;
use shoal_engine::status::{TaskState, TaskStatus};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::postgres::row::{GROUP_COLUMNS, N_TASK_COLUMNS, TASK_COLUMNS, raw_json, task_from_row, task_group_from_row};
use crate::postgres::tx::PgTx;
use crate::sqlite::row::TaskRow;
use crate::sqlite::tx::json;
use crate::{Claim, ClaimRequest, GroupCancellation, StoreError, TaskCommand, TaskGroup};

/// How long a task group outlives its latest-expiring task (as in SQLite).
const GROUP_EXPIRY_SLACK_MS: i64 = 3600 * 1000;

pub(crate) fn create_task(
    tx: &mut PgTx<'_>,
    definition: &TaskDefinition,
    task_id: TaskId,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let text = json(definition)?;
    if let Some(existing) = tx.definition(task_id)? {
        if existing != text {
            return Err(
                Rejection::Conflict(format!("task {task_id} already exists with a different definition")).into()
            );
        }
        return Ok(tx.load_existing(task_id)?.task.status());
    }
    let satisfied = check_dependencies(tx, definition, task_id)?;
    ensure_group(tx, definition)?;
    let statement = tx.prepare(
        "INSERT INTO task_dependencies (required_task_id, dependent_task_id, requires, satisfied) \
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )?;
    for (required, done) in definition.dependencies.iter().zip(&satisfied) {
        tx.tx.execute(&statement, &[&required.as_str(), &task_id.as_str(), &definition.requires.as_str(), done])?;
    }
    tx.touch_queue(&definition.task_queue_id, now)?;
    let mut row = TaskRow { task: Task::new(task_id, definition), pending_seq: None };
    tx.record(&row.task, vec![Event::Defined]);
    if satisfied.iter().all(|done| *done) {
        tx.step_new(&mut row, now, |task| task.schedule(now), &text)?;
    } else {
        tx.insert_unscheduled(&row, &text)?;
    }
    Ok(row.task.status())
}

fn ensure_group(tx: &mut PgTx<'_>, definition: &TaskDefinition) -> Result<(), StoreError> {
    let group = definition.task_group_id;
    let expires = definition.expires.millis() + GROUP_EXPIRY_SLACK_MS;
    // Create it or extend it, locking its row either way (two servers may race to create
    // it; a group sealed by another server's committed transaction is seen here). A refusal
    // rolls the extension back.
    let sql = format!(
        "INSERT INTO task_groups AS g (task_group_id, scheduler_id, expires, sealed) VALUES ($1, $2, $3, NULL) \
         ON CONFLICT (task_group_id) DO UPDATE SET expires = greatest(g.expires, excluded.expires) \
         RETURNING {GROUP_COLUMNS}"
    );
    let statement = tx.prepare(&sql)?;
    let row = tx.tx.query_one(&statement, &[&group.as_str(), &definition.scheduler_id, &expires])?;
    task_group_from_row(&row)?.admit(&definition.scheduler_id)?;
    Ok(())
}

/// Checks that every dependency exists and outlives this task's deadline; says for each
/// whether it is already satisfied.
fn check_dependencies(
    tx: &mut PgTx<'_>,
    definition: &TaskDefinition,
    task_id: TaskId,
) -> Result<Vec<bool>, StoreError> {
    let mut satisfied = Vec::with_capacity(definition.dependencies.len());
    let mut missing = Vec::new();
    let mut expiring = Vec::new();
    // FOR SHARE: a dependency resolving on another server now either committed before
    // (its state is read here) or waits for this task's row and releases it after.
    let statement = tx.prepare("SELECT state, expires FROM tasks WHERE task_id = $1 FOR SHARE")?;
    for &required in &definition.dependencies {
        if required == task_id {
            // Taskcluster allows a task to depend on itself: it then waits for scheduleTask.
            satisfied.push(false);
            continue;
        }
        let Some(found) = tx.tx.query_opt(&statement, &[&required.as_str()])? else {
            missing.push(required.to_string());
            continue;
        };
        let (state, expires): (&str, i64) = (found.get(0), found.get(1));
        if expires < definition.deadline.millis() {
            expiring.push(required.to_string());
        }
        let state = TaskState::from_name(state).unwrap_or(TaskState::Unscheduled);
        satisfied.push(definition.requires.satisfied_by(state));
    }
    if let Some(rejection) = shoal_engine::group::dependency_rejection(&missing, &expiring) {
        return Err(rejection.into());
    }
    Ok(satisfied)
}

pub(crate) fn apply(
    tx: &mut PgTx<'_>,
    task_id: TaskId,
    command: &TaskCommand,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let mut row = tx.load_existing(task_id)?;
    let claim_timeout = tx.claim_timeout_secs;
    tx.step(&mut row, now, |task| match *command {
        TaskCommand::Schedule => task.schedule(now),
        TaskCommand::Reclaim { run_id } => task.reclaim(run_id, now, claim_timeout),
        TaskCommand::Resolve { run_id, resolution } => task.resolve(run_id, resolution, now),
        TaskCommand::Cancel => task.cancel(now),
        TaskCommand::Rerun => task.rerun(now),
        TaskCommand::ChangePriority(priority) => task.change_priority(priority, now),
    })?;
    Ok(row.task.status())
}

/// Claims pending runs in line order (priority, then arrival) whose dimensions the worker
/// matches; rows another server is claiming right now are skipped rather than waited for.
pub(crate) fn claim_work(tx: &mut PgTx<'_>, request: &ClaimRequest, now: Timestamp) -> Result<Vec<Claim>, StoreError> {
    tx.touch_queue(&request.task_queue_id, now)?;
    let mut claims = Vec::with_capacity(request.count);
    if request.count == 0 {
        return Ok(claims);
    }
    // The dimension rule of `Dimensions::matched_by`, in SQL, so that matching work behind
    // any number of tasks this worker cannot run is found: every key the task names must be
    // among the worker's with at least one value the task accepts.
    let sql = format!(
        "SELECT {TASK_COLUMNS}, definition FROM tasks WHERE task_queue_id = $1 AND state = 'pending' \
         AND (dimensions IS NULL OR NOT EXISTS ( \
             SELECT 1 FROM jsonb_each(dimensions) AS wanted(key, accepted) WHERE NOT EXISTS ( \
                 SELECT 1 FROM jsonb_array_elements_text($3::text::jsonb -> wanted.key) AS have(value) \
                 WHERE wanted.accepted ? have.value))) \
         ORDER BY priority_rank, pending_seq LIMIT $2 FOR UPDATE SKIP LOCKED"
    );
    let statement = tx.prepare(&sql)?;
    let worker = json(&request.dimensions)?;
    let rows = tx.tx.query(&statement, &[&request.task_queue_id, &(request.count as i64), &worker])?;
    for found in rows {
        let (row, definition) = (task_from_row(&found)?, raw_json(&found, N_TASK_COLUMNS)?);
        let Some(run_id) = row.task.runs().last().map(|run| run.run_id) else { continue };
        match claim_loaded(tx, row, definition, run_id, &request.worker_group, &request.worker_id, now) {
            Ok(claim) => claims.push(claim),
            // A run that stopped being claimable (deadline passed) is skipped; the deadline
            // will resolve it.
            Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(claims)
}

pub(crate) fn claim_run(
    tx: &mut PgTx<'_>,
    task_id: TaskId,
    run_id: u32,
    worker_group: &str,
    worker_id: &str,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let (row, definition) = tx.load_with_definition(task_id)?;
    claim_loaded(tx, row, definition, run_id, worker_group, worker_id, now)
}

/// Claims run `run_id` of a task already loaded (and locked) with its definition.
fn claim_loaded(
    tx: &mut PgTx<'_>,
    mut row: TaskRow,
    definition: Box<serde_json::value::RawValue>,
    run_id: u32,
    worker_group: &str,
    worker_id: &str,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let claim_timeout = tx.claim_timeout_secs;
    tx.step(&mut row, now, |task| task.claim(run_id, worker_group, worker_id, now, claim_timeout))?;
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
pub(crate) fn fire_due(tx: &mut PgTx<'_>, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let expired = due_ids(
        tx,
        "SELECT task_id FROM tasks WHERE taken_until <= $1 ORDER BY taken_until LIMIT $2 FOR UPDATE SKIP LOCKED",
        now,
        limit,
    )?;
    let late = due_ids(
        tx,
        "SELECT task_id FROM tasks WHERE deadline_due <= $1 ORDER BY deadline_due LIMIT $2 FOR UPDATE SKIP LOCKED",
        now,
        limit,
    )?;
    let n_fired = expired.len() + late.len();
    for task_id in expired {
        let mut row = tx.load_existing(task_id)?;
        tx.step(&mut row, now, |task| Ok(task.expire_claim(now).unwrap_or_else(Effects::none)))?;
    }
    for task_id in late {
        let mut row = tx.load_existing(task_id)?;
        tx.step(&mut row, now, |task| Ok(task.exceed_deadline(now).unwrap_or_else(Effects::none)))?;
    }
    Ok(n_fired)
}

fn due_ids(tx: &mut PgTx<'_>, sql: &str, now: Timestamp, limit: usize) -> Result<Vec<TaskId>, StoreError> {
    let statement = tx.prepare(sql)?;
    let rows = tx.tx.query(&statement, &[&now.millis(), &(limit as i64)])?;
    Ok(rows.iter().filter_map(|row| TaskId::parse(row.get(0))).collect())
}

pub(crate) fn seal_task_group(tx: &mut PgTx<'_>, group: TaskId, now: Timestamp) -> Result<TaskGroup, StoreError> {
    let mut found = existing_group(tx, group)?;
    if found.sealed.is_none() {
        let statement = tx.prepare("UPDATE task_groups SET sealed = $2 WHERE task_group_id = $1")?;
        tx.tx.execute(&statement, &[&group.as_str(), &now.millis()])?;
        found.sealed = Some(now);
        tx.publish(message::group_sealed(&found));
    }
    Ok(found)
}

fn existing_group(tx: &mut PgTx<'_>, group: TaskId) -> Result<TaskGroup, StoreError> {
    tx.load_group(group)?.ok_or_else(|| Rejection::NotFound(format!("task group {group} not found")).into())
}

fn unresolved_members(tx: &mut PgTx<'_>, group: TaskId) -> Result<Vec<TaskId>, StoreError> {
    let statement = tx
        .tx
        .prepare("SELECT task_id FROM tasks WHERE task_group_id = $1 AND deadline_due IS NOT NULL ORDER BY task_id")?;
    let rows = tx.tx.query(&statement, &[&group.as_str()])?;
    Ok(rows.iter().filter_map(|row| TaskId::parse(row.get(0))).collect())
}

pub(crate) fn cancel_task_group(
    tx: &mut PgTx<'_>,
    group: TaskId,
    now: Timestamp,
) -> Result<GroupCancellation, StoreError> {
    let found = existing_group(tx, group)?;
    if found.sealed.is_none() {
        return Err(Rejection::Conflict(format!("task group {group} must be sealed before it can be canceled")).into());
    }
    let statement = tx.prepare("SELECT COUNT(*) FROM tasks WHERE task_group_id = $1")?;
    let size: i64 = tx.tx.query_one(&statement, &[&group.as_str()])?.get(0);
    let mut task_ids = Vec::new();
    for task_id in unresolved_members(tx, group)? {
        let mut row = tx.load_existing(task_id)?;
        let n_events = tx.events.len();
        match tx.step(&mut row, now, |task| task.cancel(now)) {
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

pub(crate) fn change_task_group_priority(
    tx: &mut PgTx<'_>,
    group: TaskId,
    priority: Priority,
    now: Timestamp,
) -> Result<Vec<TaskId>, StoreError> {
    let found = existing_group(tx, group)?;
    let mut changed = Vec::new();
    for task_id in unresolved_members(tx, group)? {
        let mut row = tx.load_existing(task_id)?;
        let n_events = tx.events.len();
        match tx.step(&mut row, now, |task| task.change_priority(priority, now)) {
            Ok(()) if tx.events.len() > n_events => changed.push(task_id),
            Ok(()) | Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    tx.publish(message::group_priority_changed(&found, priority, changed.len() as u64));
    Ok(changed)
}
