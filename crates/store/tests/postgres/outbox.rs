//! The outbox's ordering when message ids are drawn in one order and committed in another:
//! a sequencing step waits at a hole and skips it once its transaction rolled back.

use super::*;

/// A transaction of another server that has drawn an outbox id and not yet ended.
pub(crate) fn draw_id_and_hold(url: &str) -> (postgres::Client, i64) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    // Like a transition, it has a transaction id (it wrote rows) before it stages.
    client.batch_execute("BEGIN; SELECT pg_current_xact_id()").unwrap();
    let row = client
        .query_one(
            "INSERT INTO outbox_pending (id, count, messages) VALUES (nextval('outbox_ids'), 1, \
             '[{\"e\":\"task-defined\",\"k\":\"held\",\"b\":{}}]') RETURNING id",
            &[],
        )
        .unwrap();
    (client, row.get(0))
}

/// Waits until a sequencing step has stopped at the hole `id` (the state it records); then
/// says how many staged rows are visible (committed) and waiting.
pub(crate) fn wait_until_held(url: &str, id: i64) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let mut listener = postgres::Client::connect(url, postgres::NoTls).unwrap();
    listener.batch_execute("LISTEN shoal_outbox").unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        assert!(std::time::Instant::now() < give_up, "no sequencing step stopped at the held id {id}");
        let gap: Option<i64> = client.query_one("SELECT gap_id FROM outbox_state", &[]).unwrap().get(0);
        if gap == Some(id) {
            return client.query_one("SELECT count(*) FROM outbox_pending", &[]).unwrap().get(0);
        }
        // A step ran; look again after the next (the sequencer retries a hole every pace).
        let _ = postgres::fallible_iterator::FallibleIterator::next(
            &mut listener.notifications().timeout_iter(std::time::Duration::from_millis(50)),
        );
    }
}

/// Runs `end` ("COMMIT" or "ROLLBACK") on the held transaction once a step waits on it;
/// returns how many committed staged rows were waiting then.
pub(crate) async fn end_when_held(url: &str, held: (postgres::Client, i64), end: &'static str) -> i64 {
    let url = url.to_owned();
    // The blocking client lives and dies on a blocking thread, even when an assertion fails.
    tokio::task::spawn_blocking(move || {
        let (mut client, id) = held;
        let waiting = wait_until_held(&url, id);
        client.batch_execute(end).unwrap();
        waiting
    })
    .await
    .unwrap()
}

/// The routing keys of everything in the feed, in order (after settling).
pub(crate) async fn routing_keys(store: &Store) -> Vec<String> {
    messages(store).await.into_iter().map(|message| message.routing_key).collect()
}

/// Everything in the feed, in order (after settling).
pub(crate) async fn messages(store: &Store) -> Vec<Message> {
    store.settle_outbox().await.unwrap();
    let feed = store.outbox();
    let mut next = feed.first();
    let mut keys = Vec::new();
    loop {
        let entries = match feed.take(next, 100) {
            Next::Buffered(entries) => entries.iter().map(|entry| (**entry).clone()).collect(),
            Next::Stored => store.read(move |reads| reads.outbox(next, 100)).await.unwrap(),
            Next::Idle => return keys,
        };
        next = entries.last().map_or(next, |entry| entry.seq + 1);
        keys.extend(entries.into_iter().map(|entry| entry.message));
    }
}

pub(crate) async fn hold(url: &str) -> (postgres::Client, i64) {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || draw_id_and_hold(&url)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_wait_for_an_earlier_id_still_committing_and_follow_it() {
    let url = fresh_database();
    let store = open_store(&url);
    create(&store, 1).await;
    let held = hold(&url).await;
    create(&store, 2).await;
    let waiting = end_when_held(&url, held, "COMMIT").await;
    assert_eq!(waiting, 1, "task 2's committed messages waited behind the held id");
    let keys = routing_keys(&store).await;
    assert_eq!(keys.len(), 5, "{keys:?}");
    assert_eq!(keys[2], "held", "in id order, not commit order: {keys:?}");
    assert!(keys[3].contains("00000002"), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_whose_transaction_rolled_back_is_skipped() {
    let url = fresh_database();
    let store = open_store(&url);
    create(&store, 1).await;
    let held = hold(&url).await;
    create(&store, 2).await;
    end_when_held(&url, held, "ROLLBACK").await;
    let keys = routing_keys(&store).await;
    assert_eq!(keys.len(), 4, "both tasks' messages, nothing of the rolled-back one: {keys:?}");
    assert!(keys[2].contains("00000002"), "{keys:?}");
}
