//! Commands on one existing task, as the queue's calls name them.

use crate::Timestamp;
use crate::event::Effects;
use crate::priority::Priority;
use crate::rejection::Rejection;
use crate::task::{Resolution, Task};

/// A command on one existing task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskCommand {
    /// scheduleTask.
    Schedule,
    /// reclaimTask.
    Reclaim {
        /// The run.
        run_id: u32,
    },
    /// reportCompleted / reportFailed / reportException.
    Resolve {
        /// The run.
        run_id: u32,
        /// How it ended.
        resolution: Resolution,
    },
    /// cancelTask.
    Cancel,
    /// rerunTask.
    Rerun,
    /// changeTaskPriority.
    ChangePriority(Priority),
}

impl TaskCommand {
    /// Runs the command's transition on `task`; a claim renewed by it holds `claim_timeout_secs`.
    ///
    /// # Errors
    /// The transition's rejection.
    pub fn apply(&self, task: &mut Task, now: Timestamp, claim_timeout_secs: i64) -> Result<Effects, Rejection> {
        match *self {
            TaskCommand::Schedule => task.schedule(now),
            TaskCommand::Reclaim { run_id } => task.reclaim(run_id, now, claim_timeout_secs),
            TaskCommand::Resolve { run_id, resolution } => task.resolve(run_id, resolution, now),
            TaskCommand::Cancel => task.cancel(now),
            TaskCommand::Rerun => task.rerun(now),
            TaskCommand::ChangePriority(priority) => task.change_priority(priority, now),
        }
    }
}
