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
        "cp /bin/busybox base/bin/ && for t in sh cat ls id echo mkdir touch test pwd grep ln mount wget sleep; do ln -s busybox base/bin/$t; done",
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

    // The run's time limit holds in an image as anywhere.
    let slow = json!({"image": {"type": "task-image", "taskId": build, "path": "public/image.tar.gz"},
        "command": ["sh", "-c", "echo started; exec sleep 60"], "maxRunTime": 1});
    let (stopped, log) = run(&server, QUEUE, slow, &[]).await;
    assert_eq!(stopped["state"], "failed", "{log}");
    assert!(log.contains("started") && log.contains("maxRunTime of 1 s exceeded"), "{log}");

    let (_, after, log) = run_in_image(
        &server,
        in_image(json!({"type": "task-image", "taskId": build, "path": "public/image.tar.gz"}), "echo made > out.txt"),
    )
    .await;
    assert_eq!(after["state"], "completed", "the worker carries on: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_in_an_image_holds_nothing_of_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let _worker = worker_with(&server.root, QUEUE, "w1", &dir.path().join("work"), &[]);
    let build = build_image(&server).await;
    let script = "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; echo root: $(ls /); \
        (echo x > /etc/os-release) 2>/dev/null || echo image-read-only; \
        mount -t tmpfs none /opt 2>/dev/null || echo no-mount; \
        ln -s /etc/shadow leak.txt; mkdir out; ln -s /etc out/etc; echo fine > out/fine.txt";
    let payload = json!({
        "image": {"type": "task-image", "taskId": build, "path": "public/image.tar.gz"},
        "command": ["sh", "-c", script],
        "maxRunTime": 60,
        "artifacts": {
            "public/leak.txt": {"type": "file", "path": "/builds/worker/leak.txt"},
            "public/out": {"type": "directory", "path": "/builds/worker/out"}
        }
    });
    let mut task = definition(QUEUE, payload);
    task["retries"] = json!(0);
    let task_id = create_definition(&server, &task).await;
    let status = resolved(&server, &task_id, 1).await;
    let log = log_of(&server, &task_id, 0).await;
    assert_eq!(status["state"], "completed", "{log}");
    assert!(log.contains("NoNewPrivs:\t1") && log.contains("CapEff:\t0000000000000000"), "{log}");
    assert!(log.contains("root: bin builds dev etc opt proc tmp\n"), "the image's root and the run's own: {log}");
    assert!(log.contains("image-read-only") && log.contains("no-mount"), "{log}");
    let listed: Value =
        reqwest::get(format!("{}/task/{task_id}/runs/0/artifacts", server.api)).await.unwrap().json().await.unwrap();
    let mut names: Vec<(String, String)> = listed["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_owned(), a["storageType"].as_str().unwrap().to_owned()))
        .filter(|(name, _)| !name.starts_with("public/logs/"))
        .collect();
    names.sort();
    let expected =
        [("public/leak.txt", "error"), ("public/out/fine.txt", "s3")].map(|(n, t)| (n.to_owned(), t.to_owned()));
    assert_eq!(names, expected, "links the task left are neither followed nor uploaded");

    // The credentials proxy serves a task in an image as any other.
    let proxied = json!({
        "image": {"type": "task-image", "taskId": build, "path": "public/image.tar.gz"},
        "command": ["sh", "-c", "wget -qO- $TASKCLUSTER_PROXY_URL/api/queue/v1/ping"],
        "features": {"taskclusterProxy": true},
        "maxRunTime": 60
    });
    let (ran, log) = run(&server, QUEUE, proxied, &[]).await;
    assert_eq!(ran["state"], "completed", "{log}");
    assert!(log.contains("alive"), "{log}");

    // A worker that cannot contain a task in its image refuses it.
    let open_queue = "e2e/images-open";
    let _open = worker_with(&server.root, open_queue, "w2", &dir.path().join("open"), &["--isolation", "none"]);
    let payload = json!({"image": {"type": "task-image", "taskId": build, "path": "public/image.tar.gz"}, "command": ["true"], "maxRunTime": 60});
    let (refused, log) = run(&server, open_queue, payload, &[]).await;
    assert_eq!(refused["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains("payload.image: this worker cannot run tasks in images"), "{log}");
}

/// Debian's docker-registry on a free port of loopback, storing in `dir`.
struct Registry {
    _child: tokio::process::Child,
    host: String,
}

async fn registry(dir: &std::path::Path) -> Registry {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let host = format!("127.0.0.1:{port}");
    let config = dir.join("registry.yml");
    let storage = dir.join("registry");
    std::fs::write(
        &config,
        format!("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n", storage.display()),
    )
    .unwrap();
    let child = tokio::process::Command::new("/usr/bin/docker-registry")
        .arg("serve")
        .arg(&config)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("docker-registry (Debian's package) is installed by scripts/test.sh");
    // Ready when its API answers (the process has no other signal to wait for).
    for _ in 0..200 {
        if reqwest::get(format!("http://{host}/v2/")).await.is_ok_and(|res| res.status().is_success()) {
            return Registry { _child: child, host };
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the registry did not start on {host}");
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// A tar of busybox's root with `files`, and of `files` alone.
fn tar_of(busybox: bool, files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    if busybox {
        builder.append_path_with_name("/bin/busybox", "bin/busybox").unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        header.set_uid(0);
        header.set_gid(0);
        builder.append_link(&mut header, "bin/sh", "busybox").unwrap();
    }
    for (path, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        builder.append_data(&mut header, path, text.as_bytes()).unwrap();
    }
    builder.into_inner().unwrap()
}

/// Pushes a two-layer image (the second gzip-compressed, with a whiteout) as `name:tag`;
/// answers its manifest's digest.
async fn push(host: &str, name: &str, tag: &str) -> String {
    push_named(host, name, tag, "from-registry").await
}

/// [`push`], with `NAME=<os>` in its `/etc/os-release`.
async fn push_named(host: &str, name: &str, tag: &str, os: &str) -> String {
    use std::io::Write;
    let http = reqwest::Client::new();
    let release = format!("NAME={os}\n");
    let base = tar_of(true, &[("etc/os-release", release.as_str()), ("etc/gone", "x\n")]);
    let top = tar_of(false, &[("etc/.wh.gone", "")]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&top).unwrap();
    let top_gz = gz.finish().unwrap();
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["sh", "-c", "echo the-image-command"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&base), sha256(&top)]}
    }))
    .unwrap();
    for blob in [&base, &top_gz, &config] {
        let res = http.post(format!("http://{host}/v2/{name}/blobs/uploads/")).send().await.unwrap();
        assert_eq!(res.status(), 202);
        let location = res.headers()["location"].to_str().unwrap().to_owned();
        let location = if location.starts_with('/') { format!("http://{host}{location}") } else { location };
        let sep = if location.contains('?') { '&' } else { '?' };
        let res = http.put(format!("{location}{sep}digest={}", sha256(blob))).body(blob.to_vec()).send().await.unwrap();
        assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    }
    let descriptor =
        |media: &str, bytes: &[u8]| json!({"mediaType": media, "digest": sha256(bytes), "size": bytes.len()});
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": [
            descriptor("application/vnd.oci.image.layer.v1.tar", &base),
            descriptor("application/vnd.oci.image.layer.v1.tar+gzip", &top_gz)
        ]
    }))
    .unwrap();
    let res = http
        .put(format!("http://{host}/v2/{name}/manifests/{tag}"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    sha256(&manifest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_pulled_from_a_registry_by_tag_or_digest() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path()).await;
    let digest = push(&registry.host, "test/busybox", "1").await;
    let server = server(&dir.path().join("data")).await;
    let insecure = ["--insecure-registry", registry.host.as_str()];
    let _worker = worker_with(&server.root, QUEUE, "w1", &dir.path().join("work"), &insecure);

    let by_tag = json!({"image": format!("{}/test/busybox:1", registry.host), "maxRunTime": 60,
        "command": ["sh", "-c", "cat /etc/os-release; test -e /etc/gone && echo gone-visible; echo ran"]});
    let (first, log) = run(&server, QUEUE, by_tag, &[]).await;
    assert_eq!(first["state"], "completed", "{log}");
    assert!(log.contains("NAME=from-registry") && !log.contains("gone-visible"), "{log}");
    assert!(log.contains(&format!("({digest})")) && log.contains("bytes pulled"), "{log}");

    // By digest, with the image's own command: from the cache, the registry not asked.
    let by_digest = json!({"image": format!("{}/test/busybox@{digest}", registry.host), "maxRunTime": 60});
    let (second, log) = run(&server, QUEUE, by_digest, &[]).await;
    assert_eq!(second["state"], "completed", "{log}");
    assert!(log.contains("from the worker's cache") && log.contains("the-image-command"), "{log}");

    // Through a registry that asks for a bearer token first (the distribution API's token flow).
    push_named(&registry.host, "test/private", "1", "behind-a-token").await;
    let gated = token_gate(&registry.host).await;
    let _gated_worker = worker_with(
        &server.root,
        "e2e/images-gated",
        "w2",
        &dir.path().join("gated"),
        &["--insecure-registry", &gated],
    );
    let payload = json!({"image": format!("{gated}/test/private:1"), "command": ["sh", "-c", "cat /etc/os-release"], "maxRunTime": 60});
    let (through, log) = run(&server, "e2e/images-gated", payload, &[]).await;
    assert_eq!(through["state"], "completed", "{log}");
    assert!(log.contains("NAME=behind-a-token"), "{log}");

    let missing = json!({"image": format!("{}/test/busybox:2", registry.host), "command": ["true"], "maxRunTime": 60});
    let (refused, log) = run(&server, QUEUE, missing, &[]).await;
    assert_eq!(refused["reasonResolved"], "malformed-payload", "{log}");
    assert!(log.contains("payload.image"), "{log}");
}

/// The token a [`token_gate`] hands out and asks for.
const TOKEN: &str = "a-pull-token";

/// A front of the registry at `upstream` that answers 401 with a bearer challenge to any
/// request without [`TOKEN`], and hands it out at `/token`; answers its `host:port`.
async fn token_gate(upstream: &str) -> String {
    use axum::extract::State;
    use axum::http::{HeaderMap, Method, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    async fn handle(
        State((upstream, host)): State<(String, String)>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
    ) -> Response {
        if uri.path() == "/token" {
            return axum::Json(json!({"token": TOKEN})).into_response();
        }
        let bearer = format!("Bearer {TOKEN}");
        if headers.get("authorization").and_then(|value| value.to_str().ok()) != Some(bearer.as_str()) {
            let challenge =
                format!("Bearer realm=\"http://{host}/token\",service=\"test\",scope=\"repository:test/private:pull\"");
            return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)]).into_response();
        }
        let path = uri.path_and_query().map_or("/", |path| path.as_str());
        let mut request = reqwest::Client::new().request(method, format!("http://{upstream}{path}"));
        if let Some(accept) = headers.get("accept") {
            request = request.header("accept", accept.as_bytes());
        }
        let answer = request.send().await.unwrap();
        let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
        let mut out = HeaderMap::new();
        for (name, value) in answer.headers() {
            if !["transfer-encoding", "content-length", "connection"].contains(&name.as_str()) {
                out.insert(
                    axum::http::HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
                    axum::http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
                );
            }
        }
        (status, out, answer.bytes().await.unwrap()).into_response()
    }
    let app = axum::Router::new().fallback(handle).with_state((upstream.to_owned(), host.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    host
}
