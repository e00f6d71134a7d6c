//! Several `shoal server` processes on one PostgreSQL database, used the way a fleet uses
//! them: clients and workers spread over the servers.

#[path = "../../store/tests/support/postgres.rs"]
mod pg;
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use shoal_client::{Beat, ClaimAnswer, ClaimingWorker, Client, Outcome};
use tokio::sync::Mutex;

const N_SERVERS: usize = 3;
const N_TASKS: usize = 10_000;
/// Tasks form chains of this length: each depends on the one before it.
const CHAIN: usize = 10;
const N_WORKERS: usize = 12;

fn definition(dependencies: &[String]) -> Value {
    let now = shoal_client::now();
    json!({
        "taskQueueId": "fleet/linux",
        "created": now.to_string(),
        "deadline": now.plus_secs(3600).to_string(),
        "dependencies": dependencies,
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_servers_on_one_database_run_every_task_exactly_once() {
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let dirs: Vec<_> = (0..N_SERVERS).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut servers = Vec::new();
    for dir in &dirs {
        // Idle workers are woken by work committed on any server; the short long-poll only
        // lets them notice the end of the test sooner.
        servers.push(support::start_server(dir.path(), &["--database", &url, "--claim-wait", "2"]).await);
    }
    let clients: Vec<Client> = servers.iter().map(|(_, root)| support::client(root)).collect();

    // Creators: each chain is created in order (a dependency must exist first), chains
    // spread over the servers.
    let ids: Vec<String> = (0..N_TASKS).map(|_| slugid::nice()).collect();
    let ids = Arc::new(ids);
    let mut creators = tokio::task::JoinSet::new();
    for creator in 0..16 {
        let (ids, clients) = (Arc::clone(&ids), clients.clone());
        creators.spawn(async move {
            for chain in (creator..N_TASKS / CHAIN).step_by(16) {
                for link in 0..CHAIN {
                    let index = chain * CHAIN + link;
                    let dependencies = if link == 0 { vec![] } else { vec![ids[index - 1].clone()] };
                    let client = &clients[index % N_SERVERS];
                    client.create_task(&ids[index], &definition(&dependencies)).await.expect("createTask");
                }
            }
        });
    }

    // Workers: claim and complete, recording every (task, run) handed out.
    let claims: Arc<Mutex<HashMap<(String, u32), usize>>> = Arc::default();
    let completed = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..N_WORKERS {
        let client = clients[worker % N_SERVERS].clone();
        let (claims, completed) = (Arc::clone(&claims), Arc::clone(&completed));
        workers.spawn(async move {
            let worker_id = format!("w{worker}");
            while completed.load(Ordering::SeqCst) < N_TASKS {
                let claimed =
                    client.claim_work("fleet/linux", "g", &worker_id, 8, &json!({})).await.expect("claimWork");
                for claim in claimed {
                    let task_id = claim.status.task_id.to_string();
                    *claims.lock().await.entry((task_id.clone(), claim.run_id)).or_default() += 1;
                    client.report(&task_id, claim.run_id, &Outcome::Completed).await.expect("reportCompleted");
                    completed.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    while let Some(res) = creators.join_next().await {
        res.unwrap();
    }
    while let Some(res) = workers.join_next().await {
        res.unwrap();
    }

    let claims = claims.lock().await;
    assert_eq!(claims.len(), N_TASKS, "every task was claimed");
    assert!(claims.values().all(|&n| n == 1), "no run was handed out twice");
    assert!(claims.keys().all(|(_, run_id)| *run_id == 0), "no task needed a second run");
    assert_eq!(completed.load(Ordering::SeqCst), N_TASKS, "every task completed exactly once");
    // Every dependent was released, on whichever server its dependency resolved.
    for (index, task_id) in ids.iter().enumerate().step_by(97) {
        let status = clients[index % N_SERVERS].task_status(task_id).await.unwrap();
        assert_eq!(status.state.as_str(), "completed", "{task_id}");
        assert_eq!(status.runs.len(), 1, "{task_id}");
    }
}

/// What keeps two servers running (their processes and data dirs).
type Running = Vec<(tokio::process::Child, tempfile::TempDir)>;

/// Two servers on a fresh database, long-polling at most `claim_wait` seconds, and a client of each.
async fn two_servers(claim_wait: &str) -> (Running, Client, Client) {
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let mut running = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let (child, root) =
            support::start_server(dir.path(), &["--database", url.as_str(), "--claim-wait", claim_wait]).await;
        clients.push(support::client(&root));
        running.push((child, dir));
    }
    let b = clients.pop().unwrap();
    (running, clients.pop().unwrap(), b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_created_on_one_server_wakes_a_worker_waiting_on_another() {
    // A long-poll far longer than the test: without a cross-server wake-up the waiting
    // worker would get an empty answer after it.
    let (_servers, a, b) = two_servers("120").await;
    for round in 0..3 {
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.claim_work("fleet/linux", "g", "w", 1, &json!({})).await }
        });
        let task_id = slugid::nice();
        a.create_task(&task_id, &definition(&[])).await.unwrap();
        let claimed = waiting.await.unwrap().unwrap();
        assert_eq!(claimed.len(), 1, "round {round}: the worker on B got the task created on A");
        assert_eq!(claimed[0].status.task_id.to_string(), task_id);
        b.report(&task_id, 0, &Outcome::Completed).await.unwrap();
    }
}

/// The worker record `id` of `fleet/linux`, as `client`'s server reads it.
async fn worker_record(client: &Client, id: &str) -> Option<Value> {
    client.worker("fleet/linux", "g", id).await.ok()
}

/// A claim of worker `id` on `client`'s server, waited on in the background.
fn claim_in_background(client: &Client, id: &'static str, dimensions: Value) -> tokio::task::JoinHandle<ClaimAnswer> {
    let client = client.clone();
    tokio::spawn(async move {
        let worker = ClaimingWorker {
            worker_group: "g",
            worker_id: id,
            dimensions: &dimensions,
            caches: None,
            more_queues: &[],
        };
        client.claim_for_worker("fleet/linux", &worker, 1).await.expect("claimWork")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_change_through_one_server_reaches_its_claims_on_another() {
    // A long-poll far longer than the test: a claim that does not hear of the change gets an
    // empty answer after it.
    let (_servers, a, b) = two_servers("120").await;
    let guard = std::time::Duration::from_secs(60);

    // B has just seen worker w (it remembers whether w may claim), then w waits there.
    let task_id = slugid::nice();
    a.create_task(&task_id, &definition(&[])).await.unwrap();
    assert_eq!(b.claim_work("fleet/linux", "g", "w", 1, &json!({})).await.unwrap().len(), 1);
    b.report(&task_id, 0, &Outcome::Completed).await.unwrap();
    let waiting = claim_in_background(&b, "w", json!({}));
    a.terminate_worker("fleet/linux", "g", "w").await.expect("terminate through A");
    // A hang guard, not a measurement.
    let answer = tokio::time::timeout(guard, waiting).await.expect("the claim on B heard of it").unwrap();
    assert!(answer.terminate && answer.tasks.is_empty(), "asked to stop, through the other server: {answer:?}");

    // Worker m enters maintenance through A; its claim waits on B, held; the heartbeat that
    // ends it, through A, lets that claim take the pending task.
    let no_dimensions = json!({});
    let out =
        |maintenance| Beat { dimensions: &no_dimensions, caches: &[], maintenance: Some(maintenance), exiting: false };
    a.heartbeat("fleet/linux", "g", "m", &out(Some("cooling down"))).await.unwrap();
    let task_id = slugid::nice();
    a.create_task(&task_id, &definition(&[])).await.unwrap();
    let waiting = claim_in_background(&b, "m", json!({"pool": ["b"]}));
    // B wrote the claim's sighting (its dimensions) before the claim waits.
    for _ in 0..1000 {
        let record = worker_record(&a, "m").await.expect("m's record");
        if record["dimensions"]["pool"] == json!(["b"]) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let record = worker_record(&a, "m").await.expect("m's record");
    assert_eq!(record["dimensions"]["pool"], json!(["b"]), "the claim on B was seen");
    assert!(!waiting.is_finished(), "held in maintenance");
    a.heartbeat("fleet/linux", "g", "m", &out(None)).await.unwrap();
    let answer = tokio::time::timeout(guard, waiting).await.expect("the claim on B heard of it").unwrap();
    let claimed: Vec<String> = answer.tasks.iter().map(|claim| claim.status.task_id.to_string()).collect();
    assert_eq!(claimed, [task_id], "out of maintenance through A, the claim waiting on B took the task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_log_is_written_through_one_server_and_followed_through_another() {
    let (mut servers, a, b) = two_servers("2").await;
    let task_id = slugid::nice();
    b.create_task(&task_id, &definition(&[])).await.unwrap();
    let claimed = b.claim_work("fleet/linux", "g", "w", 1, &json!({})).await.unwrap();
    assert_eq!(claimed.len(), 1);
    // Appends through A, a follower on B: no routing of a task's logs to one server.
    assert_eq!(a.append_log(&task_id, 0, 0, b"building\n").await.unwrap(), 9);
    let mut following = b.log(&task_id, 0, true).await.unwrap();
    let first = following.chunk().await.unwrap().expect("the bytes written so far");
    assert_eq!(&first[..], b"building\n");
    assert_eq!(a.append_log(&task_id, 0, 0, b"building\n").await.unwrap(), 9, "a resent chunk adds nothing");
    assert_eq!(a.append_log(&task_id, 0, 9, b"testing\n").await.unwrap(), 17);
    // A hang guard, not a measurement: without the append reaching B's follower, it waits.
    let second = tokio::time::timeout(std::time::Duration::from_secs(60), following.chunk())
        .await
        .expect("B's follower got the bytes appended through A while the run lives")
        .unwrap()
        .expect("more bytes");
    assert_eq!(&second[..], b"testing\n");
    let gap = a.append_log(&task_id, 0, 40, b"lost\n").await.unwrap_err();
    assert!(gap.is_conflict(), "a chunk past the end is refused: {gap}");
    // The server that took every append is lost mid-run: the log lives on through B.
    servers[0].0.kill().await.unwrap();
    let so_far = b.log(&task_id, 0, false).await.unwrap().bytes().await.unwrap();
    assert_eq!(&so_far[..], b"building\ntesting\n");
    b.report(&task_id, 0, &Outcome::Completed).await.unwrap();
    let rest = tokio::time::timeout(std::time::Duration::from_secs(60), following.bytes())
        .await
        .expect("the follower on B saw the run end")
        .unwrap();
    assert!(rest.is_empty(), "nothing was written after the second chunk");
    let whole = b.log(&task_id, 0, false).await.unwrap().bytes().await.unwrap();
    assert_eq!(&whole[..], b"building\ntesting\n");
}

/// createTask through `root` signed as `credentials`; answers the HTTP status.
async fn create_as(root: &str, credentials: &shoal_client::Credentials) -> u16 {
    let client = Client::new(root).unwrap().with_credentials(Some(credentials.clone()));
    match client.create_task(&slugid::nice(), &definition(&[])).await {
        Ok(_) => 200,
        Err(err) => err.status().map_or(0, |status| status.as_u16()),
    }
}

/// Calls `create_as` until it answers `want` (another server reloads clients within about
/// a second of a change; there is no event to await across processes).
async fn until_create_answers(root: &str, credentials: &shoal_client::Credentials, want: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = create_as(root, credentials).await;
        if status == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "still {status}, not {want}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_made_on_one_server_works_on_another_until_deleted() {
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_a, root_a) = support::start_server(dir_a.path(), &["--database", &url]).await;
    let (_b, root_b) = support::start_server(dir_b.path(), &["--database", &url]).await;
    let body = json!({
        "description": "made on server A",
        "expires": shoal_client::now().plus_secs(3600).to_string(),
        "scopes": ["queue:create-task:*", "queue:scheduler-id:*"],
    });
    let url_a = format!("{root_a}/api/auth/v1/clients/fleet%2Fsubmitter");
    let made: Value = support::signed(&reqwest::Client::new(), reqwest::Method::PUT, &url_a, Some(&body))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let submitter = shoal_client::Credentials {
        client_id: "fleet/submitter".into(),
        access_token: made["accessToken"].as_str().expect("a token").to_owned(),
        certificate: None,
    };
    assert_eq!(create_as(&root_a, &submitter).await, 200, "at once on the server that made it");
    until_create_answers(&root_b, &submitter, 200).await;

    let deleted = support::signed(&reqwest::Client::new(), reqwest::Method::DELETE, &url_a, None).send().await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(create_as(&root_a, &submitter).await, 401);
    until_create_answers(&root_b, &submitter, 401).await;
}

/// Rows of every table that holds something of a task, on the database at `url`.
fn task_rows_left(url: &str) -> Vec<(String, i64)> {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        let tables = [
            "tasks",
            "task_dependencies",
            "task_groups",
            "task_secrets",
            "task_tags",
            "artifacts",
            "task_graphs",
            "graph_tasks",
            "completions",
            "log_chunks",
        ];
        tables
            .iter()
            .map(|table| {
                let n: i64 = db.query_one(&format!("SELECT count(*) FROM {table}"), &[]).expect("count").get(0);
                ((*table).to_owned(), n)
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    })
    .join()
    .expect("no panic")
}

/// `shoal_tasks_expired_total` of the server at `root`.
async fn expired_by(root: &str) -> u64 {
    let text = reqwest::get(format!("{root}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("shoal_tasks_expired_total "))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Two servers sweep expiry on one database at once: every task (with its dependencies,
/// group, secrets, tags, artifacts, live logs and graph) is deleted by exactly one of them,
/// and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_expire_each_task_once_and_leave_nothing() {
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_a, root_a) = support::start_server(dir_a.path(), &["--database", &url]).await;
    let (_b, root_b) = support::start_server(dir_b.path(), &["--database", &url]).await;
    let clients = [support::client(&root_a), support::client(&root_b)];
    // Everything is done (or past its deadline) within seconds of its creation and expires
    // right after (each task's times from its own creation: creating them all may take a
    // while on a loaded machine).
    let short = |mut task: Value| {
        let now = shoal_client::now();
        task["created"] = json!(now.to_string());
        task["deadline"] = json!(now.plus_secs(4).to_string());
        task["expires"] = json!(now.plus_secs(5).to_string());
        task
    };
    const CHAINS: usize = 40;
    let mut ids = Vec::new();
    for chain in 0..CHAINS {
        let client = &clients[chain % 2];
        let (first, second) = (slugid::nice(), slugid::nice());
        let mut task = short(definition(&[]));
        task["taskGroupId"] = json!(format!("{}", ids.first().cloned().unwrap_or_else(|| first.clone())));
        task["tags"] = json!({"chain": chain.to_string()});
        if chain % 3 == 0 {
            task["secrets"] = json!({"token": format!("s{chain}")});
        }
        // Half the first tasks run at once (on a queue of their own, so the claim takes this
        // one), with an artifact and a live log each; the rest pass their deadline.
        let runs = chain % 2 == 0;
        if runs {
            task["taskQueueId"] = json!("fleet/run");
        }
        client.create_task(&first, &task).await.expect("createTask");
        let mut dependent = short(definition(std::slice::from_ref(&first)));
        dependent["taskGroupId"] = task["taskGroupId"].clone();
        client.create_task(&second, &dependent).await.expect("createTask");
        ids.extend([first.clone(), second]);
        if runs {
            let claim =
                clients[1].claim_work("fleet/run", "g", "w", 1, &json!({})).await.unwrap().pop().expect("claimed");
            assert_eq!(claim.status.task_id.to_string(), first);
            let reference = json!({"storageType": "reference", "url": "https://example.com/x",
                "expires": claim.task["expires"], "contentType": "text/plain"});
            clients[0].create_artifact(&first, claim.run_id, "public/x", &reference).await.expect("createArtifact");
            clients[1].append_log(&first, claim.run_id, 0, b"output\n").await.expect("a live log");
            clients[0].report(&first, claim.run_id, &Outcome::Completed).await.expect("reportCompleted");
        }
    }
    let mut graph = json!({"routing": "exp", "tasks": {}});
    for label in ["a", "b"] {
        graph["tasks"][label] = json!({"requires": [], "task": short(definition(&[]))});
    }
    clients[0].create_task_graph(&slugid::nice(), &graph).await.expect("createTaskGraph");
    let n_tasks = ids.len() as u64 + 2;

    // Both due loops sweep every 250 ms; done when both together deleted every task.
    let mut expired = 0;
    for _ in 0..400 {
        expired = expired_by(&root_a).await + expired_by(&root_b).await;
        if expired >= n_tasks {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(expired, n_tasks, "each task deleted once, by one of the two servers");
    let left = tokio::task::spawn_blocking(move || task_rows_left(&url)).await.unwrap();
    assert!(left.is_empty(), "rows left behind: {left:?}");
    for (client, id) in clients.iter().cycle().zip(&ids).take(4) {
        assert!(client.task_status(id).await.unwrap_err().status() == Some(reqwest::StatusCode::NOT_FOUND));
    }
}

/// A task completed through one server is indexed in that transaction, so another server
/// finds it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_indexed_through_one_server_is_found_on_another() {
    let (_servers, a, b) = two_servers("2").await;
    let task_id = slugid::nice();
    let mut task = definition(&[]);
    task["routes"] = json!(["index.fleet.build.latest"]);
    a.create_task(&task_id, &task).await.unwrap();
    let claimed = a.claim_work("fleet/linux", "g", "w", 1, &json!({})).await.unwrap();
    assert_eq!(claimed.len(), 1);
    a.report(&task_id, 0, &Outcome::Completed).await.unwrap();
    let found = b.find_indexed("fleet.build.latest").await.unwrap();
    assert_eq!(found["taskId"], task_id.as_str());
}

/// A hook that fires every second, read as due by both servers every second, fires once
/// per scheduled second: each fire's time appears once, each task is created once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_fire_a_scheduled_hook_once_per_time() {
    let (_servers, a, b) = two_servers("2").await;
    let http = reqwest::Client::new();
    let role = format!("{}/api/auth/v1/roles/hook-id:fleet%2Fcron", a.root_url());
    let body = json!({"description": "d", "scopes": ["queue:create-task:*", "queue:scheduler-id:*"]});
    let res = support::signed(&http, reqwest::Method::PUT, &role, Some(&body)).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    let hook = json!({
        "metadata": {"name": "n", "description": "d", "owner": "o@example.com"},
        "schedule": ["* * * * * *"],
        "task": {"taskQueueId": "fleet/cron", "payload": {},
                 "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}},
    });
    let url = format!("{}/api/hooks/v1/hooks/fleet/cron", b.root_url());
    let res = support::signed(&http, reqwest::Method::PUT, &url, Some(&hook)).send().await.unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    // Both servers' loops read it due each second; wait for five fires, claiming their tasks.
    let mut claimed: Vec<String> = Vec::new();
    while claimed.len() < 5 {
        for claim in a.claim_work("fleet/cron", "g", "w", 8, &json!({})).await.unwrap() {
            claimed.push(claim.status.task_id.to_string());
        }
    }
    let res = support::signed(&http, reqwest::Method::DELETE, &url, None).send().await.unwrap();
    assert!(res.status().is_success());
    let fires_url = format!("{}/api/hooks/v1/hooks/fleet/cron/last-fires", a.root_url());
    // Removed: its fires went with it; the tasks stay, each created once.
    assert_eq!(support::signed(&http, reqwest::Method::GET, &fires_url, None).send().await.unwrap().status(), 404);
    let mut created: Vec<String> = Vec::new();
    for task_id in &claimed {
        let status = b.task_status(task_id).await.unwrap();
        assert_eq!(status.runs.len(), 1, "{task_id}");
        let task: Value = http
            .get(format!("{}/api/queue/v1/task/{task_id}", b.root_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        created.push(task["created"].as_str().unwrap().to_owned());
    }
    let mut distinct = created.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), created.len(), "each scheduled second fired once: {created:?}");
}
