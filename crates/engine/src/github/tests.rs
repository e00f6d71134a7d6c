//! The GitHub integration's rules on deliveries as GitHub and Gitea send them, and on `.taskcluster.yml` as taskgraph's template writes it.

use super::*;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn push_event(git_ref: &str) -> Value {
    json!({
        "ref": git_ref,
        "before": "0000000000000000000000000000000000000001",
        "after": SHA,
        "repository": {
            "name": "my.proj", "full_name": "org/my.proj", "owner": {"name": "org", "login": "org"},
            "clone_url": "http://127.0.0.1:3000/org/my.proj.git", "default_branch": "main"
        },
        "pusher": {"name": "dev"},
        "sender": {"login": "dev"},
        "head_commit": {"id": SHA, "message": "Fix the build"}
    })
}

fn pull_request_event(action: &str, fork: bool) -> Value {
    let head_repo = if fork { "someone/my.proj" } else { "org/my.proj" };
    json!({
        "action": action,
        "number": 7,
        "pull_request": {
            "number": 7,
            "head": {"sha": SHA, "ref": "feature", "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "sha": "1111111111111111111111111111111111111111",
                     "repo": {"full_name": "org/my.proj", "clone_url": "https://forge.example.com/org/my.proj.git"}}
        },
        "repository": {"name": "my.proj", "owner": {"login": "org"}, "default_branch": "main"},
        "sender": {"login": "dev"}
    })
}

fn change(event: &str, body: &Value) -> Change {
    match parse_delivery(event, "d-1", body).unwrap() {
        Delivery::Change(change) => *change,
        Delivery::Ignored(why) => panic!("ignored: {why}"),
    }
}

#[test]
fn a_push_to_a_branch_gets_its_branchs_role_and_a_tag_its_tags() {
    let pushed = change("push", &push_event("refs/heads/main"));
    assert_eq!((pushed.organization.as_str(), pushed.repository.as_str()), ("org", "my%proj"));
    assert_eq!(
        (pushed.host.as_str(), pushed.event_type.as_str(), pushed.sha.as_str()),
        ("127.0.0.1:3000", "push", SHA)
    );
    assert_eq!(pushed.tasks_for(None), Some(TasksFor::Push));
    assert_eq!(
        pushed.scopes(TasksFor::Push),
        ["assume:repo:127.0.0.1:3000/org/my%proj:branch:main", "queue:scheduler-id:taskcluster-github"]
    );
    let tagged = change("push", &push_event("refs/tags/v1.0"));
    assert_eq!(tagged.event_type, "tag");
    assert_eq!(tagged.scopes(TasksFor::Push)[0], "assume:repo:127.0.0.1:3000/org/my%proj:tag:v1.0");
}

#[test]
fn deliveries_with_nothing_to_build_are_ignored_and_broken_ones_refused() {
    let mut deleted = push_event("refs/heads/old");
    deleted["after"] = json!("0000000000000000000000000000000000000000");
    let mut skipped = push_event("refs/heads/main");
    skipped["head_commit"]["message"] = json!("Docs only [ci skip]");
    for (event, body) in [
        ("ping", json!({"zen": "hi"})),
        ("push", deleted),
        ("push", skipped),
        ("issues", json!({})),
        ("pull_request", pull_request_event("closed", false)),
    ] {
        assert!(matches!(parse_delivery(event, "d", &body), Ok(Delivery::Ignored(_))), "{event} {body}");
    }
    let mut no_sha = push_event("refs/heads/main");
    no_sha["after"] = json!("main");
    let mut file_url = push_event("refs/heads/main");
    file_url["repository"]["clone_url"] = json!("file:///etc");
    let mut unprintable = push_event("refs/heads/main");
    unprintable["ref"] = json!("refs/heads/ma\u{7}in");
    for (body, field) in [(no_sha, "after"), (file_url, "repository.clone_url"), (unprintable, "ref")] {
        let err = parse_delivery("push", "d", &body).unwrap_err().to_string();
        assert!(err.starts_with(field), "{err}");
    }
}

