"""The Index, Secrets and Hooks services driven by the official client, as a Taskcluster CI
project (taskgraph's optimizer, actions and cron, run-task's secrets) calls them: each method,
and each refusal without its scopes."""

import datetime
import time

import pytest
import requests
import taskcluster
from taskcluster import slugid
from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure

from conftest import ROOT_TOKEN, _start


def in_an_hour():
    return taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))


def prefix():
    """A namespace, hook group or secret prefix of its own per test."""
    return "py" + slugid.nice()[:10].lower().replace("_", "x").replace("-", "x")


def refused(call, *args, code="InsufficientScopes", status=403):
    with pytest.raises(TaskclusterRestFailure) as err:
        call(*args)
    assert err.value.status_code == status, err.value.body
    assert err.value.body["code"] == code, err.value.body
    return err.value.body


@pytest.fixture
def index(server, root_credentials):
    return taskcluster.Index({"rootUrl": server, "credentials": root_credentials})


@pytest.fixture
def secrets(server, root_credentials):
    return taskcluster.Secrets({"rootUrl": server, "credentials": root_credentials})


@pytest.fixture
def hooks(server, root_credentials):
    return taskcluster.Hooks({"rootUrl": server, "credentials": root_credentials})


def run_to_completion(queue, task_queue_id, task_id, artifacts=()):
    claim = queue.claimWork(task_queue_id, {"workerGroup": "g", "workerId": "py-svc", "tasks": 1})["tasks"]
    assert [c["status"]["taskId"] for c in claim] == [task_id]
    for name in artifacts:
        queue.createArtifact(task_id, 0, name, {"storageType": "reference", "url": "https://example.com/" + name,
                                                "expires": in_an_hour(), "contentType": "text/plain"})
    queue.reportCompleted(task_id, 0)


def test_a_completed_task_is_found_in_the_index(server, queue, index, make_task, task_queue_id):
    ns = prefix()
    task_id = slugid.nice()
    queue.createTask(task_id, make_task(routes=[f"index.{ns}.build.latest", f"index.{ns}.build.rev1"],
                                        extra={"index": {"rank": 3, "data": {"rev": "abc"}}}))
    with pytest.raises(TaskclusterRestFailure) as err:
        index.findTask(f"{ns}.build.latest")
    assert err.value.status_code == 404, "indexed only once completed"
    run_to_completion(queue, task_queue_id, task_id, artifacts=["public/build.txt", "private/key.txt"])

    found = index.findTask(f"{ns}.build.latest")
    assert (found["taskId"], found["rank"], found["data"]) == (task_id, 3, {"rev": "abc"})
    assert found["namespace"] == f"{ns}.build.latest"
    assert [n["name"] for n in index.listNamespaces(ns)["namespaces"]] == ["build"]
    assert any(n["namespace"] == ns for n in index.listNamespaces("", query={"limit": 1000})["namespaces"])
    listed = index.listTasks(f"{ns}.build", query={"limit": 1})
    assert len(listed["tasks"]) == 1 and "continuationToken" in listed
    rest = index.listTasks(f"{ns}.build", query={"continuationToken": listed["continuationToken"]})
    assert {t["namespace"] for t in listed["tasks"] + rest["tasks"]} == {f"{ns}.build.latest", f"{ns}.build.rev1"}
    at = index.findTasksAtIndex({"indexes": [f"{ns}.build.latest", f"{ns}.nothing"]})
    assert [t["taskId"] for t in at["tasks"]] == [task_id]

    # A lower rank leaves the entry; an equal one replaces it.
    other = slugid.nice()
    kept = index.insertTask(f"{ns}.build.latest", {"taskId": other, "rank": 2, "data": {}, "expires": in_an_hour()})
    assert kept["taskId"] == task_id
    index.insertTask(f"{ns}.build.latest", {"taskId": other, "rank": 3, "data": {}, "expires": in_an_hour()})
    assert index.findTask(f"{ns}.build.latest")["taskId"] == other
    index.deleteTask(f"{ns}.build.latest")
    refused(index.findTask, f"{ns}.build.latest", code="ResourceNotFound", status=404)

    # findArtifactFromTask redirects to the latest run's artifact; a private one needs its scope.
    url = index.buildUrl("findArtifactFromTask", f"{ns}.build.rev1", "public/build.txt")
    res = requests.get(url, allow_redirects=False)
    assert res.status_code == 303 and res.headers["location"] == "https://example.com/public/build.txt"
    private = index.buildUrl("findArtifactFromTask", f"{ns}.build.rev1", "private/key.txt")
    assert requests.get(private, allow_redirects=False).status_code == 403
    signed = index.buildSignedUrl("findArtifactFromTask", f"{ns}.build.rev1", "private/key.txt")
    assert requests.get(signed, allow_redirects=False).headers["location"] == "https://example.com/private/key.txt"

    anonymous = taskcluster.Index({"rootUrl": server})
    assert anonymous.findTask(f"{ns}.build.rev1")["taskId"] == task_id, "reads need no credentials"
    refused(anonymous.insertTask, f"{ns}.x", {"taskId": other, "rank": 0, "data": {}, "expires": in_an_hour()})
    refused(anonymous.deleteTask, f"{ns}.build.rev1")
    body = refused(index.insertTask, f"{ns}..x", {"taskId": other, "rank": 0, "data": {}, "expires": in_an_hour()},
                   code="InputValidationError", status=400)
    assert "namespace" in body["message"]


