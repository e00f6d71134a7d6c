//! The Index service's writes: a completed task indexed under the namespaces its routes name
//! (in the transaction that completes it), an entry inserted or deleted by a call, and the
//! namespaces above each entry kept for as long as it.

use serde_json::Value;
use shoal_engine::index::{Entry, Namespace, namespace_expiry, namespaces_of};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, Timestamp};

use crate::documents::{DocKind, Document};
use crate::row::{corrupt, json};
use crate::{StoreError, WriteTx};

/// An entry's document key: `<parent>/<name>`.
#[must_use]
pub fn entry_key(namespace: &Namespace) -> String {
    let (parent, name) = namespace.split();
    format!("{parent}/{name}")
}

/// The namespace a document key names (`a.b/c` → `a.b.c`, `/c` → `c`).
#[must_use]
pub fn namespace_of_key(key: &str) -> String {
    match key.split_once('/') {
        Some(("", name)) => name.to_owned(),
        Some((parent, name)) => format!("{parent}.{name}"),
        None => key.to_owned(),
    }
}

/// A stored entry's body.
pub fn decode_entry(document: &Document) -> Result<Entry, StoreError> {
    serde_json::from_str(&document.body).map_err(|err| corrupt(format!("index entry: {err}")))
}

/// Indexes a task that has just completed under each namespace its routes name, from its
/// `extra.index`; a task whose routes name none costs nothing more.
pub async fn index_completed(tx: &mut impl WriteTx, task: &Task, now: Timestamp) -> Result<(), StoreError> {
    let namespaces = namespaces_of(&task.meta.routes);
    if namespaces.is_empty() {
        return Ok(());
    }
    let options = match tx.index_options(task.task_id).await? {
        Some(text) => Some(
            serde_json::from_str::<Value>(&text)
                .map_err(|err| corrupt(format!("extra.index of {}: {err}", task.task_id)))?,
        ),
        None => None,
    };
    let Some(entry) = Entry::of_task(task.task_id, options.as_ref(), task.meta.expires) else { return Ok(()) };
    for namespace in &namespaces {
        insert(tx, namespace, entry.clone(), now).await?;
    }
    Ok(())
}

/// Puts `entry` at `namespace` unless a live entry of higher rank is there; answers the entry
/// the namespace holds afterwards.
pub async fn insert(
    tx: &mut impl WriteTx,
    namespace: &Namespace,
    entry: Entry,
    now: Timestamp,
) -> Result<Entry, StoreError> {
    if entry.expires <= now {
        return Err(Rejection::invalid("expires", "must be in the future").into());
    }
    let key = entry_key(namespace);
    let keep = namespace_expiry(entry.expires);
    // The namespaces above a live entry are kept at least until its expiry's midnight (they
    // only move later): when that covers the new one's, they need no write.
    let mut kept_until = None;
    if let Some(stored) = tx.load_document(DocKind::IndexEntry, &key).await?
        && !stored.expired(now)
    {
        let stored_entry = decode_entry(&stored)?;
        if !entry.replaces(&stored_entry) {
            return Ok(stored_entry);
        }
        kept_until = Some(namespace_expiry(stored_entry.expires));
    }
    let document = Document { body: json(&entry)?, expires: Some(entry.expires), due: None };
    tx.put_document(DocKind::IndexEntry, &key, &document).await?;
    if kept_until.is_none_or(|until| until < keep) {
        for ancestor in namespace.ancestors() {
            let ancestor = Namespace::parse("namespace", ancestor)?;
            tx.keep_document_until(DocKind::IndexNamespace, &entry_key(&ancestor), keep).await?;
        }
    }
    Ok(entry)
}

/// Deletes the entry at `namespace`, if any (as Taskcluster's, no error when there is none);
/// the namespaces above it stay until they expire.
pub async fn delete(tx: &mut impl WriteTx, namespace: &Namespace) -> Result<(), StoreError> {
    tx.delete_document(DocKind::IndexEntry, &entry_key(namespace)).await
}
