//! The backends' own forms of the dimension rule (SQLite's pending index, PostgreSQL's SQL)
//! against the engine's `Dimensions::matched_by`, on generated cases.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

use super::*;

/// A key's required values: each one value, or `|` alternatives of two.
fn required_values() -> impl Strategy<Value = Vec<String>> {
    let value = prop_oneof![
        prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned),
        (prop::sample::select(vec!["a", "b", "c"]), prop::sample::select(vec!["a", "b", "c"]))
            .prop_map(|(x, y)| format!("{x}|{y}")),
    ];
    prop::collection::vec(value, 1..3)
}

fn keys<V: Strategy>(values: V) -> impl Strategy<Value = BTreeMap<String, V::Value>> {
    prop::collection::btree_map(
        prop::sample::select(vec!["os".to_owned(), "gpu".to_owned(), "pool".to_owned()]),
        values,
        0..3,
    )
}

/// Dimensions as written in a definition or a claim.
type Raw = BTreeMap<String, Vec<String>>;

/// A case: the tasks' dimensions, and a worker's.
fn case() -> impl Strategy<Value = (Vec<Raw>, Raw)> {
    let worker_values = prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned), 1..3);
    (prop::collection::vec(keys(required_values()), 1..10), keys(worker_values))
}

/// In each case, a worker's claim takes exactly the tasks the engine's rule says it matches.
pub(crate) async fn claims_take_exactly_what_the_dimension_rule_matches(name: &str, backend: Backend) {
    let store = &backend.store;
    // A fixed seed: the same cases on every backend and every run.
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let mut n_task: u32 = 0;
    let mut n_matched: u32 = 0;
    for case_no in 0..24 {
        let (tasks, worker_raw) = case().new_tree(&mut runner).expect("a case").current();
        let worker_dimensions = Dimensions::parse("dimensions", worker_raw.clone()).expect("worker dimensions");
        let queue = format!("prov/case{case_no}");
        let mut expected = BTreeSet::new();
        for raw in &tasks {
            n_task += 1;
            let task_id = id(n_task);
            let patch = json!({"taskQueueId": queue, "dimensions": raw});
            create(store, task_id, patch, at(0)).await;
            let required = Dimensions::parse_required("dimensions", raw.clone()).expect("task dimensions");
            if required.matched_by(&worker_dimensions) {
                expected.insert(task_id);
            }
        }
        n_matched += expected.len() as u32;
        let request = ClaimRequest {
            task_queue_id: queue,
            worker_group: "g".into(),
            worker_id: format!("w{case_no}"),
            dimensions: worker_dimensions,
            version: None,
            count: 32,
        };
        let claimed: BTreeSet<TaskId> = claim_ids(store, request, at(1)).await.into_iter().collect();
        assert_eq!(claimed, expected, "{name}: case {case_no}: tasks {tasks:?}, worker {worker_raw:?}");
    }
    assert!(n_matched > 0 && n_matched < n_task, "{name}: the cases match some tasks, not all ({n_matched}/{n_task})");
}
