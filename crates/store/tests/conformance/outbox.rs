//! The outbox and group resolution: each transition's messages, in order, across restarts and concurrent writes.

use super::*;
use shoal_store::operation::{Apply, CreateTask, SealGroup};

/// Everything committed and not yet published, in publishing order, the way the publisher
/// takes it: from memory when it can, from the table otherwise.
pub(crate) async fn unpublished(store: &Store) -> Vec<OutboxEntry> {
    store.settle_outbox().await.unwrap();
    let feed = store.outbox();
    let mut next = feed.first();
    let mut taken = Vec::new();
    loop {
        let entries = match feed.take(next, 100) {
            Next::Buffered(entries) => entries.iter().map(|entry| (**entry).clone()).collect(),
            Next::Stored => store.read(move |reads| reads.outbox(next, 100)).await.unwrap(),
            Next::Idle => return taken,
        };
        next = entries.last().map_or(next, |entry| entry.seq + 1);
        taken.extend(entries);
    }
}

pub(crate) fn exchanges(entries: &[OutboxEntry]) -> Vec<&'static str> {
    entries.iter().map(|entry| entry.message.exchange.short_name()).collect()
}

pub(crate) async fn every_transition_leaves_its_messages_in_the_outbox_in_order(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    let patch = json!({"routes": ["index.a.b"], "tags": {"kind": "build"}, "schedulerId": "sched"});
    create(store, task_id, patch, at(0)).await;
    let refused = store.run(Apply { task_id, command: TaskCommand::Reclaim { run_id: 0 } }, at(1)).await;
    assert!(matches!(refused, Err(StoreError::Rejected(_))), "{name}");
    claim_ids(store, worker(1), at(1)).await;
    apply(store, task_id, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(2))
        .await;

    let entries = unpublished(store).await;
    assert_eq!(
        exchanges(&entries),
        vec!["task-defined", "task-pending", "task-running", "task-completed", "task-group-resolved"],
        "{name}: the refused reclaim wrote nothing"
    );
    assert!(entries.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1), "{name}: gapless sequence");
    let running = &entries[2].message;
    assert_eq!(running.routing_key, format!("primary.{task_id}.0.g.w1.prov.wt.sched.{task_id}._"), "{name}");
    assert_eq!(running.cc, vec!["route.index.a.b"], "{name}");
    let body: serde_json::Value = serde_json::from_str(&running.body).unwrap();
    assert_eq!((body["workerId"].as_str(), body["task"]["tags"]["kind"].as_str()), (Some("w1"), Some("build")));
    assert!(entries[4].message.cc.is_empty(), "{name}: group messages have no routes");

    let first = entries[0].seq;
    let stored = store.read(move |reads| reads.outbox(first, 100)).await.unwrap();
    assert_eq!(stored, entries, "{name}: the table holds exactly what the feed handed over");
}

pub(crate) async fn unpublished_messages_survive_a_restart_and_published_ones_are_deleted(
    name: &str,
    backend: Backend,
) {
    for n in 1..=3 {
        create(&backend.store, id(n), json!({}), at(0)).await;
    }
    let before = unpublished(&backend.store).await;
    assert_eq!(before.len(), 6, "{name}: defined and pending for each task");
    backend.store.close().await;

    let reopened = backend.reopen();
    let after = unpublished(&reopened).await;
    assert_eq!(after, before, "{name}: nothing committed is lost by a restart");
    let feed = reopened.outbox();
    let _ = feed.published(after[3].seq);
    reopened.trim_outbox().await.unwrap();
    reopened.close().await;

    let again = backend.reopen();
    let left = unpublished(&again).await;
    assert_eq!(left, after[4..].to_vec(), "{name}: published messages were deleted, the rest kept");
    again.close().await;
}

