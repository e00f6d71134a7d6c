"""The official Taskcluster Python client against Shoal: what a Taskcluster user does."""

import pytest
import taskcluster
from taskcluster import slugid
from taskcluster.exceptions import TaskclusterRestFailure


def claim(queue, task_queue_id, worker_id="w1", tasks=1):
    return queue.claimWork(task_queue_id, {"workerGroup": "py", "workerId": worker_id, "tasks": tasks})["tasks"]


def test_ping(queue):
    assert queue.ping()["alive"] is True


def test_create_claim_reclaim_complete(queue, make_task, task_queue_id):
    task_id = slugid.nice()
    status = queue.createTask(task_id, make_task())["status"]
    assert status["state"] == "pending"
    assert queue.task(task_id)["taskQueueId"] == task_queue_id

    claims = claim(queue, task_queue_id)
    assert len(claims) == 1
    assert claims[0]["status"]["taskId"] == task_id
    assert claims[0]["task"]["payload"] == {"command": ["true"]}

    reclaimed = queue.reclaimTask(task_id, "0")
    assert reclaimed["takenUntil"] >= claims[0]["takenUntil"]
    assert queue.reportCompleted(task_id, "0")["status"]["state"] == "completed"
    assert queue.status(task_id)["status"]["runs"][0]["reasonResolved"] == "completed"


def test_create_is_idempotent_and_conflicts(queue, make_task):
    task_id = slugid.nice()
    definition = make_task()
    queue.createTask(task_id, definition)
    queue.createTask(task_id, definition)
    with pytest.raises(TaskclusterRestFailure) as err:
        queue.createTask(task_id, {**definition, "retries": 1})
    assert err.value.status_code == 409


def test_errors_name_the_field(queue, make_task):
    with pytest.raises(TaskclusterRestFailure) as err:
        queue.createTask(slugid.nice(), make_task(priority="normal"))
    assert err.value.status_code == 400
    assert "priority" in err.value.body["message"]
    assert err.value.body["code"] == "InputValidationError"
    with pytest.raises(TaskclusterRestFailure) as err:
        queue.status(slugid.nice())
    assert err.value.status_code == 404
    assert err.value.body["code"] == "ResourceNotFound"


def test_failed_and_exception_with_retry(queue, make_task, task_queue_id):
    failing = slugid.nice()
    queue.createTask(failing, make_task())
    claim(queue, task_queue_id)
    assert queue.reportFailed(failing, "0")["status"]["state"] == "failed"

    flaky = slugid.nice()
    queue.createTask(flaky, make_task(retries=1))
    claim(queue, task_queue_id)
    status = queue.reportException(flaky, "0", {"reason": "intermittent-task"})["status"]
    assert status["state"] == "pending"
    assert status["runs"][1]["reasonCreated"] == "task-retry"
    assert status["retriesLeft"] == 0


def test_claim_expiry_retries(queue, make_task, task_queue_id):
    task_id = slugid.nice()
    queue.createTask(task_id, make_task())
    claim(queue, task_queue_id, "doomed")
    # The server's claims last 2 s; keep long-polling until the retry run is handed out.
    for _ in range(20):
        claims = claim(queue, task_queue_id, "heir")
        if claims:
            break
    assert claims[0]["runId"] == 1
    assert claims[0]["status"]["runs"][0]["reasonResolved"] == "claim-expired"


def test_dependencies(queue, make_task, task_queue_id):
    build, test = slugid.nice(), slugid.nice()
    queue.createTask(build, make_task())
    assert queue.createTask(test, make_task(dependencies=[build]))["status"]["state"] == "unscheduled"
    dependents = queue.listDependentTasks(build)["tasks"]
    assert [t["status"]["taskId"] for t in dependents] == [test]
    claim(queue, task_queue_id)
    queue.reportCompleted(build, "0")
    assert queue.status(test)["status"]["state"] == "pending"

    with pytest.raises(TaskclusterRestFailure) as err:
        queue.createTask(slugid.nice(), make_task(dependencies=[slugid.nice()]))
    assert err.value.status_code == 400


