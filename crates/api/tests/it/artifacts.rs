//! Artifacts: uploads through the server's own blob endpoint, references, links, errors.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{TestApp, from_now, slugid};

/// A task with run 0 claimed; returns its id.
async fn running_task(app: &TestApp) -> String {
    let task_id = slugid();
    app.create(&task_id, json!({"taskQueueId": format!("art/{}", "q")})).await;
    let claims = app.claim("art/q", "w", 1).await;
    assert_eq!(claims[0]["status"]["taskId"], task_id.as_str());
    task_id
}

/// A signed URL without its signature (a public blob needs none to be read).
pub(crate) fn unsigned(url: &str) -> String {
    url.split_once('?').map_or(url, |(path, _)| path).to_owned()
}

fn blob_request(content_type: &str) -> Value {
    json!({"storageType": "s3", "expires": from_now(3600), "contentType": content_type})
}

#[tokio::test]
async fn a_blob_uploads_and_downloads_byte_exact() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    let name = "public/build/output file.bin";
    let path = format!("/task/{task_id}/runs/0/artifacts/{}", name.replace(' ', "%20"));
    let (status, created) = app.post(&path, blob_request("application/octet-stream")).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(created["storageType"], "s3");
    let put_url = created["putUrl"].as_str().unwrap().to_owned();

    let (code, body) = app.call(Method::PUT, &path, Some(json!({}))).await;
    assert_eq!(code, StatusCode::CONFLICT, "finishArtifact before the upload: {body}");
    // The putUrl is signed for uploading only; the public blob itself is not there yet.
    assert_eq!(app.raw(Method::GET, &put_url, None).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(app.raw(Method::GET, &unsigned(&put_url), None).await.status(), StatusCode::NOT_FOUND);

    let bytes: Vec<u8> = (0..300_000u32).map(|n| (n.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let res = app.raw(Method::PUT, &put_url, Some(bytes.clone())).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = app.signed_raw(Method::PUT, &format!("{}{path}", app.base), Some(b"{}".to_vec())).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT, "finishArtifact after the upload");

    let res = app.raw(Method::GET, &format!("{}{path}", app.base), None).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(res.headers()["x-taskcluster-artifact-storage-type"], "s3");
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    let redirect: Value = res.json().await.unwrap();
    assert_eq!(redirect["url"], location.as_str(), "the body tells clients that do not follow redirects");

    let download = app.raw(Method::GET, &location, None).await;
    assert_eq!(download.status(), StatusCode::OK);
    assert_eq!(download.headers()["content-type"], "application/octet-stream");
    assert_eq!(download.bytes().await.unwrap().to_vec(), bytes, "byte-exact");

    let (_, content) = app.get(&format!("/task/{task_id}/artifact-content/{}", name.replace(' ', "%20"))).await;
    assert_eq!(content, json!({"storageType": "s3", "url": location}));
    let (_, info) = app.get(&format!("/task/{task_id}/runs/0/artifact-info/{}", name.replace(' ', "%20"))).await;
    assert_eq!((info["name"].as_str(), info["contentType"].as_str()), (Some(name), Some("application/octet-stream")));
    let latest = app
        .raw(Method::GET, &format!("{}/task/{task_id}/artifacts/{}", app.base, name.replace(' ', "%20")), None)
        .await;
    assert_eq!(latest.status(), StatusCode::SEE_OTHER, "latest run");
}

#[tokio::test]
async fn references_links_and_errors() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    let base = format!("/task/{task_id}/runs/0/artifacts");
    let reference = json!({"storageType": "reference", "expires": from_now(3600), "contentType": "text/plain", "url": "https://example.com/live"});
    assert_eq!(app.post(&format!("{base}/public/logs/live.log"), reference).await.0, StatusCode::OK);
    let link = json!({"storageType": "link", "expires": from_now(3600), "artifact": "public/logs/live.log"});
    assert_eq!(app.post(&format!("{base}/public/latest.log"), link).await.0, StatusCode::OK);
    let error = json!({"storageType": "error", "expires": from_now(3600), "reason": "file-missing-on-worker", "message": "no dist/"});
    assert_eq!(app.post(&format!("{base}/public/dist"), error).await.0, StatusCode::OK);

    let res = app.raw(Method::GET, &format!("{}{base}/public/latest.log", app.base), None).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER, "a link is followed to its reference");
    assert_eq!(res.headers()["location"], "https://example.com/live");
    let (code, body) = app.get(&format!("{base}/public/dist")).await;
    assert_eq!(code, StatusCode::FAILED_DEPENDENCY);
    assert_eq!(body["reason"], "file-missing-on-worker");
    let (_, content) = app.get(&format!("/task/{task_id}/runs/0/artifact-content/public/dist")).await;
    assert_eq!(content["storageType"], "error");

    // A reference may be replaced by a link, as workers do when a run ends.
    let full = json!({"storageType": "link", "expires": from_now(3600), "artifact": "public/dist"});
    assert_eq!(app.post(&format!("{base}/public/logs/live.log"), full).await.0, StatusCode::OK);
    let back = json!({"storageType": "reference", "expires": from_now(3600), "contentType": "text/plain", "url": "https://example.com/x"});
    assert_eq!(app.post(&format!("{base}/public/logs/live.log"), back).await.0, StatusCode::CONFLICT);

    let (_, listed) = app.get(&format!("/task/{task_id}/artifacts?limit=2")).await;
    let names: Vec<&str> =
        listed["artifacts"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["public/dist", "public/latest.log"]);
    let token = listed["continuationToken"].as_str().unwrap();
    let (_, rest) = app.get(&format!("{base}?continuationToken={}", token.replace('/', "%2F"))).await;
    assert_eq!(rest["artifacts"][0]["name"], "public/logs/live.log");
    assert_eq!(rest["artifacts"][0]["storageType"], "link");
}

