"""Shoal's answers, messages and references held to Taskcluster's own JSON schemas (vendored in
`fixtures/taskcluster-schemas`, see its README): every Queue and Auth method Shoal serves that
Taskcluster gives an output schema is called through the official client and its answer
validated; one message of every queue exchange is validated; the references validate against
Taskcluster's reference schemas, and `createApiClient` built from the served scheduler
reference calls the scheduler."""

import datetime
import glob
import json
import os
import queue as queue_module
import socket
import threading
import urllib.parse

import jsonschema
import pytest
import requests
import taskcluster
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7
from taskcluster import slugid

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "taskcluster-schemas")
BASE = "https://taskcluster.invalid/schemas"


def load_registry():
    """Taskcluster's schemas by name (`queue/v1/task.json`), each with an `$id` its relative
    references resolve against."""
    schemas = {}
    for path in glob.glob(os.path.join(FIXTURES, "*", "*", "*.json")) + glob.glob(os.path.join(FIXTURES, "common", "*.json")):
        name = os.path.relpath(path, FIXTURES)
        schema = json.load(open(path))
        schema["$id"] = f"{BASE}/{name}"
        schemas[name] = schema
    registry = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema, default_specification=DRAFT7)) for schema in schemas.values())
    return schemas, registry


SCHEMAS, REGISTRY = load_registry()


def problems(schema_name, value):
    """What keeps `value` from validating against Taskcluster's `schema_name`, at most five."""
    validator = jsonschema.Draft7Validator(SCHEMAS[schema_name], registry=REGISTRY, format_checker=jsonschema.FormatChecker())
    return [f"{'/'.join(map(str, e.path))}: {e.message[:300]}" for e in list(validator.iter_errors(value))[:5]]


def output_schema(client_class, method):
    """The schema Taskcluster's reference names for `method`'s answer, or None (no JSON answer)."""
    output = client_class.funcinfo[method].get("output")
    if not output or output == "blob":
        return None
    service = {"Queue": "queue", "Auth": "auth", "Index": "index", "Secrets": "secrets", "Hooks": "hooks"}[client_class.__name__]
    return f"{service}/{output.split('#')[0]}"


class Listener:
    """Every message of the bound exchanges, from the server's event stream."""

    def __init__(self, server, exchanges):
        bindings = {"bindings": [{"exchange": e, "routingKeyPattern": "#"} for e in exchanges]}
        url = f"{server}/api/events/v1/connect/?bindings={urllib.parse.quote(json.dumps(bindings))}"
        self.response = requests.get(url, stream=True, timeout=60)
        self.messages = queue_module.Queue()
        ready = threading.Event()

        def read():
            event = None
            try:
                for line in self.response.iter_lines(decode_unicode=True):
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        if event == "ready":
                            ready.set()
                    elif line.startswith("data:") and event == "message":
                        self.messages.put(json.loads(line[5:]))
            except (requests.RequestException, AttributeError):
                pass  # the test closed the stream

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(10), "the event stream said it was ready"

    def close(self):
        # Shut the socket down under the reading thread (closing the response would wait for
        # the stream's next byte).
        self.response.raw.connection.sock.shutdown(socket.SHUT_RDWR)


QUEUE_EXCHANGES = ["task-defined", "task-pending", "task-running", "artifact-created", "task-completed",
                   "task-failed", "task-exception", "task-group-resolved", "task-group-sealed",
                   "task-priority-changed", "task-group-priority-changed"]


