//! The outbox table: one row per committed write batch, holding that batch's messages.
//!
//! A row per message cost an insert (and later a delete) per message on the writer's hot
//! path; a row per batch costs one. Each row is a JSON array readable with SQLite's own JSON
//! functions: `[{"e": exchange, "k": routing key, "c": [CC keys], "b": body}, ...]`, where
//! the message with index `i` has sequence `first_seq + i`.

use rusqlite::{Connection, params};
use serde::Deserialize;
use serde_json::value::RawValue;
use shoal_engine::message::{Exchange, Message};

use super::row;
use crate::StoreError;
use crate::outbox::OutboxEntry;

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

/// Reads where the outbox stands: rows can outlive their publication by a batch, so the
/// recorded publication mark is taken into account.
pub(crate) fn bounds(conn: &Connection) -> Result<Bounds, StoreError> {
    let (first, last): (Option<i64>, Option<i64>) =
        conn.query_row("SELECT MIN(first_seq), MAX(last_seq) FROM outbox_batches", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    let published: i64 = conn.query_row("SELECT published FROM outbox_state", [], |row| row.get(0))?;
    Ok(Bounds::new(first, last, published))
}

/// Stores the messages of one write batch (consecutive sequence numbers) in one row.
pub(crate) fn insert(conn: &Connection, entries: &[OutboxEntry]) -> Result<(), StoreError> {
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else { return Ok(()) };
    let mut stmt =
        conn.prepare_cached("INSERT INTO outbox_batches (first_seq, last_seq, messages) VALUES (?1, ?2, ?3)")?;
    stmt.execute(params![first.seq as i64, last.seq as i64, encode(entries.iter().map(|entry| &entry.message))])?;
    Ok(())
}

/// Deletes every row published in full and records how far publication went.
pub(crate) fn trim(conn: &Connection, published: u64) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM outbox_batches WHERE last_seq <= ?1")?.execute([published as i64])?;
    conn.prepare_cached("UPDATE outbox_state SET published = ?1")?.execute([published as i64])?;
    Ok(())
}

/// Up to `limit` messages from sequence `from` on, in order.
pub(crate) fn read(conn: &Connection, from: u64, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
    // Start at the row holding `from`: the greatest first_seq not after it.
    let mut stmt = conn.prepare_cached(
        "SELECT first_seq, last_seq, messages FROM outbox_batches WHERE first_seq >= \
         coalesce((SELECT max(first_seq) FROM outbox_batches WHERE first_seq <= ?1), 0) ORDER BY first_seq",
    )?;
    let mut rows = stmt.query([from as i64])?;
    let mut entries = Vec::new();
    while entries.len() < limit
        && let Some(row) = rows.next()?
    {
        let (first_seq, last_seq): (i64, i64) = (row.get(0)?, row.get(1)?);
        let text = row.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?;
        append_row(&mut entries, (first_seq as u64, last_seq as u64, text), from, limit)?;
    }
    Ok(entries)
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
        return Err(row::corrupt(format!("outbox row {first_seq} does not end at {last_seq}")));
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
    let stored: Vec<Stored> = serde_json::from_str(text).map_err(row::corrupt)?;
    stored
        .into_iter()
        .zip(first_seq..)
        .map(|(stored, seq)| {
            let exchange =
                Exchange::parse(&stored.e).ok_or_else(|| row::corrupt(format!("outbox exchange {}", stored.e)))?;
            let message = Message { exchange, routing_key: stored.k, cc: stored.c, body: stored.b.get().to_owned() };
            Ok(OutboxEntry { seq, message })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, exchange: Exchange, cc: &[&str], body: &str) -> OutboxEntry {
        let message = Message {
            exchange,
            routing_key: format!("primary.t{seq}.0._"),
            cc: cc.iter().map(|key| (*key).to_owned()).collect(),
            body: body.to_owned(),
        };
        OutboxEntry { seq, message }
    }

    fn conn() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        conn
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

    #[test]
    fn reads_start_inside_a_row_and_stop_at_the_limit() {
        let conn = conn();
        let body = r#"{"version":1}"#;
        insert(&conn, &(1..=3).map(|seq| entry(seq, Exchange::TaskPending, &[], body)).collect::<Vec<_>>()).unwrap();
        insert(&conn, &(4..=6).map(|seq| entry(seq, Exchange::TaskRunning, &[], body)).collect::<Vec<_>>()).unwrap();
        let seqs = |entries: Vec<OutboxEntry>| entries.iter().map(|entry| entry.seq).collect::<Vec<_>>();
        assert_eq!(seqs(read(&conn, 2, 3).unwrap()), vec![2, 3, 4]);
        assert_eq!(seqs(read(&conn, 5, 100).unwrap()), vec![5, 6]);
        assert_eq!(seqs(read(&conn, 7, 100).unwrap()), Vec::<u64>::new());
    }

    #[test]
    fn rows_of_the_old_one_message_per_row_table_are_migrated_in_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &super::super::schema::MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(
            r#"PRAGMA user_version = 3;
            INSERT INTO outbox VALUES (12, 'task-running', 'primary.b', NULL, '{"n":2}');
            INSERT INTO outbox VALUES (11, 'task-pending', 'primary.a', '["route.x"]', '{"n":1}');"#,
        )
        .unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        let bounds = bounds(&conn).unwrap();
        assert_eq!((bounds.first, bounds.last), (11, 12));
        let entries = read(&conn, 11, 10).unwrap();
        assert_eq!(
            entries,
            vec![
                entry_with(11, Exchange::TaskPending, "primary.a", &["route.x"], r#"{"n":1}"#),
                entry_with(12, Exchange::TaskRunning, "primary.b", &[], r#"{"n":2}"#),
            ]
        );
    }

    fn entry_with(seq: u64, exchange: Exchange, key: &str, cc: &[&str], body: &str) -> OutboxEntry {
        let mut entry = entry(seq, exchange, cc, body);
        entry.message.routing_key = key.to_owned();
        entry
    }

    #[test]
    fn a_partly_published_row_is_kept_but_not_published_again() {
        let conn = conn();
        let body = r#"{"version":1}"#;
        insert(&conn, &(1..=3).map(|seq| entry(seq, Exchange::TaskPending, &[], body)).collect::<Vec<_>>()).unwrap();
        insert(&conn, &(4..=6).map(|seq| entry(seq, Exchange::TaskPending, &[], body)).collect::<Vec<_>>()).unwrap();
        trim(&conn, 4).unwrap();
        let published: i64 = conn.query_row("SELECT published FROM outbox_state", [], |row| row.get(0)).unwrap();
        assert_eq!(published, 4);
        let rows: i64 = conn.query_row("SELECT count(*) FROM outbox_batches", [], |row| row.get(0)).unwrap();
        assert_eq!(rows, 1, "the first row went, the second is partly unpublished");
        let bounds = bounds(&conn).unwrap();
        assert_eq!((bounds.first, bounds.last, bounds.unpublished()), (5, 6, 2));
        trim(&conn, 6).unwrap();
        let bounds = super::bounds(&conn).unwrap();
        assert_eq!((bounds.first, bounds.last, bounds.unpublished()), (7, 6, 0), "sequence numbers keep counting");
    }
}
