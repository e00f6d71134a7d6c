//! The SQLite store's own behaviour: its writer, commit view, waiting claims and memory.

use crate::ops::operation::{ChangeWorker, ClaimWork, CreateTask, SealGroup, WorkerSeen};
use shoal_engine::{Rejection, Timestamp};

use super::*;

fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(&SqliteConfig {
        path: dir.path().join("shoal.db"),
        settings: crate::StoreSettings { claim_timeout_secs: 60, ..Default::default() },
    })
    .unwrap()
}

fn queue_known(store: &SqliteStore, name: &'static str) -> impl Future<Output = bool> {
    let store = store.clone();
    async move { store.read(move |reads| Ok(reads.task_queue(name)?.is_some())).await.unwrap() }
}

#[tokio::test]
async fn operations_whose_caller_left_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let sender = store.inner.jobs.lock().unwrap().clone().unwrap();
    // Hold the writer busy until the abandoned job is queued behind it.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (busy_reply, busy_answer) = oneshot::channel();
    let busy = WriteJob {
        op: move |_: &mut Tx<'_>| held.recv().map_err(|e| StoreError::Internal(e.to_string())),
        reply: busy_reply,
    };
    sender.send(Box::new(busy)).await.unwrap();
    let (abandoned_reply, abandoned_answer) = oneshot::channel::<Result<Committed<()>, StoreError>>();
    let abandoned =
        WriteJob { op: |tx: &mut Tx<'_>| tx.record_queue("p/abandoned", Timestamp(1)), reply: abandoned_reply };
    sender.send(Box::new(abandoned)).await.unwrap();
    drop(abandoned_answer);
    release.send(()).unwrap();
    let busy = busy_answer.await.unwrap().unwrap();
    assert!(busy.events.is_empty());
    let after = store.write(|tx| tx.record_queue("p/after", Timestamp(1))).await.unwrap();
    assert!(after.events.is_empty());
    assert!(queue_known(&store, "p/after").await);
    assert!(!queue_known(&store, "p/abandoned").await, "the abandoned operation did not run");
}

/// A valid definition of a task in `queue`.
fn definition(task_id: TaskId, queue: &str, now: Timestamp) -> shoal_engine::definition::TaskDefinition {
    let input: shoal_engine::definition::TaskDefinitionInput = serde_json::from_value(serde_json::json!({
        "taskQueueId": queue,
        "created": now.to_string(),
        "deadline": now.plus_secs(3600).to_string(),
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    }))
    .unwrap();
    input.validate(task_id, now).unwrap()
}

#[tokio::test]
async fn runs_made_pending_wake_claims_at_commit_and_a_rolled_back_batch_wakes_nobody() {
    use futures_util::FutureExt;

    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let crate::Store::Sqlite(sqlite) = &store else { unreachable!() };
    let woken = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&woken);
    assert!(store.wake_at_commit(Box::new(move |queue, _| seen.lock().unwrap().push(queue.to_owned()))));
    assert!(!store.wake_at_commit(Box::new(|_, _| {})), "one hook per store");
    let now = Timestamp(1_767_225_600_000);
    let (first, second) =
        (TaskId::parse("00000001QxCxxxxxxxxxxA").unwrap(), TaskId::parse("00000002QxCxxxxxxxxxxA").unwrap());

    // A create in a batch that fails after it: rolled back, and nobody is woken.
    let held = hold_writer(sqlite).await;
    let mut create =
        std::pin::pin!(store.run(CreateTask { definition: definition(first, "p/a", now), task_id: first }, now));
    assert!(create.as_mut().now_or_never().is_none());
    let mut bug = std::pin::pin!(sqlite.write(|_tx| -> Result<(), StoreError> { panic!("bug in an operation") }));
    assert!(bug.as_mut().now_or_never().is_none());
    drop(held);
    assert!(create.await.is_err(), "its batch was rolled back");
    assert!(bug.await.is_err());
    assert!(woken.lock().unwrap().is_empty());

    // Committed: one wake-up per run made pending, on its queue.
    let created =
        store.run(CreateTask { definition: definition(second, "p/b", now), task_id: second }, now).await.unwrap();
    assert_eq!(created.events.len(), 2, "defined, pending");
    assert_eq!(*woken.lock().unwrap(), vec!["p/b".to_owned()]);
}