def test_every_answer_and_message_holds_to_taskclusters_schemas(server, root_credentials, task_queue_id):
    q = taskcluster.Queue({"rootUrl": server, "credentials": root_credentials})
    a = taskcluster.Auth({"rootUrl": server, "credentials": root_credentials})
    listener = Listener(server, [f"exchange/taskcluster-queue/v1/{e}" for e in QUEUE_EXCHANGES])
    answers = {}

    def record(client_class, method, answer):
        answers.setdefault((client_class.__name__, method), answer)
        return answer

    def call(client, method, *args):
        return record(type(client), method, getattr(client, method)(*args))

    now = datetime.datetime.now(datetime.timezone.utc)
    provisioner, worker_type = task_queue_id.split("/")

    def task(**fields):
        return {"taskQueueId": task_queue_id, "created": taskcluster.stringDate(now),
                "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
                "payload": {"command": ["true"]}, "routes": ["index.schema-test"], "tags": {"k": "v"},
                "metadata": {"name": "n", "description": "d", "owner": "o@example.com", "source": "https://example.com"},
                **fields}

    group = slugid.nice()
    t1, t2, t3, t4 = (slugid.nice() for _ in range(4))
    call(q, "createTask", t1, task(taskGroupId=group))
    call(q, "createTask", t2, task(taskGroupId=group, dependencies=[t1]))
    for method, args in [("task", [t1]), ("status", [t1]), ("listTaskGroup", [group]), ("getTaskGroup", [group]),
                         ("listDependentTasks", [t1]), ("tasks", [{"taskIds": [t1, t2]}]),
                         ("statuses", [{"taskIds": [t1, t2]}]), ("listPendingTasks", [task_queue_id]),
                         ("taskQueueCounts", [task_queue_id]), ("taskQueueCountsBatch", [{"taskQueueIds": [task_queue_id]}]),
                         ("pendingTasks", [task_queue_id])]:
        call(q, method, *args)
    # A worker that says what it has (Shoal's dimensions and version) and reports its stats.
    claim = call(q, "claimWork", task_queue_id, {"workerGroup": "g", "workerId": "w", "tasks": 1,
                                                 "dimensions": {"os": ["Linux"]}, "version": "1.0"})
    run = claim["tasks"][0]["runId"]
    call(q, "listClaimedTasks", task_queue_id)
    call(q, "reclaimTask", t1, run)
    expires = taskcluster.stringDate(now + datetime.timedelta(minutes=30))
    call(q, "createArtifact", t1, run, "public/a.txt", {"storageType": "s3", "expires": expires, "contentType": "text/plain"})
    q.createArtifact(t1, run, "public/r", {"storageType": "reference", "expires": expires, "url": "https://example.com",
                                           "contentType": "text/plain"})
    for method, args in [("listArtifacts", [t1, run]), ("listLatestArtifacts", [t1]), ("artifactInfo", [t1, run, "public/r"]),
                         ("artifact", [t1, run, "public/r"]), ("latestArtifactInfo", [t1, "public/r"]),
                         ("latestArtifact", [t1, "public/r"])]:
        call(q, method, *args)
    # getArtifact answers a 303 whose body is the schema's; the client would follow it.
    for method, path in [("getArtifact", f"/task/{t1}/runs/{run}/artifacts/public/r"), ("getLatestArtifact", f"/task/{t1}/artifacts/public/r")]:
        res = requests.get(f"{server}/api/queue/v1{path}", allow_redirects=False, timeout=30)
        assert res.status_code == 303, res.text
        record(taskcluster.Queue, method, res.json())
    q._makeHttpRequest("post", f"task/{t1}/runs/{run}/completed", {"stats": {"runMs": 5, "exitCode": 0}})
    record(taskcluster.Queue, "reportCompleted", q.status(t1))
    call(q, "createTask", t3, task(taskGroupId=group))
    call(q, "createTask", t4, task(taskGroupId=group))
    call(q, "claimTask", t3, 0, {"workerGroup": "g", "workerId": "w"})
    call(q, "reportFailed", t3, 0)
    q.claimTask(t4, 0, {"workerGroup": "g", "workerId": "w"})
    call(q, "reportException", t4, 0, {"reason": "malformed-payload"})
    in_two_days = taskcluster.stringDate(now + datetime.timedelta(days=2))
    call(q, "declareWorker", provisioner, worker_type, "g", "w", {"expires": in_two_days})
    for method, args in [("listWorkers", [provisioner, worker_type]), ("getWorker", [provisioner, worker_type, "g", "w"]),
                         ("listTaskQueues", []), ("getTaskQueue", [task_queue_id]), ("listProvisioners", []),
                         ("getProvisioner", [provisioner]), ("listWorkerTypes", [provisioner]),
                         ("getWorkerType", [provisioner, worker_type]), ("cancelTask", [t2]), ("rerunTask", [t2]),
                         ("changeTaskPriority", [t2, {"newPriority": "high"}]), ("sealTaskGroup", [group]),
                         ("changeTaskGroupPriority", [group, {"newPriority": "low"}]), ("cancelTaskGroup", [group])]:
        call(q, method, *args)
    t5 = slugid.nice()
    q.createTask(t5, task(dependencies=[t1]))
    call(q, "scheduleTask", t5)
    call(q, "quarantineWorker", provisioner, worker_type, "g", "w",
         {"quarantineUntil": taskcluster.stringDate(now + datetime.timedelta(hours=1))})

    client_id = f"schema/{slugid.nice()}"
    role_id = f"schema-role-{slugid.nice()}"
    call(a, "createClient", client_id, {"description": "d", "expires": in_two_days, "scopes": ["queue:x"]})
    for method, args in [("client", [client_id]), ("listClients", []), ("updateClient", [client_id, {"description": "e", "expires": in_two_days}]),
                         ("disableClient", [client_id]), ("enableClient", [client_id]), ("resetAccessToken", [client_id]),
                         ("createRole", [role_id, {"description": "d", "scopes": ["queue:y"]}]), ("role", [role_id]),
                         ("updateRole", [role_id, {"description": "e", "scopes": ["queue:y"]}]), ("listRoles", []),
                         ("listRoleIds", []), ("expandScopes", [{"scopes": [f"assume:{role_id}"]}]), ("currentScopes", []),
                         ("listAuditHistory", [client_id]), ("getEntityHistory", ["client", client_id])]:
        call(a, method, *args)
    tester = taskcluster.Auth({"rootUrl": server, "credentials": {"clientId": "tester", "accessToken": "no-secret"}})
    call(tester, "testAuthenticate", {"clientScopes": ["test:a"], "requiredScopes": ["test:a"]})
    call(tester, "testAuthenticateGet")

    failures = []
    for (class_name, method), answer in sorted(answers.items()):
        schema = output_schema(getattr(taskcluster, class_name), method)
        if schema:
            failures += [f"{method} ({schema}) {problem}" for problem in problems(schema, answer)]

    # Every method Shoal serves that Taskcluster gives a JSON answer was called.
    for class_name, service in [("Queue", "queue"), ("Auth", "auth")]:
        served = {e["name"] for e in requests.get(f"{server}/references/{service}/v1/api.json", timeout=30).json()["entries"]}
        client_class = getattr(taskcluster, class_name)
        expected = {m for m in client_class.funcinfo if m in served and output_schema(client_class, m)}
        assert expected - {m for c, m in answers if c == class_name} == set(), f"{class_name} methods not checked"

    # One message of every queue exchange, against Taskcluster's schema and Shoal's own.
    heard = {}
    while len(heard) < len(QUEUE_EXCHANGES):
        try:
            message = listener.messages.get(timeout=10)
        except queue_module.Empty:
            break
        heard.setdefault(message["exchange"].rsplit("/", 1)[1], message["payload"])
    listener.close()
    assert sorted(heard) == sorted(QUEUE_EXCHANGES)
    for name, payload in heard.items():
        schema = {"task-group-sealed": "task-group-changed-message", "task-group-resolved": "task-group-changed-message"}.get(name, f"{name}-message")
        failures += [f"message {name} {problem}" for problem in problems(f"queue/v1/{schema}.json", payload)]
    assert failures == [], "\n".join(failures)

    # Shoal's own facts are in the task's result, where no Taskcluster schema forbids them.
    result = requests.get(f"{server}/api/queue/v1/task/{t1}/result", timeout=30).json()
    assert result["createdBy"] == "root"
    assert result["runs"][0]["workerDimensions"] == {"os": ["Linux"]} and result["runs"][0]["workerVersion"] == "1.0"
    assert result["runs"][0]["stats"] == {"runMs": 5, "exitCode": 0}
    worker = requests.get(f"{server}/api/queue/v1/task-queues/{task_queue_id}/workers/g/w", timeout=30).json()
    assert worker["state"] == "quarantined" and worker["dimensions"] == {"os": ["Linux"]}