#[test]
fn a_pull_requests_role_follows_the_default_branchs_policy() {
    let own = change("pull_request", &pull_request_event("opened", false));
    let fork = change("pull_request", &pull_request_event("synchronize", true));
    assert_eq!(
        (own.git_ref.as_str(), own.pull_request, own.event_type.as_str()),
        ("refs/pull/7/head", Some(7), "pull_request.opened")
    );
    let policy = |name: &str| json!({"version": 1, "policy": {"pullRequests": name}});
    assert_eq!(own.tasks_for(None), Some(TasksFor::PullRequest));
    assert!(fork.needs_policy() && !own.needs_policy(), "only a fork's pull request reads the policy");
    assert_eq!(fork.tasks_for(None), None, "collaborators only, by default");
    assert_eq!(fork.tasks_for(Some(&policy("collaborators"))), None);
    assert_eq!(fork.tasks_for(Some(&policy("public"))), Some(TasksFor::PullRequest));
    assert_eq!(fork.tasks_for(Some(&policy("public_restricted"))), Some(TasksFor::PullRequestUntrusted));
    assert_eq!(own.tasks_for(Some(&policy("public_restricted"))), Some(TasksFor::PullRequest));
    assert_eq!(
        fork.scopes(TasksFor::PullRequestUntrusted)[0],
        "assume:repo:forge.example.com/org/my%proj:pull-request-untrusted"
    );
}

/// A `.taskcluster.yml` as taskgraph's template writes one: a decision task whose id comes
/// from `as_slugid`, for pushes and pull requests.
fn taskgraph_config() -> Value {
    json!({
        "version": 1,
        "policy": {"pullRequests": "public"},
        "tasks": {
            "$let": {
                "ownTaskId": {"$eval": "as_slugid(\"decision_task\")"},
                "headSha": {"$if": "tasks_for == \"github-push\"", "then": "${event.after}", "else": "${event.pull_request.head.sha}"}
            },
            "in": {
                "$if": "tasks_for in [\"github-push\", \"github-pull-request\"]",
                "then": [{
                    "taskId": "${ownTaskId}",
                    "taskGroupId": "${ownTaskId}",
                    "taskQueueId": "proj-1/decision",
                    "deadline": {"$fromNow": "1 day"},
                    "metadata": {"name": "Decision Task", "description": "d", "owner": "dev@example.com", "source": "${taskcluster_root_url}/x"},
                    "scopes": ["assume:repo:example"],
                    "payload": {"command": [["echo", "${headSha}", "${as_slugid('decision_task')}"]], "maxRunTime": 600},
                    "extra": {"tasks_for": "${tasks_for}", "now": "${now}"}
                }]
            }
        }
    })
}

fn ids() -> impl FnMut() -> TaskId {
    let made = ["fN1SbArXTPSVFNUvaOlinQ", "HFSTWeEkQ8OsZw1iUoSaWw", "b4-NHEBITBCBv-2Gg-QREg", "Zr6ALZJfQKiGY8VCkj6KlA"];
    let mut next = 0;
    move || {
        next += 1;
        TaskId::parse(made[next - 1]).unwrap()
    }
}

#[test]
fn a_taskgraph_config_renders_one_decision_task_that_is_its_own_group() {
    let now = Timestamp::parse("2026-11-28T12:00:00.000Z").unwrap();
    let pushed = change("push", &push_event("refs/heads/main"));
    let rendered =
        Rendering::of(&taskgraph_config(), &pushed, TasksFor::Push, "http://shoal", now).render(&mut ids()).unwrap();
    assert_eq!(rendered.tasks.len(), 1);
    let (task_id, task) = &rendered.tasks[0];
    assert_eq!(task_id.as_str(), "fN1SbArXTPSVFNUvaOlinQ", "as_slugid gives one id per label");
    assert_eq!(rendered.task_group_id(), Some(*task_id));
    assert_eq!(task["payload"]["command"][0], json!(["echo", SHA, task_id.as_str()]));
    assert_eq!(task["extra"], json!({"tasks_for": "github-push", "now": "2026-11-28T12:00:00.000Z"}));
    assert_eq!(
        (task["schedulerId"].as_str(), task["created"].as_str()),
        (Some(SCHEDULER_ID), Some("2026-11-28T12:00:00.000Z"))
    );
    assert!(task.get("taskId").is_none(), "the id goes in the URL, not the definition");
    assert_eq!((task["routes"].clone(), rendered.route), (json!(["statuses"]), Report::Statuses));
    assert_eq!(task["metadata"]["source"], "http://shoal/x");

    let declined = json!({"version": 1, "tasks": {"$if": "tasks_for == \"github-release\"", "then": [{}]}});
    assert!(Rendering::of(&declined, &pushed, TasksFor::Push, "r", now).render(&mut ids()).unwrap().tasks.is_empty());
}

