//! The Index at scale: findTask's latency among 10⁵ entries, as a decision task's optimizer
//! asks it once per cacheable task of its graph (toolchains, fetches, docker images).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use serde_json::json;

use crate::http1::Conn;
use crate::server::Server;
use crate::{bytes_of, percentile};

/// Connections filling the Index.
const FILLERS: usize = 32;
/// Parent namespaces the entries are spread over (a project's kinds).
const PARENTS: usize = 100;

/// The namespace of entry `i`: `bench.project.v2.kind<k>.rev<i>`.
fn namespace(i: usize) -> String {
    format!("bench.project.v2.kind{}.rev{i}", i % PARENTS)
}

/// Fills the Index with `entries` entries, then times `lookups` findTask calls at random
/// entries, one at a time and four at a time.
pub(crate) async fn index(entries: usize, lookups: usize, database: Option<&str>) -> anyhow::Result<()> {
    let mut args = Vec::new();
    if let Some(url) = database {
        args.extend(["--database", url]);
    }
    let server = Server::start(None, &args).await?;
    let base = server.base.replace("/api/queue/v1", "/api/index/v1");
    let expires = crate::now().plus_secs(86_400).to_string();
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut fillers = tokio::task::JoinSet::new();
    for _ in 0..FILLERS {
        let (base, next, expires) = (base.clone(), Arc::clone(&next), expires.clone());
        fillers.spawn(async move {
            let mut conn = Conn::open(&base).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= entries {
                    return anyhow::Ok(());
                }
                let body = json!({"taskId": slugid::nice(), "rank": 0, "data": {"i": i}, "expires": expires});
                let answer =
                    conn.send("PUT", &format!("/task/{}", namespace(i)), Bytes::from(bytes_of(&body)?)).await?;
                anyhow::ensure!(answer.status == 200, "insertTask: {}", String::from_utf8_lossy(&answer.body));
            }
        });
    }
    while let Some(done) = fillers.join_next().await {
        done??;
    }
    let filled = started.elapsed();
    println!(
        "index: {entries} entries under {PARENTS} namespaces inserted in {:.1} s ({:.0} insertTask/s)",
        filled.as_secs_f64(),
        entries as f64 / filled.as_secs_f64()
    );
    for concurrency in [1, 4] {
        let (samples, elapsed) = look_up(&base, entries, lookups, concurrency).await?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "index: findTask among {entries}, {concurrency} at a time: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {:.0} calls/s",
            ms(percentile(&samples, 0.5)),
            ms(percentile(&samples, 0.99)),
            ms(samples.last().copied().unwrap_or_default()),
            lookups as f64 / elapsed.as_secs_f64()
        );
    }
    Ok(())
}

/// `lookups` findTask calls spread over `concurrency` connections at entries picked by a
/// fixed stride (every one exists); their latencies sorted, and the time they all took.
async fn look_up(
    base: &str,
    entries: usize,
    lookups: usize,
    concurrency: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..concurrency {
        let base = base.to_owned();
        callers.spawn(async move {
            let mut conn = Conn::open(&base).await?;
            let mut samples = Vec::new();
            for n in (c..lookups).step_by(concurrency) {
                // A stride coprime with any entry count below it visits entries out of order.
                let i = n.wrapping_mul(7_919) % entries;
                let sent = Instant::now();
                let answer = conn.send("GET", &format!("/task/{}", namespace(i)), Bytes::new()).await?;
                samples.push(sent.elapsed());
                anyhow::ensure!(answer.status == 200, "findTask: {}", String::from_utf8_lossy(&answer.body));
            }
            anyhow::Ok(samples)
        });
    }
    let mut samples = Vec::with_capacity(lookups);
    while let Some(done) = callers.join_next().await {
        samples.extend(done??);
    }
    let elapsed = started.elapsed();
    samples.sort();
    Ok((samples, elapsed))
}
