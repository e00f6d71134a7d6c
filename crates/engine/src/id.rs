//! Slugids: 22-character URL-safe base64 encodings of v4 UUIDs, used for task and group ids.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A task or task-group id; always a valid v4 slugid, stored inline so it is `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId([u8; 22]);

impl TaskId {
    /// Accepts exactly Taskcluster's slugid pattern
    /// `^[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]$`.
    pub fn parse(text: &str) -> Option<TaskId> {
        let bytes: [u8; 22] = text.as_bytes().try_into().ok()?;
        let base64 = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        let valid = bytes.iter().all(|&b| base64(b))
            && (b'Q'..=b'T').contains(&bytes[8])
            && b"CGKOSWaeimquy26-".contains(&bytes[10])
            && b"AQgw".contains(&bytes[21]);
        valid.then_some(TaskId(bytes))
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes pass `parse`, so this never fails.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.as_str())
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TaskId, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TaskId::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not a slugid")))
    }
}

/// Checks Taskcluster's identifier rule `^[a-zA-Z0-9-_]{1,38}$` (provisionerId, schedulerId, worker ids).
#[must_use]
pub fn is_identifier(text: &str) -> bool {
    (1..=38).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks Taskcluster's workerType rule `^[a-z]([-a-z0-9]{0,36}[a-z0-9])?$`.
#[must_use]
pub fn is_worker_type(text: &str) -> bool {
    let bytes = text.as_bytes();
    let lower_or_digit = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match bytes {
        [first] => first.is_ascii_lowercase(),
        [first, middle @ .., last] => {
            bytes.len() <= 38
                && first.is_ascii_lowercase()
                && lower_or_digit(last)
                && middle.iter().all(|b| lower_or_digit(b) || *b == b'-')
        }
        [] => false,
    }
}

/// Splits and checks a `provisionerId/workerType` task queue id.
#[must_use]
pub fn split_task_queue_id(text: &str) -> Option<(&str, &str)> {
    let (provisioner_id, worker_type) = text.split_once('/')?;
    (is_identifier(provisioner_id) && is_worker_type(worker_type)).then_some((provisioner_id, worker_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugid_pattern() {
        assert!(TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").is_some());
        assert!(TaskId::parse("fN1S_sG4xTu5SNmTb0Xd6A").is_none(), "9th char must be Q-T");
        assert!(TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6B").is_none(), "last char must be AQgw");
        assert!(TaskId::parse("short").is_none());
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("proj-1_x"));
        assert!(!is_identifier(""));
        assert!(!is_identifier(&"a".repeat(39)));
        assert!(is_worker_type("a"));
        assert!(is_worker_type("linux-64"));
        assert!(!is_worker_type("Linux"));
        assert!(!is_worker_type("linux-"));
        assert_eq!(split_task_queue_id("prov/wt"), Some(("prov", "wt")));
        assert_eq!(split_task_queue_id("prov"), None);
        assert_eq!(split_task_queue_id("prov/w/t"), None);
    }
}
