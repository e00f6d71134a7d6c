"""Times the web UI on a big group in headless Chromium: a release `shoal server`, one task
graph of N tasks (its task group), then the group page until every task is listed and live,
a filter and a state chip applied, the graph page, and the overview; then, signed in, the
cancel of a fresh group of N tasks from its page, until the server answered and until every
row shows the task cancelled; then a task whose log is 50 MB, until its end shows and until one
window of earlier lines does, a link to a line in its middle until that line is marked in
view, and a search of the whole log until its first result and its last. Run by
./scripts/bench-ui (`--log-only` for the log's figures alone)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import mohawk
import requests
from taskcluster import slugid
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

TOKEN = "bench-ui-root-access-token"


def start(binary, data_dir):
    proc = subprocess.Popen(
        [binary, "server", "--listen", "127.0.0.1:0", "--data-dir", data_dir],
        stdout=subprocess.PIPE,
        env={**os.environ, "SHOAL_LOG": "warn", "SHOAL_ROOT_ACCESS_TOKEN": TOKEN},
        text=True,
    )
    line = proc.stdout.readline()
    return proc, line.split("rootUrl ")[1].strip().rstrip(")")


def put_graph(root, graph_id, n):
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    deadline = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 3600))
    task = lambda i: {  # noqa: E731
        "taskQueueId": "bench-ui/wt", "created": now, "deadline": deadline, "payload": {},
        "metadata": {"name": f"task {i:05}", "description": "d", "owner": "o@example.com", "source": "https://x"},
    }
    body = json.dumps({"routing": "ui", "metadata": {"name": f"{n} tasks"},
                       "tasks": {f"t{i:05}": {"requires": [], "task": task(i)} for i in range(n)}}).encode()
    url = f"{root}/api/scheduler/v1/task-graph/{graph_id}"
    sender = mohawk.Sender({"id": "root", "key": TOKEN, "algorithm": "sha256"}, url, "PUT",
                           content=body, content_type="application/json")
    res = requests.put(url, data=body, headers={"Authorization": sender.request_header, "Content-Type": "application/json"})
    res.raise_for_status()


def signed(method, url, body, content_type="application/json"):
    sender = mohawk.Sender({"id": "root", "key": TOKEN, "algorithm": "sha256"}, url, method,
                           content=body, content_type=content_type)
    res = requests.request(method, url, data=body, headers={"Authorization": sender.request_header, "Content-Type": content_type})
    res.raise_for_status()
    return res.json()


def big_log_task(root, megabytes):
    """A completed task whose run's log is `megabytes` MB of numbered lines."""
    task_id = slugid.nice()
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    deadline = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 3600))
    task = {"taskQueueId": "bench-ui/log", "created": now, "deadline": deadline, "payload": {},
            "metadata": {"name": "a big log", "description": "d", "owner": "o@example.com", "source": "https://x"}}
    signed("PUT", f"{root}/api/queue/v1/task/{task_id}", json.dumps(task).encode())
    claim = json.dumps({"workerGroup": "bench", "workerId": "ui", "tasks": 1}).encode()
    signed("POST", f"{root}/api/queue/v1/claim-work/bench-ui%2Flog", claim)
    line = "\x1b[32m[ OK ]\x1b[0m " + "x" * 80
    chunk = "".join(f"{n:08} {line}\n" for n in range(30000)).encode()  # about 3 MB a call (4 MiB at most)
    offset = 0
    while offset < megabytes * 1_000_000:
        signed("POST", f"{root}/logs/v1/{task_id}/0?offset={offset}", chunk, "text/plain")
        offset += len(chunk)
    signed("POST", f"{root}/api/queue/v1/task/{task_id}/runs/0/completed", b"{}")
    return task_id, offset


def timed(driver, action, condition):
    started = time.perf_counter()
    action()
    WebDriverWait(driver, 120, poll_frequency=0.02, ignored_exceptions=(StaleElementReferenceException,)).until(condition)
    return time.perf_counter() - started