#[tokio::test]
async fn quiet_queues_are_forgotten_in_memory_once_many_were_used() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let crate::Store::Sqlite(sqlite) = &store else { unreachable!() };
    let t0 = Timestamp(1_767_225_600_000);
    let task_id = TaskId::parse("00000001QxCxxxxxxxxxxA").unwrap();
    let created = store.run(CreateTask { definition: definition(task_id, "p/busy", t0), task_id }, t0).await.unwrap();
    assert_eq!(created.events.len(), 2);
    let names: Vec<String> = (0..1100).map(|n| format!("p/q{n}")).collect();
    let used = sqlite.write(move |tx| names.iter().try_for_each(|name| tx.record_queue(name, t0))).await.unwrap();
    assert!(used.events.is_empty());
    let remembered = sqlite.write(|tx| Ok(tx.state.queues_remembered())).await.unwrap().value;
    assert_eq!(remembered, (1101, 1, 1101), "all recent: nothing is forgotten");

    // Once twice as many are remembered, the quiet ones go: what is left is what is
    // pending or recent.
    let later = Timestamp(t0.millis() + crate::ops::QUEUE_TOUCH_INTERVAL_MS + 1);
    let names: Vec<String> = (0..1200).map(|n| format!("p/later{n}")).collect();
    let used = sqlite.write(move |tx| names.iter().try_for_each(|name| tx.record_queue(name, later))).await.unwrap();
    assert!(used.events.is_empty());
    let remembered = sqlite.write(|tx| Ok(tx.state.queues_remembered())).await.unwrap().value;
    assert_eq!(remembered, (1200, 1, 1201), "the later ones; p/busy, pending, in the index and the commit view");

    // A forgotten queue works as before: its claim goes through the writer and records it.
    let claim = |queue: &str| crate::ClaimRequest {
        task_queue_id: queue.into(),
        worker_group: "g".into(),
        worker_id: "w".into(),
        dimensions: Dimensions::default(),
        version: None,
        count: 1,
    };
    assert!(store.run(ClaimWork { request: claim("p/q5") }, later).await.unwrap().value.is_empty());
    let recorded = store.read(|reads| reads.task_queue("p/q5")).await.unwrap().unwrap();
    assert_eq!(recorded.last_date_active, later);
    let claimed = store.run(ClaimWork { request: claim("p/busy") }, later).await.unwrap().value;
    assert_eq!(claimed.iter().map(|claim| claim.status.task_id).collect::<Vec<_>>(), vec![task_id]);
}

/// Holds the writer busy until the returned sender is dropped or sent to.
async fn hold_writer(store: &SqliteStore) -> std::sync::mpsc::Sender<()> {
    let sender = store.inner.jobs.lock().unwrap().clone().unwrap();
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (reply, _answer) = oneshot::channel::<Result<Committed<()>, StoreError>>();
    let (started, running) = oneshot::channel::<()>();
    let op = move |_: &mut Tx<'_>| {
        let _ = started.send(());
        let _ = held.recv();
        Ok(())
    };
    sender.send(Box::new(WriteJob { op, reply })).await.unwrap();
    // Running, its batch taken: what is sent from now on goes in the batches after it.
    running.await.unwrap();
    release
}

#[tokio::test]
async fn an_idle_claim_is_answered_without_the_writer_once_its_queue_is_recorded() {
    use futures_util::FutureExt;

    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let crate::Store::Sqlite(sqlite) = &store else { unreachable!() };
    let request = crate::ClaimRequest {
        task_queue_id: "p/idle".into(),
        worker_group: "g".into(),
        worker_id: "w".into(),
        dimensions: Dimensions::default(),
        version: None,
        count: 1,
    };
    let now = Timestamp(1_000_000);

    // Never recorded: the claim must go through the writer to record the queue.
    let held = hold_writer(sqlite).await;
    let mut first = std::pin::pin!(store.run(ClaimWork { request: request.clone() }, now));
    assert!(first.as_mut().now_or_never().is_none(), "waits for the writer");
    drop(held);
    assert!(first.await.unwrap().value.is_empty());

    // Recorded and nothing pending: answered while the writer is busy.
    let held = hold_writer(sqlite).await;
    let idle =
        store.run(ClaimWork { request: request.clone() }, now).now_or_never().expect("answered without the writer");
    assert!(idle.unwrap().value.is_empty());
    drop(held);

    // A run pending: the claim goes through the writer and takes it.
    let task_id = TaskId::parse("00000001QxCxxxxxxxxxxA").unwrap();
    let created = store.run(CreateTask { definition: definition(task_id, "p/idle", now), task_id }, now).await.unwrap();
    assert!(!created.events.is_empty());
    let held = hold_writer(sqlite).await;
    let mut busy = std::pin::pin!(store.run(ClaimWork { request }, now));
    assert!(busy.as_mut().now_or_never().is_none(), "a pending run is claimed by the writer");
    drop(held);
    let claims = busy.await.unwrap().value;
    assert_eq!(claims.iter().map(|claim| claim.status.task_id).collect::<Vec<_>>(), vec![task_id]);
}

