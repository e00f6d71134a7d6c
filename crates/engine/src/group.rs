//! Task groups: what a group is, as the queue reports it and its messages carry it.

use serde::Serialize;

use crate::{Rejection, TaskId, Timestamp};

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

impl TaskGroup {
    /// Whether a new task of `scheduler_id` may join this group: only its own scheduler's
    /// tasks, and none once it is sealed.
    ///
    /// # Errors
    /// Conflict naming the rule.
    pub fn admit(&self, scheduler_id: &str) -> Result<(), Rejection> {
        let group = self.task_group_id;
        if self.scheduler_id != scheduler_id {
            return Err(Rejection::Conflict(format!(
                "task group {group} belongs to schedulerId {}, not {scheduler_id}",
                self.scheduler_id
            )));
        }
        if self.sealed.is_some() {
            return Err(Rejection::Conflict(format!("task group {group} is sealed; no task may be added")));
        }
        Ok(())
    }
}

/// The refusal of a task whose dependencies are missing or expire before its deadline, or
/// `None` when both lists are empty.
#[must_use]
pub fn dependency_rejection(missing: &[String], expiring: &[String]) -> Option<Rejection> {
    if !missing.is_empty() {
        return Some(Rejection::Input(format!(
            "dependencies: every dependency must be an existing task; missingTaskDependencies: {}",
            missing.join(", ")
        )));
    }
    if !expiring.is_empty() {
        return Some(Rejection::Input(format!(
            "dependencies: every dependency must expire after this task's deadline; expiringTaskDependencies: {}",
            expiring.join(", ")
        )));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_groups_scheduler_may_add_and_only_until_sealed() {
        let id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        let mut group = TaskGroup { task_group_id: id, scheduler_id: "s".into(), expires: Timestamp(0), sealed: None };
        assert!(group.admit("s").is_ok());
        assert!(group.admit("other").unwrap_err().to_string().contains("belongs to schedulerId s"));
        group.sealed = Some(Timestamp(1));
        assert!(group.admit("s").unwrap_err().to_string().contains("is sealed"));
    }

    #[test]
    fn missing_dependencies_are_named_before_expiring_ones() {
        assert!(dependency_rejection(&[], &[]).is_none());
        let both = dependency_rejection(&["a".into()], &["b".into()]).unwrap().to_string();
        assert!(both.contains("missingTaskDependencies: a"), "{both}");
        let expiring = dependency_rejection(&[], &["b".into(), "c".into()]).unwrap().to_string();
        assert!(expiring.contains("expiringTaskDependencies: b, c"), "{expiring}");
    }
}
