"""The web UI in a real headless Chromium (Debian's chromium and chromium-driver) against the
suite's server: each page shows what the API holds, follows changes without a reload, and acts
with the signed-in client's scopes. Screenshots of each page at a laptop's and a phone's size
are saved in a temporary directory, named in the output."""

import datetime
import json
import os
import shutil
import tempfile

import mohawk
import pytest
import requests
import taskcluster
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import ROOT_TOKEN, _start

WAIT_SECS = 30
SIZES = {"laptop": (1280, 800), "phone": (390, 844)}


@pytest.fixture(scope="module")
def server():
    # The pages' own server: its claims last the default 20 min, so a run claimed by a test
    # outlives the page waits before its report on a loaded machine (the suite's server
    # expires claims after 2 s for the queue's expiry tests).
    proc, root_url = _start(["--claim-wait", "1"])
    yield root_url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def shots():
    path = os.environ.get("SHOAL_UI_SHOTS") or tempfile.mkdtemp(prefix="shoal-ui-shots-")
    os.makedirs(path, exist_ok=True)
    print(f"\nscreenshots in {path}")
    return path


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.fail("the browser tests need Debian's chromium and chromium-driver (./scripts/test.sh installs them)")
    # Never fetch a browser or driver: use the ones installed.
    os.environ["SE_OFFLINE"] = "true"
    options = Options()
    options.binary_location = chromium
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    yield driver
    driver.quit()


def wait(driver, condition, what):
    # Live pages redraw parts of themselves: an element found a moment ago may be gone; look again.
    waiting = WebDriverWait(driver, WAIT_SECS, ignored_exceptions=(StaleElementReferenceException,))
    return waiting.until(lambda d: condition(d), message=f"waited for {what}")


def text_of(driver, css):
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def open_page(driver, url, ready_css):
    """Opens `url` and waits until the page drew itself (and listens, where it is live)."""
    driver.get(url)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#app[data-ready] {ready_css}"), ready_css)


def window_sizes(driver):
    """Gives the window each of SIZES in turn, yielding its name; then the default again."""
    for size, (width, height) in SIZES.items():
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": size == "phone"},
        )
        yield size
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def snap(driver, shots, name):
    """Saves the page at each size, then restores the laptop size."""
    for size in window_sizes(driver):
        driver.save_screenshot(os.path.join(shots, f"{name}-{size}.png"))


FORGET = "localStorage.clear(); sessionStorage.clear(); document.cookie = 'shoal_session=; path=/; max-age=0'"


def sign_in(driver, server, client_id, access_token):
    driver.get(server + "/")
    driver.execute_script(FORGET)
    driver.get(server + "/")
    wait(driver, lambda d: d.find_elements(By.ID, "show-sign-in"), "the sign-in button")
    driver.find_element(By.ID, "show-sign-in").click()
    form = driver.find_element(By.ID, "sign-in")
    form.find_element(By.NAME, "clientId").send_keys(client_id)
    form.find_element(By.NAME, "accessToken").send_keys(access_token)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver, lambda d: text_of(d, "#who .signed-in") == client_id, f"signed in as {client_id}")


def sign_out(driver, server):
    driver.get(server + "/")
    driver.execute_script(FORGET)


def test_sign_in_lasts_across_tabs_until_sign_out_and_a_wrong_token_is_said_plainly(server, browser, shots):
    sign_out(browser, server)
    browser.get(server + "/")
    wait(browser, lambda d: d.find_elements(By.ID, "show-sign-in"), "the sign-in button")
    browser.find_element(By.ID, "show-sign-in").click()
    form = browser.find_element(By.ID, "sign-in")
    form.find_element(By.NAME, "clientId").send_keys("root")
    form.find_element(By.NAME, "accessToken").send_keys("not-the-token")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: text_of(d, "#sign-in-error"), "the refusal")
    assert text_of(browser, "#sign-in-error") == "Not signed in: the server does not accept this clientId and accessToken."
    sign_in(browser, server, "root", ROOT_TOKEN)
    first = browser.current_window_handle
    # A page opened in another tab is signed in too.
    browser.switch_to.new_window("tab")
    browser.get(f"{server}/workers")
    wait(browser, lambda d: text_of(d, "#who .signed-in") == "root", "signed in in the new tab")
    # Signing out there signs out here.
    browser.find_element(By.ID, "sign-out").click()
    wait(browser, lambda d: d.find_elements(By.ID, "show-sign-in"), "signed out in the new tab")
    browser.close()
    browser.switch_to.window(first)
    wait(browser, lambda d: d.find_elements(By.ID, "show-sign-in"), "signed out in the first tab as well")
    # Credentials of a browser session that ended (its cookie gone) are not used.
    sign_in(browser, server, "root", ROOT_TOKEN)
    browser.execute_script("document.cookie = 'shoal_session=; path=/; max-age=0'")
    browser.get(f"{server}/workers")
    wait(browser, lambda d: d.find_elements(By.ID, "show-sign-in"), "a new browser session starts anonymous")
    assert browser.execute_script("return localStorage.getItem('shoal.credentials')") is None, "and forgets them"


def claim(queue, task_queue_id, worker_id="w1", **shoal_fields):
    body = {"workerGroup": "ui", "workerId": worker_id, "tasks": 1, **shoal_fields}
    claimed = queue.claimWork(task_queue_id, body)
    assert claimed["tasks"], "a task to claim"
    return claimed["tasks"][0]


def append_log(server, task_id, run_id, offset, text):
    url = f"{server}/logs/v1/{task_id}/{run_id}?offset={offset}"
    body = text.encode()
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_TOKEN, "algorithm": "sha256"},
        url,
        "POST",
        content=body,
        content_type="application/octet-stream",
    )
    res = requests.post(
        url, data=body, headers={"Authorization": sender.request_header, "Content-Type": "application/octet-stream"}
    )
    assert res.status_code == 200, res.text
    return offset + len(body)


def post_json(server, path, body):
    url = f"{server}{path}"
    data = json.dumps(body).encode()
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_TOKEN, "algorithm": "sha256"}, url, "POST", content=data, content_type="application/json"
    )
    res = requests.post(url, data=data, headers={"Authorization": sender.request_header, "Content-Type": "application/json"})
    assert res.status_code == 200, res.text
    return res.json()



def fleet_worker(server, provisioner, worker_type, group, worker_id):
    """A worker as Shoal's fleet view answers it (with `state` and `terminating`, which
    Taskcluster's getWorker has no place for)."""
    url = f"{server}/api/queue/v1/task-queues/{provisioner}/{worker_type}/workers/{group}/{worker_id}"
    return requests.get(url, timeout=30).json()


