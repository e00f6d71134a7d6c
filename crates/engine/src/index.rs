//! The Index service's rules (Taskcluster's index): which namespaces a completed task is
//! indexed under, with what rank, expiry and data, and when an entry replaces another.
//!
//! A namespace is dot-separated words; its last word is the entry's name, the rest its
//! parent. A task is indexed under `<namespace>` for each route `index.<namespace>`; the
//! values come from `task.extra.index` (`rank` 0, the task's `expires`, `data` `{}` when
//! absent). An entry of equal or higher rank replaces the one stored; a lower one does not.

use serde_json::{Map, Value};

use crate::{Rejection, TaskId, Timestamp};

/// The route prefix that asks for indexing.
pub const ROUTE_PREFIX: &str = "index.";

/// Longest namespace, in bytes: a route (which carries one) is at most 249 characters.
pub const MAX_NAMESPACE_LEN: usize = 255;

/// Milliseconds in a day: a namespace's expiry is rounded up to the next midnight (UTC), so
/// that indexing many tasks does not rewrite their parents' expiry each time.
const DAY_MS: i64 = 86_400_000;

/// A checked namespace: words of `[a-zA-Z0-9_!~*'()%-]`, joined by dots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// Checks `text` as a namespace; `field` names it in the refusal. The empty namespace is
    /// the root (only listings take it).
    pub fn parse(field: &str, text: &str) -> Result<Namespace, Rejection> {
        if text.len() > MAX_NAMESPACE_LEN {
            return Err(Rejection::invalid(field, format!("must be at most {MAX_NAMESPACE_LEN} bytes")));
        }
        if !text.is_empty() && !text.split('.').all(is_word) {
            return Err(Rejection::invalid(
                field,
                "must be words of letters, digits and _!~*'()%- joined by single dots",
            ));
        }
        Ok(Namespace(text.to_owned()))
    }

    /// The namespace as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its parent and its last word (`a.b.c` → `a.b`, `c`; `c` → ``, `c`).
    #[must_use]
    pub fn split(&self) -> (&str, &str) {
        split(&self.0)
    }

    /// Every namespace above it, nearest first (`a.b.c` → `a.b`, `a`).
    pub fn ancestors(&self) -> impl Iterator<Item = &str> {
        let text = self.0.as_str();
        text.match_indices('.').rev().map(move |(at, _)| &text[..at])
    }
}

/// A checked namespace's text (such as one of [`Namespace::ancestors`]) split into its parent
/// and its last word, as [`Namespace::split`].
#[must_use]
pub fn split(namespace: &str) -> (&str, &str) {
    namespace.rsplit_once('.').unwrap_or(("", namespace))
}

fn is_word(word: &str) -> bool {
    !word.is_empty()
        && word.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')' | b'%' | b'-')
        })
}

/// The namespaces a task's routes ask it to be indexed under, each once, in route order;
/// a route whose namespace is malformed is passed over, as Taskcluster's index does.
pub fn namespaces_of(routes: &[String]) -> Vec<Namespace> {
    let mut found: Vec<Namespace> = Vec::new();
    for route in routes {
        let Some(rest) = route.strip_prefix(ROUTE_PREFIX) else { continue };
        if let Ok(namespace) = Namespace::parse("routes", rest)
            && !rest.is_empty()
            && !found.contains(&namespace)
        {
            found.push(namespace);
        }
    }
    found
}

/// What a task keeps of its definition for indexing it when it completes: its `extra.index`
/// (any JSON, judged by [`Entry::of_task`] then), when a route starts with `index.`.
#[must_use]
pub fn options_of(routes: &[String], extra: &Value) -> Option<Value> {
    if routes.iter().any(|route| route.starts_with(ROUTE_PREFIX)) { extra.get("index").cloned() } else { None }
}

/// What an entry of the index holds besides its namespace.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The indexed task.
    pub task_id: TaskId,
    /// Higher ranks win; equal ranks replace.
    pub rank: i64,
    /// Free-form data the task asked to be kept with it.
    pub data: Map<String, Value>,
    /// When the entry is gone.
    pub expires: Timestamp,
}

impl Entry {
    /// The entry a completed task makes, from its `extra.index` (`options`; `None` when it
    /// asks for a rank that is not an integer, data that is not an object or an unreadable
    /// expiry: such a task is not indexed, as with Taskcluster).
    #[must_use]
    pub fn of_task(task_id: TaskId, options: Option<&Value>, task_expires: Timestamp) -> Option<Entry> {
        let field = |name: &str| options.and_then(|options| options.get(name));
        let rank = match field("rank") {
            None => 0,
            Some(rank) => rank.as_i64()?,
        };
        let data = match field("data") {
            None => Map::new(),
            Some(Value::Object(data)) => data.clone(),
            Some(_) => return None,
        };
        let expires = match field("expires") {
            None => task_expires,
            Some(expires) => Timestamp::parse(expires.as_str()?)?,
        };
        Some(Entry { task_id, rank, data, expires })
    }

