//! Shared by the tests that run the real binary.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `shoal server` on a free loopback port over `data_dir` with `extra_args`; returns
/// the process (killed when dropped) and its root URL, read from the line it prints.
pub(crate) async fn start_server(data_dir: &Path, extra_args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra_args)
        // SHOAL_TEST_LOG raises the servers' log level when a test needs looking into.
        .env("SHOAL_LOG", std::env::var("SHOAL_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start shoal server");
    let stdout = child.stdout.take().expect("server stdout");
    let line = BufReader::new(stdout).lines().next_line().await.unwrap().expect("the listening line");
    let root = line.split("rootUrl ").nth(1).expect("rootUrl in the listening line").trim_end_matches(')');
    (child, root.to_owned())
}

/// A task definition on `queue` with an empty payload, created now, due in an hour.
#[allow(dead_code)]
pub(crate) fn plain_task(queue: &str) -> serde_json::Value {
    let now = shoal_client::now();
    serde_json::json!({
        "taskQueueId": queue,
        "created": now.to_string(),
        "deadline": now.plus_secs(3600).to_string(),
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    })
}
