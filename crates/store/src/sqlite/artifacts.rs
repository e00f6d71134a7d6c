//! Artifact records: creating, marking uploaded, reading and expiring them.

use rusqlite::{Connection, Row, params};
use shoal_engine::artifact::{Artifact, ArtifactKind, ArtifactRequest, LIVE_LOG_NAME, implicit_live_log};
use shoal_engine::message;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::sqlite::row::{TASK_COLUMNS, corrupt, task_from_row};
use crate::sqlite::tx::{Tx, json};
use crate::{ArtifactKey, Page, StoreError};

/// One artifact of one run, or `None`; the run's implicit live log counts.
pub(crate) fn artifact(
    conn: &Connection,
    task_id: TaskId,
    run_id: u32,
    name: &str,
) -> Result<Option<Artifact>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, kind, present, expires FROM artifacts WHERE task_id = ?1 AND run_id = ?2 AND name = ?3",
    )?;
    let mut rows = stmt.query(params![task_id.as_str(), run_id, name])?;
    if let Some(row) = rows.next()? {
        return from_row(row).map(Some);
    }
    if name != LIVE_LOG_NAME {
        return Ok(None);
    }
    implicit(conn, task_id, run_id)
}

/// The run's live log, derived from the run (claimed runs have one).
fn implicit(conn: &Connection, task_id: TaskId, run_id: u32) -> Result<Option<Artifact>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?1"))?;
    let mut rows = stmt.query([task_id.as_str()])?;
    let Some(row) = rows.next()? else { return Ok(None) };
    let task = task_from_row(row)?.task;
    Ok(task.runs().get(run_id as usize).and_then(|run| implicit_live_log(run, task.meta.expires)))
}

/// A run's artifacts by name, paged.
pub(crate) fn list(
    conn: &Connection,
    task_id: TaskId,
    run_id: u32,
    after: Option<&str>,
    limit: usize,
) -> Result<Page<Artifact>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, kind, present, expires FROM artifacts WHERE task_id = ?1 AND run_id = ?2 AND name > ?3 \
         ORDER BY name LIMIT ?4",
    )?;
    let mut rows = stmt.query(params![task_id.as_str(), run_id, after.unwrap_or(""), (limit + 1) as i64])?;
    let mut items = Vec::new();
    while let Some(row) = rows.next()? {
        items.push(from_row(row)?);
    }
    crate::types::artifact_page(items, after, limit, || implicit(conn, task_id, run_id))
}

/// Artifacts that expired before `now`, at most `limit`.
pub(crate) fn expired(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, kind, present, expires, task_id, run_id FROM artifacts WHERE expires <= ?1 ORDER BY expires LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![now.millis(), limit as i64])?;
    let mut res = Vec::new();
    while let Some(row) = rows.next()? {
        let artifact = from_row(row)?;
        let task_id: String = row.get(4)?;
        let task_id = TaskId::parse(&task_id).ok_or_else(|| corrupt("bad task id"))?;
        let key = ArtifactKey { task_id, run_id: row.get(5)?, name: artifact.name.clone() };
        res.push((key, artifact));
    }
    Ok(res)
}

fn from_row(row: &Row<'_>) -> Result<Artifact, StoreError> {
    let kind: ArtifactKind =
        serde_json::from_str(row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?).map_err(corrupt)?;
    Ok(Artifact { name: row.get(0)?, kind, present: row.get::<_, i64>(2)? != 0, expires: Timestamp(row.get(3)?) })
}

/// createArtifact: the engine decides against the run and what is stored; then it is stored.
pub(crate) fn create(
    tx: &mut Tx<'_>,
    key: &ArtifactKey,
    request: ArtifactRequest,
    now: Timestamp,
) -> Result<Artifact, StoreError> {
    let row = tx.load_existing(key.task_id)?;
    let run = row
        .task
        .runs()
        .get(key.run_id as usize)
        .ok_or_else(|| Rejection::NotFound(format!("run {} of task {} not found", key.run_id, key.task_id)))?;
    let existing = artifact(tx.conn, key.task_id, key.run_id, &key.name)?;
    let stored = request.apply(&key.name, run, row.task.meta.expires, existing.as_ref(), now)?;
    if existing.as_ref() != Some(&stored) {
        put(tx, key, &stored)?;
        // Listeners hear of an artifact when its content can be fetched: blobs once uploaded.
        if stored.present {
            tx.publish(message::artifact_created(&row.task, key.run_id, &stored));
        }
    }
    Ok(stored)
}

/// Records that a blob artifact's bytes are complete.
pub(crate) fn uploaded(tx: &mut Tx<'_>, key: &ArtifactKey) -> Result<Artifact, StoreError> {
    let mut stored = existing_blob(tx, key)?;
    if !stored.present {
        stored.present = true;
        put(tx, key, &stored)?;
        let row = tx.load_existing(key.task_id)?;
        tx.publish(message::artifact_created(&row.task, key.run_id, &stored));
    }
    Ok(stored)
}

/// The blob artifact under `key`, which must exist.
pub(crate) fn existing_blob(tx: &Tx<'_>, key: &ArtifactKey) -> Result<Artifact, StoreError> {
    let stored = artifact(tx.conn, key.task_id, key.run_id, &key.name)?.ok_or_else(|| {
        Rejection::NotFound(format!("artifact {} of run {} of task {} not found", key.name, key.run_id, key.task_id))
    })?;
    if !matches!(stored.kind, ArtifactKind::Blob { .. }) {
        return Err(Rejection::Conflict(format!(
            "artifact {} is a {}, not an upload",
            key.name,
            stored.kind.storage_type()
        ))
        .into());
    }
    Ok(stored)
}

/// Forgets expired artifacts (their blobs are already gone).
pub(crate) fn forget(tx: &mut Tx<'_>, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
    let mut stmt = tx.conn.prepare_cached("DELETE FROM artifacts WHERE task_id = ?1 AND run_id = ?2 AND name = ?3")?;
    let mut n_deleted = 0;
    for key in keys {
        n_deleted += stmt.execute(params![key.task_id.as_str(), key.run_id, key.name])?;
    }
    Ok(n_deleted)
}

fn put(tx: &mut Tx<'_>, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError> {
    let mut stmt = tx.conn.prepare_cached(
        "INSERT INTO artifacts (task_id, run_id, name, kind, present, expires) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (task_id, run_id, name) DO UPDATE SET kind = excluded.kind, present = excluded.present, \
         expires = excluded.expires",
    )?;
    stmt.execute(params![
        key.task_id.as_str(),
        key.run_id,
        key.name,
        json(&artifact.kind)?,
        artifact.present,
        artifact.expires.millis()
    ])?;
    Ok(())
}
