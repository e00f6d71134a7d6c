"""Credentials and scopes with the official client: taskcluster.Auth manages clients and
roles, temporary credentials and signed URLs work as against Taskcluster."""

import datetime

import pytest
import requests
import taskcluster
from taskcluster import slugid
from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure


def in_an_hour():
    return taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))


def test_anonymous_callers_read_but_do_not_write(anonymous_queue, queue, make_task):
    task_id = slugid.nice()
    with pytest.raises(TaskclusterRestFailure) as err:
        anonymous_queue.createTask(task_id, make_task())
    assert err.value.status_code == 403
    assert err.value.body["code"] == "InsufficientScopes"
    queue.createTask(task_id, make_task())
    assert anonymous_queue.status(task_id)["status"]["state"] == "pending"


def test_clients_roles_and_scopes(server, auth, make_task, task_queue_id):
    role_id = "project:" + slugid.nice()
    auth.createRole(role_id, {"description": "submitters", "scopes": ["queue:create-task:*", "queue:scheduler-id:*"]})
    assert auth.role(role_id)["scopes"] == ["queue:create-task:*", "queue:scheduler-id:*"]
    assert "queue:create-task:*" in auth.expandScopes({"scopes": ["assume:" + role_id]})["scopes"]
    assert any(r["roleId"] == role_id for r in auth.listRoles())

    client_id = "ci/" + slugid.nice()
    made = auth.createClient(client_id, {"description": "ci", "expires": in_an_hour(), "scopes": ["assume:" + role_id]})
    assert made["accessToken"]
    assert "accessToken" not in auth.client(client_id)
    assert "queue:create-task:*" in auth.client(client_id)["expandedScopes"]
    assert any(c["clientId"] == client_id for c in auth.listClients(query={"prefix": "ci/"})["clients"])

    ci = taskcluster.Queue({"rootUrl": server, "credentials": {"clientId": client_id, "accessToken": made["accessToken"]}})
    ci.createTask(slugid.nice(), make_task())
    ci_auth = taskcluster.Auth({"rootUrl": server, "credentials": {"clientId": client_id, "accessToken": made["accessToken"]}})
    assert "queue:scheduler-id:*" in ci_auth.currentScopes()["scopes"]

    auth.disableClient(client_id)
    with pytest.raises(TaskclusterAuthFailure):
        ci.createTask(slugid.nice(), make_task())
    auth.enableClient(client_id)
    ci.createTask(slugid.nice(), make_task())

    reset = auth.resetAccessToken(client_id)
    with pytest.raises(TaskclusterAuthFailure):
        ci.createTask(slugid.nice(), make_task())
    auth.updateClient(client_id, {"description": "ci, changed", "expires": in_an_hour()})
    assert auth.client(client_id)["description"] == "ci, changed"
    auth.deleteClient(client_id)
    fresh = taskcluster.Queue({"rootUrl": server, "credentials": {"clientId": client_id, "accessToken": reset["accessToken"]}})
    with pytest.raises(TaskclusterAuthFailure):
        fresh.createTask(slugid.nice(), make_task())
    auth.deleteRole(role_id)
    with pytest.raises(TaskclusterRestFailure) as err:
        auth.role(role_id)
    assert err.value.status_code == 404


def temporary(root_credentials, **name):
    """Temporary credentials for an hour from root, as Taskcluster's helper makes them."""
    return taskcluster.createTemporaryCredentials(
        root_credentials["clientId"],
        root_credentials["accessToken"],
        datetime.datetime.utcnow() - datetime.timedelta(minutes=1),
        datetime.datetime.utcnow() + datetime.timedelta(hours=1),
        ["queue:create-task:*", "queue:scheduler-id:*"],
        **name,
    )


def test_temporary_credentials(server, root_credentials, make_task):
    temp = temporary(root_credentials)
    queue = taskcluster.Queue({"rootUrl": server, "credentials": temp})
    queue.createTask(slugid.nice(), make_task())
    with pytest.raises(TaskclusterRestFailure) as err:
        queue.createTask(slugid.nice(), make_task(routes=["index.anything"]))
    assert err.value.status_code == 403, "the certificate's scopes, not root's"

    named = temporary(root_credentials, name="temporary/builder")
    auth = taskcluster.Auth({"rootUrl": server, "credentials": named})
    assert auth.currentScopes()["scopes"][:2] == ["assume:anonymous", "queue:create-task:*"]


def test_authorized_scopes(server, root_credentials, make_task):
    restricted = taskcluster.Queue(
        {"rootUrl": server, "credentials": root_credentials, "authorizedScopes": ["queue:status:*"]}
    )
    with pytest.raises(TaskclusterRestFailure) as err:
        restricted.createTask(slugid.nice(), make_task())
    assert err.value.status_code == 403


