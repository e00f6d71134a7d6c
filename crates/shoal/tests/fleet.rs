//! The fleet end to end: real `shoal worker` processes in the worker registry; quarantine,
//! terminate, a worker killed mid-task found missing, and cancels reaching the process at once.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const QUEUE: &str = "fleet/linux";
const WORKERS: &str = "/provisioners/fleet/worker-types/linux/workers";
/// Shoal's fleet view of the same workers (with `state`, `dimensions` ...).
const FLEET: &str = "/task-queues/fleet/linux/workers";

struct Server {
    _child: Child,
    root: String,
    api: String,
}

/// A server whose claims hold for 20 minutes (Taskcluster's default): only the worker's
/// silence or the event stream can end a run early.
async fn server(data_dir: &Path) -> Server {
    let (child, root) = support::start_server(data_dir, &["--worker-dead-after", "3"]).await;
    let api = format!("{root}/api/queue/v1");
    Server { _child: child, root, api }
}

fn worker(root: &str, id: &str, work_dir: &Path, log: &str) -> Child {
    worker_with(root, id, work_dir, log, &[])
}

fn worker_with(root: &str, id: &str, work_dir: &Path, log: &str, more: &[&str]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shoal"));
    command
        .args(["worker", "--root-url", root, "--queue", QUEUE, "--worker-id", id, "--grace", "2"])
        .args(more)
        .args(["--dimension", "os=Linux", "--dimension", "os=Ubuntu", "--dimension", "pool=ci", "--work-dir"])
        .arg(work_dir)
        .env("SHOAL_LOG", log)
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    support::as_root(&mut command).spawn().unwrap()
}

async fn call(server: &Server, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let url = format!("{}{path}", server.api);
    let res = support::signed(&reqwest::Client::new(), method, &url, body.as_ref()).send().await.unwrap();
    let status = res.status();
    let body: Value = res.json().await.unwrap();
    assert!(status.is_success(), "{path}: {body}");
    body
}

async fn get(server: &Server, path: &str) -> Value {
    call(server, reqwest::Method::GET, path, None).await
}

async fn create(server: &Server, payload: Value) -> String {
    let task_id = slugid::nice();
    let mut definition = support::plain_task(QUEUE);
    definition["payload"] = payload;
    call(server, reqwest::Method::PUT, &format!("/task/{task_id}"), Some(definition)).await;
    task_id
}

async fn status(server: &Server, task_id: &str) -> Value {
    let status = get(server, &format!("/task/{task_id}/status")).await["status"].clone();
    support::with_result(status, &get(server, &format!("/task/{task_id}/result")).await)
}

/// Waits (bounded) until `check` holds for the task's status; the workers report over HTTP,
/// so the status is the event to wait for.
async fn until_status(server: &Server, task_id: &str, check: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..1200 {
        let status = status(server, task_id).await;
        if check(&status) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task_id} never got there: {}", status(server, task_id).await);
}

