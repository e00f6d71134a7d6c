//! The task-graph scheduler's operations over [`WriteTx`]; the rules are the engine's
//! (`shoal_engine::graph`).
//!
//! A graph is a row with the counts of its open and failed-for-good tasks (its state follows
//! from them) and one row per labelled task (its rerun budget). Its tasks are queue tasks: the
//! queue's dependencies schedule them, and every transition of one between resolved and not
//! passes through [`react`] in the same transaction, so a rerun or the graph's new state is
//! committed with the resolution that caused it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use shoal_engine::graph::{
    self, ExtensionInput, GraphContext, GraphInput, GraphMetadata, NodeProgress, PlannedTask, Reaction, Tally,
};
use shoal_engine::message::{self, GraphStatus};
use shoal_engine::rejection::{Conflict, Missing};
use shoal_engine::status::TaskState;
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::StoreError;
use crate::WriteTx;

/// A backend's transaction, as the task-graph operations use it.
pub trait GraphTx {
    /// A graph's row.
    async fn load_graph(&mut self, task_graph_id: TaskId) -> Result<Option<StoredGraph>, StoreError>;

    /// Inserts a graph's row.
    async fn insert_graph(&mut self, graph: &StoredGraph, now: Timestamp) -> Result<(), StoreError>;

    /// Writes a graph's counts.
    async fn save_tally(&mut self, task_graph_id: TaskId, tally: Tally) -> Result<(), StoreError>;

    /// Each label of the graph with its taskId and its submitted JSON.
    async fn graph_labels(&mut self, task_graph_id: TaskId) -> Result<Vec<(String, TaskId, String)>, StoreError>;

    /// Inserts a labelled task's row.
    async fn insert_node(&mut self, node: &NewNode<'_>) -> Result<(), StoreError>;

    /// The graph and progress of the task `task_id`, when it belongs to a graph.
    async fn load_node(&mut self, task_id: TaskId) -> Result<Option<(TaskId, NodeProgress)>, StoreError>;

    /// Writes a labelled task's progress.
    async fn save_node(&mut self, task_id: TaskId, progress: NodeProgress) -> Result<(), StoreError>;
}

/// A graph's own row.
#[derive(Debug, Clone)]
pub struct StoredGraph {
    /// Its id.
    pub task_graph_id: TaskId,
    /// The scheduler id its tasks carry.
    pub scheduler_id: String,
    /// The routing key prefix of its messages.
    pub routing: String,
    /// Its tasks' counts, from which its state follows.
    pub tally: Tally,
    /// As submitted.
    pub metadata: GraphMetadata,
    /// As submitted.
    pub tags: BTreeMap<String, String>,
}

impl StoredGraph {
    /// What `/info` shows.
    pub fn into_record(self) -> GraphRecord {
        GraphRecord { status: self.status(), metadata: self.metadata, tags: self.tags, tally: self.tally }
    }

    fn status(&self) -> GraphStatus {
        GraphStatus {
            scheduler_id: self.scheduler_id.clone(),
            task_graph_id: self.task_graph_id,
            state: self.tally.state(),
            routing: self.routing.clone(),
        }
    }
}

/// A labelled task's row as written.
pub struct NewNode<'a> {
    /// The graph.
    pub task_graph_id: TaskId,
    /// The task the label became.
    pub planned: &'a PlannedTask,
    /// The node as submitted (canonical JSON), to recognize a repeated submission.
    pub submitted: &'a str,
}

/// A graph's status and description, as `/status` and `/info` show them.
#[derive(Debug, Clone, Serialize)]
pub struct GraphRecord {
    /// Seed 000's status structure.
    pub status: GraphStatus,
    /// What the graph is.
    pub metadata: GraphMetadata,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// Tasks not completed and tasks failed for good.
    #[serde(skip)]
    pub tally: Tally,
}

/// One task of a graph as the scheduler sees it (`/inspect`).
#[derive(Debug, Clone)]
pub struct GraphNode {
    /// Its label.
    pub label: String,
    /// Its taskId.
    pub task_id: TaskId,
    /// The task's `metadata.name`.
    pub name: String,
    /// Labels it requires.
    pub requires: Vec<String>,
    /// Reruns it was given.
    pub reruns: u32,
    /// Its rerun budget and whether it failed for good.
    pub progress: NodeProgress,
    /// The queue's state of the task.
    pub state: TaskState,
}

/// A new graph to create: `PUT /task-graph/<taskGraphId>`.
#[derive(Debug)]
pub struct GraphRequest {
    /// The graph's id (and its tasks' task group).
    pub task_graph_id: TaskId,
    /// The submission.
    pub input: GraphInput,
    /// The authenticated client submitting it, recorded as its tasks' creator.
    pub created_by: Option<String>,
}

