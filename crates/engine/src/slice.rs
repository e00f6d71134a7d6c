//! Swarming's task slices: a task's alternative dimension sets, tried in order.
//!
//! A task with `slices` waits on one slice at a time. The current slice's dimensions decide
//! which workers may claim it; once it has waited `expiresAfter` seconds, the next slice
//! that could run becomes current (the run keeps its place in line), and after the last the
//! task ends `deadline-exceeded`. A slice "could run" when it waits for capacity or a live
//! worker of the queue matches it; when none can, the task ends `resource-unavailable`.
//! A slice may carry its own `payload` (Swarming's TaskSlice properties), which its runs'
//! workers get in place of the task's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dimensions::Dimensions;
use crate::{Rejection, Timestamp};

/// Most slices a task may have (Swarming's limit).
pub const MAX_SLICES: usize = 8;
/// Longest a slice may wait, in seconds: 7 days.
pub const MAX_EXPIRES_AFTER: i64 = 7 * 24 * 3600;

/// One slice of a createTask body, shaped but not yet checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SliceInput {
    /// Required worker dimensions, as a task's `dimensions`.
    #[serde(default)]
    pub dimensions: BTreeMap<String, Vec<String>>,
    /// Seconds the slice waits for a worker once current.
    pub expires_after: i64,
    /// Whether the slice waits even when no live worker matches it.
    #[serde(default)]
    pub wait_for_capacity: bool,
    /// What a worker running this slice gets as the task's `payload`, if not the task's own.
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
}

/// A checked slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slice {
    /// Required worker dimensions.
    #[serde(default, skip_serializing_if = "Dimensions::is_empty")]
    pub dimensions: Dimensions,
    /// Seconds it waits once current.
    pub expires_after: u32,
    /// Whether it waits even when no live worker matches it.
    pub wait_for_capacity: bool,
    /// Its own payload (a JSON object), which its runs get instead of the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
}

/// Which slice a run waits on, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceAt {
    /// Index in the task's slices.
    pub index: u32,
    /// When it became current.
    pub since: Timestamp,
}

/// Checks a definition's `slices`; `dimensions_given` says whether the top-level
/// `dimensions` were given too, which slices replace.
///
/// # Errors
/// [`Rejection::Invalid`] naming the slice and field that break a rule.
pub fn parse_slices(raw: Option<Vec<SliceInput>>, dimensions_given: bool) -> Result<Vec<Slice>, Rejection> {
    let Some(raw) = raw else { return Ok(Vec::new()) };
    if dimensions_given {
        return Err(Rejection::invalid("slices", "cannot be given with `dimensions`: give each slice its own"));
    }
    if raw.is_empty() || raw.len() > MAX_SLICES {
        return Err(Rejection::invalid("slices", format!("must have between 1 and {MAX_SLICES} entries")));
    }
    let mut slices: Vec<Slice> = Vec::with_capacity(raw.len());
    for (i, input) in raw.into_iter().enumerate() {
        if !(1..=MAX_EXPIRES_AFTER).contains(&input.expires_after) {
            return Err(Rejection::invalid(
                format!("slices[{i}].expiresAfter"),
                format!("must be 1 to {MAX_EXPIRES_AFTER} seconds"),
            ));
        }
        let dimensions = Dimensions::parse_required(&format!("slices[{i}].dimensions"), input.dimensions)?;
        if let Some(j) = slices.iter().position(|earlier| earlier.dimensions == dimensions) {
            return Err(Rejection::invalid(format!("slices[{i}].dimensions"), format!("repeats slices[{j}]'s")));
        }
        if input.payload.as_ref().is_some_and(|payload| !payload.is_object()) {
            return Err(Rejection::invalid(format!("slices[{i}].payload"), "must be a JSON object"));
        }
        slices.push(Slice {
            dimensions,
            expires_after: input.expires_after as u32,
            wait_for_capacity: input.wait_for_capacity,
            payload: input.payload,
        });
    }
    Ok(slices)
}

/// What the queue knows of its live workers when it judges a task's slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capacity {
    /// Not read (the task has no slices): every slice counts as having capacity.
    Assumed,
    /// The dimensions of the queue's live workers (quarantined ones included).
    Workers(Vec<Dimensions>),
}

impl Capacity {
    /// Whether a live worker could run a slice requiring `dimensions`.
    #[must_use]
    pub fn matches(&self, dimensions: &Dimensions) -> bool {
        match self {
            Capacity::Assumed => true,
            Capacity::Workers(workers) => workers.iter().any(|worker| dimensions.matched_by(worker)),
        }
    }
}

