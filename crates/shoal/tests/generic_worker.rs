//! generic-worker's payload as `taskcluster-taskgraph` writes it, on a real worker: scopes
//! that reach a cache through a role, `./` paths, bzip2 and xz mounts, artifact expiries,
//! generic-worker's variables, and a chain of trust signed by the worker's key.

mod support;

use std::collections::BTreeMap;
use std::io::Write as _;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;
use support::worker::{Server, create_definition, definition, log_of, resolved, server, worker_with};

/// A tar holding `bin/hello`, a script.
fn tool_tar() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let script = b"#!/bin/sh\necho hello from the toolchain\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(script.len() as u64);
    header.set_mode(0o755);
    header.set_cksum();
    tar.append_data(&mut header, "bin/hello", &script[..]).unwrap();
    tar.into_inner().unwrap()
}

fn bz2(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn xz(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = liblzma::write::XzEncoder::new(Vec::new(), 1);
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn put(server: &Server, path: &str, body: &Value) -> Value {
    let url = format!("{}{path}", server.root);
    let res = support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(body)).send().await.unwrap();
    assert!(res.status().is_success(), "{path}: {}", res.text().await.unwrap());
    res.json().await.unwrap()
}

/// Creates the role `role` granting `scope`.
async fn grant(server: &Server, role: &str, scope: &str) {
    let path = format!("/api/auth/v1/roles/{}", role.replace('/', "%2F"));
    put(server, &path, &json!({"description": "a repository's pushes", "scopes": [scope]})).await;
}

/// Runs a task with `payload` whose scopes assume `role` (no retries); its id, status and log.
async fn run_with_role(server: &Server, queue: &str, payload: Value, role: &str) -> (String, Value, String) {
    let mut task = definition(queue, payload);
    task["scopes"] = json!([format!("assume:{role}")]);
    task["retries"] = json!(0);
    let task_id = create_definition(server, &task).await;
    let status = resolved(server, &task_id, 1).await;
    let log = log_of(server, &task_id, 0).await;
    (task_id, status, log)
}

async fn get(server: &Server, path: &str) -> reqwest::Response {
    reqwest::get(format!("{}{path}", server.root)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_as_taskgraph_writes_it_runs_and_its_chain_of_trust_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let queue = "e2e/taskgraph";
    // The worker's key, made as generic-worker's command makes one.
    let key = dir.path().join("signing-key");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["new-ed25519-keypair", "--file"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let public = base64::engine::general_purpose::STANDARD.decode(String::from_utf8(made.stdout).unwrap().trim());
    let key_arg = key.to_str().unwrap();
    let _worker = worker_with(&server.root, queue, "w1", &dir.path().join("work"), &["--signing-key", key_arg]);

    // The task holds no cache scope itself: its repository's role grants it, as a
    // project's `assume:repo:...` role does.
    let role = "repo:example.com/org/proj:branch:main";
    grant(&server, role, "generic-worker:cache:proj-*").await;
    let artifact_expires = shoal_client::now().plus_secs(86_400).to_string();
    let signs = nix::unistd::geteuid().is_root();
    let payload = json!({
        "command": [["/bin/sh", "-c", concat!(
            "set -e; test -f ./run-task; tools/bin/hello; cat data.txt; ",
            "echo \"workdir=$TASK_WORKDIR group=$TASK_GROUP_ID\"; test \"$TASK_WORKDIR\" = \"$(pwd)\"; ",
            "echo kept > checkouts/marker; mkdir -p artifacts; echo built > artifacts/out.txt; ",
            "if cat \"$KEY\" 2> /dev/null; then echo the key was readable; exit 1; fi"
        )]],
        "env": {"KEY": key_arg},
        "maxRunTime": 60,
        "osGroups": [],
        "features": {"chainOfTrust": signs},
        "mounts": [
            {"file": "./run-task", "content": {"raw": "#!/bin/sh\n"}},
            {"directory": "./tools/", "format": "tar.bz2", "content": {"base64": base64(&bz2(&tool_tar()))}},
            {"file": "data.txt", "format": "xz", "content": {"base64": base64(&xz(b"data from xz\n"))}},
            {"cacheName": "proj-checkouts", "directory": "./checkouts"}
        ],
        "artifacts": [{"type": "directory", "path": "./artifacts", "name": "public/build", "expires": artifact_expires}]
    });
    let (task_id, status, log) = run_with_role(&server, queue, payload, role).await;
    assert_eq!(status["state"], "completed", "{log}");
    assert!(log.contains("hello from the toolchain") && log.contains("data from xz"), "{log}");
    assert!(log.contains(&format!("group={}", status["taskGroupId"].as_str().unwrap())), "{log}");

    let listed: Value =
        get(&server, &format!("/api/queue/v1/task/{task_id}/runs/0/artifacts")).await.json().await.unwrap();
    let artifacts = listed["artifacts"].as_array().unwrap();
    let out = artifacts.iter().find(|a| a["name"] == "public/build/out.txt").expect("the directory's file");
    assert_eq!(
        shoal_engine::Timestamp::parse(out["expires"].as_str().unwrap()),
        shoal_engine::Timestamp::parse(&artifact_expires)
    );

    if !signs {
        return;
    }
    let record = get(&server, &format!("/api/queue/v1/task/{task_id}/runs/0/artifacts/public/chain-of-trust.json"))
        .await
        .bytes()
        .await
        .unwrap();
    let signature =
        get(&server, &format!("/api/queue/v1/task/{task_id}/runs/0/artifacts/public/chain-of-trust.json.sig"))
            .await
            .bytes()
            .await
            .unwrap();
    let public = public.unwrap();
    let verifier = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &public);
    assert!(verifier.verify(&record, &signature).is_ok(), "the signature verifies with the key's public half");
    let parsed: Value = serde_json::from_slice(&record).unwrap();
    let digests: BTreeMap<String, String> = parsed["artifacts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, digest)| (name.clone(), digest["sha256"].as_str().unwrap().to_owned()))
        .collect();
    let built = format!("{:x}", sha2::Sha256::digest(b"built\n"));
    assert_eq!(digests.get("public/build/out.txt"), Some(&built), "{parsed}");
    assert_eq!((parsed["taskId"].as_str(), parsed["runId"].as_u64()), (Some(task_id.as_str()), Some(0)));
    assert_eq!((parsed["workerGroup"].as_str(), parsed["workerId"].as_str()), (Some("local"), Some("w1")));
    assert_eq!(parsed["task"]["payload"]["features"]["chainOfTrust"], true);

    // A task naming the chain of trust's own artifact is refused, naming it.
    let mut forged = definition(
        queue,
        json!({
            "command": [["true"]], "maxRunTime": 60, "features": {"chainOfTrust": true},
            "artifacts": [{"type": "file", "path": "x", "name": "public/chain-of-trust.json"}]
        }),
    );
    forged["retries"] = json!(0);
    let forged = create_definition(&server, &forged).await;
    let status = resolved(&server, &forged, 1).await;
    assert_eq!(status["runs"][0]["reasonResolved"], "malformed-payload");
    assert!(log_of(&server, &forged, 0).await.contains("payload.artifacts[0].name `public/chain-of-trust.json`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_its_roles_do_not_grant_and_a_chain_of_trust_without_a_key_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(&dir.path().join("data")).await;
    let queue = "e2e/taskgraph-refused";
    let _worker = worker_with(&server.root, queue, "w1", &dir.path().join("work"), &[]);
    let role = "repo:example.com/org/other:branch:main";
    grant(&server, role, "generic-worker:cache:other-*").await;
    let cases = [
        (
            json!({"command": [["true"]], "maxRunTime": 60, "mounts": [{"cacheName": "proj-checkouts", "directory": "c"}]}),
            "needs one of the scopes queue:cache:proj-checkouts",
        ),
        (json!({"command": [["true"]], "maxRunTime": 60, "features": {"chainOfTrust": true}}), "has no signing key"),
        (json!({"command": [["true"]], "maxRunTime": 60, "osGroups": ["docker"]}), "payload.osGroups must be empty"),
    ];
    for (payload, reason) in cases {
        let (_, status, log) = run_with_role(&server, queue, payload, role).await;
        assert_eq!(status["runs"][0]["reasonResolved"], "malformed-payload", "{log}");
        assert!(log.contains(reason), "{reason}: {log}");
    }
}
