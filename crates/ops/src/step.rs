//! The step: one engine transition on a loaded row, then everything it entails in the same
//! transaction: the row written back, its events and messages, its graph's reaction, and on
//! a resolution its group's and its dependents' (and, completed, its Index entries).
//!
//! Steps a step causes (a dependent scheduled, a graph task rerun) are taken in a loop, not
//! by recursion: an async function cannot contain itself.

use shoal_engine::event::{Effects, Event};
use shoal_engine::graph::Reaction;
use shoal_engine::message;
use shoal_engine::status::TaskState;
use shoal_engine::task::Task;
use shoal_engine::{Rejection, TaskId, Timestamp};

use crate::row::TaskRow;
use crate::{NewTask, Place, PriorRow, RowChange, Waiting, WriteTx, graph, start};
use crate::{StoreError, TaskEvent, TaskGroup};

/// Runs `transition` on `row` and writes what it did and entails.
pub async fn step(
    tx: &mut impl WriteTx,
    row: &mut TaskRow,
    now: Timestamp,
    transition: impl FnOnce(&mut Task) -> Result<Effects, Rejection>,
) -> Result<(), StoreError> {
    let before = PriorRow::of(&row.task);
    let effects = transition(&mut row.task)?;
    let mut released = Vec::new();
    persist(tx, row, now, before, effects, None, &mut released).await?;
    schedule_released(tx, released, now).await
}

/// [`step`] for a task not yet stored, whose transition already ran (on `before`): the row
/// is inserted in its stepped state, one write instead of an insert and an update.
pub(crate) async fn insert_stepped(
    tx: &mut impl WriteTx,
    row: &mut TaskRow,
    now: Timestamp,
    before: PriorRow,
    effects: Effects,
    new: NewTask<'_>,
) -> Result<(), StoreError> {
    let mut released = Vec::new();
    persist(tx, row, now, before, effects, Some(new), &mut released).await?;
    schedule_released(tx, released, now).await
}

/// Records what happened to `task`: its events (for the waiting workers) and their messages
/// (into the outbox), from the task as the events left it.
pub fn record(tx: &mut impl WriteTx, task: &Task, events: Vec<Event>) {
    for message in message::task_messages(task, &events) {
        tx.publish(message);
    }
    let queue = &task.meta.task_queue_id;
    tx.events().extend(events.into_iter().map(|event| {
        TaskEvent {
            task_id: task.task_id,
            task_queue_id: queue.clone(),
            dimensions: (matches!(event, Event::Pending { .. }) && !task.meta.dimensions.is_empty())
                .then(|| task.meta.dimensions.clone()),
            event,
        }
    }));
}

/// Marks the dependency on `required` satisfied for each `waiting` dependent whose
/// `requires` its resolution as `state` meets, and schedules each whose last unmet
/// dependency it was.
async fn release_dependents(
    tx: &mut impl WriteTx,
    required: TaskId,
    waiting: &[Waiting],
    state: TaskState,
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut released = Vec::new();
    collect_released(tx, required, waiting, state, &mut released).await?;
    schedule_released(tx, released, now).await
}

