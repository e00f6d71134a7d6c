//! Events through a real RabbitMQ: a private broker under a temporary directory
//! (`scripts/rabbitmq`), consumers bound with Taskcluster's patterns, and a crash of the
//! server while the broker is down; two servers on one PostgreSQL database publishing once.

#[path = "../../store/tests/support/postgres.rs"]
mod pg;
mod support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties, Consumer, ExchangeKind};
use serde_json::{Value, json};
use tokio::process::Child;

const Q: &str = "exchange/taskcluster-queue/v1/";

/// A private broker; stopped when dropped, even when the test fails.
struct Broker {
    dir: tempfile::TempDir,
    url: String,
}

/// `scripts/rabbitmq` of the tree under test: cargo names it when it runs the tests (the path
/// compiled in may be another clone's when builds share a target directory).
fn script() -> PathBuf {
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest.join("../../scripts/rabbitmq")
}

fn rabbitmq(command: &str, dir: &Path) -> String {
    let out = std::process::Command::new(script()).arg(command).arg(dir).output().expect("run scripts/rabbitmq");
    assert!(out.status.success(), "scripts/rabbitmq {command}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

impl Broker {
    fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let url = rabbitmq("start", dir.path());
        Broker { dir, url }
    }

    /// A broker outage: connections drop and new ones are refused until [`Broker::up`].
    fn down(&self) {
        rabbitmq("stop-app", self.dir.path());
    }

    fn up(&self) {
        rabbitmq("start-app", self.dir.path());
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        rabbitmq("stop", self.dir.path());
    }
}

async fn server(data_dir: &Path, amqp_url: &str) -> (Child, String) {
    let (child, root) = support::start_server(data_dir, &["--claim-wait", "0", "--amqp-url", amqp_url]).await;
    (child, format!("{root}/api/queue/v1"))
}

/// A consumer on queue `name` bound as `bindings` (exchange short name, pattern).
async fn consumer(url: &str, name: &str, bindings: &[(&str, &str)]) -> (Connection, Consumer) {
    let connection = Connection::connect(url, ConnectionProperties::default()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_declare(name.into(), QueueDeclareOptions { durable: true, ..Default::default() }, FieldTable::default())
        .await
        .unwrap();
    for (exchange, pattern) in bindings {
        let exchange = format!("{Q}{exchange}");
        // Declared the way the server declares them, so binding works before it first connects.
        let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
        channel
            .exchange_declare(exchange.as_str().into(), ExchangeKind::Topic, options, FieldTable::default())
            .await
            .unwrap();
        channel
            .queue_bind(
                name.into(),
                exchange.as_str().into(),
                (*pattern).into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    let consumer = channel
        .basic_consume(name.into(), "test".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    (connection, consumer)
}

/// One received message: exchange short name, routing key, CC keys, JSON body.
struct Received {
    exchange: String,
    routing_key: String,
    cc: Vec<String>,
    body: Value,
    persistent: bool,
}

async fn receive(consumer: &mut Consumer) -> Received {
    // A consumer that hears nothing would hang the suite; fail loudly instead.
    let delivery = tokio::time::timeout(Duration::from_secs(60), consumer.next())
        .await
        .expect("a message within 60 s")
        .expect("the consumer is open")
        .expect("a delivery");
    delivery.ack(BasicAckOptions::default()).await.unwrap();
    let properties = &delivery.properties;
    let cc = properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get("CC").cloned())
        .map(|cc| match cc {
            AMQPValue::FieldArray(keys) => keys
                .as_slice()
                .iter()
                .map(|key| match key {
                    AMQPValue::LongString(key) => key.to_string(),
                    other => panic!("CC entry {other:?}"),
                })
                .collect(),
            other => panic!("CC header {other:?}"),
        })
        .unwrap_or_default();
    assert_eq!(properties.content_type().as_ref().map(|c| c.as_str()), Some("application/json"));
    Received {
        exchange: delivery.exchange.as_str().trim_start_matches(Q).to_owned(),
        routing_key: delivery.routing_key.as_str().to_owned(),
        cc,
        body: serde_json::from_slice(&delivery.data).unwrap(),
        persistent: properties.delivery_mode() == &Some(2),
    }
}

fn definition(queue: &str, routes: &[&str]) -> Value {
    let now = shoal_client::now();
    json!({
        "taskQueueId": queue,
        "created": now.to_string(),
        "deadline": now.plus_secs(3600).to_string(),
        "routes": routes,
        "payload": {},
        "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
    })
}

async fn call(http: &reqwest::Client, method: reqwest::Method, url: String, body: Value) -> Value {
    let res = support::signed(http, method, &url, Some(&body)).send().await.unwrap();
    assert!(res.status().is_success(), "{url}: {}", res.status());
    res.json().await.unwrap()
}

/// Claims and completes up to `n` tasks of `queue`; returns their ids.
async fn complete(http: &reqwest::Client, base: &str, queue: &str, n: usize) -> Vec<String> {
    let mut done = Vec::new();
    while done.len() < n {
        let url = format!("{base}/claim-work/{}", queue.replace('/', "%2F"));
        let claims = call(
            http,
            reqwest::Method::POST,
            url,
            json!({"workerGroup": "wg", "workerId": "w1", "tasks": n - done.len()}),
        )
        .await;
        for claim in claims["tasks"].as_array().unwrap() {
            let task_id = claim["status"]["taskId"].as_str().unwrap().to_owned();
            call(http, reqwest::Method::POST, format!("{base}/task/{task_id}/runs/0/completed"), json!({})).await;
            done.push(task_id);
        }
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_gets_every_message_with_routes_and_survives_a_crash_while_it_is_down() {
    let broker = Broker::start();
    let http = reqwest::Client::new();

    // 1. Taskcluster's binding patterns, CC routes, persistent JSON messages.
    let dir = tempfile::tempdir().unwrap();
    let (_connection, mut listener) = consumer(
        &broker.url,
        "scenario",
        &[
            ("task-defined", "route.index.amqp.#"),
            ("task-pending", "primary.*.*.*.*.amqp.q.#"),
            ("task-running", "primary.*.*.wg.w1.#"),
            ("task-completed", "primary.#"),
            ("task-group-resolved", "#"),
        ],
    )
    .await;
    let (mut server1, base) = server(&dir.path().join("data"), &broker.url).await;
    let task_id = slugid::nice();
    call(&http, reqwest::Method::PUT, format!("{base}/task/{task_id}"), definition("amqp/q", &["index.amqp.build"]))
        .await;
    call(&http, reqwest::Method::PUT, format!("{base}/task/{}", slugid::nice()), definition("other/q", &[])).await;
    assert_eq!(complete(&http, &base, "amqp/q", 1).await, vec![task_id.clone()]);
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(receive(&mut listener).await);
    }
    let exchanges: Vec<&str> = got.iter().map(|message| message.exchange.as_str()).collect();
    assert_eq!(exchanges, ["task-defined", "task-pending", "task-running", "task-completed", "task-group-resolved"]);
    for message in &got[..4] {
        assert_eq!(message.body["status"]["taskId"], task_id.as_str(), "other/q's task matched no binding");
        assert_eq!(message.cc, vec!["route.index.amqp.build"], "{}", message.exchange);
        assert_eq!(message.body["version"], 1);
        assert!(message.persistent);
    }
    assert_eq!(got[0].routing_key, format!("primary.{task_id}._._._.amqp.q.-.{task_id}._"));
    assert_eq!(got[2].routing_key, format!("primary.{task_id}.0.wg.w1.amqp.q.-.{task_id}._"));
    assert_eq!(got[2].body["workerId"], "w1");
    assert!(got[4].cc.is_empty());
    assert_eq!(got[4].body["taskGroupId"], task_id.as_str());
    server1.kill().await.unwrap();

    // 2. The broker goes down; the server commits, acknowledges, and is killed before it
    //    could publish. After both come back, every committed transition's message arrives.
    let every_exchange = shoal_engine::message::Exchange::ALL.map(|exchange| (exchange.short_name(), "#"));
    // The durable queue and its bindings outlive the outage; the connection does not.
    drop(consumer(&broker.url, "crash", &every_exchange).await);
    broker.down();
    let crash_dir = tempfile::tempdir().unwrap();
    let (mut server2, base) = server(&crash_dir.path().join("data"), &broker.url).await;
    let mut created = Vec::new();
    for _ in 0..20 {
        let task_id = slugid::nice();
        call(&http, reqwest::Method::PUT, format!("{base}/task/{task_id}"), definition("crash/q", &[])).await;
        created.push(task_id);
    }
    let completed = complete(&http, &base, "crash/q", 10).await;
    server2.kill().await.unwrap();
    broker.up();
    let (_connection, mut everything) = consumer(&broker.url, "crash", &every_exchange).await;
    let (_server3, _) = server(&crash_dir.path().join("data"), &broker.url).await;

    let mut expected: HashSet<(String, String)> = HashSet::new();
    for task_id in &created {
        expected.insert(("task-defined".into(), task_id.clone()));
        expected.insert(("task-pending".into(), task_id.clone()));
    }
    for task_id in &completed {
        for exchange in ["task-running", "task-completed", "task-group-resolved"] {
            expected.insert((exchange.into(), task_id.clone()));
        }
    }
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    while !expected.iter().all(|key| seen.contains_key(key)) {
        let message = receive(&mut everything).await;
        let task_id = message.body["status"]["taskId"].as_str().or(message.body["taskGroupId"].as_str()).unwrap();
        *seen.entry((message.exchange.clone(), task_id.to_owned())).or_default() += 1;
    }
    assert_eq!(expected.len(), 70);
}

/// The next message of an event stream (a stream that hears nothing fails the test).
async fn next_streamed(stream: &mut shoal_client::EventStream) -> Value {
    let next = tokio::time::timeout(Duration::from_secs(60), stream.next_message()).await;
    next.expect("a message within 60 s").expect("reading the stream").expect("the stream ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_one_database_publish_each_message_once_and_stream_each_others_messages() {
    let broker = Broker::start();
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let http = reqwest::Client::new();
    let (_connection, mut listener) = consumer(&broker.url, "fleet", &[("task-completed", "#")]).await;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut servers = Vec::new();
    for dir in &dirs {
        let args = ["--claim-wait", "0", "--amqp-url", &broker.url, "--database", &url];
        servers.push(support::start_server(dir.path(), &args).await);
    }
    let roots: Vec<String> = servers.iter().map(|(_, root)| root.clone()).collect();
    let bases: Vec<String> = roots.iter().map(|root| format!("{root}/api/queue/v1")).collect();
    let mut streams = Vec::new();
    for root in &roots {
        let client = support::client(root);
        let bindings = [(format!("{Q}task-completed"), "#".to_owned())];
        streams.push(client.listen(&bindings).await.expect("subscribed"));
    }

    // Created on one server, claimed and completed through the other.
    let mut created = HashSet::new();
    for n in 0..20 {
        let task_id = slugid::nice();
        let url = format!("{}/task/{task_id}", bases[n % 2]);
        call(&http, reqwest::Method::PUT, url, definition("fleet/q", &[])).await;
        created.insert(task_id);
    }
    let mut done: HashSet<String> = complete(&http, &bases[1], "fleet/q", 10).await.into_iter().collect();
    done.extend(complete(&http, &bases[0], "fleet/q", 10).await);
    assert_eq!(done, created);
    // A last task, completed after the others: once its message arrives, every earlier one
    // has been published (one publisher, in order), and any second publisher's copies too.
    let last = slugid::nice();
    call(&http, reqwest::Method::PUT, format!("{}/task/{last}", bases[0]), definition("fleet/last", &[])).await;
    complete(&http, &bases[1], "fleet/last", 1).await;

    let mut published = Vec::new();
    loop {
        let message = receive(&mut listener).await;
        let task_id = message.body["status"]["taskId"].as_str().unwrap().to_owned();
        if task_id == last {
            break;
        }
        published.push(task_id);
    }
    let distinct: HashSet<String> = published.iter().cloned().collect();
    assert_eq!(distinct, created, "every completion reached the broker");
    assert_eq!(published.len(), created.len(), "and only once: one server publishes");

    // Each server's own stream carries the messages committed through either server.
    for (n, stream) in streams.iter_mut().enumerate() {
        let mut streamed = HashSet::new();
        while streamed.len() < created.len() + 1 {
            let message = next_streamed(stream).await;
            streamed.insert(message["payload"]["status"]["taskId"].as_str().unwrap().to_owned());
        }
        assert!(streamed.is_superset(&created) && streamed.contains(&last), "server {n}'s stream");
    }
    for (mut child, _) in servers {
        child.kill().await.unwrap();
    }
}

/// Waits until the broker has exchange `name` (declared by someone else), trying passively:
/// there is no event to await for another process's declaration.
async fn exchange_appears(connection: &Connection, name: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // A failed passive declare closes its channel: each try takes a fresh one.
        let channel = connection.create_channel().await.unwrap();
        let options = ExchangeDeclareOptions { passive: true, ..Default::default() };
        if channel.exchange_declare(name.into(), ExchangeKind::Topic, options, FieldTable::default()).await.is_ok() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the server never declared {name}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_binds_before_anything_is_published() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (_server, base) = server(&dir.path().join("data"), &broker.url).await;
    let connection = Connection::connect(&broker.url, ConnectionProperties::default()).await.unwrap();
    let exchange = format!("{Q}task-defined");
    exchange_appears(&connection, &exchange).await;
    // Bound without declaring anything, as Taskcluster's consumers do.
    let channel = connection.create_channel().await.unwrap();
    let queue_options = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("early".into(), queue_options, FieldTable::default()).await.unwrap();
    channel
        .queue_bind(
            "early".into(),
            exchange.as_str().into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume("early".into(), "test".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let task_id = slugid::nice();
    call(&reqwest::Client::new(), reqwest::Method::PUT, format!("{base}/task/{task_id}"), definition("early/q", &[]))
        .await;
    let got = receive(&mut consumer).await;
    assert_eq!(got.exchange, "task-defined");
    assert_eq!(got.body["status"]["taskId"], task_id.as_str());
}
