//! A server and workers as separate processes, and the tasks they run: shared by the tests
//! of the worker and of its credentials proxy.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

pub(crate) struct Server {
    _child: Child,
    /// The root URL.
    pub(crate) root: String,
    /// The queue API's base URL.
    pub(crate) api: String,
}

pub(crate) async fn server(data_dir: &Path) -> Server {
    server_with(data_dir, &[]).await
}

/// [`server`] with more flags.
pub(crate) async fn server_with(data_dir: &Path, extra: &[&str]) -> Server {
    let args: Vec<&str> = ["--claim-timeout", "3"].iter().chain(extra).copied().collect();
    let (child, root) = super::start_server(data_dir, &args).await;
    let api = format!("{root}/api/queue/v1");
    Server { _child: child, root, api }
}

pub(crate) fn worker(root: &str, queue: &str, id: &str, work_dir: &Path) -> Child {
    worker_with(root, queue, id, work_dir, &[])
}

pub(crate) fn worker_with(root: &str, queue: &str, id: &str, work_dir: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["worker", "--root-url", root, "--queue", queue, "--worker-id", id, "--grace", "2", "--work-dir"])
        .arg(work_dir)
        .args(extra)
        .env("SHOAL_LOG", "warn")
        .env("TASKCLUSTER_CLIENT_ID", "root")
        .env("TASKCLUSTER_ACCESS_TOKEN", super::ROOT_TOKEN)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

pub(crate) fn definition(queue: &str, payload: Value) -> Value {
    let now = shoal_engine::Timestamp(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64,
    );
    json!({
        "taskQueueId": queue,
        "created": now.to_string(),
        "deadline": now.plus_secs(600).to_string(),
        "retries": 2,
        "payload": payload,
        "metadata": {"name": "e2e", "description": "d", "owner": "o", "source": "https://x"}
    })
}

pub(crate) async fn create(server: &Server, queue: &str, payload: Value) -> String {
    let task_id = slugid::nice();
    let url = format!("{}/task/{task_id}", server.api);
    let body = definition(queue, payload);
    let res = super::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(&body)).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    task_id
}

/// The task's status with each run's Shoal facts (`stats`, `workerDimensions`, `slice` ...)
/// merged in from `/task/<taskId>/result`, as the UI shows a run.
pub(crate) async fn status(server: &Server, task_id: &str) -> Value {
    let res = reqwest::get(format!("{}/task/{task_id}/status", server.api)).await.unwrap();
    let status = res.json::<Value>().await.unwrap()["status"].clone();
    let res = reqwest::get(format!("{}/task/{task_id}/result", server.api)).await.unwrap();
    super::with_result(status, &res.json::<Value>().await.unwrap())
}

/// Waits (bounded) until the task is resolved with `runs` runs; the worker reports over
/// HTTP, so the status is the event to wait for.
pub(crate) async fn resolved(server: &Server, task_id: &str, runs: usize) -> Value {
    for _ in 0..600 {
        let status = status(server, task_id).await;
        let n_runs = status["runs"].as_array().map_or(0, Vec::len);
        if n_runs == runs && ["completed", "failed", "exception"].contains(&status["state"].as_str().unwrap_or("")) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task_id} did not resolve: {}", status(server, task_id).await);
}

pub(crate) async fn log_of(server: &Server, task_id: &str, run_id: u32) -> String {
    reqwest::get(format!("{}/logs/v1/{task_id}/{run_id}", server.root)).await.unwrap().text().await.unwrap()
}

/// Creates a task from a whole `definition` (with scopes, say); answers its id.
pub(crate) async fn create_definition(server: &Server, definition: &Value) -> String {
    let task_id = slugid::nice();
    let url = format!("{}/task/{task_id}", server.api);
    let res =
        super::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(definition)).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    task_id
}

/// Runs a task with `payload` and `scopes` (no retries); answers its first run and its log.
pub(crate) async fn run(server: &Server, queue: &str, payload: Value, scopes: &[&str]) -> (Value, String) {
    let mut task = definition(queue, payload);
    task["scopes"] = json!(scopes);
    task["retries"] = json!(0);
    let task_id = create_definition(server, &task).await;
    let status = resolved(server, &task_id, 1).await;
    (status["runs"][0].clone(), log_of(server, &task_id, 0).await)
}
