//! A worker's claims on PostgreSQL: appended apart from its record without reading or
//! locking it, shown folded into it, and folded in for good when the record is next written.

use super::*;
use shoal_store::operation::{ClaimWork, WorkerSeen};

/// Rows of `table` of the database.
async fn rows_in(url: &str, table: &str) -> i64 {
    column(url, &format!("SELECT count(*) FROM {table}")).await[0]
}

/// How many recent tasks the stored record itself holds.
async fn stored_recent_tasks(url: &str) -> i64 {
    column(url, "SELECT jsonb_array_length(record::jsonb -> 'recentTasks')::int8 FROM workers").await[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_claims_are_appended_then_folded_into_its_record() {
    let url = fresh_database();
    let store = open_store(&url);
    let at = Timestamp(1_767_225_600_000);
    let key = claim_request(1).worker_key();
    store.run(WorkerSeen { key: key.clone(), sighting: Sighting::default() }, at).await.map(|done| done.value).unwrap();
    for n in 0..5 {
        create(&store, n).await;
        assert_eq!(store.run(ClaimWork { request: claim_request(1) }, at).await.unwrap().value.len(), 1);
    }
    assert_eq!(rows_in(&url, "worker_claims").await, 5, "each claim appended");
    assert_eq!(stored_recent_tasks(&url).await, 0, "the record itself not rewritten");
    let shown = |store: &Store, key: &shoal_engine::worker::WorkerKey| {
        let key = key.clone();
        let store = store.clone();
        async move { store.read(move |reads| reads.worker(&key)).await.unwrap().expect("recorded").0 }
    };
    let record = shown(&store, &key).await;
    assert_eq!(record.recent_tasks.len(), 5, "shown with its claims");
    assert_eq!(record.first_claim, Some(at));
    store.run(WorkerSeen { key: key.clone(), sighting: Sighting::default() }, at).await.map(|done| done.value).unwrap();
    assert_eq!(rows_in(&url, "worker_claims").await, 0, "folded in by the next write of the record");
    assert_eq!(stored_recent_tasks(&url).await, 5);
    assert_eq!(shown(&store, &key).await.recent_tasks, record.recent_tasks, "shown the same");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_neither_waits_for_its_workers_record_nor_needs_one() {
    let url = fresh_database();
    let store = open_store(&url);
    let at = Timestamp(1_767_225_600_000);
    let key = claim_request(1).worker_key();
    store.run(WorkerSeen { key: key.clone(), sighting: Sighting::default() }, at).await.map(|done| done.value).unwrap();
    create(&store, 1).await;
    // Another transaction changing the worker's record (an operator's quarantine, say).
    let held = hold_lock(&url, "SELECT 1 FROM workers FOR UPDATE").await;
    let claim = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        store.run(ClaimWork { request: claim_request(1) }, at),
    );
    assert_eq!(claim.await.expect("the claim did not wait").unwrap().value.len(), 1);
    held.send(()).unwrap();
    // A worker never seen before is recorded by its first claim, as on SQLite.
    create(&store, 2).await;
    let mut request = claim_request(1);
    request.worker_id = "new".into();
    let new = request.worker_key();
    assert_eq!(store.run(ClaimWork { request }, at).await.unwrap().value.len(), 1);
    let (record, _) = store.read(move |reads| reads.worker(&new)).await.unwrap().expect("recorded");
    assert_eq!((record.first_seen, record.recent_tasks.len()), (at, 1));
}
