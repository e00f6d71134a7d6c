//! The store conformance suite: the same scenarios against every backend, each a test of its
//! own per backend (`sqlite::…`, `postgres::…`).
//!
//! Time is an argument of every store call, so claim expiry and deadlines are tested by
//! passing a later `now`, never by sleeping.

#[path = "conformance/artifacts.rs"]
mod artifacts;
#[path = "conformance/auth.rs"]
mod auth;
#[path = "conformance/expire.rs"]
mod expire;
#[path = "conformance/fleet.rs"]
mod fleet;
#[path = "conformance/graphs.rs"]
mod graphs;
#[path = "conformance/groups.rs"]
mod groups;
#[path = "conformance/idle.rs"]
mod idle;
#[path = "conformance/matching.rs"]
mod matching;
#[path = "conformance/outbox.rs"]
mod outbox;
#[path = "conformance/overview.rs"]
mod overview;
#[path = "conformance/scheduling.rs"]
mod scheduling;
#[path = "conformance/services.rs"]
mod services;
mod support;
#[path = "conformance/workers.rs"]
mod workers;

use artifacts::*;
use auth::*;
use expire::*;
use fleet::*;
use graphs::*;
use groups::*;
use idle::*;
use matching::*;
use outbox::*;
use overview::*;
use scheduling::*;
use services::*;
use shoal_store::operation::{Apply, CancelGroup, ClaimTask, ClaimWork, CreateTask, FireDue, ForgetTasks, SealGroup};
use workers::*;

use serde_json::json;
use shoal_engine::command::TaskCommand;
use shoal_engine::definition::{TaskDefinition, TaskDefinitionInput};
use shoal_engine::dimensions::Dimensions;
use shoal_engine::event::Event;
use shoal_engine::priority::Priority;
use shoal_engine::status::{ReasonCreated, ReasonResolved, TaskState, TaskStatus};
use shoal_engine::task::Resolution;
use shoal_engine::{Rejection, TaskId, Timestamp};
use shoal_store::outbox::{Next, OutboxEntry};
use shoal_store::{ClaimRequest, PgConfig, PgStore, SqliteConfig, SqliteStore, Store, StoreError, StoreSettings};

const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const CLAIM_TIMEOUT: i64 = 60;

/// One backend under test; keeps its temporary directory alive.
struct Backend {
    store: Store,
    dir: tempfile::TempDir,
    /// The PostgreSQL database, for the PostgreSQL backend.
    url: Option<String>,
}

impl Backend {
    /// The same storage opened again, as after a restart.
    fn reopen(&self) -> Store {
        match &self.url {
            None => sqlite_in(self.dir.path()),
            Some(url) => postgres_at(url),
        }
    }
}

/// Seconds a completion stands for new idempotent tasks here: within the definitions' hour.
const DEDUP_WINDOW: i64 = 600;

/// The settings every backend runs the suite with.
fn settings() -> StoreSettings {
    StoreSettings { claim_timeout_secs: CLAIM_TIMEOUT, dedup_window_secs: DEDUP_WINDOW, ..StoreSettings::default() }
}

fn sqlite_in(dir: &std::path::Path) -> Store {
    let config = SqliteConfig { path: dir.join("shoal.db"), settings: settings() };
    Store::Sqlite(SqliteStore::open(&config).expect("open sqlite"))
}

fn postgres_at(url: &str) -> Store {
    let mut config = PgConfig::new(url);
    config.settings = settings();
    // The blocking client must not start inside the test's runtime.
    let store = std::thread::spawn(move || PgStore::open(&config)).join().expect("no panic").expect("open postgres");
    Store::Postgres(store)
}

/// Embedded SQLite in a temporary directory.
fn sqlite_backend() -> Backend {
    let dir = tempfile::tempdir().expect("tempdir");
    Backend { store: sqlite_in(dir.path()), dir, url: None }
}

/// PostgreSQL: a fresh database on the private cluster of this test binary (started on first use).
fn postgres_backend() -> Backend {
    let url = support::postgres::fresh_database();
    Backend { store: postgres_at(&url), dir: tempfile::tempdir().expect("tempdir"), url: Some(url) }
}

/// Each scenario as a test of its own per backend (`sqlite::<scenario>`, `postgres::<scenario>`),
/// so that one backend's failure hides nothing of the other's and the SQLite half needs no
/// PostgreSQL.
macro_rules! conformance {
    (current_thread: $($plain:ident),* ; multi_thread: $($multi:ident),* $(,)?) => {
        conformance!(@backend sqlite, sqlite_backend; $($plain),* ; $($multi),*);
        conformance!(@backend postgres, postgres_backend; $($plain),* ; $($multi),*);
    };
    (@backend $backend:ident, $open:ident; $($plain:ident),* ; $($multi:ident),*) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $plain() {
                    super::$plain(stringify!($backend), super::$open()).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $multi() {
                    super::$multi(stringify!($backend), super::$open()).await;
                }
            )*
        }
    };
}

