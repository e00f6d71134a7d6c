//! The fleet as Swarming runs it: what a run keeps of the worker that ran it.

use super::*;
use shoal_store::operation::{ChangeWorker, ClaimTask, ClaimWork, CreateGraph, CreateTask, FireDue, WorkerSeen};

/// A claim by a worker with these dimensions and version.
fn worker_having(dimensions: serde_json::Value, version: Option<&str>) -> ClaimRequest {
    let dimensions = Dimensions::parse("dimensions", serde_json::from_value(dimensions).expect("map")).expect("valid");
    ClaimRequest { dimensions, version: version.map(str::to_owned), ..worker(1) }
}

pub(crate) async fn a_run_keeps_the_dimensions_and_version_it_was_claimed_with(name: &str, backend: Backend) {
    let store = &backend.store;
    create(store, id(1), json!({"dimensions": {"os": ["linux"]}}), at(0)).await;
    let request = worker_having(json!({"os": ["linux"], "cpu": ["x86-64", "avx2"]}), Some("1.4.0"));
    let claims = store.run(ClaimWork { request }, at(1)).await.unwrap().value;
    let run = &claims[0].status.runs[0];
    let dimensions = serde_json::to_value(&run.worker_dimensions).unwrap();
    assert_eq!(dimensions, json!({"cpu": ["avx2", "x86-64"], "os": ["linux"]}), "{name}: as claimed");
    assert_eq!(run.worker_version.as_deref(), Some("1.4.0"), "{name}");

    // The record outlives the worker's later changes and a restart.
    let later = worker_having(json!({"os": ["linux"], "cpu": ["arm64"]}), Some("2.0.0"));
    assert!(store.run(ClaimWork { request: later }, at(2)).await.unwrap().value.is_empty(), "{name}: nothing left");
    let store = backend.reopen();
    let stored = store.read(|reads| reads.task(id(1))).await.unwrap().expect("task").status;
    assert_eq!(stored.runs[0], *run, "{name}: kept as claimed");

    // claimTask carries neither; a retry records its own claimant.
    let resolve = TaskCommand::Resolve {
        run_id: 0,
        resolution: Resolution::Exception(ReasonResolved::WorkerShutdown),
        stats: None,
    };
    apply(&store, id(1), resolve, at(3)).await;
    let claim = store
        .run(ClaimTask { task_id: id(1), run_id: 1, worker_group: "g".into(), worker_id: "w2".into() }, at(4))
        .await
        .unwrap()
        .value;
    let retried = &claim.status.runs[1];
    assert_eq!((retried.worker_dimensions.as_ref(), retried.worker_version.as_deref()), (None, None), "{name}");
}

/// `patch`'s task as created by `client_id`.
async fn create_by(store: &Store, task_id: TaskId, client_id: &str, patch: serde_json::Value) -> TaskStatus {
    let mut definition = definition(task_id, patch);
    definition.created_by = Some(client_id.to_owned());
    store.run(CreateTask { definition, task_id }, at(0)).await.unwrap().value
}

pub(crate) async fn a_task_keeps_its_creator_and_is_listed_by_it(name: &str, backend: Backend) {
    let store = &backend.store;
    let status = create_by(store, id(1), "alice", json!({"tags": {"kind": "build"}})).await;
    assert_eq!(status.created_by.as_deref(), Some("alice"), "{name}");
    // A colon in a client id, and a user tag naming alice, make nobody else's task alice's.
    create_by(store, id(2), "alice:ci", json!({"tags": {"kind": "build"}})).await;
    create_by(store, id(3), "mallory", json!({"tags": {"createdBy=alice": "ci", "kind": "test"}})).await;
    // The same definition again by someone else is the same task, still alice's.
    assert_eq!(
        create_by(store, id(1), "bob", json!({"tags": {"kind": "build"}})).await.created_by.as_deref(),
        Some("alice")
    );

    let listed = |tag: String, created_by: Option<&str>| {
        let query = shoal_store::TagQuery { tag, created_by: created_by.map(str::to_owned), ..Default::default() };
        async move {
            let listing = query.clone();
            let page = store.read(move |reads| reads.list_tagged(&listing, None, 10)).await.unwrap();
            let count = store.read(move |reads| reads.count_tagged(&query)).await.unwrap();
            let ids: Vec<TaskId> = page.items.iter().map(|task| task.status.task_id).collect();
            assert_eq!(ids.len() as u64, count, "the count agrees with the listing");
            ids
        }
    };
    // An empty tag lists a client's tasks.
    assert_eq!(listed(String::new(), Some("alice")).await, vec![id(1)], "{name}");
    assert_eq!(listed(String::new(), Some("alice:ci")).await, vec![id(2)], "{name}");
    assert_eq!(listed("kind:build".into(), Some("alice:ci")).await, vec![id(2)], "{name}: a filter on a tag");
    assert_eq!(listed("kind:build".into(), None).await, vec![id(2), id(1)], "{name}");

    // A graph's tasks are their submitter's.
    let input = serde_json::from_value(json!({
        "routing": "ci",
        "tasks": {"only": {"task": {
            "taskQueueId": "prov/wt", "created": "2026-01-01T00:00:00.000Z", "deadline": "2026-01-01T01:00:00.000Z",
            "payload": {}, "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
        }}}
    }))
    .unwrap();
    let request = shoal_store::GraphRequest { task_graph_id: id(9), input, created_by: Some("carol".into()) };
    let _ = store.run(CreateGraph { request }, at(0)).await.unwrap();
    let carols = listed(String::new(), Some("carol")).await;
    assert_eq!(carols.len(), 1, "{name}");
    let record = store.read(move |reads| reads.task(carols[0])).await.unwrap().expect("task");
    assert_eq!(record.status.created_by.as_deref(), Some("carol"), "{name}");
}