def test_a_failed_task_shows_why_and_the_end_of_its_log_first(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("failing task")))
    run_id = claim(queue, task_queue_id, dimensions={"os": ["linux"]}, version="9.9.9-ui")["runId"]
    log = "".join(f"compiling module {n} of the build, a line long enough to wrap on a phone\n" for n in range(300))
    after = "".join(f"\x1b[2mteardown step {n}\x1b[0m\n" for n in range(42))
    append_log(server, task_id, run_id, 0, log + "\x1b[31merror: test_widget failed\x1b[0m\n" + after)
    post_json(server, f"/api/queue/v1/task/{task_id}/runs/{run_id}/failed", {"stats": {"exitCode": 3, "runMs": 5}})
    for size in window_sizes(browser):
        open_page(browser, f"{server}/tasks/{task_id}", "#failure")
        wait(browser, lambda d: "error: test_widget failed" in text_of(d, "#failure-tail"), f"the log's end ({size})")
        assert text_of(browser, "#failure-why") == "failed · exit code 3"
        assert "teardown step 41" in text_of(browser, "#failure-tail") and "module 2 " not in text_of(browser, "#failure-tail")
        assert "\x1b" not in text_of(browser, "#failure-tail") and "[31m" not in text_of(browser, "#failure-tail")
        failing = browser.find_element(By.CSS_SELECTOR, "#failure-tail .failure-line")
        assert failing.find_element(By.CSS_SELECTOR, ".ansi-fg31").text == "error: test_widget failed", "43 lines up, in colour"
        assert failing.find_element(By.CSS_SELECTOR, "a").get_attribute("href").endswith(f"/runs/{run_id}#L301")
        bottom = browser.execute_script("return document.getElementById('failure').getBoundingClientRect().bottom")
        inner = browser.execute_script("return window.innerHeight")
        assert bottom <= inner, f"{size}: why it failed and the log's end are above the fold ({bottom} > {inner})"
        browser.save_screenshot(os.path.join(shots, f"task-failed-{size}.png"))
    # The run says what ran it: the worker's version and dimensions at the claim.
    run = text_of(browser, f'[data-run="{run_id}"]')
    assert "9.9.9-ui" in run and "os:linux" in run, run
    # Who created it, and that client's other tasks a click away.
    assert text_of(browser, "#created-by") == "root"
    browser.find_element(By.ID, "created-by").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'#tasks tr[data-task="{task_id}"]'), "the creator's tasks")
    assert "created by root" in text_of(browser, "h1")
    # A cancelled task is not a failure to explain.
    cancelled = slugid_nice()
    queue.createTask(cancelled, make_task(metadata=named("cancelled task")))
    queue.cancelTask(cancelled)
    open_page(browser, f"{server}/tasks/{cancelled}", "#log-state")
    assert not browser.find_elements(By.ID, "failure")


def test_the_log_viewer_colours_numbers_links_and_searches(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("coloured log")))
    run_id = claim(queue, task_queue_id)["runId"]
    log = "".join(f"\x1b[32m[ OK ]\x1b[0m test {n} \x1b[1mpassed\x1b[22m\n" for n in range(1, 301))
    append_log(server, task_id, run_id, 0, log)
    post_json(server, f"/api/queue/v1/task/{task_id}/runs/{run_id}/completed", {})
    # A pasted line link: that line, marked, and in view.
    open_page(browser, f"{server}/tasks/{task_id}#L120", "#log")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#L120.target"), "line 120 marked")
    assert (text_of(browser, "#L120 .line-no"), text_of(browser, "#L120 .line-text")) == ("120", "[ OK ] test 120 passed")
    assert "\x1b" not in text_of(browser, "#log") and "[32m" not in text_of(browser, "#log"), "no raw escapes"
    ok = browser.find_element(By.CSS_SELECTOR, "#L120 .ansi-fg32")
    assert ok.text == "[ OK ]" and ok.value_of_css_property("color") == "rgba(126, 231, 135, 1)"
    assert browser.find_element(By.CSS_SELECTOR, "#L120 .ansi-bold").text == "passed"
    link = browser.find_element(By.CSS_SELECTOR, "#L120 a").get_attribute("href")
    assert link.endswith(f"/tasks/{task_id}/runs/{run_id}#L120"), f"a line link names its run: {link}"
    # Search (the whole log, on the server): Enter searches and shows the first match, then
    # steps through them; the term is kept in the URL.
    browser.find_element(By.ID, "log-search").send_keys("TEST 30\n")
    wait(browser, lambda d: text_of(d, "#log-hits") == "1 of 2 matching lines in the whole log", "two matches, any case")
    assert "search=TEST+30" in browser.current_url or "search=TEST%2030" in browser.current_url, browser.current_url
    assert text_of(browser, "#log .line.target .line-text") == "[ OK ] test 30 passed"
    browser.find_element(By.ID, "log-search").send_keys("\n")
    wait(browser, lambda d: text_of(d, "#log-hits") == "2 of 2 matching lines in the whole log", "the next match")
    wait(browser, lambda d: text_of(d, "#log .line.target .line-text") == "[ OK ] test 300 passed", "line 300 marked")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#log .line.hit")) == 2
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#log-results a")] == ["L30", "L300"]
    snap(browser, shots, "log")


def test_a_big_log_shows_its_end_first_and_earlier_lines_on_demand(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("big log")))
    run_id = claim(queue, task_queue_id)["runId"]
    line = "x" * 90
    log = "".join(f"\x1b[32mline\x1b[0m {n:06} {line}\n" for n in range(1, 8001))  # about 850 KB: four windows
    append_log(server, task_id, run_id, 0, log)
    post_json(server, f"/api/queue/v1/task/{task_id}/runs/{run_id}/completed", {})
    open_page(browser, f"{server}/tasks/{task_id}", "#log")
    wait(browser, lambda d: "line 008000" in text_of(d, "#log"), "the end first")
    assert "line 000001 " not in text_of(browser, "#log")
    # Numbered from the first screen: each line's number is its own.
    first = browser.find_element(By.CSS_SELECTOR, "#log .line")
    number = int(first.find_element(By.CSS_SELECTOR, ".line-no").text)
    assert first.find_element(By.CSS_SELECTOR, ".line-text").text == f"line {number:06} {line}", "a whole line, numbered"
    assert text_of(browser, "#L8000 .line-text").startswith("line 008000")
    for _ in range(10):
        buttons = browser.find_elements(By.ID, "log-earlier-button")
        if not buttons:
            break
        before = len(browser.find_elements(By.CSS_SELECTOR, "#log .line"))
        buttons[0].click()
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#log .line")) > before, "earlier lines")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#log .line")) == 8000, "every line once"
    assert text_of(browser, "#L1 .line-text") == f"line 000001 {line}"
    assert text_of(browser, "#L4321 .line-text") == f"line 004321 {line}", "numbers kept as earlier lines came"
    assert text_of(browser, "#L8000 .line-text").startswith("line 008000")
    assert browser.find_elements(By.CSS_SELECTOR, "#L8000 .ansi-fg32"), "lines shown first keep their colours"


def in_view(driver, css):
    """Whether the element is inside the window, top to bottom."""
    return driver.execute_script(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight;", css)


def test_any_line_of_a_big_log_is_linked_and_searched(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("linked log")))
    run_id = claim(queue, task_queue_id)["runId"]
    filler = "y" * 80
    lines = [f"row {n:06} {filler}" for n in range(1, 60001)]  # about 5.5 MB: 21 windows
    lines[41] = "needle: the one early line that says so"
    offset = 0
    for start in range(0, len(lines), 20000):
        offset = append_log(server, task_id, run_id, offset, "".join(line + "\n" for line in lines[start:start + 20000]))
    post_json(server, f"/api/queue/v1/task/{task_id}/runs/{run_id}/completed", {})
    for size in window_sizes(browser):
        # A link to a line far before the end: that line read, marked and in the window.
        open_page(browser, f"{server}/tasks/{task_id}/runs/{run_id}#L123", "#log")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#L123.target"), f"line 123 marked ({size})")
        assert text_of(browser, "#L123 .line-text") == f"row 000123 {filler}"
        wait(browser, lambda d: in_view(d, "#L123"), f"line 123 in view ({size})")
        browser.save_screenshot(os.path.join(shots, f"log-line-link-{size}.png"))
        # A range, after a window of later lines.
        browser.find_element(By.ID, "log-later-button").click()
        wait(browser, lambda d: d.find_elements(By.ID, "L3000"), "later lines")
        browser.get(f"{server}/tasks/{task_id}/runs/{run_id}#L2990-L2993")
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#log .line.target")) == 4, f"a range ({size})")
        assert in_view(browser, "#L2990")
        # A search from the URL finds the early line, which the view never held.
        open_page(browser, f"{server}/tasks/{task_id}/runs/{run_id}?search=NEEDLE", "#log")
        wait(browser, lambda d: "1 matching lines in the whole log" in text_of(d, "#log-hits"), f"the search ({size})")
        assert not browser.find_elements(By.ID, "L42"), "the early line is not among those shown first"
        browser.find_element(By.CSS_SELECTOR, "#log-results a").click()
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#L42.target"), f"the match read and marked ({size})")
        assert text_of(browser, "#L42 .line-text") == "needle: the one early line that says so"
        wait(browser, lambda d: in_view(d, "#L42"), f"the match in view ({size})")
        browser.find_element(By.ID, "log-search").clear()
        browser.find_element(By.ID, "log-search").send_keys("not in this log\n")
        wait(browser, lambda d: text_of(d, "#log-hits") == "no match in the whole log (60000 lines)", "said plainly")


