//! A graph's progress: each labelled task's reruns left, the graph's counts, and what a
//! graph task's resolution or rerun does to them (`react`), from which the graph's state
//! follows.

use serde::Deserialize;

use crate::Timestamp;
use crate::status::{ReasonResolved, TaskState};
use crate::task::{MAX_RUNS, Task};

/// How many of a graph's tasks are not completed and how many failed for good: the graph's
/// state follows from these two counts, kept as its tasks resolve and rerun.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Tasks not (or no longer) completed.
    pub open: u32,
    /// Tasks that failed with no reruns left and were not run again since.
    pub failed: u32,
}

impl Tally {
    /// The graph's state: blocked by any failure for good, finished when nothing is open.
    #[must_use]
    pub fn state(self) -> GraphState {
        if self.failed > 0 {
            GraphState::Blocked
        } else if self.open == 0 {
            GraphState::Finished
        } else {
            GraphState::Running
        }
    }
}

/// What the scheduler does when one of a graph's tasks resolves or is run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// Nothing beyond the counts.
    Count,
    /// Run the task again (a queue rerun); one rerun is used.
    Rerun,
}

/// One of a graph's tasks changed between resolved and not: updates `node` (reruns left,
/// failed for good) and `tally`, and says whether to rerun the task. `was` is the task's
/// state before the transition, `task` the task after it.
#[must_use]
pub fn react(task: &Task, was: TaskState, node: &mut NodeProgress, tally: &mut Tally, now: Timestamp) -> Reaction {
    let state = task.state();
    if was == TaskState::Completed && state != TaskState::Completed {
        tally.open += 1;
    }
    if node.failed && !state.is_resolved() {
        node.failed = false;
        tally.failed = tally.failed.saturating_sub(1);
    }
    match state {
        TaskState::Completed if was != TaskState::Completed => tally.open = tally.open.saturating_sub(1),
        TaskState::Failed | TaskState::Exception if !was.is_resolved() => {
            if node.reruns_left > 0 && may_rerun(task, now) {
                node.reruns_left -= 1;
                return Reaction::Rerun;
            }
            node.failed = true;
            tally.failed += 1;
        }
        _ => {}
    }
    Reaction::Count
}

/// Whether the queue would run `task` again now, and the scheduler should: a cancellation is
/// the user's word, not a failure.
fn may_rerun(task: &Task, now: Timestamp) -> bool {
    let canceled = task.runs().last().is_some_and(|run| run.reason_resolved == Some(ReasonResolved::Canceled));
    !canceled && now < task.meta.deadline && task.runs().len() < MAX_RUNS
}

/// A graph task's rerun budget and whether it failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeProgress {
    /// Reruns not used yet.
    pub reruns_left: u32,
    /// Failed with no reruns left (and not run again since).
    pub failed: bool,
}

/// The state of a graph (seed 000's status structure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GraphState {
    /// Some task is not yet completed and none has failed for good.
    Running,
    /// A task failed with no reruns left: its dependents will never run.
    Blocked,
    /// Every task completed.
    Finished,
}

impl GraphState {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            GraphState::Running => "running",
            GraphState::Blocked => "blocked",
            GraphState::Finished => "finished",
        }
    }
}
