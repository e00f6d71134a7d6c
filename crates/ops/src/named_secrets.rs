//! The Secrets service's writes: a named secret set (replacing any) or removed. Kept with the
//! tasks' secrets (SQLite's `secrets.db`), never in an event, a message or a log.

use serde_json::{Map, Value};
use shoal_engine::{Rejection, Timestamp};

use crate::documents::{DocKind, Document, is_key};
use crate::row::json;
use crate::{StoreError, WriteTx};

/// A named secret: its value and when it is gone.
#[derive(Clone, PartialEq)]
pub struct NamedSecret {
    /// The secret's JSON object.
    pub secret: Map<String, Value>,
    /// When it is gone.
    pub expires: Timestamp,
}

impl std::fmt::Debug for NamedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedSecret").field("secret", &"(OMITTED)").field("expires", &self.expires).finish()
    }
}

/// Checks a secret's name: printable ASCII, 1 to 1,024 bytes.
pub fn check_name(name: &str) -> Result<(), Rejection> {
    if name.len() > 1024 || !is_key(name) {
        return Err(Rejection::invalid("name", "must be 1 to 1024 printable ASCII characters"));
    }
    Ok(())
}

/// Stores a secret under `name`, replacing any.
pub async fn set(tx: &mut impl WriteTx, name: &str, secret: &NamedSecret, now: Timestamp) -> Result<(), StoreError> {
    check_name(name)?;
    if secret.expires <= now {
        return Err(Rejection::invalid("expires", "must be in the future").into());
    }
    let document = Document { body: json(&secret.secret)?, expires: Some(secret.expires), due: None };
    tx.put_document(DocKind::Secret, name, &document).await
}

/// Removes the secret `name` (nothing when there is none, as Taskcluster answers).
pub async fn remove(tx: &mut impl WriteTx, name: &str) -> Result<(), StoreError> {
    check_name(name)?;
    tx.delete_document(DocKind::Secret, name).await
}