def test_groups(queue, make_task):
    group = slugid.nice()
    ids = [slugid.nice() for _ in range(3)]
    for task_id in ids:
        queue.createTask(task_id, make_task(taskGroupId=group, schedulerId="py-sched"))
    page = queue.listTaskGroup(group, query={"limit": 2})
    assert len(page["tasks"]) == 2 and "continuationToken" in page
    rest = queue.listTaskGroup(group, query={"limit": 2, "continuationToken": page["continuationToken"]})
    listed = {t["status"]["taskId"] for t in page["tasks"] + rest["tasks"]}
    assert listed == set(ids)
    assert queue.getTaskGroup(group)["schedulerId"] == "py-sched"

    with pytest.raises(TaskclusterRestFailure) as err:
        queue.cancelTaskGroup(group)
    assert err.value.status_code == 409
    assert "sealed" in queue.sealTaskGroup(group)
    result = queue.cancelTaskGroup(group)
    assert result["cancelledCount"] == 3
    assert queue.status(ids[0])["status"]["runs"][0]["reasonResolved"] == "canceled"


def test_cancel_rerun_schedule(queue, make_task):
    blocker, blocked = slugid.nice(), slugid.nice()
    queue.createTask(blocker, make_task())
    queue.createTask(blocked, make_task(dependencies=[blocker]))
    assert queue.scheduleTask(blocked)["status"]["state"] == "pending"
    assert queue.cancelTask(blocked)["status"]["state"] == "exception"
    rerun = queue.rerunTask(blocked)["status"]
    assert rerun["state"] == "pending"
    assert rerun["runs"][-1]["reasonCreated"] == "rerun"


def test_priorities(queue, make_task, task_queue_id):
    low, high, numeric = slugid.nice(), slugid.nice(), slugid.nice()
    queue.createTask(low, make_task(priority="low"))
    queue.createTask(numeric, make_task(priority=50))
    queue.createTask(high, make_task(priority="very-high"))
    queue.changeTaskPriority(low, {"newPriority": "highest"})
    order = [c["status"]["taskId"] for c in claim(queue, task_queue_id, tasks=3)]
    assert order == [low, numeric, high]


def test_queue_views(queue, make_task, task_queue_id):
    for _ in range(2):
        queue.createTask(slugid.nice(), make_task())
    claim(queue, task_queue_id)
    counts = queue.taskQueueCounts(task_queue_id)
    assert (counts["pendingTasks"], counts["claimedTasks"]) == (1, 1)
    assert queue.pendingTasks(task_queue_id)["pendingTasks"] == 1
    assert queue.getTaskQueue(task_queue_id)["taskQueueId"] == task_queue_id
    assert len(queue.listPendingTasks(task_queue_id)["tasks"]) == 1
    assert queue.listClaimedTasks(task_queue_id)["tasks"][0]["workerId"] == "w1"
    assert any(q["taskQueueId"] == task_queue_id for q in queue.listTaskQueues()["taskQueues"])


def test_empty_claim_returns_after_the_wait(queue, task_queue_id):
    assert claim(queue, task_queue_id) == []


def test_artifacts(queue, make_task, task_queue_id):
    import datetime

    import requests
    from taskcluster.download import downloadArtifactToBuf

    task_id = slugid.nice()
    queue.createTask(task_id, make_task())
    claim(queue, task_queue_id)
    expires = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    created = queue.createArtifact(
        task_id, "0", "public/report.txt", {"storageType": "s3", "expires": expires, "contentType": "text/plain"}
    )
    payload = b"all tests passed\n" * 1000
    upload = requests.put(created["putUrl"], data=payload, headers={"content-type": "text/plain"})
    assert upload.status_code == 200

    # The client does not follow the redirect; it returns the JSON body describing it.
    assert queue.getArtifact(task_id, "0", "public/report.txt")["storageType"] == "s3"
    names = [a["name"] for a in queue.listLatestArtifacts(task_id)["artifacts"]]
    assert names == ["public/logs/live.log", "public/report.txt"], "every claimed run has its live log"
    data, content_type = downloadArtifactToBuf(
        taskId=task_id, runId=0, name="public/report.txt", queueService=queue
    )
    assert bytes(data) == payload
    assert content_type == "text/plain"

    queue.createArtifact(
        task_id,
        "0",
        "public/missing",
        {"storageType": "error", "expires": expires, "reason": "file-missing-on-worker", "message": "gone"},
    )
    with pytest.raises(TaskclusterRestFailure) as err:
        queue.getArtifact(task_id, "0", "public/missing")
    assert err.value.status_code == 424


