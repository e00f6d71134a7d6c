//! Every bad input gets Taskcluster's error body naming the field and the rule.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{TestApp, slugid, task_def};

#[tokio::test]
async fn bad_definitions_name_the_field() {
    let app = TestApp::start().await;
    let cases = [
        (json!({"deadline": crate::from_now(6 * 24 * 3600)}), "deadline"),
        (json!({"priority": "normal"}), "priority"),
        (json!({"retries": 50}), "retries"),
        (json!({"taskQueueId": "no-slash"}), "taskQueueId"),
        (json!({"routes": ["a", "a"]}), "routes[1]"),
        (json!({"dependencies": ["not-a-slugid"]}), "dependencies[0]"),
        (json!({"dimensions": {"os": []}}), "dimensions.os"),
        (json!({"dimensions": {"os": ["linux|"]}}), "dimensions.os"),
        (json!({"dimensions": {"a": ["1|2|3"], "b": ["1|2|3"]}}), "dimensions"),
        (json!({"unknownField": 1}), "unknownField"),
        (json!({"retries": "five"}), "retries"),
        (json!({"metadata": null}), "metadata"),
    ];
    for (patch, field) in cases {
        let task_id = slugid();
        let (status, body) = app.put(&format!("/task/{task_id}"), task_def(patch.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}: {body}");
        assert_eq!(body["code"], "InputValidationError", "{patch}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(field), "{patch}: message `{message}` should name {field}");
        assert_eq!(body["requestInfo"]["method"], "createTask");
        let (status, _) = app.get(&format!("/task/{task_id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{patch}: nothing was written");
    }
}

#[tokio::test]
async fn unknown_and_malformed_ids() {
    let app = TestApp::start().await;
    let (status, body) = app.get(&format!("/task/{}", slugid())).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::NOT_FOUND, Some("ResourceNotFound")));
    let (status, body) = app.get("/task/not-a-slugid/status").await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InvalidRequestArguments")));
    let (status, _) = app.post(&format!("/task/{}/runs/0/completed", slugid()), json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.get(&format!("/task-group/{}", slugid())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = app.get("/no/such/endpoint").await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::NOT_FOUND, Some("ResourceNotFound")));
}

#[tokio::test]
async fn conflicts_and_missing_dependencies() {
    let app = TestApp::start().await;
    let task_id = slugid();
    let definition = task_def(json!({}));
    for _ in 0..2 {
        let (status, body) = app.put(&format!("/task/{task_id}"), definition.clone()).await;
        assert_eq!(status, StatusCode::OK, "createTask is idempotent: {body}");
    }
    let (status, body) = app.put(&format!("/task/{task_id}"), task_def(json!({"retries": 0}))).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::CONFLICT, Some("RequestConflict")));

    let missing = slugid();
    let (status, body) = app.put(&format!("/task/{}", slugid()), task_def(json!({"dependencies": [missing]}))).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::BAD_REQUEST, Some("InputError")));
    assert!(body["message"].as_str().unwrap().contains(&missing), "{body}");
}

#[tokio::test]
async fn worker_input_is_checked() {
    let app = TestApp::start().await;
    let cases = [
        ("/claim-work/prov%2Fwt", json!({"workerGroup": "g", "workerId": "w", "tasks": 0}), "tasks"),
        ("/claim-work/prov%2Fwt", json!({"workerGroup": "g", "workerId": "w", "tasks": 33}), "tasks"),
        ("/claim-work/prov%2Fwt", json!({"workerGroup": "g g", "workerId": "w"}), "workerGroup"),
        (
            "/claim-work/prov%2Fwt",
            json!({"workerGroup": "g", "workerId": "w", "dimensions": {"os": "linux"}}),
            "dimensions",
        ),
        (
            "/claim-work/prov%2Fwt",
            json!({"workerGroup": "g", "workerId": "w", "dimensions": {"os": ["linux|mac"]}}),
            "dimensions.os",
        ),
        ("/claim-work/prov%2FWT", json!({"workerGroup": "g", "workerId": "w"}), "taskQueueId"),
    ];
    for (path, body, field) in cases {
        let (status, res) = app.post(path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {res}");
        assert!(res["message"].as_str().unwrap().contains(field), "{body}: {res}");
    }
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    let (status, res) = app.post(&format!("/task/{task_id}/runs/0/exception"), json!({"reason": "bored"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{res}");
    assert!(res["message"].as_str().unwrap().starts_with("reason"), "{res}");
    let (status, res) = app.post(&format!("/task/{task_id}/runs/0/completed"), json!({})).await;
    assert_eq!((status, res["code"].as_str()), (StatusCode::CONFLICT, Some("RequestConflict")), "pending, not running");
}

#[tokio::test]
async fn pasted_taskcluster_urls_reach_the_ui_and_unknown_paths_its_not_found_page() {
    let app = TestApp::start().await;
    let html = |path: &str| {
        let url = format!("{}{path}", app.root);
        async move { reqwest::Client::new().get(url).header("accept", "text/html").send().await.unwrap() }
    };
    let task_id = slugid();
    for path in [format!("/tasks/{task_id}/"), format!("/tasks/{task_id}/runs/0/logs/public/logs/live.log")] {
        let res = html(&path).await;
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/html"), "{path}");
    }
    // A browser gets the UI (which says there is no such page), with a 404.
    let res = html("/no/such/page").await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    // An API client still gets Taskcluster's JSON error, under the APIs as anywhere.
    for path in ["/no/such/page", "/api/queue/v1/nope"] {
        let res = reqwest::get(format!("{}{path}", app.root)).await.unwrap();
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["code"], "ResourceNotFound", "{path}: {body}");
    }
    let res = html("/api/queue/v1/nope").await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("application/json"), "the APIs stay JSON");
}
