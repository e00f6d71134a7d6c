//! The fleet as Swarming runs it: what a run keeps of the worker that ran it.

use super::*;

/// A claim by a worker with these dimensions and version.
fn worker_having(dimensions: serde_json::Value, version: Option<&str>) -> ClaimRequest {
    let dimensions = Dimensions::parse("dimensions", serde_json::from_value(dimensions).expect("map")).expect("valid");
    ClaimRequest { dimensions, version: version.map(str::to_owned), ..worker(1) }
}

pub(crate) async fn a_run_keeps_the_dimensions_and_version_it_was_claimed_with(name: &str, backend: Backend) {
    let store = &backend.store;
    create(store, id(1), json!({"dimensions": {"os": ["linux"]}}), at(0)).await;
    let request = worker_having(json!({"os": ["linux"], "cpu": ["x86-64", "avx2"]}), Some("1.4.0"));
    let claims = store.claim_work(request, at(1)).await.unwrap().value;
    let run = &claims[0].status.runs[0];
    let dimensions = serde_json::to_value(&run.worker_dimensions).unwrap();
    assert_eq!(dimensions, json!({"cpu": ["avx2", "x86-64"], "os": ["linux"]}), "{name}: as claimed");
    assert_eq!(run.worker_version.as_deref(), Some("1.4.0"), "{name}");

    // The record outlives the worker's later changes and a restart.
    let later = worker_having(json!({"os": ["linux"], "cpu": ["arm64"]}), Some("2.0.0"));
    assert!(store.claim_work(later, at(2)).await.unwrap().value.is_empty(), "{name}: nothing left");
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
    let claim = store.claim_task(id(1), 1, "g".into(), "w2".into(), at(4)).await.unwrap().value;
    let retried = &claim.status.runs[1];
    assert_eq!((retried.worker_dimensions.as_ref(), retried.worker_version.as_deref()), (None, None), "{name}");
}
