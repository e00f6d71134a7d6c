//! Claims by dimension set (`postgres/dimension_sets.rs`): sets are filed as tasks become
//! pending in them, forgotten once nothing is pending, never under a task just made pending,
//! and claims racing on one set take each task once and leave none behind.

use super::*;
use shoal_store::operation::{ClaimWork, CreateTask};

/// A task of queue `prov/dims` requiring `dimensions`.
async fn create_requiring(store: &Store, n: u32, dimensions: serde_json::Value) {
    let definition = json!({
        "taskQueueId": "prov/dims",
        "created": "2026-01-01T00:00:00.000Z",
        "deadline": "2026-01-01T01:00:00.000Z",
        "payload": {},
        "dimensions": dimensions,
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    });
    let input: TaskDefinitionInput = serde_json::from_value(definition).unwrap();
    let at = Timestamp(1_767_225_600_000);
    let _ = store
        .run(CreateTask { definition: input.validate(task_id(n), at).unwrap(), task_id: task_id(n) }, at)
        .await
        .unwrap();
}

/// A claim of `prov/dims` by worker `id` having `dimensions`.
fn claim_having(id: &str, dimensions: serde_json::Value, count: usize) -> ClaimRequest {
    ClaimRequest {
        task_queue_id: "prov/dims".into(),
        worker_group: "g".into(),
        worker_id: id.into(),
        dimensions: Dimensions::parse("dimensions", serde_json::from_value(dimensions).unwrap()).unwrap(),
        version: None,
        count,
    }
}

async fn claimed(store: &Store, request: ClaimRequest) -> Vec<TaskId> {
    let at = Timestamp(1_767_225_600_000);
    store.run(ClaimWork { request }, at).await.unwrap().value.iter().map(|claim| claim.status.task_id).collect()
}