def big_log(driver, root, runs):
    """A 50 MB log: its end shown and earlier lines; a line link far from the end (read,
    marked and in view); a search of the whole log (first result, and the whole answer)."""
    task_id, size = big_log_task(root, 50)
    lines = lambda d: len(d.find_elements(By.CSS_SELECTOR, "#log .line"))  # noqa: E731
    in_view = ("const r = document.getElementById(arguments[0]).getBoundingClientRect();"
               "return r.top >= 0 && r.bottom <= window.innerHeight;")
    total = size // len(f"{0:08} " + "\x1b[32m[ OK ]\x1b[0m " + "x" * 80 + "\n")
    for run in range(runs):
        first = timed(driver, lambda: driver.get(f"{root}/tasks/{task_id}"),
                      lambda d: d.find_elements(By.ID, "log-earlier-button") and lines(d) > 0)
        shown = lines(driver)
        earlier = timed(driver, lambda: driver.find_element(By.ID, "log-earlier-button").click(),
                        lambda d: lines(d) > shown)
        target = total // 2 + run
        linked = timed(driver, lambda: driver.get(f"{root}/tasks/{task_id}/runs/0#L{target}"),
                       lambda d: d.find_elements(By.CSS_SELECTOR, f"#L{target}.target")
                       and d.execute_script(in_view, f"L{target}"))
        driver.get(f"{root}/tasks/{task_id}/runs/0")
        WebDriverWait(driver, 60).until(lambda d: lines(d) > 0)
        box = driver.find_element(By.ID, "log-search")
        started = time.perf_counter()
        box.send_keys("00012345\n")
        WebDriverWait(driver, 120, poll_frequency=0.01).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#log-results li"))
        first_hit = time.perf_counter() - started
        WebDriverWait(driver, 120, poll_frequency=0.01).until(
            lambda d: "matching lines in the whole log" in d.find_element(By.ID, "log-hits").text)
        searched = time.perf_counter() - started
        hits = len(driver.find_elements(By.CSS_SELECTOR, "#log-results li"))
        print(f"run {run + 1}: a {size / 1e6:.0f} MB log: its end shown in {first:.2f} s ({shown} lines); "
              f"earlier lines in {earlier * 1000:.0f} ms; line {target} linked: read, marked and in view in "
              f"{linked:.2f} s; whole-log search: first result in {first_hit:.2f} s, all {hits} in {searched:.2f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--log-only", action="store_true", help="only the 50 MB log's figures")
    args = parser.parse_args()
    binary = os.environ["SHOAL_BIN"]
    data_dir = tempfile.mkdtemp(prefix="shoal-bench-ui-")
    proc, root = start(binary, data_dir)
    os.environ["SE_OFFLINE"] = "true"
    options = Options()
    options.binary_location = shutil.which("chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
    try:
        if args.log_only:
            return big_log(driver, root, args.runs)
        graph_id = slugid.nice()
        started = time.perf_counter()
        put_graph(root, graph_id, args.tasks)
        print(f"created a graph of {args.tasks} tasks in {time.perf_counter() - started:.2f} s")
        rows = lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tasks tr"))  # noqa: E731
        for run in range(args.runs):
            load = timed(driver, lambda: driver.get(f"{root}/tasks/groups/{graph_id}"),
                         lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #loading.live") and rows(d) == 100)
            filt = timed(driver, lambda: driver.find_element(By.ID, "filter").send_keys("task 0999"),
                         lambda d: rows(d) == 10)
            driver.execute_script("const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'))")
            chip = timed(driver, lambda: driver.find_element(By.CSS_SELECTOR, 'button[data-state="pending"]').click(),
                         lambda d: "page 1 of" in d.find_element(By.CSS_SELECTOR, ".pager").text)
            graph = timed(driver, lambda: driver.get(f"{root}/task-graphs/{graph_id}"),
                          lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] tbody tr"))
            overview = timed(driver, lambda: driver.get(f"{root}/"),
                             lambda d: d.find_elements(By.CSS_SELECTOR, '#app[data-ready] tr[data-queue="bench-ui/wt"]'))
            print(f"run {run + 1}: group page listed and live {load:.2f} s; name filter {filt * 1000:.0f} ms; "
                  f"state chip {chip * 1000:.0f} ms; graph page {graph:.2f} s; overview {overview:.2f} s")
        # Signed in for this tab (the pages read a tab's own session storage too).
        driver.execute_script("sessionStorage.setItem('shoal.credentials', JSON.stringify(arguments[0]))",
                              {"clientId": "root", "accessToken": TOKEN})
        cancelled = lambda d: f"exception {args.tasks}" in d.find_element(By.ID, "counts").text  # noqa: E731
        for run in range(args.runs):
            group_id = slugid.nice()
            put_graph(root, group_id, args.tasks)
            timed(driver, lambda: driver.get(f"{root}/tasks/groups/{group_id}"),
                  lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #loading.live") and rows(d) == 100)

            def cancel():
                driver.find_element(By.ID, "cancel-group").click()
                driver.switch_to.alert.accept()

            started = time.perf_counter()
            answered = timed(driver, cancel, lambda d: "cancelled" in d.find_element(By.ID, "group-action-result").text)
            timed(driver, lambda: None, cancelled)
            shown = time.perf_counter() - started
            print(f"run {run + 1}: cancel group of {args.tasks}: answered in {answered:.2f} s "
                  f"({driver.find_element(By.ID, 'group-action-result').text}); every row cancelled in {shown:.2f} s")
        big_log(driver, root, args.runs)
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
