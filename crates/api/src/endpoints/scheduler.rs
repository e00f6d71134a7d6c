//! The task-graph scheduler API v1 (seed 000), under `/api/scheduler/v1`.

use axum::routing::on;

use super::{EXTEND_GRAPH, GRAPH_TASKS};
use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::Public;
use crate::routes::graphs;

/// The task-graph scheduler API v1 (seed 000), under `/api/scheduler/v1`.
pub const SCHEDULER_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "createTaskGraph",
        Put,
        "/task-graph/{graph}",
        GRAPH_TASKS,
        Experimental,
        graphs::create_task_graph,
        "Creates a task graph: its tasks, rerun budgets and routing.",
        input = "create-task-graph-request"
    ),
    endpoint!(
        "extendTaskGraph",
        Post,
        "/task-graph/{graph}/extend",
        EXTEND_GRAPH,
        Experimental,
        graphs::extend_task_graph,
        "Adds tasks to a task graph.",
        input = "extend-task-graph-request"
    ),
    endpoint!(
        "listTaskGraphs",
        Get,
        "/task-graphs",
        Public,
        Experimental,
        graphs::list_task_graphs,
        "Task graphs, newest first, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "status",
        Get,
        "/task-graph/{graph}/status",
        Public,
        Experimental,
        graphs::status,
        "A task graph's state."
    ),
    endpoint!(
        "info",
        Get,
        "/task-graph/{graph}/info",
        Public,
        Experimental,
        graphs::info,
        "A task graph's metadata, tags and state."
    ),
    endpoint!(
        "inspect",
        Get,
        "/task-graph/{graph}/inspect",
        Public,
        Experimental,
        graphs::inspect,
        "A task graph's tasks with their labels, states and reruns left."
    ),
    endpoint!(
        "inspectTask",
        Get,
        "/task-graph/{graph}/inspect/{task_id}",
        Public,
        Experimental,
        graphs::inspect_task,
        "One task of a task graph."
    ),
];
