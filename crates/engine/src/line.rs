//! A queue's line of calls waiting for work, longest-waiting first, each also filed under every
//! dimension value its worker has: a run that becomes pending finds the calls that can take
//! it among those having its rarest required value, not by trying the whole line in turn (a
//! Swarming fleet gives every bot its own `id`, and a task may need one of them).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use crate::dimensions::{Dimensions, alternatives};

/// Waiting calls by place in line (smaller places waited longer), each with the dimensions
/// of its worker, which `dimensions_of` reads off the item.
pub struct Line<T> {
    calls: BTreeMap<u64, T>,
    /// Hash of (key, value) -> places of the calls whose workers have that value. Hashes,
    /// not copies of the values (up to 512 of 256 bytes a worker): a collision only adds
    /// candidates, and every candidate is matched against the run before it is taken.
    by_value: HashMap<u64, BTreeSet<u64>>,
    /// Keyed per line, so that values cannot be chosen to collide.
    hasher: RandomState,
    dimensions_of: fn(&T) -> &Dimensions,
}

impl<T> std::fmt::Debug for Line<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Line").field("calls", &self.calls.len()).finish_non_exhaustive()
    }
}

impl<T> Line<T> {
    /// An empty line whose calls' worker dimensions are `dimensions_of(call)`.
    #[must_use]
    pub fn new(dimensions_of: fn(&T) -> &Dimensions) -> Line<T> {
        Line { calls: BTreeMap::new(), by_value: HashMap::new(), hasher: RandomState::new(), dimensions_of }
    }

    /// Where calls having `value` of `key` are filed.
    fn slot(&self, key: &str, value: &str) -> u64 {
        self.hasher.hash_one((key, value))
    }

    /// Puts `call` in line at `place` (which no call in line holds).
    pub fn insert(&mut self, place: u64, call: T) {
        for (key, values) in (self.dimensions_of)(&call).iter() {
            for value in values {
                let slot = self.slot(key, value);
                self.by_value.entry(slot).or_default().insert(place);
            }
        }
        self.calls.insert(place, call);
    }

    /// Takes the call at `place` out of line.
    pub fn remove(&mut self, place: u64) -> Option<T> {
        let call = self.calls.remove(&place)?;
        for (key, values) in (self.dimensions_of)(&call).iter() {
            for value in values {
                let slot = self.slot(key, value);
                if let Some(places) = self.by_value.get_mut(&slot) {
                    places.remove(&place);
                    if places.is_empty() {
                        self.by_value.remove(&slot);
                    }
                }
            }
        }
        Some(call)
    }

    /// The place of the longest-waiting call whose worker can take a run needing `required`
    /// (none: any worker). Only workers having an alternative of every required value can;
    /// those of the value whose alternatives have the fewest calls are tried, in line order,
    /// at most `most` of each alternative's.
    #[must_use]
    pub fn first_able(&self, required: Option<&Dimensions>, most: usize) -> Option<u64> {
        let Some(required) = required.filter(|required| !required.is_empty()) else {
            return self.calls.keys().next().copied();
        };
        let calls = |key: &str, one: &str| self.by_value.get(&self.slot(key, one)).map_or(0, BTreeSet::len);
        let able =
            |place: &&u64| self.calls.get(place).is_some_and(|call| required.matched_by((self.dimensions_of)(call)));
        let Some((key, value)) = required.anchor(calls) else {
            // No required value (never so for checked dimensions): every call in turn.
            return self.calls.keys().take(most).find(able).copied();
        };
        let sets = alternatives(value).filter_map(|one| self.by_value.get(&self.slot(key, one)));
        sets.into_iter().filter_map(|places| places.iter().take(most).find(able)).min().copied()
    }

    /// The call at `place`.
    #[must_use]
    pub fn get(&self, place: u64) -> Option<&T> {
        self.calls.get(&place)
    }

    /// The calls in line order.
    pub fn calls(&self) -> impl Iterator<Item = &T> {
        self.calls.values()
    }