#[tokio::test]
async fn a_panicking_operation_does_not_stop_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let res = store.write(|_tx| -> Result<(), StoreError> { panic!("bug in an operation") }).await;
    assert!(matches!(res, Err(StoreError::Unavailable(_))), "{res:?}");
    let later = store.write(|tx| tx.record_queue("p/after", Timestamp(1))).await;
    assert!(later.is_ok(), "the writer survived: {later:?}");
    assert!(queue_known(&store, "p/after").await);
}

#[tokio::test]
async fn a_refusal_that_wrote_rolls_its_batch_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let res = store
        .write(|tx| -> Result<(), StoreError> {
            tx.record_queue("p/half", Timestamp(1))?;
            Err(Rejection::invalid("test", "refused after writing").into())
        })
        .await;
    assert!(matches!(res, Err(StoreError::Rejected(_))), "{res:?}");
    assert!(!queue_known(&store, "p/half").await, "nothing of the refused operation was committed");
    let again = store.write(|tx| tx.record_queue("p/half", Timestamp(2))).await.unwrap();
    assert!(again.events.is_empty());
    assert!(queue_known(&store, "p/half").await, "the rolled-back record is written again, not skipped as recent");
}

const PARKED_AT: Timestamp = Timestamp(1_767_225_600_000);

fn parked_clock() -> Timestamp {
    PARKED_AT
}

fn parked_request(worker_id: &str) -> crate::ClaimRequest {
    crate::ClaimRequest {
        task_queue_id: "p/parked".into(),
        worker_group: "g".into(),
        worker_id: worker_id.into(),
        dimensions: Dimensions::default(),
        version: None,
        count: 1,
    }
}

#[tokio::test]
async fn a_parked_claim_is_given_the_run_a_batch_makes_pending_without_a_claim_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let woken = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&woken);
    assert!(store.wake_at_commit(Box::new(move |queue, _| seen.lock().unwrap().push(queue.to_owned()))));
    let sighting = shoal_engine::worker::Sighting { heartbeat: true, ..Default::default() };
    let earlier = PARKED_AT.plus_millis(-60_000);
    store
        .run(WorkerSeen { key: parked_request("w").worker_key(), sighting }, earlier)
        .await
        .map(|done| done.value)
        .unwrap();
    let mut parked = store.park_claim(&parked_request("w"), parked_clock).unwrap();
    let task_id = TaskId::parse("00000001QxCxxxxxxxxxxA").unwrap();
    let created = store
        .run(CreateTask { definition: definition(task_id, "p/parked", PARKED_AT), task_id }, PARKED_AT)
        .await
        .unwrap();
    assert_eq!(created.events.len(), 2, "defined and pending");
    // A guard, not a timing: without the hand-out nobody answers the parked call.
    let answer = tokio::time::timeout(std::time::Duration::from_secs(60), parked.answer()).await;
    let answer = answer.expect("the parked claim was never answered").unwrap();
    assert_eq!(answer.value.len(), 1);
    assert_eq!(answer.value[0].status.task_id, task_id);
    assert!(answer.events.iter().any(|event| matches!(event.event, shoal_engine::event::Event::Running { .. })));
    assert!(!parked.leave(), "taken by the writer: its answer was coming");
    // The claim went on the worker's record as it was, not on a new one.
    let key = parked_request("w").worker_key();
    let (record, running) = store.read(move |reads| reads.worker(&key)).await.unwrap().expect("recorded");
    assert_eq!(record.recent_tasks, vec![shoal_engine::worker::TaskRun { task_id, run_id: 0 }]);
    assert_eq!((record.first_seen, record.first_claim, record.heartbeats), (earlier, Some(PARKED_AT), true));
    assert_eq!(running, vec![task_id]);
    let again = store.run(ClaimWork { request: parked_request("other") }, PARKED_AT).await.unwrap();
    assert!(again.value.is_empty(), "the run went to the parked claim only");
    assert!(woken.lock().unwrap().is_empty(), "nobody is woken for a run claimed in the batch that made it pending");
    // With nobody parked, the next run wakes a waiting claim at its commit.
    let next = TaskId::parse("00000004QxCxxxxxxxxxxA").unwrap();
    let created = store
        .run(CreateTask { definition: definition(next, "p/parked", PARKED_AT), task_id: next }, PARKED_AT)
        .await
        .unwrap();
    assert_eq!(created.events.len(), 2, "defined and pending");
    assert_eq!(*woken.lock().unwrap(), vec!["p/parked".to_owned()]);
}

