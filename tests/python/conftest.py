"""Starts a real `shoal server` for the suite and hands out official Taskcluster clients."""

import datetime
import os
import subprocess
import tempfile

import pytest
import taskcluster
from taskcluster import slugid


# The root client of the suite's server.
ROOT_TOKEN = "python-suite-root-access-token"


def _start(extra_args, data_dir=None):
    binary = os.environ.get("SHOAL_BIN", "shoal")
    data_dir = data_dir or tempfile.mkdtemp(prefix="shoal-py-")
    proc = subprocess.Popen(
        [binary, "server", "--listen", "127.0.0.1:0", "--data-dir", data_dir, *extra_args],
        # Not on the command line: a token there would show in the process list.
        stdout=subprocess.PIPE,
        env={**os.environ, "SHOAL_LOG": "warn", "SHOAL_ROOT_ACCESS_TOKEN": ROOT_TOKEN},
        text=True,
    )
    line = proc.stdout.readline()
    assert "http://" in line, f"server did not start: {line!r}"
    root_url = line.split("rootUrl ")[1].strip().rstrip(")")
    return proc, root_url


@pytest.fixture(scope="session")
def server():
    # Short claims and waits keep expiry and empty long polls quick.
    proc, root_url = _start(["--claim-timeout", "2", "--claim-wait", "1"])
    yield root_url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def root_credentials():
    return {"clientId": "root", "accessToken": ROOT_TOKEN}


@pytest.fixture
def queue(server, root_credentials):
    return taskcluster.Queue({"rootUrl": server, "credentials": root_credentials})


@pytest.fixture
def anonymous_queue(server):
    return taskcluster.Queue({"rootUrl": server})


@pytest.fixture
def auth(server, root_credentials):
    return taskcluster.Auth({"rootUrl": server, "credentials": root_credentials})


@pytest.fixture
def task_queue_id():
    """A queue of its own per test, so tests do not claim each other's work."""
    return "py-" + slugid.nice()[:8].lower().replace("_", "x") + "/wt"


@pytest.fixture
def make_task(task_queue_id):
    def make(**fields):
        now = datetime.datetime.now(datetime.timezone.utc)
        definition = {
            "taskQueueId": task_queue_id,
            "created": taskcluster.stringDate(now),
            "deadline": taskcluster.stringDate(now + datetime.timedelta(hours=1)),
            "payload": {"command": ["true"]},
            "metadata": {
                "name": "python client test",
                "description": "created by the official client",
                "owner": "tests@example.com",
                "source": "https://example.com/shoal",
            },
        }
        definition.update(fields)
        return definition

    return make