    /// How many calls are in line.
    #[must_use]
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether nobody is in line.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Takes every call out of line.
    pub fn clear(&mut self) {
        self.calls.clear();
        self.by_value.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dimensions from `key:value` pairs (a value may hold `|` alternatives).
    fn with(pairs: &[(&str, &str)]) -> Dimensions {
        let mut raw: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in pairs {
            raw.entry((*key).to_owned()).or_default().push((*value).to_owned());
        }
        Dimensions::parse_required("dimensions", raw).unwrap()
    }

    fn line() -> Line<Dimensions> {
        Line::new(|dimensions| dimensions)
    }

    #[test]
    fn a_run_needing_a_rare_value_finds_the_one_call_having_it() {
        let mut line = line();
        for n in 0..1000u64 {
            line.insert(n, with(&[("id", &format!("bot{n}")), ("os", "linux")]));
        }
        assert_eq!(line.first_able(Some(&with(&[("id", "bot700"), ("os", "linux")])), usize::MAX), Some(700));
        assert_eq!(line.first_able(Some(&with(&[("id", "bot700"), ("os", "mac")])), usize::MAX), None);
        assert_eq!(line.first_able(Some(&with(&[("id", "bot1000")])), usize::MAX), None);
        assert_eq!(line.first_able(None, usize::MAX), Some(0));
        assert!(line.remove(700).is_some());
        assert_eq!(line.first_able(Some(&with(&[("id", "bot700")])), usize::MAX), None);
        for n in 0..1000 {
            line.remove(n);
        }
        assert!(line.is_empty() && line.by_value.is_empty(), "every filing left with its call");
    }

    #[test]
    fn at_most_so_many_calls_are_tried() {
        let mut line = line();
        for n in 0..10u64 {
            line.insert(n, with(&[("os", "linux")]));
        }
        line.insert(10, with(&[("os", "linux"), ("gpu", "yes")]));
        let gpu = with(&[("os", "linux"), ("gpu", "yes")]);
        assert_eq!(line.first_able(Some(&gpu), 1), Some(10), "the rarer value is tried first");
        let linux_pool = with(&[("os", "linux"), ("pool", "p")]);
        line.insert(11, with(&[("os", "linux"), ("pool", "p")]));
        for n in 12..30u64 {
            line.insert(n, with(&[("pool", "p")]));
        }
        assert_eq!(line.first_able(Some(&linux_pool), 5), None, "11 is past the first 5 of os:linux");
        assert_eq!(line.first_able(Some(&linux_pool), 12), Some(11));
    }

    #[test]
    fn alternatives_find_the_longest_waiting_call_having_any_of_them() {
        let mut line = line();
        line.insert(1, with(&[("os", "windows")]));
        line.insert(2, with(&[("os", "mac")]));
        line.insert(3, with(&[("os", "linux")]));
        assert_eq!(line.first_able(Some(&with(&[("os", "linux|mac")])), usize::MAX), Some(2));
        line.remove(2);
        assert_eq!(line.first_able(Some(&with(&[("os", "linux|mac")])), usize::MAX), Some(3));
    }

    /// The place of the first of `calls` (in line order) a run needing `required` can go to,
    /// by trying each: what the index must agree with.
    fn by_trying(calls: &[(u64, Dimensions)], required: &Dimensions) -> Option<u64> {
        calls.iter().find(|(_, worker)| required.matched_by(worker)).map(|(place, _)| *place)
    }

    // Few keys and values, so that workers share them and runs often match several.
    const KEYS: [&str; 3] = ["os", "pool", "gpu"];
    const VALUES: [&str; 3] = ["a", "b", "c"];

    /// A worker having some of the values of each key.
    fn worker() -> impl proptest::strategy::Strategy<Value = Dimensions> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(proptest::bool::ANY, KEYS.len() * VALUES.len()).prop_map(|picks| {
            let all = KEYS.iter().flat_map(|key| VALUES.iter().map(move |value| (*key, *value)));
            let pairs: Vec<(&str, &str)> = all.zip(picks).filter(|(_, picked)| *picked).map(|(pair, _)| pair).collect();
            with(&pairs)
        })
    }

    /// A run's needs: per key nothing, one value, two alternatives or a value nobody has.
    fn needs() -> impl proptest::strategy::Strategy<Value = Dimensions> {
        use proptest::strategy::Strategy;
        proptest::collection::vec((0..4_usize, 0..VALUES.len(), 0..VALUES.len()), KEYS.len()).prop_map(|choices| {
            let values: Vec<(&str, String)> = KEYS
                .iter()
                .zip(choices)
                .filter_map(|(key, (kind, one, other))| match kind {
                    0 => None,
                    1 => Some((*key, VALUES[one].to_owned())),
                    2 => Some((*key, format!("{}|{}", VALUES[one], VALUES[other]))),
                    _ => Some((*key, "z".to_owned())),
                })
                .collect();
            let pairs: Vec<(&str, &str)> = values.iter().map(|(key, value)| (*key, value.as_str())).collect();
            with(&pairs)
        })
    }

    proptest::proptest! {
        #[test]
        fn the_index_finds_whom_trying_every_call_in_turn_would(
            workers in proptest::collection::vec(worker(), 1..12),
            runs in proptest::collection::vec(needs(), 8),
        ) {
            let mut line = line();
            let mut calls: Vec<(u64, Dimensions)> = Vec::new();
            for (place, worker) in (0..).zip(workers) {
                line.insert(place, worker.clone());
                calls.push((place, worker));
            }
            for required in runs {
                let expected = by_trying(&calls, &required);
                proptest::prop_assert_eq!(line.first_able(Some(&required), usize::MAX), expected);
                // The one found leaves, as a woken or taken call does.
                if let Some(place) = expected {
                    line.remove(place);
                    calls.retain(|(at, _)| *at != place);
                }
            }
        }
    }
}
