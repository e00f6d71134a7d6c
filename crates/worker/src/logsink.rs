//! Streams a run's output to the server's live log: buffered, flushed every 100 ms or when
//! a quarter megabyte is waiting, and always before the run is reported. Everything sent is
//! also kept in a file of the worker's, uploaded when the run ends as the log's blob
//! (generic-worker's `public/logs/live_backing.log`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use shoal_client::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How often buffered output is sent.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Output waiting past this size is sent at once.
const FLUSH_BYTES: usize = 256 * 1024;

/// The sending end of a run's live log.
#[derive(Debug, Clone)]
pub(crate) struct LogSink {
    chunks: mpsc::Sender<Vec<u8>>,
}

/// The task that sends; awaited to make sure everything went out.
#[derive(Debug)]
pub(crate) struct LogFlusher {
    handle: JoinHandle<()>,
}

impl LogSink {
    /// Starts sending; `header` goes out with the first output, so a run that prints nothing
    /// leaves no log behind.
    pub(crate) fn start(
        client: Client,
        (task_id, run_id): (String, u32),
        header: String,
        backing: PathBuf,
    ) -> (LogSink, LogFlusher) {
        let (chunks, received) = mpsc::channel(64);
        let handle = tokio::spawn(send_loop(client, task_id, run_id, header, received, backing));
        (LogSink { chunks }, LogFlusher { handle })
    }

    /// Output of the task's processes.
    pub(crate) async fn write(&self, bytes: Vec<u8>) {
        let _ = self.chunks.send(bytes).await;
    }

    /// A line from the worker itself, marked as such.
    pub(crate) async fn line(&self, text: &str) {
        self.write(format!("[shoal-worker] {text}\n").into_bytes()).await;
    }
}

impl LogFlusher {
    /// Waits until everything written before the last sink was dropped has been sent.
    pub(crate) async fn finish(self) {
        let _ = self.handle.await;
    }
}

async fn send_loop(
    client: Client,
    task_id: String,
    run_id: u32,
    header: String,
    mut received: mpsc::Receiver<Vec<u8>>,
    backing: PathBuf,
) {
    let mut header = Some(format!("[shoal-worker] {header}\n").into_bytes());
    // Made anew for the run (0600: the worker's alone); without it the log is only live.
    let _ = std::fs::remove_file(&backing);
    let mut kept = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&backing)
    }
    .map_err(|err| tracing::warn!(path = %backing.display(), error = %err, "cannot keep the log for its upload"))
    .ok();
    let mut buffer = Vec::new();
    let mut offset = 0u64;
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    let mut open = true;
    while open || !buffer.is_empty() {
        tokio::select! {
            chunk = received.recv(), if open => match chunk {
                Some(chunk) => {
                    let before = buffer.len();
                    if let Some(header) = header.take() {
                        buffer.extend_from_slice(&header);
                    }
                    buffer.extend_from_slice(&chunk);
                    if let Some(file) = &mut kept
                        && let Err(err) = file.write_all(&buffer[before..])
                    {
                        tracing::warn!(error = %err, "keeping the log for its upload failed");
                        kept = None;
                    }
                    if buffer.len() < FLUSH_BYTES {
                        continue;
                    }
                }
                None => open = false,
            },
            _ = tick.tick() => {}
        }
        if buffer.is_empty() {
            continue;
        }
        match client.append_log(&task_id, run_id, offset, &buffer).await {
            Ok(size) => {
                offset = size;
                buffer.clear();
            }
            Err(err) if err.is_conflict() => {
                // The run is over (canceled or expired): nobody can read more of it.
                tracing::debug!(task.id = %task_id, run.id = run_id, error = %err, "live log closed");
                buffer.clear();
                if !open {
                    break;
                }
            }
            Err(err) => {
                tracing::warn!(task.id = %task_id, run.id = run_id, error = %err, "sending output failed; will retry");
                if !open {
                    // Shutting down: one more try after a pause, then give up.
                    tokio::time::sleep(FLUSH_EVERY).await;
                    if client.append_log(&task_id, run_id, offset, &buffer).await.is_err() {
                        break;
                    }
                    buffer.clear();
                }
            }
        }
    }
}
