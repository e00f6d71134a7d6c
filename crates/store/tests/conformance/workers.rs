//! The worker registry's scenarios (run per backend by the suite's macro).

use serde_json::json;
use shoal_engine::command::TaskCommand;
use shoal_engine::rejection::Missing;
use shoal_engine::status::{ReasonCreated, ReasonResolved, TaskState};
use shoal_engine::task::Resolution;
use shoal_engine::worker::{KEPT_EVENTS, Sighting, WorkerEventKind, WorkerKey, WorkerState};
use shoal_engine::{Rejection, Timestamp};
use shoal_store::operation::{ChangeWorker, CreateTask, ForgetTasks, LoseSilentWorkers, WorkerSeen};
use shoal_store::{Store, StoreError, WorkerChange};

use super::{Backend, apply, at, claim_ids, create, id, state_of, worker};

fn key(n: usize) -> WorkerKey {
    let request = worker(n);
    request.worker_key()
}

fn heartbeat() -> Sighting {
    Sighting { heartbeat: true, ..Sighting::default() }
}

async fn kinds(store: &Store, key: WorkerKey) -> Vec<WorkerEventKind> {
    let events = store.read(move |reads| reads.worker_events(&key)).await.unwrap();
    events.iter().map(|event| event.kind).collect()
}

async fn quarantine(store: &Store, n: usize, until: Timestamp, now: Timestamp) -> Result<(), StoreError> {
    let change = WorkerChange::Quarantine { until, info: "bad disk".into() };
    store
        .run(ChangeWorker { key: key(n), change, client_id: "admin".into() }, now)
        .await
        .map(|done| done.value)
        .map(|_| ())
}

pub(crate) async fn workers_are_recorded_with_their_claims_and_history(name: &str, backend: Backend) {
    let store = &backend.store;
    let seen =
        store.run(WorkerSeen { key: key(1), sighting: heartbeat() }, at(0)).await.map(|done| done.value).unwrap();
    assert_eq!((seen.first_seen, seen.heartbeats), (at(0), true), "{name}");
    create(store, id(1), json!({}), at(1)).await;
    claim_ids(store, worker(1), at(2)).await;
    let (record, running) = store.read(|reads| reads.worker(&key(1))).await.unwrap().expect("recorded");
    assert_eq!(record.recent_tasks.len(), 1, "{name}");
    assert_eq!(running, vec![id(1)], "{name}: its current run");
    assert_eq!(record.first_claim, Some(at(2)), "{name}");
    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    apply(store, id(1), done, at(3)).await;
    let (_, running) = store.read(|reads| reads.worker(&key(1))).await.unwrap().expect("recorded");
    assert!(running.is_empty(), "{name}: no run once it resolved");
    assert_eq!(
        kinds(store, key(1)).await,
        vec![WorkerEventKind::Resolved, WorkerEventKind::Claimed, WorkerEventKind::FirstSeen],
        "{name}: newest first, runs read from the tasks"
    );
    // Unknown workers: quarantine is a 404, declare records.
    let refused = quarantine(store, 9, at(100), at(4)).await.unwrap_err();
    assert!(matches!(refused, StoreError::Rejected(Rejection::NotFound(Missing::Worker(_)))), "{name}: {refused:?}");
    let declared = WorkerChange::Declare { expires: Some(at(5000)) };
    let record = store
        .run(ChangeWorker { key: key(9), change: declared, client_id: "admin".into() }, at(5))
        .await
        .map(|done| done.value)
        .unwrap();
    assert_eq!(record.expires, at(5000), "{name}");
}

