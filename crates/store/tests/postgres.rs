//! The PostgreSQL backend against a real cluster: schema migrations, the outbox's ordering (`postgres/outbox.rs`)
//! when message ids are drawn in one order and committed in another, the plans of the
//! write path as the tables grow, creates and reports written by one statement, the
//! record of a queue's activity written once per interval, where a claimed task's row goes,
//! claims written together with the other writes of a server, a gathering stuck on a
//! row lock not holding back the next, requests given up on while the database hangs,
//! claims by dimension set, and workers' claims appended apart from their records.

#[path = "postgres/dimension_sets.rs"]
mod dimension_sets;
#[path = "postgres/outbox.rs"]
mod outbox;
mod support;
#[path = "postgres/worker_claims.rs"]
mod worker_claims;

use outbox::*;
use shoal_store::operation::{Apply, ClaimWork, CreateTask, WorkerSeen};

use serde_json::json;
use shoal_engine::command::TaskCommand;
use shoal_engine::definition::TaskDefinitionInput;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::message::{Exchange, Message};
use shoal_engine::task::Resolution;
use shoal_engine::worker::Sighting;
use shoal_engine::{TaskId, Timestamp};
use shoal_store::outbox::Next;
use shoal_store::{ClaimRequest, PgConfig, PgPool, PgStore, Store, StoreError, migrate_postgres};
use support::postgres::{Stall, fresh_database};

#[test]
fn servers_starting_at_once_migrate_exactly_once() {
    let url = fresh_database();
    let servers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PgPool::open(&PgConfig::new(&url)).expect("open"))
        })
        .collect();
    for server in servers {
        let pool = server.join().expect("no panic");
        assert_eq!(pool.schema_version().unwrap(), shoal_store::PG_SCHEMA_VERSION);
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows: i64 = client.query_one("SELECT count(*) FROM shoal_schema", &[]).unwrap().get(0);
    assert_eq!(rows, 1, "one version row");
    assert_eq!(migrate_postgres(&url).unwrap(), 0, "nothing left to apply");
}

#[test]
fn a_database_from_a_newer_shoal_is_refused() {
    let url = fresh_database();
    assert_eq!(migrate_postgres(&url).unwrap(), shoal_store::PG_SCHEMA_VERSION);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client.batch_execute("UPDATE shoal_schema SET version = version + 1").unwrap();
    let Err(err) = PgPool::open(&PgConfig::new(&url)) else { panic!("refused") };
    assert!(err.to_string().contains("newer than this Shoal knows"), "{err}");
}