    /// Whether this entry takes the place of `stored` (equal or higher rank).
    #[must_use]
    pub fn replaces(&self, stored: &Entry) -> bool {
        self.rank >= stored.rank
    }
}

/// The expiry a namespace keeps for an entry expiring at `expires`: the next midnight (UTC).
#[must_use]
pub fn namespace_expiry(expires: Timestamp) -> Timestamp {
    Timestamp((expires.millis().div_euclid(DAY_MS) + 1) * DAY_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id() -> TaskId {
        TaskId::parse("fN1SbArXTPSVFNUvaOlinQ").unwrap()
    }

    #[test]
    fn namespaces_are_dotted_words() {
        for good in ["a", "gecko.v2.mozilla-central.latest", "x_y.(1)!~*'%-", ""] {
            assert!(Namespace::parse("namespace", good).is_ok(), "{good}");
        }
        for bad in ["a..b", ".a", "a.", "a b", "a/b", "a.é"] {
            let err = Namespace::parse("namespace", bad).unwrap_err();
            assert!(err.to_string().starts_with("namespace: must be words"), "{bad}: {err}");
        }
        let long = "a".repeat(MAX_NAMESPACE_LEN + 1);
        assert!(Namespace::parse("namespace", &long).unwrap_err().to_string().contains("at most 255 bytes"));
    }

    #[test]
    fn a_namespace_splits_at_its_last_dot_and_lists_its_ancestors() {
        let namespace = Namespace::parse("n", "a.b.c").unwrap();
        assert_eq!(namespace.split(), ("a.b", "c"));
        assert_eq!(namespace.ancestors().collect::<Vec<_>>(), ["a.b", "a"]);
        let top = Namespace::parse("n", "c").unwrap();
        assert_eq!(top.split(), ("", "c"));
        assert_eq!(top.ancestors().count(), 0);
    }

    #[test]
    fn only_index_routes_with_good_namespaces_are_taken_each_once() {
        let routes: Vec<String> =
            ["index.a.b", "tc-treeherder.x", "index.", "index.a..b", "index.a.b", "index.c"].map(String::from).to_vec();
        let found: Vec<String> = namespaces_of(&routes).iter().map(|n| n.as_str().to_owned()).collect();
        assert_eq!(found, ["a.b", "c"]);
    }

    #[test]
    fn a_task_keeps_extra_index_only_when_a_route_asks_for_indexing() {
        let extra = json!({"index": {"rank": 3}, "other": 1});
        let routes = |routes: &[&str]| routes.iter().map(|r| (*r).to_owned()).collect::<Vec<_>>();
        assert_eq!(options_of(&routes(&["tc.x", "index.a.b"]), &extra), Some(json!({"rank": 3})));
        assert_eq!(options_of(&routes(&["tc.x"]), &extra), None);
        assert_eq!(options_of(&routes(&["index.a"]), &json!({})), None);
    }

    #[test]
    fn an_entry_takes_extra_index_or_the_defaults() {
        let expires = Timestamp(1_000);
        let plain = Entry::of_task(id(), None, expires).unwrap();
        assert_eq!((plain.rank, plain.data.len(), plain.expires), (0, 0, expires));
        let extra = json!({"index": {"rank": 7, "data": {"k": "v"}, "expires": "2027-01-01T00:00:00.000Z"}});
        let asked = Entry::of_task(id(), extra.get("index"), expires).unwrap();
        assert_eq!(asked.rank, 7);
        assert_eq!(asked.data.get("k"), Some(&json!("v")));
        assert_eq!(asked.expires, Timestamp::parse("2027-01-01T00:00:00.000Z").unwrap());
        for refused in
            [json!({"index": {"rank": "1"}}), json!({"index": {"rank": 1.5}}), json!({"index": {"data": [1]}})]
        {
            assert!(Entry::of_task(id(), refused.get("index"), expires).is_none(), "{refused}");
        }
    }

    #[test]
    fn equal_or_higher_ranks_replace_lower_ones_do_not() {
        let entry = |rank| Entry { task_id: id(), rank, data: Map::new(), expires: Timestamp(0) };
        assert!(entry(1).replaces(&entry(1)));
        assert!(entry(2).replaces(&entry(1)));
        assert!(!entry(0).replaces(&entry(1)));
    }

    #[test]
    fn a_namespace_expires_at_the_next_midnight() {
        let noon = Timestamp::parse("2026-11-28T12:00:00.000Z").unwrap();
        let midnight = Timestamp::parse("2026-11-29T00:00:00.000Z").unwrap();
        assert_eq!(namespace_expiry(noon), midnight);
        assert_eq!(namespace_expiry(midnight), Timestamp::parse("2026-11-30T00:00:00.000Z").unwrap());
    }
}
