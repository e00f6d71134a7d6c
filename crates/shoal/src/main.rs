//! The `shoal` binary: reads its settings, wires store, service and API together, runs, and
//! shuts down in stages on SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use shoal_api::AppState;
use shoal_service::{Queue, QueueConfig};
use shoal_store::{SqliteConfig, SqliteStore, Store};
use tokio::sync::watch;

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
}

/// Settings of `shoal server`; every default is local and safe.
#[derive(Debug, Clone, clap::Args)]
struct ServerArgs {
    /// Address to listen on.
    #[arg(long, env = "SHOAL_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Directory for the embedded database.
    #[arg(long, env = "SHOAL_DATA_DIR", default_value = "shoal-data")]
    data_dir: PathBuf,
    /// Seconds a claim holds before the worker must reclaim (Taskcluster: 1200).
    #[arg(long, env = "SHOAL_CLAIM_TIMEOUT", default_value_t = 1200, value_parser = clap::value_parser!(i64).range(1..=86_400))]
    claim_timeout: i64,
    /// Seconds an idle claimWork waits for work before answering empty (Taskcluster: 20).
    #[arg(long, env = "SHOAL_CLAIM_WAIT", default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=300))]
    claim_wait: u64,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG").unwrap_or_else(|_| "info".into()))
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    match cli.command {
        Command::Server(args) => runtime.block_on(server(args)),
    }
}

async fn server(args: ServerArgs) -> anyhow::Result<()> {
    let path = args.data_dir.join("shoal.db");
    let store = SqliteStore::open(&SqliteConfig { path: path.clone(), claim_timeout_secs: args.claim_timeout })
        .with_context(|| format!("opening the database {}", path.display()))?;
    let store = Store::Sqlite(store);
    let config = QueueConfig { claim_wait: Duration::from_secs(args.claim_wait), ..QueueConfig::default() };
    let queue = Queue::new(store.clone(), config);
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    let local = listener.local_addr().context("reading the bound address")?;
    // Printed on stdout so scripts (and tests) can learn the port when listening on :0.
    println!("shoal listening on http://{local} (rootUrl http://{local})");

    let (stop_tx, stop_rx) = watch::channel(false);
    let due = tokio::spawn(shoal_service::run_due_loop(queue.clone(), stopped(stop_rx.clone())));
    let state = AppState { queue, started: Instant::now() };
    let serving = tokio::spawn(shoal_api::serve(listener, state, stopped(stop_rx)));

    shutdown_signal().await;
    tracing::info!("shutting down: no new requests; finishing open ones");
    let _ = stop_tx.send(true);
    serving.await.context("server task")?.context("serving")?;
    due.await.context("due loop")?;
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
