//! The services' documents (`shoal-ops`'s `documents`): `documents`, and the secret kinds in
//! `secret_documents`, kept apart as the tasks' secrets are. Keys sort bytewise (`COLLATE "C"`),
//! as the key ranges of listings need.

use shoal_engine::Timestamp;
use tokio_postgres::Row;

use crate::StoreError;
use crate::ops::DocumentTx;
use crate::ops::documents::{DocKind, Document, prefix_end};
use crate::ops::index::Offer;
use crate::postgres::reads::PgReads;
use crate::postgres::tx::PgTx;

/// A statement on the table `$kind` is kept in, which stands between its parts: made at
/// compile time, so no statement is formatted per call.
macro_rules! on_table {
    ($kind:expr, $first:literal $(, $rest:literal)*) => {
        if $kind.is_secret() {
            concat!($first $(, "secret_documents", $rest)*)
        } else {
            concat!($first $(, "documents", $rest)*)
        }
    };
}

fn document(row: &Row, at: usize) -> Result<Document, StoreError> {
    Ok(Document {
        body: row.try_get(at)?,
        expires: row.try_get::<_, Option<i64>>(at + 1)?.map(Timestamp),
        due: row.try_get::<_, Option<i64>>(at + 2)?.map(Timestamp),
    })
}

fn keyed(rows: &[Row]) -> Result<Vec<(String, Document)>, StoreError> {
    rows.iter().map(|row| Ok((row.try_get(0)?, document(row, 1)?))).collect()
}

impl DocumentTx for PgTx {
    async fn load_document(&mut self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
        let sql = on_table!(kind, "SELECT body, expires, due FROM ", " WHERE kind = $1 AND key = $2 FOR UPDATE");
        self.query_opt(sql, &[&kind.as_str(), &key]).await?.map(|row| document(&row, 0)).transpose()
    }

    async fn load_documents(
        &mut self,
        keys: &[(DocKind, String)],
    ) -> Result<Vec<((DocKind, String), Document)>, StoreError> {
        let Some((first, _)) = keys.first() else { return Ok(Vec::new()) };
        // Not locked: of two transactions settling one entry at once, the later commit's stays.
        // Each row names the key it answers by its place in the list asked for.
        let sql = on_table!(
            first,
            "SELECT k.n, d.body, d.expires, d.due \
             FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k (kind, key, n) JOIN ",
            " AS d ON d.kind = k.kind AND d.key = k.key"
        );
        let (kinds, names): (Vec<&str>, Vec<&str>) =
            keys.iter().map(|(kind, key)| (kind.as_str(), key.as_str())).unzip();
        let mut found = Vec::with_capacity(keys.len());
        for row in self.query(sql, &[&kinds, &names]).await? {
            let at = usize::try_from(row.try_get::<_, i64>(0)? - 1).ok().and_then(|at| keys.get(at));
            let key = at.ok_or_else(|| StoreError::Internal("a document row for no key asked".into()))?;
            found.push((key.clone(), document(&row, 1)?));
        }
        Ok(found)
    }

    async fn put_document(&mut self, kind: DocKind, key: &str, document: &Document) -> Result<(), StoreError> {
        self.put_documents(kind, &[(key.to_owned(), document.clone())]).await
    }

    async fn delete_document(&mut self, kind: DocKind, key: &str) -> Result<(), StoreError> {
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = $1 AND key = $2");
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(key.to_owned())]).await
    }

    async fn delete_documents_under(&mut self, kind: DocKind, prefix: &str) -> Result<(), StoreError> {
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = $1 AND key >= $2 AND key < $3");
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(prefix.to_owned()), Box::new(prefix_end(prefix))]).await
    }

    async fn put_documents(&mut self, kind: DocKind, documents: &[(String, Document)]) -> Result<(), StoreError> {
        // Rows are written (and locked) in the order given.
        let sql = on_table!(
            kind,
            "INSERT INTO ",
            " (kind, key, body, expires, due) \
             SELECT $1, * FROM unnest($2::text[], $3::text[], $4::int8[], $5::int8[]) \
             ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body, expires = excluded.expires, due = excluded.due"
        );
        let keys: Vec<String> = documents.iter().map(|(key, _)| key.clone()).collect();
        let bodies: Vec<String> = documents.iter().map(|(_, document)| document.body.clone()).collect();
        let expires: Vec<Option<i64>> = documents.iter().map(|(_, d)| d.expires.map(Timestamp::millis)).collect();
        let due: Vec<Option<i64>> = documents.iter().map(|(_, d)| d.due.map(Timestamp::millis)).collect();
        self.defer(
            sql,
            vec![Box::new(kind.as_str()), Box::new(keys), Box::new(bodies), Box::new(expires), Box::new(due)],
        )
        .await
    }

    async fn keep_documents_until(&mut self, kind: DocKind, keys: &[(String, Timestamp)]) -> Result<(), StoreError> {
        let sql = on_table!(
            kind,
            "INSERT INTO ",
            " (kind, key, body, expires) SELECT $1, key, '{}', until FROM unnest($2::text[], $3::int8[]) AS k (key, until) \
             ON CONFLICT (kind, key) DO UPDATE SET expires = excluded.expires WHERE ",
            ".expires < excluded.expires"
        );
        let (names, until): (Vec<String>, Vec<i64>) = keys.iter().map(|(key, at)| (key.clone(), at.millis())).unzip();
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(names), Box::new(until)]).await
    }

    async fn offer_index(&mut self, offers: Vec<Offer>) -> Result<(), StoreError> {
        // Settled at the commit: one read for a whole gathering's completions.
        self.index_offers.extend(offers);
        Ok(())
    }

    async fn delete_expired_documents(&mut self, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let mut deleted = 0;
        for sql in [
            "DELETE FROM documents WHERE (kind, key) IN \
             (SELECT kind, key FROM documents WHERE expires <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING 1",
            "DELETE FROM secret_documents WHERE (kind, key) IN \
             (SELECT kind, key FROM secret_documents WHERE expires <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING 1",
        ] {
            deleted += self.query(sql, &[&now.millis(), &(limit as i64)]).await?.len();
        }
        Ok(deleted)
    }
}

impl PgReads<'_> {
    /// One document.
    pub(crate) fn document_row(&self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
        let sql = on_table!(kind, "SELECT body, expires, due FROM ", " WHERE kind = $1 AND key = $2");
        self.query(sql, &[&kind.as_str(), &key])?.first().map(|row| document(row, 0)).transpose()
    }

    /// Documents with keys after `after` and before `end`, by key.
    pub(crate) fn document_rows(
        &self,
        kind: DocKind,
        after: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        let sql = on_table!(
            kind,
            "SELECT key, body, expires, due FROM ",
            " WHERE kind = $1 AND key > $2 AND key < $3 ORDER BY key LIMIT $4"
        );
        keyed(&self.query(sql, &[&kind.as_str(), &after, &end, &(limit as i64)])?)
    }

    /// Documents due at `now`, earliest first.
    pub(crate) fn due_rows(
        &self,
        kind: DocKind,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        let sql = on_table!(
            kind,
            "SELECT key, body, expires, due FROM ",
            " WHERE kind = $1 AND due <= $2 ORDER BY due LIMIT $3"
        );
        keyed(&self.query(sql, &[&kind.as_str(), &now.millis(), &(limit as i64)])?)
    }
}
