//! An idle worker's claims (run per backend by the suite's macro): they record the queue and
//! never hide work that appears later, however the backend answers them.

use serde_json::json;
use shoal_engine::command::TaskCommand;
use shoal_engine::status::TaskState;
use shoal_engine::task::Resolution;
use shoal_store::Store;
use shoal_store::operation::FireDue;

use super::{Backend, CLAIM_TIMEOUT, apply, at, claim_ids, create, id, state_of, worker};

async fn last_active(store: &Store, queue: &'static str) -> Option<i64> {
    let info = store.read(move |reads| reads.task_queue(queue)).await.unwrap();
    info.map(|info| info.last_date_active.millis())
}

pub(crate) async fn idle_claims_record_their_queue_and_miss_no_later_work(name: &str, backend: Backend) {
    let store = &backend.store;
    let idle = || {
        let mut request = worker(1);
        request.task_queue_id = "prov/idle".into();
        request
    };
    let on_idle = json!({"taskQueueId": "prov/idle", "retries": 1});
    assert!(claim_ids(store, idle(), at(0)).await.is_empty(), "{name}");
    assert_eq!(
        last_active(store, "prov/idle").await,
        Some(at(0).millis()),
        "{name}: the first claim records the queue"
    );
    assert!(claim_ids(store, idle(), at(1)).await.is_empty(), "{name}");
    assert_eq!(last_active(store, "prov/idle").await, Some(at(0).millis()), "{name}: recorded at most so often");

    // Work made pending after idle claims is found by the next claim, however it became pending.
    create(store, id(1), on_idle.clone(), at(2)).await;
    assert_eq!(claim_ids(store, idle(), at(2)).await, vec![id(1)], "{name}: created");
    assert!(claim_ids(store, idle(), at(3)).await.is_empty(), "{name}: claimed once");
    let expired = at(2 + CLAIM_TIMEOUT);
    assert_eq!(store.run(FireDue { limit: 100 }, expired).await.unwrap().value, 1, "{name}");
    assert_eq!(claim_ids(store, idle(), expired).await, vec![id(1)], "{name}: retried after its claim expired");
    let done = TaskCommand::Resolve { run_id: 1, resolution: Resolution::Completed, stats: None };
    apply(store, id(1), done, expired).await;
    assert!(claim_ids(store, idle(), expired).await.is_empty(), "{name}");
    apply(store, id(1), TaskCommand::Rerun, expired).await;
    assert_eq!(claim_ids(store, idle(), expired).await, vec![id(1)], "{name}: run again");

    // An idle claim long after the last record records the queue again.
    let later = at(2 + 3 * CLAIM_TIMEOUT);
    assert!(claim_ids(store, idle(), later).await.is_empty(), "{name}");
    assert_eq!(last_active(store, "prov/idle").await, Some(later.millis()), "{name}: recorded again");

    // A run pending when the server stops is found by the first claim after it starts.
    create(store, id(2), on_idle, later).await;
    store.close().await;
    let reopened = backend.reopen();
    assert_eq!(claim_ids(&reopened, idle(), later).await, vec![id(2)], "{name}: after a restart");
    assert!(claim_ids(&reopened, idle(), later).await.is_empty(), "{name}");
    assert_eq!(state_of(&reopened, id(2)).await, TaskState::Running, "{name}");
    reopened.close().await;
}
