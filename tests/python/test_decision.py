"""Decision tasks: a real `shoal worker` runs a task that uses the official Python client
through its credentials proxy (`features.taskclusterProxy`) to add to its own graph."""

import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import requests
import taskcluster
from taskcluster import slugid

from conftest import ROOT_TOKEN

# What the decision task runs, with the client copied where its user can read it.
DECISION = f"""
import datetime, json, os, sys, urllib.request
import taskcluster
from taskcluster import slugid

proxy = os.environ["TASKCLUSTER_PROXY_URL"]
queue = taskcluster.Queue({{"rootUrl": proxy}})
# Shoal's scheduler, from the reference it serves (the official client ships no class for it).
with urllib.request.urlopen(proxy + "/api/scheduler/v1/reference") as answer:
    reference = json.load(answer)
scheduler = taskcluster.client.createApiClient("Scheduler", {{"reference": reference}})({{"rootUrl": proxy}})
me = queue.task(os.environ["TASK_ID"])
now = datetime.datetime.now(datetime.timezone.utc)

def task(name):
    return {{
        "taskQueueId": me["taskQueueId"],
        "created": taskcluster.stringDate(now),
        "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
        "payload": {{"command": ["echo " + name], "maxRunTime": 30}},
        "metadata": {{"name": name, "description": "added by the decision task", "owner": "ci@example.com",
                      "source": "https://example.com/shoal"}},
    }}

try:
    made = slugid.nice()
    queue.createTask(made, {{**task("made"), "taskGroupId": me["taskGroupId"], "schedulerId": me["schedulerId"]}})
    print("created", made)
    scheduler.extendTaskGraph(me["taskGroupId"], {{"tasks": {{"added": {{"requires": ["decision"], "task": task("added")}}}}}})
    print("extended", me["taskGroupId"])
except taskcluster.exceptions.TaskclusterRestFailure as failure:
    print("refused", failure.status_code, failure.body.get("code"), failure.body.get("message", ""))
    sys.exit(1)
"""


@pytest.fixture(scope="module")
def client_copy():
    """The official client and what it imports, copied where a task's own user can read them
    (this suite's virtualenv may sit in a home directory no other user may enter; a sandboxed
    task has a `/tmp` of its own)."""
    copy = tempfile.mkdtemp(prefix="shoal-py-client-", dir="/var/tmp")
    # What `import taskcluster` loads from the virtualenv, asked of a fresh interpreter.
    listing = subprocess.run(
        [sys.executable, "-c", "import sys, taskcluster; print(*(m.__file__ for m in list(sys.modules.values()) "
                               "if '.' not in m.__name__ and 'site-packages' in (getattr(m, '__file__', '') or '')))"],
        check=True, capture_output=True, text=True,
    )
    for path in listing.stdout.split():
        source = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
        target = os.path.join(copy, os.path.basename(source))
        if os.path.isdir(source):
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy(source, target)
    with open(os.path.join(copy, "decision.py"), "w") as script:
        script.write(DECISION)
    for root, dirs, files in os.walk(copy):
        for entry in dirs:
            os.chmod(os.path.join(root, entry), 0o755)
        for entry in files:
            os.chmod(os.path.join(root, entry), 0o644)
    os.chmod(copy, 0o755)
    yield copy
    shutil.rmtree(copy)


@pytest.fixture
def worker(server, task_queue_id, client_copy):
    """A `shoal worker` (containing its tasks with bubblewrap) serving the test's queue; its
    tasks see the client's copy, as an operator shows a toolchain (`--sandbox-path`)."""
    work_dir = tempfile.mkdtemp(prefix="shoal-py-work-")
    proc = subprocess.Popen(
        [os.environ.get("SHOAL_BIN", "shoal"), "worker", "--root-url", server, "--queue", task_queue_id,
         "--capacity", "2", "--work-dir", work_dir, "--sandbox-path", client_copy],
        env={**os.environ, "SHOAL_LOG": "warn", "TASKCLUSTER_CLIENT_ID": "root", "TASKCLUSTER_ACCESS_TOKEN": ROOT_TOKEN},
    )
    yield proc
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(work_dir, ignore_errors=True)


