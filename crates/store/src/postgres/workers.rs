//! The worker registry's statements on PostgreSQL: the writer's ([`PgTx`]) and the readers'.

use std::sync::LazyLock;

use shoal_engine::dimensions::Dimensions;
use shoal_engine::worker::{KEPT_EVENTS, TaskRun, Worker, WorkerEvent, WorkerKey, worker_name};
use shoal_engine::{TaskId, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::StoreError;
use crate::postgres::pipeline::Param;
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
    /// The claims appended since it was written are folded in, and deleted when it is stored.
    pub(crate) async fn lock_worker(&mut self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        let row = self.query_opt(&LOCK_WORKER, &[&key.task_queue_id, &key.worker_group, &key.worker_id]).await?;
        let Some(row) = row else { return Ok(None) };
        let (worker, folded) = folded(&row)?;
        if !folded.is_empty() {
            self.claims_folded.insert(key.clone(), folded);
        }
        Ok(Some(worker))
    }

    /// Appends claims of worker `key` (written with the commit, one statement for all), and
    /// stores `first` as its record if it has none yet.
    pub(crate) fn append_worker_claims(
        &mut self,
        key: &WorkerKey,
        runs: &[TaskRun],
        now: Timestamp,
        first: impl FnOnce() -> (Worker, Vec<(u64, WorkerEvent)>),
    ) {
        self.claims.extend(runs.iter().map(|&run| (key.clone(), run, now)));
        if !self.first_records.contains_key(key) {
            self.first_records.insert(key.clone(), first());
        }
    }

    /// Adds the claim of `runs` by worker `key` at `at` to its history: one row, held back
    /// with the transaction's other writes.
    pub(crate) async fn record_runs(
        &mut self,
        key: &WorkerKey,
        runs: &[TaskRun],
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let Some(first) = runs.first() else { return Ok(()) };
        let runs = serde_json::to_string(runs).map_err(corrupt)?;
        self.defer(
            "INSERT INTO worker_runs (task_queue_id, worker_group, worker_id, at, task_id, runs) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            vec![
                Box::new(key.task_queue_id.clone()),
                Box::new(key.worker_group.clone()),
                Box::new(key.worker_id.clone()),
                Box::new(at.millis()),
                Box::new(first.task_id.as_str().to_owned()),
                Box::new(runs),
            ],
        )
        .await
    }

    /// The statement writing the appended claims, before the commit: the first records of
    /// workers that have none (with their first events), then the claims.
    pub(crate) async fn write_claims(&mut self) -> Result<(), StoreError> {
        let claims = std::mem::take(&mut self.claims);
        let mut first = FirstRecords::default();
        for (worker, events) in std::mem::take(&mut self.first_records).values() {
            first.push(worker, events)?;
        }
        let mut params = first.params();
        let column = |f: &dyn Fn(&(WorkerKey, TaskRun, Timestamp)) -> String| claims.iter().map(f).collect::<Vec<_>>();
        params.push(Box::new(column(&|(key, ..)| key.task_queue_id.clone())));
        params.push(Box::new(column(&|(key, ..)| key.worker_group.clone())));
        params.push(Box::new(column(&|(key, ..)| key.worker_id.clone())));
        params.push(Box::new(column(&|(_, run, _)| run.task_id.as_str().to_owned())));
        params.push(Box::new(claims.iter().map(|(_, run, _)| run.run_id as i32).collect::<Vec<_>>()));
        params.push(Box::new(claims.iter().map(|(_, _, at)| at.millis()).collect::<Vec<_>>()));
        self.defer(WRITE_CLAIMS, params).await
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
        if let Some(folded) = self.claims_folded.remove(key) {
            // These rows exactly: claims appended meanwhile may have lower numbers.
            self.defer(
                "DELETE FROM worker_claims WHERE task_queue_id = $1 AND worker_group = $2 AND worker_id = $3 \
                 AND seq = ANY($4)",
                vec![
                    Box::new(key.task_queue_id.clone()),
                    Box::new(key.worker_group.clone()),
                    Box::new(key.worker_id.clone()),
                    Box::new(folded),
                ],
            )
            .await?;
        }
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
             FOR UPDATE SKIP LOCKED) RETURNING task_queue_id, worker_group, worker_id), \
             claims AS (DELETE FROM worker_claims c USING gone WHERE c.task_queue_id = gone.task_queue_id \
             AND c.worker_group = gone.worker_group AND c.worker_id = gone.worker_id), \
             runs AS (DELETE FROM worker_runs r USING gone WHERE r.task_queue_id = gone.task_queue_id \
             AND r.worker_group = gone.worker_group AND r.worker_id = gone.worker_id) \
             DELETE FROM worker_events e USING gone WHERE e.task_queue_id = gone.task_queue_id \
             AND e.worker_group = gone.worker_group AND e.worker_id = gone.worker_id",
            vec![Box::new(now.millis()), Box::new(limit as i64)],
        )
        .await
    }
}

/// A worker's record and the claims appended since it was written (JSON
/// `[[seq, taskId, runId, at], ...]` in order, NULL when none), from `workers w`.
const RECORD_AND_CLAIMS: &str = "w.record, (SELECT json_agg(json_build_array(c.seq, c.task_id, c.run_id, c.at) \
     ORDER BY c.seq) FROM worker_claims c WHERE c.task_queue_id = w.task_queue_id \
     AND c.worker_group = w.worker_group AND c.worker_id = w.worker_id)::text";