#[tokio::test]
async fn artifact_rules_through_http() {
    let app = TestApp::start().await;
    let pending = slugid();
    app.create(&pending, json!({"taskQueueId": "art/none"})).await;
    let (code, body) =
        app.post(&format!("/task/{pending}/runs/0/artifacts/public/a"), blob_request("text/plain")).await;
    assert_eq!((code, body["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InputError")), "never claimed: {body}");

    let task_id = running_task(&app).await;
    let path = format!("/task/{task_id}/runs/0/artifacts/public/a");
    let (code, body) = app.post(&path, json!({"storageType": "s3", "expires": from_now(3600)})).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "missing contentType: {body}");
    let (code, body) =
        app.post(&path, json!({"storageType": "object", "expires": from_now(3600), "contentType": "x"})).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("use `s3`"), "says what to use instead: {body}");
    let (code, body) =
        app.post(&path, json!({"storageType": "s3", "expires": "2020-01-01T00:00:00.000Z", "contentType": "x"})).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().starts_with("expires"), "{body}");
    let (code, _) = app.get(&format!("/task/{task_id}/runs/0/artifacts/public/none")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = app.get(&format!("/task/{task_id}/runs/5/artifacts")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    let (_, created) =
        app.post(&format!("/task/{task_id}/runs/0/artifacts/public/late.bin"), blob_request("text/plain")).await;
    let put_url = created["putUrl"].as_str().unwrap().to_owned();
    app.report(&task_id, 0, "completed").await;
    let (code, body) = app.post(&path, blob_request("text/plain")).await;
    assert_eq!(code, StatusCode::CONFLICT, "a completed run takes no more artifacts: {body}");
    let late = app.raw(Method::PUT, &put_url, Some(b"too late".to_vec())).await;
    assert_eq!(late.status(), StatusCode::CONFLICT, "nor bytes for them");
}

#[tokio::test]
async fn expired_artifacts_and_their_bytes_are_removed() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    let path = format!("/task/{task_id}/runs/0/artifacts/public/old.txt");
    let (_, created) = app.post(&path, blob_request("text/plain")).await;
    let put_url = created["putUrl"].as_str().unwrap().to_owned();
    assert_eq!(app.raw(Method::PUT, &put_url, Some(b"old".to_vec())).await.status(), StatusCode::OK);

    let removed = app.queue.expire_artifacts(shoal_service::now().plus_secs(2 * 3600), 100).await.unwrap();
    assert_eq!(removed, 1);
    assert_eq!(app.get(&path).await.0, StatusCode::NOT_FOUND, "the record is gone");
    let blob = shoal_blobs::BlobKey { task_id: &task_id, run_id: 0, name: "public/old.txt" };
    assert!(app.queue.blobs().open(&blob, None).await.unwrap().is_none(), "and so are the bytes");
}

