//! The store conformance suite: the same scenarios against every backend, each a test of its
//! own per backend (`sqlite::…`, `postgres::…`).
//!
//! Time is an argument of every store call, so claim expiry and deadlines are tested by
//! passing a later `now`, never by sleeping.

#[path = "conformance/idle.rs"]
mod idle;
#[path = "conformance/matching.rs"]
mod matching;
#[path = "conformance/overview.rs"]
mod overview;
#[path = "conformance/scheduling.rs"]
mod scheduling;
mod support;
#[path = "conformance/workers.rs"]
mod workers;

use idle::*;
use matching::*;
use overview::*;
use scheduling::*;
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
    current_thread: create_claim_complete, create_is_idempotent_and_conflicts_on_difference, failed_create_leaves_nothing_behind, dependencies_release_in_the_resolving_step, claims_go_by_priority_then_age_and_match_dimensions, priority_change_reorders_pending_work, claim_expiry_retries_then_gives_up, deadline_resolves_every_unresolved_state, a_groups_later_deadline_fires_after_its_earlier_task_resolved, a_task_run_again_after_its_groups_deadlines_passed_still_meets_its_own, groups_seal_and_cancel, a_groups_listing_pages_in_task_id_order_whatever_each_tasks_state, a_group_named_after_one_of_its_tasks_holds_it_like_any_other, restart_rebuilds_the_pending_index, concurrent_claims_hand_out_each_run_once, racing_identical_creates_all_succeed_and_define_the_task_once, a_failed_operation_takes_only_its_batch_down, artifacts_are_recorded_uploaded_listed_and_expired, every_transition_leaves_its_messages_in_the_outbox_in_order, unpublished_messages_survive_a_restart_and_published_ones_are_deleted, a_group_is_resolved_each_time_its_last_task_resolves, a_refused_graph_leaves_nothing_behind, matching_work_behind_many_tasks_for_other_workers_is_claimed, a_group_resolves_only_when_nothing_in_it_is_left_unresolved, a_graph_reruns_a_failure_blocks_then_finishes_once_run_again, concurrent_completions_of_a_graphs_tasks_are_each_counted_once, clients_and_roles_are_kept_changed_and_deleted, expired_tasks_are_forgotten_with_what_hangs_on_them, workers_are_recorded_with_their_claims_and_history, listing_workers_pages_and_filters, a_silent_worker_goes_missing_and_its_runs_are_retried_at_once, a_workers_history_is_bounded_and_it_expires, slices_skip_without_capacity_and_fall_back_when_they_expire, secrets_are_kept_apart_and_handed_to_the_claim, an_idempotent_task_is_deduped_from_a_recent_completion, swarmings_own_scenario, the_overview_lists_groups_graphs_and_failures_newest_first, idle_claims_record_their_queue_and_miss_no_later_work, claims_take_exactly_what_the_dimension_rule_matches;
    multi_thread: writes_arriving_together_are_each_judged_alone,
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
        count: n.max(1),
    }
}

async fn create(store: &Store, task_id: TaskId, patch: serde_json::Value, now: Timestamp) -> TaskStatus {
    store.create_task(definition(task_id, patch), task_id, now).await.unwrap().value
}

async fn apply(store: &Store, task_id: TaskId, command: TaskCommand, now: Timestamp) -> TaskStatus {
    store.apply(task_id, command, now).await.unwrap().value
}

async fn state_of(store: &Store, task_id: TaskId) -> TaskState {
    store.read(move |reads| reads.task(task_id)).await.unwrap().expect("task exists").status.state
}

async fn claim_ids(store: &Store, request: ClaimRequest, now: Timestamp) -> Vec<TaskId> {
    let claims = store.claim_work(request, now).await.unwrap().value;
    claims.into_iter().map(|claim| claim.status.task_id).collect()
}

async fn create_claim_complete(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    let created = store.create_task(definition(task_id, json!({})), task_id, at(0)).await.unwrap();
    assert_eq!(created.value.state, TaskState::Pending, "{name}");
    let kinds: Vec<Event> = created.events.iter().map(|e| e.event).collect();
    assert_eq!(kinds, vec![Event::Defined, Event::Pending { run_id: 0 }], "{name}");

    let claims = store.claim_work(worker(1), at(1)).await.unwrap().value;
    assert_eq!(claims.len(), 1, "{name}");
    assert_eq!(claims[0].taken_until, at(1 + CLAIM_TIMEOUT), "{name}");
    let task: serde_json::Value = serde_json::from_str(claims[0].task.get()).unwrap();
    assert_eq!(task["taskQueueId"], "prov/wt", "{name}: the claim carries the definition");
    assert!(store.claim_work(worker(1), at(1)).await.unwrap().value.is_empty(), "{name}: claimed once");

    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    let status = store.apply(task_id, done, at(2)).await.unwrap().value;
    assert_eq!(status.state, TaskState::Completed, "{name}");
    let counts = store.read(|reads| reads.queue_counts("prov/wt")).await.unwrap();
    assert_eq!((counts.pending_tasks, counts.claimed_tasks), (0, 0), "{name}");
}

