//! Operations on task groups: seal, cancel, change priority.

use shoal_engine::message;
use shoal_engine::priority::Priority;
use shoal_engine::rejection::Missing;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::{GroupCancellation, StoreError, TaskGroup};
use crate::{WriteTx, load_existing, step};

/// A backend's transaction, as the group operations use it.
pub trait GroupTx {
    /// A task group.
    async fn load_group(&mut self, group: TaskId) -> Result<Option<TaskGroup>, StoreError>;

    /// Seals a group.
    async fn seal_group(&mut self, group: TaskId, at: Timestamp) -> Result<(), StoreError>;

    /// How many tasks a group has.
    async fn group_size(&mut self, group: TaskId) -> Result<u64, StoreError>;

    /// A group's unresolved tasks, by task id.
    async fn unresolved_members(&mut self, group: TaskId) -> Result<Vec<TaskId>, StoreError>;

    /// Inserts a new task group, made by creating task `first` (a backend may leave a group
    /// made by its namesake implied by that task's row).
    async fn insert_group(&mut self, group: &TaskGroup, created: Timestamp, first: TaskId) -> Result<(), StoreError>;

    /// Moves a group's expiry later.
    async fn extend_group(&mut self, group: TaskId, expires: Timestamp) -> Result<(), StoreError>;
}

/// sealTaskGroup: no task may join the group afterwards.
pub async fn seal(tx: &mut impl WriteTx, group: TaskId, now: Timestamp) -> Result<TaskGroup, StoreError> {
    let mut found = existing(tx, group).await?;
    if found.sealed.is_none() {
        tx.seal_group(group, now).await?;
        found.sealed = Some(now);
        tx.publish(message::group_sealed(&found));
    }
    Ok(found)
}

/// cancelTaskGroup: cancels every unresolved task of a sealed group.
pub async fn cancel(tx: &mut impl WriteTx, group: TaskId, now: Timestamp) -> Result<GroupCancellation, StoreError> {
    existing(tx, group).await?.check_cancel()?;
    let size = tx.group_size(group).await?;
    let task_ids = each_unresolved(tx, group, now, |task| task.cancel(now)).await?;
    Ok(GroupCancellation {
        task_group_id: group,
        task_group_size: size,
        cancelled_count: task_ids.len() as u64,
        task_ids,
    })
}

/// changeTaskGroupPriority: changes the priority of every unresolved task of a group;
/// returns the ids of those it changed.
pub async fn change_priority(
    tx: &mut impl WriteTx,
    group: TaskId,
    priority: Priority,
    now: Timestamp,
) -> Result<Vec<TaskId>, StoreError> {
    let found = existing(tx, group).await?;
    let changed = each_unresolved(tx, group, now, |task| task.change_priority_with_group(priority, now)).await?;
    tx.publish(message::group_priority_changed(&found, priority, changed.len() as u64));
    Ok(changed)
}

/// The group, which must exist.
async fn existing(tx: &mut impl WriteTx, group: TaskId) -> Result<TaskGroup, StoreError> {
    match tx.load_group(group).await? {
        Some(found) => Ok(found),
        None => Err(Rejection::from(Missing::Group(group)).into()),
    }
}

/// Runs `transition` on each unresolved task of `group`; returns those it changed (refusals
/// are skipped: a task the rules leave alone is not counted).
async fn each_unresolved(
    tx: &mut impl WriteTx,
    group: TaskId,
    now: Timestamp,
    transition: impl Fn(&mut shoal_engine::task::Task) -> Result<shoal_engine::event::Effects, Rejection>,
) -> Result<Vec<TaskId>, StoreError> {
    let mut changed = Vec::new();
    for task_id in tx.unresolved_members(group).await? {
        let mut row = load_existing(tx, task_id).await?;
        let n_events = tx.events().len();
        match step(tx, &mut row, now, &transition).await {
            Ok(()) if tx.events().len() > n_events => changed.push(task_id),
            Ok(()) | Err(StoreError::Rejected(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(changed)
}