def test_a_blocked_task_names_its_dependencies_and_the_one_that_failed(server, queue, make_task, task_queue_id, browser, shots):
    build, lint, deploy, group = slugid_nice(), slugid_nice(), slugid_nice(), slugid_nice()
    queue.createTask(build, make_task(metadata=named("build the app"), taskGroupId=group))
    queue.createTask(lint, make_task(metadata=named("lint the app"), taskQueueId=f"{task_queue_id}-elsewhere", taskGroupId=group))
    queue.createTask(deploy, make_task(metadata=named("deploy the app"), dependencies=[lint, build], taskGroupId=group))
    open_page(browser, f"{server}/tasks/{deploy}", "#blocked")
    wait(browser, lambda d: "Waiting on 2 of 2 dependencies" in text_of(d, "#blocked"), "what it waits on")
    run_id = claim(queue, task_queue_id)["runId"]
    post_json(server, f"/api/queue/v1/task/{build}/runs/{run_id}/failed", {})
    for size in window_sizes(browser):
        open_page(browser, f"{server}/tasks/{deploy}", "#blocked")
        wait(browser, lambda d: "build the app failed first" in text_of(d, "#blocked"), f"the failed dependency named ({size})")
        assert "Blocked" in text_of(browser, "#blocked")
        listed = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#dependencies li")]
        assert listed == ["failed build the app", "pending lint the app"], f"names and states, the failure first: {listed}"
        browser.save_screenshot(os.path.join(shots, f"task-blocked-{size}.png"))
    # Its group says it is blocked rather than under way: nothing runs, one task waits in vain.
    queue.cancelTask(lint)
    open_page(browser, f"{server}/tasks/groups/{group}", "#progress")
    wait(browser, lambda d: d.find_elements(By.ID, "group-blocked"), "the group said blocked")
    assert "blocked: 1 task waits on dependencies that did not complete" in text_of(browser, "#group-blocked")


def test_overview_lists_queues_groups_and_failures(server, queue, make_task, task_queue_id, browser, shots):
    sign_out(browser, server)
    failing = slugid_nice()
    queue.createTask(failing, make_task(metadata=named("will fail")))
    claimed = claim(queue, task_queue_id)
    queue.reportFailed(claimed["status"]["taskId"], claimed["runId"])
    cancelled = slugid_nice()
    queue.createTask(cancelled, make_task(metadata=named("cancelled on purpose")))
    queue.cancelTask(cancelled)
    still_open = slugid_nice()
    queue.createTask(still_open, make_task(metadata=named("still pending")))
    open_page(browser, server + "/", f'tr[data-queue="{task_queue_id}"]')
    wait(browser, lambda d: "will fail" in text_of(d, ".grid"), "the failure listed")
    # Each recent group says how it went, under its namesake's name.
    assert text_of(browser, f'#recent-groups li[data-group="{failing}"] .badge') == "failed"
    assert text_of(browser, f'#recent-groups li[data-group="{failing}"] .tally') == "1 failed of 1"
    assert text_of(browser, f'#recent-groups li[data-group="{failing}"] .group-name') == "will fail"
    assert text_of(browser, f'#recent-groups li[data-group="{still_open}"] .badge') == "running"
    # A cancellation is not a failure, unless asked for.
    assert not browser.find_elements(By.CSS_SELECTOR, f'#failures li[data-task="{cancelled}"]')
    browser.find_element(By.ID, "toggle-cancelled").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'#failures li[data-task="{cancelled}"]'), "cancellations shown")
    open_page(browser, server + "/", f'tr[data-queue="{task_queue_id}"]')
    assert browser.find_elements(By.CSS_SELECTOR, f'a[href="/tasks/groups/{failing}"]'), "its group listed"
    assert browser.title == "Overview · Shoal", browser.title
    snap(browser, shots, "overview")
    # Every group, newest first, a click away and searchable (the search kept in the URL).
    browser.find_element(By.ID, "all-groups").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'#groups tr[data-group="{failing}"]'), "the group listed")
    assert browser.title == "Task groups · Shoal"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#groups tr")) >= 2
    browser.find_element(By.ID, "group-search").send_keys(failing[3:12].lower())
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#groups tr")) == 1, "only the group searched for")
    browser.refresh()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#groups tr[data-group]")) == 1, "the same after a reload")
    assert browser.find_element(By.ID, "group-search").get_attribute("value") == failing[3:12].lower()
    # The failures list: when each failed, cancellations left out unless asked for, in a time range.
    listing = f"{server}/tasks?taskQueueId={task_queue_id}"
    open_page(browser, listing, f'#tasks tr[data-task="{failing}"]')
    assert not browser.find_elements(By.CSS_SELECTOR, f'#tasks tr[data-task="{cancelled}"]')
    assert "Failed" in text_of(browser, "thead") and "just now" in text_of(browser, f'#tasks tr[data-task="{failing}"]')
    browser.find_element(By.ID, "cancels").click()
    Select(browser.find_element(By.ID, "within")).select_by_value("1h")
    browser.find_element(By.CSS_SELECTOR, "#task-filter button[type=submit]").click()
    wait(browser, lambda d: "within=1h" in d.current_url and "cancels=on" in d.current_url, "the filters in the URL")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'#tasks tr[data-task="{cancelled}"]'), "cancellations shown")
    assert browser.find_elements(By.CSS_SELECTOR, f'#tasks tr[data-task="{failing}"]')


def test_groups_are_named_and_say_how_they_went_wherever_listed(server, queue, make_task, task_queue_id, browser, shots):
    sign_out(browser, server)
    # Ten groups before it, so the overview's first page of ten leaves some for the next.
    for n in range(10):
        queue.createTask(slugid_nice(), make_task(taskQueueId="py-filler/wt", metadata=named(f"filler {n}")))
    group = slugid_nice()
    ids = {name: slugid_nice() for name in ["build a", "build b", "test"]}
    make = lambda name, **fields: make_task(taskGroupId=group, metadata=named(f"nightly {name}"), **fields)
    queue.createTask(ids["build a"], make("build a"))
    queue.createTask(ids["build b"], make("build b"))
    queue.createTask(ids["test"], make("test", dependencies=[ids["build a"]]))
    for _ in range(2):
        run = claim(queue, task_queue_id)
        if run["status"]["taskId"] == ids["build a"]:
            queue.reportFailed(run["status"]["taskId"], run["runId"])
        else:
            queue.reportCompleted(run["status"]["taskId"], run["runId"])
    entry = f'#recent-groups li[data-group="{group}"]'
    for size in window_sizes(browser):
        open_page(browser, server + "/", entry)
        assert text_of(browser, f"{entry} .badge") == "blocked", size
        assert text_of(browser, f"{entry} .group-name") == "nightly" and text_of(browser, f"{entry} .tally") == "1 failed of 3"
        # Its failure is listed under it, by its name.
        failures = f'#failures .failure-group[data-group="{group}"]'
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'{failures} li[data-task="{ids["build a"]}"]'), "its failure")
        assert text_of(browser, f"{failures} a").startswith("nightly")
    # Older groups are a click away, the page kept in the URL; and back.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#recent-groups li")) == 10
    browser.find_element(By.ID, "older-groups").click()
    wait(browser, lambda d: "groups=" in d.current_url and d.find_elements(By.ID, "newer-groups"), "the next page")
    assert not browser.find_elements(By.CSS_SELECTOR, entry)
    browser.refresh()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #newer-groups"), "the same page again")
    assert not browser.find_elements(By.CSS_SELECTOR, entry)
    browser.find_element(By.ID, "newer-groups").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, entry), "the first page again")
    # Every group: by name, with its verdict, searchable by name.
    open_page(browser, f"{server}/tasks/groups", f'#groups tr[data-group="{group}"]')
    row = f'#groups tr[data-group="{group}"]'
    assert "nightly" in text_of(browser, row) and text_of(browser, f"{row} .badge") == "blocked"
    browser.find_element(By.ID, "group-search").send_keys("nightly")
    wait(browser, lambda d: all("nightly" in r.text for r in d.find_elements(By.CSS_SELECTOR, "#groups tr")), "only nightly groups")
    snap(browser, shots, "groups-named")


