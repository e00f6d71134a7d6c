//! The client verbs and `shoal dev`, run as a person would run them.

mod support;

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn shoal() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shoal"));
    command.env("SHOAL_LOG", "warn").kill_on_drop(true);
    support::as_root(&mut command);
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
            "taskQueueId: cli/q\ntaskGroupId: {group}\npayload:\n  maxRunTime: 30\n  command:\n    - echo made by the cli > out.txt; cat out.txt; sleep 1\n  artifacts:\n    - {{type: file, path: out.txt, name: public/out.txt}}\nmetadata: {{name: from-yaml, description: d, owner: o, source: 'https://x'}}\n"
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
    // It followed the group on the event stream: one listing to start, one to confirm the
    // end, none in between.
    let metrics = reqwest::get(format!("{root}/metrics")).await.unwrap().text().await.unwrap();
    let listings: u64 = metrics
        .lines()
        .filter(|line| line.starts_with("shoal_request_duration_seconds_count{endpoint=\"listTaskGroup\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(listings, 2, "{metrics}");

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
    // test-smoke is added by the decision task, through its credentials proxy.
    for name in ["decision", "build", "test-unit", "test-integration", "test-lint", "report", "test-smoke"] {
        assert!(
            stdout.lines().any(|line| line.contains(name) && line.contains("completed")),
            "{name} completed:\n{stdout}"
        );
    }
    assert!(stdout.contains("where to look"), "{stdout}");
    // The data directory it made itself is private from the start: nothing to warn about.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("WARN"), "the first command's output is clean:\n{stderr}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graph_submit_waits_for_a_finished_graph_and_fails_on_a_blocked_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, root) = server(&dir.path().join("data")).await;
    let _worker = shoal()
        .args(["worker", "--queue", "cli/graph", "--root-url", &root, "--work-dir"])
        .arg(dir.path().join("work"))
        .spawn()
        .unwrap();
    let meta = "metadata: {name: step, description: d, owner: o, source: 'https://x'}";
    let file = dir.path().join("graph.yaml");
    std::fs::write(
        &file,
        format!(
            "routing: cli\ntasks:\n  first:\n    task: {{payload: {{maxRunTime: 30, command: [\"true\"]}}, {meta}}}\n  second:\n    requires: [first]\n    task: {{payload: {{maxRunTime: 30, command: [\"echo $FIRST\"], env: {{FIRST: {{$subs: 'taskId:first'}}}}}}, {meta}}}\n"
        ),
    )
    .unwrap();
    let (code, out) =
        verb(&root, &["graph", "submit", file.to_str().unwrap(), "--task-queue-id", "cli/graph", "--wait", "--json"])
            .await;
    assert_eq!(code, 0, "{out}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["status"]["state"], "finished", "{summary}");
    let first = summary["tasks"].as_array().unwrap().iter().find(|task| task["label"] == "first").unwrap();
    let first_id = first["taskId"].as_str().unwrap();
    let second = summary["tasks"].as_array().unwrap().iter().find(|task| task["label"] == "second").unwrap();
    let (_, log) = verb(&root, &["task", "log", second["taskId"].as_str().unwrap()]).await;
    assert!(log.contains(first_id), "$subs gave `second` the taskId of `first`: {log}");

    // A task that always fails, with one rerun: the graph blocks and the verb says so.
    std::fs::write(
        &file,
        format!(
            "routing: cli\ntasks:\n  broken:\n    reruns: 1\n    task: {{payload: {{maxRunTime: 30, command: [\"false\"]}}, {meta}}}\n"
        ),
    )
    .unwrap();
    let (code, table) =
        verb(&root, &["graph", "submit", file.to_str().unwrap(), "--task-queue-id", "cli/graph", "--wait"]).await;
    assert_eq!(code, 1, "a blocked graph is a failure: {table}");
    assert!(table.contains("broken") && table.contains("failed") && table.contains("blocked"), "{table}");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"routing": "cli", "tasks": {"a": {"requires": ["a"], "task": {"payload": {}}}}}"#)
        .unwrap();
    let out =
        shoal().args(["graph", "submit", bad.to_str().unwrap()]).env("SHOAL_ROOT_URL", &root).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cycle: a -> a"), "the server's reason reaches the user: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_dry_run_lists_what_the_next_sweep_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut first, root) = server(&data).await;
    let client = support::client(&root);
    let task_id = slugid::nice();
    let now = shoal_client::now();
    let mut definition = support::plain_task("cli/expire");
    definition["deadline"] = serde_json::Value::from(now.plus_secs(1).to_string());
    definition["expires"] = definition["deadline"].clone();
    client.create_task(&task_id, &definition).await.unwrap();
    let claims = client.claim_work("cli/expire", "g", "w", 1, &serde_json::json!({})).await.unwrap();
    client.report(&task_id, claims[0].run_id, &shoal_client::Outcome::Completed).await.unwrap();
    // Stopped before the task expires, so that no sweep deletes it first.
    first.kill().await.unwrap();
    while shoal_client::now() <= now.plus_secs(1) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let data_dir = data.to_str().unwrap();
    let (code, listed) = verb(&root, &["expire", "--dry-run", "--data-dir", data_dir]).await;
    assert_eq!(code, 0, "{listed}");
    assert!(listed.contains(&format!("task {task_id} (1 run(s))")), "{listed}");
    let (code, refused) = verb(&root, &["expire", "--data-dir", data_dir]).await;
    assert_eq!(code, 1, "without --dry-run: {refused}");

    // The next server deletes it, and the next dry run has nothing to tell.
    let (_second, root) = server(&data).await;
    let client = support::client(&root);
    while client.task_status(&task_id).await.is_ok() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, listed) = verb(&root, &["expire", "--dry-run", "--data-dir", data_dir]).await;
    assert!(listed.contains("0 task(s)"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_verbs_list_show_quarantine_release_and_terminate() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, root) = server(&dir.path().join("data")).await;
    let mut worker = shoal()
        .args(["worker", "--queue", "cli/fleet", "--worker-id", "box1", "--dimension", "os=Linux", "--root-url", &root])
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .spawn()
        .unwrap();
    let client = support::client(&root);
    let task_id = slugid::nice();
    client.create_task(&task_id, &support::plain_task("cli/fleet")).await.unwrap();
    // The worker's first claim records it (and runs the task).
    let status = loop {
        let status = client.task_status(&task_id).await.unwrap();
        if status.state.is_resolved() {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(status.runs[0].worker_id.as_deref(), Some("box1"));

    let (code, table) = verb(&root, &["workers", "list", "--queue", "cli/fleet"]).await;
    assert_eq!(code, 0, "{table}");
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("WORKER"), "{table}");
    let row = lines.next().unwrap();
    assert!(row.starts_with("local/box1") && row.contains("idle") && row.contains("os=Linux"), "{table}");
    let (_, none) = verb(&root, &["workers", "list", "--queue", "cli/fleet", "--dimension", "os:Mac", "--json"]).await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&none).unwrap()["workers"], serde_json::json!([]));

    let (code, shown) = verb(&root, &["workers", "show", "--queue", "cli/fleet", "box1"]).await;
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains(&format!("{task_id}/0")) && shown.contains("first-seen"), "{shown}");

    let quarantine =
        ["workers", "quarantine", "--queue", "cli/fleet", "box1", "--for", "2h", "--reason", "disk", "--json"];
    let (code, out) = verb(&root, &quarantine).await;
    assert_eq!(code, 0, "{out}");
    let record: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (record["state"].as_str(), record["quarantineDetails"][0]["quarantineInfo"].as_str()),
        (Some("quarantined"), Some("disk"))
    );
    let (_, out) = verb(&root, &["workers", "release", "--queue", "cli/fleet", "box1", "--json"]).await;
    assert_ne!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["state"], "quarantined", "{out}");

    let (code, out) =
        verb(&root, &["workers", "maintain", "--queue", "cli/fleet", "box1", "--reason", "reimage"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("state:        maintenance") && out.contains("maintenance:  reimage (by root"), "{out}");
    let (_, out) = verb(&root, &["workers", "resume", "--queue", "cli/fleet", "box1", "--json"]).await;
    assert_ne!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["state"], "maintenance", "{out}");

    let (code, out) = verb(&root, &["workers", "terminate", "--queue", "cli/fleet", "box1"]).await;
    assert_eq!(code, 0, "{out}");
    let exit = worker.wait().await.unwrap();
    assert!(exit.success(), "the worker exits when told: {exit:?}");
    let (code, _) = verb(&root, &["workers", "show", "--queue", "cli/fleet", "nobody"]).await;
    assert_ne!(code, 0, "an unknown worker is an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_given_one_queue_twice_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = shoal()
        .args(["worker", "--queue", "cli/a", "--queue", "cli/b", "--queue", "cli/a"])
        .args(["--work-dir", dir.path().to_str().unwrap(), "--isolation", "none"])
        .env("SHOAL_ROOT_URL", "http://127.0.0.1:9")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("--queue: taskQueueIds[2]: `cli/a` is listed twice"), "{stderr}");
}

