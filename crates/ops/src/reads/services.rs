//! The reads of the Index, Secrets and Hooks services, once over [`ReadDb`]'s documents.
//! Expired documents are gone to every read, whether or not expiry has deleted them yet.

use shoal_engine::Timestamp;
use shoal_engine::github::Build;
use shoal_engine::hook::{Fire, HookKey};
use shoal_engine::index::{Entry, Namespace};

use crate::documents::{DocKind, Document, prefix_end};
use crate::hooks::{StoredHook, fires_prefix};
use crate::index::{decode_entry, entry_key, namespace_of_key};
use crate::named_secrets::NamedSecret;
use crate::reads::{ReadDb, ReadsOver};
use crate::row::corrupt;
use crate::{Page, StoreError};

/// The services' reads (see `Store::read`).
pub trait ServiceReads {
    /// The live entry at `namespace`.
    ///
    /// # Errors
    /// Storage failure.
    fn indexed(&self, namespace: &Namespace, now: Timestamp) -> Result<Option<Entry>, StoreError>;
    /// The live entries directly under `namespace` (each with its own namespace), by name.
    ///
    /// # Errors
    /// Storage failure.
    fn indexed_under(
        &self,
        namespace: &Namespace,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<(String, Entry)>, StoreError>;
    /// The live namespaces directly under `namespace`, each with its expiry, by name.
    ///
    /// # Errors
    /// Storage failure.
    fn namespaces_under(
        &self,
        namespace: &Namespace,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<(String, Timestamp)>, StoreError>;
    /// A live secret of the Secrets service.
    ///
    /// # Errors
    /// Storage failure.
    fn secret(&self, name: &str, now: Timestamp) -> Result<Option<NamedSecret>, StoreError>;
    /// The names of live secrets, in order.
    ///
    /// # Errors
    /// Storage failure.
    fn secret_names(&self, after: Option<&str>, limit: usize, now: Timestamp) -> Result<Page<String>, StoreError>;
    /// A hook.
    ///
    /// # Errors
    /// Storage failure.
    fn hook(&self, key: &HookKey) -> Result<Option<StoredHook>, StoreError>;
    /// Builds of the GitHub integration whose keys start with `prefix`
    /// (`<owner>/<repository>/<sha>/`, or a part of it), by key.
    ///
    /// # Errors
    /// Storage failure.
    fn builds(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<Build>, StoreError>;
    /// A group's hooks, by id.
    ///
    /// # Errors
    /// Storage failure.
    fn hooks(&self, group: &str) -> Result<Vec<StoredHook>, StoreError>;
    /// The groups that have hooks.
    ///
    /// # Errors
    /// Storage failure.
    fn hook_groups(&self) -> Result<Vec<String>, StoreError>;
    /// A hook's trigger token.
    ///
    /// # Errors
    /// Storage failure.
    fn hook_token(&self, key: &HookKey) -> Result<Option<String>, StoreError>;
    /// A hook's fires, newest first.
    ///
    /// # Errors
    /// Storage failure.
    fn hook_fires(&self, key: &HookKey, after: Option<&str>, limit: usize) -> Result<Page<Fire>, StoreError>;
    /// Hooks whose next fire is due at `now`, earliest first.
    ///
    /// # Errors
    /// Storage failure.
    fn due_hooks(&self, now: Timestamp, limit: usize) -> Result<Vec<StoredHook>, StoreError>;
}

/// How many documents a listing of everything reads at a time.
const SCAN: usize = 1000;

impl<D: ReadDb> ReadsOver<D> {
    /// Documents of `kind` under `prefix`, from the one after `after`: at most `limit` live
    /// ones, and the token to go on from (the last key read, when there may be more; expired
    /// ones read count, so a page may hold fewer).
    fn listed(
        &self,
        kind: DocKind,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<(String, Document)>, StoreError> {
        let start = after.filter(|after| *after > prefix).unwrap_or(prefix);
        let found = self.0.documents(kind, start, &prefix_end(prefix), limit + 1)?;
        let more = found.len() > limit;
        let mut found = found;
        found.truncate(limit);
        let token = more.then(|| found.last().map(|(key, _)| key.clone())).flatten();
        found.retain(|(_, document)| !document.expired(now));
        Ok(Page { items: found, continuation: token })
    }

    /// Every document of `kind` under `prefix`.
    fn all_under(&self, kind: DocKind, prefix: &str) -> Result<Vec<(String, Document)>, StoreError> {
        let mut all = Vec::new();
        let mut after = prefix.to_owned();
        loop {
            let found = self.0.documents(kind, &after, &prefix_end(prefix), SCAN)?;
            let done = found.len() < SCAN;
            if let Some((key, _)) = found.last() {
                after.clone_from(key);
            }
            all.extend(found);
            if done {
                return Ok(all);
            }
        }
    }
}

fn live(document: Option<Document>, now: Timestamp) -> Option<Document> {
    document.filter(|document| !document.expired(now))
}

fn token(text: &str) -> Result<String, StoreError> {
    serde_json::from_str(text).map_err(|err| corrupt(format!("hook token: {err}")))
}

impl<D: ReadDb> ServiceReads for ReadsOver<D> {
    fn indexed(&self, namespace: &Namespace, now: Timestamp) -> Result<Option<Entry>, StoreError> {
        live(self.0.document(DocKind::IndexEntry, &entry_key(namespace))?, now).as_ref().map(decode_entry).transpose()
    }

    fn indexed_under(
        &self,
        namespace: &Namespace,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<(String, Entry)>, StoreError> {
        let prefix = format!("{}/", namespace.as_str());
        let Page { items: found, continuation } = self.listed(DocKind::IndexEntry, &prefix, after, limit, now)?;
        let items = found
            .iter()
            .map(|(key, document)| Ok((namespace_of_key(key), decode_entry(document)?)))
            .collect::<Result<_, StoreError>>()?;
        Ok(Page { items, continuation })
    }

    fn namespaces_under(
        &self,
        namespace: &Namespace,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<(String, Timestamp)>, StoreError> {
        let prefix = format!("{}/", namespace.as_str());
        let Page { items: found, continuation } = self.listed(DocKind::IndexNamespace, &prefix, after, limit, now)?;
        let items = found
            .into_iter()
            .map(|(key, document)| (namespace_of_key(&key), document.expires.unwrap_or(Timestamp(i64::MAX))))
            .collect();
        Ok(Page { items, continuation })
    }

    fn secret(&self, name: &str, now: Timestamp) -> Result<Option<NamedSecret>, StoreError> {
        let Some(document) = live(self.0.document(DocKind::Secret, name)?, now) else { return Ok(None) };
        let secret = serde_json::from_str(&document.body).map_err(|err| corrupt(format!("secret: {err}")))?;
        Ok(Some(NamedSecret { secret, expires: document.expires.unwrap_or(Timestamp(i64::MAX)) }))
    }

    fn secret_names(&self, after: Option<&str>, limit: usize, now: Timestamp) -> Result<Page<String>, StoreError> {
        let Page { items: found, continuation } = self.listed(DocKind::Secret, "", after, limit, now)?;
        Ok(Page { items: found.into_iter().map(|(key, _)| key).collect(), continuation })
    }

    fn hook(&self, key: &HookKey) -> Result<Option<StoredHook>, StoreError> {
        self.0.document(DocKind::Hook, &key.path())?.as_ref().map(StoredHook::decode).transpose()
    }

    fn builds(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Page<Build>, StoreError> {
        let Page { items: found, continuation } = self.listed(DocKind::GithubBuild, prefix, after, limit, now)?;
        let items = found
            .iter()
            .map(|(_, document)| serde_json::from_str(&document.body).map_err(|err| corrupt(format!("build: {err}"))))
            .collect::<Result<_, _>>()?;
        Ok(Page { items, continuation })
    }

    fn hooks(&self, group: &str) -> Result<Vec<StoredHook>, StoreError> {
        let found = self.all_under(DocKind::Hook, &format!("{group}/"))?;
        found.iter().map(|(_, document)| StoredHook::decode(document)).collect()
    }

    fn hook_groups(&self) -> Result<Vec<String>, StoreError> {
        let mut groups: Vec<String> = Vec::new();
        for (key, _) in self.all_under(DocKind::Hook, "")? {
            let group = key.split_once('/').map_or(key.as_str(), |(group, _)| group);
            if groups.last().is_none_or(|last| last != group) {
                groups.push(group.to_owned());
            }
        }
        Ok(groups)
    }

    fn hook_token(&self, key: &HookKey) -> Result<Option<String>, StoreError> {
        self.0.document(DocKind::HookToken, &key.path())?.map(|document| token(&document.body)).transpose()
    }

    fn hook_fires(&self, key: &HookKey, after: Option<&str>, limit: usize) -> Result<Page<Fire>, StoreError> {
        let now = Timestamp(i64::MIN);
        let Page { items: found, continuation } =
            self.listed(DocKind::HookFire, &fires_prefix(key), after, limit, now)?;
        let items = found
            .iter()
            .map(|(_, document)| serde_json::from_str(&document.body).map_err(|err| corrupt(format!("fire: {err}"))))
            .collect::<Result<_, _>>()?;
        Ok(Page { items, continuation })
    }

    fn due_hooks(&self, now: Timestamp, limit: usize) -> Result<Vec<StoredHook>, StoreError> {
        self.0
            .due_documents(DocKind::Hook, now, limit)?
            .iter()
            .map(|(_, document)| StoredHook::decode(document))
            .collect()
    }
}