def test_failed_tasks_are_not_indexed(queue, index, make_task, task_queue_id):
    ns = prefix()
    task_id = slugid.nice()
    queue.createTask(task_id, make_task(routes=[f"index.{ns}.latest"]))
    queue.claimWork(task_queue_id, {"workerGroup": "g", "workerId": "py-svc", "tasks": 1})
    queue.reportFailed(task_id, 0)
    refused(index.findTask, f"{ns}.latest", code="ResourceNotFound", status=404)


def test_an_indexed_task_is_found_after_a_restart(tmp_path, make_task, task_queue_id):
    proc, root_url = _start([], data_dir=str(tmp_path))
    try:
        credentials = {"clientId": "root", "accessToken": ROOT_TOKEN}
        queue = taskcluster.Queue({"rootUrl": root_url, "credentials": credentials})
        task_id = slugid.nice()
        queue.createTask(task_id, make_task(routes=["index.restart.latest"]))
        run_to_completion(queue, task_queue_id, task_id)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    proc, root_url = _start([], data_dir=str(tmp_path))
    try:
        assert taskcluster.Index({"rootUrl": root_url}).findTask("restart.latest")["taskId"] == task_id
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_secrets_are_set_read_listed_and_removed(server, secrets):
    name = prefix() + "/repo/deploy-key"
    secrets.set(name, {"secret": {"key": "hunter2"}, "expires": in_an_hour()})
    got = secrets.get(name)
    assert got["secret"] == {"key": "hunter2"} and got["expires"]
    names = []
    page = secrets.list(query={"limit": 1})
    names += page["secrets"]
    while "continuationToken" in page:
        page = secrets.list(query={"limit": 1000, "continuationToken": page["continuationToken"]})
        names += page["secrets"]
    assert name in names
    past = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1))
    refused(secrets.set, name, {"secret": {}, "expires": past}, code="InputValidationError", status=400)
    refused(secrets.set, name, {"secret": "not an object", "expires": in_an_hour()}, code="InputValidationError", status=400)

    anonymous = taskcluster.Secrets({"rootUrl": server})
    refused(anonymous.get, name)
    refused(anonymous.get, prefix() + "/never-set"), "403 whether or not it exists"
    refused(anonymous.set, name, {"secret": {}, "expires": in_an_hour()})
    refused(anonymous.remove, name)
    refused(anonymous.list)

    secrets.remove(name)
    secrets.remove(name)
    refused(secrets.get, name, code="ResourceNotFound", status=404)


