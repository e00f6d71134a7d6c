//! Shared by the tests that run the real binary.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub(crate) mod git_server;
pub(crate) mod worker;

/// Starts `shoal server` on a free loopback port over `data_dir` with `extra_args`; returns
/// the process (killed when dropped) and its root URL, read from the line it prints.
pub(crate) async fn start_server(data_dir: &Path, extra_args: &[&str]) -> (Child, String) {
    start_server_with(data_dir, extra_args, &[]).await
}

/// [`start_server`] with more environment variables.
pub(crate) async fn start_server_with(data_dir: &Path, extra_args: &[&str], env: &[(&str, String)]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .envs(env.iter().map(|(key, value)| (*key, value.as_str())))
        .args(["server", "--listen", "127.0.0.1:0", "--root-access-token", ROOT_TOKEN, "--data-dir"])
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

/// The root client's access token of every test server.
pub(crate) const ROOT_TOKEN: &str = "test-root-access-token-of-the-binary";

/// The root client's credentials.
#[allow(dead_code)]
pub(crate) fn root() -> shoal_client::Credentials {
    shoal_client::Credentials { client_id: "root".into(), access_token: ROOT_TOKEN.into(), certificate: None }
}

/// A client of the server at `root_url` signing as the root client.
#[allow(dead_code)]
pub(crate) fn client(root_url: &str) -> shoal_client::Client {
    shoal_client::Client::new(root_url).expect("client").with_credentials(Some(root()))
}

/// `method` on `url` with a JSON `body`, signed as the root client.
#[allow(dead_code)]
pub(crate) fn signed(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<&serde_json::Value>,
) -> reqwest::RequestBuilder {
    let bytes = body.map(|body| serde_json::to_vec(body).expect("JSON"));
    let authorization = root()
        .authorization(method.as_str(), url, bytes.as_deref().map(|bytes| ("application/json", bytes)))
        .expect("signing");
    let mut request = http.request(method, url).header("authorization", authorization);
    if let Some(bytes) = bytes {
        request = request.header("content-type", "application/json").body(bytes);
    }
    request
}

/// Sets the root client's credentials in Taskcluster's variables of a command.
#[allow(dead_code)]
pub(crate) fn as_root(command: &mut tokio::process::Command) -> &mut tokio::process::Command {
    command.env("TASKCLUSTER_CLIENT_ID", "root").env("TASKCLUSTER_ACCESS_TOKEN", ROOT_TOKEN)
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

/// The host PID of a process running with exactly `argv`: a sandboxed task's own `$$` is
/// its PID namespace's, not the host's.
#[allow(dead_code)]
pub(crate) fn pid_with_argv(argv: &[&str]) -> Option<i32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
        (std::fs::read(entry.path().join("cmdline")).ok()? == wanted).then_some(pid)
    })
}

/// A status with each run's facts from the task's `result` merged into it (matched by `runId`).
#[allow(dead_code)]
pub(crate) fn with_result(mut status: serde_json::Value, result: &serde_json::Value) -> serde_json::Value {
    for facts in result["runs"].as_array().into_iter().flatten() {
        let Some(run) =
            status["runs"].as_array_mut().and_then(|runs| runs.iter_mut().find(|r| r["runId"] == facts["runId"]))
        else {
            continue;
        };
        for (key, value) in facts.as_object().into_iter().flatten() {
            run[key] = value.clone();
        }
    }
    status
}
