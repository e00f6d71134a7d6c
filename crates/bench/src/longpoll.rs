//! Long polls at fleet scale: many idle claimWork calls held by one server (each worker its
//! own connection, as a fleet's would be), what holding them costs the server (memory, the
//! latency of other requests) and how fast a new task still reaches one of them.

use std::time::{Duration, Instant};

use anyhow::Context;
use hyper::body::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use crate::http1::Conn;
use crate::server::Server;
use crate::{bytes_of, definition, percentile};

/// The queue every long poll waits on.
const QUEUE: &str = "bench/longpoll";
/// Connections opened at once while the fleet comes up.
const OPENING: usize = 256;
/// Other requests timed, with and without the fleet waiting.
const PROBES: usize = 400;
/// How long the fleet is left waiting before anything else is measured: longer than the
/// server's claim wait, so every poll has ended empty and been sent again once.
const QUIET: Duration = Duration::from_secs(25);

/// Raises this process's descriptor limits (the server started after inherits them) to fit
/// `connections` and some, where allowed; returns the soft limit in force.
fn raise_descriptor_limit(connections: usize) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = (connections + 4096) as u64;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 1024 };
    if soft >= want {
        return soft;
    }
    // Raising the hard limit needs privilege; otherwise as far as the hard limit allows.
    if hard < want && setrlimit(Resource::RLIMIT_NOFILE, want, want).is_ok() {
        return want;
    }
    let to = want.min(hard);
    if setrlimit(Resource::RLIMIT_NOFILE, to, hard).is_ok() { to } else { soft }
}

/// Open descriptors of process `pid`.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// p50 / p99 / max of `samples`, in milliseconds.
fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(samples.last().copied().unwrap_or_default())
    )
}

/// `PROBES` pings, task creations (on a queue nobody waits on) and task reads, one at a time.
async fn probe(base: &str) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
    let mut conn = Conn::open(base).await?;
    let body = Bytes::from(bytes_of(&definition("bench/longpoll-other"))?);
    let (mut pings, mut creates, mut reads) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..PROBES {
        let sent = Instant::now();
        let answer = conn.send("GET", "/ping", Bytes::new()).await?;
        anyhow::ensure!(answer.status == 200, "ping: {}", answer.status);
        pings.push(sent.elapsed());
        let task_id = slugid::nice();
        let sent = Instant::now();
        let answer = conn.send("PUT", &format!("/task/{task_id}"), body.clone()).await?;
        anyhow::ensure!(answer.status == 200, "createTask: {}", String::from_utf8_lossy(&answer.body));
        creates.push(sent.elapsed());
        let sent = Instant::now();
        let answer = conn.send("GET", &format!("/task/{task_id}/status"), Bytes::new()).await?;
        anyhow::ensure!(answer.status == 200, "status: {}", answer.status);
        reads.push(sent.elapsed());
    }
    Ok((pings, creates, reads))
}

/// Worker `n`'s dimensions when tasks are targeted: its own `id`, as a Swarming bot has, and
/// what the whole fleet shares.
fn bot_dimensions(n: usize) -> Value {
    json!({"id": [format!("w{n}")], "pool": ["fleet"], "os": ["Linux"]})
}

/// One worker of the fleet: claimWork on its own connection, again and again; each claim is
/// reported on `claimed` with the time it arrived.
async fn poll(
    base: String,
    n: usize,
    targeted: bool,
    opening: Arc<Semaphore>,
    claimed: mpsc::UnboundedSender<Instant>,
) -> anyhow::Result<()> {
    let permit = opening.acquire_owned().await?;
    let mut conn = Conn::open(&base).await?;
    drop(permit);
    let mut request = json!({"workerGroup": "fleet", "workerId": format!("w{n}"), "tasks": 1});
    if targeted {
        request["dimensions"] = bot_dimensions(n);
    }
    let body = Bytes::from(bytes_of(&request)?);
    let path = format!("/claim-work/{}", QUEUE.replace('/', "%2F"));
    loop {
        let answer = conn.send("POST", &path, body.clone()).await?;
        let arrived = Instant::now();
        anyhow::ensure!(answer.status == 200, "claimWork: {}", String::from_utf8_lossy(&answer.body));
        let claims: Value = serde_json::from_slice(&answer.body)?;
        for _ in claims["tasks"].as_array().into_iter().flatten() {
            if claimed.send(arrived).is_err() {
                return Ok(());
            }
        }
    }
}

/// The server's count of claimWork calls waiting, from `/metrics`.
async fn waiting(client: &reqwest::Client, root: &str) -> anyhow::Result<usize> {
    let text = client.get(format!("{root}/metrics")).send().await?.text().await?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix("shoal_claims_waiting "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as usize)
}

