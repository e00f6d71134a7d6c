//! Workers: long polls, races, reclaims, expiry, retries and dimensions.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::{Settings, TestApp, slugid};

#[tokio::test]
async fn claim_reclaim_complete_with_either_route_form() {
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    // Raw slash in the route, as some hand-written clients send it.
    let (status, body) = app.post("/claim-work/prov/wt", json!({"workerGroup": "g", "workerId": "w1"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let claim = &body["tasks"][0];
    assert_eq!(claim["status"]["taskId"], task_id.as_str());
    assert_eq!(claim["runId"], 0);
    assert_eq!(claim["task"]["payload"]["command"][0], "true");
    assert_eq!(claim["status"]["runs"][0]["state"], "running");
    assert!(claim["credentials"]["clientId"].as_str().unwrap().starts_with("task-client/"));

    let (status, reclaim) = app.post(&format!("/task/{task_id}/runs/0/reclaim"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{reclaim}");
    assert!(reclaim["takenUntil"].as_str().unwrap() >= claim["takenUntil"].as_str().unwrap());
    let status = app.report(&task_id, 0, "completed").await;
    assert_eq!(status["state"], "completed");
    assert_eq!(status["runs"][0]["reasonResolved"], "completed");
    let (code, again) = app.post(&format!("/task/{task_id}/runs/0/reclaim"), json!({})).await;
    assert_eq!(code, StatusCode::CONFLICT, "{again}");
}

#[tokio::test]
async fn an_idle_long_poll_wakes_when_work_appears() {
    let app = Arc::new(TestApp::start().await);
    let dependency = slugid();
    app.create(&dependency, json!({"taskQueueId": "prov/other"})).await;
    let waiting = {
        let app = Arc::clone(&app);
        tokio::spawn(async move { app.claim("prov/wt", "sleepy", 1).await })
    };
    // The task becomes pending only when its dependency completes: the release path wakes it.
    let dependent = slugid();
    app.create(&dependent, json!({"dependencies": [dependency]})).await;
    let claims = app.claim("prov/other", "w", 1).await;
    assert_eq!(claims.len(), 1);
    app.report(&dependency, 0, "completed").await;
    let woken = waiting.await.unwrap();
    assert_eq!(woken.len(), 1, "the waiting worker got the released task (not an empty answer after 20 s)");
    assert_eq!(woken[0]["status"]["taskId"], dependent.as_str());
}

#[tokio::test]
async fn concurrent_workers_claim_every_task_exactly_once() {
    let settings = Settings { claim_wait: Duration::ZERO, ..Settings::default() };
    let app = Arc::new(TestApp::with(settings).await);
    let n_tasks = 400;
    let mut created = HashSet::new();
    for _ in 0..n_tasks {
        let task_id = slugid();
        app.create(&task_id, json!({})).await;
        created.insert(task_id);
    }
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..16 {
        let app = Arc::clone(&app);
        workers.spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claims = app.claim("prov/wt", &format!("w{w}"), 4).await;
                if claims.is_empty() {
                    return mine;
                }
                for claim in claims {
                    let task_id = claim["status"]["taskId"].as_str().unwrap().to_owned();
                    app.report(&task_id, 0, "completed").await;
                    mine.push(task_id);
                }
            }
        });
    }
    let mut claimed = Vec::new();
    while let Some(mine) = workers.join_next().await {
        claimed.extend(mine.unwrap());
    }
    let unique: HashSet<String> = claimed.iter().cloned().collect();
    assert_eq!(claimed.len(), n_tasks, "no task was handed out twice");
    assert_eq!(unique, created, "every task was handed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_made_pending_while_workers_wait_reaches_one_of_them() {
    // A poll that missed its wake-up would wait an hour: the guard below turns that into a failure.
    let settings = Settings { claim_wait: Duration::from_secs(3600), ..Settings::default() };
    let app = Arc::new(TestApp::with(settings).await);
    let (done, mut completed) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (app, done) = (Arc::clone(&app), done.clone());
        workers.spawn(async move {
            loop {
                for claim in app.claim("prov/wt", &format!("w{w}"), 1).await {
                    let task_id = claim["status"]["taskId"].as_str().unwrap().to_owned();
                    app.report(&task_id, 0, "completed").await;
                    done.send(task_id).unwrap();
                }
            }
        });
    }
    // Created one by one, each once every worker is in line; every fourth becomes pending
    // only when the one before it completes (woken from the report's commit, not the create's).
    let (n_tasks, mut created, mut previous) = (120, HashSet::new(), None::<String>);
    for n in 0..n_tasks {
        while app.queue.claims_waiting() < 8 {
            tokio::task::yield_now().await;
        }
        let task_id = slugid();
        let patch = match (&previous, n % 4) {
            (Some(before), 3) => json!({"dependencies": [before]}),
            _ => json!({}),
        };
        app.create(&task_id, patch).await;
        created.insert(task_id.clone());
        previous = Some(task_id);
    }
    let mut claimed = Vec::new();
    let all = async {
        while claimed.len() < n_tasks {
            claimed.push(completed.recv().await.unwrap());
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(300), all).await;
    workers.abort_all();
    assert!(finished.is_ok(), "{} of {n_tasks} tasks reached a waiting worker", claimed.len());
    let unique: HashSet<String> = claimed.iter().cloned().collect();
    assert_eq!(unique.len(), n_tasks, "no task was handed out twice");
    assert_eq!(unique, created);
}

#[tokio::test]
async fn an_expired_claim_is_retried_on_another_worker() {
    let app = TestApp::with(Settings { claim_timeout_secs: 1, ..Settings::default() }).await;
    let task_id = slugid();
    app.create(&task_id, json!({"retries": 1})).await;
    let first = app.claim("prov/wt", "dies", 1).await;
    assert_eq!(first[0]["runId"], 0);
    // This long poll returns when the expiry makes the retry run pending.
    let retry = app.claim("prov/wt", "survivor", 1).await;
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0]["runId"], 1);
    let runs = &retry[0]["status"]["runs"];
    assert_eq!(runs[0]["reasonResolved"], "claim-expired");
    assert_eq!(runs[1]["reasonCreated"], "retry");
    assert_eq!(retry[0]["status"]["retriesLeft"], 0);
    let (code, _) = app.post(&format!("/task/{task_id}/runs/0/completed"), json!({})).await;
    assert_eq!(code, StatusCode::CONFLICT, "the dead worker cannot resolve its old run");
}

#[tokio::test]
async fn worker_exceptions_retry_or_resolve() {
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({"retries": 1})).await;
    app.claim("prov/wt", "w", 1).await;
    let (_, body) = app.post(&format!("/task/{task_id}/runs/0/exception"), json!({"reason": "worker-shutdown"})).await;
    assert_eq!(body["status"]["state"], "pending");
    assert_eq!(body["status"]["runs"][1]["reasonCreated"], "retry");
    app.claim("prov/wt", "w", 1).await;
    let (_, body) =
        app.post(&format!("/task/{task_id}/runs/1/exception"), json!({"reason": "intermittent-task"})).await;
    assert_eq!(body["status"]["state"], "exception", "no retries left");
    let (_, body) =
        app.post(&format!("/task/{task_id}/runs/1/exception"), json!({"reason": "intermittent-task"})).await;
    assert_eq!(body["status"]["state"], "exception", "repeating a resolution is idempotent");
}

