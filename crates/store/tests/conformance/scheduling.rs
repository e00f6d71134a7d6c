//! Swarming's scheduling scenarios: slices, capacity (run per backend by the suite's macro).

use shoal_store::operation::{Apply, ClaimTask, ClaimWork, FireDue, WorkerSeen};
use std::collections::BTreeMap;

use serde_json::json;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::status::{ReasonResolved, TaskState};
use shoal_engine::worker::Sighting;
use shoal_store::Store;

use super::{Backend, at, claim_ids, create, id, state_of, worker};

fn os(values: &[&str]) -> Dimensions {
    let raw = BTreeMap::from([("os".to_owned(), values.iter().map(|v| (*v).to_owned()).collect())]);
    Dimensions::parse("dimensions", raw).unwrap()
}

async fn seen(store: &Store, n: usize, dimensions: Dimensions, secs: i64) {
    let sighting = Sighting { dimensions: Some(dimensions), ..Sighting::default() };
    store.run(WorkerSeen { key: worker(n).worker_key(), sighting }, at(secs)).await.map(|done| done.value).unwrap();
}

async fn reason(store: &Store, n: u32) -> Option<ReasonResolved> {
    let task = store.read(move |reads| reads.task(id(n))).await.unwrap().expect("task exists");
    task.status.runs.last().and_then(|run| run.reason_resolved)
}

pub(crate) async fn slices_skip_without_capacity_and_fall_back_when_they_expire(name: &str, backend: Backend) {
    let store = &backend.store;
    seen(store, 1, os(&["Linux", "Ubuntu"]), 0).await;
    let mac_then_linux = json!({"slices": [
        {"dimensions": {"os": ["Mac"]}, "expiresAfter": 60},
        {"dimensions": {"os": ["Linux"]}, "expiresAfter": 120}]});
    let status = create(store, id(1), mac_then_linux, at(1)).await;
    assert_eq!(status.current_slice(), Some(1), "{name}: no Mac worker is live: skipped at once");
    let nothing_can = json!({"slices": [{"dimensions": {"os": ["Mac"]}, "expiresAfter": 60}]});
    create(store, id(2), nothing_can, at(1)).await;
    assert_eq!(state_of(store, id(2)).await, TaskState::Exception, "{name}");
    assert_eq!(reason(store, 2).await, Some(ReasonResolved::ResourceUnavailable), "{name}");
    let waits = json!({"slices": [
        {"dimensions": {"os": ["Linux", "Ubuntu"], "gpu": ["yes"]}, "expiresAfter": 10, "waitForCapacity": true},
        {"dimensions": {"os": ["Ubuntu"]}, "expiresAfter": 60},
        {"dimensions": {"os": ["Mac"]}, "expiresAfter": 60}]});
    assert_eq!(create(store, id(3), waits, at(2)).await.current_slice(), Some(0), "{name}: waits for capacity");
    let mut mac = worker(2);
    mac.dimensions = os(&["Mac"]);
    assert!(claim_ids(store, mac, at(3)).await.is_empty(), "{name}: the Mac slices are not current");
    let mut linux = worker(1);
    linux.count = 1;
    linux.dimensions = os(&["Linux", "Ubuntu"]);
    assert_eq!(claim_ids(store, linux.clone(), at(4)).await, vec![id(1)], "{name}: slice 1 runs on Linux");
    assert!(claim_ids(store, linux.clone(), at(5)).await.is_empty(), "{name}: slice 0 needs a gpu");
    assert_eq!(store.run(FireDue { limit: 100 }, at(12)).await.unwrap().value, 1, "{name}: the slice expiry fires");
    let task = store.read(|reads| reads.task(id(3))).await.unwrap().unwrap();
    assert_eq!(task.status.current_slice(), Some(1), "{name}: the next slice with capacity");
    assert_eq!(task.status.runs.len(), 1, "{name}: the same run");
    assert_eq!(claim_ids(store, linux.clone(), at(13)).await, vec![id(3)], "{name}");
    // Past its last slice a task ends deadline-exceeded; a silent worker is no capacity.
    let last = json!({"slices": [{"dimensions": {"os": ["Linux"]}, "expiresAfter": 30}]});
    create(store, id(4), last, at(20)).await;
    assert_eq!(store.run(FireDue { limit: 100 }, at(50)).await.unwrap().value, 1, "{name}");
    assert_eq!(reason(store, 4).await, Some(ReasonResolved::DeadlineExceeded), "{name}");
    let late = json!({"slices": [{"dimensions": {"os": ["Linux"]}, "expiresAfter": 30}]});
    create(store, id(5), late, at(1000)).await;
    assert_eq!(reason(store, 5).await, Some(ReasonResolved::ResourceUnavailable), "{name}: the worker went silent");
}

