//! The worker registry through the HTTP API: Taskcluster's worker calls, quarantine,
//! termination, heartbeats and workers found missing.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{Settings, TestApp, from_now, slugid};

const WORKERS: &str = "/provisioners/prov/worker-types/wt/workers";

fn claim_body(worker_id: &str, dimensions: Value) -> Value {
    json!({"workerGroup": "g", "workerId": worker_id, "tasks": 1, "dimensions": dimensions, "version": "1.2.3"})
}

async fn claim_with(app: &TestApp, worker_id: &str, dimensions: Value) -> Value {
    let (status, body) = app.post("/claim-work/prov%2Fwt", claim_body(worker_id, dimensions)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn listed(app: &TestApp, query: &str) -> Vec<String> {
    let (status, body) = app.get(&format!("{WORKERS}{query}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["workers"].as_array().unwrap().iter().map(|w| w["workerId"].as_str().unwrap().to_owned()).collect()
}

fn short_wait() -> Settings {
    Settings { claim_wait: Duration::from_millis(300), ..Settings::default() }
}

#[tokio::test]
async fn claiming_workers_are_registered_with_dimensions_and_recent_tasks() {
    let app = TestApp::with(short_wait()).await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    let linux = json!({"os": ["Linux", "Ubuntu"], "pool": ["p"]});
    assert_eq!(claim_with(&app, "w1", linux).await["tasks"].as_array().unwrap().len(), 1);
    claim_with(&app, "w2", json!({"os": ["Mac"]})).await;

    let (status, worker) = app.get(&format!("{WORKERS}/g/w1")).await;
    assert_eq!(status, StatusCode::OK, "{worker}");
    assert_eq!((worker["provisionerId"].clone(), worker["workerType"].clone()), (json!("prov"), json!("wt")));
    assert_eq!(worker["recentTasks"], json!([{"taskId": task_id, "runId": 0}]), "{worker}");
    assert_eq!(worker["runningTasks"], json!([task_id]), "{worker}");
    assert_eq!((worker["state"].clone(), worker["version"].clone()), (json!("busy"), json!("1.2.3")));
    assert_eq!(worker["dimensions"]["os"], json!(["Linux", "Ubuntu"]), "{worker}");
    assert!(worker["firstClaim"].is_string() && worker["lastDateActive"].is_string(), "{worker}");

    assert_eq!(listed(&app, "").await, ["w1", "w2"]);
    assert_eq!(listed(&app, "?dimension=os:Linux&dimension=pool:p").await, ["w1"]);
    assert_eq!(listed(&app, "?dimension=os:Linux&dimension=pool:q").await, Vec::<String>::new());
    assert_eq!(listed(&app, "?state=idle").await, ["w2"]);
    assert_eq!(listed(&app, "?limit=1").await, ["w1"], "paged");
    let (status, body) = app.get(&format!("{WORKERS}?dimension=os")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (_, summary) = app.get("/task-queues/prov%2Fwt/dimensions").await;
    assert_eq!(summary["liveWorkers"], 2, "{summary}");
    assert_eq!(summary["dimensions"]["os"], json!({"Linux": 1, "Mac": 1, "Ubuntu": 1}), "{summary}");

    app.report(&task_id, 0, "completed").await;
    let (_, events) = app.get(&format!("{WORKERS}/g/w1/events")).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["resolved", "claimed", "first-seen"], "{events}");
    assert_eq!(events["events"][0]["detail"], "completed", "{events}");

    let (status, body) = app.get(&format!("{WORKERS}/g/nobody")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn provisioners_and_worker_types_come_from_the_task_queues() {
    let app = TestApp::start().await;
    for queue in ["prov/wt", "prov/other", "elsewhere/wt"] {
        app.create(&slugid(), json!({"taskQueueId": queue})).await;
    }
    let (_, body) = app.get("/provisioners").await;
    let ids: Vec<&str> =
        body["provisioners"].as_array().unwrap().iter().map(|p| p["provisionerId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["elsewhere", "prov"], "{body}");
    let (_, body) = app.get("/provisioners/prov/worker-types").await;
    let types: Vec<&str> =
        body["workerTypes"].as_array().unwrap().iter().map(|t| t["workerType"].as_str().unwrap()).collect();
    assert_eq!(types, ["other", "wt"], "{body}");
    let (status, body) = app.get("/provisioners/prov/worker-types/wt").await;
    assert_eq!((status, body["taskQueueId"].clone()), (StatusCode::OK, json!("prov/wt")), "{body}");
    let (status, _) = app.get("/provisioners/nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = app.get("/provisioners/prov").await;
    assert_eq!((status, body["provisionerId"].clone()), (StatusCode::OK, json!("prov")), "{body}");
}

#[tokio::test]
async fn quarantine_holds_work_back_until_released() {
    let app = TestApp::with(short_wait()).await;
    claim_with(&app, "w1", json!({})).await;
    let (status, body) = app
        .put(&format!("{WORKERS}/g/w1"), json!({"quarantineUntil": from_now(3600), "quarantineInfo": "bad disk"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["quarantineDetails"][0]["quarantineInfo"], "bad disk", "{body}");
    assert_eq!(body["quarantineDetails"][0]["clientId"], "root", "{body}");
    assert_eq!(body["state"], "quarantined", "{body}");
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    assert!(claim_with(&app, "w1", json!({})).await["tasks"].as_array().unwrap().is_empty(), "held back");
    assert_eq!(listed(&app, "?quarantined=true").await, ["w1"]);
    assert_eq!(listed(&app, "?quarantined=false").await, Vec::<String>::new());

    let (status, body) = app.put(&format!("{WORKERS}/g/w1"), json!({"quarantineUntil": from_now(0)})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let claims = claim_with(&app, "w1", json!({})).await;
    assert_eq!(claims["tasks"][0]["status"]["taskId"], json!(task_id), "released: {claims}");
    let (_, events) = app.get(&format!("{WORKERS}/g/w1/events")).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["claimed", "released", "quarantined", "first-seen"], "{events}");

    let (status, body) = app.put(&format!("{WORKERS}/g/nobody"), json!({"quarantineUntil": from_now(60)})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = app.put(&format!("{WORKERS}/g/w1"), json!({"quarantineUntil": "soon"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("quarantineUntil"), "{body}");
}

#[tokio::test]
async fn declare_records_a_worker_and_refuses_unknown_properties() {
    let app = TestApp::start().await;
    let expires = from_now(7200);
    let (status, body) = app.put("/provisioners/prov/worker-types/wt/g/new", json!({"expires": expires})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["expires"], json!(expires), "{body}");
    assert_eq!(listed(&app, "").await, ["new"]);
    let (status, body) = app.put("/provisioners/prov/worker-types/wt/g/new", json!({"colour": "red"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("colour"), "{body}");
}

#[tokio::test]
async fn a_terminated_worker_is_told_to_stop_and_exits() {
    let app = TestApp::with(short_wait()).await;
    let (status, standing) =
        app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({"dimensions": {"os": ["Linux"]}})).await;
    assert_eq!((status, standing["terminate"].clone()), (StatusCode::OK, json!(false)), "{standing}");
    assert!(standing["heartbeatEvery"].as_f64().unwrap() > 0.0, "{standing}");
    let (status, body) = app.post(&format!("{WORKERS}/g/w1/terminate"), json!({})).await;
    assert_eq!((status, body["terminating"].clone()), (StatusCode::OK, json!(true)), "{body}");
    app.create(&slugid(), json!({})).await;
    let answer = claim_with(&app, "w1", json!({})).await;
    assert_eq!(answer["terminate"], true, "{answer}");
    assert!(answer["tasks"].as_array().unwrap().is_empty(), "{answer}");
    let (_, standing) = app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({})).await;
    assert_eq!(standing["terminate"], true, "{standing}");
    app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({"exiting": true})).await;
    let (_, worker) = app.get(&format!("{WORKERS}/g/w1")).await;
    assert_eq!(worker["state"], "terminated", "{worker}");
    // The same name started again is a new life.
    let answer = claim_with(&app, "w1", json!({})).await;
    assert_eq!(answer["tasks"].as_array().unwrap().len(), 1, "{answer}");
}

/// The next message of `exchange` about `task_id`.
async fn next_about(stream: &mut shoal_client::EventStream, task_id: &str) -> Value {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), stream.next_message()).await;
        let message = next.expect("a message within 30 s").expect("reading").expect("stream open");
        if message["payload"]["status"]["taskId"] == json!(task_id) {
            return message;
        }
    }
}

#[tokio::test]
async fn a_silent_heartbeating_worker_is_missing_and_its_run_is_retried_at_once() {
    let settings = Settings { worker_dead_after: Duration::from_secs(1), ..short_wait() };
    let app = TestApp::with(settings).await;
    let client = shoal_client::Client::new(&app.root).unwrap();
    let binding = ("exchange/taskcluster-queue/v1/task-pending".to_owned(), "#".to_owned());
    let mut stream = client.listen(&[binding]).await.unwrap();
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    next_about(&mut stream, &task_id).await;
    app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({})).await;
    assert_eq!(claim_with(&app, "w1", json!({})).await["tasks"].as_array().unwrap().len(), 1);
    // The worker says nothing more; its claim would hold for 20 minutes.
    let retry = next_about(&mut stream, &task_id).await;
    assert_eq!(retry["payload"]["runId"], 1, "{retry}");
    let (_, status) = app.get(&format!("/task/{task_id}/status")).await;
    assert_eq!(status["status"]["runs"][0]["reasonResolved"], "claim-expired", "{status}");
    let (_, worker) = app.get(&format!("{WORKERS}/g/w1")).await;
    assert_eq!(worker["state"], "missing", "{worker}");
    let (_, events) = app.get(&format!("{WORKERS}/g/w1/events")).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds[..2].contains(&"missing") && kinds[..2].contains(&"resolved"), "{events}");
    assert_eq!(
        events["events"].as_array().unwrap().iter().find(|e| e["kind"] == "resolved").unwrap()["detail"],
        "exception (claim-expired)",
        "{events}"
    );
}
