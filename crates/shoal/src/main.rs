//! The `shoal` binary: reads its settings, wires store, service and API together, runs, and
//! shuts down in stages on SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use shoal_api::AppState;
use shoal_blobs::Blobs;
use shoal_bus::{AmqpBus, Bus};
use shoal_service::{Authority, Queue, QueueConfig, SizeLimits};
use shoal_store::{PgConfig, PgStore, SqliteConfig, SqliteStore, Store};
use tokio::sync::watch;

mod cli;
mod credentials;
mod data_dir;
mod dev;
mod expire;
mod graph;
mod limits;
mod runtime;
mod workers;

// The server allocates many small, short-lived buffers per request (JSON, headers);
// mimalloc serves them with less CPU than glibc's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Shoal: a task-execution service for CI fleets.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the Taskcluster Queue API v1 at <rootUrl>/api/queue/v1/.
    Server(ServerArgs),
    /// Claim tasks from one queue and run their commands.
    Worker(WorkerArgs),
    /// A server on embedded storage plus local workers, in one process; --example runs the
    /// example CI graph.
    Dev(dev::DevArgs),
    /// Create, inspect, follow and cancel tasks.
    Task {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: cli::TaskCommand,
    },
    /// Artifacts of tasks.
    Artifact {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: ArtifactCommand,
    },
    /// Task groups.
    Group {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: GroupCommand,
    },
    /// Task graphs (the task-graph scheduler at <rootUrl>/api/scheduler/v1/).
    Graph {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: graph::GraphCommand,
    },
    /// The worker registry: list, show, quarantine, release and terminate workers.
    Workers {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: workers::WorkersCommand,
    },
    /// What expired and will be deleted by the servers' next sweep (`--dry-run`).
    Expire(expire::ExpireArgs),
    /// Apply pending schema migrations to a PostgreSQL database (servers also do so at start).
    Migrate {
        /// postgres://user[:password]@host[:port]/database
        #[arg(long, env = "SHOAL_DATABASE_URL")]
        database: String,
    },
    /// Print events as they happen, one JSON object per line ({exchange, routingKey, routes, payload}).
    Listen {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(flatten)]
        args: cli::ListenArgs,
    },
}

