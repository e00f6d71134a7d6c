//! Artifact records in SQLite: the reads, and the writes `ops::artifacts` is made of.

use rusqlite::{Connection, Row, params};
use shoal_engine::artifact::{Artifact, ArtifactKind};
use shoal_engine::{TaskId, Timestamp};

use crate::row::{corrupt, json};
use crate::{ArtifactKey, StoreError};

/// A run's stored artifacts named after `after`, by name, at most `limit`.
pub(crate) fn listed(
    conn: &Connection,
    task_id: TaskId,
    run_id: u32,
    after: &str,
    limit: usize,
) -> Result<Vec<Artifact>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, kind, present, expires, bytes, object FROM artifacts WHERE task_id = ?1 AND run_id = ?2 AND name > ?3 \
         ORDER BY name LIMIT ?4",
    )?;
    let mut rows = stmt.query(params![task_id.as_str(), run_id, after, limit as i64])?;
    let mut items = Vec::new();
    while let Some(row) = rows.next()? {
        items.push(from_row(row)?);
    }
    Ok(items)
}

/// Artifacts that expired before `now`, at most `limit`.
pub(crate) fn expired(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(ArtifactKey, Artifact)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, kind, present, expires, bytes, object, task_id, run_id FROM artifacts WHERE expires <= ?1 \
         ORDER BY expires LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![now.millis(), limit as i64])?;
    let mut res = Vec::new();
    while let Some(row) = rows.next()? {
        let artifact = from_row(row)?;
        let task_id: String = row.get(6)?;
        let task_id = TaskId::parse(&task_id).ok_or_else(|| corrupt("bad task id"))?;
        let key = ArtifactKey { task_id, run_id: row.get(7)?, name: artifact.name.clone() };
        res.push((key, artifact));
    }
    Ok(res)
}

fn from_row(row: &Row<'_>) -> Result<Artifact, StoreError> {
    let kind: ArtifactKind =
        serde_json::from_str(row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?).map_err(corrupt)?;
    let bytes = row.get::<_, Option<i64>>(4)?.map(|bytes| u64::try_from(bytes).unwrap_or_default());
    Ok(Artifact {
        name: row.get(0)?,
        kind,
        present: row.get::<_, i64>(2)? != 0,
        expires: Timestamp(row.get(3)?),
        bytes,
        object: row.get(5)?,
    })
}

/// The stored record of an artifact (not the implicit live log).
pub(crate) fn stored(
    conn: &Connection,
    task_id: TaskId,
    run_id: u32,
    name: &str,
) -> Result<Option<Artifact>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, kind, present, expires, bytes, object FROM artifacts WHERE task_id = ?1 AND run_id = ?2 AND name = ?3",
    )?;
    let mut rows = stmt.query(params![task_id.as_str(), run_id, name])?;
    rows.next()?.map(from_row).transpose()
}

/// Deletes artifact records; says how many there were.
pub(crate) fn delete(conn: &Connection, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
    let mut stmt = conn.prepare_cached("DELETE FROM artifacts WHERE task_id = ?1 AND run_id = ?2 AND name = ?3")?;
    let mut n_deleted = 0;
    for key in keys {
        n_deleted += stmt.execute(params![key.task_id.as_str(), key.run_id, key.name])?;
    }
    Ok(n_deleted)
}

/// The bytes of a run's uploaded blobs.
pub(crate) fn run_bytes(conn: &Connection, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
    let total: i64 = conn
        .prepare_cached("SELECT COALESCE(SUM(bytes), 0) FROM artifacts WHERE task_id = ?1 AND run_id = ?2")?
        .query_row(params![task_id.as_str(), run_id], |row| row.get(0))?;
    Ok(u64::try_from(total).unwrap_or_default())
}

/// Stores an artifact's record, replacing any under its key.
pub(crate) fn put(conn: &Connection, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO artifacts (task_id, run_id, name, kind, present, expires, bytes, object) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (task_id, run_id, name) DO UPDATE SET kind = excluded.kind, present = excluded.present, \
         expires = excluded.expires, bytes = excluded.bytes, object = excluded.object",
    )?;
    stmt.execute(params![
        key.task_id.as_str(),
        key.run_id,
        key.name,
        json(&artifact.kind)?,
        artifact.present,
        artifact.expires.millis(),
        artifact.bytes.map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
        artifact.object,
    ])?;
    Ok(())
}
