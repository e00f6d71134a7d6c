//! `shoal worker`: its flags, and the worker started with them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use shoal_worker::{Isolation, SandboxOptions, SlotLimits};

use crate::cli;
use crate::server::ShutdownSignal;

/// Flags of `shoal worker`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The server and the worker's credentials (it needs queue:claim-work:<queue> and
    /// queue:worker-id:<group>/<id>; each claimed run brings its own).
    #[command(flatten)]
    address: cli::ServerAddress,
    /// The task queue to claim from, `provisionerId/workerType`; repeat to serve several
    /// (in order of preference) as one worker with one capacity.
    #[arg(long = "queue", required = true)]
    queues: Vec<String>,
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
    /// How tasks are contained: `bubblewrap` (each command in a sandbox; as root, each slot its
    /// own uid from 60000) or `none` (tasks run as the worker, in its filesystem).
    #[arg(long, value_enum, default_value_t = IsolationArg::Bubblewrap, env = "SHOAL_ISOLATION")]
    isolation: IsolationArg,
    /// With bubblewrap, when the worker runs as root: slot `n`'s tasks run as uid and gid
    /// `first-uid + n`. Give each worker on a machine its own range.
    #[arg(long, default_value_t = shoal_worker::SLOT_UID_BASE, value_parser = clap::value_parser!(u32).range(1000..))]
    first_uid: u32,
    /// With bubblewrap: a host path a task sees, read-only, beside the system's directories
    /// (`/usr`, `/bin`, `/lib*`, `/etc` less what only root may read); repeat for more.
    #[arg(long = "sandbox-path")]
    sandbox_paths: Vec<PathBuf>,
    /// With bubblewrap: the size of each task's private `/tmp` (kept in memory), e.g. `2GiB`.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    tmp_size: u64,
    /// Most processes and threads a slot's commands run at once (as root, the kernel's
    /// per-user limit of each slot's user); reaching it ends the run.
    #[arg(long, default_value_t = shoal_worker::limits::DEFAULT_PROCESSES, value_parser = clap::value_parser!(u64).range(16..))]
    max_processes: u64,
    /// Most resident memory a slot's commands hold, e.g. `8GiB`; more ends the run
    /// [default: three quarters of the machine's memory, shared among the slots].
    #[arg(long, value_parser = parse_size)]
    max_memory: Option<u64>,
    /// Most bytes in a slot's task directory, e.g. `20GiB`; more ends the run.
    #[arg(long, default_value = "20GiB", value_parser = parse_size)]
    max_task_disk: u64,
    /// Most bytes kept in `<work-dir>/cache` for mount downloads and named caches, e.g.
    /// `10GiB`, `500MiB` (the least recently used go first).
    #[arg(long, default_value = "10GiB", value_parser = parse_size)]
    cache_size: u64,
    /// A command (run with `sh -c`, as the worker) whose failure puts the worker in
    /// maintenance: it claims nothing until the command passes again; running tasks go on.
    #[arg(long)]
    health_check: Option<String>,
    /// Seconds between health checks; also the most one may take.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    health_check_every: u64,
    /// A file holding the Ed25519 key that signs the chain of trust of tasks asking for it
    /// (`features.chainOfTrust`), as generic-worker keeps it: the base64 of its 32-byte seed,
    /// readable by its owner alone (`shoal new-ed25519-keypair --file` makes one).
    #[arg(long, env = "SHOAL_SIGNING_KEY")]
    signing_key: Option<PathBuf>,
    /// A registry (`host:port`) that images are pulled from over plain HTTP rather than
    /// HTTPS, as docker's `insecure-registries`; repeat for several.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    insecure_registries: Vec<String>,
}

/// `--isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum IsolationArg {
    /// A bubblewrap sandbox per command.
    Bubblewrap,
    /// None: tasks are not contained.
    None,
}

impl IsolationArg {
    /// The isolation, checked on this machine.
    pub(crate) fn resolve(self, first_uid: u32, options: &SandboxOptions) -> anyhow::Result<Isolation> {
        match self {
            IsolationArg::Bubblewrap => Isolation::bubblewrap(first_uid, options)
                .map_err(|err| anyhow::anyhow!("--isolation bubblewrap: {err}")),
            IsolationArg::None => {
                tracing::warn!(
                    "--isolation none: tasks run as this worker's user in its filesystem and are NOT contained; \
                     any task can read and change what this user can"
                );
                Ok(Isolation::None)
            }
        }
    }
}

/// A size in bytes: a number with an optional KiB, MiB, GiB or TiB (or K, M, G, T).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{text}`: a size is a number with KiB, MiB, GiB or TiB")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|number| number.checked_mul(1 << shift))
        .ok_or_else(|| format!("`{text}`: a size is a number with KiB, MiB, GiB or TiB"))
}

fn parse_dimension(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or("a dimension is key=value")?;
    Ok((key.to_owned(), value.to_owned()))
}

/// Runs a worker until SIGINT or SIGTERM.
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    let shutdown = ShutdownSignal::install()?;
    let client = args.address.client()?;
    let mut dimensions = serde_json::Map::new();
    for (key, value) in args.dimensions {
        let values = dimensions.entry(key).or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let serde_json::Value::Array(values) = values {
            values.push(serde_json::Value::String(value));
        }
    }
    let work_dir = args.work_dir.unwrap_or_else(|| std::env::temp_dir().join("shoal-work"));
    shoal_worker::guard(&work_dir).with_context(|| format!("preparing the work directory {}", work_dir.display()))?;
    let cache = shoal_worker::Cache::open(&work_dir.join("cache"), args.cache_size)
        .with_context(|| format!("opening the cache in {}", work_dir.display()))?;
    // The server's rule for the queues one worker serves, checked before the first claim.
    let task_queue_id = args.queues.first().context("--queue is required")?.clone();
    let mut more_queues = shoal_engine::worker::served_queues(&task_queue_id, Some(args.queues))
        .map_err(|err| anyhow::anyhow!("--queue: {err}"))?;
    more_queues.remove(0);
    let sandbox = SandboxOptions { paths: args.sandbox_paths, tmp_size: args.tmp_size };
    let defaults = SlotLimits::defaults(args.capacity);
    let limits = SlotLimits {
        processes: args.max_processes,
        memory: args.max_memory.unwrap_or(defaults.memory),
        disk: args.max_task_disk,
    };
    let signing_key = match &args.signing_key {
        Some(path) => Some(std::sync::Arc::new(
            shoal_worker::SigningKey::read(path).map_err(|err| anyhow::anyhow!("--signing-key: {err}"))?,
        )),
        None => None,
    };
    let config = shoal_worker::WorkerConfig {
        task_queue_id,
        more_queues,
        worker_group: args.worker_group,
        worker_id: args.worker_id.unwrap_or_else(host_worker_id),
        dimensions: serde_json::Value::Object(dimensions),
        capacity: args.capacity,
        work_dir,
        grace: Duration::from_secs(args.grace),
        isolation: args.isolation.resolve(args.first_uid, &sandbox)?,
        limits,
        cache: std::sync::Arc::new(cache),
        health_check: args
            .health_check
            .map(|command| shoal_worker::HealthCheck { command, every: Duration::from_secs(args.health_check_every) }),
        signing_key,
        registries: shoal_worker::Registries::new(&args.insecure_registries),
    };
    let queues = config.queues().cloned().collect::<Vec<_>>();
    tracing::info!(queues = %queues.join(" "), worker.id = %config.worker_id, capacity = config.capacity, "worker started");
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