def shoal_schema_problems(server, service, schema_ref, value):
    """What keeps `value` from validating against the schema Shoal serves for `schema_ref`."""
    url = f"{server}/schemas/{service}/{schema_ref.split('#')[0]}"
    res = requests.get(url, timeout=30)
    assert res.status_code == 200, url
    schema = res.json()
    schema["$id"] = url
    refs = Registry().with_resources(
        [(f"{server}/schemas/queue/v1/task-status.json",
          Resource.from_contents(requests.get(f"{server}/schemas/queue/v1/task-status.json", timeout=30).json(),
                                 default_specification=DRAFT7))])
    validator = jsonschema.Draft7Validator(schema, registry=refs)
    return [f"{schema_ref}: {'/'.join(map(str, e.path))}: {e.message[:200]}" for e in validator.iter_errors(value)]


def test_the_services_answers_hold_to_taskclusters_schemas(server, root_credentials, task_queue_id):
    """Every Index, Secrets and Hooks method Taskcluster gives a JSON answer, called and checked."""
    index = taskcluster.Index({"rootUrl": server, "credentials": root_credentials})
    secrets = taskcluster.Secrets({"rootUrl": server, "credentials": root_credentials})
    hooks = taskcluster.Hooks({"rootUrl": server, "credentials": root_credentials})
    auth = taskcluster.Auth({"rootUrl": server, "credentials": root_credentials})
    answers = {}

    def call(client, method, *args):
        answers.setdefault((type(client).__name__, method), getattr(client, method)(*args))

    expires = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    ns = "schema-" + slugid.nice()[:8].lower().replace("_", "x").replace("-", "x")
    call(index, "insertTask", f"{ns}.a.b", {"taskId": slugid.nice(), "rank": 1, "data": {"k": 1}, "expires": expires})
    for method, args in [("findTask", [f"{ns}.a.b"]), ("listNamespaces", [ns]), ("listTasks", [f"{ns}.a"]),
                         ("findTasksAtIndex", [{"indexes": [f"{ns}.a.b"]}]), ("deleteTask", [f"{ns}.a.b"])]:
        call(index, method, *args)
    call(secrets, "set", f"{ns}/s", {"secret": {"v": 1}, "expires": expires})
    for method, args in [("get", [f"{ns}/s"]), ("list", []), ("remove", [f"{ns}/s"])]:
        call(secrets, method, *args)
    group, hook_id = ns, "h"
    auth.createRole(f"hook-id:{group}/{hook_id}", {"description": "d", "scopes": ["queue:create-task:*", "queue:scheduler-id:*"]})
    task = {"taskQueueId": task_queue_id, "payload": {},
            "metadata": {"name": "n", "description": "d", "owner": "o@example.com", "source": "https://example.com"}}
    definition = {"metadata": {"name": "n", "description": "d", "owner": "o@example.com"}, "schedule": ["0 0 * * *"],
                  "task": task, "triggerSchema": {"type": "object"}}
    call(hooks, "createHook", group, hook_id, definition)
    call(hooks, "triggerHook", group, hook_id, {})
    token = hooks.getTriggerToken(group, hook_id)["token"]
    for method, args in [("hook", [group, hook_id]), ("listHooks", [group]), ("listHookGroups", []),
                         ("getHookStatus", [group, hook_id]), ("listLastFires", [group, hook_id]),
                         ("getTriggerToken", [group, hook_id]), ("triggerHookWithToken", [group, hook_id, token, {}]),
                         ("updateHook", [group, hook_id, definition]), ("resetTriggerToken", [group, hook_id]),
                         ("removeHook", [group, hook_id])]:
        call(hooks, method, *args)

    failures = []
    for (class_name, method), answer in sorted(answers.items()):
        schema = output_schema(getattr(taskcluster, class_name), method)
        if schema:
            failures += [f"{method} ({schema}) {problem}" for problem in problems(schema, answer)]
    assert failures == []
    for client_class in [taskcluster.Index, taskcluster.Secrets, taskcluster.Hooks]:
        expected = {m for m in client_class.funcinfo if output_schema(client_class, m) and m not in ("findArtifactFromTask",)}
        called = {m for c, m in answers if c == client_class.__name__}
        assert expected - called == set(), f"{client_class.__name__} methods not checked"


