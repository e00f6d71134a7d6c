//! Task groups: what a group is, as the queue reports it and its messages carry it.

use serde::Serialize;

use crate::{TaskId, Timestamp};

/// A task group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskGroup {
    /// The group.
    pub task_group_id: TaskId,
    /// Its scheduler.
    pub scheduler_id: String,
    /// When it may be forgotten.
    pub expires: Timestamp,
    /// When it was sealed, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Timestamp>,
}
