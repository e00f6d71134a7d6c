//! Artifact records on PostgreSQL: creating, marking uploaded, reading and expiring them.

use postgres::Row;
use shoal_engine::artifact::{Artifact, ArtifactKind, ArtifactRequest, LIVE_LOG_NAME, implicit_live_log};
use shoal_engine::message;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::postgres::PgConn;
use crate::postgres::row::{TASK_COLUMNS, task_from_row};
use crate::postgres::tx::{Param, Params, PgTx};
use crate::sqlite::row::corrupt;
use crate::sqlite::tx::json;
use crate::{ArtifactKey, Page, StoreError};
use shoal_engine::task::Task;
use tokio_postgres::types::ToSql;

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
    crate::types::artifact_page(items, after, limit, || implicit(conn, task_id, run_id))
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

fn from_row(row: &Row) -> Result<Artifact, StoreError> {
    let kind: ArtifactKind = serde_json::from_str(row.try_get(1)?).map_err(corrupt)?;
    Ok(Artifact { name: row.try_get(0)?, kind, present: row.try_get(2)?, expires: Timestamp(row.try_get(3)?) })
}

/// createArtifact: the engine decides against the run and what is stored; then it is stored.
pub(crate) async fn create(
    tx: &mut PgTx,
    key: &ArtifactKey,
    request: ArtifactRequest,
    now: Timestamp,
) -> Result<Artifact, StoreError> {
    let row = tx.load_existing(key.task_id).await?;
    let run = row
        .task
        .runs()
        .get(key.run_id as usize)
        .ok_or_else(|| Rejection::NotFound(format!("run {} of task {} not found", key.run_id, key.task_id)))?;
    let existing = stored(tx, key, &row.task).await?;
    let stored = request.apply(&key.name, run, row.task.meta.expires, existing.as_ref(), now)?;
    if existing.as_ref() != Some(&stored) {
        put(tx, key, &stored).await?;
        // Listeners hear of an artifact when its content can be fetched: blobs once uploaded.
        if stored.present {
            tx.publish(message::artifact_created(&row.task, key.run_id, &stored));
        }
    }
    Ok(stored)
}

/// Records that a blob artifact's bytes are complete.
pub(crate) async fn uploaded(tx: &mut PgTx, key: &ArtifactKey) -> Result<Artifact, StoreError> {
    let row = tx.load_existing(key.task_id).await?;
    let mut stored = stored(tx, key, &row.task).await?.ok_or_else(|| {
        Rejection::NotFound(format!("artifact {} of run {} of task {} not found", key.name, key.run_id, key.task_id))
    })?;
    must_be_blob(key, &stored)?;
    if !stored.present {
        stored.present = true;
        put(tx, key, &stored).await?;
        tx.publish(message::artifact_created(&row.task, key.run_id, &stored));
    }
    Ok(stored)
}

/// The artifact under `key` as this transaction sees it; `task` is the (locked) task, whose
/// runs have implicit live logs.
async fn stored(tx: &mut PgTx, key: &ArtifactKey, task: &Task) -> Result<Option<Artifact>, StoreError> {
    let row = tx
        .query_opt(
            "SELECT name, kind, present, expires FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name = $3",
            &[&key.task_id.as_str(), &(key.run_id as i32), &key.name],
        )
        .await?;
    match row {
        Some(row) => from_row(&row).map(Some),
        None if key.name == LIVE_LOG_NAME => {
            Ok(task.runs().get(key.run_id as usize).and_then(|run| implicit_live_log(run, task.meta.expires)))
        }
        None => Ok(None),
    }
}

/// Refuses to treat a stored artifact other than an upload as one.
fn must_be_blob(key: &ArtifactKey, stored: &Artifact) -> Result<(), StoreError> {
    if !matches!(stored.kind, ArtifactKind::Blob { .. }) {
        return Err(Rejection::Conflict(format!(
            "artifact {} is a {}, not an upload",
            key.name,
            stored.kind.storage_type()
        ))
        .into());
    }
    Ok(())
}

/// Forgets expired artifacts (their blobs are already gone).
pub(crate) async fn forget(tx: &mut PgTx, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
    let ids: Vec<(&str, i32)> = keys.iter().map(|key| (key.task_id.as_str(), key.run_id as i32)).collect();
    let params: Vec<[&(dyn ToSql + Sync); 3]> =
        keys.iter().zip(&ids).map(|(key, (task_id, run_id))| [task_id as _, run_id as _, &key.name as _]).collect();
    let queries: Vec<(&str, Params<'_>)> = params
        .iter()
        .map(|params| {
            ("DELETE FROM artifacts WHERE task_id = $1 AND run_id = $2 AND name = $3 RETURNING 1", &params[..])
        })
        .collect();
    Ok(tx.pipeline(&queries).await?.iter().map(Vec::len).sum())
}

async fn put(tx: &mut PgTx, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError> {
    let params: Vec<Param> = vec![
        Box::new(key.task_id.as_str().to_owned()),
        Box::new(key.run_id as i32),
        Box::new(key.name.clone()),
        Box::new(json(&artifact.kind)?),
        Box::new(artifact.present),
        Box::new(artifact.expires.millis()),
    ];
    tx.defer(
        "INSERT INTO artifacts (task_id, run_id, name, kind, present, expires) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (task_id, run_id, name) DO UPDATE SET kind = excluded.kind, present = excluded.present, \
         expires = excluded.expires",
        params,
    )
    .await
}