pub(crate) async fn listing_workers_pages_and_filters(name: &str, backend: Backend) {
    let store = &backend.store;
    for n in 1..=5 {
        store
            .run(WorkerSeen { key: key(n), sighting: Sighting::default() }, at(0))
            .await
            .map(|done| done.value)
            .unwrap();
    }
    quarantine(store, 2, at(100), at(1)).await.unwrap();
    let all = |after: Option<String>| {
        store.read(move |reads| reads.list_workers("prov/wt", after.as_deref(), 2, &|_, _| true))
    };
    let first = all(None).await.unwrap();
    assert_eq!(first.items.len(), 2, "{name}");
    let second = all(first.continuation.clone()).await.unwrap();
    let third = all(second.continuation.clone()).await.unwrap();
    assert_eq!((third.items.len(), third.continuation.is_none()), (1, true), "{name}");
    let ids: Vec<String> =
        [first.items, second.items, third.items].concat().into_iter().map(|l| l.worker.key.worker_id).collect();
    assert_eq!(ids, ["w1", "w2", "w3", "w4", "w5"], "{name}");
    let quarantined = store
        .read(|reads| reads.list_workers("prov/wt", None, 1, &|worker, _| worker.is_quarantined(at(2))))
        .await
        .unwrap();
    let ids: Vec<&str> = quarantined.items.iter().map(|l| l.worker.key.worker_id.as_str()).collect();
    assert_eq!((ids, quarantined.continuation), (vec!["w2"], None), "{name}: filtered pages fill from later rows");
    let bad = store.read(|reads| reads.list_workers("prov/wt", Some("nope"), 2, &|_, _| true)).await.unwrap_err();
    assert!(matches!(bad, StoreError::Rejected(Rejection::Invalid { .. })), "{name}: {bad:?}");
}

pub(crate) async fn a_silent_worker_goes_missing_and_its_runs_are_retried_at_once(name: &str, backend: Backend) {
    let store = &backend.store;
    store.run(WorkerSeen { key: key(1), sighting: heartbeat() }, at(0)).await.map(|done| done.value).unwrap();
    store.run(WorkerSeen { key: key(2), sighting: Sighting::default() }, at(0)).await.map(|done| done.value).unwrap();
    create(store, id(1), json!({"retries": 1}), at(0)).await;
    create(store, id(2), json!({}), at(0)).await;
    claim_ids(store, worker(1), at(1)).await;
    claim_ids(store, worker(2), at(1)).await;
    assert_eq!(
        store.run(LoseSilentWorkers { cutoff: at(0), limit: 10 }, at(30)).await.unwrap().value,
        0,
        "{name}: not silent yet"
    );
    let lost = store.run(LoseSilentWorkers { cutoff: at(20), limit: 10 }, at(130)).await.unwrap();
    assert_eq!(lost.value, 1, "{name}: only the heartbeating worker");
    let status = store.read(|reads| reads.task(id(1))).await.unwrap().unwrap().status;
    assert_eq!(status.runs[0].reason_resolved, Some(ReasonResolved::ClaimExpired), "{name}");
    assert_eq!(status.runs[1].reason_created, ReasonCreated::Retry, "{name}");
    assert_eq!(state_of(store, id(2)).await, TaskState::Running, "{name}: takenUntil rules the other");
    let (record, running) = store.read(|reads| reads.worker(&key(1))).await.unwrap().unwrap();
    assert!(record.missing && running.is_empty(), "{name}");
    assert_eq!(record.state(at(130), 120_000, false), WorkerState::Missing, "{name}");
    assert_eq!(
        store.run(LoseSilentWorkers { cutoff: at(100), limit: 10 }, at(131)).await.unwrap().value,
        0,
        "{name}: once"
    );
    store.run(WorkerSeen { key: key(1), sighting: heartbeat() }, at(140)).await.map(|done| done.value).unwrap();
    assert_eq!(kinds(store, key(1)).await[0], WorkerEventKind::Back, "{name}");
    assert_eq!(claim_ids(store, worker(1), at(141)).await, vec![id(1)], "{name}: the retry runs again");
}

