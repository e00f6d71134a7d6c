//! The services' records as documents: JSON under a kind and a key, with an optional expiry
//! (gone once past it) and due time (a hook's next fire). One table holds them on each
//! backend, and a second, kept where tasks' secrets are, holds the secret kinds, so the
//! Index, Secrets, Hooks and GitHub services add no SQL of their own.
//!
//! Keys are printable ASCII, built so that a listing is a key range: an index entry or
//! namespace is `<parent>/<name>` (a namespace holds no `/`), a hook `<group>/<id>`, a fire
//! `<group>/<id> <newest-first time> <taskId>`, a build
//! `<owner>/<repository>/<sha>/<taskGroupId>`.

use shoal_engine::Timestamp;

use crate::StoreError;

/// What a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DocKind {
    /// An Index entry: the task indexed at a namespace.
    IndexEntry,
    /// An Index namespace: one that holds entries or namespaces.
    IndexNamespace,
    /// A secret of the Secrets service.
    Secret,
    /// A hook's definition.
    Hook,
    /// A hook's trigger token.
    HookToken,
    /// One fire of a hook.
    HookFire,
    /// A build of the GitHub integration.
    GithubBuild,
}

impl DocKind {
    /// Its name in the store.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DocKind::IndexEntry => "index-entry",
            DocKind::IndexNamespace => "index-namespace",
            DocKind::Secret => "secret",
            DocKind::Hook => "hook",
            DocKind::HookToken => "hook-token",
            DocKind::HookFire => "hook-fire",
            DocKind::GithubBuild => "github-build",
        }
    }

    /// Whether it is kept with the tasks' secrets (SQLite's `secrets.db`) rather than beside
    /// the tasks.
    #[must_use]
    pub fn is_secret(self) -> bool {
        matches!(self, DocKind::Secret | DocKind::HookToken)
    }
}

/// A stored document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Its JSON.
    pub body: String,
    /// When it is gone (never when `None`).
    pub expires: Option<Timestamp>,
    /// When it is due (a hook's next fire).
    pub due: Option<Timestamp>,
}

impl Document {
    /// A document that neither expires nor comes due.
    #[must_use]
    pub fn new(body: String) -> Document {
        Document { body, expires: None, due: None }
    }

    /// Whether it is gone at `now`.
    #[must_use]
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires.is_some_and(|expires| expires <= now)
    }
}

/// The end of the key range of the keys that start with `prefix`: every key is printable
/// ASCII, below DEL.
#[must_use]
pub fn prefix_end(prefix: &str) -> String {
    format!("{prefix}\u{7f}")
}

/// Whether `key` may be a document's key (printable ASCII, at most 4 KiB).
#[must_use]
pub fn is_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 4096 && key.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A backend's transaction, as the services' operations use it.
pub trait DocumentTx {
    /// A document (locked until the commit where the backend locks rows).
    async fn load_document(&mut self, kind: DocKind, key: &str) -> Result<Option<Document>, StoreError>;

    /// The documents at `keys` (distinct kinds and keys, of kinds kept in one table), as this
    /// transaction left them, in no particular order and not locked: what a settlement of
    /// the Index reads, all at once.
    async fn load_documents(
        &mut self,
        keys: &[(DocKind, String)],
    ) -> Result<Vec<((DocKind, String), Document)>, StoreError>;

    /// Stores a document, replacing any of the same kind and key.
    async fn put_document(&mut self, kind: DocKind, key: &str, document: &Document) -> Result<(), StoreError>;

    /// Deletes a document (nothing when there is none).
    async fn delete_document(&mut self, kind: DocKind, key: &str) -> Result<(), StoreError>;

    /// Deletes every document of a kind whose key starts with `prefix`.
    async fn delete_documents_under(&mut self, kind: DocKind, prefix: &str) -> Result<(), StoreError>;

    /// Stores documents of a kind (distinct keys), each replacing any at its key (PostgreSQL:
    /// in one statement, however many).
    async fn put_documents(&mut self, kind: DocKind, documents: &[(String, Document)]) -> Result<(), StoreError>;

    /// For each key (distinct), stores `{}` if it has no document, or moves its document's
    /// expiry on to the time given if that is later, never earlier (PostgreSQL: in one statement).
    async fn keep_documents_until(&mut self, kind: DocKind, keys: &[(String, Timestamp)]) -> Result<(), StoreError>;

    /// Settles entries offered to the Index ([`crate::index::settle`]) now, or with the
    /// others of the transaction just before its commit, where a backend gathers many
    /// completions in one transaction (one read for all of them).
    async fn offer_index(&mut self, offers: Vec<crate::index::Offer>) -> Result<(), StoreError>;

    /// Deletes up to `limit` documents expired at `now`; says how many went.
    async fn delete_expired_documents(&mut self, now: Timestamp, limit: usize) -> Result<usize, StoreError>;
}
