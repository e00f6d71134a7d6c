//! Live logs in PostgreSQL, as Swarming keeps output chunks beside its tasks: every server on
//! the database appends to and reads any run's log. A run's appends are serialized by an
//! advisory lock on the run, so two servers taking a worker's retried chunk never both write
//! it.

use shoal_engine::TaskId;

use super::{LOG_CHANNEL, PgStore};
use crate::{LogAppend, StoreError};

/// Most chunks one read gathers.
const CHUNKS_PER_READ: i64 = 256;

const LAST_CHUNK: &str =
    "SELECT start + length(bytes) FROM log_chunks WHERE task_id = $1 AND run_id = $2 ORDER BY start DESC LIMIT 1";

impl PgStore {
    /// Appends `bytes`, which belong at `offset`, to a run's log: bytes it has already are
    /// skipped (a resend), a chunk past its end is refused with the size to resend from.
    pub(crate) async fn append_log(
        &self,
        task_id: TaskId,
        run_id: u32,
        offset: u64,
        bytes: Vec<u8>,
    ) -> Result<LogAppend, StoreError> {
        self.blocking("log append", move |inner| {
            let mut conn = inner.pool.get()?;
            let mut tx = conn.client.transaction()?;
            let (task, run) = (task_id.as_str(), run_id as i32);
            tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))", &[&task, &i64::from(run_id)])?;
            let size = tx.query_opt(LAST_CHUNK, &[&task, &run])?.map_or(0, |row| row.get::<_, i64>(0)) as u64;
            let skip = match shoal_engine::artifact::log_append_skip(size, offset, bytes.len()) {
                Ok(skip) => skip,
                Err(size) => return Ok(LogAppend::Gap(size)),
            };
            let fresh = &bytes[skip..];
            if !fresh.is_empty() {
                tx.execute(
                    "INSERT INTO log_chunks (task_id, run_id, start, bytes) VALUES ($1, $2, $3, $4)",
                    &[&task, &run, &(size as i64), &fresh],
                )?;
            }
            tx.commit()?;
            let size = size + fresh.len() as u64;
            if !fresh.is_empty() {
                // After the commit, outside it: a notifying transaction holds a database-wide
                // lock through its commit. Lost when the database is away: followers on other
                // servers then look for themselves (every second).
                let note = format!("{} {task} {run_id} {size}", inner.server);
                if let Err(err) = conn.query("SELECT pg_notify($1, $2)", &[&LOG_CHANNEL, &note]) {
                    tracing::debug!(error = %err, "could not tell other servers a live log grew");
                }
            }
            Ok(LogAppend::Size(size))
        })
        .await
    }

    /// The size of a run's log (0 before its first chunk).
    pub(crate) async fn log_size(&self, task_id: TaskId, run_id: u32) -> Result<u64, StoreError> {
        self.blocking("log size", move |inner| {
            let mut conn = inner.pool.get()?;
            let rows = conn.query(LAST_CHUNK, &[&task_id.as_str(), &(run_id as i32)])?;
            Ok(rows.first().map_or(0, |row| row.get::<_, i64>(0)) as u64)
        })
        .await
    }

    /// Up to `max` bytes of a run's log from `offset`.
    pub(crate) async fn read_log(
        &self,
        task_id: TaskId,
        run_id: u32,
        offset: u64,
        max: usize,
    ) -> Result<Vec<u8>, StoreError> {
        self.blocking("log read", move |inner| {
            let mut conn = inner.pool.get()?;
            let rows = conn.query(
                "SELECT start, bytes FROM log_chunks WHERE task_id = $1 AND run_id = $2 \
                 AND start + length(bytes) > $3 ORDER BY start LIMIT $4",
                &[&task_id.as_str(), &(run_id as i32), &(offset as i64), &CHUNKS_PER_READ],
            )?;
            let mut out = Vec::new();
            for row in rows {
                let (start, bytes): (i64, &[u8]) = (row.get(0), row.get(1));
                let skip = usize::try_from(offset.saturating_sub(start as u64)).unwrap_or(usize::MAX).min(bytes.len());
                let room = max - out.len();
                out.extend_from_slice(&bytes[skip..bytes.len().min(skip + room)]);
                if out.len() >= max {
                    break;
                }
            }
            Ok(out)
        })
        .await
    }
}
