//! The write operations, each run by the writer thread inside one transaction.

use rusqlite::{OptionalExtension, params};
use shoal_engine::definition::TaskDefinition;
use shoal_engine::event::{Effects, Event};
use shoal_engine::message;
use shoal_engine::priority::Priority;
use shoal_engine::status::{TaskState, TaskStatus};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::sqlite::row::{self, TaskRow};
use crate::sqlite::tx::{Tx, json};
use crate::{Claim, ClaimRequest, GroupCancellation, StoreError, TaskCommand, TaskGroup};

/// How long a task group outlives its latest-expiring task.
const GROUP_EXPIRY_SLACK_MS: i64 = 3600 * 1000;

pub(crate) fn create_task(
    tx: &mut Tx<'_>,
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
    // Every check that can refuse runs before the first write: the writer commits a batch
    // without per-operation savepoints, so a refusal must leave nothing behind.
    let satisfied = check_dependencies(tx, definition, task_id)?;
    ensure_group(tx, definition)?;
    {
        let mut stmt = tx.conn.prepare_cached(
            "INSERT INTO task_dependencies (required_task_id, dependent_task_id, requires, satisfied) \
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (required, done) in definition.dependencies.iter().zip(&satisfied) {
            stmt.execute(params![required.as_str(), task_id.as_str(), definition.requires.as_str(), done])?;
        }
    }
    tx.touch_queue(&definition.task_queue_id, now)?;
    let mut row = TaskRow { task: Task::new(task_id, definition), pending_seq: None };
    tx.record(&row.task, vec![Event::Defined])?;
    if satisfied.iter().all(|done| *done) {
        tx.step_new(&mut row, now, |task| task.schedule(now), &text)?;
    } else {
        tx.insert(&row, &text)?;
    }
    Ok(row.task.status())
}

fn ensure_group(tx: &mut Tx<'_>, definition: &TaskDefinition) -> Result<(), StoreError> {
    let group = definition.task_group_id;
    let expires = definition.expires.millis() + GROUP_EXPIRY_SLACK_MS;
    let existing = load_group(tx, group)?;
    match existing {
        None => {
            tx.conn
                .prepare_cached(
                    "INSERT INTO task_groups (task_group_id, scheduler_id, expires, sealed) VALUES (?1, ?2, ?3, NULL)",
                )?
                .execute(params![group.as_str(), definition.scheduler_id, expires])?;
        }
        Some(found) => {
            found.admit(&definition.scheduler_id)?;
            if found.expires.millis() < expires {
                tx.conn
                    .prepare_cached("UPDATE task_groups SET expires = ?2 WHERE task_group_id = ?1")?
                    .execute(params![group.as_str(), expires])?;
            }
        }
    }
    Ok(())
}

pub(crate) fn load_group(tx: &Tx<'_>, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
    row::task_group(tx.conn, group)
}

/// Checks that every dependency exists and outlives this task's deadline; says for each
/// whether it is already satisfied.
fn check_dependencies(tx: &Tx<'_>, definition: &TaskDefinition, task_id: TaskId) -> Result<Vec<bool>, StoreError> {
    let mut stmt = tx.conn.prepare_cached("SELECT state, expires FROM tasks WHERE task_id = ?1")?;
    let mut found = Vec::with_capacity(definition.dependencies.len());
    for required in definition.dependencies.iter().filter(|&&required| required != task_id) {
        let row: Option<(String, i64)> =
            stmt.query_row([required.as_str()], |row| Ok((row.get(0)?, row.get(1)?))).optional()?;
        found.push(row.map(|(state, expires)| {
            (TaskState::from_name(&state).unwrap_or(TaskState::Unscheduled), Timestamp(expires))
        }));
    }
    Ok(shoal_engine::group::dependencies_satisfied(definition, task_id, found)?)
}

