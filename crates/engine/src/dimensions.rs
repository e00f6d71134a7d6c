//! Worker dimensions a task requires, and Swarming's rule that matches them to a worker.
//!
//! A worker reports, for each key, the values it has. A task names keys and, for each, the
//! values it requires: all of them (AND); a value `a|b|c` is satisfied by any one of its
//! alternatives (OR). So `{"os": ["Linux", "Ubuntu-22.04"]}` needs both, and
//! `{"os": ["Mac|Windows"]}` either. The pending index groups tasks with equal dimension sets
//! and finds the groups a worker may match through one anchor clause of each set.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Rejection;

/// Most keys a task or worker may name.
pub const MAX_KEYS: usize = 32;
/// Most values one key may list.
pub const MAX_VALUES: usize = 16;
/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 64;
/// Longest value, in bytes.
pub const MAX_VALUE_LEN: usize = 256;
/// Most combinations a task's OR values may spell out (the product of their alternatives),
/// as Swarming's.
pub const MAX_ALTERNATIVES: usize = 8;

/// A set of dimensions: key -> values (sorted, deduplicated), keys sorted. Never changed once
/// made, so copies share it: a waiting claimWork's request, its place in line and its parked
/// call hold one set (up to 512 values of 256 bytes) between them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dimensions(Arc<BTreeMap<String, Vec<String>>>);

impl Dimensions {
    /// A worker's dimensions: checks keys and values against the limits and normalizes the
    /// order; `field` names the JSON field in errors. A worker's value may not hold `|`.
    pub fn parse(field: &str, raw: BTreeMap<String, Vec<String>>) -> Result<Dimensions, Rejection> {
        Dimensions::parse_with(field, raw, false)
    }

    /// A task's required dimensions: as [`Dimensions::parse`], but a value may list
    /// alternatives `a|b` (sorted, so equal requirements are equal), at most
    /// [`MAX_ALTERNATIVES`] combinations in all.
    pub fn parse_required(field: &str, raw: BTreeMap<String, Vec<String>>) -> Result<Dimensions, Rejection> {
        Dimensions::parse_with(field, raw, true)
    }

    fn parse_with(field: &str, raw: BTreeMap<String, Vec<String>>, required: bool) -> Result<Dimensions, Rejection> {
        if raw.len() > MAX_KEYS {
            return Err(Rejection::invalid(field, format!("must have at most {MAX_KEYS} keys")));
        }
        let mut res = BTreeMap::new();
        let mut combinations = 1usize;
        for (key, values) in raw {
            let key_ok = key.len() <= MAX_KEY_LEN
                && key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b"-_.".contains(&b))
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            let at = format!("{field}.{key}");
            if !key_ok {
                return Err(Rejection::invalid(
                    at,
                    format!("keys must match ^[a-zA-Z-_.][0-9a-zA-Z-_.]*$ and be at most {MAX_KEY_LEN} bytes"),
                ));
            }
            if values.is_empty() || values.len() > MAX_VALUES {
                return Err(Rejection::invalid(at, format!("must list between 1 and {MAX_VALUES} values")));
            }
            let mut normalized = Vec::with_capacity(values.len());
            for value in values {
                if value.is_empty() || value.len() > MAX_VALUE_LEN {
                    return Err(Rejection::invalid(at, format!("value `{value}` must be 1 to {MAX_VALUE_LEN} bytes")));
                }
                if !value.contains('|') {
                    normalized.push(value);
                    continue;
                }
                if !required {
                    return Err(Rejection::invalid(
                        at,
                        format!("value `{value}` must not hold `|` (it means OR in a task's dimensions)"),
                    ));
                }
                let mut alternatives: Vec<&str> = value.split('|').collect();
                if alternatives.iter().any(|alternative| alternative.is_empty()) {
                    return Err(Rejection::invalid(at, format!("value `{value}` has an empty alternative")));
                }
                alternatives.sort_unstable();
                alternatives.dedup();
                combinations = combinations.saturating_mul(alternatives.len());
                normalized.push(alternatives.join("|"));
            }
            normalized.sort_unstable();
            normalized.dedup();
            res.insert(key, normalized);
        }
        if combinations > MAX_ALTERNATIVES {
            return Err(Rejection::invalid(
                field,
                format!("its `|` alternatives spell out {combinations} combinations; at most {MAX_ALTERNATIVES}"),
            ));
        }
        Ok(Dimensions(Arc::new(res)))
    }

    /// True when no key is required: every worker of the queue matches.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys and their values, keys in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.0.iter().map(|(key, values)| (key.as_str(), values.as_slice()))
    }

    /// Whether a worker having `worker` satisfies these (task) dimensions: every value of
    /// every key, each by one of its alternatives.
    #[must_use]
    pub fn matched_by(&self, worker: &Dimensions) -> bool {
        self.0.iter().all(|(key, required)| {
            worker.0.get(key).is_some_and(|have| {
                required
                    .iter()
                    .all(|value| alternatives(value).any(|one| have.binary_search_by(|h| h.as_str().cmp(one)).is_ok()))
            })
        })
    }

    /// The anchor of these (task) dimensions: the required value whose alternatives have the
    /// fewest entries filed (`filed(key, alternative)`), the first such in key and value
    /// order; `None` when nothing is required. An index files a set under its anchor's
    /// alternatives only, and a worker having none of them cannot match it, so a worker looks
    /// only where its own values are filed. SQLite's pending index and the waiting calls'
    /// [`crate::line::Line`] choose by this; PostgreSQL's `shoal_file_dimension_set` mirrors
    /// it (`tests/postgres/dimension_sets.rs`, counting at most 1000 entries per alternative).
    pub fn anchor(&self, filed: impl Fn(&str, &str) -> usize) -> Option<(&str, &str)> {
        self.iter()
            .flat_map(|(key, values)| values.iter().map(move |value| (key, value.as_str())))
            .min_by_key(|(key, value)| alternatives(value).map(|one| filed(key, one)).sum::<usize>())
    }

    /// Whether a worker has value `value` of `key`.
    #[must_use]
    pub fn has(&self, key: &str, value: &str) -> bool {
        self.0.get(key).is_some_and(|have| have.binary_search_by(|h| h.as_str().cmp(value)).is_ok())
    }
}

