//! The worker end to end: a real `shoal server` and real `shoal worker` processes running
//! real shell commands.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::worker::{create, definition, log_of, resolved, server, status, worker, worker_with};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_follow_exit_codes_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker(&server.root, "e2e/outcomes", "w1", &dir.path().join("work"));

    let ok =
        create(&server, "e2e/outcomes", json!({"command": [["sh", "-c", "echo all good"]], "maxRunTime": 30})).await;
    let failing =
        create(&server, "e2e/outcomes", json!({"command": ["echo about to fail; exit 3"], "maxRunTime": 30})).await;
    let slow = create(&server, "e2e/outcomes", json!({"command": ["echo sleeping; sleep 30"], "maxRunTime": 1})).await;
    let flaky = create(
        &server,
        "e2e/outcomes",
        json!({
            "command": ["if [ \"$RUN_ID\" = 0 ]; then exit 75; fi; echo second time lucky"],
            "maxRunTime": 30,
            "onExitStatus": {"retry": [75]}
        }),
    )
    .await;
    let malformed = create(&server, "e2e/outcomes", json!({"command": "not a list", "maxRunTime": 30})).await;
    let silent = create(
        &server,
        "e2e/outcomes",
        json!({"command": ["echo one line; sleep 30"], "maxRunTime": 60, "ioTimeout": 1}),
    )
    .await;

    let status = resolved(&server, &ok, 1).await;
    assert_eq!(status["state"], "completed");
    let live = log_of(&server, &ok, 0).await;
    assert!(live.contains("all good\n"));
    // The whole log is also a blob like any artifact (generic-worker's name).
    let url = format!("{}/task/{ok}/runs/0/artifacts/public/logs/live_backing.log", server.api);
    let backing = reqwest::get(url).await.unwrap();
    assert_eq!(backing.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(backing.text().await.unwrap(), live, "the uploaded log is the live one, whole");

    let status = resolved(&server, &failing, 1).await;
    assert_eq!(status["state"], "failed");
    assert!(log_of(&server, &failing, 0).await.contains("command 0 exited with code 3"));

    let status = resolved(&server, &slow, 1).await;
    assert_eq!(status["state"], "failed");
    assert!(log_of(&server, &slow, 0).await.contains("maxRunTime of 1 s exceeded"), "the log says why");
    assert_eq!(status["runs"][0]["stats"]["timedOut"], "maxRunTime", "and the stats: {status}");
    assert_eq!(status["runs"][0]["reasonResolved"], "failed", "Taskcluster's reason stays");

    let status = resolved(&server, &flaky, 2).await;
    assert_eq!(status["runs"][0]["reasonResolved"], "intermittent-task");
    assert_eq!(status["runs"][1]["reasonCreated"], "task-retry");
    assert_eq!(status["state"], "completed");

    let status = resolved(&server, &malformed, 1).await;
    assert_eq!(status["runs"][0]["reasonResolved"], "malformed-payload");
    assert!(log_of(&server, &malformed, 0).await.contains("payload.command"), "the log names the field");
    let malformed_log = format!("{}/task/{malformed}/runs/0/artifacts/public/logs/live_backing.log", server.api);
    let res = reqwest::get(malformed_log).await.unwrap();
    assert!(res.status().is_success() && res.text().await.unwrap().contains("payload.command"), "a refused run's too");

    let status = resolved(&server, &silent, 1).await;
    assert_eq!(status["state"], "failed");
    assert!(log_of(&server, &silent, 0).await.contains("no output for 1 s"), "the log says why");
    assert_eq!(status["runs"][0]["stats"]["timedOut"], "ioTimeout", "{status}");
    let status = resolved(&server, &failing, 1).await;
    assert!(status["runs"][0]["stats"].get("timedOut").is_none(), "a plain failure did not time out: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_running_tasks_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let mut leaving = worker(&server.root, "e2e/term", "leaving", &dir.path().join("work1"));
    let task_id = create(&server, "e2e/term", json!({"command": ["echo started; sleep 300"], "maxRunTime": 600})).await;
    // Its process writing, not the run showing as running: a reader may see the claim
    // before the claim's answer has reached the worker.
    while !log_of(&server, &task_id, 0).await.contains("started") {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = nix::unistd::Pid::from_raw(leaving.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let exit = leaving.wait().await.unwrap();
    assert!(exit.success(), "the worker shuts down cleanly: {exit:?}");
    let status = status(&server, &task_id).await;
    assert_eq!(status["runs"][0]["reasonResolved"], "worker-shutdown", "{status}");
    assert_eq!(status["runs"][1]["reasonCreated"], "retry", "handed back for another worker");
    assert_eq!(status["state"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_and_the_live_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker(&server.root, "e2e/art", "w1", &dir.path().join("work"));
    // In the task directory: the only place outside its sandbox the task sees.
    let gate = dir.path().join("work/slot-0/gate");
    let task_id = create(&server, "e2e/art", json!({
        "command": [
            "echo started",
            "while [ ! -f \"$GATE\" ]; do sleep 0.05; done",
            "mkdir -p dist/sub && head -c 100000 /dev/urandom > dist/sub/blob.bin && cp dist/sub/blob.bin copy.bin && echo finished"
        ],
        "env": {"GATE": gate.to_string_lossy()},
        "maxRunTime": 60,
        "artifacts": [
            {"type": "directory", "path": "dist", "name": "public/dist"},
            {"type": "file", "path": "copy.bin", "name": "public/copy.bin"},
            {"type": "file", "path": "never-made.txt", "name": "public/never.txt"}
        ]
    }))
    .await;

    // The live.log artifact points at a log that can be followed while the task runs.
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let live = loop {
        let res =
            client.get(format!("{}/task/{task_id}/artifacts/public/logs/live.log", server.api)).send().await.unwrap();
        if res.status() == reqwest::StatusCode::SEE_OTHER {
            break res.headers()["location"].to_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut follow = reqwest::get(&live).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("started\n") {
        let chunk = follow.chunk().await.unwrap().expect("the log ended before the task");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    std::fs::write(&gate, b"go").unwrap();
    while let Some(chunk) = follow.chunk().await.unwrap() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("finished\n"), "the followed log runs to the end: {seen}");

    let status = resolved(&server, &task_id, 1).await;
    assert_eq!(status["state"], "completed");
    let stats = &status["runs"][0]["stats"];
    assert_eq!(stats["bytesUploaded"], 200_000, "both files: {stats}");
    assert_eq!(stats["exitCode"], 0, "{stats}");
    for measured in ["setupMs", "runMs", "uploadMs"] {
        assert!(stats[measured].is_u64(), "{measured}: {stats}");
    }
    assert!(stats["peakMemoryBytes"].as_u64().is_some_and(|bytes| bytes > 0), "{stats}");
    let get = |name: &str| {
        let url = format!("{}/task/{task_id}/artifacts/{name}", server.api);
        let client = client.clone();
        async move {
            let res = client.get(url).send().await.unwrap();
            (res.status(), res.headers().get("location").map(|l| l.to_str().unwrap().to_owned()))
        }
    };
    let (_, blob) = get("public/dist/sub/blob.bin").await;
    let (_, copy) = get("public/copy.bin").await;
    let blob = reqwest::get(blob.unwrap()).await.unwrap().bytes().await.unwrap();
    let copy = reqwest::get(copy.unwrap()).await.unwrap().bytes().await.unwrap();
    assert_eq!(blob.len(), 100_000);
    assert_eq!(blob, copy, "byte-exact");
    let (code, _) = get("public/never.txt").await;
    assert_eq!(code, reqwest::StatusCode::FAILED_DEPENDENCY, "a missing file becomes an error artifact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_process_and_a_dead_worker_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let mut doomed = worker(&server.root, "e2e/cancel", "doomed", &dir.path().join("work1"));
    // Found by its arguments: inside its sandbox the task has a PID namespace of its own.
    let long = create(&server, "e2e/cancel", json!({"command": ["exec sleep 347"], "maxRunTime": 600})).await;
    let running = || support::pid_with_argv(&["sleep", "347"]).is_some();
    while !running() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("{}/task/{long}/cancel", server.api);
    let res = support::signed(&reqwest::Client::new(), reqwest::Method::POST, &url, None).send().await.unwrap();
    assert!(res.status().is_success());
    // The worker hears of the cancel on the event stream (or at its next reclaim) and stops
    // the process group: SIGTERM, then SIGKILL after the 2 s grace.
    for _ in 0..200 {
        if !running() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!running(), "the canceled task's process is gone");
    assert_eq!(status(&server, &long).await["runs"][0]["reasonResolved"], "canceled", "nothing else was reported");

    // kill -9 the worker in the middle of a task: the claim expires and another worker retries it.
    let orphan = create(&server, "e2e/cancel", json!({"command": ["sleep 2; echo survived"], "maxRunTime": 60})).await;
    while status(&server, &orphan).await["state"] != "running" {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    doomed.start_kill().unwrap();
    doomed.wait().await.unwrap();
    let _heir = worker(&server.root, "e2e/cancel", "heir", &dir.path().join("work2"));
    let status = resolved(&server, &orphan, 2).await;
    assert_eq!(status["runs"][0]["reasonResolved"], "claim-expired");
    assert_eq!(status["runs"][1]["workerId"], "heir");
    assert_eq!(status["state"], "completed");
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() { pending.push(path) } else { found.push(path) }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_only_the_claiming_worker() {
    use sha2::Digest;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A data directory others may read, with a file left readable: the server tightens both.
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(data.join("left-over"), b"x").unwrap();
    std::fs::set_permissions(data.join("left-over"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = server(&data).await;
    let (worker_out, worker_err) = (dir.path().join("worker.out"), dir.path().join("worker.err"));
    let _worker = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["worker", "--root-url", &server.root, "--queue", "e2e/secret", "--worker-id", "w1", "--work-dir"])
        .arg(dir.path().join("work"))
        .env("SHOAL_LOG", "debug")
        .env("TASKCLUSTER_CLIENT_ID", "root")
        .env("TASKCLUSTER_ACCESS_TOKEN", support::ROOT_TOKEN)
        .stdout(std::fs::File::create(&worker_out).unwrap())
        .stderr(std::fs::File::create(&worker_err).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let exchanges = ["task-defined", "task-pending", "task-running", "artifact-created", "task-completed"];
    let bindings: Vec<(String, String)> =
        exchanges.iter().map(|name| (format!("exchange/taskcluster-queue/v1/{name}"), "#".to_owned())).collect();
    let mut stream = support::client(&server.root).listen(&bindings).await.unwrap();

    let secret = format!("sekrit-{}", slugid::nice());
    let file = json!({"token": secret}).to_string();
    let digest: String = sha2::Sha256::digest(file.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let mut seen = Vec::new();
    let task_id = slugid::nice();
    let mut body = definition(
        "e2e/secret",
        json!({
            "command": [format!(
                "test \"$(stat -c %a \"$SHOAL_SECRETS\")\" = 600 && test \"$(sha256sum < \"$SHOAL_SECRETS\" | cut -d' ' -f1)\" = {digest} && echo secrets-ok"
            )],
            "maxRunTime": 60,
            "artifacts": [{"type": "directory", "path": ".", "name": "public/all"}]
        }),
    );
    body["secrets"] = json!({"token": secret});
    let url = format!("{}/task/{task_id}", server.api);
    let http = reqwest::Client::new();
    let res = support::signed(&http, reqwest::Method::PUT, &url, Some(&body)).send().await.unwrap();
    assert!(res.status().is_success());
    seen.push(res.text().await.unwrap());
    // The completion message is the event to wait for; every message on the way is kept.
    loop {
        let message = stream.next_message().await.unwrap().expect("the stream goes on");
        seen.push(message.to_string());
        if message["exchange"].as_str().unwrap().ends_with("task-completed") {
            break;
        }
    }
    let log = log_of(&server, &task_id, 0).await;
    assert!(log.contains("secrets-ok"), "the task read its secrets from $SHOAL_SECRETS: {log}");
    seen.push(log);
    for path in [
        format!("/task/{task_id}"),
        format!("/task/{task_id}/status"),
        format!("/task/{task_id}/artifacts"),
        format!("/task-group/{task_id}/list"),
        "/pending/e2e%2Fsecret".to_owned(),
    ] {
        let res = reqwest::get(format!("{}{path}", server.api)).await.unwrap();
        seen.push(res.text().await.unwrap());
    }
    assert!(
        seen[seen.len() - 5].contains(r#""hasSecrets":true"#),
        "task() says it has secrets: {}",
        seen[seen.len() - 5]
    );
    // A bad definition's error quotes nothing of it.
    body["secrets"] = json!([secret]);
    let res =
        support::signed(&http, reqwest::Method::PUT, &format!("{}/task/{}", server.api, slugid::nice()), Some(&body));
    let res = res.send().await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::BAD_REQUEST);
    seen.push(res.text().await.unwrap());
    for text in &seen {
        assert!(!text.contains(&secret), "the secret leaked into {text}");
    }
    // Nor in any file the server or the worker wrote, but the secrets database.
    let mut files = files_under(&data);
    files.extend(files_under(&dir.path().join("work")));
    files.extend([worker_out, worker_err]);
    assert!(files.iter().any(|f| f.file_name().is_some_and(|n| n == "shoal.db")), "{files:?}");
    let mut kept_apart = false;
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let found = bytes.windows(secret.len()).any(|window| window == secret.as_bytes());
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("secrets.db") {
            kept_apart |= found;
        } else {
            assert!(!found, "the secret is in {}", file.display());
        }
    }
    assert!(kept_apart, "the secrets database holds it");
    // Everything the server keeps is its user's alone: the database, its WAL, the secrets,
    // blobs and logs.
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let mut dirs = vec![data.clone()];
    while let Some(current) = dirs.pop() {
        assert_eq!(mode(&current), 0o700, "{}", current.display());
        for entry in std::fs::read_dir(&current).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
            }
        }
    }
    let files = files_under(&data);
    for kept in ["shoal.db", "shoal.db-wal", "secrets.db", "left-over"] {
        assert!(files.iter().any(|f| f.file_name().is_some_and(|n| n == kept)), "{kept} in {files:?}");
    }
    assert!(files.iter().any(|f| f.starts_with(data.join("blobs"))), "an artifact's bytes: {files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_sees_none_of_the_workers_environment() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let canary = format!("canary-{}", slugid::nice());
    let _worker = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["worker", "--root-url", &server.root, "--queue", "e2e/env", "--worker-id", "w1", "--work-dir"])
        .arg(dir.path().join("work"))
        .env("SHOAL_LOG", "warn")
        .env("TASKCLUSTER_CLIENT_ID", "root")
        .env("TASKCLUSTER_ACCESS_TOKEN", support::ROOT_TOKEN)
        .env("WORKER_ONLY_SETTING", &canary)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let task_id = create(
        &server,
        "e2e/env",
        json!({"command": [["sh", "-c", "env; echo home=$HOME pwd=$(pwd)"]], "maxRunTime": 30, "env": {"MINE": "given"}}),
    )
    .await;
    let status = resolved(&server, &task_id, 1).await;
    assert_eq!(status["state"], "completed");
    let log = log_of(&server, &task_id, 0).await;
    for leaked in
        [support::ROOT_TOKEN, canary.as_str(), "TASKCLUSTER_ACCESS_TOKEN", "TASKCLUSTER_CLIENT_ID", "SHOAL_LOG"]
    {
        assert!(!log.contains(leaked), "the task saw {leaked}: {log}");
    }
    let names: Vec<&str> = log.lines().filter_map(|line| line.split_once('=').map(|(name, _)| name)).collect();
    for given in ["PATH", "HOME", "LANG", "TASK_ID", "RUN_ID", "TASKCLUSTER_ROOT_URL", "MINE"] {
        assert!(names.contains(&given), "the task was given {given}: {log}");
    }
    // Nothing beyond what docs/security.md lists (and what the shell sets for itself).
    let listed = [
        "PATH",
        "LANG",
        "HOME",
        "USER",
        "TASK_ID",
        "RUN_ID",
        "TASK_GROUP_ID",
        "TASK_WORKDIR",
        "TASKCLUSTER_ROOT_URL",
        "TASKCLUSTER_WORKER_GROUP",
        "TASKCLUSTER_WORKER_ID",
        "TASKCLUSTER_PROXY_URL",
        "SHOAL_SECRETS",
        "MINE",
    ];
    let shell = ["PWD", "OLDPWD", "SHLVL", "_"];
    let beyond: Vec<&&str> =
        names.iter().filter(|name| !listed.contains(name) && !shell.contains(name) && **name != "home").collect();
    assert!(beyond.is_empty(), "the task was given {beyond:?}: {log}");
    assert!(log.contains(&format!("TASK_ID={task_id}\n")), "{log}");
    assert!(log.contains(&format!("TASKCLUSTER_ROOT_URL={}\n", server.root)), "{log}");
    let pwd = log.lines().find_map(|line| line.strip_prefix("home=")).expect("the last line");
    let (home, pwd) = pwd.split_once(" pwd=").unwrap();
    assert_eq!(home, pwd, "HOME is the task directory");
}

/// The contained task: everything a pull request's test might try, each answered by the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_task_sees_only_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let work = dir.path().join("work");
    // What a task must not see: a file of the worker's, another slot's directory, a file
    // beside the work directory.
    std::fs::create_dir_all(work.join("slot-1")).unwrap();
    std::fs::write(work.join("slot-1/theirs.txt"), "theirs").unwrap();
    std::fs::write(work.join("worker-config.toml"), "token = 'x'").unwrap();
    std::fs::write(dir.path().join("beside.txt"), "beside").unwrap();
    let _worker = worker_with(&server.root, "e2e/box", "w1", &work, &["--capacity", "2"]);
    let probe = format!("/etc/shoal-probe-{}", slugid::nice());
    let task_id = create(
        &server,
        "e2e/box",
        json!({
            "command": [[
                "sh", "-c",
                "test -e \"$WORK/worker-config.toml\" && echo SAW-CONFIG; \
                 test -e \"$WORK/slot-1/theirs.txt\" && echo SAW-OTHER-SLOT; \
                 test -e \"$BESIDE\" && echo SAW-BESIDE; \
                 echo processes $(ls /proc | grep -c '^[0-9]'); \
                 touch \"$PROBE\" 2>/dev/null && echo WROTE-ETC; \
                 touch \"$WORK/../escaped\" 2>/dev/null; \
                 echo t > /tmp/probe && echo tmp-writable; \
                 echo h > \"$HOME/out.txt\" && echo home-writable; \
                 echo uid $(id -u)"
            ]],
            "env": {"WORK": work.to_string_lossy(), "BESIDE": dir.path().join("beside.txt").to_string_lossy(), "PROBE": probe},
            "maxRunTime": 60
        }),
    )
    .await;
    assert_eq!(resolved(&server, &task_id, 1).await["state"], "completed");
    let log = log_of(&server, &task_id, 0).await;
    for seen in ["SAW-CONFIG", "SAW-OTHER-SLOT", "SAW-BESIDE", "WROTE-ETC"] {
        assert!(!log.contains(seen), "{seen}: {log}");
    }
    assert!(log.contains("tmp-writable\n") && log.contains("home-writable\n"), "{log}");
    let processes: usize = log.split("processes ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(processes < 10, "the task sees only its own processes, not the worker's: {processes}\n{log}");
    assert!(!dir.path().join("escaped").exists(), "nothing was written outside the task directory");
    assert!(!std::path::Path::new(&probe).exists());
    let uid: u32 = log.split("uid ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    if nix::unistd::geteuid().is_root() {
        assert!(uid >= shoal_worker::SLOT_UID_BASE, "a root worker's task runs as its slot's own user: {uid}");
    } else {
        assert_eq!(uid, nix::unistd::geteuid().as_raw(), "an unprivileged worker's task runs as the worker");
    }
}

/// `payload.network: false`: the task reaches nothing, not even the server on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_a_task_cannot_reach_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker(&server.root, "e2e/net", "w1", &dir.path().join("work"));
    let port = server.root.rsplit(':').next().unwrap().to_owned();
    // bash's /dev/tcp: a connection from a shell, with nothing to install.
    let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo 'reached the server'");
    let online = create(&server, "e2e/net", json!({"command": [["bash", "-c", probe]], "maxRunTime": 60})).await;
    let offline =
        create(&server, "e2e/net", json!({"command": [["bash", "-c", probe]], "maxRunTime": 60, "network": false}))
            .await;
    let state = resolved(&server, &online, 1).await["state"].clone();
    let online_log = log_of(&server, &online, 0).await;
    assert_eq!(state, "completed", "{online_log}");
    assert!(online_log.contains("reached the server"), "{online_log}");
    assert_eq!(resolved(&server, &offline, 1).await["state"], "failed");
    assert!(!log_of(&server, &offline, 0).await.contains("reached the server"));
}

/// Two tasks running at once, in two slots, run as two users when the worker is root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_run_as_different_users() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "e2e/uid", "w1", &dir.path().join("work"), &["--capacity", "2"]);
    let task = json!({"command": ["echo uid $(id -u); sleep 3"], "maxRunTime": 60});
    let (first, second) = (create(&server, "e2e/uid", task.clone()).await, create(&server, "e2e/uid", task).await);
    let mut uids = Vec::new();
    for task_id in [&first, &second] {
        assert_eq!(resolved(&server, task_id, 1).await["state"], "completed");
        let log = log_of(&server, task_id, 0).await;
        uids.push(log.split("uid ").nth(1).unwrap().split_whitespace().next().unwrap().parse::<u32>().unwrap());
    }
    let overlapped = {
        let started = |status: &Value| status["runs"][0]["started"].as_str().unwrap().to_owned();
        let resolved_at = |status: &Value| status["runs"][0]["resolved"].as_str().unwrap().to_owned();
        let (a, b) = (status(&server, &first).await, status(&server, &second).await);
        started(&b) < resolved_at(&a) && started(&a) < resolved_at(&b)
    };
    assert!(overlapped, "the two tasks ran at once");
    if nix::unistd::geteuid().is_root() {
        assert_ne!(uids[0], uids[1], "two slots, two users");
        assert!(uids.iter().all(|uid| *uid >= shoal_worker::SLOT_UID_BASE), "{uids:?}");
    } else {
        assert_eq!(uids, [nix::unistd::geteuid().as_raw(); 2]);
    }
}
