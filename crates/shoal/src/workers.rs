//! `shoal workers …`: the worker registry from the command line (a table, or `--json`).

use anyhow::Context;
use serde_json::Value;
use shoal_client::Client;

use crate::cli::ServerAddress;

/// Which worker a verb acts on.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerName {
    /// The worker's task queue, `provisionerId/workerType`.
    #[arg(long)]
    queue: String,
    /// The worker's group.
    #[arg(long, default_value = "local")]
    worker_group: String,
    /// The worker's id.
    worker_id: String,
}

/// `shoal workers …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum WorkersCommand {
    /// List a queue's workers.
    List {
        /// The task queue, `provisionerId/workerType`.
        #[arg(long)]
        queue: String,
        /// Only workers with this dimension, `key:value` (repeat: all must match).
        #[arg(long = "dimension")]
        dimensions: Vec<String>,
        /// Only workers in this state: idle, busy, quarantined, maintenance, missing or terminated.
        #[arg(long)]
        state: Option<String>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one worker: what it has, what it ran, what happened to it.
    Show {
        #[command(flatten)]
        name: WorkerName,
        /// Print the worker and its events as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Take a worker out of rotation: its claims get nothing until the quarantine ends.
    Quarantine {
        #[command(flatten)]
        name: WorkerName,
        /// How long, e.g. 30m, 12h, 7d.
        #[arg(long = "for", default_value = "1d", value_parser = parse_duration)]
        duration: i64,
        /// Why (kept in the worker's quarantine details).
        #[arg(long, default_value = "")]
        reason: String,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a worker's quarantine now.
    Release {
        #[command(flatten)]
        name: WorkerName,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put a worker in maintenance: its claims get nothing until it is ended; its tasks go on.
    Maintain {
        #[command(flatten)]
        name: WorkerName,
        /// Why (shown with the worker).
        #[arg(long)]
        reason: String,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a worker's maintenance (an operator's, or the worker's own until it says so again).
    Resume {
        #[command(flatten)]
        name: WorkerName,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ask a worker to finish its tasks, take no more and exit.
    Terminate {
        #[command(flatten)]
        name: WorkerName,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `30s`, `30m`, `12h`, `7d` as milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<i64, String> {
    let split = text.len().saturating_sub(1);
    let (number, unit) = text.split_at(split);
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("a duration is a number and a unit: s, m, h or d (e.g. 12h)".into()),
    };
    let number: i64 = number.parse().map_err(|_| format!("`{number}` is not a whole number"))?;
    number.checked_mul(unit_ms).filter(|ms| *ms > 0).ok_or_else(|| "the duration must be positive".into())
}

pub(crate) async fn workers(address: &ServerAddress, command: WorkersCommand) -> anyhow::Result<()> {
    let client = address.client()?;
    match command {
        WorkersCommand::List { queue, dimensions, state, json } => list(&client, &queue, dimensions, state, json).await,
        WorkersCommand::Show { name, json } => show(&client, &name, json).await,
        WorkersCommand::Quarantine { name, duration, reason, json } => {
            let until = shoal_client::now().plus_millis(duration).to_string();
            client.quarantine_worker(&name.queue, &name.worker_group, &name.worker_id, &until, &reason).await?;
            // Taskcluster's answer has no state: show the worker as the fleet view does.
            print_worker(&client.worker(&name.queue, &name.worker_group, &name.worker_id).await?, json)
        }
        WorkersCommand::Release { name, json } => {
            let now = shoal_client::now().to_string();
            client.quarantine_worker(&name.queue, &name.worker_group, &name.worker_id, &now, "released").await?;
            // Taskcluster's answer has no state: show the worker as the fleet view does.
            print_worker(&client.worker(&name.queue, &name.worker_group, &name.worker_id).await?, json)
        }
        WorkersCommand::Maintain { name, reason, json } => {
            let worker =
                client.maintain_worker(&name.queue, &name.worker_group, &name.worker_id, Some(&reason)).await?;
            print_worker(&worker, json)
        }
        WorkersCommand::Resume { name, json } => {
            let worker = client.maintain_worker(&name.queue, &name.worker_group, &name.worker_id, None).await?;
            print_worker(&worker, json)
        }
        WorkersCommand::Terminate { name, json } => {
            let worker = client.terminate_worker(&name.queue, &name.worker_group, &name.worker_id).await?;
            print_worker(&worker, json)
        }
    }
}

async fn list(
    client: &Client,
    queue: &str,
    dimensions: Vec<String>,
    state: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let mut query: Vec<(&str, String)> = dimensions.into_iter().map(|d| ("dimension", d)).collect();
    query.extend(state.map(|state| ("state", state)));
    let mut workers = Vec::new();
    loop {
        let page = client.list_workers(queue, &query).await?;
        workers.extend(page["workers"].as_array().cloned().unwrap_or_default());
        match page["continuationToken"].as_str() {
            Some(token) => {
                query.retain(|(name, _)| *name != "continuationToken");
                query.push(("continuationToken", token.to_owned()));
            }
            None => break,
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "workers": workers }))?);
        return Ok(());
    }
    let rows: Vec<[String; 5]> = workers
        .iter()
        .map(|w| {
            [
                format!("{}/{}", text(&w["workerGroup"]), text(&w["workerId"])),
                text(&w["state"]),
                ago(&w["lastDateActive"]),
                w["latestTask"]["taskId"]
                    .as_str()
                    .map_or_else(|| "-".into(), |task| format!("{task}/{}", w["latestTask"]["runId"])),
                dimensions_text(&w["dimensions"]),
            ]
        })
        .collect();
    print_table(&["WORKER", "STATE", "LAST SEEN", "LATEST RUN", "DIMENSIONS"], &rows);
    Ok(())
}

async fn show(client: &Client, name: &WorkerName, json: bool) -> anyhow::Result<()> {
    let worker = client.worker(&name.queue, &name.worker_group, &name.worker_id).await?;
    let events = client.worker_events(&name.queue, &name.worker_group, &name.worker_id).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "worker": worker, "events": events["events"] }))?
        );
        return Ok(());
    }
    print_worker(&worker, false)?;
    let runs: Vec<String> = worker["recentTasks"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .map(|run| format!("{}/{}", text(&run["taskId"]), run["runId"]))
        .collect();
    println!("recent runs:  {}", if runs.is_empty() { "-".into() } else { runs.join(" ") });
    println!("events (newest first):");
    for event in events["events"].as_array().into_iter().flatten() {
        let about = match event["taskId"].as_str() {
            Some(task) => format!(" {task}/{}", event["runId"]),
            None => String::new(),
        };
        let detail = event["detail"].as_str().map(|d| format!(" ({d})")).unwrap_or_default();
        let by = event["clientId"].as_str().map(|c| format!(" by {c}")).unwrap_or_default();
        println!("  {:>10}  {}{about}{detail}{by}", ago(&event["at"]), text(&event["kind"]));
    }
    Ok(())
}