/// Creates a graph and all its tasks, or answers the graph's status when the very same
/// submission was already accepted (a retried request).
pub async fn create(tx: &mut impl WriteTx, request: &GraphRequest, now: Timestamp) -> Result<GraphStatus, StoreError> {
    let GraphRequest { task_graph_id, input, created_by } = request;
    let task_graph_id = *task_graph_id;
    let submitted = submitted_nodes(&input.tasks)?;
    if let Some(existing) = tx.load_graph(task_graph_id).await? {
        let labels = tx.graph_labels(task_graph_id).await?;
        let same = existing.routing == input.routing
            && existing.metadata == input.metadata.clone().unwrap_or_default()
            && existing.tags == input.tags
            && labels.len() == submitted.len()
            && labels.iter().all(|(label, _, text)| submitted.get(label) == Some(text));
        if same {
            return Ok(existing.status());
        }
        return Err(Rejection::from(Conflict::GraphRedefined(task_graph_id)).into());
    }
    if tx.load_group(task_graph_id).await?.is_some() {
        return Err(Rejection::from(Conflict::GraphGroupTaken(task_graph_id)).into());
    }
    graph::check_routing(&input.routing)?;
    let scheduler_id = tx.settings().graph_scheduler_id.as_str().to_owned();
    let context = GraphContext {
        task_graph_id,
        scheduler_id: &scheduler_id,
        routing: &input.routing,
        now,
        created_by: created_by.as_deref(),
    };
    let planned = graph::plan(context, input.tasks.clone(), &BTreeMap::new(), new_task_id)?;
    check_dependencies(tx, &planned).await?;
    let graph = StoredGraph {
        task_graph_id,
        scheduler_id,
        routing: input.routing.clone(),
        tally: Tally { open: planned.len() as u32, failed: 0 },
        metadata: input.metadata.clone().unwrap_or_default(),
        tags: input.tags.clone(),
    };
    tx.insert_graph(&graph, now).await?;
    tx.publish(message::graph_message(&graph.status()));
    create_tasks(tx, task_graph_id, &planned, &submitted, now).await?;
    Ok(graph.status())
}

/// Adds tasks to a graph; they may require labels already in it. A finished graph that gains
/// tasks is running again. Repeating an extension already applied answers the status.
pub async fn extend(
    tx: &mut impl WriteTx,
    task_graph_id: TaskId,
    input: &ExtensionInput,
    created_by: Option<&str>,
    now: Timestamp,
) -> Result<GraphStatus, StoreError> {
    let Some(mut graph) = tx.load_graph(task_graph_id).await? else {
        return Err(Rejection::from(Missing::Graph(task_graph_id)).into());
    };
    let submitted = submitted_nodes(&input.tasks)?;
    let labels = tx.graph_labels(task_graph_id).await?;
    let known: HashMap<&str, &str> = labels.iter().map(|(label, _, text)| (label.as_str(), text.as_str())).collect();
    if submitted.iter().all(|(label, text)| known.get(label.as_str()) == Some(&text.as_str())) {
        return Ok(graph.status());
    }
    if let Some(group) = tx.load_group(task_graph_id).await?
        && group.sealed.is_some()
    {
        return Err(Rejection::from(Conflict::GraphSealed(task_graph_id)).into());
    }
    let existing: BTreeMap<String, TaskId> = labels.into_iter().map(|(label, task_id, _)| (label, task_id)).collect();
    let context =
        GraphContext { task_graph_id, scheduler_id: &graph.scheduler_id, routing: &graph.routing, now, created_by };
    let planned = graph::plan(context, input.tasks.clone(), &existing, new_task_id)?;
    check_dependencies(tx, &planned).await?;
    let before = graph.tally.state();
    graph.tally.open += planned.len() as u32;
    tx.save_tally(task_graph_id, graph.tally).await?;
    if graph.tally.state() != before {
        tx.publish(message::graph_message(&graph.status()));
    }
    create_tasks(tx, task_graph_id, &planned, &submitted, now).await?;
    Ok(graph.status())
}

/// Called for every transition of a task carrying the graph scheduler's id between resolved
/// and not: keeps its graph's counts, publishes the graph's new state, and says whether the
/// task is to be run again.
pub async fn react(tx: &mut impl WriteTx, task: &Task, was: TaskState, now: Timestamp) -> Result<Reaction, StoreError> {
    let Some((task_graph_id, mut progress)) = tx.load_node(task.task_id).await? else {
        return Ok(Reaction::Count);
    };
    let Some(mut graph) = tx.load_graph(task_graph_id).await? else {
        return Ok(Reaction::Count);
    };
    let (before, tally_before, progress_before) = (graph.tally.state(), graph.tally, progress);
    let reaction = graph::react(task, was, &mut progress, &mut graph.tally, now);
    if progress != progress_before {
        tx.save_node(task.task_id, progress).await?;
    }
    if graph.tally != tally_before {
        tx.save_tally(task_graph_id, graph.tally).await?;
    }
    if graph.tally.state() != before {
        tx.publish(message::graph_message(&graph.status()));
    }
    Ok(reaction)
}

async fn create_tasks(
    tx: &mut impl WriteTx,
    task_graph_id: TaskId,
    planned: &[PlannedTask],
    submitted: &HashMap<String, String>,
    now: Timestamp,
) -> Result<(), StoreError> {
    for task in planned {
        let text = submitted.get(&task.label).map_or("", String::as_str);
        tx.insert_node(&NewNode { task_graph_id, planned: task, submitted: text }).await?;
        crate::tasks::create_task(tx, &task.definition, task.task_id, now).await?;
    }
    Ok(())
}

/// Refuses, before anything is written, dependencies the queue would refuse.
async fn check_dependencies(tx: &mut impl WriteTx, planned: &[PlannedTask]) -> Result<(), StoreError> {
    let new: std::collections::HashSet<TaskId> = planned.iter().map(|task| task.task_id).collect();
    let mut stored = HashMap::new();
    for task in planned {
        for &required in &task.definition.dependencies {
            if !new.contains(&required) && !stored.contains_key(&required) {
                stored.insert(required, tx.task_expires(required).await?);
            }
        }
    }
    graph::check_dependencies(planned, |task_id| stored.get(&task_id).copied().flatten())?;
    Ok(())
}

fn submitted_nodes(tasks: &graph::Labelled) -> Result<HashMap<String, String>, StoreError> {
    tasks
        .0
        .iter()
        .map(|(label, node)| {
            let text =
                serde_json::to_string(node).map_err(|err| StoreError::Internal(format!("encoding node: {err}")))?;
            Ok((label.clone(), text))
        })
        .collect()
}

fn new_task_id() -> TaskId {
    // A v4 slugid always parses.
    TaskId::parse(&slugid::nice()).expect("slugid makes task ids")
}