async fn create_is_idempotent_and_conflicts_on_difference(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    create(store, task_id, json!({}), at(0)).await;
    let again = store.create_task(definition(task_id, json!({})), task_id, at(1)).await.unwrap();
    assert!(again.events.is_empty(), "{name}: a repeat defines nothing new");
    let different = store.create_task(definition(task_id, json!({"retries": 1})), task_id, at(1)).await;
    assert!(matches!(different, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: {different:?}");
}

async fn failed_create_leaves_nothing_behind(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    let bad = definition(task_id, json!({"dependencies": [id(99).to_string()]}));
    let res = store.create_task(bad, task_id, at(0)).await;
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
        .apply(build, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Failed, stats: None }, at(2))
        .await
        .unwrap();
    let pending: Vec<TaskId> =
        failed.events.iter().filter(|e| matches!(e.event, Event::Pending { .. })).map(|e| e.task_id).collect();
    assert_eq!(pending, vec![report], "{name}: only the all-resolved dependent is released");
    assert_eq!(state_of(store, test).await, TaskState::Unscheduled, "{name}");

    // A rerun that completes releases the all-completed dependent.
    apply(store, build, TaskCommand::Rerun, at(3)).await;
    let claim = store.claim_task(build, 1, "g".into(), "w1".into(), at(4)).await.unwrap().value;
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
    assert_eq!(store.fire_due(at(CLAIM_TIMEOUT - 1), 100).await.unwrap().value, 0, "{name}: not yet due");
    apply(store, task_id, TaskCommand::Reclaim { run_id: 0 }, at(30)).await;
    assert_eq!(store.fire_due(at(CLAIM_TIMEOUT + 1), 100).await.unwrap().value, 0, "{name}: reclaimed");
    let fired = store.fire_due(at(30 + CLAIM_TIMEOUT), 100).await.unwrap();
    assert_eq!(fired.value, 1, "{name}");
    let status = store.read(move |reads| reads.task(task_id)).await.unwrap().unwrap().status;
    assert_eq!(status.runs[0].reason_resolved, Some(ReasonResolved::ClaimExpired), "{name}");
    assert_eq!(status.runs[1].reason_created, ReasonCreated::Retry, "{name}");
    assert_eq!(status.retries_left, 0, "{name}");

    assert_eq!(claim_ids(store, worker(1), at(100)).await, vec![task_id], "{name}: the retry is claimable");
    assert_eq!(store.fire_due(at(100 + CLAIM_TIMEOUT), 100).await.unwrap().value, 1, "{name}");
    assert_eq!(state_of(store, task_id).await, TaskState::Exception, "{name}: no retries left");
}

async fn deadline_resolves_every_unresolved_state(name: &str, backend: Backend) {
    let store = &backend.store;
    let (unscheduled, pending, running, done) = (id(1), id(2), id(3), id(4));
    create(store, running, json!({}), at(0)).await;
    claim_ids(store, worker(1), at(0)).await;
    create(store, done, json!({}), at(0)).await;
    claim_ids(store, worker(1), at(0)).await;
    apply(store, done, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(1)).await;
    create(store, pending, json!({}), at(0)).await;
    let self_dependent = json!({"dependencies": [unscheduled.to_string()]});
    create(store, unscheduled, self_dependent, at(0)).await;
    assert_eq!(state_of(store, unscheduled).await, TaskState::Unscheduled, "{name}");

    // Claim expiry of `running` is due too; the deadline comes after it.
    let fired = store.fire_due(at(3600), 100).await.unwrap();
    assert!(fired.value >= 3, "{name}: {}", fired.value);
    for task_id in [unscheduled, pending, running] {
        let status = store.read(move |reads| reads.task(task_id)).await.unwrap().unwrap().status;
        let last = status.runs.last().unwrap();
        assert_eq!(last.reason_resolved, Some(ReasonResolved::DeadlineExceeded), "{name}: {task_id}");
    }
    assert_eq!(state_of(store, done).await, TaskState::Completed, "{name}");
    assert!(claim_ids(store, worker(5), at(3601)).await.is_empty(), "{name}");
}

async fn a_groups_later_deadline_fires_after_its_earlier_task_resolved(name: &str, backend: Backend) {
    let store = &backend.store;
    let (group, early, late) = (id(10), id(1), id(2));
    create(store, early, json!({"taskGroupId": group.to_string()}), at(0)).await;
    let two_hours = json!({"taskGroupId": group.to_string(), "deadline": "2026-01-01T02:00:00.000Z"});
    create(store, late, two_hours, at(0)).await;
    claim_ids(store, worker(1), at(1)).await;
    apply(store, early, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(2))
        .await;
    assert_eq!(store.fire_due(at(3601), 100).await.unwrap().value, 0, "{name}: nothing due at the first deadline");
    assert_eq!(store.fire_due(at(7201), 100).await.unwrap().value, 1, "{name}: the second deadline fires");
    let status = store.read(move |reads| reads.task(late)).await.unwrap().unwrap().status;
    assert_eq!(status.runs[0].reason_resolved, Some(ReasonResolved::DeadlineExceeded), "{name}");
}

async fn a_task_run_again_after_its_groups_deadlines_passed_still_meets_its_own(name: &str, backend: Backend) {
    let store = &backend.store;
    let (group, first, second) = (id(10), id(1), id(2));
    let two_hours = json!({"taskGroupId": group.to_string(), "deadline": "2026-01-01T02:00:00.000Z"});
    create(store, first, two_hours, at(0)).await;
    claim_ids(store, worker(1), at(1)).await;
    apply(store, first, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(2))
        .await;
    create(store, second, json!({"taskGroupId": group.to_string()}), at(3)).await;
    // The group's only unresolved task passes its deadline: none is left after it.
    assert_eq!(store.fire_due(at(3601), 100).await.unwrap().value, 1, "{name}");
    apply(store, first, TaskCommand::Rerun, at(3700)).await;
    assert_eq!(state_of(store, first).await, TaskState::Pending, "{name}");
    assert_eq!(store.fire_due(at(7201), 100).await.unwrap().value, 1, "{name}: the rerun's deadline fires");
    let status = store.read(move |reads| reads.task(first)).await.unwrap().unwrap().status;
    assert_eq!(status.runs[1].reason_resolved, Some(ReasonResolved::DeadlineExceeded), "{name}");
}

async fn groups_seal_and_cancel(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(100);
    for n in 1..=3 {
        let patch = json!({"taskGroupId": group.to_string()});
        create(store, id(n), patch, at(0)).await;
    }
    let early = store.cancel_task_group(group, at(1)).await;
    assert!(matches!(early, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: must be sealed first");
    let other_scheduler = json!({"taskGroupId": group.to_string(), "schedulerId": "other"});
    let res = store.create_task(definition(id(4), other_scheduler), id(4), at(1)).await;
    assert!(matches!(res, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: schedulerId is fixed");

    let sealed = store.seal_task_group(group, at(2)).await.unwrap().value;
    assert_eq!(sealed.sealed, Some(at(2)), "{name}");
    let late = store.create_task(definition(id(5), json!({"taskGroupId": group.to_string()})), id(5), at(3)).await;
    assert!(matches!(late, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: sealed");

    claim_ids(store, worker(1), at(3)).await;
    let canceled = store.cancel_task_group(group, at(4)).await.unwrap().value;
    assert_eq!((canceled.task_group_size, canceled.cancelled_count), (3, 3), "{name}");
    let page = store.read(move |reads| reads.list_task_group(group, None, 2)).await.unwrap();
    assert_eq!(page.items.len(), 2, "{name}");
    let rest = store.read(move |reads| reads.list_task_group(group, page.continuation.as_deref(), 2)).await.unwrap();
    assert_eq!((rest.items.len(), rest.continuation), (1, None), "{name}");
    assert!(rest.items.iter().all(|rec| rec.status.state == TaskState::Exception), "{name}");
}

async fn a_groups_listing_pages_in_task_id_order_whatever_each_tasks_state(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(100);
    for n in 1..=7 {
        create(store, id(n), json!({"taskGroupId": group.to_string()}), at(0)).await;
    }
    for n in [2, 3, 6] {
        apply(store, id(n), TaskCommand::Cancel, at(1)).await;
    }
    let (mut listed, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = store.read(move |reads| reads.list_task_group(group, after.as_deref(), 2)).await.unwrap();
        assert!(page.items.len() <= 2, "{name}");
        listed.extend(page.items.iter().map(|rec| (rec.status.task_id, rec.status.state)));
        match page.continuation {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<_> = (1..=7)
        .map(|n| (id(n), if [2, 3, 6].contains(&n) { TaskState::Exception } else { TaskState::Pending }))
        .collect();
    assert_eq!(listed, expected, "{name}");
}

async fn a_group_named_after_one_of_its_tasks_holds_it_like_any_other(name: &str, backend: Backend) {
    let store = &backend.store;
    let group = id(5);
    let expires = "2026-01-01T02:00:00.000Z";
    // id(5) names its own group, as a task created without one does; the others join it.
    create(store, group, json!({"expires": expires}), at(0)).await;
    for n in [9, 2, 7] {
        create(store, id(n), json!({"taskGroupId": group.to_string(), "expires": expires}), at(0)).await;
    }
    let listing = |size: usize| async move {
        let (mut listed, mut after) = (Vec::new(), None::<String>);
        loop {
            let page = store.read(move |reads| reads.list_task_group(group, after.as_deref(), size)).await.unwrap();
            listed.extend(page.items.iter().map(|rec| rec.status.task_id));
            match page.continuation {
                Some(next) => after = Some(next),
                None => return listed,
            }
        }
    };
    let all = vec![id(2), id(5), id(7), id(9)];
    for size in [1, 2, 3, 10] {
        assert_eq!(listing(size).await, all, "{name}: pages of {size}");
    }
    let _ = store.seal_task_group(group, at(1)).await.unwrap();
    let canceled = store.cancel_task_group(group, at(2)).await.unwrap().value;
    assert_eq!((canceled.task_group_size, canceled.cancelled_count), (4, 4), "{name}");

    // The group stays while any of its tasks does, its namesake included.
    let later = at(3 * 3600);
    assert_eq!(store.forget_tasks(vec![id(2), id(7), id(9)], later, 10).await.unwrap(), 3, "{name}");
    assert!(store.read(move |reads| reads.task_group(group)).await.unwrap().is_some(), "{name}");
    assert_eq!(listing(2).await, vec![group], "{name}");
    assert_eq!(store.forget_tasks(vec![group], later, 10).await.unwrap(), 1, "{name}");
    assert!(
        store.read(move |reads| reads.task_group(group)).await.unwrap().is_none(),
        "{name}: gone with its last task"
    );

    // A member forgotten last takes the group with it just the same.
    let other = id(20);
    create(store, other, json!({"expires": expires}), at(0)).await;
    create(store, id(21), json!({"taskGroupId": other.to_string(), "expires": expires}), at(0)).await;
    let _ = store.seal_task_group(other, at(1)).await.unwrap();
    let _ = store.cancel_task_group(other, at(2)).await.unwrap();
    assert_eq!(store.forget_tasks(vec![other], later, 10).await.unwrap(), 1, "{name}");
    assert!(store.read(move |reads| reads.task_group(other)).await.unwrap().is_some(), "{name}: a member is left");
    assert_eq!(store.forget_tasks(vec![id(21)], later, 10).await.unwrap(), 1, "{name}");
    assert!(store.read(move |reads| reads.task_group(other)).await.unwrap().is_none(), "{name}");

    // A namesake forgotten before its member, the group never sealed nor grown: the group
    // stays as it was, listed as it was, until the member goes too.
    let (lone, member) = (id(22), id(23));
    create(store, lone, json!({"expires": expires}), at(0)).await;
    create(store, member, json!({"taskGroupId": lone.to_string(), "expires": expires}), at(0)).await;
    let group_now = || async move { store.read(move |reads| reads.task_group(lone)).await.unwrap() };
    let listed_now = || async move {
        let page = store.read(|reads| reads.list_task_groups(None, 100)).await.unwrap();
        page.items.into_iter().find(|item| item.group.task_group_id == lone).map(|item| (item.group, item.created))
    };
    let (before, listed_before) = (group_now().await.expect("the group"), listed_now().await);
    assert_eq!(listed_before, Some((before.clone(), at(0))), "{name}");
    for task in [lone, member] {
        apply(store, task, TaskCommand::Cancel, at(1)).await;
    }
    assert_eq!(store.forget_tasks(vec![lone], later, 10).await.unwrap(), 1, "{name}");
    assert_eq!(group_now().await, Some(before), "{name}: the member keeps the group");
    assert_eq!(listed_now().await, listed_before, "{name}");
    assert_eq!(store.forget_tasks(vec![member], later, 10).await.unwrap(), 1, "{name}");
    assert_eq!((group_now().await, listed_now().await), (None, None), "{name}: gone with its last task");

    // Resolved only once nothing in it is left unresolved, whichever resolves last.
    let done = |run_id| TaskCommand::Resolve { run_id, resolution: Resolution::Completed, stats: None };
    // In the first group its namesake resolves last, in the second its member.
    let [(namesake_last, first_member), (member_last, second_member)] = [(id(30), id(31)), (id(40), id(41))];
    for (group, member) in [(namesake_last, first_member), (member_last, second_member)] {
        create(store, group, json!({}), at(0)).await;
        create(store, member, json!({"taskGroupId": group.to_string()}), at(0)).await;
    }
    let resolved = vec![format!("primary.{namesake_last}.-._"), format!("primary.{member_last}.-._")];
    // The groups above resolved too, when they were cancelled.
    let resolved_now = || async {
        let all = routed(store, "task-group-resolved").await;
        all.into_iter().filter(|key| resolved.contains(key)).collect::<Vec<_>>()
    };
    assert_eq!(claim_ids(store, worker(4), at(1)).await.len(), 4, "{name}");
    apply(store, first_member, done(0), at(2)).await;
    apply(store, member_last, done(0), at(2)).await;
    assert!(resolved_now().await.is_empty(), "{name}: each group has a task running");
    apply(store, namesake_last, done(0), at(3)).await;
    apply(store, second_member, done(0), at(3)).await;
    assert_eq!(resolved_now().await, resolved, "{name}");
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
            creators.spawn(async move { store.create_task(definition(task_id, json!({})), task_id, at(0)).await });
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
        .apply(id(1), TaskCommand::Resolve { run_id: 7, resolution: Resolution::Completed, stats: None }, at(1))
        .await;
    assert!(matches!(refused, Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}: {refused:?}");
    assert_eq!(claim_ids(store, worker(1), at(2)).await, vec![id(1)], "{name}: the store still works");
}

fn artifact_request(body: serde_json::Value) -> shoal_engine::artifact::ArtifactRequest {
    serde_json::from_value(body).expect("artifact request")
}

fn key(task_id: TaskId, run_id: u32, name: &str) -> shoal_store::ArtifactKey {
    shoal_store::ArtifactKey { task_id, run_id, name: name.to_owned() }
}

async fn artifacts_are_recorded_uploaded_listed_and_expired(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    create(store, task_id, json!({}), at(0)).await;
    let blob = json!({"storageType": "s3", "expires": "2026-01-01T02:00:00.000Z", "contentType": "text/plain"});
    let before_claim = store.create_artifact(key(task_id, 0, "public/a"), artifact_request(blob.clone()), at(1)).await;
    assert!(matches!(before_claim, Err(StoreError::Rejected(Rejection::Input(_)))), "{name}: {before_claim:?}");
    let missing_run = store.create_artifact(key(task_id, 3, "public/a"), artifact_request(blob.clone()), at(1)).await;
    assert!(matches!(missing_run, Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}");

    claim_ids(store, worker(1), at(1)).await;
    let created =
        store.create_artifact(key(task_id, 0, "public/a"), artifact_request(blob.clone()), at(2)).await.unwrap().value;
    assert!(!created.present, "{name}: not uploaded yet");
    let error = json!({"storageType": "error", "expires": "2026-01-01T03:00:00.000Z", "reason": "file-missing-on-worker", "message": "no"});
    let error = store.create_artifact(key(task_id, 0, "public/b"), artifact_request(error), at(2)).await.unwrap().value;
    assert!(error.present, "{name}: an error artifact needs no upload");
    let uploaded = store.artifact_uploaded(key(task_id, 0, "public/a"), at(2)).await.unwrap().value;
    assert!(uploaded.present, "{name}");
    let again = store.artifact_uploaded(key(task_id, 0, "public/a"), at(2)).await;
    assert!(matches!(again, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: bytes are accepted once");
    let repeat = store.create_artifact(key(task_id, 0, "public/a"), artifact_request(blob), at(3)).await.unwrap().value;
    assert!(repeat.present, "{name}: repeating the creation keeps the upload");
    let not_blob = store.artifact_uploaded(key(task_id, 0, "public/b"), at(3)).await;
    assert!(matches!(not_blob, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}");

    let page = store.read(move |reads| reads.list_artifacts(task_id, 0, None, 1)).await.unwrap();
    assert_eq!(page.items[0].name, "public/a", "{name}");
    let after = page.continuation.clone();
    let rest = store.read(move |reads| reads.list_artifacts(task_id, 0, after.as_deref(), 5)).await.unwrap();
    let names: Vec<&str> = rest.items.iter().map(|artifact| artifact.name.as_str()).collect();
    assert_eq!(names, vec!["public/b", "public/logs/live.log"], "{name}: the claim made the live log");
    assert_eq!(rest.continuation, None, "{name}");

    let expired = store.read(|reads| reads.expired_artifacts(at(2 * 3600), 10)).await.unwrap();
    let names: Vec<&str> = expired.iter().map(|(k, _)| k.name.as_str()).collect();
    assert_eq!(names, vec!["public/a"], "{name}: only the first has expired");
    let keys = expired.into_iter().map(|(k, _)| k).collect();
    assert_eq!(store.forget_artifacts(keys).await.unwrap().value, 1, "{name}");
    let gone = store.read(move |reads| reads.artifact(task_id, 0, "public/a")).await.unwrap();
    assert!(gone.is_none(), "{name}");

    let late = json!({"storageType": "s3", "expires": "2026-01-01T09:00:00.000Z", "contentType": "text/plain"});
    let _ = store.create_artifact(key(task_id, 0, "public/late"), artifact_request(late), at(3)).await.unwrap();
    apply(store, task_id, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(3))
        .await;
    let after_resolution = store.artifact_uploaded(key(task_id, 0, "public/late"), at(4)).await;
    assert!(
        matches!(after_resolution, Err(StoreError::Rejected(Rejection::Conflict(_)))),
        "{name}: an upload ending after its run resolved: {after_resolution:?}"
    );
}

/// Everything committed and not yet published, in publishing order, the way the publisher
/// takes it: from memory when it can, from the table otherwise.
async fn unpublished(store: &Store) -> Vec<OutboxEntry> {
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

fn exchanges(entries: &[OutboxEntry]) -> Vec<&'static str> {
    entries.iter().map(|entry| entry.message.exchange.short_name()).collect()
}

async fn every_transition_leaves_its_messages_in_the_outbox_in_order(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    let patch = json!({"routes": ["index.a.b"], "tags": {"kind": "build"}, "schedulerId": "sched"});
    create(store, task_id, patch, at(0)).await;
    let refused = store.apply(task_id, TaskCommand::Reclaim { run_id: 0 }, at(1)).await;
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

async fn unpublished_messages_survive_a_restart_and_published_ones_are_deleted(name: &str, backend: Backend) {
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

async fn a_group_is_resolved_each_time_its_last_task_resolves(name: &str, backend: Backend) {
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

async fn writes_arriving_together_are_each_judged_alone(name: &str, backend: Backend) {
    let store = backend.store.clone();
    let (group, other, sealed) = (id(500), id(501), id(502));
    let in_group = |group: TaskId| json!({"taskGroupId": group.to_string()});
    create(&store, id(30), in_group(sealed), at(0)).await;
    let _sealed = store.seal_task_group(sealed, at(0)).await.unwrap();

    // Twenty creates at once, with one refused among them (its group is sealed).
    let mut creates = tokio::task::JoinSet::new();
    for n in (1..=20).chain([31]) {
        let (store, task_group) = (store.clone(), if n == 31 { sealed } else { group });
        creates
            .spawn(async move { (n, store.create_task(definition(id(n), in_group(task_group)), id(n), at(1)).await) });
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
        reports.spawn(async move { (n, store.apply(id(n), done(run_id), at(3)).await) });
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
async fn routed(store: &Store, exchange: &str) -> Vec<String> {
    let entries = unpublished(store).await;
    entries
        .iter()
        .filter(|entry| entry.message.exchange.short_name() == exchange)
        .map(|entry| entry.message.routing_key.clone())
        .collect()
}

async fn a_group_resolves_only_when_nothing_in_it_is_left_unresolved(name: &str, backend: Backend) {
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
        writes.push(store.apply(id(n), done(0), at(2)));
    }
    writes.push(store.apply(id(5), TaskCommand::Reclaim { run_id: 0 }, at(2)));
    writes.push(store.apply(id(5), done(3), at(2)));
    // Submitted together (the create first), so that on PostgreSQL they are written as
    // one gathering.
    let (created, written) = tokio::join!(
        store.create_task(definition(id(11), json!({"taskGroupId": second.to_string()})), id(11), at(2)),
        futures_util::future::join_all(writes),
    );
    let states: Vec<_> = written.into_iter().map(|written| written.map(|c| c.value.state)).collect();
    assert!(states[..9].iter().all(|state| matches!(state, Ok(TaskState::Completed))), "{name}: {states:?}");
    assert!(matches!(states[9], Ok(TaskState::Running)), "{name}: {states:?}");
    assert!(matches!(states[10], Err(StoreError::Rejected(_))), "{name}: {states:?}");
    assert_eq!(created.unwrap().value.state, TaskState::Pending, "{name}");
    assert!(routed(&store, "task-group-resolved").await.is_empty(), "{name}: each group has a task unresolved");

    // The last ones complete: each group resolves, once.
    let _done = store.apply(id(5), done(0), at(3)).await.unwrap();
    assert_eq!(routed(&store, "task-group-resolved").await, vec![format!("primary.{first}.-._")], "{name}");
    assert_eq!(claim_ids(&store, worker(11), at(4)).await, vec![id(11)], "{name}");
    let _done = store.apply(id(11), done(0), at(5)).await.unwrap();
    let resolved = vec![format!("primary.{first}.-._"), format!("primary.{second}.-._")];
    assert_eq!(routed(&store, "task-group-resolved").await, resolved, "{name}");
}

fn graph_input(tasks: serde_json::Value) -> shoal_engine::graph::GraphInput {
    let tasks: serde_json::Map<String, serde_json::Value> = tasks
        .as_object()
        .expect("tasks object")
        .iter()
        .map(|(label, node)| {
            let mut node = node.clone();
            let patch = node.get("task").cloned().unwrap_or(json!({}));
            let mut task = json!({
                "taskQueueId": "prov/wt",
                "created": "2026-01-01T00:00:00.000Z",
                "deadline": "2026-01-01T01:00:00.000Z",
                "payload": {},
                "metadata": {"name": label, "description": "d", "owner": "o", "source": "https://x"}
            });
            for (key, value) in patch.as_object().expect("task patch") {
                task[key] = value.clone();
            }
            node["task"] = task;
            (label.clone(), node)
        })
        .collect();
    serde_json::from_value(json!({"routing": "r", "tasks": tasks})).expect("graph input")
}

async fn graph_tasks(store: &Store, graph: TaskId) -> std::collections::HashMap<String, shoal_store::GraphNode> {
    let nodes = store.read(move |reads| reads.graph_nodes(graph)).await.unwrap();
    nodes.into_iter().map(|node| (node.label.clone(), node)).collect()
}

async fn graph_state(store: &Store, graph: TaskId) -> shoal_engine::graph::GraphState {
    store.read(move |reads| reads.task_graph(graph)).await.unwrap().expect("graph exists").status.state
}

fn graph_exchanges(entries: &[OutboxEntry]) -> Vec<&'static str> {
    exchanges(entries).into_iter().filter(|name| name.starts_with("task-graph-")).collect()
}

async fn a_graph_reruns_a_failure_blocks_then_finishes_once_run_again(name: &str, backend: Backend) {
    use shoal_engine::graph::GraphState;
    let store = &backend.store;
    let graph = id(900);
    let input = graph_input(json!({"a": {"reruns": 1}, "b": {"requires": ["a"]}}));
    let request = shoal_store::GraphRequest { task_graph_id: graph, input };
    let created = store.create_graph(request, at(0)).await.unwrap().value;
    assert_eq!(created.state, GraphState::Running, "{name}");
    let nodes = graph_tasks(store, graph).await;
    let (a, b) = (nodes["a"].task_id, nodes["b"].task_id);
    assert_eq!((nodes["a"].state, nodes["b"].state), (TaskState::Pending, TaskState::Unscheduled), "{name}");
    let fail = |run_id| TaskCommand::Resolve { run_id, resolution: Resolution::Failed, stats: None };

    assert_eq!(claim_ids(store, worker(5), at(1)).await, vec![a], "{name}");
    let status = apply(store, a, fail(0), at(2)).await;
    assert_eq!(status.state, TaskState::Pending, "{name}: rerun in the failing step");
    assert_eq!(status.runs[1].reason_created, ReasonCreated::Rerun, "{name}");
    assert_eq!(claim_ids(store, worker(5), at(3)).await, vec![a], "{name}");
    apply(store, a, fail(1), at(4)).await;
    assert_eq!(graph_state(store, graph).await, GraphState::Blocked, "{name}");
    assert!(claim_ids(store, worker(5), at(5)).await.is_empty(), "{name}: b never runs");
    let nodes = graph_tasks(store, graph).await;
    assert_eq!((nodes["a"].progress.reruns_left, nodes["a"].progress.failed), (0, true), "{name}");

    // Someone reruns it by hand: the graph runs again, and finishes.
    apply(store, a, TaskCommand::Rerun, at(6)).await;
    assert_eq!(graph_state(store, graph).await, GraphState::Running, "{name}");
    assert_eq!(claim_ids(store, worker(5), at(7)).await, vec![a], "{name}");
    apply(store, a, TaskCommand::Resolve { run_id: 2, resolution: Resolution::Completed, stats: None }, at(8)).await;
    assert_eq!(claim_ids(store, worker(5), at(9)).await, vec![b], "{name}");
    apply(store, b, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(10)).await;
    assert_eq!(graph_state(store, graph).await, GraphState::Finished, "{name}");
    assert_eq!(
        graph_exchanges(&unpublished(store).await),
        ["task-graph-running", "task-graph-blocked", "task-graph-running", "task-graph-finished"],
        "{name}"
    );
}

async fn a_refused_graph_leaves_nothing_behind(name: &str, backend: Backend) {
    let store = &backend.store;
    let graph = id(901);
    // `b` needs `a`, which expires before `b`'s deadline: refused after planning, before writing.
    let input = graph_input(json!({
        "a": {"task": {"deadline": "2026-01-01T00:10:00.000Z", "expires": "2026-01-01T00:20:00.000Z"}},
        "b": {"requires": ["a"]},
    }));
    let refused = store.create_graph(shoal_store::GraphRequest { task_graph_id: graph, input }, at(0)).await;
    let Err(StoreError::Rejected(Rejection::Invalid { field, .. })) = refused else {
        panic!("{name}: expected a field error, got {refused:?}");
    };
    assert_eq!(field, "tasks.b.task.dependencies", "{name}");
    assert!(store.read(move |reads| reads.task_graph(graph)).await.unwrap().is_none(), "{name}");
    assert!(store.read(move |reads| reads.task_group(graph)).await.unwrap().is_none(), "{name}");
    assert!(graph_exchanges(&unpublished(store).await).is_empty(), "{name}");
}

async fn concurrent_completions_of_a_graphs_tasks_are_each_counted_once(name: &str, backend: Backend) {
    use shoal_engine::graph::GraphState;
    let store = &backend.store;
    let graph = id(902);
    let tasks: serde_json::Map<String, serde_json::Value> = (0..24).map(|n| (format!("t{n}"), json!({}))).collect();
    let input = graph_input(serde_json::Value::Object(tasks));
    let _ = store.create_graph(shoal_store::GraphRequest { task_graph_id: graph, input }, at(0)).await.unwrap();
    let claimed = claim_ids(store, worker(24), at(1)).await;
    assert_eq!(claimed.len(), 24, "{name}");
    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    let completions = claimed.iter().map(|&task_id| {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move { store.apply(task_id, done, at(2)).await })
    });
    for completion in futures_util::future::join_all(completions).await {
        let _ = completion.unwrap().unwrap();
    }
    let record = store.read(move |reads| reads.task_graph(graph)).await.unwrap().unwrap();
    assert_eq!((record.tally.open, record.status.state), (0, GraphState::Finished), "{name}");
    assert_eq!(graph_exchanges(&unpublished(store).await), ["task-graph-running", "task-graph-finished"], "{name}");
}

fn client(client_id: &str, scopes: &[&str]) -> shoal_engine::auth::client::Client {
    shoal_engine::auth::client::Client {
        client_id: client_id.to_owned(),
        access_token: format!("token-of-{client_id}"),
        description: "a test client".into(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        expires: at(3600),
        disabled: false,
        delete_on_expiration: false,
        created: at(0),
        last_modified: at(0),
        last_rotated: at(0),
    }
}

fn role(role_id: &str, scopes: &[&str]) -> shoal_engine::auth::client::Role {
    shoal_engine::auth::client::Role {
        role_id: role_id.to_owned(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        description: "a test role".into(),
        created: at(0),
        last_modified: at(0),
    }
}

async fn clients_and_roles_are_kept_changed_and_deleted(name: &str, backend: Backend) {
    use shoal_store::{AuthChange, AuthOutcome, ClientEdit};
    let store = &backend.store;
    let generation = || store.read(|reads| reads.auth_generation());
    let start = generation().await.unwrap();
    store.change_auth(AuthChange::CreateClient(client("ci/one", &["queue:a"])), at(0)).await.unwrap();
    let taken = store.change_auth(AuthChange::CreateClient(client("ci/one", &[])), at(1)).await;
    assert!(matches!(taken, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: {taken:?}");
    let disabled =
        store.change_auth(AuthChange::UpdateClient("ci/one".into(), ClientEdit::Disabled(true)), at(2)).await;
    assert!(matches!(disabled, Ok(AuthOutcome::Client(ref c)) if c.disabled && c.last_modified == at(2)), "{name}");
    let missing = store.change_auth(AuthChange::UpdateClient("nobody".into(), ClientEdit::Disabled(true)), at(2)).await;
    assert!(matches!(missing, Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}: {missing:?}");

    store.change_auth(AuthChange::CreateRole(role("team", &["queue:b", "assume:other"])), at(3)).await.unwrap();
    store.change_auth(AuthChange::CreateRole(role("other", &["queue:c"])), at(3)).await.unwrap();
    let runaway = store.change_auth(AuthChange::CreateRole(role("loop*", &["assume:loopx<..>"])), at(4)).await;
    assert!(matches!(runaway, Err(StoreError::Rejected(Rejection::Invalid { .. }))), "{name}: {runaway:?}");
    store.change_auth(AuthChange::UpdateRole(role("other", &["queue:d"])), at(5)).await.unwrap();
    store.change_auth(AuthChange::DeleteRole("team".into()), at(6)).await.unwrap();

    let snapshot = store.read(|reads| reads.auth_snapshot()).await.unwrap();
    assert_eq!(snapshot.clients.len(), 1, "{name}");
    assert!(snapshot.clients[0].disabled, "{name}");
    assert_eq!(snapshot.roles.len(), 1, "{name}: the refused role left nothing");
    assert_eq!((snapshot.roles[0].role_id.as_str(), snapshot.roles[0].created), ("other", at(3)), "{name}");
    assert_eq!(snapshot.roles[0].scopes, ["queue:d"], "{name}");
    assert_eq!(snapshot.generation, start + 6, "{name}: each change that was made moved the generation on");

    let first = store.signing_token("first".into()).await.unwrap();
    assert_eq!(first, "first", "{name}");
    assert_eq!(store.signing_token("second".into()).await.unwrap(), "first", "{name}: the stored token stays");
    store.change_auth(AuthChange::DeleteClient("ci/one".into()), at(7)).await.unwrap();
    backend.store.close().await;
    let reopened = backend.reopen();
    let snapshot = reopened.read(|reads| reads.auth_snapshot()).await.unwrap();
    assert!(snapshot.clients.is_empty(), "{name}");
    assert_eq!(reopened.signing_token("third".into()).await.unwrap(), "first", "{name}: kept across a restart");
    reopened.close().await;
}

async fn expired_tasks_are_forgotten_with_what_hangs_on_them(name: &str, backend: Backend) {
    let store = &backend.store;
    let (short, dependent, kept) = (id(1), id(2), id(3));
    let expires = json!({"expires": "2026-01-01T02:00:00.000Z"});
    create(store, short, expires.clone(), at(0)).await;
    create(store, dependent, json!({"dependencies": [short.to_string()]}), at(0)).await;
    create(store, kept, json!({}), at(0)).await;
    assert_eq!(claim_ids(store, worker(3), at(1)).await, vec![short, kept], "{name}");
    let blob = json!({"storageType": "error", "expires": "2026-01-01T01:30:00.000Z", "reason": "file-missing-on-worker", "message": "no"});
    let _ = store.create_artifact(key(short, 0, "public/e"), artifact_request(blob), at(2)).await.unwrap();
    for task_id in [short, kept] {
        apply(
            store,
            task_id,
            TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None },
            at(3),
        )
        .await;
    }
    assert_eq!(state_of(store, dependent).await, TaskState::Pending, "{name}");

    let before = store.read(|reads| reads.expired_tasks(at(3 * 3600), 10)).await.unwrap();
    assert_eq!(before, vec![(short, 1)], "{name}: only the resolved task past its expiry, with its one run");
    assert!(store.read(|reads| reads.expired_tasks(at(3600), 10)).await.unwrap().is_empty(), "{name}: not yet");
    // Named, but not past its expiry: not forgotten.
    let forgotten = store.forget_tasks(vec![kept], at(3 * 3600), 10).await.unwrap();
    assert_eq!(forgotten, 0, "{name}: a task not expired is left alone");

    assert_eq!(store.forget_tasks(vec![short], at(3 * 3600), 10).await.unwrap(), 1, "{name}");
    let (task, group, artifact) = store
        .read(move |reads| {
            Ok((
                reads.task(short)?.is_some(),
                reads.task_group(short)?.is_some(),
                reads.artifact(short, 0, "public/e")?,
            ))
        })
        .await
        .unwrap();
    assert_eq!((task, group, artifact), (false, false, None), "{name}: the task, its group and its artifacts went");
    assert_eq!(state_of(store, dependent).await, TaskState::Pending, "{name}: a dependent keeps its state");
    assert_eq!(state_of(store, kept).await, TaskState::Completed, "{name}");
    let dependents = store.read(move |reads| reads.list_dependents(short, None, 10)).await.unwrap();
    assert!(dependents.items.is_empty(), "{name}: no dependency row is left");

    // A graph goes with its last task.
    let graph = id(902);
    let input = graph_input(json!({"only": {"task": {"expires": "2026-01-01T02:00:00.000Z"}}}));
    let _ = store.create_graph(shoal_store::GraphRequest { task_graph_id: graph, input }, at(0)).await.unwrap();
    let node = store.read(move |reads| reads.graph_nodes(graph)).await.unwrap()[0].task_id;
    assert!(claim_ids(store, worker(5), at(4)).await.contains(&node), "{name}");
    apply(store, node, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(5)).await;
    assert_eq!(store.forget_tasks(vec![node], at(3 * 3600), 10).await.unwrap(), 1, "{name}");
    let (graph_left, group_left) = store
        .read(move |reads| Ok((reads.task_graph(graph)?.is_some(), reads.task_group(graph)?.is_some())))
        .await
        .unwrap();
    assert_eq!((graph_left, group_left), (false, false), "{name}: the graph and its group went with its last task");

    // Task queues are forgotten once their retention (5 days after last use) is over.
    let queue = |reads: &dyn shoal_store::Reads| reads.task_queue("prov/wt");
    store.forget_tasks(vec![], at(3 * 86_400), 10).await.unwrap();
    assert!(store.read(move |reads| queue(reads)).await.unwrap().is_some(), "{name}");
    store.forget_tasks(vec![], at(6 * 86_400), 10).await.unwrap();
    assert!(store.read(move |reads| queue(reads)).await.unwrap().is_none(), "{name}: unseen for 5 days");
}