def test_a_claim_hands_out_credentials_for_its_run(server, queue, make_task, task_queue_id):
    task_id = slugid.nice()
    other = slugid.nice()
    queue.createTask(task_id, make_task())
    claimed = queue.claimWork(task_queue_id, {"workerGroup": "py", "workerId": "w", "tasks": 1})["tasks"][0]
    queue.createTask(other, make_task(taskQueueId="py-other/wt"))
    assert claimed["credentials"]["clientId"].startswith("task-client/" + claimed["status"]["taskId"])
    run = taskcluster.Queue({"rootUrl": server, "credentials": claimed["credentials"]})
    renewed = run.reclaimTask(claimed["status"]["taskId"], "0")["credentials"]
    with pytest.raises(TaskclusterRestFailure) as err:
        run.cancelTask(other)
    assert err.value.status_code == 403
    after = taskcluster.Queue({"rootUrl": server, "credentials": renewed})
    assert after.reportCompleted(claimed["status"]["taskId"], "0")["status"]["state"] == "completed"


def test_signed_url_for_a_private_artifact(server, queue, anonymous_queue, make_task, task_queue_id):
    task_id = slugid.nice()
    queue.createTask(task_id, make_task())
    queue.claimWork(task_queue_id, {"workerGroup": "py", "workerId": "w", "tasks": 1})
    created = queue.createArtifact(
        task_id, "0", "private/secret.txt", {"storageType": "s3", "expires": in_an_hour(), "contentType": "text/plain"}
    )
    assert requests.put(created["putUrl"], data=b"secret").status_code == 200
    with pytest.raises(TaskclusterRestFailure) as err:
        anonymous_queue.getArtifact(task_id, "0", "private/secret.txt")
    assert err.value.status_code == 403
    url = queue.buildSignedUrl("getArtifact", task_id, "0", "private/secret.txt")
    res = requests.get(url)
    assert res.status_code == 200, res.text
    assert res.content == b"secret"
    # An edited URL (another artifact) is refused.
    edited = url.replace("secret.txt", "other.txt")
    assert requests.get(edited, allow_redirects=False).status_code == 401


def test_test_authenticate(server):
    tester = taskcluster.Auth({"rootUrl": server, "credentials": {"clientId": "tester", "accessToken": "no-secret"}})
    answer = tester.testAuthenticate({"clientScopes": ["test:a*"], "requiredScopes": ["test:abc"]})
    assert answer["clientId"] == "tester"
    with pytest.raises(TaskclusterRestFailure) as err:
        tester.testAuthenticate({"clientScopes": ["test:a"], "requiredScopes": ["test:b"]})
    assert err.value.status_code == 403


def test_test_authenticate_get_monitoring_and_audit(server, auth):
    tester = taskcluster.Auth({"rootUrl": server, "credentials": {"clientId": "tester", "accessToken": "no-secret"}})
    answer = tester.testAuthenticateGet()
    assert answer["clientId"] == "tester"
    assert sorted(answer["scopes"]) == ["auth:create-client:test:*", "test:*"]
    # Signed URLs (bewits) work for it too: it exists for them.
    signed = tester.buildSignedUrl("testAuthenticateGet")
    assert requests.get(signed, timeout=30).json()["clientId"] == "tester"
    anonymous = taskcluster.Auth({"rootUrl": server})
    with pytest.raises(TaskclusterRestFailure) as err:
        anonymous.testAuthenticateGet()
    assert err.value.status_code == 403
    assert anonymous.lbheartbeat() == {} and anonymous.heartbeat() == {}
    assert "version" in anonymous.version()
    # No audit history is kept: an honest empty list, behind Taskcluster's scopes.
    assert auth.listAuditHistory("root") == {"auditHistory": []}
    assert auth.getEntityHistory("client", "root") == {"auditHistory": []}
    with pytest.raises(TaskclusterRestFailure) as err:
        anonymous.listAuditHistory("root")
    assert err.value.status_code == 403


def test_every_method_of_the_official_auth_client_is_served_or_documented(server):
    reference = requests.get(server + "/api/auth/v1/reference", timeout=30).json()
    served = {entry["name"] for entry in reference["entries"]}
    # docs/API.md says why these are not served.
    documented = {"authenticateHawk", "awsS3Credentials", "gcpCredentials", "githubRepoToken", "listRoles2",
                  "sentryDSN", "websocktunnelToken"}
    missing = sorted(set(taskcluster.Auth.funcinfo) - served - documented)
    assert missing == [], f"methods of taskcluster.Auth without an endpoint: {missing}"
