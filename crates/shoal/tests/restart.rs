//! Crash safety of the real binary: `kill -9` under load loses nothing that was acknowledged.

mod support;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::process::Child;
use tokio::sync::Notify;

/// Starts `shoal server` on a free port over `data_dir`; returns the process and its API base.
async fn start(data_dir: &Path) -> (Child, String) {
    let (child, root) = support::start_server(data_dir, &["--claim-wait", "0"]).await;
    (child, format!("{root}/api/queue/v1"))
}

fn definition() -> Value {
    let now = shoal_engine::Timestamp(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64,
    );
    json!({
        "taskQueueId": "crash/test",
        "created": now.to_string(),
        "deadline": now.plus_secs(3600).to_string(),
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    })
}

#[derive(Default)]
struct Acknowledged {
    created: Mutex<Vec<String>>,
    completed: Mutex<Vec<String>>,
    enough: Notify,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, base) = start(dir.path()).await;
    let client = reqwest::Client::new();
    let acks = Arc::new(Acknowledged::default());
    let enough = acks.enough.notified();
    tokio::pin!(enough);
    enough.as_mut().enable();

    let mut load = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (client, base, acks) = (client.clone(), base.clone(), Arc::clone(&acks));
        load.spawn(async move {
            loop {
                let task_id = slugid::nice();
                let url = format!("{base}/task/{task_id}");
                let Ok(res) = support::signed(&client, reqwest::Method::PUT, &url, Some(&definition())).send().await
                else {
                    return;
                };
                if res.status().is_success() {
                    let mut created = acks.created.lock().unwrap();
                    created.push(task_id);
                    if created.len() == 600 {
                        acks.enough.notify_one();
                    }
                }
            }
        });
    }
    for w in 0..4 {
        let (client, base, acks) = (client.clone(), base.clone(), Arc::clone(&acks));
        load.spawn(async move {
            let body = json!({"workerGroup": "g", "workerId": format!("w{w}"), "tasks": 4});
            loop {
                let url = format!("{base}/claim-work/crash%2Ftest");
                let Ok(res) = support::signed(&client, reqwest::Method::POST, &url, Some(&body)).send().await else {
                    return;
                };
                let Ok(claims) = res.json::<Value>().await else {
                    return;
                };
                for claim in claims["tasks"].as_array().cloned().unwrap_or_default() {
                    let task_id = claim["status"]["taskId"].as_str().unwrap().to_owned();
                    let url = format!("{base}/task/{task_id}/runs/0/completed");
                    let Ok(res) = support::signed(&client, reqwest::Method::POST, &url, None).send().await else {
                        return;
                    };
                    if res.status().is_success() {
                        acks.completed.lock().unwrap().push(task_id);
                    }
                }
            }
        });
    }

    enough.await;
    server.start_kill().unwrap(); // SIGKILL: no shutdown path runs
    server.wait().await.unwrap();
    while load.join_next().await.is_some() {}

    let created: Vec<String> = acks.created.lock().unwrap().clone();
    let completed: HashSet<String> = acks.completed.lock().unwrap().iter().cloned().collect();
    assert!(created.len() >= 600);

    let (_server, base) = start(dir.path()).await;
    let mut still_pending = HashSet::new();
    for task_id in &created {
        let res = client.get(format!("{base}/task/{task_id}/status")).send().await.unwrap();
        assert!(res.status().is_success(), "acknowledged task {task_id} was lost");
        let status: Value = res.json().await.unwrap();
        let state = status["status"]["state"].as_str().unwrap().to_owned();
        if completed.contains(task_id) {
            assert_eq!(state, "completed", "acknowledged completion of {task_id} was lost");
        }
        if state == "pending" {
            still_pending.insert(task_id.clone());
        }
    }
    // The pending index is rebuilt: every pending task is claimable, exactly once.
    let mut claimed = HashSet::new();
    loop {
        let body = json!({"workerGroup": "g", "workerId": "after", "tasks": 32});
        let res: Value =
            support::signed(&client, reqwest::Method::POST, &format!("{base}/claim-work/crash%2Ftest"), Some(&body))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        let claims = res["tasks"].as_array().cloned().unwrap_or_default();
        if claims.is_empty() {
            break;
        }
        for claim in claims {
            let task_id = claim["status"]["taskId"].as_str().unwrap().to_owned();
            assert!(claimed.insert(task_id.clone()), "{task_id} claimed twice");
        }
    }
    assert!(still_pending.is_subset(&claimed), "some pending tasks were not claimable after the restart");
}

#[tokio::test]
async fn a_second_server_on_the_same_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = start(dir.path()).await;
    let mut second = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("SHOAL_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // A server that started prints where it listens; a refused one ends without a line.
    let stdout = second.stdout.take().unwrap();
    let listening = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)).next_line().await.unwrap();
    assert_eq!(listening, None, "the second server started");
    let output = second.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("another Shoal server is running on the data directory"), "{stderr}");
    // The first one is untouched.
    let res = reqwest::get(format!("{base}/ping")).await.unwrap();
    assert!(res.status().is_success());
}