def test_a_private_artifact_opens_for_a_reader_allowed_to_read_it(server, queue, auth, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("private artifact")))
    claim(queue, task_queue_id)
    expires = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    created = queue.createArtifact(task_id, "0", "private/notes.txt", {"storageType": "s3", "expires": expires, "contentType": "text/plain"})
    assert requests.put(created["putUrl"], data=b"the private notes").status_code == 200
    link = '[data-artifact="private/notes.txt"] a'
    # Anonymous: the link is the API's own, which refuses.
    sign_out(browser, server)
    open_page(browser, f"{server}/tasks/{task_id}", link)
    assert "bewit=" not in browser.find_element(By.CSS_SELECTOR, link).get_attribute("href")
    # A reader with the artifact's scope: the link is signed for a short while, and opens.
    reader = "ui-reader-" + slugid_nice()[:6]
    token = auth.createClient(reader, {"expires": expires, "description": "reads private artifacts",
                                       "scopes": ["queue:get-artifact:private/*"]})["accessToken"]
    sign_in(browser, server, reader, token)
    open_page(browser, f"{server}/tasks/{task_id}", link)
    assert "bewit=" in browser.find_element(By.CSS_SELECTOR, link).get_attribute("href")
    browser.find_element(By.CSS_SELECTOR, link).click()
    wait(browser, lambda d: "the private notes" in d.find_element(By.TAG_NAME, "body").text, "the artifact's content")
    # A signed-in reader without the scope gets the refusal, naming it, not the content.
    other = "ui-nobody-" + slugid_nice()[:6]
    token = auth.createClient(other, {"expires": expires, "description": "reads nothing private", "scopes": []})["accessToken"]
    sign_in(browser, server, other, token)
    open_page(browser, f"{server}/tasks/{task_id}", link)
    browser.find_element(By.CSS_SELECTOR, link).click()
    wait(browser, lambda d: "queue:get-artifact:private/notes.txt" in d.find_element(By.TAG_NAME, "body").text, "the scope named")
    assert "the private notes" not in browser.find_element(By.TAG_NAME, "body").text
    sign_out(browser, server)


def test_an_empty_log_says_so(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("says nothing")))
    claimed = claim(queue, task_queue_id)
    append_log(server, task_id, claimed["runId"], 0, "")
    queue.reportCompleted(task_id, claimed["runId"])
    for size in window_sizes(browser):
        open_page(browser, f"{server}/tasks/{task_id}", "#log-state")
        wait(browser, lambda d: d.find_elements(By.ID, "log-empty"), "the empty log said")
        assert text_of(browser, "#log-empty") == "The log is empty: this run wrote nothing to it.", size
        assert not browser.find_element(By.ID, "log").is_displayed(), "no empty box"


def test_a_listings_pages_shown_are_kept_in_the_url(server, queue, make_task, browser, shots):
    tag = "page:" + slugid_nice()[:8]
    for n in range(101):
        queue.createTask(slugid_nice(), make_task(tags={"page": tag[5:]}, metadata=named(f"paged {n}")))
    sign_out(browser, server)
    open_page(browser, f"{server}/tasks?tag={tag}", "#tasks tr:nth-child(100)")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tasks tr")) == 100 and "pages=" not in browser.current_url
    browser.find_element(By.CSS_SELECTOR, "button.more").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tasks tr")) == 101, "the second page")
    assert "pages=2" in browser.current_url and not browser.find_elements(By.CSS_SELECTOR, "button.more")
    browser.refresh()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #tasks tr")) == 101, "both pages again")


def test_task_lists_show_what_waits_or_runs_now_fleet_wide_and_by_several_tags(server, queue, make_task, browser, shots):
    # Two queues of their own, named to come first fleet-wide (queue by queue, by id).
    mark = slugid_nice()[:8].lower().replace("_", "x").replace("-", "x")
    first, second = f"0-{mark}/a", f"0-{mark}/b"
    ids = {name: slugid_nice() for name in ["build", "test", "other", "running"]}
    for name, task_queue_id, tags in [
        ("build", first, {"run": mark, "kind": "build"}),
        ("test", first, {"run": mark, "kind": "test"}),
        ("running", second, {"run": mark, "kind": "build"}),
        ("other", second, {"run": mark, "kind": "build"}),
    ]:
        definition = make_task(taskQueueId=task_queue_id, tags=tags, metadata=named(f"now {name}"))
        queue.createTask(ids[name], definition)
    assert claim(queue, second)["status"]["taskId"] == ids["running"]
    row = lambda name: f'#tasks tr[data-task="{ids[name]}"]'
    for size in window_sizes(browser):
        # Fleet-wide: queue by queue, each queue's line, with when each began to wait.
        open_page(browser, f"{server}/tasks?state=pending", row("build"))
        assert "Pending tasks, fleet-wide" in text_of(browser, "h1"), size
        assert "Waiting since" in text_of(browser, "thead") and "just now" in text_of(browser, row("build"))
        listed = [e.get_attribute("data-task") for e in browser.find_elements(By.CSS_SELECTOR, "#tasks tr")]
        assert listed[:3] == [ids["build"], ids["test"], ids["other"]], (size, listed)
        # Several tags: every one must be a task's; they stay in the URL and the form.
        browser.find_element(By.CSS_SELECTOR, "#task-filter input[name=tag]").send_keys(f"run:{mark} kind:build")
        browser.find_element(By.CSS_SELECTOR, "#task-filter button[type=submit]").click()
        wait(browser, lambda d: "tag=kind%3Abuild" in d.current_url, "both tags in the URL")
        open_page(browser, browser.current_url, row("build"))
        assert text_of(browser, "h1") == f"Pending tasks tagged run:{mark} and kind:build", size
        assert not browser.find_elements(By.CSS_SELECTOR, row("test")) and not browser.find_elements(By.CSS_SELECTOR, row("running"))
        assert browser.find_element(By.CSS_SELECTOR, "#task-filter input[name=tag]").get_attribute("value") == f"run:{mark} kind:build"
    # One queue's running tasks, counted.
    open_page(browser, f"{server}/tasks?state=running&taskQueueId={second}", row("running"))
    assert text_of(browser, "#count") == "1 running" and "Running since" in text_of(browser, "thead")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tasks tr")) == 1
    # A tag listing with two tags, newest first, counted alike.
    open_page(browser, f"{server}/tasks?tag=run:{mark}&tag=kind:build", row("other"))
    assert text_of(browser, "#count") == "3 tasks" and not browser.find_elements(By.CSS_SELECTOR, row("test"))
    snap(browser, shots, "tasks-pending-now")
    # A queue with nothing running says so.
    open_page(browser, f"{server}/tasks?state=running&taskQueueId={first}", "#count")
    wait(browser, lambda d: "Nothing is running now." in text_of(d, "#app"), "said so")
    # The overview's counts are links to those lists.
    open_page(browser, server + "/", f'tr[data-queue="{first}"] a.now-pending')
    browser.find_element(By.CSS_SELECTOR, f'tr[data-queue="{first}"] a.now-pending').click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"#app[data-ready] {row('test')}"), "the queue's pending tasks")
    assert text_of(browser, "#count") == "2 pending" and text_of(browser, "h1") == f"Pending tasks in {first}"