#[tokio::test]
async fn hostile_uploads_and_names_are_refused_or_contained() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    // A name whose file name would be far too long for the file system still works.
    let long_name = format!("public/{}", "%".repeat(600));
    let path = format!("/task/{task_id}/runs/0/artifacts/{}", long_name.replace('%', "%25"));
    let (status, created) = app.post(&path, blob_request("text/html")).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let put_url = created["putUrl"].as_str().unwrap().to_owned();
    let page = b"<script>document.cookie</script>".to_vec();
    assert_eq!(app.raw(Method::PUT, &put_url, Some(page.clone())).await.status(), StatusCode::OK);

    // Uploaded bytes are written once.
    let again = app.raw(Method::PUT, &put_url, Some(b"replaced".to_vec())).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let body: Value = again.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("written once"), "{body}");

    // Served as uploaded content: never run as a page of the API's origin.
    let download = app.raw(Method::GET, &unsigned(&put_url), None).await;
    assert_eq!(download.status(), StatusCode::OK);
    assert_eq!(download.headers()["content-security-policy"], "sandbox");
    assert_eq!(download.headers()["x-content-type-options"], "nosniff");
    assert_eq!(download.bytes().await.unwrap().to_vec(), page, "the first upload's bytes");

    // A reference URL that would break or bloat the Location header is refused, naming the field.
    let base = format!("/task/{task_id}/runs/0/artifacts");
    for url in
        ["https://example.com/\r\nSet-Cookie: a=b".to_owned(), format!("https://example.com/{}", "a".repeat(100_000))]
    {
        let reference =
            json!({"storageType": "reference", "expires": from_now(3600), "contentType": "text/plain", "url": url});
        let (status, body) = app.post(&format!("{base}/public/ref"), reference).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["message"].as_str().unwrap().starts_with("url: "), "{body}");
    }

    // A body cut short is named as the body.
    let res = app
        .signed_raw(
            Method::POST,
            &format!("{}{base}/public/cut", app.base),
            Some(br#"{"storageType": "s3", "exp"#.to_vec()),
        )
        .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body: Value = res.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().starts_with("body: must be a JSON document"), "{body}");
}