#[derive(Debug, Subcommand)]
enum ArtifactCommand {
    /// Download an artifact (links and references followed) to a file or stdout.
    Get {
        /// The task.
        task_id: String,
        /// The artifact's name, e.g. public/logs/live.log.
        name: String,
        /// The run [default: the latest].
        #[arg(long)]
        run: Option<u32>,
        /// Write here instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    /// Show progress until every task of the group is resolved, then a summary; exits 1
    /// unless every task completed.
    Wait {
        /// The task group.
        task_group_id: String,
        /// Print the summary as JSON (no progress bar).
        #[arg(long)]
        json: bool,
    },
}

/// Flags of `shoal worker`.
#[derive(Debug, Clone, clap::Args)]
struct WorkerArgs {
    /// The server and the worker's credentials (it needs queue:claim-work:<queue> and
    /// queue:worker-id:<group>/<id>; each claimed run brings its own).
    #[command(flatten)]
    address: cli::ServerAddress,
    /// The task queue to claim from, `provisionerId/workerType`.
    #[arg(long)]
    queue: String,
    /// A dimension this worker has, `key=value` (repeat for more keys or values).
    #[arg(long = "dimension", value_parser = parse_dimension)]
    dimensions: Vec<(String, String)>,
    /// Most tasks run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=32))]
    capacity: u32,
    /// Worker group [default: local].
    #[arg(long, default_value = "local")]
    worker_group: String,
    /// Worker id, unique within its group: one worker process per id [default: the host's
    /// name, as an identifier].
    #[arg(long)]
    worker_id: Option<String>,
    /// Where task directories are made [default: <temp dir>/shoal-work].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when a task is stopped.
    #[arg(long, default_value_t = 10)]
    grace: u64,
}

fn parse_dimension(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or("a dimension is key=value")?;
    Ok((key.to_owned(), value.to_owned()))
}

/// Flags of `shoal server`; each overrides the same key of the config file.
#[derive(Debug, Clone, clap::Args)]
struct ServerArgs {
    /// TOML file with any of the keys below (flags and SHOAL_* variables win over it).
    #[arg(long, env = "SHOAL_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "SHOAL_LISTEN")]
    listen: Option<SocketAddr>,
    /// Directory for the embedded database [default: shoal-data].
    #[arg(long, env = "SHOAL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Seconds a claim holds before the worker must reclaim [default: 1200, as Taskcluster].
    #[arg(long, env = "SHOAL_CLAIM_TIMEOUT")]
    claim_timeout: Option<i64>,
    /// Seconds an idle claimWork waits for work before answering empty [default: 20, as Taskcluster].
    #[arg(long, env = "SHOAL_CLAIM_WAIT")]
    claim_wait: Option<u64>,
    /// The URL clients reach this server at, used in the URLs it hands out [default: http://<listen>].
    #[arg(long, env = "SHOAL_ROOT_URL")]
    root_url: Option<String>,
    /// Also publish every event to this AMQP 0-9-1 broker (RabbitMQ), e.g. amqp://user:pass@host:5672/%2f [default: none].
    #[arg(long, env = "SHOAL_AMQP_URL")]
    amqp_url: Option<String>,
    /// Keep state in this PostgreSQL database, shared with other servers, e.g.
    /// postgres://shoal@db:5432/shoal [default: embedded SQLite under --data-dir].
    #[arg(long, env = "SHOAL_DATABASE_URL")]
    database: Option<String>,
    /// Seconds a request waits for PostgreSQL to answer before failing with 503 (a database
    /// that hangs, or a network gone silent) [default: 20].
    #[arg(long, env = "SHOAL_DATABASE_TIMEOUT")]
    database_timeout: Option<u64>,
    /// The schedulerId of task-graph tasks (`/api/scheduler/v1/`) [default: task-graph-scheduler].
    #[arg(long, env = "SHOAL_SCHEDULER_ID")]
    scheduler_id: Option<String>,
    /// Most client connections open at once; more are answered 503 and closed
    /// [default: the open-descriptor limit, raised at start where allowed, less 256].
    #[arg(long, env = "SHOAL_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Most connections one client address may hold open at once (behind a proxy, all clients
    /// share its address: raise this to max-connections) [default: a sixteenth of max-connections].
    #[arg(long, env = "SHOAL_MAX_CONNECTIONS_PER_ADDRESS")]
    max_connections_per_address: Option<usize>,
    /// Most bytes one artifact's upload may hold [default: 8 GiB].
    #[arg(long, env = "SHOAL_MAX_ARTIFACT_BYTES")]
    max_artifact_bytes: Option<u64>,
    /// Most bytes one run's artifacts may hold together [default: 32 GiB].
    #[arg(long, env = "SHOAL_MAX_RUN_BYTES")]
    max_run_bytes: Option<u64>,
    /// Most bytes one run's live log may hold [default: 1 GiB].
    #[arg(long, env = "SHOAL_MAX_LOG_BYTES")]
    max_log_bytes: Option<u64>,
    /// The root client's access token [default: made on first start and kept in
    /// <data-dir>/root-access-token].
    #[arg(long, env = "SHOAL_ROOT_ACCESS_TOKEN", hide_env_values = true)]
    root_access_token: Option<credentials::Secret>,
    /// Seconds a task queue's record is kept after it was last used [default: 5 days].
    #[arg(long, env = "SHOAL_QUEUE_RETENTION")]
    queue_retention: Option<i64>,
    /// Seconds a heartbeating worker (`shoal worker`) may stay silent before it is marked
    /// missing and its runs end at once, retried elsewhere [default: 120].
    #[arg(long, env = "SHOAL_WORKER_DEAD_AFTER")]
    worker_dead_after: Option<u64>,
    /// Seconds a completed idempotent task may stand for an identical new one [default: 7 days].
    #[arg(long, env = "SHOAL_DEDUP_WINDOW")]
    dedup_window: Option<i64>,
}

/// The settings of `shoal server`, as written in the config file; every default is local and safe.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
struct ServerConfig {
    listen: SocketAddr,
    data_dir: PathBuf,
    claim_timeout: i64,
    claim_wait: u64,
    root_url: Option<String>,
    amqp_url: Option<String>,
    database: Option<String>,
    database_timeout: u64,
    scheduler_id: String,
    max_connections: Option<usize>,
    max_connections_per_address: Option<usize>,
    max_artifact_bytes: u64,
    max_run_bytes: u64,
    max_log_bytes: u64,
    root_access_token: Option<credentials::Secret>,
    queue_retention: i64,
    worker_dead_after: u64,
    dedup_window: i64,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("shoal-data"),
            claim_timeout: 1200,
            claim_wait: 20,
            root_url: None,
            amqp_url: None,
            database: None,
            database_timeout: shoal_store::PG_REQUEST_TIMEOUT.as_secs(),
            scheduler_id: shoal_engine::graph::DEFAULT_SCHEDULER_ID.to_owned(),
            max_connections: None,
            max_connections_per_address: None,
            max_artifact_bytes: SizeLimits::default().artifact_bytes,
            max_run_bytes: SizeLimits::default().run_bytes,
            max_log_bytes: SizeLimits::default().log_bytes,
            root_access_token: None,
            queue_retention: shoal_store::DEFAULT_QUEUE_RETENTION_SECS,
            worker_dead_after: shoal_engine::worker::DEFAULT_DEAD_AFTER_SECS as u64,
            dedup_window: shoal_engine::dedup::DEFAULT_WINDOW_SECS,
        }
    }
}