def test_the_references_are_taskclusters_and_name_what_is_served(server, root_credentials, task_queue_id):
    manifest = requests.get(f"{server}/references/manifest.json", timeout=30).json()
    assert problems("common/manifest-v3.json", manifest) == []
    kinds = {}
    for url in manifest["references"]:
        assert url.startswith(f"{server}/references/"), url
        document = requests.get(url, timeout=30).json()
        kind = "common/api-reference-v0.json" if url.endswith("/api.json") else "common/exchanges-reference-v0.json"
        assert problems(kind, document) == [], url
        kinds[url.rsplit("/references/", 1)[1]] = document
    assert {"queue/v1/api.json", "queue/v1/exchanges.json", "auth/v1/api.json", "scheduler/v1/api.json",
            "scheduler/v1/exchanges.json"} <= set(kinds)

    # Each named schema is served, and Taskcluster's inputs are named as Taskcluster names them.
    for name, document in kinds.items():
        service = name.split("/")[0]
        for entry in document["entries"]:
            for ref in [entry.get("input"), entry.get("schema")]:
                if ref:
                    res = requests.get(f"{server}/schemas/{service}/{ref.split('#')[0]}", timeout=30)
                    assert res.status_code == 200, (name, entry["name"], ref)
    for class_name, service in [("Queue", "queue"), ("Auth", "auth")]:
        client_class = getattr(taskcluster, class_name)
        for entry in kinds[f"{service}/v1/api.json"]["entries"]:
            info = client_class.funcinfo.get(entry["name"])
            if info:
                assert entry.get("input") == info.get("input"), entry["name"]
                assert entry["args"] == info["args"], entry["name"]
                assert entry["method"] == info["method"], entry["name"]

    # Shoal's messages hold to the schemas its exchanges reference names.
    listener = Listener(server, ["exchange/taskcluster-queue/v1/task-defined", "exchange/taskcluster-queue/v1/task-pending"])
    q = taskcluster.Queue({"rootUrl": server, "credentials": root_credentials})
    now = datetime.datetime.now(datetime.timezone.utc)
    q.createTask(slugid.nice(), {"taskQueueId": task_queue_id, "created": taskcluster.stringDate(now),
                                 "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)), "payload": {},
                                 "metadata": {"name": "n", "description": "d", "owner": "o@example.com", "source": "https://x"}})
    for _ in range(2):
        message = listener.messages.get(timeout=10)
        entry = next(e for e in kinds["queue/v1/exchanges.json"]["entries"] if message["exchange"].endswith("/" + e["exchange"]))
        assert shoal_schema_problems(server, "queue", entry["schema"], message["payload"]) == []
    listener.close()


