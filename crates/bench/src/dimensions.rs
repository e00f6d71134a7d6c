//! Swarming's hardest matching case: tens of thousands of distinct dimension sets pending in
//! one queue, and thousands of workers with varied dimensions each polling for its own.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::server::Server;
use crate::{definition, percentile};

const QUEUE: &str = "bench/dims";
const OSES: [&str; 3] = ["Linux", "Mac", "Windows"];
/// Devices per worker: task `i` targets device `i`, which worker `i / DEVICES` has.
const DEVICES: usize = 5;

/// Task `i`'s dimensions: its worker's pool and OS (every seventh by a `|` choice), a CPU
/// every worker has, and its own device: a distinct set per task.
fn task_dimensions(i: usize) -> Value {
    let owner = i / DEVICES;
    let os = if i.is_multiple_of(7) { "Linux|Mac|Windows".to_owned() } else { OSES[owner % 3].to_owned() };
    json!({"pool": [format!("p{}", owner % 10)], "os": [os], "cpu": ["x86-64"], "device": [format!("d{i}")]})
}

/// Worker `w`'s dimensions: one pool, one OS, two CPU values, its devices.
fn worker_dimensions(w: usize) -> Value {
    let devices: Vec<String> = (w * DEVICES..(w + 1) * DEVICES).map(|i| format!("d{i}")).collect();
    json!({"pool": [format!("p{}", w % 10)], "os": [OSES[w % 3]], "cpu": ["x86", "x86-64"], "device": devices})
}

/// Runs `f(i)` for `0..n`, `concurrency` at a time; the first error.
async fn each<F, Fut>(n: usize, concurrency: usize, f: F) -> anyhow::Result<Vec<Duration>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Duration>>,
{
    futures_util::stream::iter(0..n)
        .map(f)
        .buffer_unordered(concurrency)
        .collect::<Vec<anyhow::Result<Duration>>>()
        .await
        .into_iter()
        .collect()
}

/// `tasks` pending tasks with distinct dimension sets, then `workers` workers each claiming
/// once, `concurrency` at a time, in an order unrelated to the tasks'.
pub(crate) async fn dimensions(
    tasks: usize,
    workers: usize,
    concurrency: usize,
    database: Option<&str>,
) -> anyhow::Result<()> {
    anyhow::ensure!(workers * DEVICES <= tasks, "--workers must be at most --tasks / {DEVICES}");
    let args: Vec<&str> = database.map(|url| vec!["--database", url]).unwrap_or_default();
    let server = Server::start(None, &args).await?;
    let client = server.client();
    let base = server.base.clone();
    let created = Instant::now();
    each(tasks, 32, |i| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let mut task = definition(QUEUE);
            task["dimensions"] = task_dimensions(i);
            let res = client.put(format!("{base}/task/{}", slugid::nice())).json(&task).send().await?;
            anyhow::ensure!(res.status().is_success(), "createTask: {}", res.text().await?);
            Ok(Duration::ZERO)
        }
    })
    .await?;
    let creating = created.elapsed();
    // A stride coprime with the worker count visits every worker once, far from task order.
    let stride = (7919..).find(|s| gcd(*s, workers) == 1).unwrap_or(1);
    let started = Instant::now();
    let mut times = each(workers, concurrency, |n| {
        let (client, base) = (client.clone(), base.clone());
        let w = (n * stride) % workers;
        async move {
            let body = json!({"workerGroup": "g", "workerId": format!("w{w}"), "tasks": 1,
                "dimensions": worker_dimensions(w)});
            let sent = Instant::now();
            let res: Value =
                client.post(format!("{base}/claim-work/bench%2Fdims")).json(&body).send().await?.json().await?;
            let took = sent.elapsed();
            let got = res["tasks"].as_array().map_or(0, Vec::len);
            anyhow::ensure!(got == 1, "worker {w} claimed {got} tasks: {res}");
            let dims = &res["tasks"][0]["task"]["dimensions"]["device"][0];
            let device: usize = dims.as_str().and_then(|d| d[1..].parse().ok()).unwrap_or(usize::MAX);
            anyhow::ensure!(device / DEVICES == w, "worker {w} got device {dims}, not one of its own");
            Ok(took)
        }
    })
    .await?;
    let claiming = started.elapsed();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "dimensions: {tasks} distinct dimension sets pending in one queue (created at {:.0}/s), {workers} workers \
         with their own dimensions each claiming once, {concurrency} at a time: claimWork p50 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms; {:.0} claims/s; server RSS {} MB{}",
        tasks as f64 / creating.as_secs_f64(),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(times.last().copied().unwrap_or_default()),
        workers as f64 / claiming.as_secs_f64(),
        server.rss_mb(),
        if database.is_some() { " (PostgreSQL)" } else { "" },
    );
    server.stop().await;
    Ok(())
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}
