//! Live-log latency on several servers: a line appended through server A reaching a follower
//! on A and one on B, both servers on one PostgreSQL database.

use super::*;

pub(crate) async fn log_latency(database: &str, appends: usize) -> anyhow::Result<()> {
    let a = Server::start(None, &["--database", database]).await?;
    let b = Server::start(None, &["--database", database]).await?;
    let client = a.client();
    let task_id = slugid::nice();
    let res = client.put(format!("{}/task/{task_id}", a.base)).json(&definition("bench/logs")).send().await?;
    anyhow::ensure!(res.status().is_success(), "createTask: {}", res.text().await?);
    let claim = json!({"workerGroup": "bench", "workerId": "l", "tasks": 1});
    let claimed: Value =
        client.post(format!("{}/claim-work/bench%2Flogs", a.base)).json(&claim).send().await?.json().await?;
    anyhow::ensure!(claimed["tasks"][0]["runId"] == 0, "nothing claimed: {claimed}");
    let root = |server: &Server| server.base.trim_end_matches("/api/queue/v1").to_owned();
    let append_url = format!("{}/logs/v1/{task_id}/0", root(&a));
    // The first line makes the log, so both followers start on it.
    let mut offset = 0u64;
    offset += append(&client, &append_url, offset, "start\n").await?;
    let mut followers = Vec::new();
    for server in [&a, &b] {
        let res = reqwest::Client::new().get(format!("{}/logs/v1/{task_id}/0?follow=1", root(server))).send().await?;
        anyhow::ensure!(res.status().is_success(), "follow: {}", res.status());
        let (seen, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut res = res;
            while let Ok(Some(chunk)) = res.chunk().await {
                let at = Instant::now();
                for _ in chunk.iter().filter(|byte| **byte == b'\n') {
                    let _ = seen.send(at);
                }
            }
        });
        followers.push(lines);
    }
    for lines in &mut followers {
        lines.recv().await.context("the first line")?;
    }
    let mut taken = [Vec::new(), Vec::new()];
    for n in 0..appends {
        let sent = Instant::now();
        offset += append(&client, &append_url, offset, &format!("line {n}\n")).await?;
        for (lines, taken) in followers.iter_mut().zip(&mut taken) {
            let at = lines.recv().await.context("a follower stopped")?;
            taken.push(at.duration_since(sent).as_secs_f64() * 1000.0);
        }
        // Apart, as a worker's appends are (every 100 ms at most).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for (name, taken) in ["the same server", "another server"].iter().zip(&mut taken) {
        taken.sort_by(f64::total_cmp);
        let at = |q: f64| taken[((taken.len() - 1) as f64 * q) as usize];
        println!(
            "log latency: {appends} appends through A reaching a follower on {name}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    a.stop().await;
    b.stop().await;
    Ok(())
}

async fn append(client: &reqwest::Client, url: &str, offset: u64, line: &str) -> anyhow::Result<u64> {
    let res = client.post(format!("{url}?offset={offset}")).body(line.to_owned()).send().await?;
    anyhow::ensure!(res.status().is_success(), "append: {}", res.text().await?);
    Ok(line.len() as u64)
}