#[tokio::test]
async fn dimensions_decide_which_worker_gets_a_task() {
    let app = TestApp::with(Settings { claim_wait: Duration::ZERO, ..Settings::default() }).await;
    let gpu_task = slugid();
    app.create(&gpu_task, json!({"dimensions": {"gpu": ["nvidia|amd"], "os": ["linux"]}})).await;
    let ubuntu_task = slugid();
    app.create(&ubuntu_task, json!({"dimensions": {"os": ["linux", "ubuntu"]}})).await;
    let plain = json!({"workerGroup": "g", "workerId": "plain", "dimensions": {"os": ["linux"]}});
    let (_, body) = app.post("/claim-work/prov%2Fwt", plain).await;
    assert_eq!(body["tasks"].as_array().unwrap().len(), 0, "lacks gpu");
    let gpu = json!({"workerGroup": "g", "workerId": "gpu", "dimensions": {"os": ["linux"], "gpu": ["amd"]}});
    let (_, body) = app.post("/claim-work/prov%2Fwt", gpu).await;
    assert_eq!(body["tasks"][0]["status"]["taskId"], gpu_task.as_str());
    assert_eq!(body["tasks"][0]["task"]["dimensions"]["gpu"], json!(["amd|nvidia"]), "alternatives sorted");
    let gpu = json!({"workerGroup": "g", "workerId": "gpu", "dimensions": {"os": ["linux"], "gpu": ["amd"]}});
    let (_, body) = app.post("/claim-work/prov%2Fwt", gpu).await;
    assert_eq!(body["tasks"].as_array().unwrap().len(), 0, "the ubuntu task needs both values of os");
    let ubuntu = json!({"workerGroup": "g", "workerId": "u", "dimensions": {"os": ["ubuntu", "linux"]}});
    let (_, body) = app.post("/claim-work/prov%2Fwt", ubuntu).await;
    assert_eq!(body["tasks"][0]["status"]["taskId"], ubuntu_task.as_str());
}

