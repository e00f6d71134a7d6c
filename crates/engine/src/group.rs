//! Task groups: what a group is, as the queue reports it and its messages carry it.

use serde::Serialize;

use crate::definition::TaskDefinition;
use crate::rejection::Conflict;
use crate::status::TaskState;
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

/// How long a task group outlives its latest-expiring task.
pub const GROUP_EXPIRY_SLACK_MS: i64 = 3600 * 1000;

/// When the group of a task defined as `definition` may expire at the earliest.
#[must_use]
pub fn group_expiry(definition: &TaskDefinition) -> Timestamp {
    Timestamp(definition.expires.millis() + GROUP_EXPIRY_SLACK_MS)
}

impl TaskGroup {
    /// The group a task defined as `definition` creates when it is the first of its group.
    #[must_use]
    pub fn first_of(definition: &TaskDefinition) -> TaskGroup {
        TaskGroup {
            task_group_id: definition.task_group_id,
            scheduler_id: definition.scheduler_id.clone(),
            expires: group_expiry(definition),
            sealed: None,
        }
    }

    /// Whether cancelTaskGroup may cancel this group's tasks: only once it is sealed, so that
    /// no task joins after the cancellation.
    ///
    /// # Errors
    /// Conflict when the group is not sealed.
    pub fn check_cancel(&self) -> Result<(), Rejection> {
        if self.sealed.is_none() {
            return Err(Conflict::GroupNotSealed(self.task_group_id).into());
        }
        Ok(())
    }

    /// Whether a new task of `scheduler_id` may join this group: only its own scheduler's
    /// tasks, and none once it is sealed.
    ///
    /// # Errors
    /// Conflict naming the rule.
    pub fn admit(&self, scheduler_id: &str) -> Result<(), Rejection> {
        let group = self.task_group_id;
        if self.scheduler_id != scheduler_id {
            return Err(Conflict::GroupOfAnotherScheduler {
                group,
                owner: self.scheduler_id.clone(),
                scheduler_id: scheduler_id.to_owned(),
            }
            .into());
        }
        if self.sealed.is_some() {
            return Err(Conflict::GroupSealed(group).into());
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

/// What createTask learns of each dependency: for each one other than the task itself, in
/// the definition's order, its state and expiry if it exists. Says for every dependency
/// whether it is satisfied already, or refuses the task (missing or expiring dependencies).
///
/// # Errors
/// The rejection of [`dependency_rejection`].
pub fn dependencies_satisfied(
    definition: &TaskDefinition,
    task_id: TaskId,
    found: impl IntoIterator<Item = Option<(TaskState, Timestamp)>>,
) -> Result<Vec<bool>, Rejection> {
    let mut found = found.into_iter();
    let mut satisfied = Vec::with_capacity(definition.dependencies.len());
    let (mut missing, mut expiring) = (Vec::new(), Vec::new());
    for &required in &definition.dependencies {
        if required == task_id {
            // Taskcluster allows a task to depend on itself: it then waits for scheduleTask.
            satisfied.push(false);
            continue;
        }
        let Some((state, expires)) = found.next().flatten() else {
            missing.push(required.to_string());
            continue;
        };
        if expires < definition.deadline {
            expiring.push(required.to_string());
        }
        satisfied.push(definition.requires.satisfied_by(state));
    }
    dependency_rejection(&missing, &expiring).map_or(Ok(satisfied), Err)
}

/// How many of a group's tasks are where: what its verdict is judged from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCounts {
    /// Every task of it.
    pub total: u64,
    /// Those not resolved.
    pub unresolved: u64,
    /// Those pending or running.
    pub active: u64,
    /// Those failed or resolved as exception.
    pub failed: u64,
}

/// A group's state in one word, as lists show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupVerdict {
    /// Some task is pending or running.
    Running,
    /// Nothing is pending or running, and tasks wait on dependencies of which some failed.
    Blocked,
    /// Nothing is pending or running, and tasks wait on dependencies not resolved yet.
    Waiting,
    /// Every task is resolved, some failed.
    Failed,
    /// Every task completed.
    Completed,
}

impl GroupCounts {
    /// The group's verdict.
    #[must_use]
    pub fn verdict(&self) -> GroupVerdict {
        match (self.unresolved, self.active, self.failed) {
            (0, _, 0) => GroupVerdict::Completed,
            (0, _, _) => GroupVerdict::Failed,
            (_, 1.., _) => GroupVerdict::Running,
            (_, 0, 1..) => GroupVerdict::Blocked,
            (_, 0, 0) => GroupVerdict::Waiting,
        }
    }
}

/// Most characters of a group's name.
const GROUP_NAME_CHARS: usize = 120;

/// A group's name: its graph's, else the task named like it (a decision task's), else what
/// the names of the tasks read (`members`) have in common, at a word's end, else the first's.
#[must_use]
pub fn group_name(graph: Option<&str>, namesake: Option<&str>, members: &[String]) -> Option<String> {
    let chosen = match (graph, namesake) {
        (Some(name), _) | (None, Some(name)) if !name.trim().is_empty() => name.trim().to_owned(),
        _ => {
            let first = members.iter().find(|name| !name.trim().is_empty())?;
            let mut common = first.as_str();
            for name in members {
                let shared = common.char_indices().zip(name.chars()).take_while(|((_, a), b)| a == b).count();
                common = &common[..common.char_indices().nth(shared).map_or(common.len(), |(at, _)| at)];
            }
            // A prefix ending inside a word names nothing: cut back to the last word's end.
            let whole = if common.len() == first.len() || members.len() == 1 {
                common
            } else {
                common.trim_end_matches(|c: char| c.is_alphanumeric())
            };
            let whole = whole.trim_end_matches(|c: char| !c.is_alphanumeric());
            if whole.chars().count() >= 3 { whole.to_owned() } else { first.trim().to_owned() }
        }
    };
    Some(chosen.chars().take(GROUP_NAME_CHARS).collect())
}

#[cfg(test)]
mod tests {
    use super::{GroupCounts, GroupVerdict, group_name};

