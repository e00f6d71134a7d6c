//! The worker registry's statements on SQLite, for the writer and the readers.

use rusqlite::{Connection, OptionalExtension, params};
use shoal_engine::dimensions::Dimensions;
use shoal_engine::worker::{KEPT_EVENTS, TaskRun, Worker, WorkerEvent, WorkerKey};
use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::reads::ClaimRecord;
use crate::row::{corrupt, json};

fn decode<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| corrupt(format!("{what}: {err}")))
}

/// A worker's record.
pub(crate) fn load(conn: &Connection, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
    let record: Option<String> = conn
        .prepare_cached("SELECT record FROM workers WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3")?
        .query_row(params![key.task_queue_id, key.worker_group, key.worker_id], |row| row.get(0))
        .optional()?;
    record.map(|record| decode("worker", &record)).transpose()
}

/// Stores a worker's record and its new events, keeping the latest [`KEPT_EVENTS`].
pub(crate) fn save(conn: &Connection, worker: &Worker, events: &[(u64, WorkerEvent)]) -> Result<(), StoreError> {
    let key = &worker.key;
    let record = json(worker)?;
    let row = params![
        key.task_queue_id,
        key.worker_group,
        key.worker_id,
        record,
        worker.last_seen.millis(),
        worker.watched(),
        worker.expires.millis(),
    ];
    // When only the record changed (a claim's recent tasks, on every claimWork that took
    // something), an update of it alone leaves the indexes' pages as they are.
    let changed = conn
        .prepare_cached(
            "UPDATE workers SET record = ?4 WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3 \
             AND last_seen = ?5 AND watched = ?6 AND expires = ?7",
        )?
        .execute(row)?;
    if changed == 0 {
        conn.prepare_cached(
            "INSERT INTO workers (task_queue_id, worker_group, worker_id, record, last_seen, watched, expires) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (task_queue_id, worker_group, worker_id) DO UPDATE \
             SET record = excluded.record, last_seen = excluded.last_seen, watched = excluded.watched, \
             expires = excluded.expires",
        )?
        .execute(row)?;
    }
    let Some(&(last, _)) = events.last() else { return Ok(()) };
    let mut insert = conn.prepare_cached(
        "INSERT INTO worker_events (task_queue_id, worker_group, worker_id, seq, event) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (seq, event) in events {
        insert.execute(params![key.task_queue_id, key.worker_group, key.worker_id, *seq as i64, json(event)?])?;
    }
    conn.prepare_cached(
        "DELETE FROM worker_events WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3 AND seq <= ?4",
    )?
    .execute(params![key.task_queue_id, key.worker_group, key.worker_id, last as i64 - KEPT_EVENTS as i64])?;
    Ok(())
}

fn key_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<WorkerKey> {
    Ok(WorkerKey { task_queue_id: row.get(0)?, worker_group: row.get(1)?, worker_id: row.get(2)? })
}

/// Watched workers last seen before `cutoff`.
pub(crate) fn silent(conn: &Connection, cutoff: Timestamp, limit: usize) -> Result<Vec<WorkerKey>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_queue_id, worker_group, worker_id FROM workers WHERE watched = 1 AND last_seen < ?1 \
         ORDER BY last_seen LIMIT ?2",
    )?;
    let keys = stmt.query_map(params![cutoff.millis(), limit as i64], key_from_row)?;
    Ok(keys.collect::<Result<_, _>>()?)
}

/// The dimensions of the workers of `task_queue_id` seen at or after `since`.
pub(crate) fn live_dimensions(
    conn: &Connection,
    task_queue_id: &str,
    since: Timestamp,
) -> Result<Vec<Dimensions>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT json_extract(record, '$.dimensions') FROM workers WHERE task_queue_id = ?1 AND last_seen >= ?2",
    )?;
    let found = stmt.query_map(params![task_queue_id, since.millis()], |row| row.get::<_, Option<String>>(0))?;
    let mut res = Vec::new();
    for text in found {
        if let Some(text) = text? {
            res.push(serde_json::from_str(&text).map_err(corrupt)?);
        }
    }
    Ok(res)
}

/// Deletes up to `limit` expired workers and their events.
pub(crate) fn delete_expired(conn: &Connection, now: Timestamp, limit: usize) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_queue_id, worker_group, worker_id FROM workers WHERE expires <= ?1 ORDER BY expires LIMIT ?2",
    )?;
    let keys: Vec<WorkerKey> =
        stmt.query_map(params![now.millis(), limit as i64], key_from_row)?.collect::<Result<_, _>>()?;
    for key in keys {
        let key = params![key.task_queue_id, key.worker_group, key.worker_id];
        for table in ["worker_events", "worker_runs"] {
            conn.prepare_cached(&format!(
                "DELETE FROM {table} WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3"
            ))?
            .execute(key)?;
        }
        conn.prepare_cached("DELETE FROM workers WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3")?
            .execute(key)?;
    }
    Ok(())
}

/// Adds the claim of `runs` by worker `key` at `at` to its history: one row.
pub(crate) fn record_runs(
    conn: &Connection,
    key: &WorkerKey,
    runs: &[TaskRun],
    at: Timestamp,
) -> Result<(), StoreError> {
    let Some(first) = runs.first() else { return Ok(()) };
    conn.prepare_cached(
        "INSERT OR IGNORE INTO worker_runs (task_queue_id, worker_group, worker_id, at, task_id, runs) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        key.task_queue_id,
        key.worker_group,
        key.worker_id,
        at.millis(),
        first.task_id.as_str(),
        json(&runs)?
    ])?;
    Ok(())
}