pub(crate) async fn secrets_are_kept_apart_and_handed_to_the_claim(name: &str, backend: Backend) {
    let store = &backend.store;
    create(store, id(1), json!({"secrets": {"token": "s3cr3t"}}), at(1)).await;
    create(store, id(2), json!({"payload": {"note": "\"hasSecrets\":true"}}), at(2)).await;
    let task = store.read(|reads| reads.task(id(1))).await.unwrap().unwrap();
    assert!(!task.task.get().contains("s3cr3t"), "{name}: not in the definition: {}", task.task.get());
    assert!(task.task.get().contains(r#""hasSecrets":true"#), "{name}");
    let mut request = worker(2);
    request.count = 2;
    let claims = store.run(ClaimWork { request }, at(3)).await.unwrap().value;
    let secrets: Vec<Option<String>> =
        claims.iter().map(|claim| claim.secrets.as_ref().map(|s| s.expose().to_owned())).collect();
    assert_eq!(secrets, vec![Some(r#"{"token":"s3cr3t"}"#.to_owned()), None], "{name}");
}

pub(crate) async fn an_idempotent_task_is_deduped_from_a_recent_completion(name: &str, backend: Backend) {
    use shoal_engine::command::TaskCommand;
    use shoal_engine::task::Resolution;
    let store = &backend.store;
    let same = json!({"idempotent": true, "payload": {"command": ["make"]}, "dimensions": {"os": ["Linux"]}});
    let mut linux = worker(1);
    linux.dimensions = os(&["Linux"]);
    let finish = |task: u32, resolution: Resolution, secs: i64| async move {
        let command = TaskCommand::Resolve { run_id: 0, resolution, stats: None };
        let status = store.run(Apply { task_id: id(task), command }, at(secs)).await.unwrap().value;
        assert!(status.state.is_resolved());
    };
    create(store, id(1), same.clone(), at(1)).await;
    assert_eq!(claim_ids(store, linux.clone(), at(2)).await, vec![id(1)], "{name}");
    create(store, id(2), same.clone(), at(3)).await;
    assert_eq!(state_of(store, id(2)).await, TaskState::Pending, "{name}: a running original is never reused");
    finish(1, Resolution::Failed, 4).await;
    create(store, id(3), same.clone(), at(5)).await;
    assert_eq!(state_of(store, id(3)).await, TaskState::Pending, "{name}: nor a failed one");
    assert_eq!(claim_ids(store, linux.clone(), at(6)).await, vec![id(2)], "{name}");
    finish(2, Resolution::Completed, 7).await;
    let deduped = create(store, id(4), same.clone(), at(8)).await;
    assert_eq!(deduped.state, TaskState::Completed, "{name}");
    assert_eq!(deduped.deduped_from(), Some(id(2)), "{name}");
    assert!(deduped.runs[0].worker_id.is_none(), "{name}: no worker ran it");
    let other = json!({"idempotent": true, "payload": {"command": ["make", "check"]}, "dimensions": {"os": ["Linux"]}});
    assert_eq!(create(store, id(5), other, at(9)).await.state, TaskState::Pending, "{name}: other properties");
    let not_idempotent = json!({"payload": {"command": ["make"]}, "dimensions": {"os": ["Linux"]}});
    assert_eq!(create(store, id(6), not_idempotent, at(9)).await.state, TaskState::Pending, "{name}");
    // The window (600 s here) counts from the completion, at 7.
    assert_eq!(create(store, id(7), same.clone(), at(7 + 599)).await.deduped_from(), Some(id(2)), "{name}");
    let late = create(store, id(8), same.clone(), at(7 + 601)).await;
    assert!(late.deduped_from().is_none(), "{name}: past the dedup window");
    // A new completion stands until its task is rerun.
    let claimed = store
        .run(ClaimTask { task_id: id(8), run_id: 0, worker_group: "g".into(), worker_id: "w1".into() }, at(609))
        .await
        .unwrap()
        .value;
    assert_eq!(claimed.run_id, 0, "{name}");
    finish(8, Resolution::Completed, 610).await;
    let rerun = store.run(Apply { task_id: id(8), command: TaskCommand::Rerun }, at(611)).await.unwrap().value;
    assert_eq!(rerun.state, TaskState::Pending, "{name}");
    assert!(create(store, id(9), same, at(612)).await.deduped_from().is_none(), "{name}: a rerun takes it back");
}

/// The scenario Swarming's users know, end to end on one queue.
pub(crate) async fn swarmings_own_scenario(name: &str, backend: Backend) {
    use shoal_engine::command::TaskCommand;
    use shoal_engine::task::Resolution;
    let store = &backend.store;
    let raw = BTreeMap::from([
        ("pool".to_owned(), vec!["p".to_owned()]),
        ("os".to_owned(), vec!["Linux".to_owned(), "Ubuntu".to_owned()]),
    ]);
    let bot = Dimensions::parse("dimensions", raw).unwrap();
    let sighting = Sighting { dimensions: Some(bot.clone()), ..Sighting::default() };
    store.run(WorkerSeen { key: worker(1).worker_key(), sighting }, at(0)).await.map(|done| done.value).unwrap();
    let mut claim = worker(1);
    claim.dimensions = bot;
    claim.count = 1;

    // Slices: the Mac one is skipped at once, the Linux one runs.
    let sliced = json!({"idempotent": true, "payload": {"command": ["test"]}, "slices": [
        {"dimensions": {"pool": ["p"], "os": ["Mac"]}, "expiresAfter": 60},
        {"dimensions": {"pool": ["p"], "os": ["Linux"]}, "expiresAfter": 120}]});
    assert_eq!(create(store, id(1), sliced.clone(), at(1)).await.current_slice(), Some(1), "{name}");
    assert_eq!(claim_ids(store, claim.clone(), at(2)).await, vec![id(1)], "{name}");
    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    assert!(
        store.run(Apply { task_id: id(1), command: done }, at(3)).await.unwrap().value.state.is_resolved(),
        "{name}"
    );
    // The same idempotent task again: deduped.
    assert_eq!(create(store, id(2), sliced, at(4)).await.deduped_from(), Some(id(1)), "{name}");

    // Priorities 9, 8, 6, 7, 8 on one busy worker run as 6, 7, 8, 8, 9.
    for (n, priority) in [(11, 9), (12, 8), (13, 6), (14, 7), (15, 8)] {
        let task = json!({"priority": priority, "dimensions": {"pool": ["p"], "os": ["Linux|Mac"]}});
        create(store, id(n), task, at(5)).await;
    }
    let mut order = Vec::new();
    for n in 0..5 {
        order.extend(claim_ids(store, claim.clone(), at(6 + n)).await);
    }
    assert_eq!(order, vec![id(13), id(14), id(12), id(15), id(11)], "{name}: by priority, then age");
    for task in order {
        let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
        assert!(
            store.run(Apply { task_id: task, command: done }, at(11)).await.unwrap().value.state.is_resolved(),
            "{name}"
        );
    }

    // Nothing can run it: resource-unavailable at once; waiting for capacity, it expires.
    let nothing = json!({"slices": [{"dimensions": {"pool": ["p"], "os": ["Windows"]}, "expiresAfter": 60}]});
    create(store, id(21), nothing, at(20)).await;
    assert_eq!(reason(store, 21).await, Some(ReasonResolved::ResourceUnavailable), "{name}");
    let waiting = json!({"slices": [
        {"dimensions": {"pool": ["p"], "os": ["Windows"]}, "expiresAfter": 60, "waitForCapacity": true}]});
    assert_eq!(create(store, id(22), waiting, at(20)).await.state, TaskState::Pending, "{name}");
    assert_eq!(store.run(FireDue { limit: 100 }, at(80)).await.unwrap().value, 1, "{name}");
    assert_eq!(reason(store, 22).await, Some(ReasonResolved::DeadlineExceeded), "{name}: expired");

    // `a|b` is OR; a key repeated is AND.
    create(store, id(31), json!({"dimensions": {"os": ["Ubuntu", "Linux"], "pool": ["p|q"]}}), at(90)).await;
    create(store, id(32), json!({"dimensions": {"os": ["Ubuntu", "Debian"]}}), at(90)).await;
    assert_eq!(claim_ids(store, claim.clone(), at(91)).await, vec![id(31)], "{name}");
    assert!(claim_ids(store, claim, at(92)).await.is_empty(), "{name}: it has no Debian");
}
