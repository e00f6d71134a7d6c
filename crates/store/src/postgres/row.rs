//! Turning PostgreSQL `tasks` rows into engine tasks.

use postgres::Row;
use serde_json::value::RawValue;
use shoal_engine::definition::Requires;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::status::Run;
use shoal_engine::task::{Task, TaskMeta};
use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::TaskGroup;
use crate::row::{TaskRow, corrupt};
use shoal_engine::artifact::{Artifact, ArtifactKind};

/// The columns `task_from_row` reads, in order; queries append their own after these.
pub(crate) const TASK_COLUMNS: &str = "task_id, task_queue_id, scheduler_id, project_id, task_group_id, \
     priority, retries, retries_left, deadline, expires, requires, dimensions::text, runs, pending_seq, routes, tags, \
     slices, dedup";

/// Number of columns in [`TASK_COLUMNS`].
pub(crate) const N_TASK_COLUMNS: usize = 18;

fn id(row: &Row, idx: usize) -> Result<TaskId, StoreError> {
    let raw: &str = row.try_get(idx)?;
    TaskId::parse(raw).ok_or_else(|| corrupt(format!("bad task id {raw}")))
}

fn optional_json<T: serde::de::DeserializeOwned + Default>(row: &Row, idx: usize) -> Result<T, StoreError> {
    match row.try_get::<_, Option<&str>>(idx)? {
        None => Ok(T::default()),
        Some(json) => serde_json::from_str(json).map_err(corrupt),
    }
}

pub(crate) fn task_from_row(row: &Row) -> Result<TaskRow, StoreError> {
    let requires: &str = row.try_get(10)?;
    let runs: Vec<Run> = serde_json::from_str(row.try_get(12)?).map_err(corrupt)?;
    let dimensions: Dimensions = optional_json(row, 11)?;
    let meta = TaskMeta {
        task_queue_id: row.try_get(1)?,
        scheduler_id: row.try_get(2)?,
        project_id: row.try_get(3)?,
        task_group_id: id(row, 4)?,
        priority: serde_json::from_str(row.try_get(5)?).map_err(corrupt)?,
        retries: row.try_get::<_, i32>(6)? as u32,
        deadline: Timestamp(row.try_get(8)?),
        expires: Timestamp(row.try_get(9)?),
        requires: Requires::from_name(requires).ok_or_else(|| corrupt("bad requires"))?,
        dimensions,
        routes: optional_json(row, 14)?,
        tags: optional_json(row, 15)?,
        slices: optional_json(row, 16)?,
        dedup_hash: row.try_get(17)?,
    };
    let retries_left = row.try_get::<_, i32>(7)? as u32;
    let pending_seq: Option<i64> = row.try_get(13)?;
    Ok(TaskRow {
        task: Task::from_parts(id(row, 0)?, meta, retries_left, runs),
        pending_seq: pending_seq.map(|seq| seq as u64),
    })
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
    Ok(Artifact { name: row.try_get(0)?, kind, present: row.try_get(2)?, expires: Timestamp(row.try_get(3)?) })
}
