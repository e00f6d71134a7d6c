//! How claims hold up as the pending line grows.

use super::*;

/// claimWork against queues of each pending size, and the server's memory with the largest.
pub(crate) async fn scale(sizes: &[usize], n_claims: usize) -> anyhow::Result<()> {
    let mut costs = Vec::new();
    for &n_pending in sizes {
        let dir = crate::server::private_dir()?;
        let preload = Instant::now();
        server::preload(dir.path(), "bench/scale", n_pending).await.context("preloading")?;
        let preload_secs = preload.elapsed().as_secs_f64();
        let boot = Instant::now();
        let server = Server::start(Some(dir.path()), &[]).await?;
        let boot_secs = boot.elapsed().as_secs_f64();
        let rss_idle = server.rss_mb();
        let client = server.client();
        let n_workers = 4;
        let per_worker = n_claims / n_workers;
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..n_workers {
            let (client, base) = (client.clone(), server.base.clone());
            workers.spawn(async move {
                let body = json!({"workerGroup": "bench", "workerId": format!("s{w}"), "tasks": 1});
                let shutdown = json!({"reason": "worker-shutdown"});
                let mut latencies = Vec::with_capacity(per_worker);
                for _ in 0..per_worker {
                    let sent = Instant::now();
                    let res: Value = client
                        .post(format!("{base}/claim-work/bench%2Fscale"))
                        .json(&body)
                        .send()
                        .await?
                        .json()
                        .await?;
                    latencies.push(sent.elapsed());
                    let claim = res["tasks"].get(0).context("nothing to claim")?;
                    let task_id = claim["status"]["taskId"].as_str().unwrap_or_default();
                    let run_id = claim["runId"].as_u64().unwrap_or(0);
                    // Hand the run back: the retry goes to the back of the line, so the
                    // number of pending tasks stays what was preloaded.
                    let url = format!("{base}/task/{task_id}/runs/{run_id}/exception");
                    client.post(url).json(&shutdown).send().await?.error_for_status()?;
                }
                Ok::<Vec<Duration>, anyhow::Error>(latencies)
            });
        }
        let mut latencies = Vec::new();
        while let Some(res) = workers.join_next().await {
            latencies.extend(res??);
        }
        let elapsed = started.elapsed().as_secs_f64();
        latencies.sort();
        let rate = latencies.len() as f64 / elapsed;
        println!(
            "scale: {n_pending} pending (preloaded in {preload_secs:.1} s, server ready in {boot_secs:.2} s, RSS {rss_idle} MB idle, {} MB after): \
             {} claims by {n_workers} workers (each handed back) at {rate:.0} claims/s, claimWork p50 {:.2} ms, p99 {:.2} ms",
            server.rss_mb(),
            latencies.len(),
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        );
        costs.push((n_pending, 1.0 / rate, percentile(&latencies, 0.5)));
        server.stop().await;
    }
    if let (Some(first), Some(last)) = (costs.first(), costs.last())
        && first.0 != last.0
    {
        println!(
            "scale: claim cost at {} pending is {:.2}x the cost at {} (by throughput), {:.2}x (by p50 latency)",
            last.0,
            last.1 / first.1,
            first.0,
            last.2.as_secs_f64() / first.2.as_secs_f64()
        );
    }
    Ok(())
}
