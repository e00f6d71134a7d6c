//! The embedded event stream, through the use cases of the original queue design: each
//! listener binds the way that design describes and sees exactly what it asked for.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{TestApp, slugid};

const Q: &str = "exchange/taskcluster-queue/v1/";

/// A connected event-stream client that has seen `ready` (the CLI's own client).
pub(crate) struct Listener(shoal_client::EventStream);

impl Listener {
    pub(crate) async fn connect(app: &TestApp, bindings: &[(&str, &str)]) -> Listener {
        let client = shoal_client::Client::new(&app.root).unwrap();
        let bindings: Vec<(String, String)> =
            bindings.iter().map(|(exchange, pattern)| (format!("{Q}{exchange}"), (*pattern).to_owned())).collect();
        Listener(client.listen(&bindings).await.expect("subscribed"))
    }

    /// The next message, as `{exchange, routingKey, routes, payload}`.
    pub(crate) async fn next_message(&mut self) -> Value {
        // A listener that hears nothing would hang the suite; fail loudly instead.
        let next = tokio::time::timeout(Duration::from_secs(30), self.0.next_message()).await;
        next.expect("no message within 30 s").expect("reading the stream").expect("the stream ended")
    }
}

async fn connect(app: &TestApp, bindings: &str) -> reqwest::Response {
    let bindings = percent_encoding::utf8_percent_encode(bindings, percent_encoding::NON_ALPHANUMERIC);
    reqwest::get(format!("{}/api/events/v1/connect/?bindings={bindings}", app.root)).await.unwrap()
}

fn short(message: &Value) -> &str {
    message["exchange"].as_str().unwrap().trim_start_matches(Q)
}

#[tokio::test]
async fn an_observant_provisioner_counts_pending_tasks_per_queue() {
    let app = TestApp::start().await;
    let mut provisioner = Listener::connect(
        &app,
        &[("task-pending", "primary.*.*.*.*.prov.#"), ("task-running", "primary.*.*.*.*.prov.#")],
    )
    .await;
    for queue in ["prov/a", "prov/a", "prov/a", "prov/b", "other/a", "prov/b"] {
        app.create(&slugid(), json!({"taskQueueId": queue})).await;
    }
    assert_eq!(app.claim("prov/a", "w1", 1).await.len(), 1);
    let mut pending: HashMap<String, i64> = HashMap::new();
    // Five pending for prov (other/a is not ours) and one running.
    for _ in 0..6 {
        let message = provisioner.next_message().await;
        let queue = message["payload"]["status"]["taskQueueId"].as_str().unwrap().to_owned();
        assert!(queue.starts_with("prov/"), "{message}");
        *pending.entry(queue).or_default() += if short(&message) == "task-pending" { 1 } else { -1 };
    }
    for queue in ["prov/a", "prov/b"] {
        let (_, counts) = app.get(&format!("/pending/{}", queue.replace('/', "%2F"))).await;
        assert_eq!(pending[queue], counts["pendingTasks"].as_i64().unwrap(), "{queue}: events agree with the queue");
    }
    assert_eq!(pending["prov/a"], 2);
}

#[tokio::test]
async fn an_idle_worker_is_woken_by_task_pending_for_its_queue() {
    let app = TestApp::start().await;
    let mut worker = Listener::connect(&app, &[("task-pending", "primary.*.*.*.*.prov.wt.#")]).await;
    app.create(&slugid(), json!({"taskQueueId": "prov/other"})).await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    let message = worker.next_message().await;
    assert_eq!(message["payload"]["status"]["taskId"], task_id, "prov/other's task was not delivered");
    assert_eq!(message["payload"]["runId"], 0);
    assert_eq!(message["payload"]["version"], 1);
    assert!(message["routingKey"].as_str().unwrap().starts_with(&format!("primary.{task_id}.0._._.prov.wt.")));
    let claims = app.claim("prov/wt", "w1", 1).await;
    assert_eq!(claims[0]["status"]["taskId"], task_id, "the worker claims what it heard of");
}