conformance! {
    current_thread: create_claim_complete, create_is_idempotent_and_conflicts_on_difference, failed_create_leaves_nothing_behind, dependencies_release_in_the_resolving_step, claims_go_by_priority_then_age_and_match_dimensions, priority_change_reorders_pending_work, claim_expiry_retries_then_gives_up, deadline_resolves_every_unresolved_state, a_groups_later_deadline_fires_after_its_earlier_task_resolved, a_task_run_again_after_its_groups_deadlines_passed_still_meets_its_own, groups_seal_and_cancel, a_groups_listing_pages_in_task_id_order_whatever_each_tasks_state, a_group_named_after_one_of_its_tasks_holds_it_like_any_other, restart_rebuilds_the_pending_index, concurrent_claims_hand_out_each_run_once, racing_identical_creates_all_succeed_and_define_the_task_once, a_failed_operation_takes_only_its_batch_down, artifacts_are_recorded_uploaded_listed_and_expired, every_transition_leaves_its_messages_in_the_outbox_in_order, unpublished_messages_survive_a_restart_and_published_ones_are_deleted, a_group_is_resolved_each_time_its_last_task_resolves, a_refused_graph_leaves_nothing_behind, matching_work_behind_many_tasks_for_other_workers_is_claimed, a_group_resolves_only_when_nothing_in_it_is_left_unresolved, a_graph_reruns_a_failure_blocks_then_finishes_once_run_again, concurrent_completions_of_a_graphs_tasks_are_each_counted_once, clients_and_roles_are_kept_changed_and_deleted, expired_tasks_are_forgotten_with_what_hangs_on_them, workers_are_recorded_with_their_claims_and_history, listing_workers_pages_and_filters, a_silent_worker_goes_missing_and_its_runs_are_retried_at_once, a_workers_history_is_bounded_and_it_expires, a_workers_runs_are_listed_newest_first_and_trimmed_past_the_retention, slices_skip_without_capacity_and_fall_back_when_they_expire, secrets_are_kept_apart_and_handed_to_the_claim, an_idempotent_task_is_deduped_from_a_recent_completion, swarmings_own_scenario, the_overview_lists_groups_graphs_and_failures_newest_first, a_listed_group_is_named_and_says_how_it_went, idle_claims_record_their_queue_and_miss_no_later_work, claims_take_exactly_what_the_dimension_rule_matches, a_run_keeps_the_dimensions_and_version_it_was_claimed_with, a_task_keeps_its_creator_and_is_listed_by_it, what_waits_or_runs_now_is_listed_fleet_wide_and_by_several_tags, a_fallback_slice_hands_its_worker_its_own_payload, a_change_to_a_worker_reaches_its_records_in_every_queue_it_serves, pending_runs_are_counted_by_dimension_set_with_their_oldest, a_completed_task_is_indexed_under_its_routes_by_rank, secrets_are_set_listed_removed_and_expire, a_hook_fires_once_per_due_time_and_keeps_its_fires, a_builds_tasks_are_created_with_its_record_or_not_at_all;
    multi_thread: writes_arriving_together_are_each_judged_alone, completions_arriving_together_are_each_indexed,
}

fn at(secs: i64) -> Timestamp {
    Timestamp(T0 + secs * 1000)
}

fn id(n: u32) -> TaskId {
    TaskId::parse(&format!("{n:08}QxCxxxxxxxxxxA")).expect("test id")
}

fn definition(task_id: TaskId, patch: serde_json::Value) -> TaskDefinition {
    let mut base = json!({
        "taskQueueId": "prov/wt",
        "created": "2026-01-01T00:00:00.000Z",
        "deadline": "2026-01-01T01:00:00.000Z",
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    });
    for (key, value) in patch.as_object().expect("patch object") {
        base[key] = value.clone();
    }
    let input: TaskDefinitionInput = serde_json::from_value(base).expect("input");
    input.validate(task_id, at(0)).expect("valid definition")
}

fn worker(n: usize) -> ClaimRequest {
    ClaimRequest {
        task_queue_id: "prov/wt".into(),
        worker_group: "g".into(),
        worker_id: format!("w{n}"),
        dimensions: Dimensions::default(),
        version: None,
        count: n.max(1),
    }
}

