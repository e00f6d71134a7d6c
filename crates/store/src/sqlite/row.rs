//! Turning `tasks` rows into engine tasks and back.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::value::RawValue;
use shoal_engine::definition::Requires;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::group::GROUP_EXPIRY_SLACK_MS;
use shoal_engine::status::Run;
use shoal_engine::task::{Task, TaskMeta};
use shoal_engine::{TaskId, Timestamp};

use crate::row::{TaskRow, corrupt};
use crate::{StoreError, TaskGroup};

/// The columns `task_from_row` reads, in order; queries append their own after these.
pub(crate) const TASK_COLUMNS: &str = "task_id, task_queue_id, scheduler_id, project_id, task_group_id, \
     priority, retries, retries_left, deadline, expires, requires, dimensions, runs, pending_seq, routes, tags, \
     slices, dedup";

/// Number of columns in [`TASK_COLUMNS`].
pub(crate) const N_TASK_COLUMNS: usize = 18;

pub(crate) fn task_from_row(row: &Row<'_>) -> Result<TaskRow, StoreError> {
    let text = |idx: usize| -> Result<String, StoreError> { row.get::<_, String>(idx).map_err(StoreError::from) };
    let id = |idx: usize| -> Result<TaskId, StoreError> {
        let raw = text(idx)?;
        TaskId::parse(&raw).ok_or_else(|| corrupt(format!("bad task id {raw}")))
    };
    let task_id = id(0)?;
    let priority = serde_json::from_str(&text(5)?).map_err(corrupt)?;
    let requires = Requires::from_name(&text(10)?).ok_or_else(|| corrupt("bad requires"))?;
    let dimensions: Dimensions = match row.get::<_, Option<String>>(11)? {
        None => Dimensions::default(),
        Some(json) => serde_json::from_str(&json).map_err(corrupt)?,
    };
    let runs: Vec<Run> = serde_json::from_str(&text(12)?).map_err(corrupt)?;
    let meta = TaskMeta {
        task_queue_id: text(1)?,
        scheduler_id: text(2)?,
        project_id: text(3)?,
        task_group_id: id(4)?,
        priority,
        retries: row.get(6)?,
        deadline: Timestamp(row.get(8)?),
        expires: Timestamp(row.get(9)?),
        requires,
        dimensions,
        routes: optional_json(row, 14)?,
        tags: optional_json(row, 15)?,
        slices: optional_json(row, 16)?,
        dedup_hash: row.get(17)?,
    };
    let retries_left: u32 = row.get(7)?;
    let pending_seq: Option<i64> = row.get(13)?;
    Ok(TaskRow {
        task: Task::from_parts(task_id, meta, retries_left, runs),
        pending_seq: pending_seq.map(|s| s as u64),
    })
}

/// Reads a JSON column that is NULL for the empty value.
fn optional_json<T: serde::de::DeserializeOwned + Default>(row: &Row<'_>, idx: usize) -> Result<T, StoreError> {
    match row.get_ref(idx)?.as_str_or_null().map_err(rusqlite::Error::from)? {
        None => Ok(T::default()),
        Some(json) => serde_json::from_str(json).map_err(corrupt),
    }
}

/// Reads a stored JSON text column as raw JSON, passed through without re-encoding.
pub(crate) fn raw_json(row: &Row<'_>, idx: usize) -> Result<Box<RawValue>, StoreError> {
    let text: String = row.get(idx)?;
    RawValue::from_string(text).map_err(corrupt)
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> StoreError {
        let code = match &err {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.code),
            _ => None,
        };
        match code {
            // Another connection holds the lock (the checkpointer, a reader's recovery):
            // retrying can succeed.
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Conflict(err.to_string())
            }
            Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::DiskFull) => {
                StoreError::Unavailable(err.to_string())
            }
            _ => StoreError::Other(err.to_string()),
        }
    }
}

/// Group `?1` as the columns `scheduler_id, expires, sealed`: its row, or else the group its
/// namesake's row implies (schema 14), whose expiry is the namesake's plus `?2` (the engine's
/// [`GROUP_EXPIRY_SLACK_MS`]). At most one row.
macro_rules! group_by_id {
    () => {
        "SELECT scheduler_id, expires, sealed FROM task_groups WHERE task_group_id = ?1 \
         UNION ALL SELECT scheduler_id, expires + ?2, NULL FROM tasks WHERE task_id = ?1 AND task_group_id = ?1 \
         AND NOT EXISTS (SELECT 1 FROM task_groups WHERE task_group_id = ?1)"
    };
}
pub(crate) use group_by_id;

/// One task group, or `None`.
pub(crate) fn task_group(conn: &Connection, group: TaskId) -> Result<Option<TaskGroup>, StoreError> {
    let mut stmt = conn.prepare_cached(group_by_id!())?;
    Ok(stmt
        .query_row(params![group.as_str(), GROUP_EXPIRY_SLACK_MS], |row| task_group_from_row(group, row))
        .optional()?)
}

/// Writes the row of group `group` its namesake implies, if it has none: before a change
/// the namesake's row cannot carry.
pub(crate) fn settle_group(conn: &Connection, group: TaskId) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO task_groups (task_group_id, scheduler_id, expires, sealed, created) \
         SELECT task_id, scheduler_id, expires + ?2, NULL, coalesce(created, 0) FROM tasks \
         WHERE task_id = ?1 AND task_group_id = ?1 ON CONFLICT DO NOTHING",
    )?
    .execute(params![group.as_str(), GROUP_EXPIRY_SLACK_MS])?;
    Ok(())
}

/// A task group from the columns `scheduler_id, expires, sealed`.
pub(crate) fn task_group_from_row(group: TaskId, row: &Row<'_>) -> rusqlite::Result<TaskGroup> {
    Ok(TaskGroup {
        task_group_id: group,
        scheduler_id: row.get(0)?,
        expires: Timestamp(row.get(1)?),
        sealed: row.get::<_, Option<i64>>(2)?.map(Timestamp),
    })
}