pub(crate) async fn a_fallback_slice_hands_its_worker_its_own_payload(name: &str, backend: Backend) {
    let store = &backend.store;
    let slices = json!({
        "payload": {"command": ["on-a-mac"]},
        "slices": [
            {"dimensions": {"os": ["Mac"]}, "expiresAfter": 10, "waitForCapacity": true},
            {"dimensions": {"os": ["Linux"]}, "expiresAfter": 600, "payload": {"command": ["on-linux"], "maxRunTime": 30}}
        ]
    });
    create(store, id(1), slices.clone(), at(0)).await;
    create(store, id(2), slices, at(0)).await;
    let linux =
        || ClaimRequest { count: 1, worker_id: "linux".into(), ..worker_having(json!({"os": ["Linux"]}), None) };
    // A live Linux worker: the fallback slice could run.
    let sighting = shoal_engine::worker::Sighting { dimensions: Some(linux().dimensions), ..Default::default() };
    store.run(WorkerSeen { key: linux().worker_key(), sighting }, at(0)).await.map(|done| done.value).unwrap();
    let payload_of = |claim: &shoal_store::Claim| {
        serde_json::from_str::<serde_json::Value>(claim.task.get()).unwrap()["payload"].clone()
    };

    // On its first slice a task hands over its own payload.
    let mac = ClaimRequest { count: 1, ..worker_having(json!({"os": ["Mac"]}), None) };
    let on_mac = store.run(ClaimWork { request: mac }, at(1)).await.unwrap().value;
    assert_eq!(payload_of(&on_mac[0]), json!({"command": ["on-a-mac"]}), "{name}");
    assert!(
        store.run(ClaimWork { request: linux() }, at(1)).await.unwrap().value.is_empty(),
        "{name}: the Linux slice is not current"
    );

    // Once it falls back, the slice's own; a retry on that slice, the same.
    assert_eq!(store.run(FireDue { limit: 100 }, at(11)).await.unwrap().value, 1, "{name}: the slice expiry fires");
    let claims = store.run(ClaimWork { request: linux() }, at(12)).await.unwrap().value;
    assert_eq!(claims[0].status.task_id, id(2), "{name}");
    assert_eq!(payload_of(&claims[0]), json!({"command": ["on-linux"], "maxRunTime": 30}), "{name}");
    let lost = TaskCommand::Resolve {
        run_id: 0,
        resolution: Resolution::Exception(ReasonResolved::WorkerShutdown),
        stats: None,
    };
    apply(store, id(2), lost, at(13)).await;
    let retried = store.run(ClaimWork { request: linux() }, at(14)).await.unwrap().value;
    assert_eq!(
        (retried[0].run_id, payload_of(&retried[0])),
        (1, json!({"command": ["on-linux"], "maxRunTime": 30})),
        "{name}"
    );

    // The task's definition is as submitted.
    let stored = store.read(|reads| reads.task(id(2))).await.unwrap().expect("task");
    let definition: serde_json::Value = serde_json::from_str(stored.task.get()).unwrap();
    assert_eq!(definition["payload"], json!({"command": ["on-a-mac"]}), "{name}");
    assert_eq!(definition["slices"][1]["payload"]["command"], json!(["on-linux"]), "{name}");
}

