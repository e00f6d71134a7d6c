//! The outbox's row format, shared by both backends: one row per committed batch, holding
//! that batch's messages.
//!
//! A row per message cost an insert (and later a delete) per message on the writer's hot
//! path; a row per batch costs one. Each row is a JSON array readable with the databases'
//! own JSON functions: `[{"e": exchange, "k": routing key, "c": [CC keys], "b": body}, ...]`,
//! where the message with index `i` has sequence `first_seq + i`.

use serde::Deserialize;
use serde_json::value::RawValue;
use shoal_engine::message::{Exchange, Message};

use crate::StoreError;
use crate::outbox::OutboxEntry;
use crate::row::corrupt;

/// What the table holds when the store opens.
pub(crate) struct Bounds {
    /// The first message not yet published (`last + 1` when there is none).
    pub(crate) first: u64,
    /// The last sequence number written.
    pub(crate) last: u64,
}

impl Bounds {
    /// From the stored rows' lowest first and highest last sequence (none when empty) and
    /// the recorded publication mark: rows can outlive their publication by a batch.
    pub(crate) fn new(min_first: Option<i64>, max_last: Option<i64>, published: i64) -> Bounds {
        let last = max_last.map_or(published, |last| last.max(published)) as u64;
        let first = min_first.map_or(last + 1, |first| first.max(published + 1) as u64);
        Bounds { first, last }
    }

    pub(crate) fn unpublished(&self) -> u64 {
        (self.last + 1).saturating_sub(self.first)
    }
}

/// Appends the messages of one stored row (`first_seq, last_seq, text`) from sequence
/// `from` on, until `entries` holds `limit`.
pub(crate) fn append_row(
    entries: &mut Vec<OutboxEntry>,
    (first_seq, last_seq, text): (u64, u64, &str),
    from: u64,
    limit: usize,
) -> Result<(), StoreError> {
    let decoded = decode_row(first_seq, last_seq, text)?;
    let wanted = limit.saturating_sub(entries.len());
    entries.extend(decoded.into_iter().filter(|entry| entry.seq >= from).take(wanted));
    Ok(())
}

/// Decodes one stored row, checking it holds `first_seq..=last_seq`.
fn decode_row(first_seq: u64, last_seq: u64, text: &str) -> Result<Vec<OutboxEntry>, StoreError> {
    let decoded = decode(first_seq, text)?;
    if decoded.last().map(|entry| entry.seq) != Some(last_seq) {
        return Err(corrupt(format!("outbox row {first_seq} does not end at {last_seq}")));
    }
    Ok(decoded)
}

/// Encodes the messages of one batch as one row's JSON text.
pub(crate) fn encode<'a>(messages: impl Iterator<Item = &'a Message> + Clone) -> String {
    let size: usize = messages.clone().map(|message| message.body.len() + message.routing_key.len() + 48).sum();
    let mut out = String::with_capacity(size + 2);
    out.push('[');
    for (index, message) in messages.enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(r#"{"e":"#);
        push_string(&mut out, message.exchange.short_name());
        out.push_str(r#","k":"#);
        push_string(&mut out, &message.routing_key);
        if !message.cc.is_empty() {
            out.push_str(r#","c":["#);
            for (index, key) in message.cc.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_string(&mut out, key);
            }
            out.push(']');
        }
        // The body is JSON already: embedded as it is, not escaped into a string.
        out.push_str(r#","b":"#);
        out.push_str(&message.body);
        out.push('}');
    }
    out.push(']');
    out
}

fn push_string(out: &mut String, text: &str) {
    // A &str always serializes.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

#[derive(Deserialize)]
struct Stored {
    e: String,
    k: String,
    #[serde(default)]
    c: Vec<String>,
    b: Box<RawValue>,
}

fn decode(first_seq: u64, text: &str) -> Result<Vec<OutboxEntry>, StoreError> {
    let stored: Vec<Stored> = serde_json::from_str(text).map_err(corrupt)?;
    stored
        .into_iter()
        .zip(first_seq..)
        .map(|(stored, seq)| {
            let exchange =
                Exchange::parse(&stored.e).ok_or_else(|| corrupt(format!("outbox exchange {}", stored.e)))?;
            let message = Message { exchange, routing_key: stored.k, cc: stored.c, body: stored.b.get().to_owned() };
            Ok(OutboxEntry { seq, message })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A message of sequence `seq` on `exchange` with CC keys `cc` and body `body`.
    pub(crate) fn entry(seq: u64, exchange: Exchange, cc: &[&str], body: &str) -> OutboxEntry {
        let message = Message {
            exchange,
            routing_key: format!("primary.t{seq}.0._"),
            cc: cc.iter().map(|key| (*key).to_owned()).collect(),
            body: body.to_owned(),
        };
        OutboxEntry { seq, message }
    }

    #[test]
    fn a_batch_round_trips_with_bodies_embedded_as_json() {
        let entries = vec![
            entry(7, Exchange::TaskDefined, &[], r#"{"version":1,"status":{"state":"pending"}}"#),
            entry(8, Exchange::TaskPending, &["route.a.\"q\"", "route.b"], r#"{"text":"a \"quoted\" word\n"}"#),
        ];
        let text = encode(entries.iter().map(|entry| &entry.message));
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value[1]["b"]["text"], "a \"quoted\" word\n", "bodies are JSON values, not strings");
        assert_eq!(value[1]["c"][0], "route.a.\"q\"");
        assert!(value[0].get("c").is_none(), "no CC keys, no field");
        assert_eq!(decode(7, &text).unwrap(), entries);
    }
}
