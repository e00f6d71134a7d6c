//! The task-graph scheduler: a whole graph submitted at once, timed from submission to
//! finished with trivial workers (claim, report completed at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Map, Value, json};

use crate::server::Server;
use crate::{bytes_of, definition, trivial_worker};

/// The graph's shape.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Shape {
    /// Each task requires the one before: nothing runs in parallel.
    Chain,
    /// One root task, every other task requires it: all run at once after it.
    Fan,
}

const QUEUE: &str = "bench/graph";

fn graph(shape: Shape, n_tasks: usize) -> Value {
    let mut tasks = Map::new();
    for i in 0..n_tasks {
        let requires: Vec<String> = match (shape, i) {
            (_, 0) => Vec::new(),
            (Shape::Chain, i) => vec![format!("t{}", i - 1)],
            (Shape::Fan, _) => vec!["t0".to_owned()],
        };
        tasks.insert(format!("t{i}"), json!({"requires": requires, "task": definition(QUEUE)}));
    }
    json!({"routing": "bench", "tasks": tasks})
}

/// Submits a graph of `n_tasks` in `shape` and times it to finished with `n_workers` workers.
pub(crate) async fn graph_bench(shape: Shape, n_tasks: usize, n_workers: usize) -> anyhow::Result<f64> {
    let server = Server::start(None, &[]).await?;
    let client = server.client();
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let graph_id = slugid::nice();
    let body = bytes_of(&graph(shape, n_tasks))?;
    let completed = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..n_workers {
        let (base, completed) = (server.base.clone(), Arc::clone(&completed));
        let timings = Arc::default();
        workers.spawn(trivial_worker(base, "bench%2Fgraph", format!("w{w}"), 8, completed, n_tasks, timings));
    }
    let cpu0 = server.cpu_secs();
    let started = Instant::now();
    let res = client
        .put(format!("{root}/api/scheduler/v1/task-graph/{graph_id}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .context("submitting the graph")?;
    anyhow::ensure!(res.status().is_success(), "createTaskGraph: {}", res.text().await?);
    let submitted = started.elapsed().as_secs_f64();
    while completed.load(Ordering::Relaxed) < n_tasks {
        if let Some(res) = workers.try_join_next() {
            res??;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    workers.abort_all();
    let status: Value =
        client.get(format!("{root}/api/scheduler/v1/task-graph/{graph_id}/status")).send().await?.json().await?;
    anyhow::ensure!(status["status"]["state"] == "finished", "the graph did not finish: {status}");
    let server_cpu = server.cpu_secs() - cpu0;
    let per_task = match shape {
        Shape::Chain => format!("{:.2} ms per link", elapsed * 1e3 / n_tasks as f64),
        Shape::Fan => format!("{:.0} tasks/s", n_tasks as f64 / elapsed),
    };
    println!(
        "graph {shape:?} of {n_tasks} tasks: submitted in {submitted:.2} s, finished {elapsed:.2} s after submission \
         ({per_task}; {n_workers} workers; server CPU {:.0} us/task, RSS {} MB)",
        server_cpu * 1e6 / n_tasks as f64,
        server.rss_mb(),
    );
    server.stop().await;
    Ok(elapsed)
}
