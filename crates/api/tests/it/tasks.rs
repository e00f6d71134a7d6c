//! Tasks, dependencies, groups and queue listings.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{Settings, TestApp, from_now, slugid, task_def};

#[tokio::test]
async fn definition_and_status_round_trip() {
    let app = TestApp::start().await;
    let task_id = slugid();
    let status = app.create(&task_id, json!({"provisionerId": "prov", "workerType": "wt", "taskQueueId": null})).await;
    assert_eq!(status["state"], "pending");
    assert_eq!(status["retriesLeft"], 5);
    let (_, task) = app.get(&format!("/task/{task_id}")).await;
    assert_eq!(task["taskQueueId"], "prov/wt", "both forms of the queue are returned");
    assert_eq!(task["provisionerId"], "prov");
    assert_eq!(task["schedulerId"], "-");
    assert_eq!(task["taskGroupId"], task_id.as_str());
    assert_eq!(task["priority"], "lowest");
    let (_, status) = app.get(&format!("/task/{task_id}/status")).await;
    assert_eq!(status["status"]["taskId"], task_id.as_str());

    let unknown = slugid();
    let (_, batch) = app.post("/tasks", json!({"taskIds": [task_id, unknown]})).await;
    assert_eq!(batch["tasks"].as_array().unwrap().len(), 1, "unknown ids are left out");
    let (_, batch) = app.post("/tasks/status", json!({"taskIds": [task_id]})).await;
    assert_eq!(batch["statuses"][0]["status"]["state"], "pending");
}

#[tokio::test]
async fn a_chain_of_dependencies_runs_in_order() {
    let app = TestApp::start().await;
    let build = slugid();
    let test = slugid();
    let report = slugid();
    app.create(&build, json!({})).await;
    let status = app.create(&test, json!({"dependencies": [build]})).await;
    assert_eq!(status["state"], "unscheduled");
    app.create(&report, json!({"dependencies": [build, test], "requires": "all-resolved"})).await;

    let (_, dependents) = app.get(&format!("/task/{build}/dependents")).await;
    assert_eq!(dependents["tasks"].as_array().unwrap().len(), 2);

    for expected in [&build, &test, &report] {
        let claims = app.claim("prov/wt", "w", 5).await;
        assert_eq!(claims.len(), 1, "one task at a time becomes pending");
        assert_eq!(claims[0]["status"]["taskId"], expected.as_str());
        let how = if expected == &test { "failed" } else { "completed" };
        app.report(expected, 0, how).await;
    }
    let (_, status) = app.get(&format!("/task/{report}/status")).await;
    assert_eq!(status["status"]["state"], "completed", "all-resolved ran after a failure");
}

#[tokio::test]
async fn schedule_cancel_rerun_and_priority() {
    let app = TestApp::start().await;
    let blocker = slugid();
    let waiting = slugid();
    app.create(&blocker, json!({})).await;
    app.create(&waiting, json!({"dependencies": [blocker]})).await;
    let (_, forced) = app.post(&format!("/task/{waiting}/schedule"), json!({})).await;
    assert_eq!(forced["status"]["state"], "pending", "scheduleTask ignores dependencies");

    let (_, changed) = app.post(&format!("/task/{waiting}/priority"), json!({"newPriority": "very-high"})).await;
    assert_eq!(changed["status"]["priority"], "very-high");
    let (code, bad) = app.post(&format!("/task/{waiting}/priority"), json!({"newPriority": "urgent"})).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("newPriority"), "{bad}");

    let (_, canceled) = app.post(&format!("/task/{waiting}/cancel"), json!({})).await;
    assert_eq!(canceled["status"]["state"], "exception");
    assert_eq!(canceled["status"]["runs"][0]["reasonResolved"], "canceled");
    let (_, rerun) = app.post(&format!("/task/{waiting}/rerun"), json!({})).await;
    assert_eq!(rerun["status"]["state"], "pending");
    assert_eq!(rerun["status"]["runs"][1]["reasonCreated"], "rerun");
    let claims = app.claim("prov/wt", "w", 1).await;
    assert_eq!(claims[0]["status"]["taskId"], waiting.as_str(), "very-high before lowest");

    // An unscheduled task is scheduled by a rerun, as Taskcluster does.
    let unscheduled = slugid();
    app.create(&unscheduled, json!({"dependencies": [blocker]})).await;
    let (code, rerun) = app.post(&format!("/task/{unscheduled}/rerun"), json!({})).await;
    assert_eq!(code, StatusCode::OK, "{rerun}");
    assert_eq!(rerun["status"]["state"], "pending");
    assert_eq!(rerun["status"]["runs"][0]["reasonCreated"], "rerun");
}

