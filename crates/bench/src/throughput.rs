//! The throughput benchmark's load: creators (`spawn_creators`) and trivial workers
//! (`trivial_worker`) on HTTP/1.1 connections of their own, and the run that times them
//! (`throughput_with`); other benchmarks reuse the creators and workers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{self, Server};
use crate::timings::Timings;
use crate::{bytes_of, definition, http1, now};

/// The parts of a claimWork answer a worker needs; the rest is skipped without allocating.
#[derive(serde::Deserialize)]
pub(crate) struct ClaimAnswer {
    pub(crate) tasks: Vec<ClaimedRun>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimedRun {
    status: ClaimedStatus,
    run_id: u32,
    /// The run's own credentials: a worker reports with them.
    credentials: Option<shoal_client::Credentials>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimedStatus {
    task_id: String,
}

/// Seconds after creation at which throughput tasks expire (0: the default, a year after
/// the deadline).
pub(crate) static EXPIRES_AFTER: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Throughput's tasks' two routes, if any (`--index-routes`, `--plain-routes`).
pub(crate) static ROUTES: std::sync::OnceLock<Routes> = std::sync::OnceLock::new();

/// Two routes on every task: their first word (`index` or `plain`) and their shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Routes {
    pub(crate) word: &'static str,
    pub(crate) shape: RouteShape,
}

/// Which namespaces the tasks' routes name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RouteShape {
    /// As a project's decision task routes its tasks: each creator pushes 100 tasks at a time
    /// (labels t000..t099), each under its label's `latest` and its push's `revision`.
    Push,
    /// Every task of a creator under the same two namespaces: the worst case, each
    /// completion replacing the entries the one before wrote.
    Hot,
}

/// Tasks in one push of `--route-shape push`.
const PUSH: usize = 100;

/// Overwrites the `value.len()` bytes after the first `marker` in `body` with `value`.
fn renumber(body: &mut [u8], marker: &[u8], value: &str) {
    if let Some(at) = body.windows(marker.len()).position(|w| w == marker) {
        let start = at + marker.len();
        if let Some(digits) = body.get_mut(start..start + value.len()) {
            digits.copy_from_slice(value.as_bytes());
        }
    }
}

/// Starts `n_creators` clients creating `n_tasks` tasks with `body` between them, spread
/// over the servers at `bases`; each creator puts `group_size` tasks in a new group at a time
/// (0: `body` as it is, each task its own group).
pub(crate) fn spawn_creators(
    bases: &[String],
    body: Vec<u8>,
    n_tasks: usize,
    n_creators: usize,
    group_size: usize,
    timings: &Arc<Timings>,
) -> tokio::task::JoinSet<anyhow::Result<()>> {
    let created = Arc::new(AtomicUsize::new(0));
    let mut creators = tokio::task::JoinSet::new();
    for n in 0..n_creators {
        let base = bases[n % bases.len()].clone();
        let (created, body, timings) = (Arc::clone(&created), body.clone(), Arc::clone(timings));
        creators.spawn(async move {
            let mut conn = http1::Conn::open(&base).await?;
            let routes = ROUTES.get().copied();
            let template = match routes {
                None => body,
                Some(Routes { word, shape }) => {
                    let mut definition: Value = serde_json::from_slice(&body)?;
                    definition["routes"] = match shape {
                        RouteShape::Hot => {
                            json!([
                                format!("{word}.bench.v2.c{n}.latest"),
                                format!("{word}.bench.v2.c{n}.build.latest")
                            ])
                        }
                        RouteShape::Push => json!([
                            format!("{word}.bench.v2.c{n}.latest.t000"),
                            format!("{word}.bench.v2.c{n}.revision.p000000.t000")
                        ]),
                    };
                    bytes_of(&definition)?
                }
            };
            let mut made = 0;
            let mut body = hyper::body::Bytes::from(template.clone());
            let mut left_in_group = 0;
            let expires_after = EXPIRES_AFTER.load(Ordering::Relaxed);
            let mut refreshed: Option<Instant> = None;
            let mut stamped = String::new();
            while created.fetch_add(1, Ordering::Relaxed) < n_tasks {
                // Each task is created now, as a client's would be (one `created` shared by
                // every task would file them all under one instant).
                let stamp = now().to_string();
                if stamp != stamped {
                    body = hyper::body::Bytes::from(restamp(&body, &stamp));
                    stamped = stamp;
                }
                if expires_after > 0 && refreshed.is_none_or(|at| at.elapsed() >= Duration::from_millis(100)) {
                    // Deadline and expiry move with the clock: each task is deleted that long
                    // after it was made (while the load goes on).
                    let mut definition: Value = serde_json::from_slice(&template)?;
                    definition["deadline"] = Value::from(now().plus_secs(expires_after).to_string());
                    definition["expires"] = definition["deadline"].clone();
                    body = hyper::body::Bytes::from(bytes_of(&definition)?);
                    refreshed = Some(Instant::now());
                }
                if group_size > 0 {
                    if left_in_group == 0 {
                        let mut definition: Value = serde_json::from_slice(&template)?;
                        definition["taskGroupId"] = Value::from(slugid::nice());
                        body = hyper::body::Bytes::from(bytes_of(&definition)?);
                        left_in_group = group_size;
                    }
                    left_in_group -= 1;
                }
                if routes.is_some_and(|routes| routes.shape == RouteShape::Push) {
                    let (push, label) = (format!("{:06}", made / PUSH), format!("{:03}", made % PUSH));
                    let mut bytes = body.to_vec();
                    renumber(&mut bytes, b".latest.t", &label);
                    renumber(&mut bytes, b".revision.p", &push);
                    renumber(&mut bytes, format!(".revision.p{push}.t").as_bytes(), &label);
                    body = hyper::body::Bytes::from(bytes);
                }
                made += 1;
                let path = format!("/task/{}", slugid::nice());
                let sent = Instant::now();
                let answer = conn.send("PUT", &path, body.clone()).await?;
                anyhow::ensure!(
                    (200..300).contains(&answer.status),
                    "createTask: {}",
                    String::from_utf8_lossy(&answer.body)
                );
                timings.create.record(sent);
            }
            Ok(())
        });
    }
    creators
}

