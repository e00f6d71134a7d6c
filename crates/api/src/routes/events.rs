//! The embedded event stream: Server-Sent Events over bindings, no broker needed.
//!
//! `GET /api/events/v1/connect/?bindings={"bindings":[{"exchange":..,"routingKeyPattern":..}]}`
//! as Taskcluster's events service took it. Events: `ready` once the bindings are in place,
//! `message` per match (`id:` is its outbox sequence), `error` when the client fell behind
//! (then the stream ends), and `ping` to keep idle connections open.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use shoal_engine::topic::Binding;
use shoal_service::{Delivery, Subscription};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::parse_json;
use crate::serve::PeerAddr;

/// Most bindings one connection may hold.
const MAX_BINDINGS: usize = 256;

#[derive(Deserialize)]
pub(crate) struct ConnectQuery {
    bindings: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingsInput {
    bindings: Vec<BindingInput>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BindingInput {
    exchange: String,
    #[serde(alias = "routingKey")]
    routing_key_pattern: Option<String>,
}

/// The message as a Pulse consumer sees it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageEvent<'a> {
    exchange: &'static str,
    routing_key: &'a str,
    redelivered: bool,
    routes: Vec<&'a str>,
    payload: &'a RawValue,
}

/// `GET /api/events/v1/connect/`.
pub(crate) async fn connect(
    State(state): State<AppState>,
    peer: Option<Extension<PeerAddr>>,
    query: axum::extract::Query<ConnectQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let bindings = parse_bindings(query.0.bindings.as_deref())?;
    // Requests made in-process (no connection) are not counted.
    let slot = peer.map(|Extension(PeerAddr(peer))| state.subscribers.take(peer)).transpose()?;
    let subscription = state.queue.subscribe(bindings);
    // The subscription exists before the client hears `ready`: anything it does after that
    // is seen.
    let ready = futures_util::stream::once(async { Ok(Event::default().event("ready").data("{}")) });
    let stream = ready.chain(futures_util::stream::unfold(Some(subscription), next_event)).map(move |event| {
        // The slot lives as long as the stream.
        let _held = &slot;
        event
    });
    let ping = Event::default().event("ping").data("{}");
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(20)).event(ping)))
}

fn parse_bindings(raw: Option<&str>) -> Result<Vec<Binding>, ApiError> {
    let raw = raw.ok_or_else(|| {
        ApiError::bad_argument(
            "bindings: required query parameter, JSON {\"bindings\": [{\"exchange\", \"routingKeyPattern\"}]}",
        )
    })?;
    let input: BindingsInput = parse_json(raw.as_bytes())?;
    if input.bindings.is_empty() || input.bindings.len() > MAX_BINDINGS {
        return Err(ApiError::invalid_input(format!("bindings: must hold 1 to {MAX_BINDINGS} bindings")));
    }
    input
        .bindings
        .iter()
        .enumerate()
        .map(|(n, binding)| {
            let pattern = binding.routing_key_pattern.as_deref().unwrap_or("#");
            Binding::parse(&binding.exchange, pattern)
                .map_err(|rejection| ApiError::invalid_input(format!("bindings[{n}].{rejection}")))
        })
        .collect()
}

/// The next event of an open stream; `None` (the state) once the stream must end.
async fn next_event(subscription: Option<Subscription>) -> Option<(Result<Event, Infallible>, Option<Subscription>)> {
    let mut subscription = subscription?;
    match subscription.next().await {
        Delivery::Message(entry) => {
            let message = &entry.message;
            let Ok(payload) = serde_json::from_str::<&RawValue>(&message.body) else {
                return Some((Ok(Event::default().comment("unreadable message skipped")), Some(subscription)));
            };
            let event = MessageEvent {
                exchange: message.exchange.name(),
                routing_key: &message.routing_key,
                redelivered: false,
                routes: message.cc.iter().filter_map(|key| key.strip_prefix("route.")).collect(),
                payload,
            };
            let data = serde_json::to_string(&event).unwrap_or_default();
            let event = Event::default().event("message").id(entry.seq.to_string()).data(data);
            Some((Ok(event), Some(subscription)))
        }
        Delivery::Missed(n_missed) => {
            let data = serde_json::json!({
                "message": format!("this listener fell behind and missed {n_missed} messages; reconnect and resync"),
            });
            Some((Ok(Event::default().event("error").data(data.to_string())), None))
        }
        Delivery::Closed => None,
    }
}