    #[test]
    fn a_groups_verdict_comes_from_where_its_tasks_are() {
        let counts = |unresolved, active, failed| GroupCounts { total: 10, unresolved, active, failed };
        assert_eq!(counts(0, 0, 0).verdict(), GroupVerdict::Completed);
        assert_eq!(counts(0, 0, 3).verdict(), GroupVerdict::Failed);
        assert_eq!(counts(4, 1, 3).verdict(), GroupVerdict::Running, "a failure while others run");
        assert_eq!(counts(4, 0, 3).verdict(), GroupVerdict::Blocked);
        assert_eq!(counts(4, 0, 0).verdict(), GroupVerdict::Waiting);
    }

    #[test]
    fn a_group_is_named_by_its_graph_its_namesake_or_what_its_tasks_share() {
        let names = |list: &[&str]| list.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>();
        let members = names(&["nightly build linux", "nightly build mac", "nightly test"]);
        assert_eq!(group_name(Some("push 41"), Some("Decision"), &members).as_deref(), Some("push 41"));
        assert_eq!(group_name(None, Some("Decision Task"), &members).as_deref(), Some("Decision Task"));
        assert_eq!(group_name(None, None, &members).as_deref(), Some("nightly"), "whole words only");
        assert_eq!(group_name(None, None, &names(&["lint", "build"])).as_deref(), Some("lint"), "nothing shared");
        assert_eq!(group_name(None, None, &names(&["group task 0", "group task 1"])).as_deref(), Some("group task"));
        assert_eq!(group_name(None, None, &names(&["één", "één"])).as_deref(), Some("één"), "by characters");
        assert_eq!(group_name(None, Some("  "), &[]), None);
        assert_eq!(group_name(Some(&"x".repeat(500)), None, &[]).map(|name| name.len()), Some(120));
    }

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
    fn a_group_is_canceled_only_once_sealed() {
        let id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        let mut group = TaskGroup { task_group_id: id, scheduler_id: "s".into(), expires: Timestamp(0), sealed: None };
        let refused = group.check_cancel().unwrap_err();
        assert_eq!(refused, Rejection::Conflict(Conflict::GroupNotSealed(id)));
        assert_eq!(refused.to_string(), format!("task group {id} must be sealed before it can be canceled"));
        group.sealed = Some(Timestamp(1));
        assert!(group.check_cancel().is_ok());
    }

    #[test]
    fn missing_dependencies_are_named_before_expiring_ones() {
        assert!(dependency_rejection(&[], &[]).is_none());
        let both = dependency_rejection(&["a".into()], &["b".into()]).unwrap().to_string();
        assert!(both.contains("missingTaskDependencies: a"), "{both}");
        let expiring = dependency_rejection(&[], &["b".into(), "c".into()]).unwrap().to_string();
        assert!(expiring.contains("expiringTaskDependencies: b, c"), "{expiring}");
    }

    #[test]
    fn dependencies_are_judged_in_order_missing_before_expiring() {
        let me = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        let (a, b) =
            (TaskId::parse("aaaaaaaaQxCxxxxxxxxxxA").unwrap(), TaskId::parse("bbbbbbbbQxCxxxxxxxxxxA").unwrap());
        let input: crate::definition::TaskDefinitionInput = serde_json::from_value(serde_json::json!({
            "taskQueueId": "prov/wt",
            "created": "2026-01-01T00:00:00.000Z",
            "deadline": "2026-01-01T01:00:00.000Z",
            "payload": {},
            "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"},
            "dependencies": [a.as_str(), me.as_str(), b.as_str()]
        }))
        .unwrap();
        let definition = input.validate(me, Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap()).unwrap();
        let later = definition.deadline.plus_secs(1);
        let done = Some((TaskState::Completed, later));
        let running = Some((TaskState::Running, later));
        // The task itself waits for scheduleTask; the others by their state.
        assert_eq!(dependencies_satisfied(&definition, me, [done, running]).unwrap(), vec![true, false, false]);
        let expiring = Some((TaskState::Completed, Timestamp(definition.deadline.millis() - 1)));
        let err = dependencies_satisfied(&definition, me, [expiring, done]).unwrap_err().to_string();
        assert!(err.contains(&format!("expiringTaskDependencies: {a}")), "{err}");
        let err = dependencies_satisfied(&definition, me, [expiring, None]).unwrap_err().to_string();
        assert!(err.contains(&format!("missingTaskDependencies: {b}")), "{err}");
    }
}
