//! Publishing to an AMQP 0-9-1 broker (RabbitMQ) the way Taskcluster's queue does: durable
//! topic exchanges, persistent JSON messages, `CC` headers for task routes, publisher confirms.

use futures_util::future::try_join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use shoal_engine::message::{Exchange, Message};
use tokio::sync::Mutex;

use crate::BusError;

/// A connection to one broker, made on first use and remade after any failure.
pub struct AmqpBus {
    url: String,
    link: Mutex<Option<Link>>,
}

struct Link {
    connection: Connection,
    channel: Channel,
}

/// How often a connection is looked at while it is up.
const HEALTH_CHECK: std::time::Duration = std::time::Duration::from_secs(2);
/// Longest wait between attempts to reach a broker that is down.
const MAX_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

impl AmqpBus {
    /// A bus publishing to the broker at `url` (`amqp://user:pass@host:port/vhost`, or `amqps://`).
    ///
    /// # Errors
    /// When `url` is not an AMQP URL.
    pub fn new(url: &str) -> Result<AmqpBus, BusError> {
        url.parse::<lapin::uri::AMQPUri>()
            .map_err(|err| BusError::Unavailable(format!("amqpUrl: must be an amqp:// or amqps:// URL ({err})")))?;
        Ok(AmqpBus { url: url.to_owned(), link: Mutex::new(None) })
    }

    /// The URL without its password, for logs.
    #[must_use]
    pub fn redacted_url(&self) -> String {
        match (self.url.find("://"), self.url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let userinfo = &self.url[scheme + 3..at];
                let user = userinfo.split(':').next().unwrap_or_default();
                format!("{}{user}:***{}", &self.url[..scheme + 3], &self.url[at..])
            }
            _ => self.url.clone(),
        }
    }

    /// Publishes `messages` in order and waits until the broker confirmed every one.
    pub(crate) async fn publish(&self, messages: &[&Message]) -> Result<(), BusError> {
        let mut link = self.link.lock().await;
        if !link.as_ref().is_some_and(Link::is_up) {
            *link = Some(self.connect().await?);
            tracing::info!(broker = %self.redacted_url(), "connected to the broker; exchanges declared");
        }
        let channel = link.as_ref().map(|link| link.channel.clone()).ok_or_else(|| unavailable("no channel"))?;
        let res = publish_confirmed(&channel, messages).await;
        if let Err(err) = &res {
            // Whatever went wrong, the next attempt starts from a fresh connection.
            tracing::warn!(error = %err, "publishing to the broker failed; reconnecting");
            *link = None;
        }
        res
    }

    async fn connect(&self) -> Result<Link, BusError> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default()).await.map_err(unavailable)?;
        let channel = connection.create_channel().await.map_err(unavailable)?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(unavailable)?;
        for exchange in Exchange::ALL {
            let options = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
            channel
                .exchange_declare(exchange.name().into(), ExchangeKind::Topic, options, FieldTable::default())
                .await
                .map_err(unavailable)?;
        }
        Ok(Link { connection, channel })
    }

    /// Keeps a connection to the broker, with the exchanges declared: at once, again after
    /// every reconnect, retrying with backoff while the broker is down. Consumers may then
    /// bind their queues before anything was published. Never returns.
    pub(crate) async fn keep_connected(&self) {
        let mut retry = std::time::Duration::from_secs(1);
        loop {
            let up = {
                let mut link = self.link.lock().await;
                if link.as_ref().is_some_and(Link::is_up) {
                    true
                } else {
                    match self.connect().await {
                        Ok(connected) => {
                            *link = Some(connected);
                            tracing::info!(broker = %self.redacted_url(), "connected to the broker; exchanges declared");
                            true
                        }
                        Err(err) => {
                            *link = None;
                            tracing::warn!(broker = %self.redacted_url(), error = %err, "cannot reach the broker; retrying");
                            false
                        }
                    }
                }
            };
            let wait = if up {
                retry = std::time::Duration::from_secs(1);
                HEALTH_CHECK
            } else {
                retry = (retry * 2).min(MAX_RETRY);
                retry
            };
            tokio::time::sleep(wait).await;
        }
    }
}

impl Link {
    fn is_up(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

async fn publish_confirmed(channel: &Channel, messages: &[&Message]) -> Result<(), BusError> {
    // Each publish queues its frames (and takes its delivery tag) on its first poll, and
    // `try_join_all` polls them first in order: the batch goes out in order, written to the
    // socket together instead of one wake-up of lapin's I/O loop per message. The confirms
    // are collected after, so the broker acknowledges a window of messages at once.
    let publishes = messages.iter().map(|message| {
        channel.basic_publish(
            message.exchange.name().into(),
            message.routing_key.as_str().into(),
            BasicPublishOptions::default(),
            message.body.as_bytes(),
            properties(message),
        )
    });
    let confirms = try_join_all(publishes).await.map_err(unavailable)?;
    for confirm in confirms {
        let confirmation = confirm.await.map_err(unavailable)?;
        if confirmation.is_nack() {
            return Err(BusError::Refused("the broker answered with a negative confirm".into()));
        }
    }
    Ok(())
}

fn properties(message: &Message) -> BasicProperties {
    let properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into());
    if message.cc.is_empty() {
        return properties;
    }
    let cc: Vec<AMQPValue> =
        message.cc.iter().map(|key| AMQPValue::LongString(LongString::from(key.as_bytes().to_vec()))).collect();
    let mut headers = FieldTable::default();
    headers.insert("CC".into(), AMQPValue::FieldArray(FieldArray::from(cc)));
    properties.with_headers(headers)
}

fn unavailable(err: impl std::fmt::Display) -> BusError {
    BusError::Unavailable(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_passwords_kept_out_of_logs() {
        let bus = AmqpBus::new("amqp://shoal:secret@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(bus.redacted_url(), "amqp://shoal:***@127.0.0.1:5672/%2f");
        assert!(AmqpBus::new("http://example.com").is_err());
    }

    #[test]
    fn routes_travel_as_cc_headers() {
        let message = Message {
            exchange: Exchange::TaskCompleted,
            routing_key: "primary.x".into(),
            cc: vec!["route.a.b".into()],
            body: "{}".into(),
        };
        let properties = properties(&message);
        assert_eq!(properties.delivery_mode(), &Some(2));
        let headers = properties.headers().as_ref().expect("headers");
        let cc = headers.inner().get("CC").expect("CC header");
        assert!(matches!(cc, AMQPValue::FieldArray(keys) if keys.as_slice().len() == 1), "{cc:?}");
    }
}