#[tokio::test]
async fn task_groups_list_seal_and_cancel() {
    let app = TestApp::start().await;
    let group = slugid();
    for _ in 0..5 {
        app.create(&slugid(), json!({"taskGroupId": group, "schedulerId": "sched"})).await;
    }
    let (_, info) = app.get(&format!("/task-group/{group}")).await;
    assert_eq!(info["schedulerId"], "sched");
    assert!(info.get("sealed").is_none());

    let (_, first) = app.get(&format!("/task-group/{group}/list?limit=3")).await;
    assert_eq!(first["tasks"].as_array().unwrap().len(), 3);
    let token = first["continuationToken"].as_str().unwrap();
    let (_, second) = app.get(&format!("/task-group/{group}/list?limit=3&continuationToken={token}")).await;
    assert_eq!(second["tasks"].as_array().unwrap().len(), 2);
    assert!(second.get("continuationToken").is_none());
    assert!(second["tasks"][0]["task"]["payload"].is_object(), "listings carry definitions");

    let (code, _) = app.post(&format!("/task-group/{group}/cancel"), json!({})).await;
    assert_eq!(code, StatusCode::CONFLICT, "cancel needs a sealed group");
    let (_, sealed) = app.post(&format!("/task-group/{group}/seal"), json!({})).await;
    assert!(sealed["sealed"].is_string());
    let (code, _) = app
        .put(&format!("/task/{}", slugid()), crate::task_def(json!({"taskGroupId": group, "schedulerId": "sched"})))
        .await;
    assert_eq!(code, StatusCode::CONFLICT, "a sealed group takes no tasks");

    let (_, priority) = app.post(&format!("/task-group/{group}/priority"), json!({"newPriority": "high"})).await;
    assert_eq!(priority["taskIds"].as_array().unwrap().len(), 5);
    assert_eq!((priority["tasksAffected"].as_u64(), priority["schedulerId"].as_str()), (Some(5), Some("sched")));
    let (_, canceled) = app.post(&format!("/task-group/{group}/cancel"), json!({})).await;
    assert_eq!(canceled["taskGroupSize"], 5);
    assert_eq!(canceled["cancelledCount"], 5);
}