pub(crate) async fn a_change_to_a_worker_reaches_its_records_in_every_queue_it_serves(name: &str, backend: Backend) {
    use shoal_engine::worker::{Sighting, WorkerKey};
    use shoal_store::WorkerChange;
    let store = &backend.store;
    let key =
        |queue: &str| WorkerKey { task_queue_id: queue.into(), worker_group: "g".into(), worker_id: "box".into() };
    let serving = |queues: &[&str]| Sighting {
        queues: Some(queues.iter().map(|q| (*q).to_owned()).collect()),
        ..Sighting::default()
    };
    store
        .run(WorkerSeen { key: key("p/a"), sighting: serving(&["p/a", "p/b"]) }, at(0))
        .await
        .map(|done| done.value)
        .unwrap();
    store
        .run(WorkerSeen { key: key("p/b"), sighting: serving(&["p/a", "p/b"]) }, at(0))
        .await
        .map(|done| done.value)
        .unwrap();
    // A namesake in another queue that never said it is the same machine.
    store
        .run(WorkerSeen { key: key("p/c"), sighting: Sighting::default() }, at(0))
        .await
        .map(|done| done.value)
        .unwrap();

    let quarantine = WorkerChange::Quarantine { until: at(600), info: "bad disk".into() };
    let changed = store
        .run(ChangeWorker { key: key("p/b"), change: quarantine, client_id: "admin".into() }, at(1))
        .await
        .map(|done| done.value)
        .unwrap();
    assert_eq!(changed.task_queue_ids, ["p/a", "p/b"], "{name}");
    let record = |queue: &'static str| async move {
        store.read(move |reads| reads.worker(&key(queue))).await.unwrap().expect("recorded").0
    };
    assert!(record("p/a").await.is_quarantined(at(2)), "{name}: reached through the other queue");
    assert!(!record("p/c").await.is_quarantined(at(2)), "{name}: a namesake is another machine");
    let maintain = WorkerChange::Maintain { message: Some("reimage".into()) };
    store
        .run(ChangeWorker { key: key("p/a"), change: maintain, client_id: "admin".into() }, at(3))
        .await
        .map(|done| done.value)
        .unwrap();
    assert!(record("p/b").await.maintenance.is_some(), "{name}");

    // Serving one queue again, it is one record: changes stay there.
    store.run(WorkerSeen { key: key("p/a"), sighting: serving(&["p/a"]) }, at(4)).await.map(|done| done.value).unwrap();
    store
        .run(
            ChangeWorker {
                key: key("p/a"),
                change: WorkerChange::Maintain { message: None },
                client_id: "admin".into(),
            },
            at(5),
        )
        .await
        .map(|done| done.value)
        .unwrap();
    assert!(record("p/a").await.maintenance.is_none(), "{name}");
    assert!(record("p/b").await.maintenance.is_some(), "{name}: no longer one machine");
}

pub(crate) async fn pending_runs_are_counted_by_dimension_set_with_their_oldest(name: &str, backend: Backend) {
    let store = &backend.store;
    let linux = json!({"dimensions": {"os": ["linux"]}});
    // A running task is no backlog.
    create(store, id(5), linux.clone(), at(0)).await;
    assert_eq!(
        store
            .run(ClaimWork { request: worker_having(json!({"os": ["linux"]}), None) }, at(0))
            .await
            .unwrap()
            .value
            .len(),
        1
    );
    create(store, id(1), linux.clone(), at(1)).await;
    create(store, id(3), json!({"dimensions": {"os": ["mac"]}}), at(2)).await;
    create(store, id(2), linux, at(3)).await;
    create(store, id(4), json!({}), at(4)).await;
    create(store, id(6), json!({"taskQueueId": "prov/other", "dimensions": {"os": ["mac"]}}), at(5)).await;

    let sets = |store: Store, scan: usize| async move {
        let mut sets = store.read(move |reads| reads.pending_sets("prov/wt", scan)).await.unwrap();
        sets.sort_by_key(|set| set.oldest);
        sets.into_iter()
            .map(|set| (serde_json::to_value(&set.dimensions).unwrap(), set.pending, set.oldest))
            .collect::<Vec<_>>()
    };
    let expected =
        vec![(json!({"os": ["linux"]}), 2, at(1)), (json!({"os": ["mac"]}), 1, at(2)), (json!({}), 1, at(4))];
    assert_eq!(sets(store.clone(), 100).await, expected, "{name}");
    // At most `scan` runs are read, the longest-waiting first.
    assert_eq!(
        sets(store.clone(), 2).await,
        vec![(json!({"os": ["linux"]}), 1, at(1)), (json!({"os": ["mac"]}), 1, at(2))],
        "{name}"
    );
    let store = backend.reopen();
    assert_eq!(sets(store, 100).await, expected, "{name}: after a restart");
}

