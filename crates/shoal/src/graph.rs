//! `shoal graph …`: submit a task graph to the scheduler (`/api/scheduler/v1/`) and follow it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use shoal_client::{Client, GraphInspection, GraphState};
use shoal_engine::status::TaskState;

use crate::cli::ServerAddress;

/// `shoal graph …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum GraphCommand {
    /// Submit a task graph from a JSON or YAML file (`routing`, and `tasks` by label, each
    /// with `requires`, `reruns` and `task`); tasks' `created` and `deadline` default to now
    /// and now + 1 hour.
    Submit {
        /// The graph file.
        file: PathBuf,
        /// Use this taskGraphId instead of a new one.
        #[arg(long)]
        task_graph_id: Option<String>,
        /// The taskQueueId of tasks that name none.
        #[arg(long)]
        task_queue_id: Option<String>,
        /// Show progress until the graph is finished or blocked (exit code 1 when blocked).
        #[arg(long)]
        wait: bool,
        /// Print JSON instead of text (no progress bar).
        #[arg(long)]
        json: bool,
    },
    /// Show progress until the graph is finished or blocked (exit code 1 when blocked).
    Wait {
        /// The graph.
        task_graph_id: String,
        /// Print the summary as JSON (no progress bar).
        #[arg(long)]
        json: bool,
    },
    /// Show a graph's state.
    Status {
        /// The graph.
        task_graph_id: String,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `shoal graph` verb; false when a graph it waited for is blocked.
pub(crate) async fn graph(address: &ServerAddress, command: GraphCommand) -> anyhow::Result<bool> {
    let client = address.client()?;
    match command {
        GraphCommand::Submit { file, task_graph_id, task_queue_id, wait, json } => {
            let graph = read_graph(&file, task_queue_id.as_deref())?;
            let task_graph_id = task_graph_id.unwrap_or_else(slugid::nice);
            let status = client.create_task_graph(&task_graph_id, &graph).await?;
            if json && !wait {
                println!("{}", serde_json::to_string_pretty(&json!({ "status": status }))?);
            } else if !json {
                println!("{task_graph_id}\t{}", status.state.as_str());
            }
            if wait {
                return wait_for(&client, &task_graph_id, json).await;
            }
        }
        GraphCommand::Wait { task_graph_id, json } => return wait_for(&client, &task_graph_id, json).await,
        GraphCommand::Status { task_graph_id, json } => {
            let status = client.task_graph_status(&task_graph_id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&json!({ "status": status }))?);
            } else {
                println!("{task_graph_id}\t{}\t{}", status.state.as_str(), status.routing);
            }
        }
    }
    Ok(true)
}

/// Reads a graph (JSON, or YAML) and fills in what a hand-written file leaves out: each
/// task's `created` and `deadline`, and its `taskQueueId` when `task_queue_id` is given.
pub(crate) fn read_graph(file: &Path, task_queue_id: Option<&str>) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    parse_graph(&text, task_queue_id).with_context(|| format!("reading the graph in {}", file.display()))
}

/// [`read_graph`] on text.
pub(crate) fn parse_graph(text: &str, task_queue_id: Option<&str>) -> anyhow::Result<Value> {
    let mut graph: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(_) => serde_saphyr::from_str(text).context("neither JSON nor YAML")?,
    };
    let tasks = graph.get_mut("tasks").and_then(Value::as_object_mut).context("`tasks` must be a map of labels")?;
    let now = shoal_client::now();
    for (label, node) in tasks.iter_mut() {
        let task = node
            .get_mut("task")
            .and_then(Value::as_object_mut)
            .with_context(|| format!("tasks.{label}.task must be an object"))?;
        task.entry("created").or_insert_with(|| json!(now));
        task.entry("deadline").or_insert_with(|| json!(now.plus_secs(3600)));
        if let Some(queue) = task_queue_id {
            task.entry("taskQueueId").or_insert_with(|| json!(queue));
        }
    }
    Ok(graph)
}

/// A progress bar until the graph is finished or blocked, then a table of its tasks; true
/// when it finished.
pub(crate) async fn wait_for(client: &Client, task_graph_id: &str, json: bool) -> anyhow::Result<bool> {
    let bar = crate::cli::progress_bar("completed", json);
    let inspection = loop {
        let inspection = client.inspect_task_graph(task_graph_id).await?;
        let count = |state: TaskState| inspection.tasks.iter().filter(|task| task.state == state).count();
        bar.set_length(inspection.tasks.len() as u64);
        bar.set_position(count(TaskState::Completed) as u64);
        bar.set_message(format!(
            "{} running, {} pending, {} waiting, {} failed  ({})",
            count(TaskState::Running),
            count(TaskState::Pending),
            count(TaskState::Unscheduled),
            count(TaskState::Failed) + count(TaskState::Exception),
            inspection.status.state.as_str()
        ));
        if inspection.status.state != GraphState::Running {
            break inspection;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    bar.finish_and_clear();
    let finished = inspection.status.state == GraphState::Finished;
    if json {
        let tasks: Vec<Value> = inspection
            .tasks
            .iter()
            .map(|task| json!({"label": task.label, "taskId": task.task_id, "state": task.state, "rerunsLeft": task.reruns_left}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&json!({"status": inspection.status, "tasks": tasks}))?);
    } else {
        print_table(&inspection);
        println!("graph {task_graph_id} {}", inspection.status.state.as_str());
    }
    Ok(finished)
}

fn print_table(inspection: &GraphInspection) {
    let width = inspection.tasks.iter().map(|task| task.label.len()).max().unwrap_or(5).max(5);
    println!("{:<width$}  {:<22}  STATE", "LABEL", "TASK");
    for task in &inspection.tasks {
        println!("{:<width$}  {:<22}  {}", task.label, task.task_id, task.state.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_graph_gets_times_and_the_default_queue_where_missing() {
        let text = "routing: r\ntasks:\n  a:\n    task: {payload: {}}\n  b:\n    requires: [a]\n    task: {taskQueueId: x/y, created: '2026-01-01T00:00:00.000Z'}\n";
        let graph = parse_graph(text, Some("dev/local")).unwrap();
        assert_eq!(graph["tasks"]["a"]["task"]["taskQueueId"], "dev/local");
        assert_eq!(graph["tasks"]["b"]["task"]["taskQueueId"], "x/y", "a queue given is kept");
        assert_eq!(graph["tasks"]["b"]["task"]["created"], "2026-01-01T00:00:00.000Z");
        assert!(graph["tasks"]["a"]["task"]["deadline"].is_string());
        assert!(parse_graph("routing: r\ntasks: [1]\n", None).unwrap_err().to_string().contains("`tasks`"));
    }
}
