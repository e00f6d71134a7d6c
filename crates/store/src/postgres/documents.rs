//! The services' documents (`shoal-ops`'s `documents`): `documents`, and the secret kinds in
//! `secret_documents`, kept apart as the tasks' secrets are. Keys sort bytewise (`COLLATE "C"`),
//! as the key ranges of listings need.

use std::collections::HashMap;

use shoal_engine::Timestamp;
use tokio_postgres::Row;

use crate::StoreError;
use crate::ops::DocumentTx;
use crate::ops::documents::{DocKind, Document, prefix_end};
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

/// A held-back write of the Index (see `PgTx::index_writes`).
#[derive(Debug, Clone)]
pub(crate) enum IndexWrite {
    /// Store this document.
    Put(Document),
    /// Delete it.
    Delete,
    /// Keep it (made `{}` if missing) until at least then.
    Keep(Timestamp),
}

/// Whether a kind's writes are held back to the commit: the Index's, which many concurrent
/// completions may make to the same namespaces.
fn held_back(kind: DocKind) -> bool {
    matches!(kind, DocKind::IndexEntry | DocKind::IndexNamespace)
}

impl PgTx {
    /// Writes the Index's held-back writes in key order (see `PgTx::index_writes`).
    pub(crate) async fn write_index(&mut self) -> Result<(), StoreError> {
        let writes = std::mem::take(&mut self.index_writes);
        for ((kind, key), write) in writes {
            let kind =
                DocKind::parse(kind).ok_or_else(|| StoreError::Internal(format!("held write of kind {kind}")))?;
            match write {
                IndexWrite::Put(document) => self.write_document(kind, &key, &document).await?,
                IndexWrite::Delete => self.remove_document(kind, &key).await?,
                IndexWrite::Keep(until) => self.keep_until(kind, &key, until).await?,
            }
        }
        Ok(())
    }

    async fn write_document(&mut self, kind: DocKind, key: &str, document: &Document) -> Result<(), StoreError> {
        let sql = on_table!(
            kind,
            "INSERT INTO ",
            " (kind, key, body, expires, due) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body, expires = excluded.expires, due = excluded.due"
        );
        let params: Vec<crate::postgres::pipeline::Param> = vec![
            Box::new(kind.as_str()),
            Box::new(key.to_owned()),
            Box::new(document.body.clone()),
            Box::new(document.expires.map(Timestamp::millis)),
            Box::new(document.due.map(Timestamp::millis)),
        ];
        self.defer(sql, params).await
    }

    async fn remove_document(&mut self, kind: DocKind, key: &str) -> Result<(), StoreError> {
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = $1 AND key = $2");
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(key.to_owned())]).await
    }

    async fn keep_until(&mut self, kind: DocKind, key: &str, expires: Timestamp) -> Result<(), StoreError> {
        let sql = on_table!(
            kind,
            "INSERT INTO ",
            " (kind, key, body, expires) VALUES ($1, $2, '{}', $3) \
             ON CONFLICT (kind, key) DO UPDATE SET expires = excluded.expires WHERE ",
            ".expires < excluded.expires"
        );
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(key.to_owned()), Box::new(expires.millis())]).await
    }
}