impl ServerConfig {
    /// The embedded SQLite database under the data directory, or the PostgreSQL one named.
    async fn open_store(&self) -> anyhow::Result<Store> {
        let Some(url) = &self.database else {
            let path = self.data_dir.join("shoal.db");
            let store = SqliteStore::open(&SqliteConfig {
                path: path.clone(),
                claim_timeout_secs: self.claim_timeout,
                graph_scheduler_id: self.scheduler_id.clone(),
                queue_retention_secs: self.queue_retention,
                worker_dead_after_secs: self.worker_dead_after as i64,
                dedup_window_secs: self.dedup_window,
            })
            .with_context(|| format!("opening the database {}", path.display()))?;
            return Ok(Store::Sqlite(store));
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            anyhow::bail!(
                "database: must be a postgres:// URL (leave it out for the embedded SQLite database under data-dir)"
            );
        }
        let pg = self.pg_config(url);
        // The PostgreSQL client blocks: connect and migrate off the async threads.
        let store = tokio::task::spawn_blocking(move || PgStore::open(&pg))
            .await
            .context("opening the database")?
            .context("opening the PostgreSQL database")?;
        Ok(Store::Postgres(store))
    }

    /// The PostgreSQL backend's settings for the database at `url`.
    fn pg_config(&self, url: &str) -> PgConfig {
        let mut pg = PgConfig::new(url);
        pg.claim_timeout_secs = self.claim_timeout;
        pg.request_timeout = Duration::from_secs(self.database_timeout);
        pg.graph_scheduler_id.clone_from(&self.scheduler_id);
        pg.queue_retention_secs = self.queue_retention;
        pg.worker_dead_after_secs = self.worker_dead_after as i64;
        pg.dedup_window_secs = self.dedup_window;
        pg
    }

