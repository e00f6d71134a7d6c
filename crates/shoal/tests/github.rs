//! Pushes become tasks as Taskcluster's GitHub integration makes them: a forge on loopback
//! (git's smart HTTP protocol) holds a repository with a `.taskcluster.yml`; its signed push
//! delivery makes the decision task with the repository's role, a worker runs it, and the
//! builds list shows it; a broken file, a fork's pull request and a forged signature are
//! recorded or refused; `shoal push` delivers a push of its own.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::git_server::{self, commit, publish, repository};
use support::worker::{Server, resolved, server_with, worker};

const SECRET: &str = "a-webhook-secret-of-the-tests";
const QUEUE: &str = "e2e/github";

/// taskgraph's template in small: one decision task, its id from `as_slugid`, for pushes and
/// pull requests.
const TASKCLUSTER_YML: &str = r#"
version: 1
policy:
  pullRequests: collaborators
tasks:
  - $let:
      ownTaskId: {$eval: as_slugid("decision_task")}
      head: {$if: 'tasks_for == "github-push"', then: '${event.after}', else: '${event.pull_request.head.sha}'}
    in:
      taskId: '${ownTaskId}'
      taskQueueId: e2e/github
      deadline: {$fromNow: '1 hour'}
      expires: {$fromNow: '1 day'}
      metadata:
        name: Decision Task
        description: The push's decision
        owner: dev@example.com
        source: '${event.repository.clone_url}'
      payload:
        command: [["/bin/sh", "-c", "echo deciding for ${head} as ${tasks_for}"]]
        maxRunTime: 60
"#;

async fn server_with_secret(data: &Path) -> Server {
    server_with(data, &["--github-webhook-secret", SECRET]).await
}

fn push_event(clone_url: &str, sha: &str) -> Value {
    json!({
        "ref": "refs/heads/main",
        "before": "0000000000000000000000000000000000000001",
        "after": sha,
        "repository": {"name": "proj", "full_name": "org/proj", "owner": {"name": "org", "login": "org"},
                       "clone_url": clone_url, "default_branch": "main"},
        "sender": {"login": "dev"},
        "head_commit": {"id": sha, "message": "Change"}
    })
}