def test_group_page_shows_every_task_and_follows_changes_live(server, queue, make_task, task_queue_id, browser, shots):
    group = slugid_nice()
    ids = [slugid_nice() for _ in range(3)]
    for n, task_id in enumerate(ids):
        queue.createTask(task_id, make_task(taskGroupId=group, metadata=named(f"group task {n}")))
    open_page(browser, f"{server}/tasks/groups/{group}", "#loading.live")
    assert browser.title == f"Group {group} · Shoal", browser.title
    # Every state badge is readable: white text at WCAG AA contrast (4.5:1) on its colour.
    ratios = browser.execute_script("""
        const lum = (rgb) => { const c = rgb.match(/\\d+/g).slice(0, 3).map((v) => v / 255)
          .map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
          return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]; };
        return [...document.querySelectorAll('.badge')].map((b) => { const s = getComputedStyle(b);
          const [hi, lo] = [lum(s.color), lum(s.backgroundColor)].sort((a, b) => b - a);
          return [b.textContent, (hi + 0.05) / (lo + 0.05)]; });""")
    assert ratios and all(ratio >= 4.5 for _, ratio in ratios), ratios
    def shown(d):
        rows = d.find_elements(By.CSS_SELECTOR, "#tasks tr")
        return sorted((r.get_attribute("data-task"), r.get_attribute("data-state")) for r in rows)

    wait(browser, lambda d: shown(d) == sorted((task_id, "pending") for task_id in ids), "every task, pending")
    assert text_of(browser, "#progress") == "0 of 3 resolved (0%)"
    assert text_of(browser, "#durations") == "No task has started yet."
    browser.execute_script("window.notReloaded = true")
    rows_before = {task_id: browser.find_element(By.CSS_SELECTOR, f'tr[data-task="{task_id}"]') for task_id in ids}
    running = claim(queue, task_queue_id)["status"]["taskId"]
    wait(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-task="{running}"]').get_attribute("data-state") == "running",
        "the claimed task shown running",
    )
    assert browser.execute_script("return window.notReloaded === true"), "changed without a reload"

    def still_drawn(element):
        try:
            return browser.execute_script("return arguments[0].isConnected", element)
        except StaleElementReferenceException:
            return False

    # Only the row that changed was drawn again: a click never lands on a replaced row.
    assert not still_drawn(rows_before[running])
    assert all(still_drawn(rows_before[task_id]) for task_id in ids if task_id != running)
    wait(browser, lambda d: text_of(d, "#durations").startswith("Started just now · under way for"), "the group's durations")
    queue.reportCompleted(running, 0)
    wait(browser, lambda d: text_of(d, "#progress") == "1 of 3 resolved (33%)", "the progress moved on")
    assert f"longest group task {ids.index(running)}" in text_of(browser, "#durations")
    # Two tasks still pending: the time under way moves on without events, and the line's link
    # is not replaced as it does.
    longest_link = browser.find_element(By.CSS_SELECTOR, "#durations a")
    seen = set()
    wait(browser, lambda d: seen.add(text_of(d, "#durations .group-span")) or len(seen) >= 3, "the durations ticking")
    assert still_drawn(longest_link)
    # The state filter keeps only the completed one.
    browser.find_element(By.CSS_SELECTOR, 'button[data-state="completed"]').click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tasks tr")) == 1, "the filter applied")
    snap(browser, shots, "group")
    # The filters are in the URL: a reload (or the link, shared) shows the same view.
    browser.find_element(By.CSS_SELECTOR, 'button[data-state="pending"]').click()
    browser.find_element(By.ID, "filter").send_keys("task 2")
    wait(browser, lambda d: "q=task+2" in d.current_url and "state=pending" in d.current_url, "the view in the URL")
    browser.refresh()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #loading.live"), "reloaded")
    wait(browser, lambda d: shown(d) == [(ids[2], "pending")] or (ids[2] == running and shown(d) == []), "the same view")
    assert browser.find_element(By.ID, "filter").get_attribute("value") == "task 2"
    # The chips may be redrawn as the page hears its group: read them through `wait`.
    wait(browser, lambda d: "on" in d.find_element(By.CSS_SELECTOR, 'button[data-state="pending"]').get_attribute("class"),
         "the state chip kept")


def test_task_page_follows_the_live_log(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    command = [["sh", "-c", "echo 'hi there'"], "make test"]
    queue.createTask(task_id, make_task(metadata=named("logging task"), tags={"suite": "ui"}, payload={"command": command}))
    run_id = claim(queue, task_queue_id)["runId"]
    offset = append_log(server, task_id, run_id, 0, "first line\n")
    open_page(browser, f"{server}/tasks/{task_id}", "#log")
    # One command per line, an argv list quoted as a shell would take it.
    assert text_of(browser, "#command") == "sh -c 'echo '\\''hi there'\\'''\nmake test"
    wait(browser, lambda d: "first line" in text_of(d, "#log"), "the log so far")
    assert text_of(browser, "#log-state") == "following"
    browser.execute_script("window.notReloaded = true")
    append_log(server, task_id, run_id, offset, "second line\n")
    wait(browser, lambda d: "second line" in text_of(d, "#log"), "the log growing")
    snap(browser, shots, "task-running")
    expires = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    queue.createArtifact(task_id, run_id, "public/missing.txt", {"storageType": "error", "expires": expires,
                                                                "reason": "file-missing-on-worker", "message": "gone"})
    queue.reportCompleted(task_id, run_id)
    wait(browser, lambda d: text_of(d, "#log-state") == "finished", "the log finished")
    # An error artifact is said to be missing, not offered as a file to click.
    missing = f'li[data-artifact="public/missing.txt"]'
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, missing), "the error artifact listed")
    item = browser.find_element(By.CSS_SELECTOR, missing)
    assert "not produced" in item.text and not item.find_elements(By.TAG_NAME, "a"), item.text
    wait(browser, lambda d: "completed" in text_of(d, "h1"), "the task shown completed")
    assert browser.execute_script("return window.notReloaded === true"), "followed without a reload"
    snap(browser, shots, "task-completed")
    # Swarming's task list by tag links to it.
    open_page(browser, f"{server}/tasks?tag=suite:ui", f'tr[data-task="{task_id}"]')
    snap(browser, shots, "task-list")
    # Taskcluster's log URL, pasted, shows the task at that run; an unknown page says so.
    open_page(browser, f"{server}/tasks/{task_id}/runs/{run_id}/logs/public/logs/live.log", "#log")
    wait(browser, lambda d: "second line" in text_of(d, "#log"), "the run's log")
    open_page(browser, f"{server}/no/such/page", "p.error")
    assert "No page at /no/such/page" in text_of(browser, "p.error")
    assert browser.title == "Not found · Shoal"


