//! A background thread that copies the WAL back into the database file.
//!
//! SQLite's automatic checkpoint runs inside the committing transaction, on the writer
//! thread, and stalls every caller of that batch; here passive checkpoints run beside the
//! writer on their own connection. A passive checkpoint always trails a busy writer by a few
//! frames, so the WAL would never start over: the checkpointer publishes the WAL's length
//! and the writer, between batches, runs a short RESTART checkpoint once it is long (most
//! frames are already copied by then).

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::StoreError;

/// Time between passive checkpoints.
const INTERVAL: Duration = Duration::from_millis(100);
/// WAL frames past which the writer restarts the WAL (16 MB of 4 KiB pages).
pub(crate) const RESTART_FRAMES: i64 = 4096;

/// The running checkpointer; stops when told to.
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing `path`; `wal_frames` receives the WAL's length after each pass.
    pub(crate) fn start(path: &Path, wal_frames: Arc<AtomicI64>) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path)?;
        conn.execute_batch("PRAGMA busy_timeout = 5000;")?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("shoal-store-checkpoint".into())
            .spawn(move || run(&conn, &signal, &wal_frames))
            .map_err(|err| StoreError::Other(format!("starting checkpointer: {err}")))?;
        Ok(Checkpointer { stop, handle: Some(handle) })
    }

    pub(crate) fn stop(&mut self) {
        let (flag, wake) = &*self.stop;
        if let Ok(mut stopped) = flag.lock() {
            *stopped = true;
        }
        wake.notify_all();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn run(conn: &Connection, stop: &(Mutex<bool>, Condvar), wal_frames: &AtomicI64) {
    let (flag, wake) = stop;
    loop {
        let Ok(stopped) = flag.lock() else { return };
        let Ok((stopped, _)) = wake.wait_timeout_while(stopped, INTERVAL, |stopped| !*stopped) else { return };
        if *stopped {
            return;
        }
        drop(stopped);
        // Returns (busy, frames in the WAL, frames checkpointed).
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get::<_, i64>(1)) {
            Ok(frames) => wal_frames.store(frames, Ordering::Relaxed),
            Err(err) => tracing::warn!(error = %err, "passive checkpoint failed; retrying"),
        }
    }
}
