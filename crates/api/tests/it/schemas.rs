//! Answers and messages held to Taskcluster's own schemas (`services/queue/schemas/v1/` and
//! the exchange references): the fields each requires, and none it does not allow.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::events::Listener;
use crate::{TestApp, from_now, slugid};

/// The top-level fields of an answer.
fn fields(answer: &Value) -> BTreeSet<&str> {
    answer.as_object().expect("an object").keys().map(String::as_str).collect()
}

#[tokio::test]
async fn every_page_of_a_task_group_carries_the_groups_fields() {
    let app = TestApp::start().await;
    let group = slugid();
    for _ in 0..3 {
        app.create(&slugid(), json!({"taskGroupId": group, "taskQueueId": "schema/group"})).await;
    }
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = token.as_ref().map_or(String::new(), |token| format!("&continuationToken={token}"));
        let (status, page) = app.get(&format!("/task-group/{group}/list?limit=1{query}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        // list-task-group-response.yml: taskGroupId, schedulerId, expires and tasks required;
        // sealed and continuationToken allowed; nothing else.
        assert_eq!(page["taskGroupId"], group.as_str());
        assert_eq!(page["schedulerId"], "-");
        assert!(page["expires"].as_str().is_some_and(|expires| expires.ends_with('Z')), "{page}");
        let allowed = BTreeSet::from(["taskGroupId", "schedulerId", "expires", "sealed", "tasks", "continuationToken"]);
        assert!(fields(&page).is_subset(&allowed), "{page}");
        token = page["continuationToken"].as_str().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    assert!(pages >= 3, "paged one task at a time");
}

#[tokio::test]
async fn a_queues_pending_and_claimed_listings_hold_tasks_only() {
    let app = TestApp::start().await;
    for _ in 0..2 {
        app.create(&slugid(), json!({"taskQueueId": "schema/listed"})).await;
    }
    app.claim("schema/listed", "w", 1).await;
    for listing in ["pending", "claimed"] {
        let (status, page) = app.get(&format!("/task-queues/schema%2Flisted/{listing}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        // list-pending-tasks-response.yml / list-claimed-tasks-response.yml: tasks and a
        // continuationToken, no other field.
        assert_eq!(fields(&page), BTreeSet::from(["tasks"]), "{listing}: {page}");
        assert_eq!(page["tasks"].as_array().map(Vec::len), Some(1), "{listing}: {page}");
    }
}

#[tokio::test]
async fn a_link_artifact_may_say_its_content_type() {
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({"taskQueueId": "schema/link"})).await;
    app.claim("schema/link", "w", 1).await;
    let link = json!({"storageType": "link", "expires": from_now(600), "artifact": "public/logs/live.log",
        "contentType": "text/plain"});
    let (status, created) = app.post(&format!("/task/{task_id}/runs/0/artifacts/public%2Flog"), link).await;
    assert_eq!(status, StatusCode::OK, "post-artifact-request.yml allows contentType on a link: {created}");
    let (_, listed) = app.get(&format!("/task/{task_id}/runs/0/artifacts")).await;
    let listed = listed["artifacts"].as_array().unwrap().iter().find(|a| a["name"] == "public/log").cloned();
    assert_eq!(listed.unwrap()["contentType"], "text/plain");
    let too_long = json!({"storageType": "link", "expires": from_now(600), "artifact": "public/logs/live.log",
        "contentType": "x".repeat(256)});
    let (status, refused) = app.post(&format!("/task/{task_id}/runs/0/artifacts/public%2Flog2"), too_long).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("contentType"), "{refused}");
}

#[tokio::test]
async fn priority_messages_are_taskclusters() {
    let app = TestApp::start().await;
    let (group, single) = (slugid(), slugid());
    let mut listener = Listener::connect(
        &app,
        &[("task-priority-changed", "#"), ("task-group-priority-changed", "#"), ("task-completed", "#")],
    )
    .await;
    app.create(&single, json!({"taskQueueId": "schema/prio"})).await;
    app.claim("schema/prio", "w", 1).await;
    let (status, _) = app.post(&format!("/task/{single}/priority"), json!({"newPriority": "high"})).await;
    assert_eq!(status, StatusCode::OK);
    let message = listener.next_message().await;
    assert!(message["exchange"].as_str().unwrap().ends_with("/task-priority-changed"), "{message}");
    // The message is about the task, not a run: run and worker words are `_` (the task is
    // running, as run 0 on worker w).
    let key: Vec<&str> = message["routingKey"].as_str().unwrap().split('.').collect();
    assert_eq!(key[..5], ["primary", single.as_str(), "_", "_", "_"], "{message}");
    assert_eq!(fields(&message["payload"]), BTreeSet::from(["version", "status", "oldPriority", "newPriority"]));

    for _ in 0..3 {
        app.create(&slugid(), json!({"taskGroupId": group, "taskQueueId": "schema/prio-group"})).await;
    }
    let (status, _) = app.post(&format!("/task-group/{group}/priority"), json!({"newPriority": "low"})).await;
    assert_eq!(status, StatusCode::OK);
    // Then the running task completes: the next message after the group's is that one, so
    // no task-priority-changed came for the group's three tasks.
    app.report(&single, 0, "completed").await;
    let next = listener.next_message().await;
    assert!(next["exchange"].as_str().unwrap().ends_with("/task-group-priority-changed"), "{next}");
    let after = listener.next_message().await;
    assert!(after["exchange"].as_str().unwrap().ends_with("/task-completed"), "only the group's message: {after}");
}

#[tokio::test]
async fn no_artifact_created_message_for_an_s3_artifact() {
    let app = TestApp::start().await;
    let task_id = slugid();
    let mut listener = Listener::connect(&app, &[("artifact-created", &format!("primary.{task_id}.#"))]).await;
    app.create(&task_id, json!({"taskQueueId": "schema/art"})).await;
    app.claim("schema/art", "w", 1).await;
    let blob = json!({"storageType": "s3", "expires": from_now(600), "contentType": "text/plain"});
    let (status, created) = app.post(&format!("/task/{task_id}/runs/0/artifacts/public%2Fblob"), blob).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let put = app.raw(reqwest::Method::PUT, created["putUrl"].as_str().unwrap(), Some(b"bytes".to_vec())).await;
    assert_eq!(put.status(), StatusCode::OK);
    let reference = json!({"storageType": "reference", "expires": from_now(600), "url": "https://example.com/x",
        "contentType": "text/plain"});
    app.post(&format!("/task/{task_id}/runs/0/artifacts/public%2Fref"), reference).await;
    // artifact-created-message.yml has no `s3`; Taskcluster sends none for it.
    let message = listener.next_message().await;
    assert_eq!(message["payload"]["artifact"]["name"], "public/ref", "the first message is the reference's");
}
