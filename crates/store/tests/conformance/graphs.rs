//! The task-graph scheduler's scenarios on every backend.

use super::*;
use shoal_store::operation::{Apply, CreateGraph};

pub(crate) fn graph_input(tasks: serde_json::Value) -> shoal_engine::graph::GraphInput {
    let tasks: serde_json::Map<String, serde_json::Value> = tasks
        .as_object()
        .expect("tasks object")
        .iter()
        .map(|(label, node)| {
            let mut node = node.clone();
            let patch = node.get("task").cloned().unwrap_or(json!({}));
            let mut task = json!({
                "taskQueueId": "prov/wt",
                "created": "2026-01-01T00:00:00.000Z",
                "deadline": "2026-01-01T01:00:00.000Z",
                "payload": {},
                "metadata": {"name": label, "description": "d", "owner": "o", "source": "https://x"}
            });
            for (key, value) in patch.as_object().expect("task patch") {
                task[key] = value.clone();
            }
            node["task"] = task;
            (label.clone(), node)
        })
        .collect();
    serde_json::from_value(json!({"routing": "r", "tasks": tasks})).expect("graph input")
}

pub(crate) async fn graph_tasks(
    store: &Store,
    graph: TaskId,
) -> std::collections::HashMap<String, shoal_store::GraphNode> {
    let nodes = store.read(move |reads| reads.graph_nodes(graph)).await.unwrap();
    nodes.into_iter().map(|node| (node.label.clone(), node)).collect()
}

pub(crate) async fn graph_state(store: &Store, graph: TaskId) -> shoal_engine::graph::GraphState {
    store.read(move |reads| reads.task_graph(graph)).await.unwrap().expect("graph exists").status.state
}

pub(crate) fn graph_exchanges(entries: &[OutboxEntry]) -> Vec<&'static str> {
    exchanges(entries).into_iter().filter(|name| name.starts_with("task-graph-")).collect()
}

pub(crate) async fn a_graph_reruns_a_failure_blocks_then_finishes_once_run_again(name: &str, backend: Backend) {
    use shoal_engine::graph::GraphState;
    let store = &backend.store;
    let graph = id(900);
    let input = graph_input(json!({"a": {"reruns": 1}, "b": {"requires": ["a"]}}));
    let request = shoal_store::GraphRequest { task_graph_id: graph, input, created_by: None };
    let created = store.run(CreateGraph { request }, at(0)).await.unwrap().value;
    assert_eq!(created.state, GraphState::Running, "{name}");
    let nodes = graph_tasks(store, graph).await;
    let (a, b) = (nodes["a"].task_id, nodes["b"].task_id);
    assert_eq!((nodes["a"].state, nodes["b"].state), (TaskState::Pending, TaskState::Unscheduled), "{name}");
    let fail = |run_id| TaskCommand::Resolve { run_id, resolution: Resolution::Failed, stats: None };

    assert_eq!(claim_ids(store, worker(5), at(1)).await, vec![a], "{name}");
    let status = apply(store, a, fail(0), at(2)).await;
    assert_eq!(status.state, TaskState::Pending, "{name}: rerun in the failing step");
    assert_eq!(status.runs[1].reason_created, ReasonCreated::Rerun, "{name}");
    assert_eq!(claim_ids(store, worker(5), at(3)).await, vec![a], "{name}");
    apply(store, a, fail(1), at(4)).await;
    assert_eq!(graph_state(store, graph).await, GraphState::Blocked, "{name}");
    assert!(claim_ids(store, worker(5), at(5)).await.is_empty(), "{name}: b never runs");
    let nodes = graph_tasks(store, graph).await;
    assert_eq!((nodes["a"].progress.reruns_left, nodes["a"].progress.failed), (0, true), "{name}");

    // Someone reruns it by hand: the graph runs again, and finishes.
    apply(store, a, TaskCommand::Rerun, at(6)).await;
    assert_eq!(graph_state(store, graph).await, GraphState::Running, "{name}");
    assert_eq!(claim_ids(store, worker(5), at(7)).await, vec![a], "{name}");
    apply(store, a, TaskCommand::Resolve { run_id: 2, resolution: Resolution::Completed, stats: None }, at(8)).await;
    assert_eq!(claim_ids(store, worker(5), at(9)).await, vec![b], "{name}");
    apply(store, b, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(10)).await;
    assert_eq!(graph_state(store, graph).await, GraphState::Finished, "{name}");
    assert_eq!(
        graph_exchanges(&unpublished(store).await),
        ["task-graph-running", "task-graph-blocked", "task-graph-running", "task-graph-finished"],
        "{name}"
    );
}

pub(crate) async fn a_refused_graph_leaves_nothing_behind(name: &str, backend: Backend) {
    let store = &backend.store;
    let graph = id(901);
    // `b` needs `a`, which expires before `b`'s deadline: refused after planning, before writing.
    let input = graph_input(json!({
        "a": {"task": {"deadline": "2026-01-01T00:10:00.000Z", "expires": "2026-01-01T00:20:00.000Z"}},
        "b": {"requires": ["a"]},
    }));
    let refused = store
        .run(
            CreateGraph { request: shoal_store::GraphRequest { task_graph_id: graph, input, created_by: None } },
            at(0),
        )
        .await;
    let Err(StoreError::Rejected(Rejection::Invalid { field, .. })) = refused else {
        panic!("{name}: expected a field error, got {refused:?}");
    };
    assert_eq!(field, "tasks.b.task.dependencies", "{name}");
    assert!(store.read(move |reads| reads.task_graph(graph)).await.unwrap().is_none(), "{name}");
    assert!(store.read(move |reads| reads.task_group(graph)).await.unwrap().is_none(), "{name}");
    assert!(graph_exchanges(&unpublished(store).await).is_empty(), "{name}");
}

pub(crate) async fn concurrent_completions_of_a_graphs_tasks_are_each_counted_once(name: &str, backend: Backend) {
    use shoal_engine::graph::GraphState;
    let store = &backend.store;
    let graph = id(902);
    let tasks: serde_json::Map<String, serde_json::Value> = (0..24).map(|n| (format!("t{n}"), json!({}))).collect();
    let input = graph_input(serde_json::Value::Object(tasks));
    let _ = store
        .run(
            CreateGraph { request: shoal_store::GraphRequest { task_graph_id: graph, input, created_by: None } },
            at(0),
        )
        .await
        .unwrap();
    let claimed = claim_ids(store, worker(24), at(1)).await;
    assert_eq!(claimed.len(), 24, "{name}");
    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    let completions = claimed.iter().map(|&task_id| {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move { store.run(Apply { task_id, command: done }, at(2)).await })
    });
    for completion in futures_util::future::join_all(completions).await {
        let _ = completion.unwrap().unwrap();
    }
    let record = store.read(move |reads| reads.task_graph(graph)).await.unwrap().unwrap();
    assert_eq!((record.tally.open, record.status.state), (0, GraphState::Finished), "{name}");
    assert_eq!(graph_exchanges(&unpublished(store).await), ["task-graph-running", "task-graph-finished"], "{name}");
}