/// `polls` idle claimWork long polls held at once; then `samples` tasks created one at a time,
/// each timed until one of the waiting workers has it. `targeted`: each worker has its own
/// `id` dimension and each task needs one worker's, spread over the fleet.
pub(crate) async fn longpoll(polls: usize, samples: usize, targeted: bool) -> anyhow::Result<()> {
    let limit = raise_descriptor_limit(polls);
    // The server keeps 256 descriptors for its files; the load generator needs a few.
    anyhow::ensure!(
        limit as usize >= polls + 300,
        "{polls} long polls need {} descriptors in each process; the limit here is {limit} (raise the hard limit, or ask for fewer)",
        polls + 300
    );
    let server = Server::start(None, &[]).await?;
    let pid = server.pid().context("server pid")?;
    let root = server.base.replace("/api/queue/v1", "");
    let client = server.client();
    let (rss_idle, fds_idle) = (server.rss_mb(), descriptors(pid));
    let (pings_before, creates_before, reads_before) = probe(&server.base).await?;

    let (claimed, mut arrivals) = mpsc::unbounded_channel();
    let mut fleet = tokio::task::JoinSet::new();
    let opened = Instant::now();
    // A few hundred connections opened at a time, as a fleet coming up would, not a SYN flood.
    let opening = Arc::new(Semaphore::new(OPENING));
    for n in 0..polls {
        fleet.spawn(poll(server.base.clone(), n, targeted, Arc::clone(&opening), claimed.clone()));
    }
    let held = loop {
        if let Some(failed) = fleet.try_join_next() {
            failed??;
            anyhow::bail!("a long poll ended");
        }
        let held = waiting(&client, &root).await?;
        if held >= polls {
            break held;
        }
        anyhow::ensure!(
            opened.elapsed() < Duration::from_secs(300),
            "only {held} of {polls} long polls held after 5 min"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let up = opened.elapsed();
    // A whole claim-wait (20 s) and more with nothing to do: every poll ends empty and is
    // sent again once, as an idle fleet's are.
    let cpu_before = server.cpu_secs();
    let quiet = Instant::now();
    tokio::time::sleep(QUIET).await;
    let idle_cpu = (server.cpu_secs() - cpu_before) / quiet.elapsed().as_secs_f64();
    let rss = server.rss_mb();
    let (pings, creates, reads) = probe(&server.base).await?;

    let mut latencies = Vec::with_capacity(samples);
    let mut conn = Conn::open(&server.base).await?;
    let mut body = Bytes::from(bytes_of(&definition(QUEUE))?);
    let cpu_before = server.cpu_secs();
    for sample in 0..samples {
        if targeted {
            // Workers all over the line, not the longest-waiting ones first.
            let mut task = definition(QUEUE);
            task["dimensions"] = json!({"id": [format!("w{}", sample * 7919 % polls)], "pool": ["fleet"]});
            body = Bytes::from(bytes_of(&task)?);
        }
        let sent = Instant::now();
        let answer = conn.send("PUT", &format!("/task/{}", slugid::nice()), body.clone()).await?;
        anyhow::ensure!(answer.status == 200, "createTask: {}", String::from_utf8_lossy(&answer.body));
        let arrived = tokio::time::timeout(Duration::from_secs(30), arrivals.recv())
            .await
            .context("no waiting worker got the task within 30 s")?
            .context("the fleet stopped")?;
        latencies.push(arrived.saturating_duration_since(sent));
    }
    let cpu_per_task = (server.cpu_secs() - cpu_before) / samples.max(1) as f64;
    println!(
        "longpoll: {held} idle claimWork long polls held by one server (each on its own connection; all in line after {:.1} s); \
         server RSS {rss} MB (before them {rss_idle} MB), {} descriptors (before {fds_idle}); \
         CPU {:.1}% of a core over {} s of waiting (each poll ends empty after the claim wait and is sent again)",
        up.as_secs_f64(),
        descriptors(pid),
        idle_cpu * 100.0,
        QUIET.as_secs(),
    );
    println!("  ping       alone: {}; with the fleet waiting: {}", summary(pings_before), summary(pings));
    println!("  createTask alone: {}; with the fleet waiting: {}", summary(creates_before), summary(creates));
    println!("  task status alone: {}; with the fleet waiting: {}", summary(reads_before), summary(reads));
    println!(
        "  a new task reaching a waiting worker (createTask sent -> claim received), {samples} tasks{}: {}; server CPU {:.0} us per task",
        if targeted { ", each needing one worker's own id" } else { "" },
        summary(latencies),
        cpu_per_task * 1e6,
    );
    drop(arrivals);
    fleet.abort_all();
    server.stop().await;
    Ok(())
}
