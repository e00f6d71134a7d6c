//! The `shoal` binary: its commands, and which module runs each.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod cli;
mod credentials;
mod data_dir;
mod dev;
mod expire;
mod graph;
mod limits;
mod push;
mod render;
mod runtime;
mod server;
mod services;
mod settings;
mod worker;
mod workers;

use settings::{ServerArgs, ServerConfig};
use worker::WorkerArgs;

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
    /// The Index: find the task indexed at a namespace.
    Index {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: services::IndexCommand,
    },
    /// The Secrets service: get, set and list named secrets.
    Secrets {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: services::SecretsCommand,
    },
    /// Hooks: fire one.
    Hooks {
        #[command(flatten)]
        address: cli::ServerAddress,
        #[command(subcommand)]
        command: services::HooksCommand,
    },
    /// What expired and will be deleted by the servers' next sweep (`--dry-run`).
    Expire(expire::ExpireArgs),
    /// Build a push to a repository that sends no webhooks: delivers GitHub's push event for
    /// the commit, signed with the server's github-webhook-secret; prints the build's task group.
    Push(push::PushArgs),
    /// Renders a push's .taskcluster.yml for the server, under limits (the server runs it).
    #[command(name = "render-taskcluster-yml", hide = true)]
    RenderTaskclusterYml,
    /// Make a worker's chain-of-trust signing key (`shoal worker --signing-key`), as
    /// generic-worker's command of the same name; prints its public key.
    #[command(name = "new-ed25519-keypair")]
    NewEd25519Keypair {
        /// Where to write the private key (it must not exist).
        #[arg(long)]
        file: PathBuf,
    },
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
    if let Command::RenderTaskclusterYml = &cli.command {
        // No runtime: one thread, under the limits it sets itself.
        return render::render();
    }
    if let Command::Server(args) = &cli.command {
        let config = ServerConfig::resolve(args)?;
        let beside = if config.database.is_none() { runtime::Beside::Writer } else { runtime::Beside::Nothing };
        return runtime::start(beside)?.block_on(server::server(config));
    }
    let runtime = runtime::start(runtime::Beside::Nothing)?;
    match cli.command {
        Command::Migrate { .. } | Command::Server(_) | Command::RenderTaskclusterYml => Ok(()),
        Command::Expire(args) => runtime.block_on(expire::expire(args)),
        Command::Worker(args) => runtime.block_on(worker::worker(args)),
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
        Command::Index { address, command } => runtime.block_on(services::index(&address, command)),
        Command::Secrets { address, command } => runtime.block_on(services::secrets(&address, command)),
        Command::Hooks { address, command } => runtime.block_on(services::hooks(&address, command)),
        Command::Push(args) => runtime.block_on(push::push(args)),
        Command::NewEd25519Keypair { file } => {
            let key = shoal_worker::SigningKey::create(&file).map_err(anyhow::Error::msg)?;
            println!("{}", key.public());
            Ok(())
        }
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