/// `shoal secrets set|get|list`, `shoal hooks trigger` and `shoal index find`, as a person
/// wires a project: a secret from standard input, a hook fired, its task indexed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_verbs_set_secrets_trigger_hooks_and_find_indexed_tasks() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let (_server, root) = server(&dir.path().join("data")).await;

    let mut set = shoal()
        .args(["secrets", "set", "project/cli/token", "--expires-in", "1h"])
        .env("SHOAL_ROOT_URL", &root)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin.take().unwrap().write_all(br#"{"token": "s3cr3t"}"#).await.unwrap();
    assert!(set.wait().await.unwrap().success());
    let (code, out) = verb(&root, &["secrets", "get", "project/cli/token"]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["secret"]["token"], "s3cr3t");
    let (code, out) = verb(&root, &["secrets", "list"]).await;
    assert_eq!((code, out.trim()), (0, "project/cli/token"));

    // A hook whose task is indexed once it completes.
    let http = reqwest::Client::new();
    let role = format!("{root}/api/auth/v1/roles/hook-id:cli%2Fnightly");
    let scopes = serde_json::json!({"description": "d", "scopes": ["queue:create-task:*", "queue:scheduler-id:*", "queue:route:index.cli.*"]});
    assert!(
        support::signed(&http, reqwest::Method::PUT, &role, Some(&scopes)).send().await.unwrap().status().is_success()
    );
    let hook = serde_json::json!({
        "metadata": {"name": "n", "description": "d", "owner": "o@example.com"},
        "task": {"taskQueueId": "cli/hooked", "routes": ["index.cli.nightly.latest"], "payload": {"command": ["true"], "maxRunTime": 30},
                 "metadata": {"name": "hooked", "description": "d", "owner": "o", "source": "https://x"}},
        "triggerSchema": {"type": "object", "properties": {"why": {"type": "string"}}},
    });
    let url = format!("{root}/api/hooks/v1/hooks/cli/nightly");
    assert!(
        support::signed(&http, reqwest::Method::PUT, &url, Some(&hook)).send().await.unwrap().status().is_success()
    );
    let (code, out) = verb(&root, &["hooks", "trigger", "cli/nightly", r#"{"why": 3}"#]).await;
    assert_ne!(code, 0, "a payload the trigger schema refuses: {out}");
    let (code, out) = verb(&root, &["hooks", "trigger", "cli/nightly", r#"{"why": "nightly"}"#]).await;
    assert_eq!(code, 0, "{out}");
    let task_id = out.trim().to_owned();
    assert!(shoal_engine::TaskId::parse(&task_id).is_some(), "{out}");

    let (code, _) = verb(&root, &["index", "find", "cli.nightly.latest"]).await;
    assert_ne!(code, 0, "not indexed before it completes");
    let _worker = shoal()
        .args(["worker", "--queue", "cli/hooked", "--root-url", &root, "--isolation", "none", "--work-dir"])
        .arg(dir.path().join("work"))
        .spawn()
        .unwrap();
    // The hook's task is its own group (Taskcluster's default): wait for it.
    let (code, out) = verb(&root, &["group", "wait", &task_id]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = verb(&root, &["index", "find", "cli.nightly.latest"]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["taskId"], task_id.as_str());
}
