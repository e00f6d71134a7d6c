//! The Secrets service's values stay where they belong: given to a caller holding their `get`
//! scope and kept with the tasks' secrets, and nowhere else: not in the server's log (at its
//! most verbose), its metrics, its event stream or its main database and WAL (where the
//! outbox of every message is).

mod support;

use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const VALUE: &str = "hunter2-never-anywhere-else";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_in_no_log_metric_event_or_main_database() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["server", "--listen", "127.0.0.1:0", "--root-access-token", support::ROOT_TOKEN, "--data-dir"])
        .arg(&data)
        .env("SHOAL_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next_line().await.unwrap().unwrap();
    let root = line.split("rootUrl ").nth(1).unwrap().trim_end_matches(')').to_owned();
    let client = support::client(&root);
    let mut events = client.listen(&[("exchange/taskcluster-queue/v1/task-defined".into(), "#".into())]).await.unwrap();

    let expires = shoal_client::now().plus_secs(3600).to_string();
    client.set_secret("project/deploy", &json!({"password": VALUE}), &expires).await.unwrap();
    assert_eq!(client.secret("project/deploy").await.unwrap()["secret"]["password"], VALUE);
    // Refused calls carrying the value: a bad expiry, a name too long.
    let http = reqwest::Client::new();
    for (name, expires) in [("project/deploy", "yesterday"), (&*"x".repeat(2000), expires.as_str())] {
        let url = format!("{root}/api/secrets/v1/secret/{name}");
        let body = json!({"secret": {"password": VALUE}, "expires": expires});
        let res = support::signed(&http, reqwest::Method::PUT, &url, Some(&body)).send().await.unwrap();
        assert_eq!(res.status(), 400);
        assert!(!res.text().await.unwrap().contains(VALUE), "a refusal echoes no value");
    }
    assert_eq!(client.secret_names().await.unwrap(), ["project/deploy"]);
    // A task created meanwhile: the event stream carries its message and no secret.
    client.create_task(&slugid::nice(), &support::plain_task("secrets/q")).await.unwrap();
    let message = events.next_message().await.unwrap().unwrap();
    assert!(!message.to_string().contains(VALUE));
    let metrics = reqwest::get(format!("{root}/metrics")).await.unwrap().text().await.unwrap();
    assert!(!metrics.contains(VALUE));

    child.kill().await.unwrap();
    let logged = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(logged.contains("DEBUG"), "the log is the verbose one");
    assert!(!logged.contains(VALUE), "the value is in the server's log");
    for file in ["shoal.db", "shoal.db-wal"] {
        let bytes = std::fs::read(data.join(file)).unwrap_or_default();
        assert!(!bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()), "the value is in {file}");
    }
    let kept = std::fs::read(data.join("secrets.db")).unwrap_or_default();
    let wal = std::fs::read(data.join("secrets.db-wal")).unwrap_or_default();
    assert!(
        [kept, wal].iter().any(|bytes| bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes())),
        "kept in secrets.db"
    );
}
