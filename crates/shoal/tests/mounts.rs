//! A task's inputs and caches on a real worker (`payload.mounts`, `payload.caches`): another
//! task's artifact mounted and run, read with the task's own scopes, downloaded once per
//! worker; unsafe archives and wrong digests refused; named caches kept between tasks, lent
//! to one task at a time, guarded by their scope and purged on the exit codes listed.

mod support;

use base64::Engine as _;
use serde_json::{Value, json};
use support::worker::{Server, create_definition, definition, log_of, resolved, run, server, worker_with};

/// A build task that leaves `public/app.tar.gz` (a script in `dist/`) and `private/key.txt`.
async fn build(server: &Server, queue: &str) -> String {
    build_routed(server, queue, &[]).await
}

/// [`build`], with `routes`.
async fn build_routed(server: &Server, queue: &str, routes: &[&str]) -> String {
    let payload = json!({
        "command": [
            "mkdir -p dist && printf '#!/bin/sh\\necho \"hello from the app\"\\n' > dist/app.sh && chmod +x dist/app.sh",
            "tar czf app.tar.gz dist && echo private > key.txt"
        ],
        "artifacts": [
            {"type": "file", "path": "app.tar.gz", "name": "public/app.tar.gz"},
            {"type": "file", "path": "key.txt", "name": "private/key.txt"}
        ],
        "maxRunTime": 60
    });
    let mut task = definition(queue, payload);
    task["routes"] = json!(routes);
    let task_id = create_definition(server, &task).await;
    assert_eq!(resolved(server, &task_id, 1).await["state"], "completed", "{}", log_of(server, &task_id, 0).await);
    task_id
}