/// The sets filed, by their dimensions' text.
async fn sets_filed(url: &str) -> Vec<String> {
    column(url, "SELECT dimensions::text FROM dimension_sets ORDER BY 1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_forgotten_once_nothing_is_pending_in_it_and_filed_again_when_needed() {
    let url = fresh_database();
    let store = open_store(&url);
    create_requiring(&store, 1, json!({"os": ["linux"]})).await;
    create_requiring(&store, 2, json!({"os": ["mac"]})).await;
    create_requiring(&store, 3, json!({"os": ["linux"]})).await;
    assert_eq!(sets_filed(&url).await.len(), 2, "one set per distinct dimensions");
    let linux = json!({"os": ["linux"]});
    assert_eq!(claimed(&store, claim_having("l", linux.clone(), 5)).await, [task_id(1), task_id(3)]);
    // Twice: the sweep goes on from where it stopped, and starts over past the end.
    store.tidy_pending_index(100).await.unwrap();
    store.tidy_pending_index(100).await.unwrap();
    assert_eq!(sets_filed(&url).await, [r#"{"os": ["mac"]}"#], "the emptied set forgotten, the other kept");
    create_requiring(&store, 4, linux.clone()).await;
    assert_eq!(sets_filed(&url).await.len(), 2, "filed again");
    assert_eq!(claimed(&store, claim_having("l", linux, 5)).await, [task_id(4)]);
    assert_eq!(claimed(&store, claim_having("m", json!({"os": ["mac", "linux"]}), 5)).await, [task_id(2)]);
}

#[test]
fn a_set_being_filed_is_not_forgotten_until_the_filer_commits() {
    let url = fresh_database();
    migrate_postgres(&url).unwrap();
    let connect = || postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let (mut filer, mut sweeper) = (connect(), connect());
    let file = "SELECT shoal_file_dimension_set('prov/dims', '{\"os\": [\"linux\"]}')";
    let sweep = "SELECT shoal_forget_idle_dimension_sets('\\x', 100)";
    let count = "SELECT count(*) FROM dimension_sets";
    filer.batch_execute(file).unwrap();
    // A transaction making a task pending in the filed set: it finds the set filed and
    // writes its task; until it commits, no other transaction sees that task.
    let mut making = filer.transaction().unwrap();
    making.batch_execute(file).unwrap();
    sweeper.batch_execute(sweep).unwrap();
    assert_eq!(sweeper.query_one(count, &[]).unwrap().get::<_, i64>(0), 1, "kept while a filer may commit a task");
    making.commit().unwrap();
    sweeper.batch_execute(sweep).unwrap();
    assert_eq!(sweeper.query_one(count, &[]).unwrap().get::<_, i64>(0), 0, "forgotten once nothing is pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_racing_on_two_servers_take_every_task_of_their_sets_once() {
    let url = fresh_database();
    let stores = [open_store(&url), open_store(&url)];
    // Three sets the workers match, one they do not, and tasks requiring nothing, interleaved
    // in line order.
    let sets = [
        json!({"os": ["linux"]}),
        json!({"os": ["linux"], "cpu": ["x86"]}),
        json!({"pool": ["ci"], "os": ["linux|mac"]}),
        json!({"os": ["windows"]}),
        json!({}),
    ];
    let creates = (0..100u32).map(|n| create_requiring(&stores[n as usize % 2], n, sets[n as usize % 5].clone()));
    futures_util::future::join_all(creates).await;
    let have = json!({"os": ["linux"], "cpu": ["x86", "arm"], "pool": ["ci"]});
    // 12 workers asking for 3 at a time, each until it gets nothing.
    let workers = (0..12).map(|w| {
        let (store, have) = (&stores[w % 2], have.clone());
        async move {
            let mut got = Vec::new();
            loop {
                let runs = claimed(store, claim_having(&format!("w{w}"), have.clone(), 3)).await;
                if runs.is_empty() {
                    return got;
                }
                got.extend(runs);
            }
        }
    });
    let mut taken = std::collections::BTreeSet::new();
    for got in futures_util::future::join_all(workers).await {
        for task in got {
            assert!(taken.insert(task), "{task} claimed twice");
        }
    }
    let expected: std::collections::BTreeSet<TaskId> = (0..100).filter(|n| n % 5 != 3).map(task_id).collect();
    assert_eq!(taken, expected, "every task the workers match, and none other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_passes_over_the_tasks_another_transaction_holds() {
    let url = fresh_database();
    let store = open_store(&url);
    for n in 0..4 {
        create_requiring(&store, n, json!({"os": ["linux"]})).await;
    }
    // Another server's claim holding the first two, not yet committed.
    let held = hold_lock(
        &url,
        &format!("SELECT 1 FROM tasks WHERE task_id IN ('{}', '{}') FOR UPDATE", task_id(0), task_id(1)),
    )
    .await;
    assert_eq!(claimed(&store, claim_having("w", json!({"os": ["linux"]}), 1)).await, [task_id(2)]);
    held.send(()).unwrap();
}

/// `shoal_file_dimension_set` anchors each new set where the engine's rule
/// (`Dimensions::anchor`) says, counting the sets filed before it: sets generated over a small
/// vocabulary (so that counts tie and differ), each filed by a task made pending in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_are_anchored_where_the_engine_rule_says() {
    let url = fresh_database();
    let store = open_store(&url);
    let (keys, values) = (["gpu", "os", "pool"], ["a", "b", "c", "d", "e"]);
    let mut seed: u64 = 0x5eed;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut filed: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::new();
    let mut expected: Vec<(serde_json::Value, String, String)> = Vec::new();
    for n in 1..=60 {
        let mut raw = serde_json::Map::new();
        let mut chosen: Vec<&str> = keys.iter().copied().filter(|_| next(2) == 0).collect();
        chosen.push(keys[next(3)]);
        for key in chosen {
            let value = match next(3) {
                0 => format!("{}|{}", values[next(5)], values[next(5)]),
                _ => values[next(5)].to_owned(),
            };
            raw.insert(key.to_owned(), json!([value]));
        }
        let raw = serde_json::Value::Object(raw);
        create_requiring(&store, n, raw.clone()).await;
        let dimensions = Dimensions::parse_required("dimensions", serde_json::from_value(raw).unwrap()).unwrap();
        let stored = serde_json::to_value(&dimensions).unwrap();
        if expected.iter().any(|(seen, _, _)| *seen == stored) {
            continue;
        }
        let count = |key: &str, one: &str| filed.get(&(key.to_owned(), one.to_owned())).copied().unwrap_or(0);
        let (key, value) = dimensions.anchor(count).expect("every set requires a value");
        let (key, value) = (key.to_owned(), value.to_owned());
        for one in value.split('|') {
            *filed.entry((key.clone(), one.to_owned())).or_default() += 1;
        }
        expected.push((stored, key, value));
    }
    let rows: Vec<String> = column(
        &url,
        "SELECT dimensions::text || E'\\t' || anchor_key || E'\\t' || array_to_string(anchor_values, '|') \
         FROM dimension_sets",
    )
    .await;
    let mut stored: Vec<(serde_json::Value, String, String)> = rows
        .iter()
        .map(|row| {
            let mut parts = row.rsplitn(3, '\t');
            let (value, key, dimensions) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
            (serde_json::from_str(dimensions).unwrap(), key.to_owned(), value.to_owned())
        })
        .collect();
    let order = |(dimensions, _, _): &(serde_json::Value, String, String)| dimensions.to_string();
    stored.sort_by_key(order);
    expected.sort_by_key(order);
    assert!(expected.len() > 20, "the generated sets are mostly distinct: {}", expected.len());
    assert_eq!(stored, expected);
}
