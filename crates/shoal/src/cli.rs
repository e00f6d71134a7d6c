//! The client verbs: `shoal task …`, `shoal artifact get`, `shoal group wait`. They speak
//! to a server over HTTP only, like any other client.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use shoal_client::{Client, GroupMember};
use shoal_engine::message::Exchange;
use shoal_engine::status::{TaskState, TaskStatus};

pub(crate) use crate::credentials::ServerAddress;

/// `shoal task …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum TaskCommand {
    /// Create a task from a JSON or YAML definition (created and deadline default to now and
    /// now + 1 hour).
    Create {
        /// The definition file.
        file: PathBuf,
        /// Use this task id instead of a new one.
        #[arg(long)]
        task_id: Option<String>,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a task's status.
    Status {
        /// The task.
        task_id: String,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a task's log (the latest run unless --run is given).
    Log {
        /// The task.
        task_id: String,
        /// The run.
        #[arg(long)]
        run: Option<u32>,
        /// Keep printing until the run ends.
        #[arg(long)]
        follow: bool,
    },
    /// Cancel a task.
    Cancel {
        /// The task.
        task_id: String,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn task(address: &ServerAddress, command: TaskCommand) -> anyhow::Result<()> {
    let client = address.client()?;
    match command {
        TaskCommand::Create { file, task_id, json } => {
            let definition = read_definition(&file)?;
            let task_id = task_id.unwrap_or_else(slugid::nice);
            let status = client.create_task(&task_id, &definition).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&json!({ "taskId": task_id, "status": status }))?);
            } else {
                println!("{task_id}\t{}", status.state.as_str());
            }
        }
        TaskCommand::Status { task_id, json } => {
            let status = client.task_status(&task_id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                println!(
                    "{task_id}\t{}\t{} run(s)\t{}",
                    status.state.as_str(),
                    status.runs.len(),
                    status.task_queue_id
                );
                for run in &status.runs {
                    let reason = run.reason_resolved.map(|r| serde_json::to_value(r).unwrap_or_default());
                    let worker = run.worker_id.as_deref().unwrap_or("-");
                    let reason = reason.as_ref().and_then(Value::as_str).unwrap_or("-");
                    println!("  run {}\t{:?}\t{reason}\t{worker}", run.run_id, run.state);
                }
            }
        }
        TaskCommand::Log { task_id, run, follow } => {
            let run_id = match run {
                Some(run_id) => run_id,
                None => client
                    .task_status(&task_id)
                    .await?
                    .runs
                    .last()
                    .map(|run| run.run_id)
                    .context("the task has no runs yet")?,
            };
            let mut res = client.log(&task_id, run_id, follow).await?;
            let mut stdout = std::io::stdout().lock();
            while let Some(chunk) = res.chunk().await.context("reading the log")? {
                stdout.write_all(&chunk)?;
                stdout.flush()?;
            }
        }
        TaskCommand::Cancel { task_id, json } => {
            let status = client.cancel_task(&task_id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                println!("{task_id}\t{}", status.state.as_str());
            }
        }
    }
    Ok(())
}

/// `shoal artifact get`: writes an artifact's bytes to a file or stdout.
pub(crate) async fn artifact_get(
    address: &ServerAddress,
    task_id: &str,
    name: &str,
    run: Option<u32>,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let bytes = address.client()?.artifact_bytes(task_id, run, name).await?;
    match output {
        Some(path) => std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?,
        None => std::io::stdout().lock().write_all(&bytes)?,
    }
    Ok(())
}

/// Reads a definition (JSON, or YAML) and fills in `created` and `deadline` when missing.
fn read_definition(file: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut definition: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => {
            serde_saphyr::from_str(&text).with_context(|| format!("{} is neither JSON nor YAML", file.display()))?
        }
    };
    let object = definition.as_object_mut().with_context(|| format!("{} must hold an object", file.display()))?;
    let now = shoal_client::now();
    object.entry("created").or_insert_with(|| json!(now));
    object.entry("deadline").or_insert_with(|| json!(now.plus_secs(3600)));
    Ok(definition)
}

/// The exchanges a task's transitions are published on.
const TASK_EXCHANGES: [Exchange; 6] = [
    Exchange::TaskDefined,
    Exchange::TaskPending,
    Exchange::TaskRunning,
    Exchange::TaskCompleted,
    Exchange::TaskFailed,
    Exchange::TaskException,
];