    /// Defaults, then the file, then environment and flags.
    fn resolve(args: &ServerArgs) -> anyhow::Result<ServerConfig> {
        let mut config = match &args.config {
            None => ServerConfig::default(),
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))?
            }
        };
        if let Some(listen) = args.listen {
            config.listen = listen;
        }
        if let Some(data_dir) = &args.data_dir {
            config.data_dir.clone_from(data_dir);
        }
        if let Some(claim_timeout) = args.claim_timeout {
            config.claim_timeout = claim_timeout;
        }
        if let Some(claim_wait) = args.claim_wait {
            config.claim_wait = claim_wait;
        }
        if let Some(root_url) = &args.root_url {
            config.root_url = Some(root_url.clone());
        }
        if let Some(amqp_url) = &args.amqp_url {
            config.amqp_url = Some(amqp_url.clone());
        }
        if let Some(database) = &args.database {
            config.database = Some(database.clone());
        }
        if let Some(database_timeout) = args.database_timeout {
            config.database_timeout = database_timeout;
        }
        if let Some(scheduler_id) = &args.scheduler_id {
            config.scheduler_id.clone_from(scheduler_id);
        }
        if let Some(max_connections) = args.max_connections {
            config.max_connections = Some(max_connections);
        }
        if let Some(per_address) = args.max_connections_per_address {
            config.max_connections_per_address = Some(per_address);
        }
        if let Some(bytes) = args.max_artifact_bytes {
            config.max_artifact_bytes = bytes;
        }
        if let Some(bytes) = args.max_run_bytes {
            config.max_run_bytes = bytes;
        }
        if let Some(bytes) = args.max_log_bytes {
            config.max_log_bytes = bytes;
        }
        if let Some(token) = &args.root_access_token {
            config.root_access_token = Some(token.clone());
        }
        if let Some(secs) = args.queue_retention {
            config.queue_retention = secs;
        }
        if let Some(secs) = args.worker_dead_after {
            config.worker_dead_after = secs;
        }
        if let Some(secs) = args.dedup_window {
            config.dedup_window = secs;
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=86_400).contains(&self.claim_timeout), "claim-timeout must be 1..=86400 seconds");
        anyhow::ensure!(self.claim_wait <= 300, "claim-wait must be 0..=300 seconds");
        anyhow::ensure!(
            (3600..=31_536_000).contains(&self.queue_retention),
            "queue-retention must be 3600..=31536000 seconds (an hour to a year)"
        );
        anyhow::ensure!((1..=600).contains(&self.database_timeout), "database-timeout must be 1..=600 seconds");
        anyhow::ensure!((1..=86_400).contains(&self.worker_dead_after), "worker-dead-after must be 1..=86400 seconds");
        anyhow::ensure!((1..=31_536_000).contains(&self.dedup_window), "dedup-window must be 1..=31536000 seconds");
        anyhow::ensure!(
            self.max_connections.is_none_or(|max| (16..=10_000_000).contains(&max)),
            "max-connections must be 16..=10000000"
        );
        anyhow::ensure!(
            self.max_connections_per_address.is_none_or(|max| (1..=10_000_000).contains(&max)),
            "max-connections-per-address must be 1..=10000000"
        );
        for (name, bytes) in [
            ("max-artifact-bytes", self.max_artifact_bytes),
            ("max-run-bytes", self.max_run_bytes),
            ("max-log-bytes", self.max_log_bytes),
        ] {
            anyhow::ensure!(bytes >= 1024, "{name} must be at least 1024 bytes");
        }
        anyhow::ensure!(
            shoal_engine::id::is_identifier(&self.scheduler_id),
            "scheduler-id must be 1 to 38 characters of [a-zA-Z0-9-_]"
        );
        if let Some(root_url) = &self.root_url {
            anyhow::ensure!(
                root_url.starts_with("http://") || root_url.starts_with("https://"),
                "root-url must be an http:// or https:// URL"
            );
        }
        if let Some(credentials::Secret(token)) = &self.root_access_token {
            credentials::check_root_token(token)?;
        }
        if let Some(amqp_url) = &self.amqp_url {
            AmqpBus::new(amqp_url).map_err(|err| anyhow::anyhow!("amqp-url: {err}"))?;
        }
        Ok(())
    }

    fn bus(&self) -> anyhow::Result<Bus> {
        Ok(match &self.amqp_url {
            None => Bus::Local,
            Some(url) => Bus::Amqp(Box::new(AmqpBus::new(url).map_err(|err| anyhow::anyhow!("amqp-url: {err}"))?)),
        })
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Services log their work; interactive commands only what went wrong, so their output
    // (and dev's progress bar) stays readable.
    let default_filter = match cli.command {
        Command::Server(_) | Command::Worker(_) => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG").unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Command::Migrate { database } = &cli.command {
        // The PostgreSQL client blocks on its own runtime: run it outside ours.
        let applied = shoal_store::migrate_postgres(database).context("migrating the database")?;
        println!("applied {applied} migration(s); the schema is at version {}", shoal_store::PG_SCHEMA_VERSION);
        return Ok(());
    }
    if let Command::Server(args) = &cli.command {
        let config = ServerConfig::resolve(args)?;
        let beside = if config.database.is_none() { runtime::Beside::Writer } else { runtime::Beside::Nothing };
        return runtime::start(beside)?.block_on(server(config));
    }
    let runtime = runtime::start(runtime::Beside::Nothing)?;
    match cli.command {
        Command::Migrate { .. } | Command::Server(_) => Ok(()),
        Command::Expire(args) => runtime.block_on(expire::expire(args)),
        Command::Worker(args) => runtime.block_on(worker(args)),
        Command::Dev(args) => {
            if !runtime.block_on(dev::dev(args))? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Task { address, command } => runtime.block_on(cli::task(&address, command)),
        Command::Workers { address, command } => runtime.block_on(workers::workers(&address, command)),
        Command::Graph { address, command } => {
            if !runtime.block_on(graph::graph(&address, command))? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Listen { address, args } => runtime.block_on(cli::listen(&address, args)),
        Command::Artifact { address, command: ArtifactCommand::Get { task_id, name, run, output } } => {
            runtime.block_on(cli::artifact_get(&address, &task_id, &name, run, output.as_deref()))
        }
        Command::Group { address, command: GroupCommand::Wait { task_group_id, json } } => {
            let all_completed =
                runtime.block_on(async { cli::group_wait(&address.client()?, &task_group_id, json).await })?;
            if !all_completed {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

async fn server(config: ServerConfig) -> anyhow::Result<()> {
    let shutdown = ShutdownSignal::install()?;
    let running = RunningServer::start(&config).await?;
    // Printed on stdout so scripts (and tests) can learn the port when listening on :0.
    println!("shoal listening on http://{} (rootUrl {})", running.local, running.root_url);
    shutdown.received().await;
    running.stop().await
}

/// A server started in this process: the API, the due loop and the store behind them.
struct RunningServer {
    local: SocketAddr,
    root_url: String,
    /// The root client's access token (for `shoal dev`'s own workers and its exports).
    root_token: credentials::Secret,
    stop: watch::Sender<bool>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    due: tokio::task::JoinHandle<()>,
    publisher: tokio::task::JoinHandle<()>,
    auth_refresh: tokio::task::JoinHandle<()>,
    queue: Queue,
    store: Store,
    /// Held while the server runs on the embedded database (`data_dir::lock`).
    _data_dir_lock: Option<std::fs::File>,
}

/// How long a temporary upload file must have gone unwritten before a starting server
/// removes it as left behind (an upload in progress writes as its bytes arrive).
const STALE_UPLOAD: Duration = Duration::from_secs(3600);

impl RunningServer {
    async fn start(config: &ServerConfig) -> anyhow::Result<RunningServer> {
        data_dir::make_private(&config.data_dir)?;
        let data_dir_lock = match config.database {
            None => Some(data_dir::lock(&config.data_dir)?),
            Some(_) => None,
        };
        let store = config.open_store().await?;
        let queue_config = QueueConfig {
            claim_wait: Duration::from_secs(config.claim_wait),
            sizes: SizeLimits {
                artifact_bytes: config.max_artifact_bytes,
                run_bytes: config.max_run_bytes,
                log_bytes: config.max_log_bytes,
            },
            worker_dead_after: Duration::from_secs(config.worker_dead_after),
            ..QueueConfig::default()
        };
        let blobs_dir = config.data_dir.join("blobs");
        let blobs =
            Blobs::local(&blobs_dir).with_context(|| format!("opening blob storage {}", blobs_dir.display()))?;
        // Uploads a killed process left half-written; in the background, since a large data
        // dir takes a while to walk.
        let sweep = blobs.clone();
        tokio::task::spawn_blocking(move || match sweep.remove_stale_uploads(STALE_UPLOAD) {
            Ok(0) => {}
            Ok(n_removed) => tracing::info!(n_removed, "removed temporary uploads left by a stopped server"),
            Err(err) => tracing::warn!(error = %err, "looking for temporary uploads left behind failed"),
        });
        let (root_token, kept) = credentials::root_access_token(config.root_access_token.as_ref(), &config.data_dir)?;
        if let Some(path) = &kept {
            tracing::info!(path = %path.display(), "the root client's access token is in this file (clientId root)");
        }
        let root_token_copy = root_token.clone();
        let auth = Authority::open(store.clone(), root_token).await.context("loading clients and roles")?;
        let queue = Queue::new(store.clone(), blobs, queue_config);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let local = listener.local_addr().context("reading the bound address")?;
        let root_url = config.root_url.clone().unwrap_or_else(|| format!("http://{local}"));
        let root_url = root_url.trim_end_matches('/').to_owned();
        let (stop, stop_rx) = watch::channel(false);
        let due = tokio::spawn(shoal_service::run_due_loop(queue.clone(), stopped(stop_rx.clone())));
        let publisher =
            tokio::spawn(shoal_service::run_publisher(store.clone(), config.bus()?, stopped(stop_rx.clone())));
        let auth_refresh = tokio::spawn(shoal_service::run_auth_refresh(auth.clone(), stopped(stop_rx.clone())));
        let state = AppState {
            queue: queue.clone(),
            auth,
            nonces: Default::default(),
            started: Instant::now(),
            root_url: root_url.clone(),
            subscribers: shoal_api::Subscribers::default(),
        };
        let descriptors = limits::raise_descriptor_limit();
        let max_connections = limits::max_connections(config.max_connections, descriptors);
        let connection_limits = shoal_api::ConnectionLimits {
            max_connections,
            max_connections_per_address: limits::per_address(config.max_connections_per_address, max_connections),
            ..shoal_api::ConnectionLimits::default()
        };
        tracing::debug!(
            max_connections,
            per_address = connection_limits.max_connections_per_address,
            descriptors,
            "connection limits"
        );
        let serving = tokio::spawn(shoal_api::serve_with(listener, state, connection_limits, stopped(stop_rx)));
        Ok(RunningServer {
            local,
            root_url,
            root_token: credentials::Secret(root_token_copy),
            stop,
            serving,
            due,
            publisher,
            auth_refresh,
            queue,
            store,
            _data_dir_lock: data_dir_lock,
        })
    }

    /// Stops in stages: no new requests, open ones finish, the due loop stops, the store
    /// commits what is queued.
    async fn stop(self) -> anyhow::Result<()> {
        tracing::info!("shutting down: no new requests; finishing open ones");
        let _ = self.stop.send(true);
        // Event streams never end by themselves.
        self.queue.close_subscriptions();
        self.serving.await.context("server task")?.context("serving")?;
        self.due.await.context("due loop")?;
        self.auth_refresh.await.context("auth refresh")?;
        // Unpublished messages stay in the outbox for the next start.
        self.publisher.await.context("publisher")?;
        self.store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

async fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    let shutdown = ShutdownSignal::install()?;
    let client = args.address.client()?;
    let mut dimensions = serde_json::Map::new();
    for (key, value) in args.dimensions {
        let values = dimensions.entry(key).or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let serde_json::Value::Array(values) = values {
            values.push(serde_json::Value::String(value));
        }
    }
    let config = shoal_worker::WorkerConfig {
        task_queue_id: args.queue,
        worker_group: args.worker_group,
        worker_id: args.worker_id.unwrap_or_else(host_worker_id),
        dimensions: serde_json::Value::Object(dimensions),
        capacity: args.capacity,
        work_dir: args.work_dir.unwrap_or_else(|| std::env::temp_dir().join("shoal-work")),
        grace: Duration::from_secs(args.grace),
    };
    shoal_worker::guard(&config.work_dir)
        .with_context(|| format!("preparing the work directory {}", config.work_dir.display()))?;
    tracing::info!(queue = %config.task_queue_id, worker.id = %config.worker_id, capacity = config.capacity, "worker started");
    shoal_worker::run(client, config, shutdown.received()).await;
    tracing::info!("worker stopped");
    Ok(())
}

/// The host's name as a worker id: its first label, other characters than letters, digits,
/// `-` and `_` as `-`, at most 38 characters.
fn host_worker_id() -> String {
    let name = nix::unistd::gethostname().ok().and_then(|name| name.into_string().ok()).unwrap_or_default();
    let label = name.split('.').next().unwrap_or_default();
    let id: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .take(38)
        .collect();
    if id.is_empty() { "worker".to_owned() } else { id }
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// SIGINT or SIGTERM, listened for from the moment this is made: a signal that arrives
/// before anyone awaits it is kept, not lost (or ignored, for processes started in the
/// background).
struct ShutdownSignal {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    fn install() -> anyhow::Result<ShutdownSignal> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(ShutdownSignal {
            interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        })
    }

    async fn received(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: Option<PathBuf>, listen: Option<&str>) -> ServerArgs {
        ServerArgs {
            config,
            listen: listen.map(|l| l.parse().unwrap()),
            data_dir: None,
            claim_timeout: None,
            claim_wait: Some(5),
            root_url: None,
            amqp_url: None,
            database: None,
            database_timeout: None,
            scheduler_id: None,
            max_connections: None,
            max_connections_per_address: None,
            max_artifact_bytes: None,
            max_run_bytes: None,
            max_log_bytes: None,
            root_access_token: None,
            queue_retention: None,
            worker_dead_after: None,
            dedup_window: None,
        }
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shoal.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:9000\"\ndata-dir = \"/var/lib/shoal\"\nclaim-wait = 7\n").unwrap();
        let config = ServerConfig::resolve(&args(Some(path.clone()), None)).unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/shoal"));
        assert_eq!(config.claim_wait, 5, "the flag wins over the file");
        assert_eq!(config.claim_timeout, 1200, "unset keys keep their defaults");
        let config = ServerConfig::resolve(&args(Some(path), Some("127.0.0.1:1"))).unwrap();
        assert_eq!(config.listen.port(), 1);
    }

    #[test]
    fn the_database_settings_reach_the_store() {
        let mut args = args(None, None);
        (args.database_timeout, args.claim_timeout) = (Some(3), Some(60));
        let pg = ServerConfig::resolve(&args).unwrap().pg_config("postgres://shoal@db/shoal");
        assert_eq!((pg.request_timeout, pg.claim_timeout_secs), (Duration::from_secs(3), 60));
    }

    #[test]
    fn bad_files_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shoal.toml");
        std::fs::write(&path, "claim-timeout = 0\n").unwrap();
        let err = ServerConfig::resolve(&args(Some(path.clone()), None)).unwrap_err();
        assert!(format!("{err:#}").contains("claim-timeout"), "{err:#}");
        std::fs::write(&path, "database-timeout = 0\n").unwrap();
        let err = ServerConfig::resolve(&args(Some(path.clone()), None)).unwrap_err();
        assert!(format!("{err:#}").contains("database-timeout must be 1..=600"), "{err:#}");
        std::fs::write(&path, "queue-retention = 60\n").unwrap();
        let err = ServerConfig::resolve(&args(Some(path.clone()), None)).unwrap_err();
        assert!(format!("{err:#}").contains("queue-retention must be"), "{err:#}");
        std::fs::write(&path, "colour = \"blue\"\n").unwrap();
        let err = ServerConfig::resolve(&args(Some(path), None)).unwrap_err();
        assert!(format!("{err:#}").contains("colour"), "{err:#}");
    }
}