pub(crate) async fn a_group_is_resolved_each_time_its_last_task_resolves(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(100);
    let in_group = || json!({"taskGroupId": group.to_string()});
    create(store, id(1), in_group(), at(0)).await;
    create(store, id(2), in_group(), at(0)).await;
    apply(store, id(1), TaskCommand::Cancel, at(1)).await;
    let resolved = |entries: &[OutboxEntry]| {
        entries.iter().filter(|entry| entry.message.exchange.short_name() == "task-group-resolved").count()
    };
    assert_eq!(resolved(&unpublished(store).await), 0, "{name}: one task is still unresolved");
    apply(store, id(2), TaskCommand::Cancel, at(2)).await;
    assert_eq!(resolved(&unpublished(store).await), 1, "{name}");
    create(store, id(3), in_group(), at(3)).await;
    claim_ids(store, worker(1), at(4)).await;
    apply(store, id(3), TaskCommand::Resolve { run_id: 0, resolution: Resolution::Failed, stats: None }, at(5)).await;
    let entries = unpublished(store).await;
    assert_eq!(resolved(&entries), 2, "{name}: resolved again after a task was added");
    let last = entries.last().unwrap();
    assert_eq!(last.message.routing_key, format!("primary.{group}.-._"), "{name}");
}

pub(crate) async fn writes_arriving_together_are_each_judged_alone(name: &str, backend: Backend) {
    let store = backend.store.clone();
    let (group, other, sealed) = (id(500), id(501), id(502));
    let in_group = |group: TaskId| json!({"taskGroupId": group.to_string()});
    create(&store, id(30), in_group(sealed), at(0)).await;
    let _sealed = store.run(SealGroup { task_group_id: sealed }, at(0)).await.unwrap();

    // Twenty creates at once, with one refused among them (its group is sealed).
    let mut creates = tokio::task::JoinSet::new();
    for n in (1..=20).chain([31]) {
        let (store, task_group) = (store.clone(), if n == 31 { sealed } else { group });
        creates.spawn(async move {
            (
                n,
                store
                    .run(CreateTask { definition: definition(id(n), in_group(task_group)), task_id: id(n) }, at(1))
                    .await,
            )
        });
    }
    while let Some(created) = creates.join_next().await {
        match created.unwrap() {
            (31, refused) => assert!(matches!(refused, Err(StoreError::Rejected(_))), "{name}: {refused:?}"),
            (n, created) => assert_eq!(created.unwrap().value.state, TaskState::Pending, "{name}: task {n}"),
        }
    }
    // A task waiting on two of them, in a group of its own.
    let dependent = id(900);
    let waits = json!({"taskGroupId": other.to_string(), "dependencies": [id(1).to_string(), id(2).to_string()]});
    create(&store, dependent, waits, at(1)).await;
    let mut claimed = claim_ids(&store, worker(32), at(2)).await;
    claimed.sort();
    let mut expected: Vec<TaskId> = (1..=20).map(id).chain([id(30)]).collect();
    expected.sort();
    assert_eq!(claimed, expected, "{name}: the refused create wrote nothing");

    // Twenty reports at once, with two refused among them (a run that does not exist, a
    // task that does not exist).
    let done = |run_id| TaskCommand::Resolve { run_id, resolution: Resolution::Completed, stats: None };
    let mut reports = tokio::task::JoinSet::new();
    for (n, run_id) in (1..=20).map(|n| (n, 0)).chain([(30, 4), (999, 0)]) {
        let store = store.clone();
        reports.spawn(async move { (n, store.run(Apply { task_id: id(n), command: done(run_id) }, at(3)).await) });
    }
    let mut n_released = 0;
    while let Some(reported) = reports.join_next().await {
        match reported.unwrap() {
            (30 | 999, refused) => assert!(matches!(refused, Err(StoreError::Rejected(_))), "{name}: {refused:?}"),
            (n, reported) => {
                let reported = reported.unwrap();
                assert_eq!(reported.value.state, TaskState::Completed, "{name}: task {n}");
                n_released += reported
                    .events
                    .iter()
                    .filter(|event| event.task_id == dependent && matches!(event.event, Event::Pending { .. }))
                    .count();
            }
        }
    }
    assert_eq!(n_released, 1, "{name}: the dependent's release is reported once, to wake its workers");
    assert_eq!(state_of(&store, dependent).await, TaskState::Pending, "{name}");
    assert_eq!(state_of(&store, id(30)).await, TaskState::Running, "{name}: the refused report wrote nothing");
    let entries = unpublished(&store).await;
    let group_resolved: Vec<&str> = entries
        .iter()
        .filter(|entry| entry.message.exchange.short_name() == "task-group-resolved")
        .map(|entry| entry.message.routing_key.as_str())
        .collect();
    assert_eq!(group_resolved, vec![format!("primary.{group}.-._")], "{name}: the group resolved once");
    assert!(entries.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1), "{name}: gapless sequence");
}

