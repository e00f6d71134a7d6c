//! The client verbs and `shoal dev`, run as a person would run them.

mod support;

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn shoal() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shoal"));
    command.env("SHOAL_LOG", "warn").kill_on_drop(true);
    command
}

async fn server(data_dir: &std::path::Path) -> (Child, String) {
    support::start_server(data_dir, &["--claim-wait", "1"]).await
}

/// Runs a verb; returns (exit code, stdout).
async fn verb(root: &str, args: &[&str]) -> (i32, String) {
    let out = shoal().args(args).env("SHOAL_ROOT_URL", root).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty() || out.status.code() != Some(0), "{args:?} wrote to stderr: {stderr}");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_verbs_from_create_to_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, root) = server(&dir.path().join("data")).await;
    let group = slugid::nice();
    let file = dir.path().join("task.yaml");
    std::fs::write(
        &file,
        format!(
            "taskQueueId: cli/q\ntaskGroupId: {group}\npayload:\n  maxRunTime: 30\n  command:\n    - echo made by the cli > out.txt; cat out.txt\n  artifacts:\n    - {{type: file, path: out.txt, name: public/out.txt}}\nmetadata: {{name: from-yaml, description: d, owner: o, source: 'https://x'}}\n"
        ),
    )
    .unwrap();
    let (code, out) = verb(&root, &["task", "create", file.to_str().unwrap(), "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let created: serde_json::Value = serde_json::from_str(&out).unwrap();
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(created["status"]["state"], "pending");

    let _worker = shoal()
        .args(["worker", "--queue", "cli/q", "--root-url", &root, "--work-dir"])
        .arg(dir.path().join("work"))
        .spawn()
        .unwrap();
    let (code, table) = verb(&root, &["group", "wait", &group]).await;
    assert_eq!(code, 0, "every task completed: {table}");
    assert!(table.contains("from-yaml") && table.contains("completed"), "{table}");

    let (_, status) = verb(&root, &["task", "status", &task_id]).await;
    assert!(status.starts_with(&format!("{task_id}\tcompleted")), "{status}");
    let (_, log) = verb(&root, &["task", "log", &task_id]).await;
    assert!(log.contains("made by the cli"), "{log}");
    let (_, artifact) = verb(&root, &["artifact", "get", &task_id, "public/out.txt"]).await;
    assert_eq!(artifact, "made by the cli\n");

    // A task nobody runs, canceled.
    let idle = dir.path().join("idle.json");
    std::fs::write(&idle, r#"{"taskQueueId": "cli/nobody", "payload": {}, "metadata": {"name": "idle", "description": "", "owner": "o", "source": "https://x"}}"#).unwrap();
    let (_, out) = verb(&root, &["task", "create", idle.to_str().unwrap()]).await;
    let idle_id = out.split('\t').next().unwrap().to_owned();
    let (_, out) = verb(&root, &["task", "cancel", &idle_id]).await;
    assert_eq!(out.trim(), format!("{idle_id}\texception"));

    let (code, _) = verb(&root, &["task", "status", &slugid::nice()]).await;
    assert_ne!(code, 0, "an unknown task is an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_the_example_graph_to_completion() {
    let out = shoal().args(["dev", "--example", "--once", "--listen", "127.0.0.1:0"]).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for name in ["build", "test-unit", "test-integration", "test-lint", "report"] {
        assert!(
            stdout.lines().any(|line| line.contains(name) && line.contains("completed")),
            "{name} completed:\n{stdout}"
        );
    }
    assert!(stdout.contains("where to look"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_dev_cleanly() {
    let mut dev =
        shoal().args(["dev", "--listen", "127.0.0.1:0", "--workers", "1"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(dev.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("Ctrl-C stops everything") {
            break;
        }
    }
    let pid = nix::unistd::Pid::from_raw(dev.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = dev.wait().await.unwrap();
    assert!(status.success(), "shoal dev exits cleanly on Ctrl-C: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_prints_the_messages_its_bindings_match() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, root) = server(&dir.path().join("data")).await;
    let mut listener = shoal()
        .args(["listen", "--exchange", "task-defined", "--pattern", "route.index.#", "--exchange"])
        .args(["exchange/taskcluster-queue/v1/task-completed", "--count", "2"])
        .env("SHOAL_ROOT_URL", &root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(listener.stderr.take().unwrap()).lines();
    let ready = stderr.next_line().await.unwrap().unwrap();
    assert!(ready.starts_with("listening"), "{ready}");

    let file = dir.path().join("task.yaml");
    std::fs::write(
        &file,
        "taskQueueId: cli/listen\nroutes: [index.cli.build]\npayload: {maxRunTime: 30, command: [\"true\"]}\nmetadata: {name: listened, description: d, owner: o, source: 'https://x'}\n",
    )
    .unwrap();
    let (code, out) = verb(&root, &["task", "create", file.to_str().unwrap(), "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let task_id = serde_json::from_str::<serde_json::Value>(&out).unwrap()["taskId"].as_str().unwrap().to_owned();
    let _worker = shoal()
        .args(["worker", "--queue", "cli/listen", "--root-url", &root, "--work-dir"])
        .arg(dir.path().join("work"))
        .spawn()
        .unwrap();

    // A listener that hears nothing would hang the suite; fail loudly instead.
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), listener.wait_with_output())
        .await
        .expect("listen printed two messages within 60 s")
        .unwrap();
    assert!(out.status.success(), "exits after --count messages");
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let exchanges: Vec<&str> = lines.iter().map(|line| line["exchange"].as_str().unwrap()).collect();
    assert_eq!(
        exchanges,
        ["exchange/taskcluster-queue/v1/task-defined", "exchange/taskcluster-queue/v1/task-completed"],
        "only the bound exchanges, in order"
    );
    assert!(lines.iter().all(|line| line["payload"]["status"]["taskId"] == task_id.as_str()));
    assert_eq!(lines[0]["routes"], serde_json::json!(["index.cli.build"]));
}
