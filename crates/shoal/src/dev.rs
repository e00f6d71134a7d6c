//! `shoal dev`: a server on embedded storage and local workers in one process, and with
//! `--example` the example CI graph run to completion, for a first look at Shoal.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use shoal_client::Client;
use tokio::sync::watch;

use crate::{RunningServer, ServerConfig, ShutdownSignal, cli, stopped};

/// The example graph, built into the binary so `shoal dev --example` works from anywhere.
const EXAMPLE: &str = include_str!("../../../examples/ci-graph.yaml");
/// The queue local workers serve.
const DEV_QUEUE: &str = "dev/local";

/// Flags of `shoal dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DevArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Keep data here [default: a temporary directory, removed on exit].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Local workers to start (each runs up to 4 tasks at once) on queue dev/local.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Submit the example CI graph (examples/ci-graph.yaml) and show its progress.
    #[arg(long)]
    example: bool,
    /// Exit once the example has finished (exit code 1 unless every task completed).
    #[arg(long, requires = "example")]
    once: bool,
}

pub(crate) async fn dev(args: DevArgs) -> anyhow::Result<bool> {
    let shutdown = ShutdownSignal::install()?;
    let temp = tempfile::tempdir().context("making a data directory")?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let config = ServerConfig { listen: args.listen, data_dir, claim_timeout: 120, ..ServerConfig::default() };
    let server = RunningServer::start(&config).await?;
    let root = server.root_url.clone();
    println!("Shoal is running at {root}  (rootUrl for Taskcluster clients; queue API at {root}/api/queue/v1/)");

    let (stop_workers, workers_stop) = watch::channel(false);
    let mut workers = tokio::task::JoinSet::new();
    for idx in 0..args.workers {
        let client = Client::new(&root)?;
        let config = shoal_worker::WorkerConfig {
            task_queue_id: DEV_QUEUE.into(),
            worker_group: "dev".into(),
            worker_id: format!("dev-{idx}"),
            dimensions: json!({}),
            capacity: 4,
            work_dir: temp.path().join(format!("work-{idx}")),
            grace: Duration::from_secs(5),
        };
        workers.spawn(shoal_worker::run(client, config, stopped(workers_stop.clone())));
    }
    println!("{} local worker(s) serve queue {DEV_QUEUE}", args.workers);

    let mut all_completed = true;
    if args.example {
        let client = Client::new(&root)?;
        let (group, labels) = submit(&client, EXAMPLE).await?;
        println!("submitted the example graph: task group {group}\n");
        all_completed = cli::group_wait(&client, &group, false).await?;
        println!("\nwhere to look:");
        println!("  the group:      {root}/api/queue/v1/task-group/{group}/list");
        for (label, task_id) in &labels {
            println!("  {label:<17} {root}/api/queue/v1/task/{task_id}/artifacts   (log: shoal task log {task_id})");
        }
        println!(
            "  e.g. shoal artifact get {} public/report.txt",
            labels.get("report").map_or("<taskId>", String::as_str)
        );
    }
    if !args.once {
        println!("\nCtrl-C stops everything.");
        shutdown.received().await;
    }
    let _ = stop_workers.send(true);
    while workers.join_next().await.is_some() {}
    server.stop().await?;
    Ok(all_completed)
}

/// Creates the tasks of a graph (labels -> tasks with `requires`) in one new task group, in
/// dependency order; returns the group and each label's task id.
async fn submit(client: &Client, graph_yaml: &str) -> anyhow::Result<(String, BTreeMap<String, String>)> {
    let graph: Value = serde_saphyr::from_str(graph_yaml).context("parsing the example graph")?;
    let tasks = graph["tasks"].as_object().context("the graph needs a `tasks` map")?;
    let ids: BTreeMap<String, String> = tasks.keys().map(|label| (label.clone(), slugid::nice())).collect();
    let group = slugid::nice();
    let now = shoal_client::now();
    let mut created: BTreeMap<&str, bool> = BTreeMap::new();
    while created.len() < tasks.len() {
        let before = created.len();
        for (label, entry) in tasks {
            let requires: Vec<&str> =
                entry["requires"].as_array().map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
            if created.contains_key(label.as_str()) || !requires.iter().all(|r| created.contains_key(r)) {
                continue;
            }
            let mut definition = substitute(&entry["task"], &ids)?;
            let object = definition.as_object_mut().with_context(|| format!("task {label} must be an object"))?;
            object.insert("taskQueueId".into(), json!(DEV_QUEUE));
            object.insert("taskGroupId".into(), json!(group));
            object.insert("created".into(), json!(now));
            object.insert("deadline".into(), json!(now.plus_secs(3600)));
            object.insert("dependencies".into(), json!(requires.iter().map(|r| &ids[*r]).collect::<Vec<_>>()));
            client.create_task(&ids[label], &definition).await.with_context(|| format!("creating task {label}"))?;
            created.insert(label, true);
        }
        anyhow::ensure!(created.len() > before, "the graph's requires name unknown labels or form a cycle");
    }
    Ok((group, ids))
}

/// Replaces every `{"$subs": "taskId:<label>"}` with that label's task id.
fn substitute(value: &Value, ids: &BTreeMap<String, String>) -> anyhow::Result<Value> {
    Ok(match value {
        Value::Object(object) if object.len() == 1 && object.contains_key("$subs") => {
            let reference = object["$subs"].as_str().context("$subs takes a string")?;
            let label = reference.strip_prefix("taskId:").context("$subs must be taskId:<label>")?;
            json!(ids.get(label).with_context(|| format!("$subs names the unknown label {label}"))?)
        }
        Value::Object(object) => Value::Object(
            object.iter().map(|(k, v)| Ok((k.clone(), substitute(v, ids)?))).collect::<anyhow::Result<_>>()?,
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, ids)).collect::<anyhow::Result<_>>()?),
        other => other.clone(),
    })
}