impl DocumentTx for PgTx {
    async fn load_document(&mut self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError> {
        if held_back(kind) {
            // Read as this transaction left it; not locked (its write comes at the commit, in
            // key order): of two completions indexing one namespace at once, the later commit's
            // entry stays.
            match self.index_writes.get(&(kind.as_str(), key.to_owned())) {
                Some(IndexWrite::Put(document)) => return Ok(Some(document.clone())),
                Some(IndexWrite::Delete) => return Ok(None),
                Some(IndexWrite::Keep(_)) | None => {}
            }
            let sql = on_table!(kind, "SELECT body, expires, due FROM ", " WHERE kind = $1 AND key = $2");
            return self.query_opt(sql, &[&kind.as_str(), &key]).await?.map(|row| document(&row, 0)).transpose();
        }
        let sql = on_table!(kind, "SELECT body, expires, due FROM ", " WHERE kind = $1 AND key = $2 FOR UPDATE");
        self.query_opt(sql, &[&kind.as_str(), &key]).await?.map(|row| document(&row, 0)).transpose()
    }

    async fn load_documents(
        &mut self,
        keys: &[(DocKind, String)],
    ) -> Result<Vec<((DocKind, String), Document)>, StoreError> {
        let mut found = Vec::with_capacity(keys.len());
        let (mut kinds, mut unread): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        let mut kept: HashMap<(DocKind, String), Timestamp> = HashMap::new();
        for (kind, key) in keys {
            let held = if held_back(*kind) { self.index_writes.get(&(kind.as_str(), key.clone())) } else { None };
            match held {
                Some(IndexWrite::Put(document)) => found.push(((*kind, key.clone()), document.clone())),
                Some(IndexWrite::Delete) => {}
                Some(IndexWrite::Keep(until)) => {
                    kept.insert((*kind, key.clone()), *until);
                    kinds.push(kind.as_str());
                    unread.push(key);
                }
                None => {
                    kinds.push(kind.as_str());
                    unread.push(key);
                }
            }
        }
        let Some((first, _)) = keys.first() else { return Ok(found) };
        if !unread.is_empty() {
            let sql = on_table!(
                first,
                "SELECT kind, key, body, expires, due FROM ",
                " WHERE (kind, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
            );
            for row in self.query(sql, &[&kinds, &unread]).await? {
                let (kind, key): (&str, String) = (row.try_get(0)?, row.try_get(1)?);
                let Some(kind) = DocKind::parse(kind) else { continue };
                let mut document = document(&row, 2)?;
                let at = (kind, key);
                if let Some(until) = kept.remove(&at) {
                    document.expires = document.expires.map(|expires| expires.max(until));
                }
                found.push((at, document));
            }
        }
        // Held keeps of documents not yet stored: `{}` until then.
        for ((kind, key), until) in kept {
            found.push(((kind, key), Document { body: "{}".into(), expires: Some(until), due: None }));
        }
        Ok(found)
    }

    async fn put_document(&mut self, kind: DocKind, key: &str, document: &Document) -> Result<(), StoreError> {
        if held_back(kind) {
            self.index_writes.insert((kind.as_str(), key.to_owned()), IndexWrite::Put(document.clone()));
            return Ok(());
        }
        self.write_document(kind, key, document).await
    }

    async fn delete_document(&mut self, kind: DocKind, key: &str) -> Result<(), StoreError> {
        if held_back(kind) {
            self.index_writes.insert((kind.as_str(), key.to_owned()), IndexWrite::Delete);
            return Ok(());
        }
        self.remove_document(kind, key).await
    }

    async fn delete_documents_under(&mut self, kind: DocKind, prefix: &str) -> Result<(), StoreError> {
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = $1 AND key >= $2 AND key < $3");
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(prefix.to_owned()), Box::new(prefix_end(prefix))]).await
    }

    async fn keep_document_until(&mut self, kind: DocKind, key: &str, expires: Timestamp) -> Result<(), StoreError> {
        if held_back(kind) {
            let held = self.index_writes.entry((kind.as_str(), key.to_owned())).or_insert(IndexWrite::Keep(expires));
            match held {
                IndexWrite::Keep(until) => *until = (*until).max(expires),
                IndexWrite::Put(document) => {
                    document.expires = document.expires.max(Some(expires));
                }
                IndexWrite::Delete => *held = IndexWrite::Keep(expires),
            }
            return Ok(());
        }
        self.keep_until(kind, key, expires).await
    }

    async fn first_documents(&mut self, kind: DocKind, limit: usize) -> Result<Vec<(String, Document)>, StoreError> {
        let sql = on_table!(kind, "SELECT key, body, expires, due FROM ", " WHERE kind = $1 ORDER BY key LIMIT $2");
        keyed(&self.query(sql, &[&kind.as_str(), &(limit as i64)]).await?)
    }

    async fn delete_documents(&mut self, kind: DocKind, keys: &[String]) -> Result<(), StoreError> {
        if held_back(kind) {
            for key in keys {
                self.index_writes.insert((kind.as_str(), key.clone()), IndexWrite::Delete);
            }
            return Ok(());
        }
        let sql = on_table!(kind, "DELETE FROM ", " WHERE kind = $1 AND key = ANY($2)");
        self.defer(sql, vec![Box::new(kind.as_str()), Box::new(keys.to_vec())]).await
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