def test_an_api_client_made_from_the_served_scheduler_reference_calls_it(server, root_credentials, task_queue_id):
    reference = requests.get(f"{server}/references/scheduler/v1/api.json", timeout=30).json()
    Scheduler = taskcluster.client.createApiClient("Scheduler", {"reference": reference})
    scheduler = Scheduler({"rootUrl": server, "credentials": root_credentials})
    assert scheduler.ping()["alive"] is True
    now = datetime.datetime.now(datetime.timezone.utc)
    graph_id = slugid.nice()
    definition = {"taskQueueId": task_queue_id, "created": taskcluster.stringDate(now),
                  "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)), "payload": {},
                  "metadata": {"name": "only", "description": "d", "owner": "o@example.com", "source": "https://x"}}
    scheduler.createTaskGraph(graph_id, {"routing": "schema", "tasks": {"only": {"task": definition}}})
    inspection = scheduler.inspect(graph_id)
    assert [t["label"] for t in inspection["tasks"]] == ["only"]
    assert scheduler.status(graph_id)["status"]["state"] == "running"
    graphs = scheduler.listTaskGraphs(query={"limit": 1000})
    assert graph_id in [g["status"]["taskGraphId"] for g in graphs["taskGraphs"]]
    with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure):
        scheduler.inspect(slugid.nice())
