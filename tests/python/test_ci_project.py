"""A real Taskcluster CI project on Shoal, unchanged: `examples/taskgraph-project` (taskgraph
24.5.1, generic-worker tasks with run-task) pushed to a forge on loopback, its signed webhook
delivery making the decision task, `taskgraph decision` creating the graph through the proxy,
and a worker running it all; a retrigger from the task page's Actions menu (the Hooks
service); then a push that changes nothing the build reads, optimized through the Index
(index-search) and by skip-unless-changed."""

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
import requests
import taskcluster
import yaml

from conftest import ROOT_TOKEN, _start
from gitserver import GitServer, git
from selenium.webdriver.common.by import By
from test_ui import browser, sign_in, text_of, wait  # noqa: F401 (browser is a fixture)

import sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "taskgraph-project"))
from make_action_hooks import make_hooks  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "taskgraph-project")
# Where scripts/test.sh installs taskgraph for the tasks to run (readable by every user), as
# the example's .taskcluster.yml expects it.
TASKGRAPH = "/var/tmp/shoal-taskgraph"
SECRET = "the-ci-project-webhook-secret"
QUEUES = ["example/decision", "example/b-linux", "example/t-linux", "example/d-linux"]


@pytest.fixture
def project():
    """The example pushed to a forge on loopback: its working copy, clone URL and server."""
    if not os.path.exists(os.path.join(TASKGRAPH, "bin", "taskgraph")):
        pytest.fail(f"taskgraph is not installed in {TASKGRAPH} (scripts/test.sh installs it)")
    root = tempfile.mkdtemp(prefix="shoal-forge-", dir="/var/tmp")
    work = os.path.join(root, "work")
    shutil.copytree(EXAMPLE, work)
    git(work, "init", "--quiet", "-b", "main")
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "-m", "The example project")
    bare = os.path.join(root, "example", "ci-project.git")
    git(root, "clone", "--quiet", "--bare", work, bare)
    forge = GitServer(root)
    yield work, f"{forge.url}/example/ci-project.git", bare
    forge.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shoal(project):
    """A server taking the forge's webhooks, the repository's role, and a worker for the
    project's three queues that shows its tasks taskgraph (`--sandbox-path`)."""
    _, clone_url, _ = project
    proc, root_url = _start(["--github-webhook-secret", SECRET, "--claim-timeout", "30"])
    auth = taskcluster.Auth({"rootUrl": root_url, "credentials": {"clientId": "root", "accessToken": ROOT_TOKEN}})
    repo = clone_url[len("http://"):-len(".git")]
    graph = ["queue:create-task:*", "queue:route:index.example.*", "queue:route:checks", "queue:scheduler-id:*",
             "generic-worker:cache:example-*", "queue:get-artifact:*"]
    auth.createRole(f"repo:{repo}:branch:main", {"description": "what the project's pushes may do", "scopes": graph})
    # What its generic actions may do (retrigger, cancel), and what its action hooks create.
    auth.createRole(f"repo:{repo}:action:generic", {
        "description": "the project's generic actions",
        "scopes": [*graph, "queue:cancel-task:example-level-1/*", "queue:rerun-task:example-level-1/*"],
    })
    auth.createRole("hook-id:project-example/*", {
        "description": "the project's in-tree action hooks",
        "scopes": [f"assume:repo:{repo}:action:*", "queue:create-task:*", "queue:scheduler-id:example-level-1"],
    })
    work_dir = tempfile.mkdtemp(prefix="shoal-ci-work-")
    queues = [arg for queue in QUEUES for arg in ("--queue", queue)]
    worker = subprocess.Popen(
        [os.environ.get("SHOAL_BIN", "shoal"), "worker", "--root-url", root_url, *queues, "--capacity", "4",
         "--work-dir", work_dir, "--sandbox-path", TASKGRAPH],
        env={**os.environ, "SHOAL_LOG": "warn", "TASKCLUSTER_CLIENT_ID": "root", "TASKCLUSTER_ACCESS_TOKEN": ROOT_TOKEN},
    )
    yield root_url
    worker.terminate()
    worker.wait(timeout=30)
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(work_dir, ignore_errors=True)