def test_cancel_from_the_page_needs_the_scopes(server, queue, auth, make_task, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("cancel me")))
    # Anonymous: the actions are not offered.
    sign_out(browser, server)
    open_page(browser, f"{server}/tasks/{task_id}", "#cancel")
    assert not browser.find_element(By.ID, "cancel").is_enabled()
    # Signed in without the scopes: the server refuses, the page says so, nothing changes.
    nobody = "ui-nobody-" + slugid_nice()[:6]
    expires = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    token = auth.createClient(nobody, {"expires": expires, "description": "no scopes", "scopes": []})["accessToken"]
    sign_in(browser, server, nobody, token)
    open_page(browser, f"{server}/tasks/{task_id}", "#cancel")
    # The tab says which task it shows; the run has not started, and its log says so.
    assert browser.title == "cancel me · task · Shoal", browser.title
    assert text_of(browser, "#log-state") == "waiting to start"
    # A pending task may be cancelled or reprioritized, not rerun.
    assert not browser.find_element(By.ID, "rerun").is_enabled()
    assert browser.find_element(By.ID, "set-priority").is_enabled()
    # Each action asks first; declined, nothing is sent.
    browser.find_element(By.ID, "cancel").click()
    browser.switch_to.alert.dismiss()
    assert text_of(browser, "#action-result") == ""
    browser.find_element(By.ID, "cancel").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: "Not allowed" in text_of(d, "#action-result"), "the refusal shown")
    # The refusal lists the missing scopes, not the server's raw message; any of them would do.
    missing = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#action-result .missing-scopes li.mono")]
    assert len(missing) >= 1 and all(scope.startswith(("queue:", "assume:")) for scope in missing), missing
    assert "lacks one of these scopes:" in text_of(browser, "#action-result"), text_of(browser, "#action-result")
    assert "```" not in text_of(browser, "#action-result")
    assert queue.status(task_id)["status"]["state"] == "pending"
    # Signed in as root: cancelled, and the page says it was done.
    sign_in(browser, server, "root", ROOT_TOKEN)
    open_page(browser, f"{server}/tasks/{task_id}", "#cancel")
    browser.find_element(By.ID, "cancel").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: "cancelled" in text_of(d, "h1"), "the task shown cancelled, not a bare exception")
    assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").get_attribute("title") == "exception: canceled"
    wait(browser, lambda d: text_of(d, "#action-result") == "Cancel: done", "the result shown")
    assert queue.status(task_id)["status"]["state"] == "exception"
    # A run cancelled before it started has no log, and the page says so.
    wait(browser, lambda d: text_of(d, "#log-state") == "never started, so no log", "the log's state")
    # Resolved: rerun is offered, cancel and priority are not.
    assert browser.find_element(By.ID, "rerun").is_enabled()
    assert not browser.find_element(By.ID, "cancel").is_enabled()
    assert not browser.find_element(By.ID, "set-priority").is_enabled()
    snap(browser, shots, "task-cancelled")
    sign_out(browser, server)


def test_retrigger_and_edit_and_create_make_new_tasks(server, queue, make_task, task_queue_id, browser, shots):
    original = slugid_nice()
    queue.createTask(original, make_task(metadata=named("make me again"), tags={"suite": "ui"}))
    queue.reportFailed(claim(queue, task_queue_id)["status"]["taskId"], 0)
    before = queue.task(original)
    sign_in(browser, server, "root", ROOT_TOKEN)
    open_page(browser, f"{server}/tasks/{original}", "#retrigger")
    # Retrigger: asked first, then a new task with the same definition at new times.
    browser.find_element(By.ID, "retrigger").click()
    browser.switch_to.alert.dismiss()
    assert text_of(browser, "#action-result") == ""
    browser.find_element(By.ID, "retrigger").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: text_of(d, "#action-result").startswith("Retriggered as "), "the retrigger said")
    again = browser.find_element(By.ID, "retriggered").text
    copy = queue.task(again)
    assert again != original and queue.status(again)["status"]["state"] == "pending"
    assert copy["payload"] == before["payload"] and copy["metadata"] == before["metadata"] and copy["tags"] == before["tags"]
    assert copy["created"] > before["created"] and copy["deadline"] > before["deadline"]
    # A blank template from the task list; Edit and create: the definition prefilled, changed
    # here, created as a new task.
    open_page(browser, f"{server}/tasks", "#create-task")
    browser.find_element(By.ID, "create-task").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #definition"), "the blank create page")
    assert json.loads(browser.find_element(By.ID, "definition").get_attribute("value"))["payload"]["command"]
    open_page(browser, f"{server}/tasks/{original}", "#edit-and-create")
    browser.find_element(By.ID, "edit-and-create").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#app[data-ready] #definition"), "the create page")
    assert browser.title == "Create a task · Shoal"
    editor = browser.find_element(By.ID, "definition")
    definition = json.loads(editor.get_attribute("value"))
    assert definition["payload"] == before["payload"] and "provisionerId" not in definition
    snap(browser, shots, "task-create")
    # Bad input is refused with the reason, and nothing is created.
    set_value = "arguments[0].value = arguments[1]"
    browser.execute_script(set_value, editor, "{not json")
    browser.find_element(By.ID, "create").click()
    wait(browser, lambda d: "definition: not JSON" in text_of(d, "#create-result"), "the JSON error said")
    del definition["metadata"]["name"]
    browser.execute_script(set_value, editor, json.dumps(definition))
    browser.find_element(By.ID, "create").click()
    wait(browser, lambda d: "metadata" in text_of(d, "#create-result"), "the server's refusal said")
    new_id = browser.find_element(By.ID, "new-task-id").get_attribute("value")
    assert requests.get(f"{server}/api/queue/v1/task/{new_id}").status_code == 404
    definition["metadata"]["name"] = "made by hand"
    browser.execute_script(set_value, editor, json.dumps(definition))
    browser.find_element(By.ID, "create").click()
    wait(browser, lambda d: d.current_url == f"{server}/tasks/{new_id}", "the new task's page")
    wait(browser, lambda d: "made by hand" in text_of(d, "h1"), "the new task shown")
    assert queue.task(new_id)["payload"] == before["payload"]
    sign_out(browser, server)


def test_group_actions_rerun_the_failed_and_cancel_the_group(server, queue, make_task, task_queue_id, browser, shots):
    group = slugid_nice()
    ids = [slugid_nice() for _ in range(3)]
    for n, task_id in enumerate(ids):
        queue.createTask(task_id, make_task(taskGroupId=group, metadata=named(f"grouped {n}")))
    failed = claim(queue, task_queue_id)["status"]["taskId"]
    queue.reportFailed(failed, 0)
    sign_in(browser, server, "root", ROOT_TOKEN)
    open_page(browser, f"{server}/tasks/groups/{group}", "#loading.live")
    browser.find_element(By.ID, "rerun-failed").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: text_of(d, "#group-action-result") == "Rerun failed: 1 rerun", "the rerun said")
    assert queue.status(failed)["status"]["state"] == "pending"
    # Cancelling a group seals it first (the queue cancels only sealed groups); declined, nothing.
    browser.find_element(By.ID, "cancel-group").click()
    browser.switch_to.alert.dismiss()
    assert "sealed" not in queue.getTaskGroup(group)
    browser.find_element(By.ID, "cancel-group").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: text_of(d, "#group-action-result") == "Cancel group: 3 cancelled", "the cancel said")
    assert all(queue.status(task_id)["status"]["state"] == "exception" for task_id in ids)
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, '#tasks tr[data-state="exception"]')) == 3, "shown cancelled")
    badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, '#tasks tr[data-state="exception"] .badge')]
    assert badges == ["cancelled"] * 3, badges
    snap(browser, shots, "group-cancelled")
    sign_out(browser, server)


