//! `shoal-bench`: measures a real `shoal server` process over loopback on durable storage.
//!
//! - throughput: tasks/s for createTask -> claimWork -> reportCompleted with concurrent
//!   clients and workers;
//! - wake: latency from sending createTask to an idle long-polling worker receiving the claim;
//! - scale: claim cost and server memory with 10^3 and 10^6 pending tasks;
//! - graph: a whole task graph (a deep chain, a wide fan-out) from submission to finished;
//! - events: messages/s from the outbox to RabbitMQ with publisher confirms, and what
//!   publishing to a broker costs the throughput benchmark;
//! - cancel and fleet: cancelTask to the process gone; listWorkers and claimWork with many
//!   registered workers.
//!
//! The server binary is the `shoal` next to this one (build both with `--bins`).
#![expect(clippy::print_stdout, reason = "a benchmark reports on stdout")]

mod blobs;
mod dimensions;
mod events;
mod fleet;
mod graph;
mod hostile;
mod http1;
mod index;
mod live;
mod longpoll;
mod scale;
mod server;
mod soak;
mod throughput;
mod timings;
mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::server::Server;
use crate::throughput::{
    ClaimAnswer, EXPIRES_AFTER, ROUTES, RouteShape, Routes, spawn_creators, throughput, throughput_with, trivial_worker,
};