#[tokio::test]
async fn uploads_and_live_logs_stay_within_their_size_limits() {
    let sizes = shoal_service::SizeLimits { artifact_bytes: 1000, run_bytes: 1500, log_bytes: 500 };
    let app = TestApp::with(crate::Settings { sizes, ..crate::Settings::default() }).await;
    let task_id = running_task(&app).await;
    let put_url = |name: &str| {
        let path = format!("/task/{task_id}/runs/0/artifacts/{name}");
        let app = &app;
        async move {
            let (status, created) = app.post(&path, blob_request("application/octet-stream")).await;
            assert_eq!(status, StatusCode::OK, "{created}");
            created["putUrl"].as_str().unwrap().to_owned()
        }
    };
    // Past the artifact's limit: refused, nothing kept.
    let too_big = put_url("public/big").await;
    let res = app.raw(Method::PUT, &too_big, Some(vec![7; 1001])).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["code"], "InputTooLarge");
    assert!(body["message"].as_str().unwrap().contains("artifact public/big may hold at most 1000 bytes"), "{body}");
    assert_eq!(app.raw(Method::GET, &unsigned(&too_big), None).await.status(), StatusCode::NOT_FOUND);
    // Within it, then past what the run has left.
    let first = put_url("public/first").await;
    assert_eq!(app.raw(Method::PUT, &first, Some(vec![1; 900])).await.status(), StatusCode::OK);
    let second = put_url("public/second").await;
    let res = app.raw(Method::PUT, &second, Some(vec![2; 900])).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = res.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("may hold at most 600 bytes"), "the run's remainder: {body}");
    assert_eq!(app.raw(Method::PUT, &second, Some(vec![2; 600])).await.status(), StatusCode::OK);
    // The live log.
    let log = format!("{}/logs/v1/{task_id}/0", app.root);
    let append = app.signed_raw(Method::POST, &format!("{log}?offset=0"), Some(vec![b'a'; 400])).await;
    assert_eq!(append.status(), StatusCode::OK);
    let res = app.signed_raw(Method::POST, &format!("{log}?offset=400"), Some(vec![b'b'; 101])).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_deduped_task_reads_its_artifacts_through_the_original() {
    let app = TestApp::start().await;
    let same = json!({"taskQueueId": "art/dedup", "idempotent": true, "payload": {"command": ["make"]}});
    let original = slugid();
    app.create(&original, same.clone()).await;
    app.claim("art/dedup", "w", 1).await;
    let report = json!({"storageType": "reference", "expires": from_now(3600), "contentType": "text/plain", "url": "https://example.com/report"});
    let base = format!("/task/{original}/runs/0/artifacts");
    assert_eq!(app.post(&format!("{base}/public/report.txt"), report).await.0, StatusCode::OK);
    let log = format!("{}/logs/v1/{original}/0?offset=0", app.root);
    let appended = app.signed_raw(Method::POST, &log, Some(b"built\n".to_vec())).await;
    assert!(appended.status().is_success(), "{}", appended.status());
    app.report(&original, 0, "completed").await;

    let copy = slugid();
    let status = app.create(&copy, same).await;
    assert_eq!(status["state"], "completed", "{status}");
    assert!(status.get("dedupedFrom").is_none(), "not in Taskcluster's status: {status}");
    let (_, result) = app.get(&format!("/task/{copy}/result")).await;
    assert_eq!(result["dedupedFrom"], original.as_str(), "{result}");
    assert_eq!(result["runs"][0]["dedupedFrom"], original.as_str(), "{result}");
    let (_, task) = app.get(&format!("/task/{copy}")).await;
    assert_eq!(task["idempotent"], true, "{task}");
    for path in [
        format!("/task/{copy}/artifacts/public/report.txt"),
        format!("/task/{copy}/runs/0/artifacts/public/report.txt"),
    ] {
        let res = app.raw(Method::GET, &format!("{}{path}", app.base), None).await;
        assert_eq!(res.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(res.headers()["location"], "https://example.com/report", "{path}: the original's artifact");
    }
    let res = app.raw(Method::GET, &format!("{}/logs/v1/{copy}/0", app.root), None).await;
    assert_eq!(res.text().await.unwrap(), "built\n", "the log is the original's");
    let (_, listed) = app.get(&format!("/task/{copy}/artifacts")).await;
    let names: Vec<&str> = listed["artifacts"].as_array().unwrap().iter().filter_map(|a| a["name"].as_str()).collect();
    assert!(names.contains(&"public/report.txt"), "{listed}");
}

/// An upload sent by hand, so that two can be in flight at once: the head and `first` bytes
/// of a `length`-byte body now, the rest with [`finish_upload`].
async fn start_upload(put_url: &str, length: usize, first: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let rest = put_url.trim_start_matches("http://");
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\ncontent-type: text/plain\r\ncontent-length: {length}\r\n\
         connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(first).await.unwrap();
    stream.flush().await.unwrap();
    stream
}

/// Sends the rest of an upload's body; answers the status line and body.
async fn finish_upload(mut stream: tokio::net::TcpStream, rest: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(rest).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// Waits until `n` uploads of the run are under way on the server (their temporary files
/// hold their first bytes): the server shows no other sign of an upload it has begun.
async fn uploads_under_way(app: &TestApp, task_id: &str, n: usize) {
    let run_dir = app.data_dir().join("blobs").join(task_id).join("0");
    for _ in 0..2000 {
        let under_way = std::fs::read_dir(&run_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|entry| entry.file_name().to_string_lossy().starts_with(".upload-"))
                    .filter(|entry| entry.metadata().is_ok_and(|meta| meta.len() > 0))
                    .count()
            })
            .unwrap_or(0);
        if under_way == n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("{n} uploads never got under way");
}

#[tokio::test]
async fn of_two_concurrent_uploads_the_second_to_finish_is_refused() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    for (name, first_to_finish) in [("public/one", 0), ("public/two", 1)] {
        let (status, created) =
            app.post(&format!("/task/{task_id}/runs/0/artifacts/{name}"), blob_request("text/plain")).await;
        assert_eq!(status, StatusCode::OK, "{created}");
        let put_url = created["putUrl"].as_str().unwrap().to_owned();
        let uploads = [start_upload(&put_url, 8, b"AAAA").await, start_upload(&put_url, 8, b"BBBB").await];
        let [a, b] = uploads;
        uploads_under_way(&app, &task_id, 2).await;
        let (winner, loser, kept) = if first_to_finish == 0 { (a, b, "AAAAaaaa") } else { (b, a, "BBBBbbbb") };
        let rest = |kept: &str| kept[4..].to_owned();
        let won = finish_upload(winner, rest(kept).as_bytes()).await;
        assert!(won.starts_with("HTTP/1.1 200"), "{won}");
        let other = if kept.starts_with('A') { "bbbb" } else { "aaaa" };
        let lost = finish_upload(loser, other.as_bytes()).await;
        assert!(lost.starts_with("HTTP/1.1 409"), "the second to finish: {lost}");
        let download = app.raw(Method::GET, &unsigned(&put_url), None).await;
        assert_eq!(download.text().await.unwrap(), kept, "the accepted bytes stay");
    }
    // An upload still running when its run resolves is refused at its end, and nothing of it
    // is kept.
    let (_, created) =
        app.post(&format!("/task/{task_id}/runs/0/artifacts/public/late"), blob_request("text/plain")).await;
    let put_url = created["putUrl"].as_str().unwrap().to_owned();
    let late = start_upload(&put_url, 8, b"LATE").await;
    uploads_under_way(&app, &task_id, 1).await;
    app.report(&task_id, 0, "completed").await;
    let refused = finish_upload(late, b"late").await;
    assert!(refused.starts_with("HTTP/1.1 409"), "{refused}");
    let download = app.raw(Method::GET, &unsigned(&put_url), None).await;
    assert_eq!(download.status(), StatusCode::NOT_FOUND);
    assert!(!app.data_dir().join("blobs").join(&task_id).join("0").join("apublic%2Flate").exists());
}