/// `shoal group wait`: a progress bar until every task of the group is resolved, then a
/// summary table; true when every task completed. It follows the group's transitions on the
/// server's event stream (subscribed before the first listing, so none is missed), listing the
/// group again only to confirm the end; should the stream fail, it lists every 250 ms.
pub(crate) async fn group_wait(client: &Client, group: &str, json: bool) -> anyhow::Result<bool> {
    let bar = progress_bar("resolved", json);
    let pattern = format!("primary.*.*.*.*.*.*.*.{group}.#");
    let bindings: Vec<(String, String)> =
        TASK_EXCHANGES.iter().map(|exchange| (exchange.name().to_owned(), pattern.clone())).collect();
    let mut stream = client.listen(&bindings).await.ok();
    let mut states = states_of(&client.task_group(group).await?);
    let members = loop {
        draw_group(&bar, &states);
        if !states.is_empty() && states.values().all(|state| state.is_resolved()) {
            // The table needs every definition; a task defined meanwhile keeps the wait going.
            let members = client.task_group(group).await?;
            if members.iter().all(|member| member.status.state.is_resolved()) {
                break members;
            }
            states = states_of(&members);
            continue;
        }
        let heard = match stream.as_mut() {
            Some(events) => events.next_message().await.ok().flatten(),
            None => None,
        };
        match heard.and_then(|message| serde_json::from_value::<TaskStatus>(message["payload"]["status"].clone()).ok())
        {
            Some(status) => {
                states.insert(status.task_id.to_string(), status.state);
            }
            None => {
                if stream.take().is_some() {
                    tracing::warn!("the event stream ended; listing the group every 250 ms instead");
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                states = states_of(&client.task_group(group).await?);
            }
        }
    };
    bar.finish_and_clear();
    let all_completed = members.iter().all(|m| m.status.state == TaskState::Completed);
    if json {
        let summary: Vec<Value> = members.iter().map(|m| json!({"taskId": m.status.task_id, "name": name_of(m), "state": m.status.state, "runs": m.status.runs.len()})).collect();
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_table(&members);
    }
    Ok(all_completed)
}

/// Each member's state, by task id.
fn states_of(members: &[GroupMember]) -> HashMap<String, TaskState> {
    members.iter().map(|member| (member.status.task_id.to_string(), member.status.state)).collect()
}

fn draw_group(bar: &indicatif::ProgressBar, states: &HashMap<String, TaskState>) {
    let count = |wanted: TaskState| states.values().filter(|state| **state == wanted).count();
    bar.set_length(states.len() as u64);
    bar.set_position(states.values().filter(|state| state.is_resolved()).count() as u64);
    bar.set_message(format!(
        "{} running, {} pending, {} waiting, {} failed, {} exception",
        count(TaskState::Running),
        count(TaskState::Pending),
        count(TaskState::Unscheduled),
        count(TaskState::Failed),
        count(TaskState::Exception)
    ));
}

/// A progress bar counting tasks that are `done`, hidden when the output is JSON.
pub(crate) fn progress_bar(done: &str, hidden: bool) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if hidden {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let template = format!("{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {done}  {{msg}}");
    bar.set_style(
        indicatif::ProgressStyle::with_template(&template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

fn name_of(member: &GroupMember) -> &str {
    member.task["metadata"]["name"].as_str().unwrap_or("")
}

fn print_table(members: &[GroupMember]) {
    let mut members: Vec<&GroupMember> = members.iter().collect();
    members.sort_by(|a, b| (name_of(a), a.status.task_id).cmp(&(name_of(b), b.status.task_id)));
    let width = members.iter().map(|m| name_of(m).len()).max().unwrap_or(4).max(4);
    println!("{:<22}  {:<width$}  {:<11}  RUNS", "TASK", "NAME", "STATE");
    for member in &members {
        let state = member.status.state.as_str();
        println!(
            "{:<22}  {:<width$}  {state:<11}  {}",
            member.status.task_id,
            name_of(member),
            member.status.runs.len()
        );
    }
}

/// `shoal listen`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ListenArgs {
    /// Exchange to bind, full (exchange/taskcluster-queue/v1/task-completed) or short (task-completed); repeatable.
    #[arg(long, required = true)]
    exchange: Vec<String>,
    /// Routing-key pattern for the exchange in the same position (`*` one word, `#` any) [default: #].
    #[arg(long)]
    pattern: Vec<String>,
    /// Exit after this many messages.
    #[arg(long)]
    count: Option<u64>,
}

pub(crate) async fn listen(address: &ServerAddress, args: ListenArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.pattern.len() <= args.exchange.len(),
        "each --pattern belongs to the --exchange before it; there are more patterns than exchanges"
    );
    let bindings: Vec<(String, String)> = args
        .exchange
        .iter()
        .enumerate()
        .map(|(n, exchange)| (exchange.clone(), args.pattern.get(n).cloned().unwrap_or_else(|| "#".into())))
        .collect();
    let mut stream = address.client()?.listen(&bindings).await?;
    eprintln!("listening (Ctrl-C to stop)");
    let mut stdout = std::io::stdout().lock();
    let mut n_printed = 0;
    while args.count.is_none_or(|count| n_printed < count) {
        let Some(message) = stream.next_message().await? else {
            anyhow::bail!("the server closed the stream");
        };
        writeln!(stdout, "{message}")?;
        stdout.flush()?;
        n_printed += 1;
    }
    Ok(())
}
