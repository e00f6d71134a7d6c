//! Forgetting what expired: resolved tasks past their `expires` with everything that hangs
//! on them (dependency rows, artifact records, graph nodes), then the groups and graphs they
//! leave empty, task queues not seen for their retention, and the services' expired records
//! (index entries and namespaces, secrets, hook fires).

use shoal_engine::{TaskId, Timestamp};

use crate::StoreError;
use crate::WriteTx;

/// A backend's transaction, as expiry uses it.
pub trait ExpireTx {
    /// When a stored task expires (None when there is no such task).
    async fn task_expires(&mut self, task_id: TaskId) -> Result<Option<Timestamp>, StoreError>;

    /// Deletes a task that is resolved and expired at `now`, with its dependency rows (both
    /// ways), artifact records and graph node; answers its group, or `None` when it was not
    /// there or not expired.
    async fn delete_expired_task(&mut self, task_id: TaskId, now: Timestamp) -> Result<Option<TaskId>, StoreError>;

    /// Deletes a group, and the graph of the same id, once no task is left in it.
    async fn delete_group_if_empty(&mut self, group: TaskId) -> Result<(), StoreError>;

    /// Deletes up to `limit` task-queue records whose retention ended at `now`.
    async fn delete_expired_queues(&mut self, now: Timestamp, limit: usize) -> Result<(), StoreError>;
}

/// Deletes the tasks `task_ids` that are (still) resolved and expired at `now`, the groups
/// and graphs that are left without tasks, and up to `limit` expired task-queue records;
/// says how many tasks went.
pub async fn forget_tasks(
    tx: &mut impl WriteTx,
    task_ids: &[TaskId],
    now: Timestamp,
    limit: usize,
) -> Result<usize, StoreError> {
    let mut groups: Vec<TaskId> = Vec::new();
    let mut n_deleted = 0;
    for &task_id in task_ids {
        // Checked again here: a task rerun since it was listed is not expired any more.
        if let Some(group) = tx.delete_expired_task(task_id, now).await? {
            n_deleted += 1;
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
    }
    for group in groups {
        tx.delete_group_if_empty(group).await?;
    }
    tx.delete_expired_queues(now, limit).await?;
    tx.delete_expired_workers(now, limit).await?;
    tx.delete_expired_documents(now, limit).await?;
    Ok(n_deleted)
}