#[test]
fn staged_messages_are_compressed_by_lz4_where_the_server_has_it() {
    let url = fresh_database();
    migrate_postgres(&url).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let has_lz4 = client.batch_execute("CREATE TEMP TABLE probe (t TEXT COMPRESSION lz4)").is_ok();
    // A transaction's messages: large enough to be compressed, as a gathering's are.
    let messages = format!("[{}]", vec![r#"{"e":"task-defined","k":"primary.x","b":{"status":{}}}"#; 200].join(","));
    client
        .execute(
            "INSERT INTO outbox_pending (id, count, messages) VALUES (nextval('outbox_ids'), 200, $1)",
            &[&messages],
        )
        .unwrap();
    // As the sequencing step moves it (outbox.rs): the value goes over as it is, not
    // compressed again by outbox_batches' own setting.
    client
        .batch_execute(
            "INSERT INTO outbox_batches (first_seq, last_seq, messages) SELECT 1, 200, messages FROM outbox_pending",
        )
        .unwrap();
    let stored = "SELECT (SELECT pg_column_compression(messages) FROM outbox_pending), \
                  (SELECT pg_column_compression(messages) FROM outbox_batches)";
    let row = client.query_one(stored, &[]).unwrap();
    let (staged, sequenced): (Option<String>, Option<String>) = (row.get(0), row.get(1));
    let expected = if has_lz4 { "lz4" } else { "pglz" };
    assert_eq!((staged.as_deref(), sequenced.as_deref()), (Some(expected), Some(expected)));
}

#[test]
fn an_unreachable_database_is_unavailable() {
    // Port 1 on loopback refuses connections.
    let mut config = PgConfig::new("postgres://shoal@127.0.0.1:1/shoal");
    config.connect_timeout = std::time::Duration::from_millis(300);
    let Err(err) = PgPool::open(&config) else { panic!("refused") };
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}

fn open_store(url: &str) -> Store {
    let config = PgConfig::new(url);
    // The blocking client must not start inside the test's runtime.
    let store = std::thread::spawn(move || PgStore::open(&config)).join().expect("no panic").expect("open");
    Store::Postgres(store)
}

async fn create(store: &Store, n: u32) {
    create_in(store, n, None).await;
}

/// The id of the `n`th task [`create`] makes.
fn task_id(n: u32) -> TaskId {
    TaskId::parse(&format!("{n:08}QxCxxxxxxxxxxA")).unwrap()
}

/// Task `n` of `group` (a shared group, as a decision task's graph is), or of its own.
async fn create_in(store: &Store, n: u32, group: Option<TaskId>) {
    try_create(store, n, group, &[]).await.unwrap();
}

/// Creates task `n` of `group` (or of its own) depending on `dependencies`.
async fn try_create(store: &Store, n: u32, group: Option<TaskId>, dependencies: &[TaskId]) -> Result<(), StoreError> {
    let task_id = task_id(n);
    let mut definition = json!({
        "taskQueueId": "prov/wt",
        "created": "2026-01-01T00:00:00.000Z",
        "deadline": "2026-01-01T01:00:00.000Z",
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    });
    if let Some(group) = group {
        definition["taskGroupId"] = json!(group.to_string());
    }
    definition["dependencies"] = json!(dependencies.iter().map(ToString::to_string).collect::<Vec<_>>());
    let input: TaskDefinitionInput = serde_json::from_value(definition).unwrap();
    let at = Timestamp(1_767_225_600_000);
    store.run(CreateTask { definition: input.validate(task_id, at).unwrap(), task_id }, at).await.map(|_| ())
}

/// A claim of up to `count` tasks of the queue [`create`] fills.
fn claim_request(count: usize) -> ClaimRequest {
    ClaimRequest {
        task_queue_id: "prov/wt".into(),
        worker_group: "g".into(),
        worker_id: "w".into(),
        dimensions: Dimensions::default(),
        version: None,
        count,
    }
}

/// Waits until every other session on the database has ended by itself (a session records
/// its statistics as it ends).
fn sessions_ended(url: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while client.query_one(others, &[]).unwrap().get::<_, i64>(0) > 0 {
        assert!(std::time::Instant::now() < give_up, "the store's sessions did not end");
        // Nothing announces a session's end: look again shortly.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A counter of `pg_stat_database` for the database (recorded as its sessions end).
fn database_count(url: &str, column: &str) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let sql = format!("SELECT {column} FROM pg_stat_database WHERE datname = current_database()");
    client.query_one(&sql, &[]).unwrap().get(0)
}

/// Ends every other session on the database and waits until each has gone (a session
/// records its statistics as it ends).
fn end_sessions(url: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    // Each call waits for its session to end; one that ended by itself meanwhile answers false.
    let others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
    for _ in 0..10 {
        client.query(&format!("SELECT pg_terminate_backend(pid, 30000) {others}"), &[]).unwrap();
        let left: i64 = client.query_one(&format!("SELECT count(*) {others}"), &[]).unwrap().get(0);
        if left == 0 {
            return;
        }
    }
    panic!("sessions on the database would not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_path_never_scans_the_task_tables_or_their_indexes_whole_as_they_grow() {
    let url = fresh_database();
    let store = open_store(&url);
    let at = Timestamp(1_767_225_600_000);
    // Concurrent writes, so that they are gathered as under load; each connection plans
    // its statements while the tables are nearly empty.
    for round in 0..20u32 {
        let creates = (0..16).map(|n| create(&store, round * 16 + n));
        futures_util::future::join_all(creates).await;
        let request = claim_request(16);
        let claims = store.run(ClaimWork { request }, at).await.unwrap().value;
        assert_eq!(claims.len(), 16);
        let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
        let reports =
            claims.iter().map(|claim| store.run(Apply { task_id: claim.status.task_id, command: done.clone() }, at));
        for report in futures_util::future::join_all(reports).await {
            let _ = report.unwrap();
        }
    }
    drop(store);
    let url2 = url.clone();
    let (scanned, read) = tokio::task::spawn_blocking(move || {
        end_sessions(&url2);
        let mut client = postgres::Client::connect(&url2, postgres::NoTls).unwrap();
        let mut counts = |sql: &str| {
            let rows = client.query(sql, &[]).unwrap();
            rows.iter().map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1))).collect::<Vec<_>>()
        };
        (
            counts(
                "SELECT relname::text, seq_tup_read FROM pg_stat_user_tables \
                 WHERE relname IN ('tasks', 'task_groups') ORDER BY relname",
            ),
            counts(
                "SELECT indexrelname::text, idx_tup_read FROM pg_stat_user_indexes \
                 WHERE relname IN ('tasks', 'task_groups') ORDER BY 1",
            ),
        )
    })
    .await
    .unwrap();
    assert_eq!(scanned, [("task_groups".to_owned(), 0), ("tasks".to_owned(), 0)], "rows read by table scans");
    // Found by key, each task's rows cost a few entries of each index (the primary key's most:
    // 9 per task); an index read whole per statement costs more with every task stored.
    let tasks = 20 * 16;
    let whole: Vec<_> = read.iter().filter(|(_, entries)| *entries > 16 * tasks).collect();
    assert!(whole.is_empty(), "index entries read, with {tasks} tasks written: {read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_and_reports_written_together_keep_each_tasks_messages_in_order() {
    let url = fresh_database();
    let store = open_store(&url);
    let at = Timestamp(1_767_225_600_000);
    futures_util::future::join_all((0..32).map(|n| create(&store, n))).await;
    let request = claim_request(32);
    let claims = store.run(ClaimWork { request }, at).await.unwrap().value;
    assert_eq!(claims.len(), 32);
    // Reports and creates interleaved and in flight at once, so that gatherings hold both:
    // their rows are inserted, updated and their messages staged by one statement.
    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    let mut writes: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>> = Vec::new();
    let store_ref = &store;
    for (n, claim) in (32..).zip(&claims) {
        let done = done.clone();
        writes.push(Box::pin(async move {
            let status = store_ref.run(Apply { task_id: claim.status.task_id, command: done }, at).await.unwrap().value;
            assert_eq!(status.state.as_str(), "completed");
        }));
        writes.push(Box::pin(create(store_ref, n)));
    }
    futures_util::future::join_all(writes).await;
    let mut per_task: std::collections::BTreeMap<String, Vec<Exchange>> = std::collections::BTreeMap::new();
    for message in messages(&store).await {
        if matches!(
            message.exchange,
            Exchange::TaskDefined | Exchange::TaskPending | Exchange::TaskRunning | Exchange::TaskCompleted
        ) {
            let task = message.routing_key.split('.').nth(1).unwrap().to_owned();
            per_task.entry(task).or_default().push(message.exchange);
        }
    }
    assert_eq!(per_task.len(), 64);
    let reported: std::collections::HashSet<String> =
        claims.iter().map(|claim| claim.status.task_id.as_str().to_owned()).collect();
    for (task, exchanges) in per_task {
        let expected: &[Exchange] = if reported.contains(&task) {
            &[Exchange::TaskDefined, Exchange::TaskPending, Exchange::TaskRunning, Exchange::TaskCompleted]
        } else {
            &[Exchange::TaskDefined, Exchange::TaskPending]
        };
        assert_eq!(exchanges, expected, "messages of {task}");
    }
    let request = claim_request(64);
    assert_eq!(store.run(ClaimWork { request }, at).await.unwrap().value.len(), 32, "every new task is pending");
    drop(store);
    // A gathering that fails is rolled back and its operations run alone, with the same
    // outcome: only the count of rollbacks tells. The store's sessions are left to end by
    // themselves (ending one in a transaction would count as a rollback).
    let rollbacks = tokio::task::spawn_blocking(move || {
        sessions_ended(&url);
        database_count(&url, "xact_rollback")
    })
    .await
    .unwrap();
    assert_eq!(rollbacks, 0, "transactions rolled back");
}

/// When a queue's activity was last recorded, read from its row.
async fn last_date_active(url: &str) -> i64 {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let sql = "SELECT last_date_active FROM task_queues WHERE task_queue_id = 'prov/wt'";
        client.query_one(sql, &[]).unwrap().get::<_, i64>(0)
    })
    .await
    .unwrap()
}

