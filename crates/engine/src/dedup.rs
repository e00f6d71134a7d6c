//! Swarming's dedup of idempotent tasks: a task marked `idempotent` whose properties hash to
//! those of one that completed recently resolves `completed` at once, without running, and
//! reads its artifacts through that one.
//!
//! The properties are what decides a run's result: the task queue, the dimensions (or the
//! slices), the payload and the secrets. The hash is kept by the store only, never shown
//! (with secrets in it, a published hash would let anyone test guesses of them).

use ring::digest;
use serde_json::{Value, json};

use crate::dimensions::Dimensions;
use crate::secrets::Secrets;
use crate::slice::Slice;

/// Default seconds a completed idempotent task may serve as the result of a new one: 7 days.
pub const DEFAULT_WINDOW_SECS: i64 = 7 * 24 * 3600;

/// The SHA-256 (hex) of a task's properties, over a canonical JSON form (keys sorted, as
/// `serde_json` sorts them).
#[must_use]
pub fn properties_hash(
    task_queue_id: &str,
    dimensions: &Dimensions,
    slices: &[Slice],
    payload: &Value,
    secrets: Option<&Secrets>,
) -> String {
    let secrets: Value = secrets.and_then(|s| serde_json::from_str(s.expose()).ok()).unwrap_or(Value::Null);
    let canonical = json!({
        "taskQueueId": task_queue_id,
        "dimensions": dimensions,
        "slices": slices,
        "payload": payload,
        "secrets": secrets,
    })
    .to_string();
    let hash = digest::digest(&digest::SHA256, canonical.as_bytes());
    hash.as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_properties_hash_equally_whatever_their_key_order() {
        let a: Value = serde_json::from_str(r#"{"command": ["make"], "env": {"A": "1", "B": "2"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"env": {"B": "2", "A": "1"}, "command": ["make"]}"#).unwrap();
        let none = Dimensions::default();
        assert_eq!(properties_hash("p/q", &none, &[], &a, None), properties_hash("p/q", &none, &[], &b, None));
        assert_ne!(properties_hash("p/q", &none, &[], &a, None), properties_hash("p/r", &none, &[], &a, None));
        let secret = Secrets::parse(&json!({"k": "v"})).unwrap();
        assert_ne!(
            properties_hash("p/q", &none, &[], &a, None),
            properties_hash("p/q", &none, &[], &a, Some(&secret)),
            "the secrets count"
        );
        assert_eq!(properties_hash("p/q", &none, &[], &a, None).len(), 64);
    }
}