// The same allocator as the server: the load generator should cost as little as it can.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "Benchmarks of a real shoal server over loopback")]
struct Cli {
    /// Send every request unsigned, as an anonymous caller (the benchmark's servers let
    /// anonymous callers do everything): what authentication costs, by comparison.
    #[arg(long, global = true)]
    unsigned: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The root client's access token of the benchmark's servers.
pub(crate) const ROOT_TOKEN: &str = "shoal-bench-root-access-token";

/// Whether the benchmark signs its requests (`--unsigned` turns it off).
static SIGNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// The credentials the load generator signs with, unless `--unsigned`.
pub(crate) fn root_credentials() -> Option<shoal_client::Credentials> {
    SIGNED.load(Ordering::Relaxed).then(|| shoal_client::Credentials {
        client_id: "root".into(),
        access_token: ROOT_TOKEN.into(),
        certificate: None,
    })
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every benchmark, with the default sizes.
    All,
    /// findTask's latency with the Index holding `entries` entries.
    Index {
        #[arg(long, default_value_t = 100_000)]
        entries: usize,
        #[arg(long, default_value_t = 20_000)]
        lookups: usize,
        /// Run the server on this PostgreSQL database instead of embedded SQLite.
        #[arg(long)]
        database: Option<String>,
    },
    /// Tasks/s through create -> claim -> complete.
    Throughput {
        #[arg(long, default_value_t = 50_000)]
        tasks: usize,
        #[arg(long, default_value_t = 32)]
        creators: usize,
        #[arg(long, default_value_t = 32)]
        workers: usize,
        #[arg(long, default_value_t = 8)]
        batch: usize,
        /// Also publish every event to this AMQP broker.
        #[arg(long)]
        amqp_url: Option<String>,
        /// Run the server on this PostgreSQL database instead of embedded SQLite.
        #[arg(long)]
        database: Option<String>,
        /// Servers on the database (more than one only with --database).
        #[arg(long, default_value_t = 1)]
        servers: usize,
        /// Tasks each creator puts in one task group, as a decision task puts its graph's;
        /// 0: each task its own group (Taskcluster's default taskGroupId).
        #[arg(long, default_value_t = 0)]
        group_size: usize,
        /// Tasks expire (and are deleted by the server) this many seconds after creation,
        /// so the expiry sweep runs beside the load [default: a year after the deadline].
        #[arg(long)]
        expires_after: Option<i64>,
        /// Give every task two `index.` routes (shaped by `--route-shape`), so each
        /// completion is indexed twice.
        #[arg(long)]
        index_routes: bool,
        /// Give every task two routes that are not the Index's (what routes cost without
        /// indexing, to tell the two apart).
        #[arg(long, conflicts_with = "index_routes")]
        plain_routes: bool,
        /// The namespaces of `--index-routes` and `--plain-routes`.
        #[arg(long, value_enum, default_value_t = RouteShape::Push)]
        route_shape: RouteShape,
    },
    /// Outbox -> RabbitMQ messages/s with confirms, and the throughput benchmark with and
    /// without a broker (starts a private RabbitMQ; needs rabbitmq-server installed).
    Events {
        #[arg(long, default_value_t = 50_000)]
        tasks: usize,
        /// Only the drain rate (and raw lapin's rate for reference), not the throughput runs.
        #[arg(long)]
        drain_only: bool,
    },
    /// Claim-wake latency of an idle long-polling worker.
    Wake {
        #[arg(long, default_value_t = 1000)]
        samples: usize,
        /// On this PostgreSQL database.
        #[arg(long)]
        database: Option<String>,
        /// 2: the worker waits on a second server (only with --database).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
        servers: u8,
    },
    /// Trivial tasks (`true`) through one `shoal worker` process.
    Worker {
        #[arg(long, default_value_t = 5000)]
        tasks: usize,
        #[arg(long, default_value_t = 32)]
        capacity: u32,
        /// The worker's `--isolation` (bubblewrap or none).
        #[arg(long, default_value = "bubblewrap")]
        isolation: String,
    },
    /// A task's requests through its credentials proxy against the same requests sent directly.
    Proxy {
        #[arg(long, default_value_t = 500)]
        requests: usize,
        /// The worker's `--isolation` (bubblewrap or none).
        #[arg(long, default_value = "bubblewrap")]
        isolation: String,
    },
    /// A task's mount of an artifact through a real worker: downloaded the first time, from
    /// the worker's cache after.
    Mounts {
        #[arg(long, default_value_t = 50)]
        megabytes: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Tasks in images through a real worker (as root): the first use of a `megabytes` image
    /// (download and unpack), then `runs` cached starts interleaved with sandboxed tasks
    /// without an image.
    Images {
        #[arg(long, default_value_t = 100)]
        megabytes: usize,
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Live-log throughput end to end: a chatty task on a real worker, one reader following.
    Chatty {
        #[arg(long, default_value_t = 256)]
        megabytes: usize,
    },
    /// Live-log throughput: a writer appending chunks as a worker does, one reader following.
    LiveLog {
        #[arg(long, default_value_t = 256)]
        megabytes: usize,
        #[arg(long, default_value_t = 1024)]
        chunk_kb: usize,
    },
    /// A large artifact uploaded to and downloaded from the server, its bytes in the local
    /// directory against an S3-compatible store (moto's server on loopback), interleaved.
    Blobs {
        #[arg(long, default_value_t = 100)]
        megabytes: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// moto's server program (`pip install 'moto[server]'`).
        #[arg(long, env = "SHOAL_MOTO_SERVER", default_value = "moto_server")]
        moto: String,
    },
    /// Live-log latency with two servers on one PostgreSQL database: a line appended through
    /// one reaching a follower on it and one on the other.
    LogLatency {
        /// The database (a fresh one: `scripts/postgres start DIR` gives a cluster).
        #[arg(long)]
        database: String,
        #[arg(long, default_value_t = 300)]
        appends: usize,
    },
    /// What hostile clients do to a server: costly event-stream patterns against long routes,
    /// slow connections, listings of large definitions; ping latency and memory under each.
    Hostile {
        /// Tasks carrying 64 long routes each.
        #[arg(long, default_value_t = 2)]
        tasks: usize,
        /// Connections holding half a request head.
        #[arg(long, default_value_t = 800)]
        slow_connections: usize,
    },
    /// Idle claimWork long polls at fleet scale (each on its own connection): the server's
    /// memory and other requests' latency while they are held, and a new task's time to one.
    Longpoll {
        #[arg(long, default_value_t = 20_000)]
        polls: usize,
        #[arg(long, default_value_t = 500)]
        samples: usize,
        /// Each worker has its own `id` dimension (as a Swarming bot does) and each task needs
        /// one worker's, so a new task matches one waiter among them all.
        #[arg(long)]
        targeted: bool,
    },
    /// A task graph from submission to finished with trivial workers.
    Graph {
        #[arg(long, value_enum, default_value = "chain")]
        shape: graph::Shape,
        #[arg(long, default_value_t = 1000)]
        tasks: usize,
        #[arg(long, default_value_t = 16)]
        workers: usize,
    },
    /// A constant load whose tasks expire a minute after creation: the database and data
    /// directory sizes over time (they should level off once expiry keeps up).
    Soak {
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        #[arg(long, default_value_t = 300)]
        rate: usize,
        #[arg(long, default_value_t = 60)]
        expires_after: i64,
        /// Seconds between size reports.
        #[arg(long, default_value_t = 30)]
        every: u64,
        /// On this PostgreSQL database (its size is reported instead of SQLite's files).
        #[arg(long)]
        database: Option<String>,
    },
    /// cancelTask sent -> the running task's process gone, through a real `shoal worker`.
    Cancel {
        #[arg(long, default_value_t = 100)]
        samples: usize,
    },
    /// listWorkers, a dimension summary, claimWork and the backlog with this many registered workers.
    Fleet {
        #[arg(long, value_delimiter = ',', default_value = "10,10000")]
        workers: Vec<usize>,
        #[arg(long, default_value_t = 2000)]
        claims: usize,
    },
    /// claimWork with many distinct dimension sets pending and many workers each matching few.
    Dimensions {
        #[arg(long, default_value_t = 50_000)]
        tasks: usize,
        #[arg(long, default_value_t = 10_000)]
        workers: usize,
        /// Claims in flight at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// On this PostgreSQL database.
        #[arg(long)]
        database: Option<String>,
    },
    /// Claim cost and memory with many pending tasks.
    Scale {
        #[arg(long, value_delimiter = ',', default_value = "1000,1000000")]
        pending: Vec<usize>,
        #[arg(long, default_value_t = 20_000)]
        claims: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    SIGNED.store(!cli.unsigned, Ordering::Relaxed);
    // One runtime thread: the load generator shares the machine with what it measures, and
    // on one thread its clients wake each other without crossing threads (its CPU per task
    // ~0.84x, throughput on PostgreSQL 1.08x median of 8 interleaved pairs; README).
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    runtime.block_on(async {
        println!("machine: {} cores, {}", std::thread::available_parallelism().map_or(0, |n| n.get()), cpu_model());
        println!("requests: {}", if cli.unsigned { "unsigned (anonymous)" } else { "signed (Hawk)" });
        match cli.command.unwrap_or(Command::All) {
            Command::All => {
                throughput(50_000, 32, 32, 8, None).await?;
                wake(1000, None, 1).await?;
                worker::live_log(256, 1024).await?;
                worker::worker(5000, 32, "bubblewrap").await?;
                worker::chatty(256).await?;
                graph::graph_bench(graph::Shape::Chain, 1000, 16).await?;
                graph::graph_bench(graph::Shape::Fan, 10_000, 16).await?;
                scale::scale(&[1_000, 1_000_000], 20_000).await?;
                fleet::cancel(100).await?;
                fleet::registry(&[10, 10_000], 2000).await?;
            }
            Command::Throughput {
                tasks,
                creators,
                workers,
                batch,
                amqp_url,
                database,
                servers,
                group_size,
                expires_after,
                index_routes,
                plain_routes,
                route_shape,
            } => {
                EXPIRES_AFTER.store(expires_after.unwrap_or(0), Ordering::Relaxed);
                let word = if index_routes { Some("index") } else { plain_routes.then_some("plain") };
                if let Some(word) = word {
                    ROUTES.set(Routes { word, shape: route_shape }).ok();
                }
                anyhow::ensure!(servers == 1 || database.is_some(), "servers: more than one needs --database");
                let mut args = Vec::new();
                if let Some(url) = &amqp_url {
                    args.extend(["--amqp-url", url.as_str()]);
                }
                if let Some(url) = &database {
                    args.extend(["--database", url.as_str()]);
                }
                throughput_with(tasks, creators, workers, batch, &args, servers, group_size).await?;
            }
            Command::Index { entries, lookups, database } => {
                index::index(entries, lookups, database.as_deref()).await?
            }
            Command::Events { tasks, drain_only } => events::events(tasks, drain_only).await?,
            Command::Wake { samples, database, servers } => {
                anyhow::ensure!(servers == 1 || database.is_some(), "servers: 2 needs --database");
                wake(samples, database.as_deref(), usize::from(servers)).await?;
            }
            Command::LiveLog { megabytes, chunk_kb } => worker::live_log(megabytes, chunk_kb).await?,
            Command::Worker { tasks, capacity, isolation } => worker::worker(tasks, capacity, &isolation).await?,
            Command::Proxy { requests, isolation } => worker::proxy(requests, &isolation).await?,
            Command::Chatty { megabytes } => worker::chatty(megabytes).await?,
            Command::Mounts { megabytes, runs } => worker::mounts(megabytes, runs).await?,
            Command::Images { megabytes, runs } => worker::images(megabytes, runs).await?,
            Command::Scale { pending, claims } => scale::scale(&pending, claims).await?,
            Command::Dimensions { tasks, workers, concurrency, database } => {
                dimensions::dimensions(tasks, workers, concurrency, database.as_deref()).await?
            }
            Command::Cancel { samples } => fleet::cancel(samples).await?,
            Command::Fleet { workers, claims } => fleet::registry(&workers, claims).await?,
            Command::Soak { seconds, rate, expires_after, every, database } => {
                soak::soak(seconds, rate, expires_after, every, database.as_deref()).await?;
            }
            Command::LogLatency { database, appends } => live::log_latency(&database, appends).await?,
            Command::Blobs { megabytes, rounds, moto } => blobs::blobs(megabytes, rounds, &moto).await?,
            Command::Hostile { tasks, slow_connections } => hostile::hostile(tasks, slow_connections).await?,
            Command::Longpoll { polls, samples, targeted } => longpoll::longpoll(polls, samples, targeted).await?,
            Command::Graph { shape, tasks, workers } => {
                graph::graph_bench(shape, tasks, workers).await?;
            }
        }
        Ok(())
    })
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into())
}

/// A task definition for `queue`, valid for an hour.
fn definition(queue: &str) -> Value {
    definition_with_retries(queue, 5)
}

/// The current time.
fn now() -> shoal_engine::Timestamp {
    shoal_engine::Timestamp(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64),
    )
}

/// A task definition for `queue` allowing `retries` automatic retries.
fn definition_with_retries(queue: &str, retries: u32) -> Value {
    let now = now();
    json!({
        "taskQueueId": queue,
        "created": now.to_string(),
        "deadline": now.plus_secs(3600).to_string(),
        "retries": retries,
        "payload": {"command": [["true"]], "maxRunTime": 600},
        "metadata": {"name": "bench", "description": "benchmark task", "owner": "bench@example.com", "source": "https://example.com/bench"}
    })
}

/// A JSON value as request bytes, serialized once (copying a few hundred bytes per request
/// is cheaper than serializing again).
fn bytes_of(value: &Value) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec(value)?)
}

/// Percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn wake(samples: usize, database: Option<&str>, servers: usize) -> anyhow::Result<()> {
    // With two servers on PostgreSQL the worker waits on one and the task is created on the other.
    let args: Vec<&str> = database.map(|url| vec!["--database", url]).unwrap_or_default();
    let server = Server::start(None, &args).await?;
    let waiting_on = match servers {
        2 => Some(Server::start(None, &args).await?),
        _ => None,
    };
    let wait_base = waiting_on.as_ref().unwrap_or(&server).base.clone();
    let client = server.client();
    let mut latencies = Vec::with_capacity(samples);
    for _ in 0..samples {
        let (client2, base) = (client.clone(), wait_base.clone());
        let waiting = tokio::spawn(async move {
            let body = json!({"workerGroup": "bench", "workerId": "idle", "tasks": 1});
            let res: Value =
                client2.post(format!("{base}/claim-work/bench%2Fwake")).json(&body).send().await?.json().await?;
            Ok::<(Instant, Value), anyhow::Error>((Instant::now(), res))
        });
        // Give the long poll time to reach the server and go idle.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let sent = Instant::now();
        let url = format!("{}/task/{}", server.base, slugid::nice());
        let res = client.put(url).json(&definition("bench/wake")).send().await?;
        anyhow::ensure!(res.status().is_success(), "createTask failed");
        let (received, claims) = waiting.await??;
        anyhow::ensure!(claims["tasks"].as_array().is_some_and(|t| t.len() == 1), "claim came back empty");
        latencies.push(received.saturating_duration_since(sent));
    }
    latencies.sort();
    println!(
        "wake{}: idle long-polling worker, createTask sent -> claim received, {samples} samples: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        match (database, &waiting_on) {
            (None, _) => "",
            (Some(_), None) => " (PostgreSQL, one server)",
            (Some(_), Some(_)) => " (PostgreSQL, worker on another server than the create)",
        },
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    server.stop().await;
    if let Some(other) = waiting_on {
        other.stop().await;
    }
    Ok(())
}