/// Another session's transaction holding what `lock` (a statement) takes until told to end.
async fn hold_lock(url: &str, lock: &str) -> std::sync::mpsc::Sender<()> {
    let (url, lock) = (url.to_owned(), lock.to_owned());
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    // The blocking client lives and dies on a thread of its own.
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client.batch_execute("BEGIN").unwrap();
        client.batch_execute(&lock).unwrap();
        let _ = held_tx.send(());
        let _ = end_rx.recv();
        client.batch_execute("COMMIT").unwrap();
    });
    held_rx.await.expect("the lock is held");
    end_tx
}

/// Waits until some session of this database (tests share the cluster) waits for a lock.
async fn until_a_session_waits_for_a_lock(url: &str) {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let sql =
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
        // PostgreSQL announces no lock wait: the sessions are looked at until one shows.
        while client.query_one(sql, &[]).unwrap().get::<_, i64>(0) == 0 {
            assert!(std::time::Instant::now() < give_up, "no session waited for a lock");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    })
    .await
    .unwrap();
}

/// A time past the interval within which a queue's activity is recorded once.
const LATER: Timestamp = Timestamp(1_767_225_600_000 + 60_000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_transactions_record_a_queues_activity_once_instead_of_queueing_on_its_row() {
    let url = fresh_database();
    // A statement waiting for a lock fails after 10 s rather than hanging the test.
    let store = open_store(&format!("{url}?options=-c%20lock_timeout%3D10000"));
    create(&store, 1).await;
    // Reading the record waits too, so the claims are all between deciding to record and
    // having read the record, where a server's transactions once each decided to write it.
    let end = hold_lock(&url, "LOCK TABLE task_queues IN ACCESS EXCLUSIVE MODE").await;
    // The first claim past the interval records the queue's activity: it waits for the table.
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.run(ClaimWork { request: claim_request(0) }, LATER).await })
    };
    until_a_session_waits_for_a_lock(&url).await;
    // The others on this server leave the record to it and do not wait.
    let second =
        store.run(ClaimWork { request: claim_request(1) }, LATER).await.expect("not queued behind the first's record");
    assert_eq!(second.value.len(), 1, "claimed while the queues' table is locked");
    end.send(()).unwrap();
    let _ = first.await.unwrap().expect("the first records once the table is free");
    assert_eq!(last_date_active(&url).await, LATER.millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_activity_whose_transaction_failed_is_written_by_the_next_use() {
    let url = fresh_database();
    let store = open_store(&format!("{url}?options=-c%20lock_timeout%3D100"));
    create(&store, 1).await;
    // As another server's record of the queue's activity would.
    let end = hold_lock(&url, "SELECT 1 FROM task_queues WHERE task_queue_id = 'prov/wt' FOR UPDATE").await;
    let failed = store.run(ClaimWork { request: claim_request(0) }, LATER).await;
    assert!(failed.is_err(), "its record waited for the held row past the lock timeout");
    end.send(()).unwrap();
    let _ = store.run(ClaimWork { request: claim_request(0) }, LATER).await.expect("the row is free");
    assert_eq!(last_date_active(&url).await, LATER.millis(), "the failed record is not left taken");
}

/// Outbox rows a server's tail took from its memory and from the table.
fn tailed(store: &Store) -> (u64, u64) {
    let Store::Postgres(store) = store else { unreachable!("a PostgreSQL store") };
    store.outbox_rows_tailed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_tails_its_own_messages_from_memory_and_the_others_from_the_table() {
    let url = fresh_database();
    let (a, b) = (open_store(&url), open_store(&url));
    create(&a, 1).await;
    create(&b, 2).await;
    create(&a, 3).await;
    let (on_a, on_b) = (messages(&a).await, messages(&b).await);
    assert_eq!(on_a.len(), 6, "defined and pending for each task: {on_a:?}");
    assert_eq!(on_a, on_b, "both servers' feeds carry every message, in one order");
    assert_eq!(tailed(&a), (2, 1), "a staged two of the three rows");
    assert_eq!(tailed(&b), (1, 2), "b staged one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_own_rows_its_memory_no_longer_holds_are_read_from_the_table() {
    let url = fresh_database();
    let store = open_store(&url);
    // While another transaction holds an id, nothing after it is positioned, so the server
    // keeps more staged rows than it holds in memory (512) and drops the oldest.
    let held = hold(&url).await;
    let tasks = 530;
    for n in 0..tasks {
        create(&store, n).await;
    }
    end_when_held(&url, held, "COMMIT").await;
    let keys = routing_keys(&store).await;
    assert_eq!(keys.len(), 1 + 2 * tasks as usize, "every message, the dropped rows' too");
    assert_eq!(keys[0], "held");
    for n in 0..tasks as usize {
        let task = format!("{n:08}");
        assert!(keys[1 + 2 * n].contains(&task) && keys[2 + 2 * n].contains(&task), "in order: {n}");
    }
    let (memory, table) = tailed(&store);
    assert_eq!(memory + table, 1 + u64::from(tasks), "each row tailed once");
    assert!(table > 1, "the dropped rows came from the table ({memory} from memory, {table} from the table)");
}

/// The first column of each row `sql` answers on the database at `url`.
async fn column<T>(url: &str, sql: &str) -> Vec<T>
where
    T: for<'a> postgres::types::FromSql<'a> + Send + 'static,
{
    let (url, sql) = (url.to_owned(), sql.to_owned());
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client.query(&sql, &[]).unwrap().iter().map(|row| row.get(0)).collect()
    })
    .await
    .unwrap()
}

/// Each task's page in the table, by task id.
async fn task_pages(url: &str) -> Vec<(String, String)> {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let sql = "SELECT task_id, split_part(ctid::text, ',', 1) FROM tasks ORDER BY task_id";
        client.query(sql, &[]).unwrap().iter().map(|row| (row.get(0), row.get(1))).collect()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_tasks_new_row_version_stays_on_its_page() {
    let url = fresh_database();
    let store = open_store(&url);
    for n in 0..64 {
        create(&store, n).await;
    }
    let created = task_pages(&url).await;
    let at = Timestamp(1_767_225_600_000);
    assert_eq!(store.run(ClaimWork { request: claim_request(64) }, at).await.unwrap().value.len(), 64);
    // On full pages every new version would move, logging a lock of the old one besides
    // the update (migration 6); half-full pages have room for it.
    let pages = |rows: &[(String, String)]| rows.iter().map(|(_, page)| page.clone()).collect::<Vec<_>>();
    assert_eq!(pages(&task_pages(&url).await), pages(&created), "each claimed task's page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_and_reports_in_shared_groups_gathered_together_never_deadlock() {
    let url = fresh_database();
    // Two servers, as the three-server scenario has them, each gathering its own requests.
    let stores = [open_store(&url), open_store(&url)];
    let at = Timestamp(1_767_225_600_000);
    // One new group a round, ordered before the older ones, while tasks of the older ones are
    // created and reported: a gathering that locked an older group for its reports and then
    // inserted the new one, against one that inserted the new group and then wanted the older.
    let group = |round: u32| Some(TaskId::parse(&format!("{:08}QxCxxxxxxxxxxw", 1000 - round)).unwrap());
    let done = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None };
    let mut n = 0;
    for round in 0..30u32 {
        let mut creates = Vec::new();
        for i in 0..64u32 {
            n += 1;
            let of = if i % 2 == 0 { round } else { round.saturating_sub(1) };
            creates.push(create_in(&stores[(i / 2 % 2) as usize], n, group(of)));
        }
        let claims = stores[0].run(ClaimWork { request: claim_request(64) }, at).await.unwrap().value;
        let reports = claims
            .iter()
            .enumerate()
            .map(|(i, claim)| stores[i % 2].run(Apply { task_id: claim.status.task_id, command: done.clone() }, at));
        let (_, reports) =
            tokio::join!(futures_util::future::join_all(creates), futures_util::future::join_all(reports));
        for report in reports {
            let _ = report.unwrap();
        }
    }
    drop(stores);
    let url2 = url.clone();
    let deadlocks = tokio::task::spawn_blocking(move || {
        end_sessions(&url2);
        database_count(&url2, "deadlocks")
    })
    .await
    .unwrap();
    assert_eq!(deadlocks, 0, "deadlocks PostgreSQL broke");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_arriving_together_are_written_together_and_never_share_a_task() {
    let url = fresh_database();
    let at = Timestamp(1_767_225_600_000);
    let stores = [open_store(&url), open_store(&url)];
    futures_util::future::join_all((0..64).map(|n| create(&stores[n as usize % 2], n))).await;
    // The worker has called before, as the service records each claimWork's caller first:
    // transactions both creating its record conflict, and one retried has held tasks that
    // the others' SKIP LOCKED passed over, which is not what this test is about.
    let worker = claim_request(3).worker_key();
    stores[0].run(WorkerSeen { key: worker, sighting: Sighting::default() }, at).await.map(|done| done.value).unwrap();
    // 32 workers asking for 3 each (96 runs for 64 tasks) while 8 pending tasks are cancelled:
    // gatherings holding both must neither claim a cancelled task nor hand one to two workers.
    let cancelled: Vec<TaskId> = (0..8).map(|n| task_id(n * 8)).collect();
    let claims = (0..32).map(|n| stores[n % 2].run(ClaimWork { request: claim_request(3) }, at));
    let cancels = cancelled
        .iter()
        .enumerate()
        .map(|(n, &task_id)| stores[n % 2].run(Apply { task_id, command: TaskCommand::Cancel }, at));
    let (claims, cancels) =
        tokio::join!(futures_util::future::join_all(claims), futures_util::future::join_all(cancels));
    for cancel in cancels {
        let status = cancel.unwrap().value;
        assert_eq!(status.state.as_str(), "exception", "{} cancelled", status.task_id);
    }
    let (mut claimed, mut with_runs) = (std::collections::HashSet::new(), 0);
    for claim in claims {
        let runs = claim.unwrap().value;
        with_runs += usize::from(!runs.is_empty());
        assert!(runs.len() <= 3, "a worker asked for 3 got {}", runs.len());
        for run in runs {
            assert_eq!(run.status.state.as_str(), "running");
            assert!(claimed.insert(run.status.task_id), "{} claimed twice", run.status.task_id);
        }
    }
    // A task claimed before its cancel arrived is cancelled while running; one cancelled
    // first is not claimed. Either way it ends cancelled, and the rest end running.
    for n in 0..64 {
        let task_id = task_id(n);
        let status = stores[0].read(move |reads| reads.task(task_id)).await.unwrap().unwrap().status;
        let expected = if cancelled.contains(&task_id) { "exception" } else { "running" };
        assert_eq!(status.state.as_str(), expected, "{task_id} at the end");
        assert!(claimed.contains(&task_id) || cancelled.contains(&task_id), "{task_id} neither claimed nor cancelled");
        assert_eq!(status.runs.len(), 1, "{task_id}'s runs");
    }
    // Each transaction stages its messages as one row: alone, each claim that got runs would
    // have staged its own.
    for store in &stores {
        store.settle_outbox().await.unwrap();
    }
    drop(stores);
    let batches = tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let sql = "SELECT count(*) FROM outbox_batches WHERE messages LIKE '%\"task-running\"%'";
        client.query_one(sql, &[]).unwrap().get::<_, i64>(0)
    })
    .await
    .unwrap();
    assert!(
        batches > 0 && (batches as usize) < with_runs,
        "{batches} transactions staged the runs of {with_runs} claims"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gathering_waiting_for_a_row_lock_does_not_hold_back_the_next() {
    let url = fresh_database();
    let store = open_store(&url);
    let at = Timestamp(1_767_225_600_000);
    create(&store, 1).await;
    // Another server's transaction holding task 1's row: a cancel of it waits in its gathering.
    let end = hold_lock(&url, &format!("SELECT 1 FROM tasks WHERE task_id = '{}' FOR UPDATE", task_id(1))).await;
    let cancel = {
        let store = store.clone();
        tokio::spawn(async move { store.run(Apply { task_id: task_id(1), command: TaskCommand::Cancel }, at).await })
    };
    until_a_session_waits_for_a_lock(&url).await;
    // The next gathering would wait for that one's commit, that is, for the lock, were it not
    // let go (the guard only keeps a failure from hanging the test).
    let next = tokio::time::timeout(std::time::Duration::from_secs(60), create(&store, 2));
    next.await.expect("a create waited behind a gathering stuck on a row lock");
    end.send(()).unwrap();
    let cancelled = cancel.await.unwrap().expect("the cancel goes on once the row is free").value;
    assert_eq!(cancelled.state.as_str(), "exception");
}

async fn task_exists(store: &Store, n: u32) -> bool {
    store.read(move |reads| reads.task(task_id(n))).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_given_up_on_while_the_database_hangs_and_nothing_unstarted_is_written_after() {
    let url = fresh_database();
    let proxy = Stall::start(&url).await;
    let mut config = PgConfig::new(&proxy.url);
    config.max_connections = 2;
    config.request_timeout = std::time::Duration::from_millis(300);
    // Longer than the stall lasts: the writes below that wait for a connection get one after it.
    config.connect_timeout = std::time::Duration::from_secs(60);
    let store = tokio::task::spawn_blocking(move || PgStore::open(&config)).await.unwrap().expect("open");
    let store = Store::Postgres(store);
    create(&store, 1).await;

    proxy.stalled.send_replace(true);
    // The guard only turns a hang (requests waiting for as long as the database does) into a failure.
    let refused = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let unavailable = |result: Result<(), StoreError>| matches!(result, Err(StoreError::Unavailable(_)));
        // Sent on the write pool's one open connection: it reaches the database after the stall
        // and may yet be written (its caller was told the outcome is unknown).
        assert!(unavailable(try_create(&store, 2, None, &[]).await), "create in flight");
        // The other lane waits for a new connection; then nothing gathers until one frees.
        assert!(unavailable(try_create(&store, 3, None, &[]).await), "create waiting for a connection");
        assert!(unavailable(try_create(&store, 4, None, &[]).await), "create waiting for a lane");
        // Not gathered (it has a dependency): a transaction of its own, waiting for a connection.
        assert!(unavailable(try_create(&store, 5, None, &[task_id(1)]).await), "create alone");
        let read = store.read(|reads| reads.task(task_id(1))).await;
        assert!(matches!(read, Err(StoreError::Unavailable(_))), "read: {read:?}");
    });
    refused.await.expect("requests waited for a database that does not answer");

    proxy.stalled.send_replace(false);
    // What was held finishes first; until then a request may still be given up on (and is
    // retried, as clients retry a 503).
    let recovered = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Err(err) = try_create(&store, 6, None, &[]).await {
            assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        }
    });
    recovered.await.expect("writes work again");
    assert!(task_exists(&store, 1).await && task_exists(&store, 6).await, "works again");
    for n in [3, 4, 5] {
        assert!(!task_exists(&store, n).await, "task {n} was written for a caller that had given up");
    }
    tokio::task::spawn_blocking(move || drop(store)).await.unwrap();
}