async fn builds(server: &Server, query: &str) -> Vec<Value> {
    let url = format!("{}/api/github/v1/builds{query}", server.root);
    let answer = support::signed(&reqwest::Client::new(), reqwest::Method::GET, &url, None).send().await.unwrap();
    assert!(answer.status().is_success(), "{}", answer.text().await.unwrap());
    answer.json::<Value>().await.unwrap()["builds"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_push_becomes_its_decision_task_run_with_the_repositorys_role() {
    let dir = tempfile::tempdir().unwrap();
    let forge_root = dir.path().join("forge");
    let (work, first) = repository(&forge_root, "org", "proj", &[(".taskcluster.yml", TASKCLUSTER_YML)]);
    let forge = git_server::serve(&forge_root).await;
    let clone_url = format!("{}/org/proj.git", forge.url);
    let server = server_with_secret(&dir.path().join("data")).await;
    let _worker = worker(&server.root, QUEUE, "w1", &dir.path().join("work"));
    let client = support::client(&server.root);

    // Without its role the push's task may not be made: the build says so.
    let answer = client.deliver_webhook("push", &push_event(&clone_url, &first), SECRET).await.unwrap();
    let refused = &answer["build"];
    assert_eq!(refused["state"], "error", "{answer}");
    assert!(refused["error"].as_str().unwrap().contains("queue:create-task"), "{answer}");

    let host = forge.url.trim_start_matches("http://");
    let role = format!("repo:{host}/org/proj:branch:main");
    let url = format!("{}/api/auth/v1/roles/{}", server.root, role.replace('/', "%2F"));
    let body = json!({"description": "proj's pushes", "scopes": ["queue:create-task:*", "queue:scheduler-id:taskcluster-github"]});
    let made = support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url, Some(&body)).send().await.unwrap();
    assert!(made.status().is_success(), "{}", made.text().await.unwrap());

    let answer = client.deliver_webhook("push", &push_event(&clone_url, &first), SECRET).await.unwrap();
    let build = &answer["build"];
    assert_eq!((build["state"].as_str(), build["sha"].as_str()), (Some("pending"), Some(first.as_str())), "{answer}");
    let group = build["taskGroupId"].as_str().unwrap().to_owned();
    // The decision task is its own group, as taskgraph expects.
    let status = resolved(&server, &group, 1).await;
    assert_eq!(status["state"], "completed", "{status}");
    let task: Value = reqwest::get(format!("{}/task/{group}", server.api)).await.unwrap().json().await.unwrap();
    assert_eq!(task["schedulerId"], "taskcluster-github");
    let log = support::worker::log_of(&server, &group, 0).await;
    assert!(log.contains(&format!("deciding for {first} as github-push")), "{log}");
    let listed = builds(&server, "?organization=org&repository=proj").await;
    let ours = listed.iter().find(|b| b["taskGroupId"] == group.as_str()).expect("the build is listed");
    assert_eq!(ours["state"], "success", "{listed:?}");

    // A broken file is recorded as the build's error, not lost.
    let broken = commit(&work, &[(".taskcluster.yml", "version: 1\ntasks: {$eval: 'nope('}\n")], "Break it");
    publish(&work, &forge_root, "org", "proj", "main");
    let answer = client.deliver_webhook("push", &push_event(&clone_url, &broken), SECRET).await.unwrap();
    assert_eq!(answer["build"]["state"], "error", "{answer}");
    assert!(answer["build"]["error"].as_str().unwrap().contains("rendering"), "{answer}");
    let listed = builds(&server, &format!("?organization=org&repository=proj&sha={broken}")).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["state"], "error");

    // A template that would take the server's memory renders apart, under limits: recorded.
    let bomb = format!(
        "version: 1\ntasks:\n  $map: {{$eval: 'range(0, 4000)'}}\n  each(x):\n    $map: {{$eval: 'range(0, 4000)'}}\n    each(y): '{}'\n",
        "a kilobyte of text ".repeat(54)
    );
    let bombed = commit(&work, &[(".taskcluster.yml", &bomb)], "A bomb");
    publish(&work, &forge_root, "org", "proj", "main");
    let answer = client.deliver_webhook("push", &push_event(&clone_url, &bombed), SECRET).await.unwrap();
    assert!(answer["build"]["error"].as_str().unwrap().contains("more than its limits"), "{answer}");
    assert!(reqwest::get(format!("{}/api/queue/v1/ping", server.root)).await.unwrap().status().is_success());

    // A pull request from a fork, under the collaborators policy: recorded, no task.
    let fork_pr = json!({
        "action": "opened", "number": 3,
        "pull_request": {"number": 3, "head": {"sha": first, "ref": "x", "repo": {"full_name": "someone/proj"}},
                         "base": {"ref": "main", "repo": {"full_name": "org/proj", "clone_url": clone_url}}},
        "repository": {"name": "proj", "owner": {"login": "org"}, "default_branch": "main"},
        "sender": {"login": "someone"}
    });
    let answer = client.deliver_webhook("pull_request", &fork_pr, SECRET).await.unwrap();
    assert!(answer["build"]["error"].as_str().unwrap().contains("comes from a fork"), "{answer}");
    assert_eq!(builds(&server, "?organization=org&repository=proj&pullRequest=3").await.len(), 1);

    // `shoal push` for a repository without webhooks delivers the same push.
    let fixed = commit(&work, &[(".taskcluster.yml", TASKCLUSTER_YML)], "Fix it");
    publish(&work, &forge_root, "org", "proj", "main");
    let pushed = tokio::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["push", "--root-url", &server.root, &clone_url, &fixed])
        .env("SHOAL_GITHUB_WEBHOOK_SECRET", SECRET)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&pushed.stdout).into_owned();
    assert!(pushed.status.success(), "{printed} {}", String::from_utf8_lossy(&pushed.stderr));
    let group = printed.split('\t').next().unwrap().to_owned();
    assert_eq!(resolved(&server, &group, 1).await["state"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_or_forged_deliveries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_secret(&dir.path().join("data")).await;
    let url = format!("{}/api/github/v1/github", server.root);
    let event = push_event("http://127.0.0.1:9/org/proj.git", "0123456789abcdef0123456789abcdef01234567");
    let http = reqwest::Client::new();
    let unsigned = http.post(&url).header("x-github-event", "push").json(&event).send().await.unwrap();
    assert_eq!(unsigned.status(), 400);
    let forged = support::client(&server.root).deliver_webhook("push", &event, "another-secret-entirely").await;
    let err = forged.unwrap_err().to_string();
    assert!(err.starts_with("403") && err.contains("does not match"), "{err}");
    let pinged = support::client(&server.root).deliver_webhook("ping", &json!({"zen": "hi"}), SECRET).await.unwrap();
    assert!(pinged["message"].as_str().unwrap().contains("ping"), "{pinged}");
    let anonymous = reqwest::get(format!("{}/api/github/v1/builds", server.root)).await.unwrap();
    assert_eq!(anonymous.status(), 403, "listing builds takes github:list-builds");

    // A server without a secret takes no deliveries at all.
    let (_plain, root) = support::start_server(&dir.path().join("plain"), &[]).await;
    let err = support::client(&root).deliver_webhook("push", &event, SECRET).await.unwrap_err().to_string();
    assert!(err.starts_with("400") && err.contains("github-webhook-secret"), "{err}");
}
