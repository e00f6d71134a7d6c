//! Turning PostgreSQL `tasks` rows into engine tasks.

use postgres::Row;
use serde_json::value::RawValue;
use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::TaskGroup;
use crate::row::{Backends, READ, SelectList, TaskRow, corrupt, select_list, task_from_cells};
use shoal_engine::artifact::{Artifact, ArtifactKind};

/// The columns `task_from_row` reads, in order; queries append their own after these.
pub(crate) static TASK_COLUMNS: SelectList = SelectList::new(|| select_list(Backends::Postgres, ""));

/// Number of columns in [`TASK_COLUMNS`].
pub(crate) const N_TASK_COLUMNS: usize = READ;

fn id(row: &Row, idx: usize) -> Result<TaskId, StoreError> {
    let raw: &str = row.try_get(idx)?;
    TaskId::parse(raw).ok_or_else(|| corrupt(format!("bad task id {raw}")))
}

/// A task from a row that starts with [`TASK_COLUMNS`].
pub(crate) fn task_from_row(row: &Row) -> Result<TaskRow, StoreError> {
    task_from_cells(row)
}

/// A stored JSON text column as raw JSON, passed through without re-encoding.
pub(crate) fn raw_json(row: &Row, idx: usize) -> Result<Box<RawValue>, StoreError> {
    let text: String = row.try_get(idx)?;
    RawValue::from_string(text).map_err(corrupt)
}

/// The columns [`task_group_from_row`] reads.
pub(crate) const GROUP_COLUMNS: &str = "task_group_id, scheduler_id, expires, sealed";

/// Number of columns in [`GROUP_COLUMNS`].
pub(crate) const GROUP_COLUMN_COUNT: usize = 4;

pub(crate) fn task_group_from_row(row: &Row) -> Result<TaskGroup, StoreError> {
    Ok(TaskGroup {
        task_group_id: id(row, 0)?,
        scheduler_id: row.try_get(1)?,
        expires: Timestamp(row.try_get(2)?),
        sealed: row.try_get::<_, Option<i64>>(3)?.map(Timestamp),
    })
}

/// An artifact from the columns `name, kind, present, expires`.
pub(crate) fn artifact_from_row(row: &Row) -> Result<Artifact, StoreError> {
    let kind: ArtifactKind = serde_json::from_str(row.try_get(1)?).map_err(corrupt)?;
    let bytes = row.try_get::<_, Option<i64>>(4)?.map(|bytes| u64::try_from(bytes).unwrap_or_default());
    Ok(Artifact {
        name: row.try_get(0)?,
        kind,
        present: row.try_get(2)?,
        expires: Timestamp(row.try_get(3)?),
        bytes,
        object: row.try_get(5)?,
    })
}
