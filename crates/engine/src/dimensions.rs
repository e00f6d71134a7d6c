//! Worker dimensions a task requires, and the rule that matches them to a worker.
//!
//! A task names keys and, for each, the values it accepts; a worker reports, for each key,
//! the values it has. A worker matches when for every key of the task it has at least one
//! accepted value. The pending index groups tasks with equal dimension sets, so a claim
//! visits each group once, as Swarming's task queues do.

use std::collections::BTreeMap;

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

/// A set of dimensions: key -> values (sorted, deduplicated), keys sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dimensions(BTreeMap<String, Vec<String>>);

impl Dimensions {
    /// Checks keys and values against the limits and normalizes the order; `field` names the
    /// JSON field in errors (`dimensions` for tasks, `dimensions` of claimWork for workers).
    pub fn parse(field: &str, raw: BTreeMap<String, Vec<String>>) -> Result<Dimensions, Rejection> {
        if raw.len() > MAX_KEYS {
            return Err(Rejection::invalid(field, format!("must have at most {MAX_KEYS} keys")));
        }
        let mut res = BTreeMap::new();
        for (key, mut values) in raw {
            let key_ok = key.len() <= MAX_KEY_LEN
                && key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b"-_.".contains(&b))
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !key_ok {
                return Err(Rejection::invalid(
                    format!("{field}.{key}"),
                    format!("keys must match ^[a-zA-Z-_.][0-9a-zA-Z-_.]*$ and be at most {MAX_KEY_LEN} bytes"),
                ));
            }
            if values.is_empty() || values.len() > MAX_VALUES {
                return Err(Rejection::invalid(
                    format!("{field}.{key}"),
                    format!("must list between 1 and {MAX_VALUES} values"),
                ));
            }
            if let Some(bad) = values.iter().find(|v| v.is_empty() || v.len() > MAX_VALUE_LEN) {
                return Err(Rejection::invalid(
                    format!("{field}.{key}"),
                    format!("value `{bad}` must be 1 to {MAX_VALUE_LEN} bytes"),
                ));
            }
            values.sort_unstable();
            values.dedup();
            res.insert(key, values);
        }
        Ok(Dimensions(res))
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

    /// Whether a worker having `worker` satisfies these (task) dimensions.
    #[must_use]
    pub fn matched_by(&self, worker: &Dimensions) -> bool {
        self.0.iter().all(|(key, allowed)| {
            worker.0.get(key).is_some_and(|have| have.iter().any(|value| allowed.binary_search(value).is_ok()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(pairs: &[(&str, &[&str])]) -> Dimensions {
        let raw = pairs.iter().map(|(k, vs)| ((*k).to_owned(), vs.iter().map(|v| (*v).to_owned()).collect())).collect();
        Dimensions::parse("dimensions", raw).unwrap()
    }

    #[test]
    fn worker_needs_one_allowed_value_per_key() {
        let task = dims(&[("os", &["linux", "mac"]), ("gpu", &["none"])]);
        assert!(task.matched_by(&dims(&[("os", &["linux"]), ("gpu", &["none", "x"]), ("cpu", &["x86"])])));
        assert!(!task.matched_by(&dims(&[("os", &["linux"])])), "missing key");
        assert!(!task.matched_by(&dims(&[("os", &["win"]), ("gpu", &["none"])])), "no allowed value");
        assert!(Dimensions::default().matched_by(&Dimensions::default()));
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
