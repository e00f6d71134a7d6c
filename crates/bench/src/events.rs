//! Events benchmarks against a private RabbitMQ (started with `scripts/rabbitmq`).

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::future::try_join_all;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};

use crate::server::Server;
use crate::{bytes_of, definition, spawn_creators, throughput};

/// `scripts/rabbitmq`: the one under the current directory (`scripts/bench.sh` runs from the
/// tree's root), else the one of the tree this was built from.
fn script() -> std::path::PathBuf {
    let here = std::path::Path::new("scripts/rabbitmq");
    if here.exists() {
        return here.to_path_buf();
    }
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rabbitmq")
}

/// A private broker, stopped when dropped.
struct Broker {
    dir: tempfile::TempDir,
    url: String,
}

impl Broker {
    fn start() -> anyhow::Result<Broker> {
        let dir = tempfile::tempdir()?;
        let out = std::process::Command::new(script()).arg("start").arg(dir.path()).output()?;
        anyhow::ensure!(out.status.success(), "starting RabbitMQ: {}", String::from_utf8_lossy(&out.stderr));
        Ok(Broker { url: String::from_utf8(out.stdout)?.trim().to_owned(), dir })
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = std::process::Command::new(script()).arg("stop").arg(self.dir.path()).output();
    }
}

/// Messages/s from a full outbox to RabbitMQ, then the throughput benchmark without and with
/// the broker.
pub(crate) async fn events(n_tasks: usize, drain_only: bool) -> anyhow::Result<()> {
    let broker = Broker::start()?;
    raw_rate(&broker.url, 2 * n_tasks).await?;
    drain_rate(&broker.url, n_tasks).await?;
    if drain_only {
        return Ok(());
    }
    let mut without = Vec::new();
    let mut with = Vec::new();
    for _ in 0..3 {
        without.push(throughput(n_tasks, 32, 32, 8, None).await?);
        with.push(throughput(n_tasks, 32, 32, 8, Some(&broker.url)).await?);
    }
    let median = |runs: &mut Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    let (without, with) = (median(&mut without), median(&mut with));
    println!(
        "events: throughput with every event also published to RabbitMQ (confirms) {with:.0} tasks/s vs \
         {without:.0} without a broker = {:.2}x (medians of 3)",
        with / without
    );
    Ok(())
}

/// The reference: lapin alone publishing persistent messages of the same size with confirms
/// into a durable queue, every publish issued before any confirm is awaited.
/// Shaped like a task-pending routing key (words and length), for the topic exchange's matching.
const ROUTING_KEY: &str = "primary.fN1GQ1qHR6yV1ZBkEr9ZwA.0._._.bench.events.-.YkL6ZrCrQyOuxhuwzbNTnw._";
async fn raw_rate(url: &str, n_messages: usize) -> anyhow::Result<()> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let (exchange, queue) = ("bench-raw", "bench-raw");
    let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare(exchange.into(), ExchangeKind::Topic, options, FieldTable::default()).await?;
    channel
        .queue_declare(queue.into(), QueueDeclareOptions { durable: true, ..Default::default() }, queue_arguments())
        .await?;
    channel
        .queue_bind(queue.into(), exchange.into(), "#".into(), QueueBindOptions::default(), FieldTable::default())
        .await?;
    // The size of a task-pending body.
    let body = vec![b'x'; 800];
    let properties = BasicProperties::default().with_delivery_mode(2);
    let started = Instant::now();
    for chunk in (0..n_messages).collect::<Vec<_>>().chunks(2048) {
        let publishes = chunk.iter().map(|_| {
            channel.basic_publish(
                exchange.into(),
                ROUTING_KEY.into(),
                BasicPublishOptions::default(),
                &body,
                properties.clone(),
            )
        });
        for confirm in try_join_all(publishes).await? {
            anyhow::ensure!(confirm.await?.is_ack(), "negative confirm");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "events: reference, lapin alone: {n_messages} persistent messages with confirms in batches of 2048 in \
         {secs:.2} s = {:.0} messages/s",
        n_messages as f64 / secs
    );
    channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await?;
    Ok(())
}

/// A classic queue in RabbitMQ's second storage format (3.10+), which a consumer chooses.
fn queue_arguments() -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-version".into(), AMQPValue::LongInt(2));
    arguments
}

/// Fills the outbox while the broker is unreachable, then times a restarted server draining
/// it into a queue bound to every message.
async fn drain_rate(url: &str, n_tasks: usize) -> anyhow::Result<()> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    let queue = "bench-drain";
    channel
        .queue_declare(queue.into(), QueueDeclareOptions { durable: true, ..Default::default() }, queue_arguments())
        .await?;
    for exchange in ["task-defined", "task-pending"] {
        let exchange = format!("exchange/taskcluster-queue/v1/{exchange}");
        let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
        channel.exchange_declare(exchange.as_str().into(), ExchangeKind::Topic, options, FieldTable::default()).await?;
        channel
            .queue_bind(
                queue.into(),
                exchange.as_str().into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }

    let dir = crate::server::private_dir()?;
    // Nothing listens on port 1: every message waits in the outbox.
    let unreachable = Server::start(Some(dir.path()), &["--amqp-url", "amqp://guest:guest@127.0.0.1:1/%2f"]).await?;
    let body = bytes_of(&definition("bench/events"))?;
    let mut creators =
        spawn_creators(std::slice::from_ref(&unreachable.base), body, n_tasks, 32, 0, &std::sync::Arc::default());
    while let Some(res) = creators.join_next().await {
        res??;
    }
    unreachable.stop().await;
    let n_messages = 2 * n_tasks as u32;

    let started = Instant::now();
    let server = Server::start(Some(dir.path()), &["--amqp-url", url]).await?;
    loop {
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        let state = channel.queue_declare(queue.into(), passive, FieldTable::default()).await?;
        if state.message_count() >= n_messages {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "events: {n_messages} messages from the outbox to RabbitMQ (persistent, publisher confirms, durable queue) \
         in {secs:.2} s = {:.0} messages/s (including the server's start)",
        f64::from(n_messages) / secs
    );
    server.stop().await;
    channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await.context("deleting the queue")?;
    Ok(())
}
