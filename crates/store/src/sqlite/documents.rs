//! The services' documents (`shoal-ops`'s `documents`): `documents` in the main database, and
//! the secret kinds in `secrets.documents`, beside the tasks' secrets.

use rusqlite::{Connection, OptionalExtension, Row, params};
use shoal_engine::Timestamp;

use crate::StoreError;
use crate::ops::DocumentTx;
use crate::ops::documents::{DocKind, Document};
use crate::ops::index::Offer;
use crate::sqlite::tx::Tx;

/// A statement on the table `$kind` is kept in, which stands between its parts: made at
/// compile time, so no statement is formatted per call.
macro_rules! on_table {
    ($kind:expr, $first:literal $(, $rest:literal)*) => {
        if $kind.is_secret() {
            concat!($first $(, "secrets.documents", $rest)*)
        } else {
            concat!($first $(, "main.documents", $rest)*)
        }
    };
}

fn document(row: &Row<'_>, at: usize) -> rusqlite::Result<Document> {
    Ok(Document {
        body: row.get(at)?,
        expires: row.get::<_, Option<i64>>(at + 1)?.map(Timestamp),
        due: row.get::<_, Option<i64>>(at + 2)?.map(Timestamp),
    })
}

/// One document.
pub(crate) fn load(conn: &Connection, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
    let sql = on_table!(kind, "SELECT body, expires, due FROM ", " WHERE kind = ?1 AND key = ?2");
    Ok(conn.prepare_cached(sql)?.query_row(params![kind.as_str(), key], |row| document(row, 0)).optional()?)
}

/// Documents with keys after `after` and before `end`, by key.
pub(crate) fn list(
    conn: &Connection,
    kind: DocKind,
    after: &str,
    end: &str,
    limit: usize,
) -> Result<Vec<(String, Document)>, StoreError> {
    let sql = on_table!(
        kind,
        "SELECT key, body, expires, due FROM ",
        " WHERE kind = ?1 AND key > ?2 AND key < ?3 ORDER BY key LIMIT ?4"
    );
    let mut stmt = conn.prepare_cached(sql)?;
    let rows =
        stmt.query_map(params![kind.as_str(), after, end, limit as i64], |row| Ok((row.get(0)?, document(row, 1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Documents due at `now`, earliest first.
pub(crate) fn due(
    conn: &Connection,
    kind: DocKind,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(String, Document)>, StoreError> {
    let sql =
        on_table!(kind, "SELECT key, body, expires, due FROM ", " WHERE kind = ?1 AND due <= ?2 ORDER BY due LIMIT ?3");
    let mut stmt = conn.prepare_cached(sql)?;
    let rows =
        stmt.query_map(params![kind.as_str(), now.millis(), limit as i64], |row| Ok((row.get(0)?, document(row, 1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

impl DocumentTx for Tx<'_> {
    async fn load_document(&mut self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
        load(self.conn, kind, key)
    }

    async fn load_documents(
        &mut self,
        keys: &[(DocKind, String)],
    ) -> Result<Vec<((DocKind, String), Document)>, StoreError> {
        // A prepared lookup per key: cheaper here than one statement over a JSON list.
        let mut found = Vec::with_capacity(keys.len());
        for (kind, key) in keys {
            if let Some(document) = load(self.conn, *kind, key)? {
                found.push(((*kind, key.clone()), document));
            }
        }
        Ok(found)
    }

    async fn put_document(&mut self, kind: DocKind, key: &str, document: &Document) -> Result<(), StoreError> {
        let sql = on_table!(
            kind,
            "INSERT INTO ",
            " (kind, key, body, expires, due) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body, expires = excluded.expires, due = excluded.due"
        );
        self.conn.prepare_cached(sql)?.execute(params![
            kind.as_str(),
            key,
            document.body,
            document.expires.map(Timestamp::millis),
            document.due.map(Timestamp::millis)
        ])?;
        Ok(())
    }

    async fn delete_document(&mut self, kind: DocKind, key: &str) -> Result<(), StoreError> {
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = ?1 AND key = ?2");
        self.conn.prepare_cached(sql)?.execute(params![kind.as_str(), key])?;
        Ok(())
    }

    async fn delete_documents_under(&mut self, kind: DocKind, prefix: &str) -> Result<(), StoreError> {
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = ?1 AND key >= ?2 AND key < ?3");
        let end = crate::ops::documents::prefix_end(prefix);
        self.conn.prepare_cached(sql)?.execute(params![kind.as_str(), prefix, end])?;
        Ok(())
    }

    async fn put_documents(&mut self, kind: DocKind, documents: &[(String, Document)]) -> Result<(), StoreError> {
        for (key, document) in documents {
            self.put_document(kind, key, document).await?;
        }
        Ok(())
    }

    async fn keep_documents_until(&mut self, kind: DocKind, keys: &[(String, Timestamp)]) -> Result<(), StoreError> {
        let sql = on_table!(
            kind,
            "INSERT INTO ",
            " (kind, key, body, expires) VALUES (?1, ?2, '{}', ?3) \
             ON CONFLICT (kind, key) DO UPDATE SET expires = excluded.expires WHERE expires < excluded.expires"
        );
        let mut stmt = self.conn.prepare_cached(sql)?;
        for (key, until) in keys {
            stmt.execute(params![kind.as_str(), key, until.millis()])?;
        }
        Ok(())
    }

    async fn offer_index(&mut self, offers: Vec<Offer>) -> Result<(), StoreError> {
        // The writer is one: settled at once, each statement a local call.
        crate::ops::index::settle(self, offers).await.map(drop)
    }

    async fn delete_expired_documents(&mut self, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let mut deleted = 0;
        for sql in [
            "DELETE FROM main.documents WHERE (kind, key) IN \
             (SELECT kind, key FROM main.documents WHERE expires <= ?1 LIMIT ?2)",
            "DELETE FROM secrets.documents WHERE (kind, key) IN \
             (SELECT kind, key FROM secrets.documents WHERE expires <= ?1 LIMIT ?2)",
        ] {
            deleted += self.conn.prepare_cached(sql)?.execute(params![now.millis(), limit as i64])?;
        }
        Ok(deleted)
    }
}
