//! Live logs: appends by offset, reads by offset, and following a growing log to its end.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{TestApp, slugid};

async fn running_task(app: &TestApp) -> String {
    let task_id = slugid();
    app.create(&task_id, json!({"taskQueueId": "logs/q"})).await;
    assert_eq!(app.claim("logs/q", "w", 1).await.len(), 1);
    task_id
}

async fn append(app: &TestApp, task_id: &str, offset: u64, bytes: &[u8]) -> (StatusCode, Value) {
    let url = format!("{}/logs/v1/{task_id}/0?offset={offset}", app.root);
    let res = app.signed_raw(Method::POST, &url, Some(bytes.to_vec())).await;
    let status = res.status();
    (status, res.json().await.unwrap())
}

async fn read(app: &TestApp, task_id: &str, offset: u64) -> String {
    let url = format!("{}/logs/v1/{task_id}/0?offset={offset}", app.root);
    app.raw(Method::GET, &url, None).await.text().await.unwrap()
}

#[tokio::test]
async fn appends_are_idempotent_and_reads_start_anywhere() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    assert_eq!(append(&app, &task_id, 0, b"line one\n").await, (StatusCode::OK, json!({"size": 9})));
    assert_eq!(append(&app, &task_id, 0, b"line one\n").await.1, json!({"size": 9}), "a resend adds nothing");
    assert_eq!(append(&app, &task_id, 9, b"line two\n").await.1, json!({"size": 18}));
    let (code, body) = append(&app, &task_id, 40, b"far ahead").await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(body["message"].as_str().unwrap().contains("send from offset 18"), "{body}");

    assert_eq!(read(&app, &task_id, 0).await, "line one\nline two\n");
    assert_eq!(read(&app, &task_id, 9).await, "line two\n");
    assert_eq!(read(&app, &task_id, 18).await, "");

    app.report(&task_id, 0, "completed").await;
    let (code, _) = append(&app, &task_id, 18, b"too late\n").await;
    assert_eq!(code, StatusCode::CONFLICT, "a resolved run's log is closed");
    assert_eq!(read(&app, &task_id, 0).await, "line one\nline two\n", "the log stays readable after the run");
}

#[tokio::test]
async fn a_viewer_reads_the_end_first_then_earlier_windows_or_any_line() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    append(&app, &task_id, 0, b"one\ntwo\nthree\nfour\n").await;
    let get = |query: &str| {
        let url = format!("{}/logs/v1/{task_id}/0?{query}", app.root);
        let app = &app;
        async move {
            let res = app.raw(Method::GET, &url, None).await;
            let status = res.status();
            let header = |name: &str| res.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
            let (start, line) = (header("x-log-offset"), header("x-log-line"));
            (status, start, line, res.text().await.unwrap())
        }
    };
    let ok = |start: &str, line: Option<&str>, text: &str| {
        (StatusCode::OK, Some(start.to_owned()), line.map(str::to_owned), text.to_owned())
    };
    // The last 10 bytes of 19 begin mid-line: the answer starts at the next line, numbered.
    assert_eq!(get("tail=10").await, ok("14", Some("4"), "four\n"));
    assert_eq!(get("tail=100").await, ok("0", Some("1"), "one\ntwo\nthree\nfour\n"));
    // The window before it, limited to where the tail began (its lines' numbers are known).
    assert_eq!(get("offset=4&limit=5").await, ok("4", None, "two\nt"));
    // A line, wherever it is; past the end, nothing.
    assert_eq!(get("line=3&limit=6").await, ok("8", Some("3"), "three\n"));
    assert_eq!(get("line=9").await, ok("19", Some("9"), ""));
    for bad in ["tail=10&offset=4", "limit=5&follow=1", "tail=-1", "limit=x", "line=0", "line=2&tail=5", "line=x"] {
        let (status, _, _, body) = get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}

