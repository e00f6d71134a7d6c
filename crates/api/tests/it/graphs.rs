//! The task-graph scheduler over HTTP: graphs run in dependency order, reruns, blocked graphs,
//! extensions, and bad graphs refused with nothing left behind.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{Settings, TestApp, slugid, task_def};

impl TestApp {
    /// A call on the scheduler API.
    async fn scheduler(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let url = format!("{}/api/scheduler/v1{path}", self.root);
        self.call_as(Some(&crate::root_credentials()), method, &url, body).await
    }

    pub(crate) async fn create_graph(&self, graph_id: &str, graph: Value) -> (StatusCode, Value) {
        self.scheduler(reqwest::Method::PUT, &format!("/task-graph/{graph_id}"), Some(graph)).await
    }

    async fn graph_state(&self, graph_id: &str) -> String {
        let (status, body) =
            self.scheduler(reqwest::Method::GET, &format!("/task-graph/{graph_id}/status"), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["status"]["state"].as_str().unwrap().to_owned()
    }

    async fn inspect(&self, graph_id: &str) -> HashMap<String, Value> {
        let (status, body) =
            self.scheduler(reqwest::Method::GET, &format!("/task-graph/{graph_id}/inspect"), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| (task["label"].as_str().unwrap().to_owned(), task.clone()))
            .collect()
    }
}

const SCHEDULER: &str = "exchange/taskcluster-scheduler/v1/";

/// Hears the scheduler's messages (the embedded event stream, as a client would).
struct GraphListener(shoal_client::EventStream);

impl GraphListener {
    async fn connect(app: &TestApp) -> GraphListener {
        let client = shoal_client::Client::new(&app.root).unwrap();
        let bindings: Vec<(String, String)> = ["task-graph-running", "task-graph-blocked", "task-graph-finished"]
            .iter()
            .map(|exchange| (format!("{SCHEDULER}{exchange}"), "#".to_owned()))
            .collect();
        GraphListener(client.listen(&bindings).await.expect("subscribed"))
    }

    /// The next message as (exchange without its prefix, routing key, payload).
    async fn next(&mut self) -> (String, String, Value) {
        let next = tokio::time::timeout(Duration::from_secs(30), self.0.next_message()).await;
        let message = next.expect("no message within 30 s").expect("reading the stream").expect("the stream ended");
        (
            message["exchange"].as_str().unwrap().trim_start_matches(SCHEDULER).to_owned(),
            message["routingKey"].as_str().unwrap().to_owned(),
            message["payload"].clone(),
        )
    }

