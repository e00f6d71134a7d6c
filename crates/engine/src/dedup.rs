//! Swarming's dedup of idempotent tasks: a task marked `idempotent` whose properties hash to
//! those of one that completed recently resolves `completed` at once, without running, and
//! reads its artifacts through that one.
//!
//! The properties are what decides a run's result and who may see it: the task queue, the
//! dimensions (or the slices), the payload, and the project, scheduler, scopes and routes (a
//! task never takes the result of another project's, or of one acting with other scopes). A
//! task with secrets is never deduplicated: a hash over them would tell a caller, by an
//! instant completion, whether a guessed secret is right. The hash is kept by the store only.

use ring::digest;
use serde_json::{Value, json};

use crate::dimensions::Dimensions;
use crate::slice::Slice;

/// Default seconds a completed idempotent task may serve as the result of a new one: 7 days.
pub const DEFAULT_WINDOW_SECS: i64 = 7 * 24 * 3600;

/// What of a task its dedup hash covers.
pub struct Properties<'a> {
    /// `provisionerId/workerType`.
    pub task_queue_id: &'a str,
    /// The project the task belongs to.
    pub project_id: &'a str,
    /// The scheduler that created it.
    pub scheduler_id: &'a str,
    /// The scopes it acts with (order and repeats do not count).
    pub scopes: &'a [String],
    /// Its routes (order and repeats do not count).
    pub routes: &'a [String],
    /// Required worker dimensions.
    pub dimensions: &'a Dimensions,
    /// Its slices, if any.
    pub slices: &'a [Slice],
    /// Its payload.
    pub payload: &'a Value,
}

/// The SHA-256 (hex) of a task's properties, over a canonical JSON form (keys sorted, as
/// `serde_json` sorts them).
#[must_use]
pub fn properties_hash(properties: &Properties<'_>) -> String {
    let set = |items: &[String]| {
        let mut items: Vec<&str> = items.iter().map(String::as_str).collect();
        items.sort_unstable();
        items.dedup();
        Value::from(items)
    };
    let canonical = json!({
        "taskQueueId": properties.task_queue_id,
        "projectId": properties.project_id,
        "schedulerId": properties.scheduler_id,
        "scopes": set(properties.scopes),
        "routes": set(properties.routes),
        "dimensions": properties.dimensions,
        "slices": properties.slices,
        "payload": properties.payload,
    })
    .to_string();
    let hash = digest::digest(&digest::SHA256, canonical.as_bytes());
    hash.as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_properties_hash_equally_whatever_their_order() {
        let a: Value = serde_json::from_str(r#"{"command": ["make"], "env": {"A": "1", "B": "2"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"env": {"B": "2", "A": "1"}, "command": ["make"]}"#).unwrap();
        let none = Dimensions::default();
        let (scopes, routes) = (vec!["s:1".to_owned(), "s:2".to_owned()], vec!["r".to_owned()]);
        let base = Properties {
            task_queue_id: "p/q",
            project_id: "none",
            scheduler_id: "-",
            scopes: &scopes,
            routes: &routes,
            dimensions: &none,
            slices: &[],
            payload: &a,
        };
        let hash = properties_hash(&base);
        assert_eq!(hash.len(), 64);
        let reordered = vec!["s:2".to_owned(), "s:1".to_owned(), "s:1".to_owned()];
        assert_eq!(hash, properties_hash(&Properties { payload: &b, scopes: &reordered, ..base }));
        let other_scopes = vec!["s:1".to_owned()];
        let other_routes = vec!["r".to_owned(), "r2".to_owned()];
        for other in [
            Properties { task_queue_id: "p/r", ..base },
            Properties { project_id: "other", ..base },
            Properties { scheduler_id: "other", ..base },
            Properties { scopes: &other_scopes, ..base },
            Properties { routes: &other_routes, ..base },
        ] {
            assert_ne!(hash, properties_hash(&other));
        }
    }
}