pub(crate) fn apply(
    tx: &mut Tx<'_>,
    task_id: TaskId,
    command: &TaskCommand,
    now: Timestamp,
) -> Result<TaskStatus, StoreError> {
    let mut row = tx.load_existing(task_id)?;
    let claim_timeout = tx.state.claim_timeout_secs;
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

pub(crate) fn claim_work(tx: &mut Tx<'_>, request: &ClaimRequest, now: Timestamp) -> Result<Vec<Claim>, StoreError> {
    tx.touch_queue(&request.task_queue_id, now)?;
    let candidates = tx.state.index.pop_matching(&request.task_queue_id, &request.dimensions, request.count);
    let mut claims = Vec::with_capacity(candidates.len());
    for (_, pending) in candidates {
        match claim_run(tx, pending.task_id, pending.run_id, &request.worker_group, &request.worker_id, now) {
            Ok(claim) => claims.push(claim),
            // A run that stopped being claimable (deadline passed) is simply skipped; the
            // deadline will resolve it.
            Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(claims)
}

pub(crate) fn claim_run(
    tx: &mut Tx<'_>,
    task_id: TaskId,
    run_id: u32,
    worker_group: &str,
    worker_id: &str,
    now: Timestamp,
) -> Result<Claim, StoreError> {
    let (mut row, definition) = tx.load_with_definition(task_id)?;
    let claim_timeout = tx.state.claim_timeout_secs;
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

/// Fires claim expiries, then deadlines, that are due at `now`.
pub(crate) fn fire_due(tx: &mut Tx<'_>, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let expired =
        due_ids(tx, "SELECT task_id FROM tasks WHERE taken_until <= ?1 ORDER BY taken_until LIMIT ?2", now, limit)?;
    let late =
        due_ids(tx, "SELECT task_id FROM tasks WHERE deadline_due <= ?1 ORDER BY deadline_due LIMIT ?2", now, limit)?;
    let n_fired = expired.len() + late.len();
    for task_id in expired {
        let mut row = tx.load_existing(task_id)?;
        // An out-of-date due time (cannot happen while rows are saved by `step`) is rewritten.
        tx.step(&mut row, now, |task| Ok(task.expire_claim(now).unwrap_or_else(Effects::none)))?;
    }
    for task_id in late {
        let mut row = tx.load_existing(task_id)?;
        tx.step(&mut row, now, |task| Ok(task.exceed_deadline(now).unwrap_or_else(Effects::none)))?;
    }
    Ok(n_fired)
}

fn due_ids(tx: &Tx<'_>, sql: &str, now: Timestamp, limit: usize) -> Result<Vec<TaskId>, StoreError> {
    let mut stmt = tx.conn.prepare_cached(sql)?;
    let ids: Vec<String> =
        stmt.query_map(params![now.millis(), limit as i64], |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids.iter().filter_map(|id| TaskId::parse(id)).collect())
}

pub(crate) fn seal_task_group(tx: &mut Tx<'_>, group: TaskId, now: Timestamp) -> Result<TaskGroup, StoreError> {
    let mut found = existing_group(tx, group)?;
    if found.sealed.is_none() {
        tx.conn
            .prepare_cached("UPDATE task_groups SET sealed = ?2 WHERE task_group_id = ?1")?
            .execute(params![group.as_str(), now.millis()])?;
        found.sealed = Some(now);
        tx.publish(message::group_sealed(&found));
    }
    Ok(found)
}

fn existing_group(tx: &Tx<'_>, group: TaskId) -> Result<TaskGroup, StoreError> {
    load_group(tx, group)?.ok_or_else(|| Rejection::NotFound(format!("task group {group} not found")).into())
}

fn unresolved_members(tx: &Tx<'_>, group: TaskId) -> Result<Vec<TaskId>, StoreError> {
    let mut stmt = tx.conn.prepare_cached(
        "SELECT task_id FROM tasks WHERE task_group_id = ?1 AND deadline_due IS NOT NULL ORDER BY task_id",
    )?;
    let ids: Vec<String> = stmt.query_map([group.as_str()], |row| row.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids.iter().filter_map(|id| TaskId::parse(id)).collect())
}

pub(crate) fn cancel_task_group(
    tx: &mut Tx<'_>,
    group: TaskId,
    now: Timestamp,
) -> Result<GroupCancellation, StoreError> {
    let found = existing_group(tx, group)?;
    if found.sealed.is_none() {
        return Err(Rejection::Conflict(format!("task group {group} must be sealed before it can be canceled")).into());
    }
    let size: i64 = tx
        .conn
        .prepare_cached("SELECT COUNT(*) FROM tasks WHERE task_group_id = ?1")?
        .query_row([group.as_str()], |row| row.get(0))?;
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
    tx: &mut Tx<'_>,
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
