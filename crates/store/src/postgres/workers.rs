//! The worker registry's statements on PostgreSQL: the writer's ([`PgTx`]) and the readers'.

use shoal_engine::dimensions::Dimensions;
use shoal_engine::worker::{KEPT_EVENTS, Worker, WorkerEvent, WorkerKey, worker_name};
use shoal_engine::{TaskId, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::StoreError;
use crate::postgres::reads::PgReads;
use crate::postgres::tx::PgTx;
use crate::row::{corrupt, json};

fn decode<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| corrupt(format!("{what}: {err}")))
}

fn key_from_row(row: &Row) -> Result<WorkerKey, StoreError> {
    Ok(WorkerKey { task_queue_id: row.try_get(0)?, worker_group: row.try_get(1)?, worker_id: row.try_get(2)? })
}

fn task_id_from_row(row: &Row, column: usize) -> Result<TaskId, StoreError> {
    let text: String = row.try_get(column)?;
    TaskId::parse(&text).ok_or_else(|| corrupt(format!("task id {text}")))
}

impl PgTx {
    /// A worker's record, locked until the commit.
    pub(crate) async fn lock_worker(&mut self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        if let Some(worker) = self.workers_read.remove(key) {
            return Ok(Some(worker));
        }
        let row = self.query_opt(LOCK_WORKER, &[&key.task_queue_id, &key.worker_group, &key.worker_id]).await?;
        row.map(|row| decode("worker", row.try_get::<_, &str>(0)?)).transpose()
    }

    /// Stores a worker's record and its new events, keeping the latest [`KEPT_EVENTS`].
    pub(crate) async fn store_worker(
        &mut self,
        worker: &Worker,
        events: &[(u64, WorkerEvent)],
    ) -> Result<(), StoreError> {
        let key = &worker.key;
        self.defer(
            "INSERT INTO workers (task_queue_id, worker_group, worker_id, record, last_seen, watched, expires) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (task_queue_id, worker_group, worker_id) DO UPDATE \
             SET record = excluded.record, last_seen = excluded.last_seen, watched = excluded.watched, \
             expires = excluded.expires",
            vec![
                Box::new(key.task_queue_id.clone()),
                Box::new(key.worker_group.clone()),
                Box::new(key.worker_id.clone()),
                Box::new(json(worker)?),
                Box::new(worker.last_seen.millis()),
                Box::new(worker.watched()),
                Box::new(worker.expires.millis()),
            ],
        )
        .await?;
        let Some(&(last, _)) = events.last() else { return Ok(()) };
        for (seq, event) in events {
            self.defer(
                "INSERT INTO worker_events (task_queue_id, worker_group, worker_id, seq, event) \
                 VALUES ($1, $2, $3, $4, $5)",
                vec![
                    Box::new(key.task_queue_id.clone()),
                    Box::new(key.worker_group.clone()),
                    Box::new(key.worker_id.clone()),
                    Box::new(*seq as i64),
                    Box::new(json(event)?),
                ],
            )
            .await?;
        }
        self.defer(
            "DELETE FROM worker_events WHERE task_queue_id = $1 AND worker_group = $2 AND worker_id = $3 AND seq <= $4",
            vec![
                Box::new(key.task_queue_id.clone()),
                Box::new(key.worker_group.clone()),
                Box::new(key.worker_id.clone()),
                Box::new(last as i64 - KEPT_EVENTS as i64),
            ],
        )
        .await
    }

    /// Watched workers last seen before `cutoff`, skipping those another server is changing.
    pub(crate) async fn silent_workers_before(
        &mut self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<Vec<WorkerKey>, StoreError> {
        let rows = self
            .query(
                "SELECT task_queue_id, worker_group, worker_id FROM workers WHERE watched AND last_seen < $1 \
                 ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED",
                &[&cutoff.millis(), &(limit as i64)],
            )
            .await?;
        rows.iter().map(key_from_row).collect()
    }

    /// The dimensions of the workers of `task_queue_id` seen at or after `since`.
    pub(crate) async fn live_dimensions(
        &mut self,
        task_queue_id: &str,
        since: Timestamp,
    ) -> Result<Vec<Dimensions>, StoreError> {
        let rows = self
            .query(
                "SELECT (record::jsonb -> 'dimensions')::text FROM workers WHERE task_queue_id = $1 AND last_seen >= $2",
                &[&task_queue_id, &since.millis()],
            )
            .await?;
        let mut res = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(text) = row.try_get::<_, Option<&str>>(0)? {
                res.push(serde_json::from_str(text).map_err(corrupt)?);
            }
        }
        Ok(res)
    }

