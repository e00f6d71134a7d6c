//! The credentials proxy end to end (`payload.features.taskclusterProxy`): a real server and
//! worker, tasks calling the APIs through `TASKCLUSTER_PROXY_URL` with Python's standard
//! library, as a task's own tools would.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::worker::{create, log_of, resolved, server, status, worker_with};

/// A request with nothing but Python's standard library: `METHOD URL [JSON]`, printing the
/// status and body, or `refused` and why when no answer came.
const FETCH: &str = r#"
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as err:
    print(err.code, err.read().decode())
except OSError as err:
    print("refused", err)
"#;

/// What a request from this test's process got; as `uid` (and its gid), when given.
async fn fetch_as(uid: Option<u32>, method: &str, url: &str) -> String {
    let mut command = match uid {
        Some(uid) => {
            let mut command = tokio::process::Command::new("setpriv");
            command.args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "python3".into(),
            ]);
            // Where that user can find it (this process's PATH may lead through root's home).
            command.env("PATH", "/usr/local/bin:/usr/bin:/bin");
            command
        }
        None => tokio::process::Command::new("python3"),
    };
    let out = command.args(["-c", FETCH, method, url]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of `log` after `marker`.
fn after<'a>(log: &'a str, marker: &str) -> &'a str {
    log.split(marker).nth(1).and_then(|rest| rest.lines().next()).unwrap_or_else(|| panic!("{marker}: {log}"))
}

fn root_is_running_this() -> bool {
    nix::unistd::geteuid().is_root()
}

/// With network and without: the task's calls act with exactly its `scopes` (not the
/// worker's, not the run's own reclaim and resolve scopes); a call they do not allow is a
/// 403 and creates nothing; one they allow creates the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_acts_through_the_proxy_with_its_own_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "e2e/proxy", "w1", &dir.path().join("work"), &["--capacity", "2"]);
    let scopes = [
        "queue:create-task:lowest:e2e/made",
        "queue:create-task:project:none",
        "queue:scheduler-id:-",
        "secrets:get:e2e/deploy",
    ];
    // The Secrets service's secrets reach a task through the proxy too, by its scopes.
    let expires = shoal_client::now().plus_secs(3600).to_string();
    for name in ["e2e/deploy", "e2e/other"] {
        let url = format!("{}/api/secrets/v1/secret/{name}", server.root);
        let body = json!({"secret": {"key": format!("value-of-{name}")}, "expires": expires});
        let res =
            support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(&body)).send().await.unwrap();
        assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    }
    let mut runs = Vec::new();
    for network in [true, false] {
        let (allowed, refused) = (slugid::nice(), slugid::nice());
        let new_task = |queue: &str| support::worker::definition(queue, json!({"command": ["true"], "maxRunTime": 5}));
        let mut definition = support::worker::definition(
            "e2e/proxy",
            json!({
                "command": [
                    "echo \"env: $(env | grep -c TASKCLUSTER_ACCESS_TOKEN) token(s)\"",
                    "printf 'scopes: '; python3 -c \"$FETCH\" GET \"$TASKCLUSTER_PROXY_URL/api/auth/v1/scopes/current\"",
                    "printf 'refused: '; python3 -c \"$FETCH\" PUT \"$TASKCLUSTER_PROXY_URL/api/queue/v1/task/$REFUSED\" \"$REFUSED_BODY\"",
                    "printf 'allowed: '; python3 -c \"$FETCH\" PUT \"$TASKCLUSTER_PROXY_URL/api/queue/v1/task/$ALLOWED\" \"$ALLOWED_BODY\"",
                    "printf 'secret: '; python3 -c \"$FETCH\" GET \"$TASKCLUSTER_PROXY_URL/api/secrets/v1/secret/e2e/deploy\"",
                    "printf 'not hers: '; python3 -c \"$FETCH\" GET \"$TASKCLUSTER_PROXY_URL/api/secrets/v1/secret/e2e/other\"",
                    "printf 'elsewhere: '; python3 -c \"$FETCH\" GET \"$TASKCLUSTER_PROXY_URL/api/notify/v1/ping\"",
                ],
                "env": {
                    "FETCH": FETCH,
                    "ALLOWED": allowed,
                    "ALLOWED_BODY": new_task("e2e/made").to_string(),
                    "REFUSED": refused,
                    "REFUSED_BODY": new_task("e2e/forbidden").to_string(),
                },
                "features": {"taskclusterProxy": true},
                "network": network,
                "maxRunTime": 60
            }),
        );
        definition["scopes"] = json!(scopes);
        let task_id = slugid::nice();
        let url = format!("{}/task/{task_id}", server.api);
        let res = support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(&definition))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success(), "{}", res.text().await.unwrap());
        runs.push((network, task_id, allowed, refused));
    }
    for (network, task_id, allowed, refused) in runs {
        let state = resolved(&server, &task_id, 1).await["state"].clone();
        let log = log_of(&server, &task_id, 0).await;
        assert_eq!(state, "completed", "network {network}: {log}");
        assert!(log.contains("env: 0 token(s)"), "the task holds no credentials: {log}");
        let current: Value = serde_json::from_str(after(&log, "scopes: 200 ")).unwrap();
        let mut held: Vec<&str> = current["scopes"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        held.sort_unstable();
        // Every caller holds `assume:anonymous` (the anonymous role's scopes, none here).
        assert_eq!(held, [&["assume:anonymous"], &scopes[..]].concat(), "the task's scopes, network {network}");
        assert!(after(&log, "refused: ").starts_with("403 "), "network {network}: {log}");
        assert!(after(&log, "refused: ").contains("InsufficientScopes"), "{log}");
        assert!(after(&log, "allowed: ").starts_with("200 "), "network {network}: {log}");
        assert!(after(&log, "secret: ").starts_with("200 "), "network {network}: {log}");
        assert!(after(&log, "secret: ").contains("value-of-e2e/deploy"), "{log}");
        assert!(after(&log, "not hers: ").starts_with("403 "), "a secret its scopes do not name: {log}");
        assert!(!log.contains("value-of-e2e/other"), "{log}");
        assert!(after(&log, "elsewhere: ").starts_with("404 "), "only the APIs Shoal serves: {log}");
        assert_eq!(status(&server, &allowed).await["taskQueueId"], "e2e/made");
        let nothing = reqwest::get(format!("{}/task/{refused}", server.api)).await.unwrap();
        assert_eq!(nothing.status(), 404, "the refused task was not created");
    }
}

