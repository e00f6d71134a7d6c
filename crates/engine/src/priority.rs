//! One priority scale for Taskcluster's named levels and Swarming's numbers.
//!
//! Swarming's 0..=255 (lower runs first) is the scale; each Taskcluster name sits on it, so a
//! queue holding both kinds orders them together. `lowest` (Taskcluster's default) is 224 and
//! `highest` is 32: a Swarming task at its usual 100..200 lands between `medium` and `lowest`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Rejection;

/// Taskcluster's names, most urgent first, with their places on the 0..=255 scale.
const NAMED: [(&str, u8); 7] = [
    ("highest", 32),
    ("very-high", 64),
    ("high", 96),
    ("medium", 128),
    ("low", 160),
    ("very-low", 192),
    ("lowest", 224),
];

/// A task's priority as the client wrote it: a Taskcluster name or a Swarming number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// One of Taskcluster's seven names (index into the table, 0 = `highest`).
    Named(u8),
    /// Swarming's 0..=255, lower is more urgent.
    Numeric(u8),
}

impl Priority {
    /// Taskcluster's default.
    pub const LOWEST: Priority = Priority::Named(6);

    /// Parses a name or a number in 0..=255; `field` names the JSON field in errors
    /// (`priority` in definitions, `newPriority` in changeTaskPriority).
    pub fn parse(field: &str, value: &serde_json::Value) -> Result<Priority, Rejection> {
        let rule = "must be one of highest, very-high, high, medium, low, very-low, lowest, or an integer 0..=255";
        match value {
            serde_json::Value::String(name) => NAMED
                .iter()
                .position(|(known, _)| known == name)
                .map(|idx| Priority::Named(idx as u8))
                .ok_or_else(|| Rejection::invalid(field, rule)),
            serde_json::Value::Number(number) => number
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .map(Priority::Numeric)
                .ok_or_else(|| Rejection::invalid(field, rule)),
            _ => Err(Rejection::invalid(field, rule)),
        }
    }

    /// The place on the shared scale: pending work is claimed in ascending rank.
    #[must_use]
    pub fn rank(self) -> u8 {
        match self {
            Priority::Named(idx) => NAMED[usize::from(idx)].1,
            Priority::Numeric(n) => n,
        }
    }

    /// The priorities whose createTask scope lets a task have this one: every name at least
    /// as urgent, and a number itself (`queue:create-task:<priority>:<taskQueueId>`).
    #[must_use]
    pub fn scope_names(self) -> Vec<String> {
        let mut names: Vec<String> =
            NAMED.iter().filter(|(_, rank)| *rank <= self.rank()).map(|(name, _)| (*name).to_owned()).collect();
        if let Priority::Numeric(n) = self {
            names.push(n.to_string());
        }
        names
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Priority::Named(idx) => f.write_str(NAMED[usize::from(*idx)].0),
            Priority::Numeric(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for Priority {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Priority::Named(idx) => serializer.serialize_str(NAMED[usize::from(*idx)].0),
            Priority::Numeric(n) => serializer.serialize_u8(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Priority, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Priority::parse("priority", &value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_and_numbers_share_one_scale() {
        let highest = Priority::parse("priority", &json!("highest")).unwrap();
        let lowest = Priority::parse("priority", &json!("lowest")).unwrap();
        let swarming = Priority::parse("priority", &json!(100)).unwrap();
        assert!(highest.rank() < swarming.rank() && swarming.rank() < lowest.rank());
        assert_eq!(Priority::LOWEST, lowest);
        assert_eq!(serde_json::to_value(swarming).unwrap(), json!(100));
        assert_eq!(serde_json::to_value(highest).unwrap(), json!("highest"));
    }

    #[test]
    fn a_priority_is_allowed_by_the_scopes_of_as_urgent_ones() {
        assert_eq!(Priority::parse("p", &json!("high")).unwrap().scope_names(), ["highest", "very-high", "high"]);
        assert_eq!(Priority::LOWEST.scope_names().len(), 7);
        assert_eq!(Priority::Numeric(70).scope_names(), ["highest", "very-high", "70"]);
    }

    #[test]
    fn rejects_normal_and_out_of_range() {
        assert!(Priority::parse("priority", &json!("normal")).is_err());
        assert!(Priority::parse("priority", &json!(256)).is_err());
        assert!(Priority::parse("priority", &json!(-1)).is_err());
        assert!(Priority::parse("priority", &json!(true)).is_err());
    }
}