async fn create(store: &Store, task_id: TaskId, patch: serde_json::Value, now: Timestamp) -> TaskStatus {
    store.run(CreateTask { definition: definition(task_id, patch), task_id }, now).await.unwrap().value
}

async fn apply(store: &Store, task_id: TaskId, command: TaskCommand, now: Timestamp) -> TaskStatus {
    store.run(Apply { task_id, command }, now).await.unwrap().value
}

async fn state_of(store: &Store, task_id: TaskId) -> TaskState {
    store.read(move |reads| reads.task(task_id)).await.unwrap().expect("task exists").status.state
}

async fn claim_ids(store: &Store, request: ClaimRequest, now: Timestamp) -> Vec<TaskId> {
    let claims = store.run(ClaimWork { request }, now).await.unwrap().value;
    claims.into_iter().map(|claim| claim.status.task_id).collect()
}

async fn create_claim_complete(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    let created = store.run(CreateTask { definition: definition(task_id, json!({})), task_id }, at(0)).await.unwrap();
    assert_eq!(created.value.state, TaskState::Pending, "{name}");
    let kinds: Vec<Event> = created.events.iter().map(|e| e.event).collect();
    assert_eq!(kinds, vec![Event::Defined, Event::Pending { run_id: 0 }], "{name}");

    let claims = store.run(ClaimWork { request: worker(1) }, at(1)).await.unwrap().value;
    assert_eq!(claims.len(), 1, "{name}");
    assert_eq!(claims[0].taken_until, at(1 + CLAIM_TIMEOUT), "{name}");
    let task: serde_json::Value = serde_json::from_str(claims[0].task.get()).unwrap();
    assert_eq!(task["taskQueueId"], "prov/wt", "{name}: the claim carries the definition");
    assert!(store.run(ClaimWork { request: worker(1) }, at(1)).await.unwrap().value.is_empty(), "{name}: claimed once");

    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    let status = store.run(Apply { task_id, command: done }, at(2)).await.unwrap().value;
    assert_eq!(status.state, TaskState::Completed, "{name}");
    let counts = store.read(|reads| reads.queue_counts("prov/wt")).await.unwrap();
    assert_eq!((counts.pending_tasks, counts.claimed_tasks), (0, 0), "{name}");
}

