//! Turning `tasks` rows into engine tasks and back.

use std::sync::LazyLock;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::value::RawValue;
use shoal_engine::group::GROUP_EXPIRY_SLACK_MS;
use shoal_engine::{TaskId, Timestamp};

use crate::row::{
    Backends, READ, SelectList, TASK_COLUMNS as TASK_COLUMNS_ALL, TaskRow, corrupt, select_list, step_columns,
    task_from_cells,
};
use crate::{StoreError, TaskGroup};

/// The columns `task_from_row` reads, in order; queries append their own after these.
pub(crate) static TASK_COLUMNS: SelectList = SelectList::new(|| select_list(Backends::Sqlite, ""));

/// Number of columns in [`TASK_COLUMNS`].
pub(crate) const N_TASK_COLUMNS: usize = READ;

/// A task from a row that starts with [`TASK_COLUMNS`].
pub(crate) fn task_from_row(row: &Row<'_>) -> Result<TaskRow, StoreError> {
    task_from_cells(row)
}

/// Inserts a task row, given [`insert_cells`] for SQLite.
pub(crate) static INSERT: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<&str> =
        TASK_COLUMNS_ALL.iter().filter(|column| column.on(Backends::Sqlite)).map(|column| column.name).collect();
    let places: Vec<String> = (1..=names.len()).map(|n| format!("?{n}")).collect();
    format!("INSERT INTO tasks ({}) VALUES ({})", names.join(", "), places.join(", "))
});

/// Writes a step: given [`step_cells`], then `pending_seq`, then the task id.
pub(crate) static UPDATE: LazyLock<String> = LazyLock::new(|| {
    let sets: Vec<String> =
        step_columns().enumerate().map(|(index, column)| format!("{} = ?{}", column.name, index + 1)).collect();
    let n = sets.len();
    format!("UPDATE tasks SET {}, pending_seq = ?{} WHERE task_id = ?{}", sets.join(", "), n + 1, n + 2)
});

/// Reads a stored JSON text column as raw JSON, passed through without re-encoding.
pub(crate) fn raw_json(row: &Row<'_>, idx: usize) -> Result<Box<RawValue>, StoreError> {
    let text: String = row.get(idx)?;
    RawValue::from_string(text).map_err(corrupt)
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