    /// Asserts the exchanges of the next messages, then that nothing else came about this
    /// graph: the stream is ordered, so a fresh graph's message must follow at once.
    async fn expect_exactly(mut self, app: &TestApp, graph_id: &str, expected: &[&str]) {
        for &exchange in expected {
            let (got, key, payload) = self.next().await;
            assert_eq!((got.as_str(), payload["status"]["taskGraphId"].as_str()), (exchange, Some(graph_id)), "{key}");
        }
        let sentinel = slugid();
        let (status, _) =
            app.create_graph(&sentinel, json!({"routing": "s", "tasks": {"s": node("graph/sentinel", &[], 0)}})).await;
        assert_eq!(status, StatusCode::OK);
        let (got, _, payload) = self.next().await;
        assert_eq!(
            (got.as_str(), payload["status"]["taskGraphId"].as_str()),
            ("task-graph-running", Some(sentinel.as_str()))
        );
    }
}

fn quick() -> Settings {
    Settings { claim_wait: Duration::from_millis(100), ..Settings::default() }
}

fn node(queue: &str, requires: &[&str], reruns: u32) -> Value {
    json!({"requires": requires, "reruns": reruns, "task": task_def(json!({"taskQueueId": queue}))})
}

#[tokio::test]
async fn a_diamond_graph_runs_in_dependency_order_and_finishes() {
    let app = TestApp::with(quick()).await;
    let mut listener = GraphListener::connect(&app).await;
    let graph_id = slugid();
    let graph = json!({
        "routing": "ci.try",
        "metadata": {"name": "diamond", "description": "d", "owner": "me@example.com", "source": "https://example.com"},
        "tags": {"purpose": "test"},
        "tasks": {
            "build": {"task": task_def(json!({"taskQueueId": "graph/diamond", "routes": ["index.build"]}))},
            "test-a": {"requires": ["build"], "task": task_def(json!({"taskQueueId": "graph/diamond",
                        "payload": {"build": {"$subs": "taskId:build"}}}))},
            "test-b": node("graph/diamond", &["build"], 0),
            "report": node("graph/diamond", &["test-a", "test-b"], 0),
        }
    });
    let (status, body) = app.create_graph(&graph_id, graph.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["status"],
        json!({"schedulerId": "task-graph-scheduler", "taskGraphId": graph_id, "state": "running", "routing": "ci.try"})
    );
    // The same submission again (a retried request) answers the same; another is refused.
    let (status, again) = app.create_graph(&graph_id, graph.clone()).await;
    assert_eq!((status, &again), (StatusCode::OK, &body));
    let mut other = graph.clone();
    other["routing"] = json!("other");
    let (status, refused) = app.create_graph(&graph_id, other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");

    let tasks = app.inspect(&graph_id).await;
    let id = |label: &str| tasks[label]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(tasks["report"]["requires"].as_array().unwrap().len(), 2);
    assert_eq!(tasks["build"]["dependents"].as_array().unwrap().len(), 2);
    let (_, definition) = app.get(&format!("/task/{}", id("test-a"))).await;
    assert_eq!(definition["payload"]["build"], json!(id("build")), "$subs replaced by the label's taskId");
    assert_eq!(definition["taskGroupId"], json!(graph_id));
    assert_eq!(definition["schedulerId"], json!("task-graph-scheduler"));
    let (_, definition) = app.get(&format!("/task/{}", id("build"))).await;
    assert_eq!(definition["routes"], json!([format!("task-graph-scheduler.{graph_id}.ci.try.index.build")]));

    // Claim whatever is pending, complete it, repeat: each wave holds what its requirements allow.
    let mut waves = Vec::new();
    loop {
        let claims = app.claim("graph/diamond", "w", 10).await;
        if claims.is_empty() {
            break;
        }
        let mut wave: Vec<String> = claims
            .iter()
            .map(|claim| {
                let task_id = claim["status"]["taskId"].as_str().unwrap();
                tasks.iter().find(|(_, task)| task["taskId"] == task_id).unwrap().0.clone()
            })
            .collect();
        wave.sort();
        for claim in &claims {
            app.report(claim["status"]["taskId"].as_str().unwrap(), 0, "completed").await;
        }
        waves.push(wave);
    }
    assert_eq!(waves, vec![vec!["build"], vec!["test-a", "test-b"], vec!["report"]]);
    assert_eq!(app.graph_state(&graph_id).await, "finished");
    let (status, info) = app.scheduler(reqwest::Method::GET, &format!("/task-graph/{graph_id}/info"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(info["metadata"]["name"], "diamond");
    assert_eq!(info["tags"], json!({"purpose": "test"}));
    let (exchange, key, payload) = listener.next().await;
    assert_eq!(exchange, "task-graph-running");
    assert_eq!(key, format!("primary._._._._._._.task-graph-scheduler.{graph_id}.ci.try"));
    assert_eq!(payload["status"]["routing"], "ci.try");
    listener.expect_exactly(&app, &graph_id, &["task-graph-finished"]).await;
    let (status, one) =
        app.scheduler(reqwest::Method::GET, &format!("/task-graph/{graph_id}/inspect/{}", id("report")), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (one["label"].as_str(), one["state"].as_str(), one["satisfied"].as_bool()),
        (Some("report"), Some("completed"), Some(true))
    );
}

#[tokio::test]
async fn a_task_that_fails_once_with_one_rerun_succeeds_and_the_graph_finishes() {
    let app = TestApp::with(quick()).await;
    let graph_id = slugid();
    let graph = json!({"routing": "r", "tasks": {
        "flaky": node("graph/rerun", &[], 1),
        "after": node("graph/rerun", &["flaky"], 0),
    }});
    assert_eq!(app.create_graph(&graph_id, graph).await.0, StatusCode::OK);
    let claims = app.claim("graph/rerun", "w", 10).await;
    assert_eq!(claims.len(), 1);
    let flaky = claims[0]["status"]["taskId"].as_str().unwrap().to_owned();
    let status = app.report(&flaky, 0, "failed").await;
    // Run again in the same step: the failed run and a new pending one.
    let states: Vec<&str> =
        status["runs"].as_array().unwrap().iter().map(|run| run["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["failed", "pending"]);
    assert_eq!(app.graph_state(&graph_id).await, "running");
    assert_eq!(app.inspect(&graph_id).await["flaky"]["rerunsLeft"], 0);
    let claims = app.claim("graph/rerun", "w", 10).await;
    assert_eq!((claims.len(), claims[0]["runId"].as_u64()), (1, Some(1)), "only the rerun: `after` waits");
    app.report(&flaky, 1, "completed").await;
    let claims = app.claim("graph/rerun", "w", 10).await;
    assert_eq!(claims.len(), 1, "`after` runs once `flaky` completed");
    app.report(claims[0]["status"]["taskId"].as_str().unwrap(), 0, "completed").await;
    assert_eq!(app.graph_state(&graph_id).await, "finished");
}

#[tokio::test]
async fn a_task_that_keeps_failing_blocks_the_graph_and_its_dependents_never_run() {
    let app = TestApp::with(quick()).await;
    let listener = GraphListener::connect(&app).await;
    let graph_id = slugid();
    let graph = json!({"routing": "r", "tasks": {
        "broken": node("graph/block", &[], 1),
        "after": node("graph/block", &["broken"], 0),
        "beside": node("graph/block", &[], 0),
    }});
    assert_eq!(app.create_graph(&graph_id, graph).await.0, StatusCode::OK);
    let tasks = app.inspect(&graph_id).await;
    let broken = tasks["broken"]["taskId"].as_str().unwrap().to_owned();
    for run_id in 0..2 {
        let claims = app.claim("graph/block", "w", 10).await;
        let mine = claims.iter().find(|claim| claim["status"]["taskId"] == broken.as_str()).expect("broken is pending");
        assert_eq!(mine["runId"], run_id);
        app.report(&broken, run_id, "failed").await;
        for claim in claims.iter().filter(|claim| claim["status"]["taskId"] != broken.as_str()) {
            app.report(claim["status"]["taskId"].as_str().unwrap(), 0, "completed").await;
        }
    }
    assert_eq!(app.graph_state(&graph_id).await, "blocked");
    assert!(app.claim("graph/block", "w", 10).await.is_empty(), "nothing more runs");
    let tasks = app.inspect(&graph_id).await;
    assert_eq!((tasks["broken"]["state"].as_str(), tasks["broken"]["rerunsLeft"].as_u64()), (Some("failed"), Some(0)));
    assert_eq!(tasks["after"]["state"], "unscheduled");
    assert_eq!(tasks["after"]["requiresLeft"], json!([broken]));
    listener.expect_exactly(&app, &graph_id, &["task-graph-running", "task-graph-blocked"]).await;
}

#[tokio::test]
async fn a_running_graph_is_extended_and_a_finished_one_runs_again() {
    let app = TestApp::with(quick()).await;
    let listener = GraphListener::connect(&app).await;
    let graph_id = slugid();
    let extend = |tasks: Value| {
        let app = &app;
        let path = format!("/task-graph/{graph_id}/extend");
        async move { app.scheduler(reqwest::Method::POST, &path, Some(json!({"tasks": tasks}))).await }
    };
    assert_eq!(
        app.create_graph(&graph_id, json!({"routing": "r", "tasks": {"first": node("graph/extend", &[], 0)}})).await.0,
        StatusCode::OK
    );
    let added = json!({"second": node("graph/extend", &["first"], 0)});
    let (status, body) = extend(added.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "running");
    // Sent twice (a retried request): the same answer, nothing added twice.
    assert_eq!(extend(added).await.0, StatusCode::OK);
    let (status, body) = extend(json!({"second": node("graph/extend", &[], 3)})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a label already in the graph: {body}");
    assert!(body["message"].as_str().unwrap().contains("tasks.second"), "{body}");

    let mut order = Vec::new();
    for _ in 0..2 {
        let claims = app.claim("graph/extend", "w", 10).await;
        assert_eq!(claims.len(), 1);
        let task_id = claims[0]["status"]["taskId"].as_str().unwrap().to_owned();
        app.report(&task_id, 0, "completed").await;
        order.push(task_id);
    }
    let tasks = app.inspect(&graph_id).await;
    assert_eq!(order, [tasks["first"]["taskId"].as_str().unwrap(), tasks["second"]["taskId"].as_str().unwrap()]);
    assert_eq!(app.graph_state(&graph_id).await, "finished");

    let (status, body) = extend(json!({"third": node("graph/extend", &["second"], 0)})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "running", "a finished graph that gains tasks runs again");
    let claims = app.claim("graph/extend", "w", 10).await;
    assert_eq!(claims.len(), 1, "`third` requires a completed task: pending at once");
    app.report(claims[0]["status"]["taskId"].as_str().unwrap(), 0, "completed").await;
    assert_eq!(app.graph_state(&graph_id).await, "finished");
    listener
        .expect_exactly(
            &app,
            &graph_id,
            &["task-graph-running", "task-graph-finished", "task-graph-running", "task-graph-finished"],
        )
        .await;

    let (status, body) = app
        .scheduler(
            reqwest::Method::POST,
            &format!("/task-graph/{}/extend", slugid()),
            Some(json!({"tasks": {"x": node("q/x", &[], 0)}})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn bad_graphs_are_refused_naming_the_problem_and_leave_nothing_behind() {
    let app = TestApp::start().await;
    let ok = || node("graph/bad", &[], 0);
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"routing": "r", "tasks": {"a": node("graph/bad", &["b"], 0), "b": node("graph/bad", &["a"], 0)}}),
            "cycle: a -> b -> a",
        ),
        (
            json!({"routing": "r", "tasks": {"a": node("graph/bad", &["nobody"], 0)}}),
            "tasks.a.requires: unknown label `nobody`",
        ),
        (
            json!({"routing": "r", "tasks": {"a": {"task": task_def(json!({"taskQueueId": "graph/bad", "payload": {"x": [{"$subs": "taskId:ghost"}]}}))}}}),
            "tasks.a.task.payload.x[0].$subs: unknown label `ghost`",
        ),
        (
            json!({"routing": "r", "tasks": {"a": {"task": task_def(json!({"taskQueueId": "no-slash"}))}}}),
            "tasks.a.task.taskQueueId",
        ),
        (
            json!({"routing": "r", "tasks": {"a": {"task": task_def(json!({"metadata": null}))}}}),
            "tasks.a.task: missing field `metadata`",
        ),
        (
            json!({"routing": "r", "tasks": {"a": {"task": task_def(json!({"retries": "many"}))}}}),
            "tasks.a.task.retries: invalid type",
        ),
        (json!({"routing": "much-too-long", "tasks": {"a": ok()}}), "routing"),
        (json!({"routing": "r", "tasks": {"a": {"reruns": 50, "task": task_def(json!({}))}}}), "tasks.a.reruns"),
        (json!({"routing": "r", "tasks": {}}), "tasks: must hold at least one task"),
        (json!({"routing": "r", "tasks": {"a": ok()}, "unknown": 1}), "unknown"),
    ];
    for (graph, expected) in cases {
        let graph_id = slugid();
        let (status, body) = app.create_graph(&graph_id, graph.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{graph}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(expected), "expected `{expected}` in: {message}");
        let (status, _) = app.scheduler(reqwest::Method::GET, &format!("/task-graph/{graph_id}/status"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "nothing of the refused graph was kept");
        let (status, _) = app.get(&format!("/task-group/{graph_id}/list")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "no task of the refused graph was kept");
    }
    // A label given twice can only be written as raw JSON.
    let url = format!("{}/api/scheduler/v1/task-graph/{}", app.root, slugid());
    let task = task_def(json!({}));
    let raw = format!(r#"{{"routing": "r", "tasks": {{"a": {{"task": {task}}}, "a": {{"task": {task}}}}}}}"#);
    let res = app.signed_raw(reqwest::Method::PUT, &url, Some(raw.into_bytes())).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body: Value = res.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("duplicate label `a`"), "{body}");
    // A graph may not take over a task group the queue already has.
    let group = slugid();
    app.create(&slugid(), json!({"taskGroupId": group})).await;
    let (status, body) = app.create_graph(&group, json!({"routing": "r", "tasks": {"a": ok()}})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

#[tokio::test]
async fn a_placeholder_outside_the_payload_is_refused_and_skips_no_scope_check() {
    let app = TestApp::start().await;
    let submitter = app
        .make_client(
            "ci/graphs",
            &[
                "queue:create-task:project:none",
                "queue:scheduler-id:task-graph-scheduler",
                "queue:create-task:lowest:graph/esc",
                "queue:route:mine",
            ],
        )
        .await;
    let url = |graph_id: &str| format!("{}/api/scheduler/v1/task-graph/{graph_id}", app.root);
    let with = |patch: Value| json!({"routing": "r", "tasks": {"a": {"task": task_def(patch)}}});
    // Escalations that a read failing before substitution let through, and a tag.
    let cases = [
        (json!({"taskQueueId": "graph/esc", "scopes": ["*", {"$subs": "taskId:a"}]}), "tasks.a.task.scopes[1].$subs"),
        (json!({"taskQueueId": "graph/esc", "routes": ["x", {"$subs": "taskId:a"}]}), "tasks.a.task.routes[1].$subs"),
        (json!({"taskQueueId": "graph/esc", "tags": {"k": {"$subs": "taskId:a"}}}), "tasks.a.task.tags.k.$subs"),
    ];
    for (patch, field) in cases {
        let graph_id = slugid();
        let (status, body) =
            app.call_as(Some(&submitter), reqwest::Method::PUT, &url(&graph_id), Some(with(patch))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["message"].as_str().unwrap().contains(field), "names {field}: {body}");
        let (status, _) = app.get(&format!("/task-group/{graph_id}/list")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "nothing was created");
    }
    // A malformed field authorization reads is refused too, not read as empty.
    let (status, body) = app
        .call_as(
            Some(&submitter),
            reqwest::Method::PUT,
            &url(&slugid()),
            Some(with(json!({"taskQueueId": "graph/esc", "scopes": ["*", 7]}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("tasks.a.task.scopes[1]"), "{body}");
    // What the submitter holds is created; a scope it lacks is still a 403.
    let payload = json!({"taskQueueId": "graph/esc", "routes": ["mine"], "payload": {"x": {"$subs": "taskId:a"}}});
    let (status, body) =
        app.call_as(Some(&submitter), reqwest::Method::PUT, &url(&slugid()), Some(with(payload))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app
        .call_as(
            Some(&submitter),
            reqwest::Method::PUT,
            &url(&slugid()),
            Some(with(json!({"taskQueueId": "graph/esc", "scopes": ["*"]}))),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

/// Only a holder of `scheduler:extend-task-graph:<taskGraphId>` extends a graph, however
/// many tasks it may create; the graph's submitter holds it through the graph, so its
/// decision task can be given it, and one who holds it extends the graph.
#[tokio::test]
async fn only_a_holder_of_the_graphs_extend_scope_extends_it() {
    let app = TestApp::start().await;
    let creates = [
        "queue:create-task:project:none",
        "queue:scheduler-id:task-graph-scheduler",
        "queue:create-task:lowest:graph/ext",
        "queue:route:*",
    ];
    let submitter = app.make_client("ci/submitter", &creates).await;
    let stranger = app.make_client("ci/stranger", &creates).await;
    let graph_id = slugid();
    let url = format!("{}/api/scheduler/v1/task-graph/{graph_id}", app.root);
    let decision =
        task_def(json!({"taskQueueId": "graph/ext", "scopes": [format!("scheduler:extend-task-graph:{graph_id}")]}));
    let graph = json!({"routing": "r", "tasks": {"decision": {"task": decision}}});
    let (status, body) = app.call_as(Some(&submitter), reqwest::Method::PUT, &url, Some(graph)).await;
    assert_eq!(status, StatusCode::OK, "the submitter may give its decision task the extend scope: {body}");
    let another = slugid();
    let elsewhere =
        task_def(json!({"taskQueueId": "graph/ext", "scopes": [format!("scheduler:extend-task-graph:{another}")]}));
    let (status, body) = app
        .call_as(
            Some(&submitter),
            reqwest::Method::PUT,
            &format!("{}/api/scheduler/v1/task-graph/{}", app.root, slugid()),
            Some(json!({"routing": "r", "tasks": {"d": {"task": elsewhere}}})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "only its own graph's: {body}");
    let added = json!({"tasks": {"blocker": {"task": task_def(json!({"taskQueueId": "graph/ext"}))}}});
    let (status, body) =
        app.call_as(Some(&stranger), reqwest::Method::POST, &format!("{url}/extend"), Some(added.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("scheduler:extend-task-graph:"), "{body}");
    assert_eq!(app.inspect(&graph_id).await.len(), 1, "nothing was added");
    let extender = app
        .make_client(
            "ci/extender",
            &[&creates[..], &[format!("scheduler:extend-task-graph:{graph_id}").as_str()]].concat(),
        )
        .await;
    let (status, body) =
        app.call_as(Some(&extender), reqwest::Method::POST, &format!("{url}/extend"), Some(added)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(app.inspect(&graph_id).await.len(), 2);
}
