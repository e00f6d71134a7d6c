//! Artifacts in an S3-compatible bucket (moto's server on loopback) shared by two servers on
//! one PostgreSQL database: uploaded through one server, read through the other (also after
//! the first is killed, with the run's live log), and gone from the bucket when they and
//! their task expire.

#[path = "../../blobs/tests/support/moto.rs"]
mod moto;
#[path = "../../store/tests/support/postgres.rs"]
mod pg;
mod support;

use serde_json::json;
use shoal_client::Outcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_in_one_bucket_are_read_through_any_server_and_expire_from_it() {
    let moto = moto::moto();
    moto.create_bucket("fleet").await;
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let args = ["--database", url.as_str(), "--blob-store", "s3://fleet/shoal"];
    let (mut server_a, root_a) = support::start_server_with(dir_a.path(), &args, &moto.env()).await;
    let (_server_b, root_b) = support::start_server_with(dir_b.path(), &args, &moto.env()).await;
    let (a, b) = (support::client(&root_a), support::client(&root_b));

    let task_id = slugid::nice();
    let mut task = support::plain_task("fleet/s3");
    // Times with room for a loaded machine: the artifact is read before it expires, the run
    // reported before its deadline, and the orphan put before the task expires.
    task["deadline"] = json!(shoal_client::now().plus_secs(10).to_string());
    task["expires"] = json!(shoal_client::now().plus_secs(14).to_string());
    a.create_task(&task_id, &task).await.expect("createTask");
    let claim = b.claim_work("fleet/s3", "g", "w", 1, &json!({})).await.unwrap().pop().expect("claimed");
    let run_id = claim.run_id;
    let expires = shoal_client::now().plus_secs(8).to_string();
    let blob = json!({"storageType": "s3", "contentType": "text/plain", "expires": expires});
    let created = a.create_artifact(&task_id, run_id, "public/report.txt", &blob).await.expect("createArtifact");
    let put_url = created["putUrl"].as_str().expect("a putUrl");
    assert!(put_url.starts_with(&root_a), "uploaded through server A: {put_url}");
    let bytes = "all tests passed\n".repeat(1000);
    let res = reqwest::Client::new().put(put_url).body(bytes.clone()).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    let objects = moto.keys("fleet", &format!("shoal/{task_id}/")).await;
    assert_eq!(objects.len(), 1, "the bytes are in the bucket, not on server A's disk: {objects:?}");
    a.append_log(&task_id, run_id, 0, b"compiling\n").await.expect("a live log through A");

    server_a.kill().await.unwrap();
    let log = b.log(&task_id, run_id, false).await.unwrap().bytes().await.unwrap();
    assert_eq!(&log[..], b"compiling\n", "the live log written through A is read through B");
    let read = b.artifact_bytes(&task_id, Some(run_id), "public/report.txt").await.expect("read through B");
    assert_eq!(String::from_utf8(read).unwrap(), bytes, "server A is gone; its upload is readable through B");
    let res = reqwest::get(format!("{root_b}/api/queue/v1/task/{task_id}/runs/{run_id}/artifacts/public/report.txt"))
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "text/plain", "the declared type is kept");
    b.report(&task_id, run_id, &Outcome::Completed).await.expect("reportCompleted");

    // Server B sweeps expired artifacts every 250 ms, the object first, then the record: once
    // the record is gone, so is the object.
    let gone = until_not_found(|| b.artifact_bytes(&task_id, Some(run_id), "public/report.txt")).await;
    assert_eq!(gone, Some(reqwest::StatusCode::NOT_FOUND), "the expired artifact's record is gone");
    let left = moto.keys("fleet", &format!("shoal/{task_id}/")).await;
    assert!(left.is_empty(), "the expired artifact's object is gone from the bucket: {left:?} (was {objects:?})");

    // An upload a crash left unrecorded goes with its task.
    let orphan = format!("{}/fleet/shoal/{task_id}/0/apublic%252Fx/orphan", moto.endpoint);
    assert!(reqwest::Client::new().put(orphan).body("orphan").send().await.unwrap().status().is_success());
    let gone = until_not_found(|| b.task_status(&task_id)).await;
    assert_eq!(gone, Some(reqwest::StatusCode::NOT_FOUND), "the expired task is gone");
    let left = moto.keys("fleet", &format!("shoal/{task_id}/")).await;
    assert!(left.is_empty(), "the expired task's objects are gone from the bucket: {left:?}");
}

/// Calls `read` every 50 ms (for up to 20 s) until it fails; answers the failure's status.
async fn until_not_found<T, F: Future<Output = Result<T, shoal_client::ClientError>>>(
    read: impl Fn() -> F,
) -> Option<reqwest::StatusCode> {
    for _ in 0..400 {
        if let Err(err) = read().await {
            return err.status();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    None
}