#[tokio::test]
async fn a_parked_claim_that_left_is_given_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let mut parked = store.park_claim(&parked_request("gone"), parked_clock).unwrap();
    assert!(parked.leave());
    let task_id = TaskId::parse("00000002QxCxxxxxxxxxxA").unwrap();
    let created = store
        .run(CreateTask { definition: definition(task_id, "p/parked", PARKED_AT), task_id }, PARKED_AT)
        .await
        .unwrap();
    assert_eq!(created.events.len(), 2, "defined and pending");
    let claimed = store.run(ClaimWork { request: parked_request("here") }, PARKED_AT).await.unwrap();
    assert_eq!(claimed.value.len(), 1, "the run stayed pending for the next claim");
}

#[tokio::test]
async fn a_parked_claim_of_a_worker_quarantined_meanwhile_is_answered_with_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let request = parked_request("held");
    let sighting = shoal_engine::worker::Sighting::default();
    store.run(WorkerSeen { key: request.worker_key(), sighting }, PARKED_AT).await.map(|done| done.value).unwrap();
    let mut parked = store.park_claim(&request, parked_clock).unwrap();
    let quarantine = crate::WorkerChange::Quarantine { until: PARKED_AT.plus_secs(3600), info: String::new() };
    store
        .run(ChangeWorker { key: request.worker_key(), change: quarantine, client_id: "admin".into() }, PARKED_AT)
        .await
        .map(|done| done.value)
        .unwrap();
    let task_id = TaskId::parse("00000003QxCxxxxxxxxxxA").unwrap();
    let created = store
        .run(CreateTask { definition: definition(task_id, "p/parked", PARKED_AT), task_id }, PARKED_AT)
        .await
        .unwrap();
    assert_eq!(created.events.len(), 2, "defined and pending");
    let answer = tokio::time::timeout(std::time::Duration::from_secs(60), parked.answer()).await;
    assert!(answer.expect("the parked claim was never answered").unwrap().value.is_empty());
    let claimed = store.run(ClaimWork { request: parked_request("free") }, PARKED_AT).await.unwrap();
    assert_eq!(claimed.value.len(), 1, "the run stayed pending for a worker that may claim");
}

#[tokio::test]
async fn a_group_made_by_its_namesake_has_no_row_until_it_outgrows_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::Sqlite(open(&dir));
    let crate::Store::Sqlite(sqlite) = &store else { unreachable!() };
    let t0 = Timestamp(1_767_225_600_000);
    let rows = || async {
        let query = |tx: &mut Tx<'_>| {
            Ok(tx.conn.query_row("SELECT count(*) FROM task_groups", [], |row| row.get::<_, i64>(0))?)
        };
        sqlite.write(query).await.unwrap().value
    };
    let [namesake, member, grower, late] =
        ["00000001QxCxxxxxxxxxxA", "00000002QxCxxxxxxxxxxA", "00000003QxCxxxxxxxxxxA", "00000004QxCxxxxxxxxxxA"]
            .map(|id| TaskId::parse(id).unwrap());
    let joining = |task_id: TaskId, group: TaskId, expires_after_secs: i64| {
        let mut definition = definition(task_id, "p/q", t0);
        definition.task_group_id = group;
        definition.expires = t0.plus_secs(expires_after_secs);
        definition
    };
    let _ = store.run(CreateTask { definition: definition(namesake, "p/q", t0), task_id: namesake }, t0).await.unwrap();
    let implied = store.read(move |reads| reads.task_group(namesake)).await.unwrap().expect("the group");
    assert_eq!(implied, shoal_engine::group::TaskGroup::first_of(&definition(namesake, "p/q", t0)));
    // A member expiring no later leaves it implied; sealing it writes its row.
    let _ = store.run(CreateTask { definition: joining(member, namesake, 3600), task_id: member }, t0).await.unwrap();
    assert_eq!(rows().await, 0, "implied by its namesake's row");
    let _ = store.run(SealGroup { task_group_id: namesake }, t0).await.unwrap();
    assert_eq!(rows().await, 1);
    let sealed = store.read(move |reads| reads.task_group(namesake)).await.unwrap().expect("the group");
    assert_eq!((sealed.expires, sealed.sealed), (implied.expires, Some(t0)));

    // A member expiring later writes it with the later expiry.
    let _ = store.run(CreateTask { definition: definition(grower, "p/q", t0), task_id: grower }, t0).await.unwrap();
    assert_eq!(rows().await, 1);
    let far = 400 * 24 * 3600;
    let _ = store.run(CreateTask { definition: joining(late, grower, far), task_id: late }, t0).await.unwrap();
    assert_eq!(rows().await, 2);
    let grown = store.read(move |reads| reads.task_group(grower)).await.unwrap().expect("the group");
    assert_eq!(grown.expires, shoal_engine::group::group_expiry(&joining(late, grower, far)));
}