#[tokio::test]
async fn priorities_of_both_scales_order_claims() {
    let app = TestApp::with(Settings { claim_wait: Duration::ZERO, ..Settings::default() }).await;
    let lowest = slugid();
    let swarming = slugid();
    let highest = slugid();
    app.create(&lowest, json!({})).await;
    app.create(&swarming, json!({"priority": 100})).await;
    app.create(&highest, json!({"priority": "highest"})).await;
    let claims = app.claim("prov/wt", "w", 3).await;
    let order: Vec<&str> = claims.iter().map(|c| c["status"]["taskId"].as_str().unwrap()).collect();
    assert_eq!(order, vec![highest.as_str(), swarming.as_str(), lowest.as_str()]);
    assert_eq!(claims[1]["status"]["priority"], 100);
}

#[tokio::test]
async fn deprecated_claim_task_claims_one_run() {
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    let body = json!({"workerGroup": "g", "workerId": "w"});
    let (status, claim) = app.post(&format!("/task/{task_id}/runs/0/claim"), body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{claim}");
    assert_eq!(claim["status"]["state"], "running");
    let (status, _) = app.post(&format!("/task/{task_id}/runs/0/claim"), body).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_report_may_carry_what_the_worker_measured() {
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    app.claim("prov/wt", "w", 1).await;
    let path = format!("/task/{task_id}/runs/0/failed");
    let (code, body) = app.post(&path, json!({"stats": {"runMs": 5, "bogus": 1}})).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("stats"), "names the field: {body}");
    let (code, body) = app.post(&path, json!({"stats": {"runMs": -1}})).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "durations are never negative: {body}");
    let stats = json!({"setupMs": 3, "runMs": 1500, "uploadMs": 20, "bytesUploaded": 4096, "exitCode": 2,
        "peakMemoryBytes": 1048576});
    let (code, body) = app.post(&path, json!({"stats": stats})).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(body["status"]["runs"][0].get("stats").is_none(), "not in Taskcluster's run: {body}");
    let (_, body) = app.get(&format!("/task/{task_id}/result")).await;
    assert_eq!(body["runs"][0]["stats"], stats, "kept with the run: {body}");
    assert_eq!(body["runs"][0]["runId"], 0, "{body}");
}
