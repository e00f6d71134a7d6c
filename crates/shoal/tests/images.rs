//! Tasks in container images on a real worker (docker-worker's payload), built and served
//! here without a daemon: a task builds an image (`examples/images/docker-save.sh`, from
//! Debian's busybox-static) that the next runs in, found again through the Index; an image
//! pulled from a registry on loopback (Debian's docker-registry); whiteouts applied; the
//! host's files out of sight; nothing of one run left for the next but its named cache; a
//! file that is no image refused as `malformed-payload` with the worker carrying on.

mod support;

use serde_json::{Value, json};
use support::worker::{Server, create_definition, definition, log_of, resolved, run, server, worker_with};

const QUEUE: &str = "e2e/images";
const DOCKER_SAVE: &str = include_str!("../../../examples/images/docker-save.sh");

/// A task that builds a two-layer image from busybox (the second with whiteouts) and
/// publishes it, indexed at `project.images.test`.
async fn build_image(server: &Server) -> String {
    let commands = [
        "mkdir -p base/bin base/etc base/builds/worker base/opt top/etc top/opt top/builds/worker",
        "cp /bin/busybox base/bin/ && for t in sh cat ls id echo mkdir touch test pwd; do ln -s busybox base/bin/$t; done",
        "echo NAME=shoal-test > base/etc/os-release && echo x > base/etc/gone && echo old > base/opt/old",
        "touch top/etc/.wh.gone top/opt/.wh..wh..opq && echo new > top/opt/new",
        "IMAGE_USER_DIRS=builds/worker IMAGE_CONFIG='{\"Env\":[\"PATH=/bin\",\"FROM_IMAGE=yes\"],\"WorkingDir\":\"/builds/worker\"}' \
         sh docker-save.sh image.tar base top && gzip image.tar && echo plain text > not-an-image.txt",
    ];
    let payload = json!({
        "command": commands,
        "mounts": [{"file": "docker-save.sh", "content": {"raw": DOCKER_SAVE}}],
        "artifacts": [
            {"type": "file", "path": "image.tar.gz", "name": "public/image.tar.gz"},
            {"type": "file", "path": "not-an-image.txt", "name": "public/not-an-image.txt"}
        ],
        "maxRunTime": 120
    });
    let mut task = definition(QUEUE, payload);
    task["routes"] = json!(["index.project.images.test"]);
    let task_id = create_definition(server, &task).await;
    assert_eq!(resolved(server, &task_id, 1).await["state"], "completed", "{}", log_of(server, &task_id, 0).await);
    task_id
}

/// docker-worker's payload running `script` in `image`, with a named cache and an artifact.
fn in_image(image: Value, script: &str) -> Value {
    json!({
        "image": image,
        "command": ["/bin/sh", "-c", script],
        "maxRunTime": 60,
        "cache": {"image-test": "/builds/worker/.cache"},
        "artifacts": {"public/out.txt": {"type": "file", "path": "/builds/worker/out.txt"}},
        "features": {"localLiveLog": true}
    })
}

const LOOK_AROUND: &str = "cat /etc/os-release; test -e /etc/gone && echo gone-visible; echo opt: $(ls /opt); \
    test -e /usr/bin/bwrap || echo no-host-usr; echo from=$FROM_IMAGE; echo at=$(pwd) uid=$(id -u); \
    test -e /builds/worker/.cache/kept && echo cache-kept; echo k > /builds/worker/.cache/kept; \
    test -e /builds/worker/leftover && echo leftover-seen; touch /builds/worker/leftover; echo made > out.txt";

async fn artifact(server: &Server, task_id: &str, name: &str) -> String {
    let url = format!("{}/task/{task_id}/runs/0/artifacts/{name}", server.api);
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// Runs `payload` with the cache's scope; answers its task, first run and log.
async fn run_in_image(server: &Server, payload: Value) -> (String, Value, String) {
    let mut task = definition(QUEUE, payload);
    task["scopes"] = json!(["docker-worker:cache:image-test"]);
    task["retries"] = json!(0);
    let task_id = create_definition(server, &task).await;
    let status = resolved(server, &task_id, 1).await;
    let log = log_of(server, &task_id, 0).await;
    (task_id, status["runs"][0].clone(), log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_builds_an_image_that_the_next_runs_in() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, QUEUE, "w1", &dir.path().join("work"), &[]);
    let build = build_image(&server).await;

    let image = json!({"type": "task-image", "taskId": build, "path": "public/image.tar.gz"});
    let (task_id, first, log) = run_in_image(&server, in_image(image.clone(), LOOK_AROUND)).await;
    assert_eq!(first["state"], "completed", "{log}");
    assert!(log.contains("NAME=shoal-test") && log.contains("from=yes"), "the image's root and Env: {log}");
    assert!(!log.contains("gone-visible") && log.contains("opt: new\n"), "whiteouts and opaque directories: {log}");
    assert!(log.contains("no-host-usr"), "nothing of the host's system shows: {log}");
    assert!(log.contains("at=/builds/worker uid=6"), "the image's WorkingDir, the slot's user: {log}");
    assert_eq!(artifact(&server, &task_id, "public/out.txt").await, "made\n");

    let (_, second, log) = run_in_image(&server, in_image(image, LOOK_AROUND)).await;
    assert_eq!(second["state"], "completed", "{log}");
    assert!(log.contains("from the worker's cache"), "unpacked once per worker: {log}");
    assert!(log.contains("cache-kept"), "the named cache is kept: {log}");
    assert!(!log.contains("leftover-seen"), "a run's writes are not the next run's: {log}");

    let indexed = json!({"type": "indexed-image", "namespace": "project.images.test", "path": "public/image.tar.gz"});
    let (_, third, log) = run_in_image(&server, in_image(indexed, "cat /etc/os-release; echo made > out.txt")).await;
    assert_eq!(third["state"], "completed", "{log}");
    assert!(log.contains(&format!("project.images.test is task {build}")) && log.contains("NAME=shoal-test"), "{log}");

    let not_image = json!({"type": "task-image", "taskId": build, "path": "public/not-an-image.txt"});
    let (refused, log) =
        run(&server, QUEUE, json!({"image": not_image, "command": ["true"], "maxRunTime": 30}), &[]).await;
    assert_eq!(
        (refused["state"].as_str(), refused["reasonResolved"].as_str()),
        (Some("exception"), Some("malformed-payload"))
    );
    assert!(log.contains("payload.image"), "{log}");
    let privileged =
        json!({"image": "busybox", "command": ["true"], "maxRunTime": 30, "capabilities": {"privileged": true}});
    let (refused, log) = run(&server, QUEUE, privileged, &[]).await;
    assert_eq!(refused["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains("payload.capabilities.privileged"), "{log}");

    let (_, after, log) = run_in_image(
        &server,
        in_image(json!({"type": "task-image", "taskId": build, "path": "public/image.tar.gz"}), "echo made > out.txt"),
    )
    .await;
    assert_eq!(after["state"], "completed", "the worker carries on: {log}");
}