    /// The tasks whose running run worker `key` holds.
    pub(crate) async fn runs_of_worker(&mut self, key: &WorkerKey) -> Result<Vec<TaskId>, StoreError> {
        let name = worker_name(&key.worker_group, &key.worker_id);
        let rows = self
            .query(
                "SELECT task_id FROM tasks WHERE taken_until IS NOT NULL AND task_queue_id = $1 AND worker = $2",
                &[&key.task_queue_id, &name],
            )
            .await?;
        rows.iter().map(|row| task_id_from_row(row, 0)).collect()
    }

    /// Deletes up to `limit` expired workers and their events.
    pub(crate) async fn delete_workers_expired(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError> {
        self.defer(
            "WITH gone AS (DELETE FROM workers WHERE (task_queue_id, worker_group, worker_id) IN \
             (SELECT task_queue_id, worker_group, worker_id FROM workers WHERE expires <= $1 LIMIT $2 \
             FOR UPDATE SKIP LOCKED) RETURNING task_queue_id, worker_group, worker_id) \
             DELETE FROM worker_events e USING gone WHERE e.task_queue_id = gone.task_queue_id \
             AND e.worker_group = gone.worker_group AND e.worker_id = gone.worker_id",
            vec![Box::new(now.millis()), Box::new(limit as i64)],
        )
        .await
    }
}

/// Locks and reads one worker's record.
const LOCK_WORKER: &str = "SELECT record FROM workers WHERE task_queue_id = $1 AND worker_group = $2 AND worker_id = $3 \
     FOR UPDATE";

/// Locks and reads the records of `keys` in one round trip (in key order, so that two
/// transactions never wait on each other's), for [`PgTx::lock_worker`] to take.
pub(crate) async fn read_workers(tx: &mut PgTx, mut keys: Vec<WorkerKey>) -> Result<(), StoreError> {
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        return Ok(());
    }
    let params: Vec<[&(dyn ToSql + Sync); 3]> =
        keys.iter().map(|key| [&key.task_queue_id as _, &key.worker_group as _, &key.worker_id as _]).collect();
    let queries: Vec<(&str, crate::postgres::pipeline::Params<'_>)> =
        params.iter().map(|params| (LOCK_WORKER, &params[..])).collect();
    let answers = tx.pipeline(&queries).await?;
    for rows in answers {
        if let Some(row) = rows.first() {
            let worker: Worker = decode("worker", row.try_get::<_, &str>(0)?)?;
            tx.workers_read.insert(worker.key.clone(), worker);
        }
    }
    Ok(())
}

impl PgReads<'_> {
    /// A worker's record.
    pub(crate) fn worker_record(&self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        let rows = self.query(
            "SELECT record FROM workers WHERE task_queue_id = $1 AND worker_group = $2 AND worker_id = $3",
            &[&key.task_queue_id, &key.worker_group, &key.worker_id],
        )?;
        rows.first().map(|row| decode("worker", row.try_get::<_, &str>(0)?)).transpose()
    }

    /// A queue's workers after `(group, id)`, by group and id.
    pub(crate) fn worker_records(
        &self,
        task_queue_id: &str,
        after: (&str, &str),
        limit: usize,
    ) -> Result<Vec<Worker>, StoreError> {
        let rows = self.query(
            "SELECT record FROM workers WHERE task_queue_id = $1 AND (worker_group, worker_id) > ($2, $3) \
             ORDER BY worker_group, worker_id LIMIT $4",
            &[&task_queue_id as &(dyn ToSql + Sync), &after.0, &after.1, &(limit as i64)],
        )?;
        rows.iter().map(|row| decode("worker", row.try_get::<_, &str>(0)?)).collect()
    }

    /// A queue's running runs: each one's worker and task.
    pub(crate) fn running_runs(&self, task_queue_id: &str) -> Result<Vec<(String, TaskId)>, StoreError> {
        let rows = self.query(
            "SELECT worker, task_id FROM tasks WHERE taken_until IS NOT NULL AND task_queue_id = $1 \
             AND worker IS NOT NULL",
            &[&task_queue_id],
        )?;
        rows.iter().map(|row| Ok((row.try_get(0)?, task_id_from_row(row, 1)?))).collect()
    }

    /// A worker's events before `before`, newest first.
    pub(crate) fn worker_event_rows(
        &self,
        key: &WorkerKey,
        before: u64,
        limit: usize,
    ) -> Result<Vec<(u64, WorkerEvent)>, StoreError> {
        let before = i64::try_from(before).unwrap_or(i64::MAX);
        let rows = self.query(
            "SELECT seq, event FROM worker_events WHERE task_queue_id = $1 AND worker_group = $2 AND worker_id = $3 \
             AND seq < $4 ORDER BY seq DESC LIMIT $5",
            &[&key.task_queue_id as &(dyn ToSql + Sync), &key.worker_group, &key.worker_id, &before, &(limit as i64)],
        )?;
        rows.iter()
            .map(|row| Ok((row.try_get::<_, i64>(0)? as u64, decode("worker event", row.try_get::<_, &str>(1)?)?)))
            .collect()
    }
}