/// How many times the server answered getArtifact, from its metrics.
async fn artifact_reads(server: &Server) -> u64 {
    let metrics = reqwest::get(format!("{}/metrics", server.root)).await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .filter(|line| line.starts_with("shoal_request_duration_seconds_count{endpoint=\"getArtifact\""))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

fn stats(run: &Value) -> &Value {
    &run["stats"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_task_runs_its_builds_artifact_downloaded_once_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "e2e/mounts", "w1", &dir.path().join("work"), &[]);
    let build = build(&server, "e2e/mounts").await;
    let mounts = json!([
        {"directory": "app", "format": "tar.gz", "content": {"taskId": build, "artifact": "public/app.tar.gz"}},
        {"file": "inputs/archive.tgz", "content": {"taskId": build, "artifact": "public/app.tar.gz"}}
    ]);
    let payload = json!({
        "command": ["app/dist/app.sh", "test -s inputs/archive.tgz && echo \"owner $(stat -c %u app/dist/app.sh) me $(id -u)\""],
        "mounts": mounts,
        "maxRunTime": 60
    });
    let before = artifact_reads(&server).await;
    let (first, log) = run(&server, "e2e/mounts", payload.clone(), &[]).await;
    assert_eq!(first["state"], "completed", "{log}");
    assert!(log.contains("hello from the app"), "the build's app ran from the mount: {log}");
    let owner = log.split("owner ").nth(1).unwrap().lines().next().unwrap();
    let (file_uid, task_uid) = owner.split_once(" me ").unwrap();
    assert_eq!(file_uid, task_uid, "the mount belongs to the task's user: {log}");
    assert!(stats(&first)["bytesFetched"].as_u64().unwrap() > 0, "{first}");
    assert!(stats(&first)["mountMs"].is_u64(), "{first}");
    assert_eq!(artifact_reads(&server).await - before, 1, "two mounts of one artifact: one download");

    let (second, log) = run(&server, "e2e/mounts", payload, &[]).await;
    assert_eq!(second["state"], "completed", "{log}");
    assert!(log.contains("from the worker's cache"), "{log}");
    assert_eq!(stats(&second)["bytesFetched"], 0, "{second}");
    assert_eq!(artifact_reads(&server).await - before, 1, "the second task mounted from the worker's cache");
}

/// `content: {namespace, artifact}` is the artifact of the task the Index holds there (as
/// taskgraph's toolchains and docker images are found); a private one still needs its scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_finds_its_task_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "e2e/indexed", "w1", &dir.path().join("work"), &[]);
    let build = build_routed(&server, "e2e/indexed", &["index.e2e.toolchain.app.latest"]).await;
    let indexed = |artifact: &str| json!([{"directory": "app", "format": "tar.gz", "content": {"namespace": "e2e.toolchain.app.latest", "artifact": artifact}}]);
    let payload = json!({"command": ["app/dist/app.sh"], "mounts": indexed("public/app.tar.gz"), "maxRunTime": 60});
    let (first, log) = run(&server, "e2e/indexed", payload, &[]).await;
    assert_eq!(first["state"], "completed", "{log}");
    assert!(log.contains("hello from the app"), "{log}");
    assert!(log.contains(&format!("e2e.toolchain.app.latest is task {build}")), "{log}");

    let private = json!({"command": ["true"], "mounts": [{"file": "key", "content": {"namespace": "e2e.toolchain.app.latest", "artifact": "private/key.txt"}}], "maxRunTime": 60});
    let (refused, log) = run(&server, "e2e/indexed", private, &[]).await;
    assert_eq!(refused["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains("queue:get-artifact:private/key.txt"), "{log}");

    let missing = json!({"command": ["true"], "mounts": [{"file": "x", "content": {"namespace": "e2e.nothing.here", "artifact": "public/x"}}], "maxRunTime": 60});
    let (refused, log) = run(&server, "e2e/indexed", missing, &[]).await;
    assert_eq!(refused["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains("no task is indexed at e2e.nothing.here"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_artifact_is_mounted_only_with_the_tasks_scope_and_a_wrong_digest_fails() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, "e2e/private", "w1", &dir.path().join("work"), &[]);
    let build = build(&server, "e2e/private").await;
    let payload = |sha256: Option<&str>| {
        let mut content = json!({"taskId": build, "artifact": "private/key.txt"});
        if let Some(sha256) = sha256 {
            content["sha256"] = json!(sha256);
        }
        json!({"command": ["cat key.txt"], "mounts": [{"file": "key.txt", "content": content}], "maxRunTime": 60})
    };
    let (allowed, log) = run(&server, "e2e/private", payload(None), &["queue:get-artifact:private/key.txt"]).await;
    assert_eq!(allowed["state"], "completed", "{log}");
    assert!(log.contains("private"), "{log}");

    // The worker has it cached now; a task without the scope still does not get it.
    let (refused, log) = run(&server, "e2e/private", payload(None), &[]).await;
    assert_eq!((&refused["state"], &refused["reasonResolved"]), (&json!("exception"), &json!("malformed-payload")));
    assert!(log.contains("scopes do not include queue:get-artifact:private/key.txt"), "{log}");
    assert!(!log.contains("\nprivate"), "{log}");

    let digest = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(b"private\n"));
    let scopes = ["queue:get-artifact:private/*"];
    let (pinned, log) = run(&server, "e2e/private", payload(Some(&digest)), &scopes).await;
    assert_eq!(pinned["state"], "completed", "the right digest: {log}");
    let wrong = "0".repeat(64);
    let (mismatch, log) = run(&server, "e2e/private", payload(Some(&wrong)), &scopes).await;
    assert_eq!(mismatch["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains(&format!("SHA-256 is {digest}, not {wrong}")), "{log}");
}

/// A gzipped tar made by Python's tarfile (which writes what it is told), base64.
fn hostile_archive(kind: &str) -> String {
    let script = format!(
        r#"
import io, sys, tarfile
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    if "{kind}" == "parent":
        data = b"escaped"
        info = tarfile.TarInfo("../escaped.txt"); info.size = len(data); tar.addfile(info, io.BytesIO(data))
    else:
        info = tarfile.TarInfo("etc"); info.type = tarfile.SYMTYPE; info.linkname = "/etc"; tar.addfile(info)
sys.stdout.buffer.write(buf.getvalue())
"#
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    base64::engine::general_purpose::STANDARD.encode(out.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_with_entries_escaping_its_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let work = dir.path().join("work");
    let _worker = worker_with(&server.root, "e2e/unsafe", "w1", &work, &[]);
    for (kind, said) in [("parent", "outside the directory (absolute or with `..`)"), ("link", "points outside")] {
        let mounts =
            json!([{"directory": "in/deep", "format": "tar.gz", "content": {"base64": hostile_archive(kind)}}]);
        let payload = json!({"command": ["echo ran"], "mounts": mounts, "maxRunTime": 60});
        let (refused, log) = run(&server, "e2e/unsafe", payload, &[]).await;
        assert_eq!(refused["reasonResolved"], "malformed-payload", "{kind}: {log}");
        assert!(log.contains(said) && !log.contains("\nran"), "{kind}: {log}");
    }
    let escaped = walk(&work).into_iter().filter(|path| path.ends_with("escaped.txt")).collect::<Vec<_>>();
    assert!(escaped.is_empty(), "nothing was written: {escaped:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .flat_map(|entry| {
            let path = entry.path();
            let mut found = vec![path.clone()];
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                found.extend(walk(&path));
            }
            found
        })
        .collect()
}

/// Python that waits (bounded) until the task `$OTHER` says in its log that it wrote its
/// marker, so two tasks overlap.
const AWAIT_OTHER: &str = r#"
import os, time, urllib.request, urllib.error
url = os.environ["TASKCLUSTER_ROOT_URL"] + "/logs/v1/" + os.environ["OTHER"] + "/0"
for _ in range(600):
    try:
        with urllib.request.urlopen(url) as answer:
            if b"wrote the marker" in answer.read():
                break
    except urllib.error.HTTPError:
        pass
    time.sleep(0.05)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_cache_is_kept_lent_to_one_task_at_a_time_guarded_and_purged() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let queue = "e2e/caches";
    let _worker = worker_with(&server.root, queue, "w1", &dir.path().join("work"), &["--capacity", "2"]);
    let with_cache = |name: &str, command: Value| json!({"command": command, "caches": [{"name": name, "path": "cache"}], "maxRunTime": 60});
    let scopes = ["queue:cache:*"];

    let (first, log) = run(&server, queue, with_cache("kept", json!(["echo 42 > cache/answer"])), &scopes).await;
    assert_eq!(first["state"], "completed", "{log}");
    let (second, log) = run(&server, queue, with_cache("kept", json!(["cat cache/answer"])), &scopes).await;
    assert_eq!(second["state"], "completed", "{log}");
    assert!(log.contains("42") && log.contains("kept from an earlier task"), "{log}");

    // generic-worker's spelling, and its scope.
    let mount =
        json!({"command": ["cat src/answer"], "mounts": [{"cacheName": "kept", "directory": "src"}], "maxRunTime": 60});
    let (third, log) = run(&server, queue, mount, &["generic-worker:cache:kept"]).await;
    assert_eq!(third["state"], "completed", "{log}");

    let (refused, log) = run(&server, queue, with_cache("kept", json!(["cat cache/answer"])), &[]).await;
    assert_eq!(refused["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains("needs one of the scopes queue:cache:kept"), "{log}");

    // Two tasks at once: each finds the cache as the earlier task left it or empty, never
    // the other's marker.
    let (a, b) = (slugid::nice(), slugid::nice());
    let both = |me: &str, other: &str| {
        let mut payload = with_cache(
            "kept",
            json!([
                format!("echo {me} > cache/holder && echo wrote the marker"),
                "python3 -c \"$AWAIT_OTHER\"",
                format!("test \"$(cat cache/holder)\" = {me} && echo alone")
            ]),
        );
        payload["env"] = json!({"AWAIT_OTHER": AWAIT_OTHER, "OTHER": other});
        let mut task = definition(queue, payload);
        task["scopes"] = json!(scopes);
        task
    };
    for (me, other) in [(&a, &b), (&b, &a)] {
        let url = format!("{}/task/{me}", server.api);
        let res = support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(&both(me, other)))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    }
    for task in [&a, &b] {
        let status = resolved(&server, task, 1).await;
        assert_eq!(status["state"], "completed", "{}", log_of(&server, task, 0).await);
        assert!(log_of(&server, task, 0).await.contains("alone"));
    }

    // An exit code in purgeCaches throws the cache away.
    let mut purging = with_cache("purged", json!(["echo stale > cache/file", "exit 3"]));
    purging["onExitStatus"] = json!({"purgeCaches": [3]});
    let (failed, log) = run(&server, queue, purging, &scopes).await;
    assert_eq!(failed["state"], "failed", "{log}");
    assert!(log.contains("named caches purged"), "{log}");
    let (after, log) = run(&server, queue, with_cache("purged", json!(["test ! -e cache/file"])), &scopes).await;
    assert_eq!(after["state"], "completed", "the purged cache came back empty: {log}");

    // The worker's record lists the caches it holds, told by a heartbeat when they change.
    let client = support::client(&server.root);
    let mut record = Value::Null;
    for _ in 0..600 {
        record = client.worker(queue, "local", "w1").await.unwrap();
        let caches = record["caches"].as_array().cloned().unwrap_or_default();
        if caches.contains(&json!("kept")) && caches.contains(&json!("purged")) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the worker's record does not list its caches: {record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_places_the_next_runs_mounts_where_the_old_ones_were() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let (queue, work) = ("e2e/killed", dir.path().join("work"));
    let mut worker = worker_with(&server.root, queue, "w1", &work, &[]);
    let mounts = json!([{"file": "inputs/notes.txt", "content": {"raw": "notes"}}]);
    let hang = json!({"command": ["echo placed; sleep 600"], "mounts": mounts, "maxRunTime": 600});
    let mut task = definition(queue, hang);
    task["retries"] = json!(0);
    let hung = create_definition(&server, &task).await;
    for _ in 0..600 {
        if log_of(&server, &hung, 0).await.contains("placed") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(work.join("slot-0/inputs/notes.txt").exists(), "the mount is in place while the task runs");
    worker.kill().await.unwrap();
    let _worker = worker_with(&server.root, queue, "w2", &work, &[]);
    let payload = json!({"command": ["cat inputs/notes.txt"], "mounts": mounts, "maxRunTime": 60});
    let (next, log) = run(&server, queue, payload, &[]).await;
    assert_eq!(next["state"], "completed", "the slot's leftovers were cleared first: {log}");
}