/// Writes a transitioned row and what it entails; dependents it releases are added to
/// `released` for the caller to schedule.
async fn persist(
    tx: &mut impl WriteTx,
    row: &mut TaskRow,
    now: Timestamp,
    mut before: PriorRow,
    mut effects: Effects,
    mut new: Option<NewTask<'_>>,
    released: &mut Vec<TaskRow>,
) -> Result<(), StoreError> {
    loop {
        match new.take() {
            Some(new) => tx.insert_task(row, new).await?,
            None => {
                let place = Place::after(&before, &row.task);
                let slice = row.task.status_slice();
                let moved_from = match (place, before.slice) {
                    (Place::Keep, Some(old)) if Some(old) != slice => {
                        row.task.meta.slices.get(old as usize).map(|s| s.dimensions.clone())
                    }
                    _ => None,
                };
                let change = RowChange {
                    before,
                    place,
                    priority_changed: before.priority != row.task.meta.priority,
                    moved_from,
                };
                tx.update_task(row, &change).await?;
            }
        }
        record(tx, &row.task, effects.0);
        crate::note_completion(tx, &row.task, before.state, now).await?;
        // The overview's recent failures: filed when a task fails, off the list when it runs again.
        let failed = |state: TaskState| matches!(state, TaskState::Failed | TaskState::Exception);
        if failed(row.task.state()) != failed(before.state) {
            tx.file_failure(row.task.task_id, failed(row.task.state()).then_some(now)).await?;
        }
        let was_resolved = before.state.is_resolved();
        let state = row.task.state();
        if was_resolved != state.is_resolved()
            && row.task.meta.scheduler_id == tx.settings().graph_scheduler_id.as_str()
            && graph::react(tx, &row.task, before.state, now).await? == Reaction::Rerun
        {
            // The graph runs it again at once: to its dependents and its group it never
            // resolved.
            before = PriorRow::of(&row.task);
            effects = row.task.rerun(now)?;
            continue;
        }
        if !was_resolved && state.is_resolved() {
            let task = &row.task;
            if state == TaskState::Completed {
                crate::index::index_completed(tx, task, now).await?;
            }
            if let Some(consequences) = tx.consequences(task.task_id, task.meta.task_group_id, state, now).await? {
                publish_resolved_groups(tx, consequences.group_resolved.as_slice());
                collect_released(tx, task.task_id, &consequences.waiting, state, released).await?;
            }
        }
        return Ok(());
    }
}

/// What a transaction's resolutions entail, once judged together (a PostgreSQL gathering):
/// each group in `emptied` (those they left with no unresolved task) resolved, and each
/// resolution's waiting dependents released. One resolution alone is judged by
/// [`crate::DependencyTx::consequences`] in the step, to the same effect.
pub async fn settle_resolutions(
    tx: &mut impl WriteTx,
    emptied: &[TaskGroup],
    resolutions: Vec<(TaskId, TaskState, Timestamp, Vec<Waiting>)>,
) -> Result<(), StoreError> {
    publish_resolved_groups(tx, emptied);
    for (required, state, now, waiting) in resolutions {
        if !waiting.is_empty() {
            release_dependents(tx, required, &waiting, state, now).await?;
        }
    }
    Ok(())
}

/// A group with no unresolved task left is resolved: its message.
fn publish_resolved_groups(tx: &mut impl WriteTx, emptied: &[TaskGroup]) {
    for group in emptied {
        tx.publish(message::group_resolved(group));
    }
}

/// Marks satisfied what `required`'s resolution as `state` satisfies, and adds to
/// `released` each dependent (loaded, so locked where rows are) left with nothing to wait for.
async fn collect_released(
    tx: &mut impl WriteTx,
    required: TaskId,
    waiting: &[Waiting],
    state: TaskState,
    released: &mut Vec<TaskRow>,
) -> Result<(), StoreError> {
    for waiting in waiting.iter().filter(|waiting| waiting.requires.satisfied_by(state)) {
        // Lock the dependent before counting what it still waits for: two of its
        // dependencies resolving at once on two servers then see each other's release.
        let Some(row) = tx.load(waiting.dependent).await? else { continue };
        tx.mark_satisfied(required, waiting.dependent).await?;
        if !tx.has_unmet_dependencies(waiting.dependent).await? {
            released.push(row);
        }
    }
    Ok(())
}

/// Schedules released dependents (and whatever that entails, in turn).
async fn schedule_released(tx: &mut impl WriteTx, released: Vec<TaskRow>, now: Timestamp) -> Result<(), StoreError> {
    let mut queue = std::collections::VecDeque::from(released);
    let mut more = Vec::new();
    while let Some(mut row) = queue.pop_front() {
        let before = PriorRow::of(&row.task);
        // Past its deadline the dependent is left for the deadline to resolve.
        let effects = match start(tx, &mut row.task, now).await {
            Ok(effects) => effects,
            Err(StoreError::Rejected(_)) => continue,
            Err(err) => return Err(err),
        };
        persist(tx, &mut row, now, before, effects, None, &mut more).await?;
        queue.extend(more.drain(..));
    }
    Ok(())
}