#[tokio::test]
async fn queue_counts_and_listings() {
    let app = TestApp::start().await;
    for _ in 0..3 {
        app.create(&slugid(), json!({"taskQueueId": "prov/q"})).await;
    }
    let claims = app.claim("prov/q", "w7", 1).await;
    let (_, counts) = app.get("/task-queues/prov%2Fq/counts").await;
    assert_eq!((counts["pendingTasks"].as_u64(), counts["claimedTasks"].as_u64()), (Some(2), Some(1)));
    assert_eq!((counts["provisionerId"].as_str(), counts["workerType"].as_str()), (Some("prov"), Some("q")));
    let (status, batch) = app.post("/task-queues/counts", json!({"taskQueueIds": ["prov/q", "prov/empty"]})).await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    assert_eq!(batch["taskQueueCounts"][0], counts, "the batch answers each queue as taskQueueCounts does");
    assert_eq!(batch["taskQueueCounts"][1]["pendingTasks"], 0);
    let (status, bad) = app.post("/task-queues/counts", json!({"taskQueueIds": ["prov/q", "no-slash"]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bad["message"].as_str().unwrap().starts_with("taskQueueIds[1]: "), "{bad}");
    let (_, legacy) = app.get("/pending/prov/q").await;
    assert_eq!(legacy["pendingTasks"], 2);
    assert_eq!(legacy["workerType"], "q");

    let (_, pending) = app.get("/task-queues/prov%2Fq/pending?limit=1").await;
    assert_eq!(pending["tasks"].as_array().unwrap().len(), 1);
    let token = pending["continuationToken"].as_str().unwrap();
    let (_, rest) = app.get(&format!("/task-queues/prov%2Fq/pending?continuationToken={token}")).await;
    assert_eq!(rest["tasks"].as_array().unwrap().len(), 1);
    assert_ne!(rest["tasks"][0]["taskId"], pending["tasks"][0]["taskId"]);

    let (_, claimed) = app.get("/task-queues/prov/q/claimed").await;
    assert_eq!(claimed["tasks"][0]["workerId"], "w7");
    assert_eq!(claimed["tasks"][0]["taskId"], claims[0]["status"]["taskId"]);
    let second = app.claim("prov/q", "w8", 1).await;
    let (_, page) = app.get("/task-queues/prov%2Fq/claimed?limit=1").await;
    let token = page["continuationToken"].as_str().unwrap();
    let (_, rest) = app.get(&format!("/task-queues/prov%2Fq/claimed?limit=1&continuationToken={token}")).await;
    assert!(rest.get("continuationToken").is_none());
    let listed = [page["tasks"][0]["taskId"].as_str().unwrap(), rest["tasks"][0]["taskId"].as_str().unwrap()];
    let mut claimed_ids =
        [claims[0]["status"]["taskId"].as_str().unwrap(), second[0]["status"]["taskId"].as_str().unwrap()];
    claimed_ids.sort_unstable();
    assert_eq!(listed, claimed_ids, "claimed runs list by task id, each once");
    let (code, _) = app.get("/task-queues/prov%2Fq/claimed?continuationToken=garbage").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "a token this listing never issued");

    let (_, queues) = app.get("/task-queues").await;
    assert_eq!(queues["taskQueues"][0]["taskQueueId"], "prov/q");
    let (_, queue) = app.get("/task-queues/prov%2Fq").await;
    assert_eq!(queue["taskQueueId"], "prov/q");
    let (code, _) = app.get("/task-queues/prov%2Fnone").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_deadline_resolves_the_task_and_releases_all_resolved_dependents() {
    let app = Arc::new(TestApp::start().await);
    let doomed = slugid();
    // A 1-second deadline; nothing claims it (its queue has no workers).
    let deadline = from_now(1);
    app.create(&doomed, json!({"taskQueueId": "prov/nobody", "deadline": deadline})).await;
    let after = slugid();
    app.create(&after, json!({"dependencies": [doomed], "requires": "all-resolved"})).await;
    // This long poll returns once the deadline fires and releases the dependent.
    let claims = app.claim("prov/wt", "w", 1).await;
    assert_eq!(claims[0]["status"]["taskId"], after.as_str());
    let (_, status) = app.get(&format!("/task/{doomed}/status")).await;
    assert_eq!(status["status"]["state"], "exception");
    assert_eq!(status["status"]["runs"][0]["reasonResolved"], "deadline-exceeded");
    assert_eq!(status["status"]["runs"][0]["reasonCreated"], "scheduled", "the pending run was the one resolved");
}

#[tokio::test]
async fn health_and_reference() {
    let app = TestApp::start().await;
    let (code, ping) = app.get("/ping").await;
    assert_eq!((code, ping["alive"].as_bool()), (StatusCode::OK, Some(true)));
    for path in ["/__heartbeat__", "/__lbheartbeat__", "/__version__"] {
        let (code, _) = app.get(path).await;
        assert_eq!(code, StatusCode::OK, "{path}");
    }
    let (_, reference) = app.get("/reference").await;
    let names: Vec<&str> =
        reference["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    for name in ["createTask", "claimWork", "reportCompleted", "listTaskGroup", "taskQueueCounts"] {
        assert!(names.contains(&name), "{name} missing from the reference");
    }
}

/// Each service's reference as served, held to a reviewed snapshot: a renamed endpoint,
/// method, route or scope shows as a diff to accept (`cargo insta review`) or fix.
#[tokio::test]
async fn every_reference_as_served() {
    let app = TestApp::start().await;
    for service in ["queue", "scheduler", "auth"] {
        let url = format!("{}/api/{service}/v1/reference", app.root);
        let res = app.client.get(&url).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{url}");
        let reference: serde_json::Value = res.json().await.unwrap();
        insta::assert_json_snapshot!(format!("reference-{service}"), reference);
        // The same document where Taskcluster's tools look for it.
        let url = format!("{}/references/{service}/v1/api.json", app.root);
        let served: serde_json::Value = app.client.get(&url).send().await.unwrap().json().await.unwrap();
        assert_eq!(served, reference, "{url}");
    }
    let manifest: serde_json::Value =
        app.client.get(format!("{}/references/manifest.json", app.root)).send().await.unwrap().json().await.unwrap();
    let listed: Vec<&str> =
        manifest["references"].as_array().unwrap().iter().filter_map(serde_json::Value::as_str).collect();
    for document in ["queue/v1/api.json", "queue/v1/exchanges.json", "auth/v1/api.json", "scheduler/v1/exchanges.json"]
    {
        let url = format!("{}/references/{document}", app.root);
        assert!(listed.contains(&url.as_str()), "{url} in {manifest}");
        let res = app.client.get(&url).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{url}");
    }
    let res = app.client.get(format!("{}/references/auth/v1/exchanges.json", app.root)).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND, "the auth service publishes nothing");
    let res = app.client.get(format!("{}/schemas/queue/v1/task-status.json", app.root)).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let schema: serde_json::Value = res.json().await.unwrap();
    assert_eq!(schema["$id"], "/schemas/queue/v1/task-status.json#", "{schema}");
    let res = app.client.get(format!("{}/schemas/queue/v1/nothing.json", app.root)).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn listings_page_by_bytes_as_well_as_by_count() {
    let app = TestApp::start().await;
    let group = slugid();
    // Three tasks of ~3.5 MB each: a page holds 8 MB of definitions, so two, then one.
    let blob = "x".repeat(3_500_000);
    let mut created = Vec::new();
    for _ in 0..3 {
        let task_id = slugid();
        app.create(&task_id, json!({"taskGroupId": group, "payload": {"blob": blob}})).await;
        created.push(task_id);
    }
    created.sort_unstable();
    let (status, first) = app.get(&format!("/task-group/{group}/list")).await;
    assert_eq!(status, StatusCode::OK);
    let ids = |page: &serde_json::Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| task["status"]["taskId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&first), created[..2], "two definitions fill the page");
    let token = first["continuationToken"].as_str().expect("more to come");
    let (_, second) = app.get(&format!("/task-group/{group}/list?continuationToken={token}")).await;
    assert_eq!(ids(&second), created[2..]);
    assert!(second.get("continuationToken").is_none());
    // A request body over the limit is refused whole.
    let huge = "x".repeat(11 * 1024 * 1024);
    let (status, body) =
        app.put(&format!("/task/{}", slugid()), crate::task_def(json!({"payload": {"blob": huge}}))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
}

#[tokio::test]
async fn tasks_are_listed_and_counted_by_tag_newest_first() {
    let app = TestApp::with(Settings { claim_wait: std::time::Duration::ZERO, ..Settings::default() }).await;
    let now = shoal_service::now();
    let ago = |secs: i64| shoal_engine::Timestamp(now.millis() - secs * 1000).to_string();
    let queue = "tags/q";
    let mut ids = Vec::new();
    for secs in [180, 120, 60] {
        let task_id = slugid();
        app.create(&task_id, json!({"taskQueueId": queue, "created": ago(secs), "tags": {"kind": "build"}})).await;
        ids.push(task_id);
    }
    app.create(&slugid(), json!({"taskQueueId": queue, "tags": {"kind": "test"}})).await;
    app.create(&slugid(), json!({"taskQueueId": "tags/other", "created": ago(30), "tags": {"kind": "build"}})).await;
    assert_eq!(app.claim(queue, "w", 1).await[0]["status"]["taskId"], ids[0].as_str(), "the oldest runs");

    let listed = |query: String| {
        let app = &app;
        async move {
            let (code, body) = app.get(&format!("/tasks?{query}")).await;
            assert_eq!(code, StatusCode::OK, "{query}: {body}");
            let ids: Vec<String> = body["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|task| task["status"]["taskId"].as_str().unwrap().to_owned())
                .collect();
            (ids, body["continuationToken"].as_str().map(str::to_owned))
        }
    };
    let (all, _) = listed(format!("tag=kind:build&taskQueueId={queue}")).await;
    assert_eq!(all, vec![ids[2].clone(), ids[1].clone(), ids[0].clone()], "newest first");
    let (pending, _) = listed(format!("tag=kind:build&taskQueueId={queue}&state=pending")).await;
    assert_eq!(pending, vec![ids[2].clone(), ids[1].clone()]);
    let (recent, _) = listed(format!("tag=kind:build&taskQueueId={queue}&since={}", ago(150))).await;
    assert_eq!(recent, vec![ids[2].clone(), ids[1].clone()]);
    let (older, _) = listed(format!("tag=kind:build&until={}", ago(150))).await;
    assert_eq!(older, vec![ids[0].clone()]);
    // Paged one at a time: every task once, in order.
    let mut paged = Vec::new();
    let mut token = None;
    loop {
        let more = token.as_ref().map_or(String::new(), |t: &String| format!("&continuationToken={t}"));
        let (page, next) = listed(format!("tag=kind:build&limit=1{more}")).await;
        paged.extend(page);
        token = next;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(paged.len(), 4, "both queues: {paged:?}");
    assert_eq!(paged[1..], all[..], "the other queue's task is the newest");

    let count = |query: &str| {
        let app = &app;
        let query = query.to_owned();
        async move { app.get(&format!("/tasks/count?{query}")).await.1["count"].clone() }
    };
    assert_eq!(count("tag=kind:build").await, 4);
    assert_eq!(count(&format!("tag=kind:build&taskQueueId={queue}&state=running")).await, 1);
    assert_eq!(count("tag=kind:test").await, 1);
    for bad in
        ["", "tag=nokey", "tag=kind:build&state=done", "tag=kind:build&since=yesterday", "tag=a:b&continuationToken=x"]
    {
        let (code, body) = app.get(&format!("/tasks?{bad}")).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    // Several tags select the tasks with every one, listed and counted alike.
    let both = "tag=kind:build&tag=kind:test";
    assert_eq!((listed(both.into()).await.0.len(), count(both).await), (0, json!(0)));
    app.create(&slugid(), json!({"taskQueueId": "tags/other", "tags": {"kind": "build", "os": "linux"}})).await;
    let (linux, _) = listed("tag=kind:build&tag=os:linux".into()).await;
    assert_eq!((linux.len(), count("tag=os:linux&tag=kind:build").await), (1, json!(1)));

    // Without a tag: what waits or runs now, fleet-wide or in one queue, by queue then line.
    let (pending, _) = listed("state=pending".into()).await;
    assert_eq!(pending.len(), 5, "{pending:?}");
    assert_eq!(pending[2..4], [ids[1].clone(), ids[2].clone()], "tags/other's two, then tags/q's line");
    let (running, _) = listed(format!("state=running&taskQueueId={queue}")).await;
    assert_eq!(running, vec![ids[0].clone()]);
    let (linux, _) = listed("state=pending&tag=os:linux".into()).await;
    assert_eq!(linux.len(), 1, "a tag narrows it");
    for bad in ["/tasks?state=completed", "/tasks/count?state=pending"] {
        let (code, body) = app.get(bad).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["message"].as_str().unwrap().starts_with("tag:"), "{body}");
    }
}

#[tokio::test]
async fn a_task_shows_who_created_it_and_lists_by_creator() {
    let app = TestApp::start().await;
    let alice = app.make_client("ci/alice", &["queue:create-task:*", "queue:scheduler-id:*"]).await;
    let mut alices = Vec::new();
    for kind in ["build", "test"] {
        let task_id = slugid();
        let url = format!("{}/task/{task_id}", app.base);
        let (code, body) = app
            .call_as(Some(&alice), reqwest::Method::PUT, &url, Some(task_def(json!({"tags": {"kind": kind}}))))
            .await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert!(body["status"].get("createdBy").is_none(), "not in Taskcluster's status: {body}");
        let (_, result) = app.get(&format!("/task/{task_id}/result")).await;
        assert_eq!(result["createdBy"], "ci/alice", "{result}");
        alices.insert(0, task_id);
    }
    let roots = slugid();
    app.create(&roots, json!({"tags": {"kind": "build"}})).await;
    let (_, result) = app.get(&format!("/task/{roots}/result")).await;
    assert_eq!(result["createdBy"], "root", "{result}");
    let (_, results) = app.post("/tasks/result", json!({"taskIds": [roots, alices[0]]})).await;
    let creators: Vec<&str> =
        results["results"].as_array().unwrap().iter().map(|r| r["createdBy"].as_str().unwrap()).collect();
    assert_eq!(creators, ["root", "ci/alice"], "{results}");

    let ids = |body: &Value| -> Vec<String> {
        body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| task["status"]["taskId"].as_str().unwrap().to_owned())
            .collect()
    };
    let (code, body) = app.get("/tasks?createdBy=ci/alice").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), alices, "alice's, newest first");
    let (_, body) = app.get("/tasks?tag=kind:build&createdBy=ci/alice").await;
    assert_eq!(ids(&body), alices[1..], "a filter on a tag listing");
    let (_, body) = app.get("/tasks/count?createdBy=ci/alice&tag=kind:build").await;
    assert_eq!(body["count"], 1, "{body}");
    let (_, body) = app.get("/tasks/count?createdBy=ci/alice").await;
    assert_eq!(body["count"], 2, "{body}");
    let (code, body) = app.get("/tasks?createdBy=").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().starts_with("createdBy:"), "{body}");
}

#[tokio::test]
async fn metrics_count_what_happened() {
    let app = TestApp::with(Settings { claim_wait: std::time::Duration::ZERO, ..Settings::default() }).await;
    // A queue of its own: the counters are the process's, shared with other tests.
    let queue = format!("metrics/q{}", slugid().to_lowercase().replace(['-', '_'], "").get(..8).unwrap());
    let done = slugid();
    app.create(&done, json!({"taskQueueId": queue})).await;
    app.create(&slugid(), json!({"taskQueueId": queue})).await;
    app.claim(&queue, "w", 1).await;
    app.report(&done, 0, "completed").await;
    let res = app.raw(reqwest::Method::GET, &format!("{}/metrics", app.root), None).await;
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.text().await.unwrap();
    let has = |line: &str| text.lines().any(|l| l == line);
    assert!(has(&format!("shoal_tasks_created_total{{queue=\"{queue}\"}} 2")), "{text}");
    assert!(has(&format!("shoal_tasks_resolved_total{{queue=\"{queue}\",outcome=\"completed\"}} 1")), "{text}");
    assert!(has(&format!("shoal_pending_tasks{{queue=\"{queue}\"}} 1")), "{text}");
    assert!(has(&format!("shoal_claim_wait_seconds_count{{queue=\"{queue}\"}} 1")), "{text}");
    assert!(text.contains("shoal_request_duration_seconds_bucket{endpoint=\"createTask\",status=\"2xx\""), "{text}");
    // The worker that claimed is idle again; every state is reported, zeros included.
    assert!(has(&format!("shoal_workers{{queue=\"{queue}\",state=\"idle\"}} 1")), "{text}");
    assert!(has(&format!("shoal_workers{{queue=\"{queue}\",state=\"busy\"}} 0")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("shoal_outbox_backlog ")), "{text}");
    assert!(has("shoal_claims_waiting 0"), "nothing long-polls here: {text}");
}

#[tokio::test]
async fn the_overview_listings_show_recent_groups_and_failures() {
    let app = TestApp::with(Settings { claim_wait: std::time::Duration::ZERO, ..Settings::default() }).await;
    let now = shoal_service::now();
    let ago = |secs: i64| shoal_engine::Timestamp(now.millis() - secs * 1000).to_string();
    let queue = "overview/q";
    let (old_group, new_group) = (slugid(), slugid());
    let (failed, cancelled) = (slugid(), slugid());
    app.create(&failed, json!({"taskQueueId": queue, "taskGroupId": old_group, "created": ago(60)})).await;
    app.create(&cancelled, json!({"taskQueueId": queue, "taskGroupId": new_group, "created": ago(30)})).await;
    app.claim(queue, "w", 1).await;
    app.report(&failed, 0, "failed").await;
    let (status, body) = app.post(&format!("/task/{cancelled}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = app.get("/task-groups").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let groups: Vec<&str> =
        body["taskGroups"].as_array().unwrap().iter().map(|g| g["taskGroupId"].as_str().unwrap()).collect();
    assert_eq!(groups, vec![new_group.as_str(), old_group.as_str()], "newest first");
    assert_eq!(body["taskGroups"][0]["created"], ago(30));

    let failures = |query: &str| {
        let app = &app;
        let query = query.to_owned();
        async move {
            let (status, body) = app.get(&format!("/tasks/failed{query}")).await;
            assert_eq!(status, StatusCode::OK, "{query}: {body}");
            body["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["status"]["taskId"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(failures("").await, vec![cancelled.clone(), failed.clone()]);
    assert_eq!(failures("?state=failed").await, vec![failed.clone()]);
    let (status, body) = app.get("/tasks/failed?state=pending").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().starts_with("state:"), "{body}");
    // Rerun, the failure is off the list.
    let (status, body) = app.post(&format!("/task/{failed}/rerun"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(failures("").await, vec![cancelled.clone()]);

    let res = app.raw(reqwest::Method::GET, &format!("{}/api/scheduler/v1/task-graphs", app.root), None).await;
    assert_eq!(res.status(), StatusCode::OK);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["taskGraphs"], json!([]), "no graph yet");
}

#[tokio::test]
async fn get_tasks_names_each_task_once_and_pages_within_the_bound() {
    let app = TestApp::start().await;
    let big = slugid();
    // About 3 MiB each: the answer's bound (8 MiB) holds two.
    let filler = "x".repeat(3 * 1024 * 1024);
    app.create(&big, json!({"payload": {"filler": filler}})).await;
    let (status, answer) = app.post("/tasks", json!({"taskIds": vec![big.as_str(); 300]})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["tasks"].as_array().unwrap().len(), 1, "a repeated id is answered once");
    assert!(answer.get("continuationToken").is_none());

    let (second, third, small) = (slugid(), slugid(), slugid());
    app.create(&second, json!({"payload": {"filler": filler}})).await;
    app.create(&third, json!({"payload": {"filler": filler}})).await;
    app.create(&small, json!({})).await;
    let ids = json!({"taskIds": [big, second, big, slugid(), third, small]});
    let listed = |page: &serde_json::Value| -> Vec<String> {
        page["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap().to_owned()).collect()
    };
    let (_, first) = app.post("/tasks", ids.clone()).await;
    assert_eq!(listed(&first), [big.clone(), second.clone()], "two definitions fill the 8 MiB");
    let token = first["continuationToken"].as_str().expect("more to come");
    let (_, rest) = app.post(&format!("/tasks?continuationToken={token}"), ids.clone()).await;
    assert_eq!(listed(&rest), [third.clone(), small.clone()]);
    assert!(rest.get("continuationToken").is_none());
    let (_, limited) = app.post("/tasks/status?limit=1", ids.clone()).await;
    assert_eq!(limited["statuses"].as_array().unwrap().len(), 1);
    assert_eq!(limited["continuationToken"], big.as_str());
    let (status, body) = app.post(&format!("/tasks?continuationToken={}", slugid()), ids).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a token the listing never issued: {body}");
    assert!(body["message"].as_str().unwrap().contains("continuationToken"), "{body}");
}

#[tokio::test]
async fn dedup_stays_within_a_project_and_scheduler_and_never_covers_secrets() {
    let app = TestApp::start().await;
    let queue = "dedup/q";
    let same =
        json!({"taskQueueId": queue, "idempotent": true, "projectId": "alpha", "payload": {"command": ["make"]}});
    let complete = |task_id: String| {
        let app = &app;
        async move {
            let claims = app.claim(queue, "w", 1).await;
            assert_eq!(claims[0]["status"]["taskId"], task_id.as_str());
            app.report(&task_id, 0, "completed").await;
        }
    };
    let original = slugid();
    app.create(&original, same.clone()).await;
    complete(original.clone()).await;
    let patch = |key: &str, value: serde_json::Value| {
        let mut task = same.clone();
        task[key] = value;
        task
    };
    for other in [
        patch("projectId", json!("beta")),
        patch("schedulerId", json!("another-scheduler")),
        patch("routes", json!(["index.x"])),
        patch("scopes", json!(["secrets:get:x"])),
    ] {
        let status = app.create(&slugid(), other.clone()).await;
        assert_eq!(status["state"], "pending", "{other}: {status}");
    }
    let copy = slugid();
    let status = app.create(&copy, same.clone()).await;
    assert_eq!(status["state"], "completed", "the same project and scheduler: {status}");
    let (_, result) = app.get(&format!("/task/{copy}/result")).await;
    assert_eq!(result["dedupedFrom"], original.as_str(), "{result}");

    // With secrets, neither the first task nor an identical one is deduplicated.
    let mut secret = same.clone();
    secret["taskQueueId"] = json!("dedup/secret");
    secret["secrets"] = json!({"token": "guess-1"});
    let first = slugid();
    app.create(&first, secret.clone()).await;
    let claims = app.claim("dedup/secret", "w", 1).await;
    assert_eq!(claims[0]["status"]["taskId"], first.as_str());
    app.report(&first, 0, "completed").await;
    let status = app.create(&slugid(), secret).await;
    assert_eq!(status["state"], "pending", "a right guess is not told by an instant completion: {status}");
}
