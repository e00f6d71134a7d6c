//! Expiry: what is forgotten with an expired task, on every backend.

use super::*;
use shoal_store::operation::{CreateArtifact, CreateGraph, ForgetTasks};

pub(crate) async fn expired_tasks_are_forgotten_with_what_hangs_on_them(name: &str, backend: Backend) {
    let store = &backend.store;
    let (short, dependent, kept) = (id(1), id(2), id(3));
    let expires = json!({"expires": "2026-01-01T02:00:00.000Z"});
    create(store, short, expires.clone(), at(0)).await;
    create(store, dependent, json!({"dependencies": [short.to_string()]}), at(0)).await;
    create(store, kept, json!({}), at(0)).await;
    assert_eq!(claim_ids(store, worker(3), at(1)).await, vec![short, kept], "{name}");
    let blob = json!({"storageType": "error", "expires": "2026-01-01T01:30:00.000Z", "reason": "file-missing-on-worker", "message": "no"});
    let _ = store
        .run(CreateArtifact { key: key(short, 0, "public/e"), request: artifact_request(blob) }, at(2))
        .await
        .unwrap();
    for task_id in [short, kept] {
        apply(
            store,
            task_id,
            TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None },
            at(3),
        )
        .await;
    }
    assert_eq!(state_of(store, dependent).await, TaskState::Pending, "{name}");

    let before = store.read(|reads| reads.expired_tasks(at(3 * 3600), 10)).await.unwrap();
    assert_eq!(before, vec![(short, 1)], "{name}: only the resolved task past its expiry, with its one run");
    assert!(store.read(|reads| reads.expired_tasks(at(3600), 10)).await.unwrap().is_empty(), "{name}: not yet");
    // Named, but not past its expiry: not forgotten.
    let forgotten =
        store.run(ForgetTasks { task_ids: vec![kept], limit: 10 }, at(3 * 3600)).await.map(|done| done.value).unwrap();
    assert_eq!(forgotten, 0, "{name}: a task not expired is left alone");

    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![short], limit: 10 }, at(3 * 3600)).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    let (task, group, artifact) = store
        .read(move |reads| {
            Ok((
                reads.task(short)?.is_some(),
                reads.task_group(short)?.is_some(),
                reads.artifact(short, 0, "public/e")?,
            ))
        })
        .await
        .unwrap();
    assert_eq!((task, group, artifact), (false, false, None), "{name}: the task, its group and its artifacts went");
    assert_eq!(state_of(store, dependent).await, TaskState::Pending, "{name}: a dependent keeps its state");
    assert_eq!(state_of(store, kept).await, TaskState::Completed, "{name}");
    let dependents = store.read(move |reads| reads.list_dependents(short, None, 10)).await.unwrap();
    assert!(dependents.items.is_empty(), "{name}: no dependency row is left");

    // A graph goes with its last task.
    let graph = id(902);
    let input = graph_input(json!({"only": {"task": {"expires": "2026-01-01T02:00:00.000Z"}}}));
    let _ = store
        .run(
            CreateGraph { request: shoal_store::GraphRequest { task_graph_id: graph, input, created_by: None } },
            at(0),
        )
        .await
        .unwrap();
    let node = store.read(move |reads| reads.graph_nodes(graph)).await.unwrap()[0].task_id;
    assert!(claim_ids(store, worker(5), at(4)).await.contains(&node), "{name}");
    apply(store, node, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(5)).await;
    assert_eq!(
        store.run(ForgetTasks { task_ids: vec![node], limit: 10 }, at(3 * 3600)).await.map(|done| done.value).unwrap(),
        1,
        "{name}"
    );
    let (graph_left, group_left) = store
        .read(move |reads| Ok((reads.task_graph(graph)?.is_some(), reads.task_group(graph)?.is_some())))
        .await
        .unwrap();
    assert_eq!((graph_left, group_left), (false, false), "{name}: the graph and its group went with its last task");

    // Task queues are forgotten once their retention (5 days after last use) is over.
    let queue = |reads: &dyn shoal_store::Reads| reads.task_queue("prov/wt");
    store.run(ForgetTasks { task_ids: vec![], limit: 10 }, at(3 * 86_400)).await.map(|done| done.value).unwrap();
    assert!(store.read(move |reads| queue(reads)).await.unwrap().is_some(), "{name}");
    store.run(ForgetTasks { task_ids: vec![], limit: 10 }, at(6 * 86_400)).await.map(|done| done.value).unwrap();
    assert!(store.read(move |reads| queue(reads)).await.unwrap().is_none(), "{name}: unseen for 5 days");
}