def test_counts_batch_and_group_priority_answer_taskclusters_fields(queue, make_task, task_queue_id):
    group = slugid.nice()
    for _ in range(2):
        queue.createTask(slugid.nice(), make_task(taskGroupId=group))
    counts = queue.taskQueueCounts(task_queue_id)
    assert (counts["provisionerId"], counts["pendingTasks"]) == (task_queue_id.split("/")[0], 2)
    batch = queue.taskQueueCountsBatch({"taskQueueIds": [task_queue_id]})
    assert batch["taskQueueCounts"] == [counts]
    changed = queue.changeTaskGroupPriority(group, {"newPriority": "high"})
    assert (changed["schedulerId"], changed["tasksAffected"], changed["newPriority"]) == ("-", 2, "high")


def test_rerun_schedules_an_unscheduled_task(queue, make_task):
    blocker = slugid.nice()
    queue.createTask(blocker, make_task())
    waiting = slugid.nice()
    queue.createTask(waiting, make_task(dependencies=[blocker]))
    status = queue.rerunTask(waiting)["status"]
    assert status["state"] == "pending"
    assert status["runs"][0]["reasonCreated"] == "rerun"


def test_every_method_of_the_official_client_is_served(server, queue):
    import requests

    reference = requests.get(server + "/api/queue/v1/reference").json()
    served = {entry["name"] for entry in reference["entries"]}
    missing = sorted(set(taskcluster.Queue.funcinfo) - served)
    assert missing == [], f"methods of taskcluster.Queue without an endpoint: {missing}"


def test_worker_registry(queue, make_task, task_queue_id):
    provisioner, worker_type = task_queue_id.split("/")
    task_id = slugid.nice()
    queue.createTask(task_id, make_task())
    claim = queue.claimWork(task_queue_id, {"workerGroup": "g", "workerId": "py1", "tasks": 1})
    assert claim["tasks"][0]["status"]["taskId"] == task_id

    provisioners = [p["provisionerId"] for p in queue.listProvisioners()["provisioners"]]
    assert provisioner in provisioners
    assert queue.getProvisioner(provisioner)["provisionerId"] == provisioner
    types = queue.listWorkerTypes(provisioner)["workerTypes"]
    assert [t["workerType"] for t in types] == [worker_type]
    assert queue.getWorkerType(provisioner, worker_type)["taskQueueId"] == task_queue_id

    workers = queue.listWorkers(provisioner, worker_type)["workers"]
    assert [(w["workerGroup"], w["workerId"]) for w in workers] == [("g", "py1")]
    assert workers[0]["latestTask"] == {"taskId": task_id, "runId": 0}
    worker = queue.getWorker(provisioner, worker_type, "g", "py1")
    assert worker["recentTasks"] == [{"taskId": task_id, "runId": 0}]
    assert "firstClaim" in worker and "expires" in worker

    until = taskcluster.stringDate(taskcluster.fromNow("1 hour"))
    quarantined = queue.quarantineWorker(
        provisioner, worker_type, "g", "py1", {"quarantineUntil": until, "quarantineInfo": "flaky"}
    )
    assert quarantined["quarantineDetails"][-1]["quarantineInfo"] == "flaky"
    queue.createTask(slugid.nice(), make_task())
    assert queue.claimWork(task_queue_id, {"workerGroup": "g", "workerId": "py1", "tasks": 1})["tasks"] == []
    listed = queue.listWorkers(provisioner, worker_type, query={"quarantined": "true"})["workers"]
    assert [w["workerId"] for w in listed] == ["py1"]
    assert "quarantineUntil" in listed[0]
    queue.quarantineWorker(provisioner, worker_type, "g", "py1", {"quarantineUntil": taskcluster.stringDate(taskcluster.fromNow("0 seconds"))})
    assert len(queue.claimWork(task_queue_id, {"workerGroup": "g", "workerId": "py1", "tasks": 1})["tasks"]) == 1

    declared = queue.declareWorker(provisioner, worker_type, "g", "py2", {"expires": until})
    assert declared["workerId"] == "py2"
    with pytest.raises(TaskclusterRestFailure) as err:
        queue.getWorker(provisioner, worker_type, "g", "nobody")
    assert err.value.status_code == 404


def test_worker_calls_need_scopes(anonymous_queue, task_queue_id):
    provisioner, worker_type = task_queue_id.split("/")
    with pytest.raises(TaskclusterRestFailure) as err:
        anonymous_queue.quarantineWorker(provisioner, worker_type, "g", "w", {"quarantineUntil": "2100-01-01T00:00:00.000Z"})
    assert err.value.status_code == 403