/// Messages of one exchange in the outbox, by routing key.
pub(crate) async fn routed(store: &Store, exchange: &str) -> Vec<String> {
    let entries = unpublished(store).await;
    entries
        .iter()
        .filter(|entry| entry.message.exchange.short_name() == exchange)
        .map(|entry| entry.message.routing_key.clone())
        .collect()
}

pub(crate) async fn a_group_resolves_only_when_nothing_in_it_is_left_unresolved(name: &str, backend: Backend) {
    let done = |run_id| TaskCommand::Resolve { run_id, resolution: Resolution::Completed, stats: None };
    let store = backend.store.clone();
    // Two groups of five running tasks. At once: in the first, four completed and the
    // fifth reclaimed (still running) and reported on a run it does not have (refused);
    // in the second, all five completed and a new task created.
    let (first, second) = (id(600), id(601));
    for n in 1..=10 {
        let group = if n <= 5 { first } else { second };
        create(&store, id(n), json!({"taskGroupId": group.to_string()}), at(0)).await;
    }
    assert_eq!(claim_ids(&store, worker(10), at(1)).await.len(), 10, "{name}");
    let mut writes = Vec::new();
    for n in (1..=4).chain(6..=10) {
        writes.push(store.run(Apply { task_id: id(n), command: done(0) }, at(2)));
    }
    writes.push(store.run(Apply { task_id: id(5), command: TaskCommand::Reclaim { run_id: 0 } }, at(2)));
    writes.push(store.run(Apply { task_id: id(5), command: done(3) }, at(2)));
    // Submitted together (the create first), so that on PostgreSQL they are written as
    // one gathering.
    let (created, written) = tokio::join!(
        store.run(
            CreateTask { definition: definition(id(11), json!({"taskGroupId": second.to_string()})), task_id: id(11) },
            at(2)
        ),
        futures_util::future::join_all(writes),
    );
    let states: Vec<_> = written.into_iter().map(|written| written.map(|c| c.value.state)).collect();
    assert!(states[..9].iter().all(|state| matches!(state, Ok(TaskState::Completed))), "{name}: {states:?}");
    assert!(matches!(states[9], Ok(TaskState::Running)), "{name}: {states:?}");
    assert!(matches!(states[10], Err(StoreError::Rejected(_))), "{name}: {states:?}");
    assert_eq!(created.unwrap().value.state, TaskState::Pending, "{name}");
    assert!(routed(&store, "task-group-resolved").await.is_empty(), "{name}: each group has a task unresolved");

    // The last ones complete: each group resolves, once.
    let _done = store.run(Apply { task_id: id(5), command: done(0) }, at(3)).await.unwrap();
    assert_eq!(routed(&store, "task-group-resolved").await, vec![format!("primary.{first}.-._")], "{name}");
    assert_eq!(claim_ids(&store, worker(11), at(4)).await, vec![id(11)], "{name}");
    let _done = store.run(Apply { task_id: id(11), command: done(0) }, at(5)).await.unwrap();
    let resolved = vec![format!("primary.{first}.-._"), format!("primary.{second}.-._")];
    assert_eq!(routed(&store, "task-group-resolved").await, resolved, "{name}");
}