/// Locks and reads one worker's record.
static LOCK_WORKER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {RECORD_AND_CLAIMS} FROM workers w \
         WHERE w.task_queue_id = $1 AND w.worker_group = $2 AND w.worker_id = $3 FOR UPDATE OF w"
    )
});

/// A record read with [`RECORD_AND_CLAIMS`], its claims folded in ([`Worker::claimed`], in
/// the order they were appended); and the claims' numbers.
fn folded(row: &Row) -> Result<(Worker, Vec<i64>), StoreError> {
    let mut worker: Worker = decode("worker", row.try_get::<_, &str>(0)?)?;
    let Some(text) = row.try_get::<_, Option<&str>>(1)? else { return Ok((worker, Vec::new())) };
    let claims: Vec<(i64, String, u32, i64)> = decode("worker claims", text)?;
    let mut numbers = Vec::with_capacity(claims.len());
    for (seq, task, run_id, at) in claims {
        let task_id = TaskId::parse(&task).ok_or_else(|| corrupt(format!("task id {task}")))?;
        worker.claimed([TaskRun { task_id, run_id }], Timestamp(at));
        numbers.push(seq);
    }
    Ok((worker, numbers))
}

/// Records workers that have none, with their events, then appends claims, in one
/// statement: `$1..$7` first records (as `workers`' columns), `$8..$12` the events (key,
/// number, event) of the records inserted, `$13..$18` the claims.
const WRITE_CLAIMS: &str = "WITH first AS (INSERT INTO workers \
     (task_queue_id, worker_group, worker_id, record, last_seen, watched, expires) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::bool[], $7::int8[]) \
     ON CONFLICT DO NOTHING RETURNING task_queue_id, worker_group, worker_id), \
     events AS (INSERT INTO worker_events (task_queue_id, worker_group, worker_id, seq, event) \
     SELECT e.q, e.g, e.i, e.seq, e.event \
     FROM unnest($8::text[], $9::text[], $10::text[], $11::int8[], $12::text[]) AS e(q, g, i, seq, event) \
     JOIN first f ON f.task_queue_id = e.q AND f.worker_group = e.g AND f.worker_id = e.i) \
     INSERT INTO worker_claims (task_queue_id, worker_group, worker_id, task_id, run_id, at) \
     SELECT * FROM unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::int4[], $18::int8[])";

/// The first records' parameters of [`WRITE_CLAIMS`].
#[derive(Default)]
struct FirstRecords {
    queues: Vec<String>,
    groups: Vec<String>,
    ids: Vec<String>,
    records: Vec<String>,
    last_seen: Vec<i64>,
    watched: Vec<bool>,
    expires: Vec<i64>,
    event_keys: (Vec<String>, Vec<String>, Vec<String>),
    event_numbers: Vec<i64>,
    events: Vec<String>,
}

impl FirstRecords {
    fn push(&mut self, worker: &Worker, events: &[(u64, WorkerEvent)]) -> Result<(), StoreError> {
        let key = &worker.key;
        self.queues.push(key.task_queue_id.clone());
        self.groups.push(key.worker_group.clone());
        self.ids.push(key.worker_id.clone());
        self.records.push(json(worker)?);
        self.last_seen.push(worker.last_seen.millis());
        self.watched.push(worker.watched());
        self.expires.push(worker.expires.millis());
        for (number, event) in events {
            self.event_keys.0.push(key.task_queue_id.clone());
            self.event_keys.1.push(key.worker_group.clone());
            self.event_keys.2.push(key.worker_id.clone());
            self.event_numbers.push(*number as i64);
            self.events.push(json(event)?);
        }
        Ok(())
    }

    fn params(self) -> Vec<Param> {
        vec![
            Box::new(self.queues),
            Box::new(self.groups),
            Box::new(self.ids),
            Box::new(self.records),
            Box::new(self.last_seen),
            Box::new(self.watched),
            Box::new(self.expires),
            Box::new(self.event_keys.0),
            Box::new(self.event_keys.1),
            Box::new(self.event_keys.2),
            Box::new(self.event_numbers),
            Box::new(self.events),
        ]
    }
}

impl PgReads<'_> {
    /// A worker's record.
    pub(crate) fn worker_record(&self, key: &WorkerKey) -> Result<Option<Worker>, StoreError> {
        let rows = self.query(
            &format!(
                "SELECT {RECORD_AND_CLAIMS} FROM workers w \
                 WHERE w.task_queue_id = $1 AND w.worker_group = $2 AND w.worker_id = $3"
            ),
            &[&key.task_queue_id, &key.worker_group, &key.worker_id],
        )?;
        rows.first().map(|row| Ok(folded(row)?.0)).transpose()
    }

    /// A queue's workers after `(group, id)`, by group and id.
    pub(crate) fn worker_records(
        &self,
        task_queue_id: &str,
        after: (&str, &str),
        limit: usize,
    ) -> Result<Vec<Worker>, StoreError> {
        let rows = self.query(
            &format!(
                "SELECT {RECORD_AND_CLAIMS} FROM workers w WHERE w.task_queue_id = $1 \
                 AND (w.worker_group, w.worker_id) > ($2, $3) ORDER BY w.worker_group, w.worker_id LIMIT $4"
            ),
            &[&task_queue_id as &(dyn ToSql + Sync), &after.0, &after.1, &(limit as i64)],
        )?;
        rows.iter().map(|row| Ok(folded(row)?.0)).collect()
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
