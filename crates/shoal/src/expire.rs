//! `shoal expire --dry-run`: what the server's next sweep would delete, read from its storage.

use anyhow::Context;

use crate::settings::{ServerArgs, ServerConfig};

/// Flags of `shoal expire`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ExpireArgs {
    /// Only tell what would be deleted (the servers delete by themselves, in the due loop).
    #[arg(long)]
    dry_run: bool,
    /// How many of each kind to list.
    #[arg(long, default_value_t = 500)]
    limit: usize,
    /// Where the server keeps its data (the same settings as `shoal server`).
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) async fn expire(args: ExpireArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.dry_run,
        "the servers delete what expired by themselves (every due-loop tick); --dry-run shows what the next sweep would delete"
    );
    let config = ServerConfig::resolve(&args.server)?;
    let store = config.open_store().await?;
    let now = shoal_service::now();
    let limit = args.limit;
    let (tasks, artifacts) = store
        .read(move |reads| Ok((reads.expired_tasks(now, limit)?, reads.expired_artifacts(now, limit)?)))
        .await
        .context("reading what expired")?;
    println!("at {now}, the next sweeps would delete (at most {limit} of each listed):");
    println!("{} task(s), with their runs, dependency rows, artifact records and live logs:", tasks.len());
    for (task_id, runs) in &tasks {
        println!("  task {task_id} ({runs} run(s))");
    }
    println!("{} artifact(s), bytes and record:", artifacts.len());
    for (key, artifact) in &artifacts {
        println!("  {} run {} {} (expired {})", key.task_id, key.run_id, key.name, artifact.expires);
    }
    println!("and the task groups and graphs those tasks leave empty, and task queues unseen for 5 days.");
    store.close().await;
    Ok(())
}