pub(crate) async fn a_workers_history_is_bounded_and_it_expires(name: &str, backend: Backend) {
    let store = &backend.store;
    store.run(WorkerSeen { key: key(1), sighting: Sighting::default() }, at(0)).await.map(|done| done.value).unwrap();
    for n in 0..KEPT_EVENTS as i64 {
        let until = if n % 2 == 0 { at(1000) } else { at(0) };
        quarantine(store, 1, until, at(1 + n)).await.unwrap();
    }
    let events = kinds(store, key(1)).await;
    assert_eq!(events.len(), KEPT_EVENTS as usize, "{name}: the first-seen event made room");
    assert!(!events.contains(&WorkerEventKind::FirstSeen), "{name}");
    let retention = shoal_store::DEFAULT_QUEUE_RETENTION_SECS;
    store
        .run(ForgetTasks { task_ids: Vec::new(), limit: 100 }, at(retention + 200))
        .await
        .map(|done| done.value)
        .unwrap();
    assert!(store.read(|reads| reads.worker(&key(1))).await.unwrap().is_none(), "{name}: expired");
    assert!(kinds(store, key(1)).await.is_empty(), "{name}: with its events");
}

/// Every run a worker claims is in its history, newest first and paged, for the retention.
pub(crate) async fn a_workers_runs_are_listed_newest_first_and_trimmed_past_the_retention(
    name: &str,
    backend: Backend,
) {
    let store = &backend.store;
    for n in 1..=25 {
        create(store, id(n), json!({}), at(0)).await;
    }
    // 22 claims one at a time, then three at once; another worker's claims are its own.
    for n in 1..=22 {
        assert_eq!(claim_ids(store, worker(1), at(n)).await.len(), 1, "{name}");
    }
    assert_eq!(claim_ids(store, worker(3), at(30)).await.len(), 3, "{name}");
    let runs = |n: usize, after: Option<String>, limit: usize| async move {
        let page = store.read(move |reads| reads.list_worker_runs(&key(n), after.as_deref(), limit)).await.unwrap();
        (page.items, page.continuation)
    };
    let (first, next) = runs(1, None, 10).await;
    assert_eq!(first.len(), 10, "{name}");
    assert_eq!((first[0].claimed, first[9].claimed), (at(22), at(13)), "{name}: newest first");
    let (mut all, mut token) = (first, next);
    while let Some(after) = token {
        let (page, next) = runs(1, Some(after), 10).await;
        all.extend(page);
        token = next;
    }
    assert_eq!(all.len(), 22, "{name}: beyond the record's 20, each once");
    assert!(all.iter().all(|run| run.run_id == 0), "{name}");
    let (other, end) = runs(3, None, 10).await;
    assert_eq!((other.len(), end), (3, None), "{name}: claimed together");
    assert!(other.iter().all(|run| run.claimed == at(30)), "{name}");
    assert_eq!(runs(3, None, 2).await, (other, None), "{name}: one claim's runs never split between pages");
    let forged = store.read(|reads| reads.list_worker_runs(&key(1), Some("x:y"), 10)).await;
    assert!(matches!(forged, Err(StoreError::Rejected(_))), "{name}: {forged:?}");

    // A claim at a millisecond 64 divides also trims the worker's runs older than the
    // retention (at(n) is such a time when 8 divides n); another claim does not.
    let retention = shoal_store::DEFAULT_QUEUE_RETENTION_SECS;
    for n in [26, 27] {
        // Made as a definition checked then would be (its times near the claims).
        let mut definition = super::definition(id(n), json!({}));
        (definition.created, definition.deadline) = (at(retention), at(retention + 3600));
        let _created = store.run(CreateTask { definition, task_id: id(n) }, at(retention)).await.unwrap();
    }
    assert_eq!(claim_ids(store, worker(1), at(retention + 17)).await.len(), 1, "{name}");
    assert_eq!(runs(1, None, 100).await.0.len(), 23, "{name}: not trimmed");
    assert_eq!(claim_ids(store, worker(1), at(retention + 24)).await.len(), 1, "{name}");
    let (kept, _) = runs(1, None, 100).await;
    let times: Vec<Timestamp> = kept.iter().map(|run| run.claimed).collect();
    assert_eq!(times, vec![at(retention + 24), at(retention + 17)], "{name}: trimmed");
    // An expired worker's runs go with it.
    let _forgotten = store.run(ForgetTasks { task_ids: Vec::new(), limit: 1000 }, at(3 * retention)).await.unwrap();
    assert!(runs(1, None, 100).await.0.is_empty(), "{name}");
    assert!(runs(3, None, 100).await.0.is_empty(), "{name}");
}
