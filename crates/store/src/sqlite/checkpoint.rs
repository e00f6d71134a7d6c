//! A background thread that copies the WAL back into the database file.
//!
//! SQLite's automatic checkpoint runs inside the committing transaction, on the writer
//! thread, and stalls every caller of that batch; here passive checkpoints run beside the
//! writer on their own connection. A passive checkpoint always trails a busy writer by a few
//! frames, so the WAL would never start over: the checkpointer publishes the WAL's length
//! and how far behind it is, and the writer, between batches, runs a RESTART checkpoint once
//! the WAL is long and nearly all copied back, so that what it copies and syncs itself (while
//! every write waits) is short.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::StoreError;

/// Time between passive checkpoints.
const INTERVAL: Duration = Duration::from_millis(100);
/// Time between passive checkpoints while the WAL is long enough to start over.
const CATCHING_UP: Duration = Duration::from_millis(5);
/// WAL frames past which the writer restarts the WAL (16 MB of 4 KiB pages).
const RESTART_FRAMES: i64 = 4096;
/// Frames not yet copied back that the writer's restart may copy itself.
const RESTART_BEHIND: i64 = 512;

/// The WAL as the last passive checkpoint found it.
#[derive(Debug, Default)]
pub(crate) struct WalState {
    frames: AtomicI64,
    behind: AtomicI64,
}

impl WalState {
    /// Whether the writer should start the WAL over now: it is long, and nearly all copied
    /// back (or far too long to wait for that).
    pub(crate) fn restart_due(&self) -> bool {
        let frames = self.frames.load(Ordering::Relaxed);
        frames > RESTART_FRAMES
            && (self.behind.load(Ordering::Relaxed) <= RESTART_BEHIND || frames > 4 * RESTART_FRAMES)
    }

    /// The writer started the WAL over.
    pub(crate) fn restarted(&self) {
        self.frames.store(0, Ordering::Relaxed);
        self.behind.store(0, Ordering::Relaxed);
    }
}

/// The running checkpointer; stops when told to.
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing `path`; `wal` receives what each pass found.
    pub(crate) fn start(path: &Path, wal: Arc<WalState>) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path)?;
        conn.execute_batch("PRAGMA busy_timeout = 5000;")?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("shoal-store-checkpoint".into())
            .spawn(move || run(&conn, &signal, &wal))
            .map_err(|err| StoreError::Internal(format!("starting checkpointer: {err}")))?;
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

fn run(conn: &Connection, stop: &(Mutex<bool>, Condvar), wal: &WalState) {
    let (flag, wake) = stop;
    loop {
        let pause = if wal.frames.load(Ordering::Relaxed) > RESTART_FRAMES { CATCHING_UP } else { INTERVAL };
        let Ok(stopped) = flag.lock() else { return };
        let Ok((stopped, _)) = wake.wait_timeout_while(stopped, pause, |stopped| !*stopped) else { return };
        if *stopped {
            return;
        }
        drop(stopped);
        // Returns (busy, frames in the WAL, frames checkpointed).
        match conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?)))
        {
            Ok((frames, copied)) => {
                wal.frames.store(frames, Ordering::Relaxed);
                wal.behind.store(frames - copied, Ordering::Relaxed);
            }
            Err(err) => tracing::warn!(error = %err, "passive checkpoint failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(frames: i64, behind: i64) -> WalState {
        WalState { frames: AtomicI64::new(frames), behind: AtomicI64::new(behind) }
    }

    #[test]
    fn the_wal_starts_over_once_long_and_nearly_copied_back() {
        assert!(!found(100, 0).restart_due(), "short");
        assert!(!found(RESTART_FRAMES + 1, RESTART_BEHIND + 1).restart_due(), "long, but the restart would copy much");
        assert!(found(RESTART_FRAMES + 1, RESTART_BEHIND).restart_due());
        assert!(found(4 * RESTART_FRAMES + 1, 4 * RESTART_FRAMES).restart_due(), "far too long to wait");
        let wal = found(RESTART_FRAMES + 1, 0);
        wal.restarted();
        assert!(!wal.restart_due());
    }
}