/// Every page of a listing by `query`, `limit` a page: the ids and how many pages it took.
async fn every_page(store: &Store, query: shoal_store::TagQuery, limit: usize) -> (Vec<TaskId>, usize) {
    let (mut ids, mut pages, mut token) = (Vec::new(), 0, None::<String>);
    loop {
        let (listing, after) = (query.clone(), token.clone());
        let page = store.read(move |reads| reads.list_tagged(&listing, after.as_deref(), limit)).await.unwrap();
        ids.extend(page.items.iter().map(|task| task.status.task_id));
        pages += 1;
        match page.continuation {
            Some(next) => token = Some(next),
            None => return (ids, pages),
        }
    }
}

pub(crate) async fn what_waits_or_runs_now_is_listed_fleet_wide_and_by_several_tags(name: &str, backend: Backend) {
    let store = &backend.store;
    // Pending in three queues (one created first but listed by its queue's name), one running,
    // one resolved, one waiting on a dependency.
    for (n, queue, tags) in [
        (1, "prov/zz", json!({"kind": "build", "os": "linux"})),
        (2, "prov/aa", json!({"kind": "build", "os": "mac"})),
        (3, "prov/aa", json!({"kind": "test", "os": "linux"})),
        (4, "prov/mm", json!({"kind": "build", "os": "linux"})),
        (5, "prov/wt", json!({"kind": "build", "os": "linux"})),
        (6, "prov/wt", json!({"kind": "build", "os": "linux"})),
    ] {
        create(store, id(n), json!({"taskQueueId": queue, "tags": tags}), at(0)).await;
    }
    create(store, id(7), json!({"dependencies": [id(1).as_str()]}), at(0)).await;
    assert_eq!(claim_ids(store, worker(1), at(1)).await, vec![id(5)], "{name}");
    let done = store.run(ClaimWork { request: worker(1) }, at(1)).await.unwrap().value;
    apply(
        store,
        done[0].status.task_id,
        TaskCommand::Resolve { run_id: 0, resolution: shoal_engine::task::Resolution::Completed, stats: None },
        at(2),
    )
    .await;

    let live = |state, queue: Option<&str>, also: &[&str]| shoal_store::TagQuery {
        state: Some(state),
        task_queue_id: queue.map(str::to_owned),
        also: also.iter().map(|tag| (*tag).to_owned()).collect(),
        ..Default::default()
    };
    // Queue by queue, each in line order, one task a page or all on one.
    let pending = vec![id(2), id(3), id(4), id(1)];
    assert_eq!(every_page(store, live(TaskState::Pending, None, &[]), 1).await.0, pending, "{name}");
    assert_eq!(every_page(store, live(TaskState::Pending, None, &[]), 100).await, (pending, 1), "{name}");
    assert_eq!(every_page(store, live(TaskState::Running, None, &[]), 10).await.0, vec![id(5)], "{name}");
    let one_queue = live(TaskState::Pending, Some("prov/aa"), &[]);
    assert_eq!(every_page(store, one_queue, 1).await.0, vec![id(2), id(3)], "{name}");
    // More tags filter it; so they do a tag's listing, and its count agrees.
    let linux = live(TaskState::Pending, None, &["os:linux", "kind:build"]);
    assert_eq!(every_page(store, linux, 2).await.0, vec![id(4), id(1)], "{name}");
    let tagged =
        shoal_store::TagQuery { tag: "kind:build".into(), also: vec!["os:linux".into()], ..Default::default() };
    assert_eq!(every_page(store, tagged.clone(), 2).await.0, vec![id(6), id(5), id(4), id(1)], "{name}");
    assert_eq!(store.read(move |reads| reads.count_tagged(&tagged)).await.unwrap(), 4, "{name}");
    let none = shoal_store::TagQuery { tag: "kind:build".into(), also: vec!["os:beos".into()], ..Default::default() };
    assert_eq!(store.read(move |reads| reads.count_tagged(&none)).await.unwrap(), 0, "{name}");

    // A state that is not now, or a forged token, is refused.
    let unscheduled = live(TaskState::Unscheduled, None, &[]);
    let refused = store.read(move |reads| reads.list_tagged(&unscheduled, None, 10)).await;
    assert!(matches!(refused, Err(StoreError::Rejected(_))), "{name}: {refused:?}");
    let query = live(TaskState::Pending, None, &[]);
    let forged = store.read(move |reads| reads.list_tagged(&query, Some("prov/aa x"), 10)).await;
    assert!(matches!(forged, Err(StoreError::Rejected(_))), "{name}: {forged:?}");
}
