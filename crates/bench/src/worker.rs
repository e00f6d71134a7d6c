//! The benchmarks of a real `shoal worker` and of live logs.

use super::*;
use crate::timings::Timings;

/// Trivial tasks through one `shoal worker`, isolated as asked.
pub(crate) async fn worker(n_tasks: usize, capacity: u32, isolation: &str) -> anyhow::Result<()> {
    let server = Server::start(None, &[]).await?;
    let client = server.client();
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let work_dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let worker = server::start_worker(&root, "bench/trivial", capacity, work_dir.path(), &["--isolation", isolation])?;
    let body = bytes_of(&json!({
        "taskQueueId": "bench/trivial",
        "created": definition("x")["created"],
        "deadline": definition("x")["deadline"],
        "payload": {"command": [["true"]], "maxRunTime": 60},
        "metadata": {"name": "trivial", "description": "", "owner": "bench@example.com", "source": "https://example.com"}
    }))?;
    let worker_stat = format!("/proc/{}/stat", worker.id().unwrap_or_default());
    let cpu_before = server::process_tree_cpu_secs(&worker_stat);
    let started = Instant::now();
    let mut creators =
        spawn_creators(std::slice::from_ref(&server.base), body, n_tasks, 8, 0, &Arc::new(Timings::default()));
    while let Some(res) = creators.join_next().await {
        res??;
    }
    // Done when nothing is pending or claimed any more.
    loop {
        let counts: Value =
            client.get(format!("{}/task-queues/bench%2Ftrivial/counts", server.base)).send().await?.json().await?;
        if counts["pendingTasks"] == 0 && counts["claimedTasks"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let worker_cpu = server::process_tree_cpu_secs(&worker_stat) - cpu_before;
    println!(
        "worker: {n_tasks} trivial tasks (`true`) through one worker process (capacity {capacity}, isolation {isolation}) in {elapsed:.2} s = {:.0} tasks/s; worker CPU with its commands {:.2} ms/task",
        n_tasks as f64 / elapsed,
        worker_cpu * 1e3 / n_tasks as f64
    );
    drop(worker);
    server.stop().await;
    Ok(())
}

/// A chatty task's output through the worker to a live-log reader.
pub(crate) async fn chatty(megabytes: usize) -> anyhow::Result<()> {
    let server = Server::start(None, &[]).await?;
    let client = server.client();
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let work_dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let worker = server::start_worker(&root, "bench/chatty", 1, work_dir.path(), &[])?;
    let bytes = megabytes * 1024 * 1024;
    let mut task = definition("bench/chatty");
    task["payload"] = json!({
        "command": [format!("yes 'compiling src/some/module.rs ... ok (a typical line of build output)' | head -c {bytes}")],
        "maxRunTime": 600
    });
    let task_id = slugid::nice();
    let res = client.put(format!("{}/task/{task_id}", server.base)).json(&task).send().await?;
    anyhow::ensure!(res.status().is_success(), "createTask failed");
    // Follow from the moment the run exists.
    let started = Instant::now();
    let mut res = loop {
        let res = client.get(format!("{root}/logs/v1/{task_id}/0?follow=1")).send().await?;
        if res.status().is_success() {
            break res;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let mut n_read = 0usize;
    while let Some(chunk) = res.chunk().await? {
        n_read += chunk.len();
    }
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(n_read >= bytes, "the follower read {n_read} of {bytes} bytes");
    let mib = n_read as f64 / (1024.0 * 1024.0);
    println!(
        "chatty task: {mib:.0} MiB of output through one worker to a following reader in {elapsed:.2} s = {:.0} MiB/s",
        mib / elapsed
    );
    drop(worker);
    server.stop().await;
    Ok(())
}

/// Live-log appends and a follower, straight against the server.
pub(crate) async fn live_log(megabytes: usize, chunk_kb: usize) -> anyhow::Result<()> {
    let server = Server::start(None, &[]).await?;
    let client = server.client();
    let task_id = slugid::nice();
    let res = client.put(format!("{}/task/{task_id}", server.base)).json(&definition("bench/log")).send().await?;
    anyhow::ensure!(res.status().is_success(), "createTask failed");
    let body = json!({"workerGroup": "bench", "workerId": "chatty", "tasks": 1});
    let claimed: ClaimAnswer =
        client.post(format!("{}/claim-work/bench%2Flog", server.base)).json(&body).send().await?.json().await?;
    anyhow::ensure!(claimed.tasks.len() == 1, "nothing claimed");
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let log_url = format!("{root}/logs/v1/{task_id}/0");

    let reader = {
        let (client, url) = (client.clone(), format!("{log_url}?follow=1"));
        tokio::spawn(async move {
            let mut res = client.get(url).send().await?;
            let mut n_read = 0usize;
            while let Some(chunk) = res.chunk().await? {
                n_read += chunk.len();
            }
            Ok::<(usize, Instant), anyhow::Error>((n_read, Instant::now()))
        })
    };
    // Printable output, as a chatty build would write.
    let chunk: Vec<u8> =
        (0..chunk_kb * 1024).map(|n| if n % 100 == 99 { b'\n' } else { b'a' + (n % 26) as u8 }).collect();
    let total = megabytes * 1024 * 1024;
    let started = Instant::now();
    let mut offset = 0usize;
    while offset < total {
        let res = client.post(format!("{log_url}?offset={offset}")).body(chunk.clone()).send().await?;
        anyhow::ensure!(res.status().is_success(), "append failed: {}", res.text().await?);
        res.bytes().await?;
        offset += chunk.len();
    }
    let written = started.elapsed().as_secs_f64();
    let res = client.post(format!("{}/task/{task_id}/runs/0/completed", server.base)).send().await?;
    anyhow::ensure!(res.status().is_success(), "reportCompleted failed");
    let (n_read, finished) = reader.await??;
    anyhow::ensure!(n_read == offset, "the follower read {n_read} of {offset} bytes");
    let elapsed = finished.saturating_duration_since(started).as_secs_f64();
    let mib = offset as f64 / (1024.0 * 1024.0);
    println!(
        "live log: {mib:.0} MiB in {chunk_kb} KiB chunks, appended (fsync each) at {:.0} MiB/s; \
         the following reader had all of it after {elapsed:.2} s = {:.0} MiB/s",
        mib / written,
        mib / elapsed
    );
    server.stop().await;
    Ok(())
}

/// What a task's request costs through its credentials proxy: one task alternates requests
/// to the server directly and through `TASKCLUSTER_PROXY_URL` (signed there), timing each.
pub(crate) async fn proxy(requests: usize, isolation: &str) -> anyhow::Result<()> {
    const TIMED: &str = r#"
import os, sys, time, urllib.request
path = "/api/queue/v1/task/%s/status" % os.environ["TASK_ID"]
bases = {"direct": os.environ["TASKCLUSTER_ROOT_URL"], "proxy": os.environ["TASKCLUSTER_PROXY_URL"]}
times = {name: [] for name in bases}
for _ in range(int(sys.argv[1])):
    for name, base in bases.items():
        started = time.perf_counter()
        urllib.request.urlopen(base + path).read()
        times[name].append((time.perf_counter() - started) * 1000)
for name, taken in times.items():
    taken.sort()
    print("%s p50 %.2f ms p99 %.2f ms" % (name, taken[len(taken) // 2], taken[int(len(taken) * 0.99)]))
"#;
    let server = Server::start(None, &[]).await?;
    let client = server.client();
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let work_dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let worker = server::start_worker(&root, "bench/proxy", 1, work_dir.path(), &["--isolation", isolation])?;
    let mut task = definition("bench/proxy");
    task["payload"] = json!({
        "command": [["python3", "-c", TIMED, requests.to_string()]],
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        "features": {"taskclusterProxy": true},
        "maxRunTime": 600
    });
    let task_id = slugid::nice();
    let res = client.put(format!("{}/task/{task_id}", server.base)).json(&task).send().await?;
    anyhow::ensure!(res.status().is_success(), "createTask failed: {}", res.text().await?);
    // Following the log ends when the run does.
    let log = loop {
        let res = client.get(format!("{root}/logs/v1/{task_id}/0?follow=1")).send().await?;
        if res.status().is_success() {
            break res.text().await?;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let timed: Vec<&str> = log.lines().filter(|line| line.contains(" p50 ")).collect();
    anyhow::ensure!(timed.len() == 2, "the task did not report its timings:\n{log}");
    println!("proxy: {requests} requests each way from one task (isolation {isolation}): {}", timed.join("; "));
    drop(worker);
    server.stop().await;
    Ok(())
}

/// A task's mount of a `megabytes` artifact through a real worker: the first run downloads it
/// into the worker's cache, the next `runs` take it from there; as a file and unpacked.
pub(crate) async fn mounts(megabytes: usize, runs: usize) -> anyhow::Result<()> {
    let server = Server::start(None, &[]).await?;
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let work_dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let worker = server::start_worker(&root, "bench/mounts", 1, work_dir.path(), &[])?;
    let run = |payload: Value| run_task(&server, payload);
    let build = || {
        run(json!({
            "command": [format!("head -c {megabytes}M /dev/urandom > data.bin && tar czf data.tar.gz data.bin")],
            "artifacts": [{"type": "file", "path": "data.tar.gz", "name": "public/data.tar.gz"}],
            "maxRunTime": 600
        }))
    };
    // One build per kind, so that each kind's first run downloads.
    let (file_build, dir_build) = (build().await?.0, build().await?.0);
    let content = |build: &str| json!({"taskId": build, "artifact": "public/data.tar.gz"});
    for (kind, mount) in [
        ("file", json!({"file": "data.tar.gz", "content": content(&file_build)})),
        (
            "directory (tar.gz unpacked)",
            json!({"directory": "data", "format": "tar.gz", "content": content(&dir_build)}),
        ),
    ] {
        let payload = json!({"command": [["true"]], "mounts": [mount], "maxRunTime": 600});
        let mut cached = Vec::new();
        let mut first = None;
        for _ in 0..=runs {
            let (_, stats) = run(payload.clone()).await?;
            let (millis, fetched) =
                (stats["mountMs"].as_u64().unwrap_or(0), stats["bytesFetched"].as_u64().unwrap_or(0));
            match first {
                None => first = Some((millis, fetched)),
                Some(_) => cached.push(millis),
            }
        }
        cached.sort_unstable();
        let (millis, fetched) = first.unwrap_or_default();
        let mib = fetched as f64 / (1024.0 * 1024.0);
        println!(
            "mounts: {megabytes} MiB artifact as a {kind}: first run {millis} ms ({mib:.0} MiB fetched, {:.0} MiB/s), \
             from the cache median {} ms over {runs} runs",
            mib / (millis.max(1) as f64 / 1000.0),
            cached.get(cached.len() / 2).copied().unwrap_or_default()
        );
    }
    drop(worker);
    server.stop().await;
    Ok(())
}

/// The image benchmark's builder: `examples/images/docker-save.sh`.
const DOCKER_SAVE: &str = include_str!("../../../examples/images/docker-save.sh");

/// Tasks in images: the first use of a `megabytes` image built by a task (busybox and random
/// bytes), then `runs` cached starts, each after a sandboxed task without an image; for
/// both, the worker's time from claim to the command's end (`setupMs + runMs`).
pub(crate) async fn images(megabytes: usize, runs: usize) -> anyhow::Result<()> {
    let server = Server::start(None, &[]).await?;
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let work_dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let worker = server::start_worker(&root, "bench/mounts", 1, work_dir.path(), &[])?;
    let (build, _) = run_task(
        &server,
        json!({
            "command": [
                "mkdir -p base/bin && cp /bin/busybox base/bin/ && ln -s busybox base/bin/true",
                format!("head -c {megabytes}M /dev/urandom > base/data.bin && sh docker-save.sh image.tar base")
            ],
            "mounts": [{"file": "docker-save.sh", "content": {"raw": DOCKER_SAVE}}],
            "artifacts": [{"type": "file", "path": "image.tar", "name": "public/image.tar"}],
            "maxRunTime": 600
        }),
    )
    .await?;
    let in_image = json!({
        "image": {"type": "task-image", "taskId": build, "path": "public/image.tar"},
        "command": ["/bin/true"],
        "maxRunTime": 60
    });
    let (_, first) = run_task(&server, in_image.clone()).await?;
    let millis = |stats: &Value, key: &str| stats[key].as_u64().unwrap_or(0);
    println!(
        "images: first use of a {megabytes} MiB image (download and unpack): {} ms ({} bytes fetched)",
        millis(&first, "mountMs"),
        first["bytesFetched"]
    );
    let plain = json!({"command": [["true"]], "maxRunTime": 60});
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (_, stats) = run_task(&server, plain.clone()).await?;
        without.push(millis(&stats, "setupMs") + millis(&stats, "runMs"));
        let (_, stats) = run_task(&server, in_image.clone()).await?;
        with.push(millis(&stats, "setupMs") + millis(&stats, "runMs"));
    }
    let (with, without) = (percentiles(&mut with), percentiles(&mut without));
    println!(
        "images: claim to command's end over {runs} interleaved pairs: in the cached image p50 {} ms p99 {} ms; \
         sandboxed without an image p50 {} ms p99 {} ms; the image adds {} ms at p50",
        with.0,
        with.1,
        without.0,
        without.1,
        with.0.saturating_sub(without.0)
    );
    drop(worker);
    server.stop().await;
    Ok(())
}

/// p50 and p99 of `samples`.
fn percentiles(samples: &mut [u64]) -> (u64, u64) {
    samples.sort_unstable();
    let at = |q: f64| samples.get(((samples.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    (at(0.5), at(0.99))
}

/// Creates a task with `payload` and waits for it to complete; answers its id and its run's
/// stats.
async fn run_task(server: &Server, payload: Value) -> anyhow::Result<(String, Value)> {
    let client = server.client();
    let mut task = definition("bench/mounts");
    task["payload"] = payload;
    let task_id = slugid::nice();
    let res = client.put(format!("{}/task/{task_id}", server.base)).json(&task).send().await?;
    anyhow::ensure!(res.status().is_success(), "createTask failed: {}", res.text().await?);
    loop {
        let status: Value = client.get(format!("{}/task/{task_id}/status", server.base)).send().await?.json().await?;
        let run = &status["status"]["runs"][0];
        match run["state"].as_str() {
            Some("completed") => {
                let result: Value =
                    client.get(format!("{}/task/{task_id}/result", server.base)).send().await?.json().await?;
                return Ok((task_id, result["runs"][0]["stats"].clone()));
            }
            Some("failed" | "exception") => anyhow::bail!("task {task_id} did not complete: {run}"),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
