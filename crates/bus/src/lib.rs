//! Where committed messages go once they leave the outbox.
//!
//! Subscribers inside the server (the event stream) hear every commit straight from the
//! store's tap, so the bus is only about durable delivery elsewhere: [`Bus::Local`] has no
//! broker and acknowledges at once; [`Bus::Amqp`] publishes to RabbitMQ and acknowledges
//! once the broker confirmed every message.

mod amqp;

pub use amqp::AmqpBus;

use shoal_engine::message::Message;

/// The bus backends.
pub enum Bus {
    /// No broker: messages reach only the server's own subscribers.
    Local,
    /// An AMQP 0-9-1 broker (RabbitMQ).
    Amqp(Box<AmqpBus>),
}

/// What publishing can fail with; the publisher retries the same messages.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The broker could not be reached or dropped the connection.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// The broker refused a message (negative confirm).
    #[error("broker refused a message: {0}")]
    Refused(String),
}

impl Bus {
    /// Publishes `messages` in order; returns once the bus has taken all of them.
    ///
    /// # Errors
    /// When the broker is unreachable or refuses; none of the batch counts as published.
    pub async fn publish(&self, messages: &[&Message]) -> Result<(), BusError> {
        match self {
            Bus::Local => Ok(()),
            Bus::Amqp(bus) => bus.publish(messages).await,
        }
    }

    /// Keeps the bus connected with its exchanges declared (a broker's; nothing for the
    /// local bus). Never returns; run it beside the publisher.
    pub async fn keep_connected(&self) {
        match self {
            Bus::Local => std::future::pending().await,
            Bus::Amqp(bus) => bus.keep_connected().await,
        }
    }

    /// A short description for logs.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Bus::Local => "in-process".into(),
            Bus::Amqp(bus) => format!("amqp {}", bus.redacted_url()),
        }
    }
}