def test_worker_page_quarantines_the_worker(server, queue, make_task, task_queue_id, browser, shots):
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(metadata=named("nightly build")))
    run_id = claim(queue, task_queue_id, worker_id="w-quarantine", caches=["checkout", "ccache"])["runId"]
    post_json(server, f"/api/queue/v1/task/{task_id}/runs/{run_id}/failed", {"stats": {"exitCode": 2}})
    provisioner, worker_type = task_queue_id.split("/")
    page = f"{server}/provisioners/{provisioner}/worker-types/{worker_type}/workers/ui/w-quarantine"
    sign_in(browser, server, "root", ROOT_TOKEN)
    open_page(browser, page, "#quarantine")
    Select(browser.find_element(By.ID, "quarantine-for")).select_by_value("24")
    browser.find_element(By.ID, "quarantine-reason").send_keys("flaky disk")
    browser.find_element(By.ID, "quarantine").click()
    wait(browser, lambda d: "quarantined" in text_of(d, "h1"), "the worker shown quarantined")
    worker = fleet_worker(server, provisioner, worker_type, "ui", "w-quarantine")
    assert "quarantineUntil" in worker
    wait(browser, lambda d: "flaky disk" in text_of(d, "#events"), "the quarantine in its events")
    said = text_of(browser, "#quarantine-said")
    assert said == "in 24 h by root: flaky disk", f"until when, by whom, why: {said}"
    assert "Named caches\ncheckout, ccache" in text_of(browser, ".grid"), "the caches it holds"
    # Its history is a table: the task by name, its state and exit code.
    wait(browser, lambda d: "nightly build" in text_of(d, "#recent-tasks"), "the recent task by name")
    wait(browser, lambda d: "claimed just now nightly build" in text_of(d, "#events"), "the events name the task")
    row = text_of(browser, f'#recent-tasks tr[data-task="{task_id}"]')
    assert "failed" in row and "just now" in row and row.endswith("2"), row
    assert "Claimed" in text_of(browser, "#recent-tasks thead")
    snap(browser, shots, "worker")
    open_page(browser, f"{server}/provisioners/{provisioner}/worker-types/{worker_type}", '#workers tr[data-worker="ui/w-quarantine"]')
    snap(browser, shots, "queue")
    open_page(browser, f"{server}/workers?state=quarantined", '#workers tr[data-worker="ui/w-quarantine"]')
    snap(browser, shots, "workers")
    # Release, then Terminate: each asks first, and the page shows the worker as it is then.
    open_page(browser, page, "#release")
    browser.find_element(By.ID, "release").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: "quarantined" not in text_of(d, "h1") and d.find_elements(By.ID, "terminate"), "released")
    assert fleet_worker(server, provisioner, worker_type, "ui", "w-quarantine").get("state") != "quarantined"
    browser.find_element(By.ID, "terminate").click()
    browser.switch_to.alert.dismiss()
    assert not fleet_worker(server, provisioner, worker_type, "ui", "w-quarantine").get("terminating"), "dismissed: nothing done"
    browser.find_element(By.ID, "terminate").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: not d.find_elements(By.ID, "terminate") and d.find_elements(By.ID, "quarantine"), "terminating")
    assert fleet_worker(server, provisioner, worker_type, "ui", "w-quarantine")["terminating"] is True
    sign_out(browser, server)


def test_a_workers_history_is_paged_with_when_each_run_was_claimed(server, queue, make_task, task_queue_id, browser, shots):
    ids = [slugid_nice() for _ in range(22)]
    for n, task_id in enumerate(ids):
        queue.createTask(task_id, make_task(metadata=named(f"history {n}")))
        queue.reportCompleted(claim(queue, task_queue_id, worker_id="w-history")["status"]["taskId"], 0)
    provisioner, worker_type = task_queue_id.split("/")
    page = f"{server}/provisioners/{provisioner}/worker-types/{worker_type}/workers/ui/w-history"
    sign_out(browser, server)
    for size in window_sizes(browser):
        open_page(browser, page, "#recent-tasks tbody tr:nth-child(20)")
        rows = browser.find_elements(By.CSS_SELECTOR, "#recent-tasks tbody tr")
        assert len(rows) == 20 and rows[0].get_attribute("data-task") == ids[-1], size
        assert "history 21" in rows[0].text and "just now" in rows[0].text and "completed" in rows[0].text
        # Beyond the record's 20: the next page, kept in the URL.
        browser.find_element(By.CSS_SELECTOR, "button.more").click()
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#recent-tasks tbody tr")) == 22, "the older runs")
        assert browser.find_elements(By.CSS_SELECTOR, "#recent-tasks tbody tr")[-1].get_attribute("data-task") == ids[0]
        assert "pages=2" in browser.current_url and not browser.find_elements(By.CSS_SELECTOR, "button.more")
    snap(browser, shots, "worker-history")


def test_the_backlog_by_dimensions_warns_when_no_live_worker_matches(server, queue, make_task, task_queue_id, browser, shots):
    plan9 = {"os": ["plan9"]}
    first = slugid_nice()
    queue.createTask(first, make_task(dimensions=plan9, metadata=named("ran on plan9")))
    queue.reportCompleted(claim(queue, task_queue_id, worker_id="p9", dimensions=plan9)["status"]["taskId"], 0)
    queue.quarantineWorker(*task_queue_id.split("/"), "ui", "p9", {"quarantineUntil": taskcluster.fromNowJSON("1 hour")})
    warm = slugid_nice()
    queue.createTask(warm, make_task(metadata=named("ran on linux")))
    queue.reportCompleted(claim(queue, task_queue_id, worker_id="lx", dimensions={"os": ["linux"]})["status"]["taskId"], 0)
    waiting = slugid_nice()
    queue.createTask(waiting, make_task(dimensions=plan9, metadata=named("waits for plan9")))
    anywhere = slugid_nice()
    queue.createTask(anywhere, make_task(metadata=named("runs anywhere")))
    sign_out(browser, server)
    # The task says nothing will run it, and why: its only match is quarantined.
    open_page(browser, f"{server}/tasks/{waiting}", "#no-worker")
    assert text_of(browser, "#no-worker").startswith("No live worker has the dimensions this task waits on (1 quarantined);")
    snap(browser, shots, "task-stranded")
    # A task a live worker could run raises no warning.
    open_page(browser, f"{server}/tasks/{anywhere}", "#actions")
    assert not browser.find_elements(By.ID, "no-worker")
    # The queue's backlog, longest-waiting first, with the oldest pending run.
    provisioner, worker_type = task_queue_id.split("/")
    open_page(browser, f"{server}/provisioners/{provisioner}/worker-types/{worker_type}", "#backlog")
    rows = [(r.get_attribute("data-stranded"), r.text) for r in browser.find_elements(By.CSS_SELECTOR, "#backlog tbody tr")]
    assert rows[0][0] == "true" and "os:plan9" in rows[0][1] and "No live worker matches (1 quarantined)" in rows[0][1], rows
    assert rows[1][0] == "false" and "any worker" in rows[1][1] and "1 live, 1 quarantined" in rows[1][1], rows
    assert text_of(browser, "#oldest-pending").startswith("since ")
    snap(browser, shots, "queue-backlog")
    # The workers filtered by several dimensions, every one a worker's; on a phone too, where
    # each worker's dimensions go under its name.
    claim(queue, task_queue_id, worker_id="lx-fast", dimensions={"os": ["linux"], "pool": ["fast"]})
    queue_page = f"{server}/provisioners/{provisioner}/worker-types/{worker_type}"
    for size in window_sizes(browser):
        open_page(browser, f"{queue_page}?dimension=os:linux&dimension=pool:fast", '#workers tr[data-worker="ui/lx-fast"]')
        assert [r.get_attribute("data-worker") for r in browser.find_elements(By.CSS_SELECTOR, "#workers tr")] == ["ui/lx-fast"], size
        chips = browser.find_element(By.CSS_SELECTOR, '#workers tr[data-worker="ui/lx-fast"] td:first-child .narrow')
        assert chips.is_displayed() == (size == "phone") and "pool:fast" in chips.get_attribute("textContent"), size
    field = browser.find_element(By.CSS_SELECTOR, "#worker-filter input[name=dimension]")
    assert field.get_attribute("value") == "os:linux pool:fast"
    field.clear()
    field.send_keys("os:linux")
    browser.find_element(By.CSS_SELECTOR, "#worker-filter button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#app[data-ready] #workers tr[data-worker="ui/lx"]'), "both linux workers")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#workers tr")) == 2


def test_slices_are_numbered_as_runs_name_them_and_say_when_they_expired(server, queue, make_task, browser, shots):
    task_id = slugid_nice()
    slices = [
        {"dimensions": {"os": ["mac"]}, "expiresAfter": 60},
        {"dimensions": {"os": ["linux"]}, "expiresAfter": 600, "waitForCapacity": True},
    ]
    queue.createTask(task_id, make_task(slices=slices, metadata=named("falls back")))
    sign_out(browser, server)
    open_page(browser, f"{server}/tasks/{task_id}", "#slices li")
    # No live Mac: the first slice was skipped at once; the run waits on the second, which says until when.
    items = [" ".join(li.text.split()) for li in browser.find_elements(By.CSS_SELECTOR, "#slices li")]
    assert items[0].startswith("0: os:mac waits 60 s · expired by just now"), items
    assert items[1].startswith("1: os:linux waits 600 s · waited on since just now, until in 10 min"), items
    assert "1, current since just now" in text_of(browser, '.run[data-run="0"]')
    snap(browser, shots, "task-slices")