fn print_worker(worker: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(worker).context("printing the worker")?);
        return Ok(());
    }
    println!(
        "worker:       {}/{} of {}",
        text(&worker["workerGroup"]),
        text(&worker["workerId"]),
        text(&worker["taskQueueId"])
    );
    println!("state:        {}", text(&worker["state"]));
    println!("last seen:    {} ({})", ago(&worker["lastDateActive"]), text(&worker["lastDateActive"]));
    println!("first seen:   {}", text(&worker["firstSeen"]));
    println!("version:      {}", text(&worker["version"]));
    println!("dimensions:   {}", dimensions_text(&worker["dimensions"]));
    if let Some(until) = worker["quarantineUntil"].as_str() {
        println!("quarantined:  until {until}");
    }
    if let Some(why) = worker["maintenance"]["message"].as_str() {
        let by = worker["maintenance"]["clientId"].as_str().unwrap_or("the worker");
        println!("maintenance:  {why} (by {by}, since {})", text(&worker["maintenance"]["since"]));
    }
    let running: Vec<&str> =
        worker["runningTasks"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    println!("running:      {}", if running.is_empty() { "-".into() } else { running.join(" ") });
    Ok(())
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| "-".into(), str::to_owned)
}

fn dimensions_text(dimensions: &Value) -> String {
    let Some(map) = dimensions.as_object().filter(|map| !map.is_empty()) else { return "-".into() };
    map.iter()
        .map(|(key, values)| {
            let values: Vec<&str> = values.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            format!("{key}={}", values.join("|"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How long ago a timestamp was, roughly (`12s ago`, `3m ago`, `5h ago`, `2d ago`).
fn ago(value: &Value) -> String {
    let Some(at) = value.as_str().and_then(shoal_engine::Timestamp::parse) else { return "-".into() };
    let secs = (shoal_client::now().millis() - at.millis()).max(0) / 1000;
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_unit() {
        assert_eq!(parse_duration("30m"), Ok(1_800_000));
        assert_eq!(parse_duration("7d"), Ok(604_800_000));
        assert!(parse_duration("12").is_err());
        assert!(parse_duration("0h").is_err());
        assert!(parse_duration("xh").is_err());
    }
}