def decision_graph(task_queue_id, client_copy, scopes):
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "routing": "decide",
        "tasks": {
            "decision": {
                "task": {
                    "taskQueueId": task_queue_id,
                    "created": taskcluster.stringDate(now),
                    "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
                    "scopes": scopes,
                    "payload": {
                        "command": [["python3", os.path.join(client_copy, "decision.py")]],
                        # The system's interpreter, which the task's user can run (this
                        # process's PATH may lead through a home directory it cannot enter).
                        "env": {"PYTHONPATH": client_copy, "PATH": "/usr/local/bin:/usr/bin:/bin"},
                        "features": {"taskclusterProxy": True},
                        "maxRunTime": 120,
                    },
                    "metadata": {"name": "decision", "description": "extends its graph", "owner": "ci@example.com",
                                 "source": "https://example.com/shoal"},
                }
            }
        },
    }


def wait_for(check, what):
    """Polls `check` (over HTTP, as a client would) until it answers something true."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def log_of(server, task_id):
    return requests.get(f"{server}/logs/v1/{task_id}/0", timeout=30).text


def run_decision(server, root_credentials, task_queue_id, client_copy, scopes, extend=True):
    """Submits a graph of one decision task holding `scopes`; answers its graph id and its
    inspection once it no longer runs."""
    reference = requests.get(f"{server}/references/scheduler/v1/api.json", timeout=30).json()
    scheduler = taskcluster.client.createApiClient("Scheduler", {"reference": reference})({"rootUrl": server, "credentials": root_credentials})
    graph_id = slugid.nice()
    # What its author gives a decision task to extend its own graph.
    scopes = scopes + ([f"scheduler:extend-task-graph:{graph_id}"] if extend else [])
    scheduler.createTaskGraph(graph_id, decision_graph(task_queue_id, client_copy, scopes))

    def settled():
        inspection = scheduler.inspect(graph_id)
        return inspection if inspection["status"]["state"] != "running" else None

    return graph_id, wait_for(settled, "the graph to finish or block")


def test_a_decision_task_extends_its_graph_through_the_proxy(server, root_credentials, queue, worker,
                                                            task_queue_id, client_copy):
    scopes = [f"queue:create-task:lowest:{task_queue_id}", "queue:create-task:project:none",
              "queue:scheduler-id:task-graph-scheduler"]
    graph_id, inspection = run_decision(server, root_credentials, task_queue_id, client_copy, scopes)
    states = {task["label"]: task["state"] for task in inspection["tasks"]}
    decision = next(task["taskId"] for task in inspection["tasks"] if task["label"] == "decision")
    assert inspection["status"]["state"] == "finished", (states, log_of(server, decision))
    assert states == {"decision": "completed", "added": "completed"}
    log = log_of(server, decision)
    made = log.split("created ")[1].split()[0]
    assert queue.task(made)["taskGroupId"] == graph_id, "the task it created is in its own group"


def test_a_decision_task_without_the_scopes_is_refused_and_creates_nothing(server, root_credentials, queue,
                                                                          worker, task_queue_id, client_copy):
    # It may create in another queue only: not its own.
    scopes = ["queue:create-task:lowest:elsewhere/other", "queue:create-task:project:none",
              "queue:scheduler-id:task-graph-scheduler"]
    graph_id, inspection = run_decision(server, root_credentials, task_queue_id, client_copy, scopes)
    assert inspection["status"]["state"] == "blocked"
    assert [task["label"] for task in inspection["tasks"]] == ["decision"], "nothing was added"
    decision = inspection["tasks"][0]["taskId"]
    assert "refused 403 InsufficientScopes" in log_of(server, decision)
    members = queue.listTaskGroup(graph_id)["tasks"]
    assert [member["status"]["taskId"] for member in members] == [decision], "nothing was created"


def test_a_decision_task_without_its_graphs_extend_scope_adds_nothing(server, root_credentials, queue, worker,
                                                                      task_queue_id, client_copy):
    scopes = [f"queue:create-task:lowest:{task_queue_id}", "queue:create-task:project:none",
              "queue:scheduler-id:task-graph-scheduler"]
    graph_id, inspection = run_decision(server, root_credentials, task_queue_id, client_copy, scopes, extend=False)
    assert inspection["status"]["state"] == "blocked"
    assert [task["label"] for task in inspection["tasks"]] == ["decision"], "nothing was added"
    log = log_of(server, inspection["tasks"][0]["taskId"])
    assert "scheduler:extend-task-graph:" + graph_id in log, log