#[tokio::test]
async fn a_worker_hears_its_own_task_cancelled() {
    let app = TestApp::start().await;
    let mut worker = Listener::connect(&app, &[("task-exception", "primary.*.*.g.w1.#")]).await;
    let (theirs, ours) = (slugid(), slugid());
    app.create(&theirs, json!({})).await;
    assert_eq!(app.claim("prov/wt", "w2", 1).await.len(), 1);
    app.create(&ours, json!({})).await;
    assert_eq!(app.claim("prov/wt", "w1", 1).await.len(), 1);
    assert_eq!(app.post(&format!("/task/{theirs}/cancel"), json!({})).await.0, StatusCode::OK);
    assert_eq!(app.post(&format!("/task/{ours}/cancel"), json!({})).await.0, StatusCode::OK);
    let message = worker.next_message().await;
    let payload = &message["payload"];
    assert_eq!(payload["status"]["taskId"], ours, "w2's cancellation is not w1's business");
    assert_eq!((payload["runId"].as_i64(), payload["workerId"].as_str()), (Some(0), Some("w1")));
    assert_eq!(payload["status"]["runs"][0]["reasonResolved"], "canceled");
}

#[tokio::test]
async fn a_dependent_scheduler_hears_resolutions_of_its_own_tasks() {
    let app = TestApp::start().await;
    let pattern = "primary.*.*.*.*.*.*.my-scheduler.#";
    let mut scheduler =
        Listener::connect(&app, &[("task-completed", pattern), ("task-failed", pattern), ("task-exception", pattern)])
            .await;
    let (foreign, mine) = (slugid(), slugid());
    app.create(&foreign, json!({"schedulerId": "someone-else"})).await;
    app.create(&mine, json!({"schedulerId": "my-scheduler"})).await;
    for claim in app.claim("prov/wt", "w1", 2).await {
        let task_id = claim["status"]["taskId"].as_str().unwrap().to_owned();
        app.report(&task_id, 0, "completed").await;
    }
    let message = scheduler.next_message().await;
    assert_eq!(short(&message), "task-completed");
    assert_eq!(message["payload"]["status"]["taskId"], mine);
    assert_eq!(message["payload"]["status"]["schedulerId"], "my-scheduler");
}

#[tokio::test]
async fn a_statistics_monitor_counts_resolutions() {
    let app = TestApp::start().await;
    let mut monitor =
        Listener::connect(&app, &[("task-completed", "#"), ("task-failed", "#"), ("task-exception", "#")]).await;
    let ids: Vec<String> = (0..5).map(|_| slugid()).collect();
    for task_id in &ids {
        app.create(task_id, json!({})).await;
    }
    assert_eq!(app.claim("prov/wt", "w1", 5).await.len(), 5);
    app.report(&ids[0], 0, "completed").await;
    app.report(&ids[1], 0, "completed").await;
    app.report(&ids[2], 0, "completed").await;
    app.report(&ids[3], 0, "failed").await;
    let (status, _) =
        app.post(&format!("/task/{}/runs/0/exception", ids[4]), json!({"reason": "malformed-payload"})).await;
    assert_eq!(status, StatusCode::OK);
    let mut counts: HashMap<String, u32> = HashMap::new();
    for _ in 0..5 {
        *counts.entry(short(&monitor.next_message().await).to_owned()).or_default() += 1;
    }
    assert_eq!(counts["task-completed"], 3);
    assert_eq!(counts["task-failed"], 1);
    assert_eq!(counts["task-exception"], 1);
}