#[tokio::test]
async fn a_search_covers_the_whole_log_and_numbers_its_lines() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    // Over 1 MiB, so the scan reads it in several pieces; the match in a line cut between two.
    let mut log = String::from("first: ERROR early on\n");
    let filler = "x".repeat(99);
    for n in 2..=12_000 {
        log.push_str(&format!("{n:05} {filler}\n"));
    }
    log.push_str("\x1b[31mLast error\x1b[0m, twice: error\nno newline at the end: Error");
    let mut offset = 0;
    for chunk in log.as_bytes().chunks(1 << 20) {
        offset = append(&app, &task_id, offset, chunk).await.1["size"].as_u64().unwrap();
    }
    let search = |q: &str| {
        let url = format!("{}/logs/v1/{task_id}/0/search?q={q}", app.root);
        let app = &app;
        async move {
            let res = app.raw(Method::GET, &url, None).await;
            let status = res.status();
            let lines: Vec<Value> =
                res.text().await.unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
            (status, lines)
        }
    };
    let (status, found) = search("eRRor").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(found[0], json!({"line": 1, "text": "first: ERROR early on"}));
    assert_eq!(
        found[1],
        json!({"line": 12_001, "text": "\x1b[31mLast error\x1b[0m, twice: error"}),
        "one match a line"
    );
    assert_eq!(found[2]["line"], 12_002);
    assert_eq!(found[3], json!({"done": true, "lines": 12_002, "matches": 3, "truncated": false}));
    let (_, found) = search("07777").await;
    assert_eq!(found[0]["line"], 7777, "a line in the middle, across reads");
    // Reads by line, and the tail's number, over the same blocks (counted once, then kept).
    for _ in 0..2 {
        let res = app.raw(Method::GET, &format!("{}/logs/v1/{task_id}/0?line=7777&limit=10", app.root), None).await;
        assert_eq!(res.headers()["x-log-line"], "7777");
        assert_eq!(res.text().await.unwrap(), "07777 xxxx");
        let res = app.raw(Method::GET, &format!("{}/logs/v1/{task_id}/0?tail=30", app.root), None).await;
        assert_eq!(res.headers()["x-log-line"], "12002", "the last line, whole");
        assert_eq!(res.text().await.unwrap(), "no newline at the end: Error");
    }
    let (_, found) = search("x").await;
    assert_eq!(found.len(), 1001);
    let summary = &found[1000];
    assert_eq!((&summary["matches"], &summary["truncated"]), (&json!(1000), &json!(true)), "{summary}");
    assert!(summary["lines"].as_u64().unwrap() >= 1000, "the lines searched before it stopped: {summary}");
    for bad in ["", &"y".repeat(257)] {
        let (status, _) = search(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "q={bad}");
    }
}

#[tokio::test]
async fn every_claimed_run_has_a_live_log_artifact() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    let res = app.raw(Method::GET, &format!("{}/task/{task_id}/artifacts/public/logs/live.log", app.base), None).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(res.headers()["x-taskcluster-artifact-storage-type"], "reference");
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(location, format!("{}/logs/v1/{task_id}/0?follow=1", app.root));
    let (_, info) = app.get(&format!("/task/{task_id}/runs/0/artifact-info/public/logs/live.log")).await;
    assert_eq!(info["storageType"], "reference");
}

#[tokio::test]
async fn a_follower_sees_output_while_the_run_goes_on_and_ends_with_it() {
    let app = TestApp::start().await;
    let task_id = running_task(&app).await;
    append(&app, &task_id, 0, b"starting\n").await;
    let url = format!("{}/logs/v1/{task_id}/0?follow=1", app.root);
    let mut res = app.raw(Method::GET, &url, None).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.chunk().await.unwrap().unwrap(), "starting\n", "what was there");

    // Bytes appended while the follower waits reach it before the run ends.
    append(&app, &task_id, 9, b"compiling\n").await;
    assert_eq!(res.chunk().await.unwrap().unwrap(), "compiling\n", "live");

    append(&app, &task_id, 19, b"done\n").await;
    app.report(&task_id, 0, "completed").await;
    let mut rest = Vec::new();
    while let Some(chunk) = res.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"done\n", "the response ends when the run ends, with nothing lost");

    let (code, _) = app.get("/task/nonexistentQxCxxxxxxxxxxA/status").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let unknown = format!("{}/logs/v1/{}/0", app.root, slugid());
    assert_eq!(app.raw(Method::GET, &unknown, None).await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_expired_task_goes_with_its_live_log() {
    let app = TestApp::start().await;
    let task_id = slugid();
    // Expiring as soon as its deadline (a second away) has passed.
    let soon = crate::from_now(1);
    app.create(&task_id, json!({"deadline": soon, "expires": soon})).await;
    app.claim("prov/wt", "w", 1).await;
    assert_eq!(append(&app, &task_id, 0, b"some output").await.0, StatusCode::OK);
    app.report(&task_id, 0, "completed").await;
    assert_eq!(read(&app, &task_id, 0).await, "some output");
    // With SQLite the log is a file; with PostgreSQL it is in the database (every server's).
    let log_files = || std::fs::read_dir(app.data_dir().join("blobs/.live")).unwrap().count();
    let files = usize::from(!app.queue.logs_shared());
    assert_eq!(log_files(), files);
    // The due loop (every 50 ms here) deletes it once `expires` has passed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, _) = app.get(&format!("/task/{task_id}")).await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the expired task was never deleted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let url = format!("{}/logs/v1/{task_id}/0", app.root);
    assert_eq!(app.raw(Method::GET, &url, None).await.status(), StatusCode::NOT_FOUND, "its log went too");
    assert_eq!(log_files(), 0, "the log's file was deleted");
    let (status, _) = app.get(&format!("/task-group/{task_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "and its group, left empty");
}