/// `body` with its `created` set to `stamp` (an RFC 3339 time of the same length).
fn restamp(body: &[u8], stamp: &str) -> Vec<u8> {
    let mut bytes = body.to_vec();
    let key = b"\"created\":\"";
    if let Some(at) = bytes.windows(key.len()).position(|w| w == key) {
        let start = at + key.len();
        if bytes.len() >= start + stamp.len() && bytes[start + stamp.len()] == b'"' {
            bytes[start..start + stamp.len()].copy_from_slice(stamp.as_bytes());
        }
    }
    bytes
}

pub(crate) async fn throughput(
    n_tasks: usize,
    n_creators: usize,
    n_workers: usize,
    batch: usize,
    amqp_url: Option<&str>,
) -> anyhow::Result<f64> {
    let args: Vec<&str> = amqp_url.map(|url| vec!["--amqp-url", url]).unwrap_or_default();
    throughput_with(n_tasks, n_creators, n_workers, batch, &args, 1, 0).await
}

/// Tasks/s through create -> claim -> complete against `n_servers` servers started with
/// `args` (several only on one PostgreSQL database), creators and workers spread over them;
/// each creator puts `group_size` tasks in a group (0: each task in its own).
pub(crate) async fn throughput_with(
    n_tasks: usize,
    n_creators: usize,
    n_workers: usize,
    batch: usize,
    args: &[&str],
    n_servers: usize,
    group_size: usize,
) -> anyhow::Result<f64> {
    let mut servers = Vec::new();
    for _ in 0..n_servers.max(1) {
        servers.push(Server::start(None, args).await?);
    }
    let bases: Vec<String> = servers.iter().map(|server| server.base.clone()).collect();
    let servers_cpu = |servers: &[Server]| servers.iter().map(Server::cpu_secs).sum::<f64>();
    let (server_cpu0, bench_cpu0) = (servers_cpu(&servers), server::process_cpu_secs("/proc/self/stat"));
    let completed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let body = bytes_of(&definition("bench/throughput"))?;
    let timings = Arc::new(Timings::default());
    let mut creators = spawn_creators(&bases, body, n_tasks, n_creators, group_size, &timings);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..n_workers {
        let (base, completed) = (bases[w % bases.len()].clone(), Arc::clone(&completed));
        let (worker_id, timings) = (format!("w{w}"), Arc::clone(&timings));
        workers.spawn(trivial_worker(base, "bench%2Fthroughput", worker_id, batch, completed, n_tasks, timings));
    }
    while let Some(res) = creators.join_next().await {
        res??;
    }
    let create_secs = started.elapsed().as_secs_f64();
    while completed.load(Ordering::Relaxed) < n_tasks {
        // A worker that failed would leave its claimed tasks unfinished: report why.
        if let Some(res) = workers.try_join_next() {
            res??;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    workers.abort_all();
    let server_cpu = servers_cpu(&servers) - server_cpu0;
    let bench_cpu = server::process_cpu_secs("/proc/self/stat") - bench_cpu0;
    let rss: Vec<String> = servers.iter().map(|server| server.rss_mb().to_string()).collect();
    println!(
        "throughput{}{}: {n_tasks} tasks create->claim->complete in {elapsed:.2} s = {:.0} tasks/s end to end \
         ({n_creators} creators, {n_workers} workers claiming {batch} at a time; creates alone finished at {:.0}/s; \
         server RSS {} MB; CPU: server{} {:.0} us/task, load generator {:.0} us/task)",
        match (args.contains(&"--amqp-url"), args.contains(&"--database")) {
            (false, false) => "",
            (true, false) => " (events to RabbitMQ)",
            (false, true) => " (PostgreSQL)",
            (true, true) => " (PostgreSQL, events to RabbitMQ)",
        },
        if servers.len() > 1 { format!(", {} servers", servers.len()) } else { String::new() },
        n_tasks as f64 / elapsed,
        n_tasks as f64 / create_secs,
        rss.join(" + "),
        if servers.len() > 1 { "s" } else { "" },
        server_cpu * 1e6 / n_tasks as f64,
        bench_cpu * 1e6 / n_tasks as f64,
    );
    println!("{}", timings.summary());
    for server in servers {
        server.stop().await;
    }
    Ok(n_tasks as f64 / elapsed)
}

/// A worker of capacity `batch`: claims up to `batch` runs from `queue` (percent-encoded) and
/// reports each completed at once, all at the same time on a connection each (as `shoal
/// worker` reports each task as it ends), until `completed` reaches `n_tasks`; each request's
/// latency goes to `timings`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn trivial_worker(
    base: String,
    queue: &'static str,
    worker_id: String,
    batch: usize,
    completed: Arc<AtomicUsize>,
    n_tasks: usize,
    timings: Arc<Timings>,
) -> anyhow::Result<()> {
    let body =
        hyper::body::Bytes::from(bytes_of(&json!({"workerGroup": "bench", "workerId": worker_id, "tasks": batch}))?);
    let claim_path = format!("/claim-work/{queue}");
    let mut conn = http1::Conn::open(&base).await?;
    let mut reporters = Vec::with_capacity(batch);
    for _ in 0..batch {
        reporters.push(http1::Conn::open(&base).await?);
    }
    while completed.load(Ordering::Relaxed) < n_tasks {
        let sent = Instant::now();
        let res = conn.send("POST", &claim_path, body.clone()).await?;
        let answer: ClaimAnswer = serde_json::from_slice(&res.body)?;
        timings.claim.record(sent);
        timings.claimed.fetch_add(answer.tasks.len() as u64, Ordering::Relaxed);
        // Each run reports on a connection of its own: one more would never be reported.
        anyhow::ensure!(answer.tasks.len() <= batch, "claimWork asked for {batch} answered {}", answer.tasks.len());
        let reports = answer.tasks.into_iter().zip(reporters.iter_mut()).map(|(claim, conn)| {
            let (completed, timings) = (&completed, &timings);
            async move {
                let path = format!("/task/{}/runs/{}/completed", claim.status.task_id, claim.run_id);
                let sent = Instant::now();
                // A worker reports with the run's credentials, not its own.
                let credentials = claim.credentials.as_ref().filter(|_| conn.signs());
                let res = conn.send_as(credentials, "POST", &path, hyper::body::Bytes::new()).await?;
                anyhow::ensure!(
                    (200..300).contains(&res.status),
                    "reportCompleted: {}",
                    String::from_utf8_lossy(&res.body)
                );
                timings.report.record(sent);
                completed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        });
        for report in futures_util::future::join_all(reports).await {
            report?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_shaped_body_is_renumbered_in_place() {
        let mut body = br#"{"routes":["index.b.c0.latest.t000","index.b.c0.revision.p000000.t000"]}"#.to_vec();
        renumber(&mut body, b".latest.t", "042");
        renumber(&mut body, b".revision.p", "000003");
        renumber(&mut body, b".revision.p000003.t", "042");
        assert_eq!(body, br#"{"routes":["index.b.c0.latest.t042","index.b.c0.revision.p000003.t042"]}"#);
    }
}