#[tokio::test]
async fn a_group_is_resolved_when_its_last_task_is_and_again_after_more_are_added() {
    let app = TestApp::start().await;
    let group = slugid();
    let mut listener = Listener::connect(&app, &[("task-group-resolved", &format!("primary.{group}.#"))]).await;
    let (first, second, third) = (slugid(), slugid(), slugid());
    app.create(&first, json!({"taskGroupId": group})).await;
    app.create(&second, json!({"taskGroupId": group})).await;
    assert_eq!(app.claim("prov/wt", "w1", 2).await.len(), 2);
    app.report(&first, 0, "completed").await;
    app.report(&second, 0, "failed").await;
    let resolved = listener.next_message().await;
    assert_eq!(resolved["routingKey"], format!("primary.{group}.-._"));
    assert_eq!(resolved["payload"]["taskGroupId"], group);
    assert_eq!(resolved["payload"]["schedulerId"], "-");
    assert_eq!(resolved["routes"], json!([]));

    app.create(&third, json!({"taskGroupId": group})).await;
    assert_eq!(app.post(&format!("/task/{third}/cancel"), json!({})).await.0, StatusCode::OK);
    let again = listener.next_message().await;
    assert_eq!(again["payload"]["taskGroupId"], group, "resolved again once the added task resolved");
}

#[tokio::test]
async fn task_routes_are_matched_as_cc_keys_and_reported_as_routes() {
    let app = TestApp::start().await;
    let mut index = Listener::connect(&app, &[("task-defined", "route.index.project.#")]).await;
    app.create(&slugid(), json!({"routes": ["notify.email.me"]})).await;
    let task_id = slugid();
    app.create(&task_id, json!({"routes": ["index.project.build", "notify.email.me"], "tags": {"kind": "build"}}))
        .await;
    let message = index.next_message().await;
    assert_eq!(message["payload"]["status"]["taskId"], task_id);
    assert_eq!(message["routes"], json!(["index.project.build", "notify.email.me"]));
    assert_eq!(message["payload"]["task"], json!({"tags": {"kind": "build"}}));
    assert_eq!(message["redelivered"], false);
}

#[tokio::test]
async fn artifact_created_is_heard_when_the_artifact_can_be_fetched() {
    let app = TestApp::start().await;
    let task_id = slugid();
    let mut listener = Listener::connect(&app, &[("artifact-created", &format!("primary.{task_id}.#"))]).await;
    app.create(&task_id, json!({})).await;
    app.claim("prov/wt", "w1", 1).await;
    let body = json!({"storageType": "reference", "expires": crate::from_now(600), "url": "https://example.com/x", "contentType": "text/plain"});
    let (status, _) = app.post(&format!("/task/{task_id}/runs/0/artifacts/public%2Fref"), body).await;
    assert_eq!(status, StatusCode::OK);
    let message = listener.next_message().await;
    let payload = &message["payload"];
    assert_eq!(payload["artifact"]["name"], "public/ref");
    assert_eq!(payload["artifact"]["storageType"], "reference");
    assert_eq!((payload["runId"].as_i64(), payload["workerId"].as_str()), (Some(0), Some("w1")));
}

#[tokio::test]
async fn bad_bindings_are_refused_naming_the_field() {
    let app = TestApp::start().await;
    let res = connect(&app, r##"{"bindings": [{"exchange": "exchange/nope/v1/x", "routingKeyPattern": "#"}]}"##).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body: Value = res.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("bindings[0].exchange"), "{body}");
    let res = connect(&app, r#"{"bindings": [{"exchange": "task-pending", "routingKeyPattern": "a..b"}]}"#).await;
    let body: Value = res.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("bindings[0].routingKeyPattern"), "{body}");
    let res = connect(&app, r#"{"bindings": []}"#).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let res = reqwest::get(format!("{}/api/events/v1/connect/", app.root)).await.unwrap();
    let body: Value = res.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("bindings"), "{body}");
}

#[tokio::test]
async fn one_client_address_holds_a_bounded_number_of_streams() {
    let app = TestApp::start().await;
    let bindings = r##"{"bindings": [{"exchange": "task-pending", "routingKeyPattern": "#"}]}"##;
    let mut open = Vec::new();
    for _ in 0..31 {
        let stream = connect(&app, bindings).await;
        assert_eq!(stream.status(), StatusCode::OK);
        open.push(stream);
    }
    let mut listener = Listener::connect(&app, &[("task-pending", "#")]).await;
    let refused = connect(&app, bindings).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = refused.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("at most 32 event streams"), "{body}");
    // The open streams still carry messages.
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    assert_eq!(listener.next_message().await["payload"]["status"]["taskId"], task_id.as_str());
    drop(open);
}