/// The first slice from `from` on that could run: it waits for capacity, or a live worker
/// matches its dimensions.
#[must_use]
pub fn next_runnable(slices: &[Slice], from: usize, capacity: &Capacity) -> Option<usize> {
    (from..slices.len()).find(|&i| slices[i].wait_for_capacity || capacity.matches(&slices[i].dimensions))
}

/// The definition a worker gets for a run on slice `index`: `definition` (a stored task
/// definition) with the slice's own payload in place of the task's, or `None` when the slice
/// has none and the definition is handed over as it is.
///
/// # Errors
/// A definition that is not a JSON object.
pub fn handed_over(
    definition: &str,
    slices: &[Slice],
    index: u32,
) -> Result<Option<Box<serde_json::value::RawValue>>, serde_json::Error> {
    let Some(payload) = slices.get(index as usize).and_then(|slice| slice.payload.as_ref()) else {
        return Ok(None);
    };
    let mut object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(definition)?;
    object.insert("payload".to_owned(), payload.clone());
    serde_json::value::to_raw_value(&object).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: serde_json::Value) -> Result<Vec<Slice>, Rejection> {
        parse_slices(Some(serde_json::from_value(value).unwrap()), false)
    }

    #[test]
    fn slices_are_checked_by_field() {
        let ok = parse(json!([{"dimensions": {"os": ["Mac"]}, "expiresAfter": 60},
            {"dimensions": {"os": ["Linux"]}, "expiresAfter": 120, "waitForCapacity": true}]))
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert!(ok[1].wait_for_capacity && !ok[0].wait_for_capacity);
        let cases = [
            (json!([]), "slices"),
            (json!([{"expiresAfter": 0}]), "slices[0].expiresAfter"),
            (
                json!([{"expiresAfter": 5}, {"dimensions": {"os": ["a|"]}, "expiresAfter": 5}]),
                "slices[1].dimensions.os",
            ),
            (
                json!([{"dimensions": {"os": ["a"]}, "expiresAfter": 5}, {"dimensions": {"os": ["a"]}, "expiresAfter": 9}]),
                "slices[1].dimensions",
            ),
            (json!([{"expiresAfter": 5, "payload": ["echo"]}]), "slices[0].payload"),
        ];
        for (value, field) in cases {
            let err = parse(value.clone()).unwrap_err();
            assert!(matches!(&err, Rejection::Invalid { field: f, .. } if f == field), "{value}: {err}");
        }
        let nine: Vec<_> = (0..9).map(|i| json!({"dimensions": {"n": [i.to_string()]}, "expiresAfter": 1})).collect();
        assert!(parse(json!(nine)).is_err());
        assert!(parse_slices(Some(Vec::new()), true).is_err(), "not with top-level dimensions");
    }

    #[test]
    fn a_slices_payload_replaces_the_tasks_in_what_its_worker_gets() {
        let definition = r#"{"payload":{"command":["slow"]},"slices":[{"expiresAfter":5},{"dimensions":{"os":["Linux"]},"expiresAfter":5,"payload":{"command":["fast"]}}]}"#;
        let slices = parse(serde_json::from_str::<serde_json::Value>(definition).unwrap()["slices"].clone()).unwrap();
        assert!(handed_over(definition, &slices, 0).unwrap().is_none(), "the task's own");
        let second = handed_over(definition, &slices, 1).unwrap().expect("the slice's");
        let second: serde_json::Value = serde_json::from_str(second.get()).unwrap();
        assert_eq!(second["payload"], json!({"command": ["fast"]}));
        assert_eq!(
            second["slices"],
            serde_json::from_str::<serde_json::Value>(definition).unwrap()["slices"],
            "the rest as it was"
        );
    }

    #[test]
    fn the_next_runnable_slice_waits_or_has_capacity() {
        let slices = parse(json!([{"dimensions": {"os": ["Mac"]}, "expiresAfter": 60},
            {"dimensions": {"os": ["Win"]}, "expiresAfter": 60, "waitForCapacity": true},
            {"dimensions": {"os": ["Linux"]}, "expiresAfter": 60}]))
        .unwrap();
        let linux = Dimensions::parse("w", BTreeMap::from([("os".to_owned(), vec!["Linux".to_owned()])])).unwrap();
        let linux_only = Capacity::Workers(vec![linux]);
        assert_eq!(next_runnable(&slices, 0, &linux_only), Some(1), "waitForCapacity runs without capacity");
        assert_eq!(next_runnable(&slices, 2, &linux_only), Some(2));
        assert_eq!(next_runnable(&slices, 2, &Capacity::Workers(Vec::new())), None);
        assert_eq!(next_runnable(&slices, 0, &Capacity::Assumed), Some(0));
    }
}