#[test]
fn several_tasks_share_a_new_group_dependencies_first() {
    let now = Timestamp::parse("2026-11-28T12:00:00.000Z").unwrap();
    let pushed = change("push", &push_event("refs/heads/main"));
    let config = json!({"version": 1, "reporting": "checks-v1", "tasks": [
        {"taskId": {"$eval": "as_slugid('test')"}, "dependencies": [{"$eval": "as_slugid('build')"}], "name": "test", "routes": ["checks"]},
        {"taskId": {"$eval": "as_slugid('build')"}, "name": "build"},
        {"name": "lint"}
    ]});
    let rendered = Rendering::of(&config, &pushed, TasksFor::Push, "r", now).render(&mut ids()).unwrap();
    let names: Vec<&str> = rendered.tasks.iter().map(|(_, task)| task["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["build", "test", "lint"]);
    let groups: Vec<&Value> = rendered.tasks.iter().map(|(_, task)| &task["taskGroupId"]).collect();
    assert!(groups.iter().all(|group| *group == groups[0]));
    assert!(rendered.tasks.iter().all(|(id, _)| json!(id) != *groups[0]), "the group is none of the tasks'");
    assert!(rendered.tasks.iter().all(|(_, task)| task["routes"] == json!(["checks"])), "reports are checks, once");
}

#[test]
fn broken_configs_say_why() {
    let now = Timestamp::parse("2026-11-28T12:00:00.000Z").unwrap();
    let pushed = change("push", &push_event("refs/heads/main"));
    let cycle = json!({"version": 1, "tasks": [
        {"taskId": {"$eval": "as_slugid('a')"}, "dependencies": [{"$eval": "as_slugid('b')"}]},
        {"taskId": {"$eval": "as_slugid('b')"}, "dependencies": [{"$eval": "as_slugid('a')"}]}
    ]});
    for (config, says) in [
        (json!({"tasks": []}), "version: 1"),
        (json!({"version": 1, "tasks": {"$eval": "nope("}}), "rendering"),
        (json!({"version": 1, "tasks": {"a": 1}}), "must render to a list"),
        (json!({"version": 1, "tasks": [{"taskId": "not-a-slugid"}]}), "tasks[0].taskId"),
        (cycle, "cycle"),
    ] {
        let err = Rendering::of(&config, &pushed, TasksFor::Push, "r", now).render(&mut ids()).unwrap_err();
        assert!(err.contains(says), "{config}: {err}");
    }
}

#[test]
fn a_builds_state_follows_its_tasks() {
    let now = Timestamp(0);
    let pushed = change("push", &push_event("refs/heads/main"));
    let build = Build::of(&pushed, TaskId::parse("fN1SbArXTPSVFNUvaOlinQ").unwrap(), now);
    let counts = |pairs: &[(&'static str, u64)]| pairs.iter().copied().collect::<HashMap<&str, u64>>();
    assert_eq!(build.state_from(&counts(&[])), BuildState::Pending);
    assert_eq!(build.state_from(&counts(&[("completed", 2), ("running", 1)])), BuildState::Pending);
    assert_eq!(build.state_from(&counts(&[("completed", 3)])), BuildState::Success);
    assert_eq!(build.state_from(&counts(&[("completed", 2), ("failed", 1)])), BuildState::Failure);
    let broken = build.failed("no .taskcluster.yml".into());
    assert_eq!(broken.state_from(&counts(&[("completed", 1)])), BuildState::Error);
    let listed = serde_json::to_value(&broken).unwrap();
    assert_eq!((listed["state"].as_str(), listed["eventType"].as_str()), (Some("error"), Some("push")));
}
