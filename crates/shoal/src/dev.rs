//! `shoal dev`: a server on embedded storage and local workers in one process, and with
//! `--example` the example CI graph run to completion, for a first look at Shoal.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use shoal_client::{Client, Credentials};
use tokio::sync::watch;

use crate::server::{RunningServer, ShutdownSignal, stopped};
use crate::settings::ServerConfig;

/// Tasks each local worker runs at once.
const CAPACITY: u32 = 4;
/// Bytes each local worker keeps of mount downloads and named caches.
const DEV_CACHE_SIZE: u64 = 1 << 30;
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
    // Private from the start: the server tightens (and warns about) a data directory others
    // may read.
    let temp = tempfile::Builder::new()
        .prefix("shoal-dev-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .context("making a data directory")?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let config = ServerConfig { listen: args.listen, data_dir, claim_timeout: 120, ..ServerConfig::default() };
    let server = RunningServer::start(&config).await?;
    let root = server.root_url.clone();
    let root_credentials = Credentials {
        client_id: shoal_engine::auth::ROOT_CLIENT_ID.to_owned(),
        access_token: server.root_token.0.clone(),
        certificate: None,
    };
    // The example's graph (and group) id is chosen now, so its page is the first thing said.
    let task_graph_id = slugid::nice();
    if args.example {
        println!("Watch the example run: {root}/tasks/groups/{task_graph_id}");
    }
    println!(
        "Shoal is running at {root}  (web UI at {root}/, rootUrl for Taskcluster clients, queue API at {root}/api/queue/v1/)"
    );
    println!("For the CLI and Taskcluster clients in another shell (the root client holds every scope):");
    println!("  export TASKCLUSTER_ROOT_URL={root}");
    println!("  export TASKCLUSTER_CLIENT_ID={}", root_credentials.client_id);
    println!("  export TASKCLUSTER_ACCESS_TOKEN={}", root_credentials.access_token);

    let (stop_workers, workers_stop) = watch::channel(false);
    let mut workers = tokio::task::JoinSet::new();
    // Contained where bubblewrap can be used; on a machine without it the example still runs.
    let sandbox = shoal_worker::SandboxOptions::default();
    let isolation =
        shoal_worker::Isolation::bubblewrap(shoal_worker::SLOT_UID_BASE, &sandbox).unwrap_or_else(|reason| {
            println!("local workers run tasks uncontained: {reason}");
            shoal_worker::Isolation::None
        });
    for idx in 0..args.workers {
        // Each worker's slots their own uids.
        let isolation = isolation.clone().with_first_uid(shoal_worker::SLOT_UID_BASE + idx * CAPACITY);
        let client = Client::new(&root)?.with_credentials(Some(root_credentials.clone()));
        let work_dir = temp.path().join(format!("work-{idx}"));
        shoal_worker::guard(&work_dir).context("preparing a local worker's directory")?;
        let cache =
            shoal_worker::Cache::open(&work_dir.join("cache"), DEV_CACHE_SIZE).context("a local worker's cache")?;
        let config = shoal_worker::WorkerConfig {
            task_queue_id: DEV_QUEUE.into(),
            more_queues: Vec::new(),
            worker_group: "dev".into(),
            worker_id: format!("dev-{idx}"),
            dimensions: json!({}),
            capacity: CAPACITY,
            work_dir,
            grace: Duration::from_secs(5),
            isolation,
            limits: shoal_worker::SlotLimits::defaults(CAPACITY * args.workers),
            cache: std::sync::Arc::new(cache),
            health_check: None,
            signing_key: None,
            registries: shoal_worker::Registries::new(&[]),
        };
        workers.spawn(shoal_worker::run(client, config, stopped(workers_stop.clone())));
    }
    println!("{} local worker(s) serve queue {DEV_QUEUE}", args.workers);

    let mut all_completed = true;
    if args.example {
        let client = Client::new(&root)?.with_credentials(Some(root_credentials.clone()));
        let graph = crate::graph::parse_graph(EXAMPLE, Some(DEV_QUEUE)).context("the example graph")?;
        client.create_task_graph(&task_graph_id, &graph).await.context("submitting the example graph")?;
        println!("submitted the example graph {task_graph_id} to the task-graph scheduler\n");
        all_completed = crate::graph::wait_for(&client, &task_graph_id, false).await?;
        let inspection = client.inspect_task_graph(&task_graph_id).await?;
        println!("\nwhere to look:");
        println!("  its task group: {root}/tasks/groups/{task_graph_id}");
        println!("  the graph:      {root}/task-graphs/{task_graph_id}");
        println!("  as JSON:        {root}/api/scheduler/v1/task-graph/{task_graph_id}/inspect");
        for task in &inspection.tasks {
            println!("  {:<17} {root}/tasks/{}   (log: shoal task log {})", task.label, task.task_id, task.task_id);
        }
        let report = inspection.tasks.iter().find(|task| task.label == "report");
        println!(
            "  e.g. shoal artifact get {} public/report.txt",
            report.map_or("<taskId>", |task| task.task_id.as_str())
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