/// The proxy answers the run's own user while the run lives, and nobody after: not another
/// user with the URL while it runs (when the worker is root and slots have users of their
/// own), not even the task's user once the run has resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_serves_its_run_only_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let work = dir.path().join("work");
    let _worker = worker_with(&server.root, "e2e/proxy-life", "w1", &work, &[]);
    let gate = work.join("slot-0").join("go");
    let mut definition = support::worker::definition(
        "e2e/proxy-life",
        json!({
            "command": [
                "echo \"url: $TASKCLUSTER_PROXY_URL\"; echo \"uid: $(id -u)\"",
                "while [ ! -e go ]; do sleep 0.05; done",
            ],
            "features": {"taskclusterProxy": true},
            "maxRunTime": 60
        }),
    );
    definition["scopes"] = json!(["queue:get-artifact:private/*"]);
    let task_id = slugid::nice();
    let url = format!("{}/task/{task_id}", server.api);
    let res = support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(&definition)).send().await;
    assert!(res.unwrap().status().is_success());

    // The live log says where the proxy is, and as whom the task runs.
    let log = wait_for_log(&server, &task_id, "uid: ").await;
    let current = format!("{}/api/auth/v1/scopes/current", after(&log, "url: "));
    let uid: u32 = after(&log, "uid: ").trim().parse().unwrap();
    let as_task = root_is_running_this().then_some(uid);
    let answer = fetch_as(as_task, "GET", &current).await;
    assert!(answer.starts_with("200 ") && answer.contains("queue:get-artifact:private/*"), "{answer}");
    if root_is_running_this() {
        let other = fetch_as(Some(uid + 1), "GET", &current).await;
        assert!(other.starts_with("refused"), "another user is refused even with the URL: {other}");
        let root = fetch_as(None, "GET", &current).await;
        assert!(root.starts_with("refused"), "so is the worker's own user: {root}");
    }
    let wrong_path = current.replacen("/api/", "x/api/", 1);
    assert!(fetch_as(as_task, "GET", &wrong_path).await.starts_with("404 "), "the URL's path is the run's own");

    std::fs::write(&gate, "").unwrap();
    assert_eq!(resolved(&server, &task_id, 1).await["state"], "completed");
    let after_run = fetch_as(as_task, "GET", &current).await;
    assert!(after_run.starts_with("refused"), "the proxy stopped with the run: {after_run}");
}

/// Waits (bounded) until the run's live log holds `marker`; the log is how the task speaks.
async fn wait_for_log(server: &support::worker::Server, task_id: &str, marker: &str) -> String {
    for _ in 0..600 {
        let log = log_of(server, task_id, 0).await;
        if log.contains(marker) {
            return log;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{marker} never appeared in the log of {task_id}");
}

/// A worker that cannot honour `network: false` says so instead of running the task with
/// network: `--isolation none` has no namespace to take it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontained_worker_refuses_a_task_without_network() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let work: &Path = &dir.path().join("work");
    let _worker = worker_with(&server.root, "e2e/open", "w1", work, &["--isolation", "none"]);
    let task_id =
        create(&server, "e2e/open", json!({"command": ["echo ran"], "maxRunTime": 60, "network": false})).await;
    let status = resolved(&server, &task_id, 1).await;
    assert_eq!(status["state"], "exception");
    assert_eq!(status["runs"][0]["reasonResolved"], "malformed-payload");
    let log = log_of(&server, &task_id, 0).await;
    assert!(log.contains("payload.network") && !log.contains("\nran\n"), "{log}");
}

/// A path that climbs out of the three APIs with dot segments (plain, percent-encoded, or
/// with backslashes) is judged after they are resolved, as the server would read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_do_not_lead_the_proxy_out_of_the_apis() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "e2e/proxy-dots", "w1", &dir.path().join("work"), &[]);
    let climbs = ["/api/queue/v1/../../../metrics", "/api/queue/v1/%2e%2e/%2E%2e/%2e./metrics"];
    let commands: Vec<String> = climbs
        .iter()
        .enumerate()
        .map(|(idx, climb)| {
            format!("printf 'climb{idx}: '; python3 -c \"$FETCH\" GET \"$TASKCLUSTER_PROXY_URL{climb}\"")
        })
        .collect();
    let definition = support::worker::definition(
        "e2e/proxy-dots",
        json!({
            "command": commands,
            "env": {"FETCH": FETCH},
            "features": {"taskclusterProxy": true},
            "maxRunTime": 60
        }),
    );
    let task_id = support::worker::create_definition(&server, &definition).await;
    let state = resolved(&server, &task_id, 1).await["state"].clone();
    let log = log_of(&server, &task_id, 0).await;
    assert_eq!(state, "completed", "{log}");
    for idx in 0..climbs.len() {
        let answer = after(&log, &format!("climb{idx}: "));
        assert!(answer.starts_with("404 "), "{answer}\n{log}");
        assert!(!log.contains("shoal_"), "the server's metrics came through the proxy: {log}");
    }
}