/// Deletes the runs of worker `key`'s history claimed before `before`.
pub(crate) fn trim_runs(conn: &Connection, key: &WorkerKey, before: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached(
        "DELETE FROM worker_runs WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3 AND at < ?4",
    )?
    .execute(params![key.task_queue_id, key.worker_group, key.worker_id, before.millis()])?;
    Ok(())
}

/// Worker `key`'s claims made before `before` (`(at, first taskId)`), newest first, at most
/// `limit`.
pub(crate) fn claims(
    conn: &Connection,
    key: &WorkerKey,
    before: (i64, &str),
    limit: usize,
) -> Result<Vec<ClaimRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT at, task_id, runs FROM worker_runs WHERE task_queue_id = ?1 AND worker_group = ?2 \
         AND worker_id = ?3 AND (at, task_id) < (?4, ?5) ORDER BY at DESC, task_id DESC LIMIT ?6",
    )?;
    let rows = stmt.query_map(
        params![key.task_queue_id, key.worker_group, key.worker_id, before.0, before.1, limit as i64],
        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?)),
    )?;
    let mut found = Vec::new();
    for row in rows {
        let (at, first, runs) = row?;
        found.push(ClaimRecord::decode(at, &first, &runs)?);
    }
    Ok(found)
}

/// A queue's workers after `(group, id)`, by group and id, at most `limit`.
pub(crate) fn list(
    conn: &Connection,
    task_queue_id: &str,
    after: (&str, &str),
    limit: usize,
) -> Result<Vec<Worker>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT record FROM workers WHERE task_queue_id = ?1 AND (worker_group, worker_id) > (?2, ?3) \
         ORDER BY worker_group, worker_id LIMIT ?4",
    )?;
    let records = stmt.query_map(params![task_queue_id, after.0, after.1, limit as i64], |row| row.get(0))?;
    records.map(|record: rusqlite::Result<String>| decode("worker", &record?)).collect()
}

/// The workers (`group/id`) holding running runs of a queue, and the tasks each runs.
pub(crate) fn running(conn: &Connection, task_queue_id: &str) -> Result<Vec<(String, TaskId)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT worker, task_id FROM tasks WHERE task_queue_id = ?1 AND state = 'running' AND worker IS NOT NULL",
    )?;
    let rows = stmt.query_map([task_queue_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?;
    rows.map(|row| {
        let (worker, task_id) = row?;
        let task_id = TaskId::parse(&task_id).ok_or_else(|| corrupt(format!("task id {task_id}")))?;
        Ok((worker, task_id))
    })
    .collect()
}

/// A worker's events numbered before `before`, newest first, at most `limit`.
pub(crate) fn events(
    conn: &Connection,
    key: &WorkerKey,
    before: u64,
    limit: usize,
) -> Result<Vec<(u64, WorkerEvent)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, event FROM worker_events WHERE task_queue_id = ?1 AND worker_group = ?2 AND worker_id = ?3 \
         AND seq < ?4 ORDER BY seq DESC LIMIT ?5",
    )?;
    let before = i64::try_from(before).unwrap_or(i64::MAX);
    let rows = stmt
        .query_map(params![key.task_queue_id, key.worker_group, key.worker_id, before, limit as i64], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?;
    rows.map(|row| {
        let (seq, event) = row?;
        Ok((seq as u64, decode("worker event", &event)?))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::schema::{MIGRATIONS, migrate};

    #[test]
    fn workers_recorded_before_schema_15_are_kept_and_found_by_key_and_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..14] {
            conn.execute_batch(sql).unwrap();
        }
        let record = r#"{"taskQueueId":"p/q","workerGroup":"g","workerId":"w","firstSeen":"2026-01-01T00:00:00.000Z",
            "lastSeen":"2026-01-01T00:00:00.000Z","expires":"2027-01-01T00:00:00.000Z"}"#;
        conn.execute_batch("PRAGMA user_version = 14").unwrap();
        conn.execute("INSERT INTO workers VALUES ('p/q', 'g', 'w', ?1, 5, 1, 9)", [record]).unwrap();
        migrate(&mut conn).unwrap();
        let table: String =
            conn.query_row("SELECT sql FROM sqlite_schema WHERE name = 'workers'", [], |row| row.get(0)).unwrap();
        assert!(!table.contains("WITHOUT ROWID"), "{table}");
        let key = WorkerKey { task_queue_id: "p/q".into(), worker_group: "g".into(), worker_id: "w".into() };
        let worker = load(&conn, &key).unwrap().expect("kept");
        assert_eq!((worker.key, worker.first_seen), (key.clone(), Timestamp::parse("2026-01-01T00:00:00Z").unwrap()));
        assert_eq!(silent(&conn, Timestamp(6), 10).unwrap(), vec![key.clone()], "the watched index");
        let duplicate = conn.execute("INSERT INTO workers VALUES ('p/q', 'g', 'w', '{}', 5, 1, 9)", []);
        assert!(duplicate.is_err(), "the key is still unique");
    }
}