/// Waits (bounded) until worker `id`'s record satisfies `check`.
async fn until_worker(server: &Server, id: &str, check: impl Fn(&Value) -> bool) -> Value {
    let url = format!("{}{FLEET}/local/{id}", server.api);
    for _ in 0..1200 {
        let res = support::signed(&reqwest::Client::new(), reqwest::Method::GET, &url, None).send().await.unwrap();
        let record: Value = res.json().await.unwrap();
        if check(&record) {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("worker {id} never got there");
}

fn resolved(status: &Value) -> bool {
    ["completed", "failed", "exception"].contains(&status["state"].as_str().unwrap_or(""))
}

fn gated(gate: &Path) -> Value {
    json!({
        "command": ["while [ ! -f \"$GATE\" ]; do sleep 0.05; done; echo through"],
        "env": {"GATE": gate.to_string_lossy()},
        "maxRunTime": 120
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_registered_quarantined_and_terminated() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let mut w1 = worker(&server.root, "w1", &dir.path().join("work"), "warn");
    let first = create(&server, json!({"command": ["true"], "maxRunTime": 30})).await;
    let ran = until_status(&server, &first, resolved).await;

    let record = get(&server, &format!("{FLEET}/local/w1")).await;
    // `id` is every worker's own, unasked (Swarming's bots have it).
    let dimensions = json!({"id": ["w1"], "os": ["Linux", "Ubuntu"], "pool": ["ci"]});
    assert_eq!(record["dimensions"], dimensions, "{record}");
    assert_eq!(record["recentTasks"][0]["taskId"], json!(first), "{record}");
    assert_eq!(record["version"], env!("CARGO_PKG_VERSION"), "{record}");
    // The run keeps what its worker had when it claimed (Swarming's bot_dimensions).
    assert_eq!(ran["runs"][0]["workerDimensions"], dimensions, "{ran}");
    assert_eq!(ran["runs"][0]["workerVersion"], env!("CARGO_PKG_VERSION"), "{ran}");
    let listed = get(&server, &format!("{WORKERS}?dimension=os:Ubuntu&dimension=pool:ci")).await;
    assert_eq!(listed["workers"][0]["workerId"], "w1", "{listed}");

    // Quarantined, it takes nothing; released, it runs what waited.
    call(
        &server,
        reqwest::Method::PUT,
        &format!("{WORKERS}/local/w1"),
        Some(json!({"quarantineUntil": "2100-01-01T00:00:00.000Z"})),
    )
    .await;
    let held = create(&server, json!({"command": ["true"], "maxRunTime": 30})).await;
    assert_eq!(status(&server, &held).await["state"], "pending");
    let now = shoal_engine::Timestamp(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64,
    );
    call(
        &server,
        reqwest::Method::PUT,
        &format!("{WORKERS}/local/w1"),
        Some(json!({"quarantineUntil": now.to_string()})),
    )
    .await;
    let done = until_status(&server, &held, resolved).await;
    assert_eq!(done["runs"][0]["workerId"], "w1", "{done}");

    // Asked to terminate, it finishes its task, takes no more and exits.
    // In the task directory: the only place outside its sandbox the task sees.
    let gate = dir.path().join("work/slot-0/gate");
    let last = create(&server, gated(&gate)).await;
    until_status(&server, &last, |status| status["state"] == "running").await;
    call(&server, reqwest::Method::POST, &format!("{WORKERS}/local/w1/terminate"), Some(json!({}))).await;
    let after = create(&server, json!({"command": ["true"], "maxRunTime": 30})).await;
    std::fs::write(&gate, b"go").unwrap();
    let exit = w1.wait().await.unwrap();
    assert!(exit.success(), "exits cleanly: {exit:?}");
    assert_eq!(status(&server, &last).await["state"], "completed", "its task finished first");
    assert_eq!(status(&server, &after).await["state"], "pending", "it took nothing more");
    let record = get(&server, &format!("{FLEET}/local/w1")).await;
    assert_eq!(record["state"], "terminated", "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_is_missing_and_its_task_runs_elsewhere_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let mut doomed = worker(&server.root, "doomed", &dir.path().join("work1"), "warn");
    let task_id = create(&server, json!({"command": ["sleep 2; echo survived"], "maxRunTime": 60})).await;
    let running = until_status(&server, &task_id, |status| status["state"] == "running").await;
    doomed.start_kill().unwrap();
    doomed.wait().await.unwrap();
    let _heir = worker(&server.root, "heir", &dir.path().join("work2"), "warn");
    let done =
        until_status(&server, &task_id, |status| resolved(status) && status["runs"].as_array().unwrap().len() == 2)
            .await;
    assert_eq!(done["runs"][0]["reasonResolved"], "claim-expired", "{done}");
    assert_eq!(done["runs"][1]["workerId"], "heir", "{done}");
    assert_eq!(done["state"], "completed", "{done}");
    // Its claim held for 20 minutes: the worker's silence ended the run, not takenUntil.
    let ended = shoal_engine::Timestamp::parse(done["runs"][0]["resolved"].as_str().unwrap()).unwrap();
    let taken_until = shoal_engine::Timestamp::parse(running["runs"][0]["takenUntil"].as_str().unwrap()).unwrap();
    assert!(ended < taken_until, "{done}");
    let record = get(&server, &format!("{FLEET}/local/doomed")).await;
    assert_eq!(record["state"], "missing", "{record}");
    let events = get(&server, &format!("{WORKERS}/local/doomed/events")).await;
    assert!(events["events"].as_array().unwrap().iter().any(|e| e["kind"] == "missing"), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_running_process_through_the_event_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let mut w = worker(&server.root, "w", &dir.path().join("work"), "info");
    let mut lines = BufReader::new(w.stderr.take().unwrap()).lines();
    let task_id = create(&server, json!({"command": ["exec sleep 348"], "maxRunTime": 600})).await;
    until_status(&server, &task_id, |status| status["state"] == "running").await;
    let pid = loop {
        if let Some(pid) = support::pid_with_argv(&["sleep", "348"]) {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    call(&server, reqwest::Method::POST, &format!("/task/{task_id}/cancel"), None).await;
    // The worker says how it learned: from the event stream, not a refused reclaim (the
    // first reclaim of a 20-minute claim comes after 15 s).
    loop {
        let line = lines.next_line().await.unwrap().expect("the worker's log ended");
        assert!(!line.contains("canceled or expired"), "learned by reclaim: {line}");
        if line.contains("ended by an exception") {
            break;
        }
    }
    let alive = |pid: i32| Path::new(&format!("/proc/{pid}")).exists();
    for _ in 0..200 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "the canceled task's process is gone");
    assert_eq!(status(&server, &task_id).await["runs"][0]["reasonResolved"], "canceled", "nothing else was reported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_slice_runs_its_own_command() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _w = worker(&server.root, "w", &dir.path().join("work"), "warn");
    let task_id = slugid::nice();
    let mut definition = support::plain_task(QUEUE);
    // No Mac worker comes within the first slice's second; the Linux slice runs its own command.
    definition["payload"] = json!({"command": ["exit 7"], "maxRunTime": 30});
    definition["slices"] = json!([
        {"dimensions": {"os": ["Mac"]}, "expiresAfter": 1, "waitForCapacity": true},
        {"dimensions": {"os": ["Linux"]}, "expiresAfter": 600, "payload": {"command": ["exit 0"], "maxRunTime": 30}}
    ]);
    call(&server, reqwest::Method::PUT, &format!("/task/{task_id}"), Some(definition)).await;
    let done = until_status(&server, &task_id, resolved).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["runs"][0]["slice"]["index"], 1, "{done}");
    assert_eq!(done["runs"][0]["stats"]["exitCode"], 0, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_health_check_holds_the_worker_in_maintenance_until_it_passes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let sick = dir.path().join("sick");
    std::fs::write(&sick, b"").unwrap();
    let check = format!("test ! -e {} || {{ echo 'disk is sick' >&2; exit 1; }}", sick.display());
    let more = ["--health-check", check.as_str(), "--health-check-every", "1"];
    let mut w = worker_with(&server.root, "w", &dir.path().join("work"), "warn", &more);
    let record = until_worker(&server, "w", |record| record["state"] == "maintenance").await;
    let message = record["maintenance"]["message"].as_str().unwrap();
    assert!(message.starts_with("health check failed") && message.ends_with("disk is sick"), "{record}");
    let task_id = create(&server, json!({"command": ["true"], "maxRunTime": 30})).await;
    assert_eq!(status(&server, &task_id).await["state"], "pending", "claimed nothing");

    std::fs::remove_file(&sick).unwrap();
    let done = until_status(&server, &task_id, resolved).await;
    assert_eq!(done["state"], "completed", "{done}");
    let record = get(&server, &format!("{FLEET}/local/w")).await;
    assert!(record.get("maintenance").is_none(), "{record}");

    // Stopped by a signal, it says it shut down: exited, not missing.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(w.id().unwrap() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    assert!(w.wait().await.unwrap().success());
    let events = get(&server, &format!("{WORKERS}/local/w/events")).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "shutdown", "{events}");
    assert!(kinds.contains(&"maintenance") && kinds.contains(&"maintenance-ended"), "{events}");
    assert_eq!(get(&server, &format!("{FLEET}/local/w")).await["state"], "terminated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_serves_two_queues_as_one_machine() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let mut w = worker_with(&server.root, "box", &dir.path().join("work"), "warn", &["--queue", "fleet/mac"]);
    let on_linux = create(&server, json!({"command": ["true"], "maxRunTime": 30})).await;
    let on_mac = slugid::nice();
    let mut definition = support::plain_task("fleet/mac");
    definition["payload"] = json!({"command": ["true"], "maxRunTime": 30});
    call(&server, reqwest::Method::PUT, &format!("/task/{on_mac}"), Some(definition)).await;
    for task_id in [&on_linux, &on_mac] {
        let done = until_status(&server, task_id, resolved).await;
        assert_eq!((done["state"].as_str(), done["runs"][0]["workerId"].as_str()), (Some("completed"), Some("box")));
    }
    let mac_workers = "/provisioners/fleet/worker-types/mac/workers";
    for record in [
        get(&server, &format!("{FLEET}/local/box")).await,
        get(&server, "/task-queues/fleet/mac/workers/local/box").await,
    ] {
        assert_eq!(record["taskQueueIds"], json!([QUEUE, "fleet/mac"]), "{record}");
    }
    // Killed, it is missing in both queues, once each.
    w.start_kill().unwrap();
    w.wait().await.unwrap();
    let fleet = |queue: &str| format!("/task-queues/{queue}/workers/local/box");
    for (path, queue) in [(format!("{WORKERS}/local/box"), QUEUE), (format!("{mac_workers}/local/box"), "fleet/mac")] {
        // Marked missing (the event), not just listed as silent (the state).
        let missing =
            |events: &Value| events["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "missing").count();
        let events = loop {
            let events = get(&server, &format!("{path}/events")).await;
            if missing(&events) > 0 {
                break events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(missing(&events), 1, "{events}");
        assert_eq!(get(&server, &fleet(queue)).await["state"], "missing");
    }
}