async fn create_is_idempotent_and_conflicts_on_difference(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    create(store, task_id, json!({}), at(0)).await;
    let again = store.run(CreateTask { definition: definition(task_id, json!({})), task_id }, at(1)).await.unwrap();
    assert!(again.events.is_empty(), "{name}: a repeat defines nothing new");
    let different =
        store.run(CreateTask { definition: definition(task_id, json!({"retries": 1})), task_id }, at(1)).await;
    assert!(matches!(different, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: {different:?}");
}

async fn failed_create_leaves_nothing_behind(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    let bad = definition(task_id, json!({"dependencies": [id(99).to_string()]}));
    let res = store.run(CreateTask { definition: bad, task_id }, at(0)).await;
    assert!(
        matches!(res, Err(StoreError::Rejected(Rejection::Input(ref m))) if m.contains(id(99).as_str())),
        "{name}: {res:?}"
    );
    let found = store
        .read(move |reads| Ok((reads.task(task_id)?.is_some(), reads.task_group(task_id)?.is_some())))
        .await
        .unwrap();
    assert_eq!(found, (false, false), "{name}: neither task nor group was written");
}

async fn dependencies_release_in_the_resolving_step(name: &str, backend: Backend) {
    let store = &backend.store;
    let (build, test, report) = (id(1), id(2), id(3));
    create(store, build, json!({}), at(0)).await;
    let on_build = json!({"dependencies": [build.to_string()]});
    create(store, test, on_build.clone(), at(0)).await;
    let resolved_only = json!({"dependencies": [build.to_string()], "requires": "all-resolved"});
    create(store, report, resolved_only, at(0)).await;
    assert_eq!(state_of(store, test).await, TaskState::Unscheduled, "{name}");

    assert_eq!(claim_ids(store, worker(5), at(1)).await, vec![build], "{name}");
    let failed = store
        .run(
            Apply {
                task_id: build,
                command: TaskCommand::Resolve { run_id: 0, resolution: Resolution::Failed, stats: None },
            },
            at(2),
        )
        .await
        .unwrap();
    let pending: Vec<TaskId> =
        failed.events.iter().filter(|e| matches!(e.event, Event::Pending { .. })).map(|e| e.task_id).collect();
    assert_eq!(pending, vec![report], "{name}: only the all-resolved dependent is released");
    assert_eq!(state_of(store, test).await, TaskState::Unscheduled, "{name}");

    // A rerun that completes releases the all-completed dependent.
    apply(store, build, TaskCommand::Rerun, at(3)).await;
    let claim = store
        .run(ClaimTask { task_id: build, run_id: 1, worker_group: "g".into(), worker_id: "w1".into() }, at(4))
        .await
        .unwrap()
        .value;
    let run_id = claim.run_id;
    apply(store, build, TaskCommand::Resolve { run_id, resolution: Resolution::Completed, stats: None }, at(5)).await;
    assert_eq!(state_of(store, test).await, TaskState::Pending, "{name}");

    let dependents = store.read(move |reads| reads.list_dependents(build, None, 10)).await.unwrap();
    let ids: Vec<TaskId> = dependents.items.iter().map(|rec| rec.status.task_id).collect();
    assert_eq!(ids, vec![test, report], "{name}");
}

async fn claims_go_by_priority_then_age_and_match_dimensions(name: &str, backend: Backend) {
    let store = &backend.store;
    let specs = [
        (id(1), json!({"priority": "low"})),
        (id(2), json!({"priority": "high"})),
        (id(3), json!({"priority": 10})),
        (id(4), json!({"priority": "high"})),
        (id(5), json!({"priority": "highest", "dimensions": {"gpu": ["yes"]}})),
    ];
    for (offset, (task_id, patch)) in specs.into_iter().enumerate() {
        create(store, task_id, patch, at(offset as i64)).await;
    }
    let order = claim_ids(store, worker(10), at(10)).await;
    assert_eq!(order, vec![id(3), id(2), id(4), id(1)], "{name}: the gpu task is not for a plain worker");
    let mut gpu_worker = worker(1);
    gpu_worker.dimensions =
        Dimensions::parse("dimensions", [("gpu".to_owned(), vec!["yes".to_owned()])].into()).unwrap();
    assert_eq!(claim_ids(store, gpu_worker, at(11)).await, vec![id(5)], "{name}");
}

async fn matching_work_behind_many_tasks_for_other_workers_is_claimed(name: &str, backend: Backend) {
    let dims = |pairs: &[(&str, &[&str])]| {
        let raw = pairs.iter().map(|(k, vs)| ((*k).to_owned(), vs.iter().map(|v| (*v).to_owned()).collect()));
        Dimensions::parse("dimensions", raw.collect()).unwrap()
    };
    let store = &backend.store;
    // Ahead in line: tasks this worker cannot run (a key it lacks, a value it lacks).
    for n in 1..=40 {
        let patch =
            if n % 2 == 0 { json!({"dimensions": {"gpu": ["yes"]}}) } else { json!({"dimensions": {"os": ["mac"]}}) };
        create(store, id(n), patch, at(0)).await;
    }
    create(store, id(41), json!({"dimensions": {"os": ["linux|mac"]}}), at(1)).await;
    create(store, id(42), json!({}), at(2)).await;
    create(store, id(43), json!({"dimensions": {"os": ["linux", "ubuntu"]}}), at(2)).await;
    let mut linux = worker(3);
    linux.dimensions = dims(&[("os", &["linux"]), ("cpu", &["x86"])]);
    assert_eq!(claim_ids(store, linux, at(3)).await, vec![id(41), id(42)], "{name}: `|` is OR, a key repeated AND");
    let mut ubuntu = worker(3);
    ubuntu.dimensions = dims(&[("os", &["linux", "ubuntu"])]);
    assert_eq!(claim_ids(store, ubuntu, at(3)).await, vec![id(43)], "{name}");
    let mut mac_gpu = worker(40);
    mac_gpu.dimensions = dims(&[("os", &["mac"]), ("gpu", &["yes", "no"])]);
    assert_eq!(claim_ids(store, mac_gpu, at(4)).await.len(), 40, "{name}: every key matched by one value");
}

async fn priority_change_reorders_pending_work(name: &str, backend: Backend) {
    let store = &backend.store;
    for n in 1..=3 {
        create(store, id(n), json!({}), at(n.into())).await;
    }
    apply(store, id(3), TaskCommand::ChangePriority(Priority::parse("priority", &json!("high")).unwrap()), at(4)).await;
    assert_eq!(claim_ids(store, worker(3), at(5)).await, vec![id(3), id(1), id(2)], "{name}");
    let task = store.read(|reads| reads.task(id(3))).await.unwrap().unwrap();
    let definition: serde_json::Value = serde_json::from_str(task.task.get()).unwrap();
    assert_eq!(definition["priority"], "high", "{name}: task() shows the new priority");
}

async fn claim_expiry_retries_then_gives_up(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    create(store, task_id, json!({"retries": 1}), at(0)).await;
    claim_ids(store, worker(1), at(0)).await;
    assert_eq!(store.run(FireDue { limit: 100 }, at(CLAIM_TIMEOUT - 1)).await.unwrap().value, 0, "{name}: not yet due");
    apply(store, task_id, TaskCommand::Reclaim { run_id: 0 }, at(30)).await;
    assert_eq!(store.run(FireDue { limit: 100 }, at(CLAIM_TIMEOUT + 1)).await.unwrap().value, 0, "{name}: reclaimed");
    let fired = store.run(FireDue { limit: 100 }, at(30 + CLAIM_TIMEOUT)).await.unwrap();
    assert_eq!(fired.value, 1, "{name}");
    let status = store.read(move |reads| reads.task(task_id)).await.unwrap().unwrap().status;
    assert_eq!(status.runs[0].reason_resolved, Some(ReasonResolved::ClaimExpired), "{name}");
    assert_eq!(status.runs[1].reason_created, ReasonCreated::Retry, "{name}");
    assert_eq!(status.retries_left, 0, "{name}");

    assert_eq!(claim_ids(store, worker(1), at(100)).await, vec![task_id], "{name}: the retry is claimable");
    assert_eq!(store.run(FireDue { limit: 100 }, at(100 + CLAIM_TIMEOUT)).await.unwrap().value, 1, "{name}");
    assert_eq!(state_of(store, task_id).await, TaskState::Exception, "{name}: no retries left");
}

async fn restart_rebuilds_the_pending_index(name: &str, backend: Backend) {
    for n in 1..=5 {
        create(&backend.store, id(n), json!({}), at(n.into())).await;
    }
    claim_ids(&backend.store, worker(2), at(10)).await;
    backend.store.close().await;
    let reopened = backend.reopen();
    assert_eq!(claim_ids(&reopened, worker(10), at(11)).await, vec![id(3), id(4), id(5)], "{name}");
    let counts = reopened.read(|reads| reads.queue_counts("prov/wt")).await.unwrap();
    assert_eq!((counts.pending_tasks, counts.claimed_tasks), (0, 5), "{name}");
    reopened.close().await;
}

async fn concurrent_claims_hand_out_each_run_once(name: &str, backend: Backend) {
    let store = backend.store.clone();
    let n_tasks = 300;
    for n in 0..n_tasks {
        create(&store, id(n), json!({}), at(0)).await;
    }
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..12 {
        let store = store.clone();
        workers.spawn(async move {
            let mut mine = Vec::new();
            loop {
                let mut request = worker(3);
                request.worker_id = format!("w{w}");
                let got = claim_ids(&store, request, at(1)).await;
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got);
            }
        });
    }
    let mut all = Vec::new();
    while let Some(mine) = workers.join_next().await {
        all.extend(mine.unwrap());
    }
    all.sort();
    let n_claims = all.len();
    all.dedup();
    assert_eq!((n_claims, all.len()), (n_tasks as usize, n_tasks as usize), "{name}");
}

async fn racing_identical_creates_all_succeed_and_define_the_task_once(name: &str, backend: Backend) {
    let store = backend.store.clone();
    for round in 0..5 {
        // Each round a fresh task, created by 8 callers at once (as retries racing on
        // several servers would): one defines it, the others find it.
        let task_id = id(100 + round);
        let mut creators = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let store = store.clone();
            creators.spawn(async move {
                store.run(CreateTask { definition: definition(task_id, json!({})), task_id }, at(0)).await
            });
        }
        let mut n_defined = 0;
        while let Some(created) = creators.join_next().await {
            let created = created.unwrap().unwrap_or_else(|err| panic!("{name}: a racing create failed: {err}"));
            assert_eq!(created.value.state, TaskState::Pending, "{name}");
            n_defined += created.events.iter().filter(|event| event.event == Event::Defined).count();
        }
        assert_eq!(n_defined, 1, "{name}: defined exactly once");
    }
}

async fn a_failed_operation_takes_only_its_batch_down(name: &str, backend: Backend) {
    let store = &backend.store;
    create(store, id(1), json!({}), at(0)).await;
    // An unknown run is refused before anything is written, and the store goes on.
    let refused = store
        .run(
            Apply {
                task_id: id(1),
                command: TaskCommand::Resolve { run_id: 7, resolution: Resolution::Completed, stats: None },
            },
            at(1),
        )
        .await;
    assert!(matches!(refused, Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}: {refused:?}");
    assert_eq!(claim_ids(store, worker(1), at(2)).await, vec![id(1)], "{name}: the store still works");
}