/// The alternatives of one required value (`a|b` -> `a`, `b`).
pub fn alternatives(value: &str) -> impl Iterator<Item = &str> {
    value.split('|')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs.iter().map(|(k, vs)| ((*k).to_owned(), vs.iter().map(|v| (*v).to_owned()).collect())).collect()
    }

    fn dims(pairs: &[(&str, &[&str])]) -> Dimensions {
        Dimensions::parse("dimensions", raw(pairs)).unwrap()
    }

    fn required(pairs: &[(&str, &[&str])]) -> Dimensions {
        Dimensions::parse_required("dimensions", raw(pairs)).unwrap()
    }

    #[test]
    fn repeated_values_are_and_and_bars_are_or() {
        let both = required(&[("os", &["Linux", "Ubuntu"]), ("pool", &["ci"])]);
        assert!(both.matched_by(&dims(&[("os", &["Linux", "Ubuntu"]), ("pool", &["ci"]), ("cpu", &["x86"])])));
        assert!(!both.matched_by(&dims(&[("os", &["Linux"]), ("pool", &["ci"])])), "every value is required");
        assert!(!both.matched_by(&dims(&[("os", &["Linux", "Ubuntu"])])), "missing key");
        let either = required(&[("os", &["Mac|Windows"]), ("gpu", &["amd|nvidia", "big"])]);
        assert!(either.matched_by(&dims(&[("os", &["Windows"]), ("gpu", &["nvidia", "big"])])));
        assert!(!either.matched_by(&dims(&[("os", &["Linux"]), ("gpu", &["nvidia", "big"])])), "no alternative");
        assert!(!either.matched_by(&dims(&[("os", &["Mac"]), ("gpu", &["amd"])])), "`big` is also required");
        assert!(Dimensions::default().matched_by(&Dimensions::default()));
    }

    #[test]
    fn alternatives_are_normalized_and_bounded() {
        assert_eq!(required(&[("os", &["b|a|b"])]), required(&[("os", &["a|b"])]));
        let raw = |v: &str| BTreeMap::from([("os".to_owned(), vec![v.to_owned()])]);
        let err = Dimensions::parse("dimensions", raw("a|b")).unwrap_err();
        assert!(err.to_string().contains("must not hold `|`"), "workers have values, not choices: {err}");
        assert!(Dimensions::parse_required("dimensions", raw("a||b")).is_err(), "empty alternative");
        let many =
            BTreeMap::from([("a".to_owned(), vec!["1|2|3".to_owned()]), ("b".to_owned(), vec!["1|2|3".to_owned()])]);
        let err = Dimensions::parse_required("dimensions", many).unwrap_err();
        assert!(err.to_string().contains("9 combinations"), "{err}");
    }

    #[test]
    fn equal_sets_are_equal_whatever_the_input_order() {
        let a = dims(&[("os", &["mac", "linux"]), ("gpu", &["none"])]);
        let b = dims(&[("gpu", &["none"]), ("os", &["linux", "mac", "linux"])]);
        assert_eq!(a, b, "the pending index groups by equality");
        assert_ne!(a, dims(&[("os", &["linux"])]));
    }

    #[test]
    fn limits_name_the_field() {
        let bad_key = BTreeMap::from([("9lives".to_owned(), vec!["x".to_owned()])]);
        let err = Dimensions::parse("dimensions", bad_key).unwrap_err();
        assert!(matches!(err, Rejection::Invalid { ref field, .. } if field == "dimensions.9lives"), "{err}");
        let empty = BTreeMap::from([("os".to_owned(), vec![])]);
        assert!(Dimensions::parse("dimensions", empty).is_err());
    }
}
