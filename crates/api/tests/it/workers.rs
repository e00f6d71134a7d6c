//! The worker registry through the HTTP API: Taskcluster's worker calls, quarantine,
//! termination, heartbeats and workers found missing.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{Settings, TestApp, from_now, slugid, task_def};

const WORKERS: &str = "/provisioners/prov/worker-types/wt/workers";
/// Shoal's fleet view of the same workers (Taskcluster's fields and Shoal's).
const FLEET: &str = "/task-queues/prov/wt/workers";

fn claim_body(worker_id: &str, dimensions: Value) -> Value {
    json!({"workerGroup": "g", "workerId": worker_id, "tasks": 1, "dimensions": dimensions, "version": "1.2.3"})
}

async fn claim_with(app: &TestApp, worker_id: &str, dimensions: Value) -> Value {
    let (status, body) = app.post("/claim-work/prov%2Fwt", claim_body(worker_id, dimensions)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn listed(app: &TestApp, query: &str) -> Vec<String> {
    let (status, body) = app.get(&format!("{FLEET}{query}")).await;
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

    let (status, worker) = app.get(&format!("{FLEET}/g/w1")).await;
    assert_eq!(status, StatusCode::OK, "{worker}");
    assert_eq!((worker["provisionerId"].clone(), worker["workerType"].clone()), (json!("prov"), json!("wt")));
    assert_eq!(worker["recentTasks"], json!([{"taskId": task_id, "runId": 0}]), "{worker}");
    assert_eq!(worker["runningTasks"], json!([task_id]), "{worker}");
    assert_eq!((worker["state"].clone(), worker["version"].clone()), (json!("busy"), json!("1.2.3")));
    assert_eq!(worker["dimensions"]["os"], json!(["Linux", "Ubuntu"]), "{worker}");
    assert!(worker["firstClaim"].is_string() && worker["lastDateActive"].is_string(), "{worker}");
    // Its history, with when each run was claimed; paged, and its token checked.
    let (status, runs) = app.get(&format!("{FLEET}/g/w1/runs?limit=1")).await;
    assert_eq!(status, StatusCode::OK, "{runs}");
    assert_eq!(runs["runs"][0]["taskId"], task_id.as_str(), "{runs}");
    assert!(runs["runs"][0]["claimed"].is_string() && runs.get("continuationToken").is_none(), "{runs}");
    let (status, body) = app.get(&format!("{FLEET}/g/w1/runs?continuationToken=nope")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    assert_eq!(listed(&app, "").await, ["w1", "w2"]);
    assert_eq!(listed(&app, "?dimension=os:Linux&dimension=pool:p").await, ["w1"]);
    assert_eq!(listed(&app, "?dimension=os:Linux&dimension=pool:q").await, Vec::<String>::new());
    assert_eq!(listed(&app, "?state=idle").await, ["w2"]);
    assert_eq!(listed(&app, "?limit=1").await, ["w1"], "paged");
    // Taskcluster's getWorker and listWorkers answer its shapes only (their schemas allow
    // nothing more); Shoal's fields are in the fleet view above.
    let (_, plain) = app.get(&format!("{WORKERS}/g/w1")).await;
    assert_eq!(plain["recentTasks"], worker["recentTasks"], "{plain}");
    assert!(
        ["state", "dimensions", "version", "runningTasks"].iter().all(|field| plain.get(field).is_none()),
        "{plain}"
    );
    let (_, plain) = app.get(&format!("{WORKERS}?dimension=os:Linux")).await;
    assert_eq!(plain["workers"][0]["workerId"], "w1", "Shoal's filters still apply: {plain}");
    assert!(plain["workers"][0].get("dimensions").is_none(), "{plain}");
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

    let (status, body) = app.get(&format!("{FLEET}/g/nobody")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn the_backlog_counts_pending_runs_by_dimension_set_and_marks_those_no_live_worker_matches() {
    let app = TestApp::with(short_wait()).await;
    let (linux, mac) = (json!({"os": ["linux"]}), json!({"os": ["mac"]}));
    app.create(&slugid(), json!({"dimensions": linux})).await;
    assert_eq!(claim_with(&app, "w1", linux.clone()).await["tasks"].as_array().unwrap().len(), 1);
    assert!(claim_with(&app, "w2", mac.clone()).await["tasks"].as_array().unwrap().is_empty());
    let (status, body) = app.put(&format!("{WORKERS}/g/w2"), json!({"quarantineUntil": from_now(3600)})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for dimensions in [&linux, &mac, &mac] {
        app.create(&slugid(), json!({"dimensions": dimensions})).await;
    }

    let (status, backlog) = app.get("/task-queues/prov%2Fwt/backlog").await;
    assert_eq!(status, StatusCode::OK, "{backlog}");
    assert_eq!((backlog["pendingTasks"].clone(), backlog["complete"].clone()), (json!(3), json!(true)), "{backlog}");
    let lines = backlog["backlog"].as_array().unwrap();
    let shown: Vec<(Value, Value, Value, Value)> = lines
        .iter()
        .map(|line| {
            (
                line["dimensions"].clone(),
                line["pendingTasks"].clone(),
                line["workers"].clone(),
                line["stranded"].clone(),
            )
        })
        .collect();
    let workers = |live: u64, quarantined: u64| json!({"live": live, "quarantined": quarantined, "maintenance": 0, "terminating": 0, "missing": 0});
    assert_eq!(
        shown,
        [(linux, json!(1), workers(1, 0), json!(false)), (mac, json!(2), workers(0, 1), json!(true))],
        "{backlog}"
    );
    assert!(lines[0]["oldestPending"].as_str().unwrap() <= lines[1]["oldestPending"].as_str().unwrap(), "{backlog}");
    let (status, body) = app.get("/task-queues/nonsense/backlog").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
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
    assert!(body.get("state").is_none(), "Taskcluster's worker-response only: {body}");
    let (_, worker) = app.get(&format!("{FLEET}/g/w1")).await;
    assert_eq!(worker["state"], "quarantined", "{worker}");
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
    let (_, worker) = app.get(&format!("{FLEET}/g/w1")).await;
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
    let (_, worker) = app.get(&format!("{FLEET}/g/w1")).await;
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

#[tokio::test]
async fn maintenance_holds_work_back_whoever_entered_it() {
    let app = TestApp::with(short_wait()).await;
    let heartbeat = |body: Value| {
        let app = &app;
        async move {
            let (status, standing) = app.post(&format!("{WORKERS}/g/w1/heartbeat"), body).await;
            assert_eq!(status, StatusCode::OK, "{standing}");
            standing
        }
    };
    // The worker itself: its health check failed.
    let standing = heartbeat(json!({"maintenance": "health check failed: exit 1"})).await;
    assert_eq!(standing["maintenance"], true, "{standing}");
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    assert!(claim_with(&app, "w1", json!({})).await["tasks"].as_array().unwrap().is_empty(), "held back");
    assert_eq!(listed(&app, "?state=maintenance").await, ["w1"]);
    let (_, worker) = app.get(&format!("{FLEET}/g/w1")).await;
    assert_eq!(worker["maintenance"]["message"], "health check failed: exit 1", "{worker}");
    assert_eq!(worker["state"], "maintenance", "{worker}");
    assert!(heartbeat(json!({})).await.get("maintenance").is_none_or(|m| m == true), "saying nothing changes nothing");
    let standing = heartbeat(json!({"maintenance": null})).await;
    assert!(standing.get("maintenance").is_none(), "{standing}");
    assert_eq!(claim_with(&app, "w1", json!({})).await["tasks"][0]["status"]["taskId"], json!(task_id));

    // An operator's stands until an operator ends it.
    let (status, body) = app.post(&format!("{WORKERS}/g/w1/maintenance"), json!({"maintenance": "reimage"})).await;
    assert_eq!((status, body["state"].clone()), (StatusCode::OK, json!("maintenance")), "{body}");
    assert_eq!(body["maintenance"]["clientId"], "root", "{body}");
    assert_eq!(heartbeat(json!({"maintenance": null})).await["maintenance"], true, "the worker cannot end it");
    app.create(&slugid(), json!({})).await;
    assert!(claim_with(&app, "w1", json!({})).await["tasks"].as_array().unwrap().is_empty(), "held back");
    let (status, body) = app.post(&format!("{WORKERS}/g/w1/maintenance"), json!({"maintenance": null})).await;
    assert_eq!((status, body["state"].clone()), (StatusCode::OK, json!("busy")), "{body}");
    let (_, events) = app.get(&format!("{WORKERS}/g/w1/events")).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds[..2], ["maintenance-ended", "maintenance"], "{events}");

    let long = "x".repeat(shoal_engine::worker::MAX_MESSAGE + 1);
    let (status, body) = app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({"maintenance": long})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().starts_with("maintenance:"), "{body}");
    let (status, body) = app.post(&format!("{WORKERS}/g/nobody/maintenance"), json!({"maintenance": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn a_worker_posts_events_each_kind_under_its_own_scope() {
    let app = TestApp::with(short_wait()).await;
    app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({})).await;
    let events_url = format!("{}{WORKERS}/g/w1/events", app.base);
    let logger = app.make_client("worker/w1", &["queue:post-worker-event:prov/wt/g/w1#log"]).await;
    let post = |credentials, body| app.call_as(Some(credentials), reqwest::Method::POST, &events_url, Some(body));
    let (status, body) = post(&logger, json!({"kind": "log", "message": "disk 91% full"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = post(&logger, json!({"kind": "shutdown"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("queue:post-worker-event:prov/wt/g/w1#shutdown"), "{body}");

    let (status, body) =
        app.post(&format!("{WORKERS}/g/w1/events"), json!({"kind": "error", "message": "no sandbox"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app.post(&format!("{WORKERS}/g/w1/events"), json!({"kind": "shutdown"})).await;
    assert_eq!((status, body["state"].clone()), (StatusCode::OK, json!("terminated")), "{body}");
    let (_, events) = app.get(&format!("{WORKERS}/g/w1/events")).await;
    let said: Vec<(&str, Option<&str>, Option<&str>)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["detail"].as_str(), e["clientId"].as_str()))
        .collect();
    assert_eq!(
        said[..3],
        [
            ("shutdown", None, Some("root")),
            ("error", Some("no sandbox"), Some("root")),
            ("log", Some("disk 91% full"), Some("worker/w1"))
        ],
        "{events}"
    );
    for (bad, field) in
        [(json!({"kind": "reboot"}), "kind:"), (json!({"kind": "log", "message": "x".repeat(1025)}), "message:")]
    {
        let (status, body) = app.post(&format!("{WORKERS}/g/w1/events"), bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["message"].as_str().unwrap().starts_with(field), "{body}");
    }
}

#[tokio::test]
async fn a_claim_waiting_out_a_maintenance_takes_work_once_it_ends() {
    let app = TestApp::with(Settings { claim_wait: Duration::from_secs(60), ..Settings::default() }).await;
    app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({"maintenance": "cooling down"})).await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    let claim = claim_with(&app, "w1", json!({}));
    let ended = async {
        while app.queue.claims_waiting() == 0 {
            tokio::task::yield_now().await;
        }
        let (status, _) = app.post(&format!("{WORKERS}/g/w1/heartbeat"), json!({"maintenance": null})).await;
        assert_eq!(status, StatusCode::OK);
    };
    let (answer, ()) = tokio::join!(claim, ended);
    // Not the minute's end: woken when the maintenance ended.
    assert_eq!(answer["tasks"][0]["status"]["taskId"], json!(task_id), "{answer}");
}

/// claimWork by worker `id` serving `queues` (the first in the path), for up to `n` runs.
async fn claim_from(app: &TestApp, id: &str, queues: &[&str], n: u32) -> (StatusCode, Value) {
    let body = json!({"workerGroup": "g", "workerId": id, "tasks": n, "taskQueueIds": queues});
    app.post(&format!("/claim-work/{}", queues[0].replace('/', "%2F")), body).await
}

fn claimed_ids(answer: &Value) -> Vec<String> {
    answer["tasks"].as_array().unwrap().iter().map(|t| t["status"]["taskId"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn one_worker_serves_several_queues_with_one_capacity_and_one_standing() {
    let app = TestApp::with(short_wait()).await;
    let (a, b) = ("multi/a", "multi/b");
    let on_a = slugid();
    app.create(&on_a, json!({"taskQueueId": a})).await;
    let on_b: Vec<String> = (0..2).map(|_| slugid()).collect();
    for task_id in &on_b {
        app.create(task_id, json!({"taskQueueId": b})).await;
    }
    // One count for both, the first queue first.
    let (status, answer) = claim_from(&app, "box", &[a, b], 2).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(claimed_ids(&answer), [on_a.clone(), on_b[0].clone()], "{answer}");
    let (_, answer) = claim_from(&app, "box", &[a, b], 2).await;
    assert_eq!(claimed_ids(&answer), [on_b[1].clone()], "{answer}");

    // Listed in each queue, as one machine serving both.
    for queue in [a, b] {
        let (_, record) = app.get(&format!("/task-queues/multi/{}/workers/g/box", &queue[6..])).await;
        assert_eq!(record["taskQueueIds"], json!([a, b]), "{record}");
    }
    // A namesake in another queue is another machine: untouched by what follows.
    app.post("/claim-work/multi%2Fc", json!({"workerGroup": "g", "workerId": "box", "tasks": 1})).await;

    // Quarantined through one queue, held back in both.
    let (status, body) =
        app.put("/provisioners/multi/worker-types/a/workers/g/box", json!({"quarantineUntil": from_now(3600)})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, record) = app.get("/task-queues/multi/b/workers/g/box").await;
    assert_eq!(record["state"], "quarantined", "{record}");
    let (_, other) = app.get("/task-queues/multi/c/workers/g/box").await;
    assert_ne!(other["state"], "quarantined", "{other}");
    let later = slugid();
    app.create(&later, json!({"taskQueueId": b})).await;
    let (_, answer) = claim_from(&app, "box", &[a, b], 1).await;
    assert!(claimed_ids(&answer).is_empty(), "{answer}");

    // Started again on one queue, it is that queue's worker alone.
    app.post("/claim-work/multi%2Fa", json!({"workerGroup": "g", "workerId": "box", "tasks": 1})).await;
    let (_, record) = app.get("/task-queues/multi/a/workers/g/box").await;
    assert!(record.get("taskQueueIds").is_none(), "{record}");

    // Each queue's claim scope is needed.
    let only_a = app.make_client("worker/box", &["queue:claim-work:multi/a", "queue:worker-id:g/box"]).await;
    let url = format!("{}/claim-work/multi%2Fa", app.base);
    let body = json!({"workerGroup": "g", "workerId": "box", "taskQueueIds": [a, b]});
    let (status, refused) = app.call_as(Some(&only_a), reqwest::Method::POST, &url, Some(body)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("queue:claim-work:multi/b"), "{refused}");
    for (queues, field) in [
        (json!([b, a]), "taskQueueIds:"),
        (json!([a, b, b]), "taskQueueIds[2]:"),
        (json!([a, "nope"]), "taskQueueIds[1]:"),
    ] {
        let body = json!({"workerGroup": "g", "workerId": "box", "taskQueueIds": queues});
        let (status, body) = app.post("/claim-work/multi%2Fa", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["message"].as_str().unwrap().starts_with(field), "{body}");
    }
}

#[tokio::test]
async fn a_claim_waiting_on_several_queues_is_woken_by_work_on_any() {
    let app = TestApp::with(Settings { claim_wait: Duration::from_secs(60), ..Settings::default() }).await;
    let claim = claim_from(&app, "box", &["wake/a", "wake/b"], 1);
    let task_id = slugid();
    let created = async {
        while app.queue.claims_waiting() < 2 {
            tokio::task::yield_now().await;
        }
        app.create(&task_id, json!({"taskQueueId": "wake/b"})).await;
    };
    let ((status, answer), ()) = tokio::join!(claim, created);
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(claimed_ids(&answer), [task_id], "{answer}");
}

#[tokio::test]
async fn a_wake_up_a_several_queue_claim_left_unused_goes_to_another_worker() {
    let app = TestApp::with(Settings { claim_wait: Duration::from_secs(60), ..Settings::default() }).await;
    let in_line = |n: usize| {
        let app = &app;
        async move {
            while app.queue.claims_waiting() < n {
                tokio::task::yield_now().await;
            }
        }
    };
    // x is first in line on both queues, y second on both.
    let x = claim_from(&app, "x", &["pass/a", "pass/b"], 1);
    let y = async {
        in_line(2).await;
        // Serving both queues too, its call is not parked with the store: only a wake-up
        // reaches it, whichever run x leaves.
        claim_from(&app, "y", &["pass/b", "pass/a"], 1).await
    };
    let created = async {
        in_line(4).await;
        // One commit makes both pending: x is woken on each queue and takes one run; the
        // wake-up it leaves is y's.
        let tasks = json!({
            "on-a": {"task": task_def(json!({"taskQueueId": "pass/a"}))},
            "on-b": {"task": task_def(json!({"taskQueueId": "pass/b"}))}
        });
        let (status, body) = app.create_graph(&slugid(), json!({"routing": "r", "tasks": tasks})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    };
    let ((_, x), (_, y), ()) = tokio::join!(x, y, created);
    // Not the minute's end: y was woken by the wake-up x left.
    assert_eq!((claimed_ids(&x).len(), claimed_ids(&y).len()), (1, 1), "{x} {y}");
}