def test_worker_page_shows_its_maintenance_and_what_it_posted(server, task_queue_id, browser, shots):
    provisioner, worker_type = task_queue_id.split("/")
    workers = f"/api/queue/v1/provisioners/{provisioner}/worker-types/{worker_type}/workers/ui/w-sick"
    other = f"{provisioner}/other-{worker_type}"
    post_json(server, f"/api/queue/v1/claim-work/{task_queue_id.replace('/', '%2F')}",
              {"workerGroup": "ui", "workerId": "w-sick", "tasks": 1, "taskQueueIds": [task_queue_id, other]})
    post_json(server, f"{workers}/heartbeat", {"maintenance": "health check failed: disk full"})
    post_json(server, f"{workers}/events", {"kind": "error", "message": "cannot mount /cache"})
    open_page(browser, f"{server}{workers.replace('/api/queue/v1', '')}", "#maintenance")
    assert "maintenance" in text_of(browser, "h1")
    assert "health check failed: disk full by the worker" in text_of(browser, "#maintenance")
    assert "error" in text_of(browser, "#events") and "cannot mount /cache" in text_of(browser, "#events")
    snap(browser, shots, "worker-maintenance")
    # One machine serving two queues: its record in the other is a click away.
    assert text_of(browser, "#serves") == f"{task_queue_id}, {other}"
    browser.find_element(By.CSS_SELECTOR, "#serves a").click()
    wait(browser, lambda d: other in text_of(d, "p.muted"), "the worker's record in the other queue")


def test_graph_page_draws_the_graph_with_states(server, queue, make_task, task_queue_id, browser, shots):
    graph_id = slugid_nice()
    tasks = {
        label: {"requires": requires, "task": make_task(metadata=named(label))}
        for label, requires in [("build", []), ("test", ["build"]), ("report", ["test"])]
    }
    body = json.dumps({"routing": "ui", "metadata": {"name": "ui graph"}, "tasks": tasks}).encode()
    url = f"{server}/api/scheduler/v1/task-graph/{graph_id}"
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_TOKEN, "algorithm": "sha256"}, url, "PUT", content=body, content_type="application/json"
    )
    res = requests.put(url, data=body, headers={"Authorization": sender.request_header, "Content-Type": "application/json"})
    assert res.status_code == 200, res.text
    open_page(browser, f"{server}/task-graphs/{graph_id}", "#graph svg a[data-task]")
    def states(d):
        return sorted(a.get_attribute("data-state") for a in d.find_elements(By.CSS_SELECTOR, "#graph svg a[data-task]"))

    wait(browser, lambda d: states(d) == ["pending", "unscheduled", "unscheduled"], "each task coloured by its state")
    claim(queue, task_queue_id)
    wait(browser, lambda d: states(d) == ["running", "unscheduled", "unscheduled"], "the claimed task recoloured live")
    snap(browser, shots, "graph")


def named(name):
    return {"name": name, "description": "a task of the UI tests", "owner": "tests@example.com", "source": "https://example.com/shoal"}


def slugid_nice():
    return taskcluster.slugid.nice()


def test_the_index_hooks_and_secrets_pages(server, queue, make_task, task_queue_id, browser, shots):
    credentials = {"clientId": "root", "accessToken": ROOT_TOKEN}
    index = taskcluster.Index({"rootUrl": server, "credentials": credentials})
    hooks = taskcluster.Hooks({"rootUrl": server, "credentials": credentials})
    secrets = taskcluster.Secrets({"rootUrl": server, "credentials": credentials})
    auth = taskcluster.Auth({"rootUrl": server, "credentials": credentials})
    expires = taskcluster.stringDate(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    ns = "ui" + slugid_nice()[:8].lower().replace("_", "x").replace("-", "x")

    # The index browser: namespaces, then the entry with its latest run's artifacts.
    task_id = slugid_nice()
    queue.createTask(task_id, make_task(routes=[f"index.{ns}.app.latest"], metadata=named("indexed build")))
    claim(queue, task_queue_id)
    queue.createArtifact(task_id, 0, "public/app.tar.gz", {"storageType": "reference", "url": "https://example.com/app.tgz",
                                                            "expires": expires, "contentType": "application/gzip"})
    queue.reportCompleted(task_id, 0)
    sign_out(browser, server)
    open_page(browser, f"{server}/tasks/index/{ns}", "#namespaces tr[data-namespace]")
    browser.find_element(By.CSS_SELECTOR, f'#namespaces tr[data-namespace="{ns}.app"] a').click()
    open_page(browser, browser.current_url, f'#indexed-tasks tr[data-indexed="{ns}.app.latest"]')
    browser.find_element(By.CSS_SELECTOR, f'#indexed-tasks tr[data-indexed="{ns}.app.latest"] a').click()
    open_page(browser, browser.current_url, "#index-artifacts li a")
    assert browser.title == f"Index {ns}.app.latest · Shoal", browser.title
    assert task_id in text_of(browser, "#index-entry")
    link = browser.find_element(By.CSS_SELECTOR, "#index-artifacts li a").get_attribute("href")
    assert link.endswith(f"/api/index/v1/task/{ns}.app.latest/artifacts/public/app.tar.gz"), link
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#index-crumbs a")] == ["Index", ns, "app", "latest"]
    snap(browser, shots, "index")

    # Hooks: listed by group; a hook's page triggers it with the signed-in client and lists its fires.
    group, hook_id = ns, "nightly/decision"
    auth.createRole(f"hook-id:{group}/{hook_id}", {"description": "d", "scopes": ["queue:create-task:*", "queue:scheduler-id:*"]})
    hooks.createHook(group, hook_id, {
        "metadata": {"name": "Nightly decision", "description": "d", "owner": "o@example.com"},
        "schedule": ["0 0 3 * * *"],
        "task": {"taskQueueId": task_queue_id, "payload": {"why": {"$eval": "payload.why"}},
                 "metadata": {"name": "from the hook", "description": "d", "owner": "o@example.com", "source": "https://x"}},
        "triggerSchema": {"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]},
    })
    open_page(browser, f"{server}/hooks", ".error")
    assert "hooks:list-hooks:" in text_of(browser, "#app"), "anonymous: the refusal names the scope"
    sign_in(browser, server, "root", ROOT_TOKEN)
    open_page(browser, f"{server}/hooks", f'tr[data-hook="{group}/{hook_id}"]')
    browser.find_element(By.CSS_SELECTOR, f'tr[data-hook="{group}/{hook_id}"] a').click()
    open_page(browser, browser.current_url, "#trigger")
    assert "0 0 3 * * *" in text_of(browser, "#app") and "Never fired." in text_of(browser, "#last-fires")
    payload = browser.find_element(By.ID, "trigger-payload")
    payload.clear()
    payload.send_keys('{"why": 1}')
    browser.find_element(By.ID, "trigger").click()
    wait(browser, lambda d: "InputError" in text_of(d, "#trigger-result"), "the payload refused")
    payload.clear()
    payload.send_keys('{"why": "from the page"}')
    browser.find_element(By.ID, "trigger").click()
    wait(browser, lambda d: text_of(d, "#trigger-result").startswith("created "), "the task created")
    created = browser.find_element(By.CSS_SELECTOR, "#trigger-result a").text
    assert queue.task(created)["payload"] == {"why": "from the page"}
    open_page(browser, browser.current_url, f'#last-fires tr[data-fire="{created}"]')
    assert "triggerHook" in text_of(browser, "#last-fires")
    snap(browser, shots, "hook")

    # Secrets: names for a client allowed to list them, never values.
    secrets.set(f"{ns}/deploy", {"secret": {"password": "never-on-a-page"}, "expires": expires})
    open_page(browser, f"{server}/secrets", f'li[data-secret="{ns}/deploy"]')
    assert "never-on-a-page" not in browser.page_source
    snap(browser, shots, "secrets")
    sign_out(browser, server)
