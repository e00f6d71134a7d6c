//! Artifact records on PostgreSQL: row conversion and the reads (the writes are in `write.rs`).

use postgres::Row;
use shoal_engine::artifact::{Artifact, ArtifactKind, LIVE_LOG_NAME, implicit_live_log};
use shoal_engine::{TaskId, Timestamp};

use crate::postgres::PgConn;
use crate::postgres::row::{TASK_COLUMNS, task_from_row};
use crate::row::corrupt;
use crate::{ArtifactKey, Page, StoreError};

/// One artifact of one run, or `None`; the run's implicit live log counts.
pub(crate) fn artifact(
    conn: &mut PgConn,
    task_id: TaskId,
    run_id: u32,
    name: &str,
) -> Result<Option<Artifact>, StoreError> {
    let row = conn
        .query(
            "SELECT name, kind, present, expires FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name = $3",
            &[&task_id.as_str(), &(run_id as i32), &name],
        )?
        .into_iter()
        .next();
    if let Some(row) = row {
        return from_row(&row).map(Some);
    }
    if name != LIVE_LOG_NAME {
        return Ok(None);
    }
    implicit(conn, task_id, run_id)
}

/// The run's live log, derived from the run (claimed runs have one).
fn implicit(conn: &mut PgConn, task_id: TaskId, run_id: u32) -> Result<Option<Artifact>, StoreError> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1");
    let Some(row) = conn.query(&sql, &[&task_id.as_str()])?.into_iter().next() else { return Ok(None) };
    let task = task_from_row(&row)?.task;
    Ok(task.runs().get(run_id as usize).and_then(|run| implicit_live_log(run, task.meta.expires)))
}

/// A run's artifacts by name, paged.
pub(crate) fn list(
    conn: &mut PgConn,
    task_id: TaskId,
    run_id: u32,
    after: Option<&str>,
    limit: usize,
) -> Result<Page<Artifact>, StoreError> {
    let rows = conn.query(
        "SELECT name, kind, present, expires FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name > $3 \
         ORDER BY name LIMIT $4",
        &[&task_id.as_str(), &(run_id as i32), &after.unwrap_or(""), &((limit + 1) as i64)],
    )?;
    let items = rows.iter().map(from_row).collect::<Result<Vec<_>, _>>()?;
    crate::page::artifact_page(items, after, limit, || implicit(conn, task_id, run_id))
}

/// Artifacts that expired before `now`, at most `limit`.
pub(crate) fn expired(
    conn: &mut PgConn,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
    let rows = conn.query(
        "SELECT name, kind, present, expires, task_id, run_id FROM artifacts WHERE expires <= $1 \
         ORDER BY expires LIMIT $2",
        &[&now.millis(), &(limit as i64)],
    )?;
    let mut res = Vec::with_capacity(rows.len());
    for row in rows {
        let artifact = from_row(&row)?;
        let task_id = TaskId::parse(row.get(4)).ok_or_else(|| corrupt("bad task id"))?;
        let key = ArtifactKey { task_id, run_id: row.get::<_, i32>(5) as u32, name: artifact.name.clone() };
        res.push((key, artifact));
    }
    Ok(res)
}

/// An artifact from the columns `name, kind, present, expires`.
pub(crate) fn from_row(row: &Row) -> Result<Artifact, StoreError> {
    let kind: ArtifactKind = serde_json::from_str(row.try_get(1)?).map_err(corrupt)?;
    Ok(Artifact { name: row.try_get(0)?, kind, present: row.try_get(2)?, expires: Timestamp(row.try_get(3)?) })
}