def deliver(root_url, event, body):
    """POSTs a webhook delivery as a forge does, signed with the secret."""
    data = json.dumps(body).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), data, hashlib.sha256).hexdigest()
    answer = requests.post(f"{root_url}/api/github/v1/github", data=data, headers={
        "content-type": "application/json", "x-github-event": event,
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "x-hub-signature-256": signature,
    })
    assert answer.ok, answer.text
    return answer.json()


def push_event(clone_url, before, after):
    return {
        "ref": "refs/heads/main", "before": before, "after": after,
        "repository": {"name": "ci-project", "full_name": "example/ci-project", "clone_url": clone_url,
                       "owner": {"name": "example", "login": "example"}, "default_branch": "main"},
        "pusher": {"name": "dev"}, "sender": {"login": "dev"},
        "head_commit": {"id": after, "message": "A change"},
    }


def finished_group(queue, group, at_least):
    """Waits until the group holds `at_least` tasks, every one resolved; answers them by label."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        tasks = queue.listTaskGroup(group)["tasks"]
        states = [task["status"]["state"] for task in tasks]
        resolved = all(state in ("completed", "failed", "exception") for state in states)
        if resolved and (len(tasks) >= at_least or any(state != "completed" for state in states)):
            return {task["task"]["metadata"]["name"]: task for task in tasks}
        time.sleep(0.5)
    raise AssertionError(f"group {group} did not finish: {[(t['task']['metadata']['name'], t['status']['state']) for t in tasks]}")


def tasks_of(queue, group):
    return queue.listTaskGroup(group)["tasks"]


def log_of(root_url, task_id):
    return requests.get(f"{root_url}/api/queue/v1/task/{task_id}/artifacts/public/logs/live_backing.log").text


def test_a_push_runs_its_graph_an_action_retriggers_and_a_second_push_is_optimized(project, shoal, browser):
    work, clone_url, bare = project
    root_url = shoal
    queue = taskcluster.Queue({"rootUrl": root_url})
    first = git(work, "rev-parse", "HEAD").strip()
    started = time.monotonic()
    build = deliver(root_url, "push", push_event(clone_url, "0" * 40, first))["build"]
    assert build["state"] == "pending", build
    group = build["taskGroupId"]
    tasks = finished_group(queue, group, 7)
    took = time.monotonic() - started
    states = {name: task["status"]["state"] for name, task in tasks.items()}
    failed = [task["status"]["taskId"] for task in tasks.values() if task["status"]["state"] != "completed"]
    assert not failed, f"{states}\n" + "\n".join(log_of(root_url, task_id)[-3000:] for task_id in failed)
    assert set(states) == {"Decision Task", "toolchain-tool", "build-app", "test-app", "lint-shell",
                           "docker-image-busybox", "smoke-busybox"}, states
    smoke = tasks["smoke-busybox"]["status"]["taskId"]
    assert "NAME=ci-project busybox" in log_of(root_url, smoke), "the smoke test ran in the project's image"
    print(f"\nthe push's graph finished in {took:.1f} s")

    # An action from the UI: the decision's actions.json names the hook and its payload; the
    # project's action hooks are made as ci-admin makes them.
    decision = tasks["Decision Task"]["status"]["taskId"]
    hooks = taskcluster.Hooks({"rootUrl": root_url, "credentials": {"clientId": "root", "accessToken": ROOT_TOKEN}})
    with open(os.path.join(work, ".taskcluster.yml")) as file:
        made = make_hooks(hooks, queue, decision, yaml.safe_load(file))
    assert made and all(group == "project-example" for group, _ in made), made
    # From the lint task's page, as a developer: Actions, Retrigger, once.
    lint = tasks["lint-shell"]["status"]["taskId"]
    sign_in(browser, root_url, "root", ROOT_TOKEN)
    browser.get(f"{root_url}/tasks/{lint}")
    wait(browser, lambda d: d.find_elements(By.ID, "actions-menu"), "the actions menu")
    browser.find_element(By.CSS_SELECTOR, "#actions-menu summary").click()
    offered = [b.get_attribute("data-action") for b in browser.find_elements(By.CSS_SELECTOR, "#actions-menu [data-action]")]
    assert "retrigger" in offered and "cancel" in offered, offered
    browser.find_element(By.CSS_SELECTOR, "#actions-menu [data-action=retrigger]").click()
    times = browser.find_element(By.CSS_SELECTOR, "#action-form input[name=times]")
    assert times.get_attribute("value") == "1", "the form starts from the schema's defaults"
    browser.find_element(By.ID, "run-action").click()
    wait(browser, lambda d: "started" in text_of(d, "#hook-action-result"), "the action task started")
    finished_group(queue, group, 9)
    failed = [t["status"]["taskId"] for t in tasks_of(queue, group) if t["status"]["state"] != "completed"]
    assert not failed, "\n".join(log_of(root_url, task_id)[-3000:] for task_id in failed)
    names = sorted(task["task"]["metadata"]["name"] for task in tasks_of(queue, group))
    assert names.count("lint-shell") == 2 and "Action: Retrigger" in names, names
    assert all(t["status"]["state"] == "completed" for t in tasks_of(queue, group)), names
    # Cancel, an action without input, from the build task's page: its action task runs the
    # cancel (a resolved task stays as it was, as Taskcluster's cancelTask leaves it).
    build_task = next(t for t in tasks_of(queue, group) if t["task"]["metadata"]["name"] == "build-app")
    browser.get(f"{root_url}/tasks/{build_task['status']['taskId']}")
    wait(browser, lambda d: d.find_elements(By.ID, "actions-menu"), "the actions menu")
    browser.find_element(By.CSS_SELECTOR, "#actions-menu summary").click()
    browser.find_element(By.CSS_SELECTOR, "#actions-menu [data-action=cancel]").click()
    browser.find_element(By.ID, "run-action").click()
    wait(browser, lambda d: "started" in text_of(d, "#hook-action-result"), "the cancel action started")
    finished_group(queue, group, 10)
    cancels = [t for t in tasks_of(queue, group) if t["task"]["metadata"]["name"] == "Action: Cancel Task"]
    assert [t["status"]["state"] for t in cancels] == ["completed"], log_of(root_url, cancels[0]["status"]["taskId"])
    assert queue.status(build_task["status"]["taskId"])["status"]["state"] == "completed"
    # The push is listed among the builds, its state told by its tasks.
    browser.get(f"{root_url}/builds")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"#builds tr[data-build='{first}']"), "the push's build")
    assert "success" in text_of(browser, f"#builds tr[data-build='{first}']")

    # A push that changes only the README: the toolchain is found in the Index, the build and
    # its test are skipped (nothing in src/ changed), the lint runs again.
    with open(os.path.join(work, "README.md"), "a") as readme:
        readme.write("\nA change that builds nothing.\n")
    git(work, "commit", "--quiet", "-am", "Docs")
    git(work, "push", "--quiet", bare, "main")
    second = git(work, "rev-parse", "HEAD").strip()
    build = deliver(root_url, "push", push_event(clone_url, first, second))["build"]
    tasks = finished_group(queue, build["taskGroupId"], 3)
    assert set(tasks) == {"Decision Task", "lint-shell", "smoke-busybox"}, {n: t["status"]["state"] for n, t in tasks.items()}
    assert all(task["status"]["state"] == "completed" for task in tasks.values())
    decision = tasks["Decision Task"]["status"]["taskId"]
    optimized = requests.get(f"{root_url}/api/queue/v1/task/{decision}/artifacts/public/label-to-taskid.json").json()
    assert optimized["toolchain-tool"] == tasks_first_toolchain(queue, group), "the toolchain came from the Index"
    smoke = tasks["smoke-busybox"]["status"]["taskId"]
    assert "from the worker's cache" in log_of(root_url, smoke), "the image, found in the Index, was unpacked once"


def tasks_first_toolchain(queue, group):
    return next(t["status"]["taskId"] for t in queue.listTaskGroup(group)["tasks"] if t["task"]["metadata"]["name"] == "toolchain-tool")
