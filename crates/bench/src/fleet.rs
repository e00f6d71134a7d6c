//! The fleet: how long a cancel takes to stop a worker's process, and what many registered
//! workers cost listWorkers and claimWork.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::server::{Server, start_worker};
use crate::{definition, percentile};

/// Whether process `pid` has exited (gone, or a zombie not yet reaped).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// The host PID of the process running with exactly `argv`, once there is one (a sandboxed
/// task's own `$$` is its PID namespace's).
async fn pid_of(argv: &[&str]) -> i32 {
    let wanted: Vec<u8> = argv.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    loop {
        let found = std::fs::read_dir("/proc").into_iter().flatten().flatten().find_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            (std::fs::read(entry.path().join("cmdline")).ok()? == wanted).then_some(pid)
        });
        if let Some(pid) = found {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// cancelTask sent -> the task's process gone, `samples` times, through one `shoal worker`.
pub(crate) async fn cancel(samples: usize) -> anyhow::Result<()> {
    let server = Server::start(None, &[]).await?;
    let work = tempfile::tempdir()?;
    let root = server.base.replace("/api/queue/v1", "");
    let _worker = start_worker(&root, "bench/cancel", 1, &work.path().join("work"), &[])?;
    let client = server.client();
    let mut latencies = Vec::with_capacity(samples);
    for n in 0..samples {
        let seconds = (300_000 + n).to_string();
        let mut task = definition("bench/cancel");
        task["payload"] = json!({"command": [["sleep", seconds]], "maxRunTime": 600});
        let task_id = slugid::nice();
        let res = client.put(format!("{}/task/{task_id}", server.base)).json(&task).send().await?;
        anyhow::ensure!(res.status().is_success(), "createTask: {}", res.text().await?);
        let pid = pid_of(&["sleep", &seconds]).await;
        let sent = Instant::now();
        let res = client.post(format!("{}/task/{task_id}/cancel", server.base)).send().await?;
        anyhow::ensure!(res.status().is_success(), "cancelTask: {}", res.text().await?);
        while !exited(pid) {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        latencies.push(sent.elapsed());
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "cancel: cancelTask sent -> the running process gone (SIGTERM; `sleep` needs no grace), {samples} cancels: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
    server.stop().await;
    Ok(())
}

/// Times `samples` GETs of `url` (each must succeed); the median.
async fn median_get(client: &reqwest::Client, url: &str, samples: usize) -> anyhow::Result<(Duration, Value)> {
    let mut times = Vec::with_capacity(samples);
    let mut last = Value::Null;
    for _ in 0..samples {
        let sent = Instant::now();
        let res = client.get(url).send().await?;
        anyhow::ensure!(res.status().is_success(), "{url}: {}", res.status());
        last = res.json().await?;
        times.push(sent.elapsed());
    }
    times.sort();
    Ok((percentile(&times, 0.5), last))
}

/// The dimensions of the `i`th worker (and of a task that one of them matches): one of three
/// `os` and one of ten `pool`s.
fn dimensions_of(i: usize) -> Value {
    let os = ["Linux", "Windows", "Mac"][i % 3];
    json!({"os": [os], "pool": [format!("p{}", i % 10)]})
}

/// Runs `call(i)` for each `i` of `range`, 32 at a time; the first error, if any.
async fn thirty_two_at_a_time<F, Fut>(range: std::ops::Range<usize>, call: F) -> anyhow::Result<()>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures_util::stream::iter(range).map(call).buffer_unordered(32).collect::<Vec<_>>().await.into_iter().collect()
}

/// With `n` workers registered (by heartbeats, varied dimensions): listWorkers' first page,
/// a filtered listing, a queue's dimension summary, `claims` claimWork calls, then the
/// queue's backlog with 10,000 runs pending.
async fn registry_with(n: usize, claims: usize) -> anyhow::Result<Duration> {
    let server = Server::start(None, &[]).await?;
    let client = server.client();
    let base = server.base.clone();
    let workers = format!("{base}/provisioners/bench/worker-types/fleet/workers");
    let registered = Instant::now();
    thirty_two_at_a_time(0..n, |i| {
        let (client, workers) = (client.clone(), workers.clone());
        async move {
            let body = json!({"dimensions": dimensions_of(i)});
            let res = client.post(format!("{workers}/g/w{i:05}/heartbeat")).json(&body).send().await?;
            anyhow::ensure!(res.status().is_success(), "heartbeat: {}", res.status());
            Ok(())
        }
    })
    .await?;
    let registering = registered.elapsed();
    let (page, body) = median_get(&client, &format!("{workers}?limit=1000"), 20).await?;
    let listed = body["workers"].as_array().map_or(0, Vec::len);
    let (filtered, _) = median_get(&client, &format!("{workers}?dimension=pool:p3&limit=100"), 20).await?;
    let (summary, _) = median_get(&client, &format!("{base}/task-queues/bench%2Ffleet/dimensions"), 20).await?;

    for _ in 0..claims {
        let res = client.put(format!("{base}/task/{}", slugid::nice())).json(&definition("bench/fleet")).send().await?;
        anyhow::ensure!(res.status().is_success(), "createTask: {}", res.status());
    }
    let mut times = Vec::with_capacity(claims);
    let body =
        json!({"workerGroup": "g", "workerId": "w00003", "tasks": 1, "dimensions": {"os": ["Mac"], "pool": ["p3"]}});
    for _ in 0..claims {
        let sent = Instant::now();
        let res: Value =
            client.post(format!("{base}/claim-work/bench%2Ffleet")).json(&body).send().await?.json().await?;
        times.push(sent.elapsed());
        anyhow::ensure!(res["tasks"].as_array().is_some_and(|t| t.len() == 1), "claimWork came back empty: {res}");
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let claim_p99 = percentile(&times, 0.99);
    println!(
        "fleet of {n}: registered at {:.0} workers/s; listWorkers page of {listed} {:.1} ms, filtered by a dimension \
         {:.1} ms, dimension summary {:.1} ms (medians of 20); {claims} claimWork p50 {:.2} ms, p99 {:.2} ms; server RSS {} MB",
        n as f64 / registering.as_secs_f64(),
        ms(page),
        ms(filtered),
        ms(summary),
        ms(percentile(&times, 0.5)),
        ms(claim_p99),
        server.rss_mb(),
    );
    // The backlog: pending runs over 30 dimension sets (the workers' os and pool), matched
    // against every registered worker.
    let pending = 10_000;
    thirty_two_at_a_time(0..pending, |i| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let mut task = definition("bench/fleet");
            task["dimensions"] = dimensions_of(i);
            let res = client.put(format!("{base}/task/{}", slugid::nice())).json(&task).send().await?;
            anyhow::ensure!(res.status().is_success(), "createTask: {}", res.status());
            Ok(())
        }
    })
    .await?;
    let (backlog, body) = median_get(&client, &format!("{base}/task-queues/bench%2Ffleet/backlog"), 20).await?;
    let sets = body["backlog"].as_array().map_or(0, Vec::len);
    println!(
        "fleet of {n}: backlog of {} pending runs in {sets} dimension sets, matched against the workers: {:.1} ms (median of 20)",
        body["pendingTasks"],
        ms(backlog)
    );
    server.stop().await;
    Ok(claim_p99)
}

/// [`registry_with`] for each size; the claim p99 of the largest over the smallest's.
pub(crate) async fn registry(sizes: &[usize], claims: usize) -> anyhow::Result<()> {
    let mut p99s = Vec::new();
    for &n in sizes {
        p99s.push(registry_with(n, claims).await.with_context(|| format!("fleet of {n}"))?);
    }
    if let (Some(first), Some(last)) = (p99s.first(), p99s.last()) {
        println!(
            "fleet: claimWork p99 with {} workers / with {}: {:.2}x",
            sizes[sizes.len() - 1],
            sizes[0],
            last.as_secs_f64() / first.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}
