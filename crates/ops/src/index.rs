//! The Index service's writes: a completed task indexed under the namespaces its routes name
//! (in the transaction that completes it), an entry inserted or deleted by a call, and the
//! namespaces above each entry kept for as long as it.

use std::collections::{BTreeMap, HashMap};

use shoal_engine::index::{Entry, Namespace, namespace_expiry, namespaces_of, split};
use shoal_engine::task::Task;
use shoal_engine::{Rejection, Timestamp};

use crate::documents::{DocKind, Document};
use crate::row::{corrupt, json};
use crate::{StoreError, WriteTx};

/// An entry's document key: `<parent>/<name>`.
#[must_use]
pub fn entry_key(namespace: &Namespace) -> String {
    key_of(namespace.as_str())
}

/// The key of a namespace's document, from its text (checked before).
fn key_of(namespace: &str) -> String {
    let (parent, name) = split(namespace);
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

/// An entry offered to the Index: put at its namespace unless a live entry of higher rank
/// is there (judged at `now`).
#[derive(Debug, Clone)]
pub struct Offer {
    /// Where.
    pub namespace: Namespace,
    /// What.
    pub entry: Entry,
    /// When it was offered.
    pub now: Timestamp,
}

/// Indexes a task that has just completed under each namespace its routes name, from the
/// `extra.index` it kept: offered, settled by the backend ([`DocumentTx::offer_index`]). A
/// task whose routes name none, or whose entry would already be expired, costs nothing more.
///
/// [`DocumentTx::offer_index`]: crate::DocumentTx::offer_index
pub async fn index_completed(tx: &mut impl WriteTx, task: &Task, now: Timestamp) -> Result<(), StoreError> {
    let namespaces = namespaces_of(&task.meta.routes);
    if namespaces.is_empty() {
        return Ok(());
    }
    let Some(entry) = Entry::of_task(task.task_id, task.meta.index.as_ref(), task.meta.expires) else { return Ok(()) };
    if entry.expires <= now {
        return Ok(());
    }
    let offers = namespaces.into_iter().map(|namespace| Offer { namespace, entry: entry.clone(), now }).collect();
    tx.offer_index(offers).await
}

/// insertTask: puts `entry` at `namespace` unless a live entry of higher rank is there;
/// answers the entry the namespace holds afterwards.
pub async fn insert(
    tx: &mut impl WriteTx,
    namespace: &Namespace,
    entry: Entry,
    now: Timestamp,
) -> Result<Entry, StoreError> {
    if entry.expires <= now {
        return Err(Rejection::invalid("expires", "must be in the future").into());
    }
    let held = settle(tx, vec![Offer { namespace: namespace.clone(), entry, now }]).await?;
    held.into_iter().next().ok_or_else(|| StoreError::Internal("an offer settled to nothing".into()))
}

/// Settles offers in order, each against the entry its namespace holds by then; answers the
/// entry each namespace holds after its offer. One read serves them all: their entries, and
/// the namespace just above each. A written entry keeps the namespaces above it at least until
/// its expiry's midnight; a namespace is kept no shorter than any below it (each keep goes
/// up the whole chain), so when the one just above is kept that long, none needs a write.
pub async fn settle(tx: &mut impl WriteTx, offers: Vec<Offer>) -> Result<Vec<Entry>, StoreError> {
    let mut keys: Vec<(DocKind, String)> = Vec::with_capacity(offers.len() * 2);
    for offer in &offers {
        keys.push((DocKind::IndexEntry, entry_key(&offer.namespace)));
        if let Some(parent) = offer.namespace.ancestors().next() {
            keys.push((DocKind::IndexNamespace, key_of(parent)));
        }
    }
    keys.sort_unstable();
    keys.dedup();
    let mut held: HashMap<String, Held> = HashMap::with_capacity(offers.len());
    let mut kept: HashMap<String, Option<Timestamp>> = HashMap::new();
    for ((kind, key), document) in tx.load_documents(&keys).await? {
        if kind == DocKind::IndexEntry {
            held.insert(key, Held { entry: decode_entry(&document)?, written: false });
        } else {
            kept.insert(key, document.expires);
        }
    }
    let mut keep: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut answers = Vec::with_capacity(offers.len());
    for Offer { namespace, entry, now } in offers {
        let key = entry_key(&namespace);
        let live = held.get(&key).filter(|held| held.entry.expires > now);
        if let Some(stored) = live
            && !entry.replaces(&stored.entry)
        {
            answers.push(stored.entry.clone());
            continue;
        }
        let until = namespace_expiry(entry.expires);
        let parent_kept = |parent: &str| match kept.get(&key_of(parent)) {
            Some(None) => true,
            Some(Some(expires)) => *expires >= until,
            None => false,
        };
        if namespace.ancestors().next().is_some_and(|parent| !parent_kept(parent)) {
            for ancestor in namespace.ancestors() {
                let ancestor = key_of(ancestor);
                if let Some(known) = kept.entry(ancestor.clone()).or_insert(Some(until)) {
                    *known = (*known).max(until);
                }
                let kept = keep.entry(ancestor).or_insert(until);
                *kept = (*kept).max(until);
            }
        }
        answers.push(entry.clone());
        held.insert(key, Held { entry, written: true });
    }
    let mut written = Vec::with_capacity(held.len());
    for (key, held) in held.into_iter().filter(|(_, held)| held.written) {
        written.push((key, Document { body: json(&held.entry)?, expires: Some(held.entry.expires), due: None }));
    }
    // In key order: two PostgreSQL transactions writing the same entries lock them in one order.
    written.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if !written.is_empty() {
        tx.put_documents(DocKind::IndexEntry, &written).await?;
    }
    if !keep.is_empty() {
        tx.keep_documents_until(DocKind::IndexNamespace, &keep.into_iter().collect::<Vec<_>>()).await?;
    }
    Ok(answers)
}

/// An entry as a settlement found or left it (stored with its own expiry).
struct Held {
    entry: Entry,
    /// Whether the settlement put it.
    written: bool,
}

/// Deletes the entry at `namespace`, if any (as Taskcluster's, no error when there is none);
/// the namespaces above it stay until they expire.
pub async fn delete(tx: &mut impl WriteTx, namespace: &Namespace) -> Result<(), StoreError> {
    tx.delete_document(DocKind::IndexEntry, &entry_key(namespace)).await
}
