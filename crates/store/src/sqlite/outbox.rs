//! SQLite's outbox table: one row per committed write batch, holding that batch's messages
//! in the shared row format (`outbox/format.rs`).

use crate::StoreError;
use crate::outbox::OutboxEntry;
use crate::outbox::format::{Bounds, append_row, encode};
use rusqlite::{Connection, params};

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

#[cfg(test)]
mod tests {
    use shoal_engine::message::Exchange;

    use super::*;
    use crate::outbox::format::tests::entry;

    fn conn() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        conn
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