def test_a_client_reads_only_the_secrets_its_scopes_name(server, auth, secrets):
    base = prefix()
    secrets.set(f"{base}/mine", {"secret": {"v": 1}, "expires": in_an_hour()})
    secrets.set(f"{base}/theirs", {"secret": {"v": 2}, "expires": in_an_hour()})
    client_id = "py/" + slugid.nice()
    made = auth.createClient(client_id, {"description": "reader", "expires": in_an_hour(),
                                         "scopes": [f"secrets:get:{base}/mine"]})
    mine = taskcluster.Secrets({"rootUrl": server, "credentials": {"clientId": client_id, "accessToken": made["accessToken"]}})
    assert mine.get(f"{base}/mine")["secret"] == {"v": 1}
    refused(mine.get, f"{base}/theirs")
    refused(mine.set, f"{base}/mine", {"secret": {}, "expires": in_an_hour()})


def hook_definition(task_queue_id, **fields):
    definition = {
        "metadata": {"name": "py hook", "description": "a hook of the Python suite", "owner": "tests@example.com"},
        "task": {
            "taskQueueId": task_queue_id,
            "payload": {"n": {"$eval": "payload.n"}, "by": "${firedBy}", "at": "${now}", "id": "${taskId}"},
            "metadata": {"name": "hook task", "description": "made by a hook", "owner": "tests@example.com",
                         "source": "https://example.com/hook"},
        },
        "triggerSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
    definition.update(fields)
    return definition


def test_a_hook_is_created_triggered_and_removed(server, auth, hooks, queue, task_queue_id):
    group, hook_id = prefix(), "ci/decision"
    auth.createRole(f"hook-id:{group}/{hook_id}", {"description": "the hook's", "scopes": [
        f"queue:create-task:lowest:{task_queue_id}", "queue:create-task:project:none", "queue:scheduler-id:-"]})
    created = hooks.createHook(group, hook_id, hook_definition(task_queue_id))
    assert (created["hookGroupId"], created["hookId"], created["schedule"]) == (group, hook_id, [])
    assert hooks.hook(group, hook_id)["task"]["payload"]["n"] == {"$eval": "payload.n"}
    assert group in hooks.listHookGroups()["groups"]
    assert [h["hookId"] for h in hooks.listHooks(group)["hooks"]] == [hook_id]
    assert hooks.getHookStatus(group, hook_id)["lastFire"] == {"result": "no-fire"}

    fired = hooks.triggerHook(group, hook_id, {"n": 7})
    task = queue.task(fired["taskId"])
    assert task["payload"] == {"n": 7, "by": "triggerHook", "at": task["created"], "id": fired["taskId"]}
    assert task["taskGroupId"] == fired["taskId"]
    assert fired["status"]["taskId"] == fired["taskId"]
    body = refused(hooks.triggerHook, group, hook_id, {"n": "seven"}, code="InputError", status=400)
    assert "payload" in body["message"]

    token = hooks.getTriggerToken(group, hook_id)["token"]
    anonymous = taskcluster.Hooks({"rootUrl": server})
    by_token = anonymous.triggerHookWithToken(group, hook_id, token, {"n": 1})
    assert queue.task(by_token["taskId"])["payload"]["by"] == "triggerHookWithToken"
    new_token = hooks.resetTriggerToken(group, hook_id)["token"]
    assert new_token != token
    with pytest.raises(TaskclusterAuthFailure):
        anonymous.triggerHookWithToken(group, hook_id, token, {"n": 1})

    fires = hooks.listLastFires(group, hook_id)["lastFires"]
    assert [f["firedBy"] for f in fires] == ["triggerHookWithToken", "triggerHook"]
    assert all(f["result"] == "success" and f["taskState"] == "pending" for f in fires)
    assert hooks.getHookStatus(group, hook_id)["lastFire"]["taskId"] == by_token["taskId"]

    # The task is created with the role's scopes, not the caller's.
    hooks.updateHook(group, hook_id, hook_definition("elsewhere/wt"))
    body = refused(hooks.triggerHook, group, hook_id, {"n": 2})
    assert f"hook-id:{group}/{hook_id}" in body["message"]
    last = hooks.listLastFires(group, hook_id)["lastFires"][0]
    assert last["result"] == "error" and "queue:create-task" in last["error"]
    assert hooks.getHookStatus(group, hook_id)["lastFire"]["result"] == "error"

    for call, args in [(anonymous.createHook, (group, "other", hook_definition(task_queue_id))),
                       (anonymous.updateHook, (group, hook_id, hook_definition(task_queue_id))),
                       (anonymous.removeHook, (group, hook_id)), (anonymous.hook, (group, hook_id)),
                       (anonymous.listHooks, (group,)), (anonymous.listHookGroups, ()),
                       (anonymous.triggerHook, (group, hook_id, {"n": 1})),
                       (anonymous.getTriggerToken, (group, hook_id)), (anonymous.resetTriggerToken, (group, hook_id)),
                       (anonymous.getHookStatus, (group, hook_id)), (anonymous.listLastFires, (group, hook_id))]:
        refused(call, *args)
    refused(hooks.createHook, group, hook_id, hook_definition(task_queue_id, schedule=["every day"]),
            code="InputValidationError", status=400)
    refused(hooks.createHook, group, hook_id, hook_definition(task_queue_id), code="RequestConflict", status=409)

    hooks.removeHook(group, hook_id)
    refused(hooks.hook, group, hook_id, code="ResourceNotFound", status=404)


def test_a_scheduled_hook_fires_on_time(auth, hooks, queue, task_queue_id):
    group, hook_id = prefix(), "cron"
    auth.createRole(f"hook-id:{group}/{hook_id}", {"description": "the hook's", "scopes": [
        f"queue:create-task:lowest:{task_queue_id}", "queue:create-task:project:none", "queue:scheduler-id:-"]})
    definition = hook_definition(task_queue_id, schedule=["* * * * * *"], triggerSchema={"type": "object"})
    definition["task"]["payload"] = {"by": "${firedBy}", "at": "${now}"}
    hooks.createHook(group, hook_id, definition)
    status = hooks.getHookStatus(group, hook_id)
    assert "nextScheduledDate" in status
    deadline = time.monotonic() + 30
    fires = []
    while not fires and time.monotonic() < deadline:
        try:
            fires = hooks.listLastFires(group, hook_id)["lastFires"]
        except TaskclusterRestFailure as err:
            assert err.status_code == 404
            time.sleep(0.2)
    hooks.removeHook(group, hook_id)
    assert fires, "the hook never fired"
    fire = fires[-1]
    assert (fire["firedBy"], fire["result"]) == ("schedule", "success"), fire
    task = queue.task(fire["taskId"])
    assert task["payload"]["by"] == "schedule"
    assert task["payload"]["at"] == task["created"], "now is the scheduled time"
    assert task["created"].endswith(".000Z"), "fired as of a whole second"


def test_every_method_of_the_official_clients_is_served(server):
    for name, cls in [("index", taskcluster.Index), ("secrets", taskcluster.Secrets), ("hooks", taskcluster.Hooks)]:
        reference = requests.get(f"{server}/api/{name}/v1/reference").json()
        served = {entry["name"] for entry in reference["entries"]}
        missing = sorted(set(cls.funcinfo) - served - {"lbheartbeat"})
        assert missing == [], f"methods of taskcluster.{cls.__name__} without an endpoint: {missing}"
        assert cls({"rootUrl": server}).ping()["alive"]
