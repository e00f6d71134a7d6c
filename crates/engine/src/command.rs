//! Commands on one existing task, as the queue's calls name them.

use crate::Timestamp;
use crate::event::Effects;
use crate::priority::Priority;
use crate::rejection::Rejection;
use crate::slice::Capacity;
use crate::status::RunStats;
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
        /// What the worker measured of it (boxed: commands travel in queues, mostly without).
        stats: Option<Box<RunStats>>,
    },
    /// cancelTask.
    Cancel,
    /// rerunTask.
    Rerun,
    /// changeTaskPriority.
    ChangePriority(Priority),
}

impl TaskCommand {
    /// Runs the command's transition on `task`; a claim renewed by it holds `claim_timeout_secs`;
    /// `capacity` judges the slices of a task scheduled by it.
    ///
    /// # Errors
    /// The transition's rejection.
    pub fn apply(
        &self,
        task: &mut Task,
        now: Timestamp,
        claim_timeout_secs: i64,
        capacity: &Capacity,
    ) -> Result<Effects, Rejection> {
        match self {
            TaskCommand::Schedule => task.schedule(now, capacity),
            TaskCommand::Reclaim { run_id } => task.reclaim(*run_id, now, claim_timeout_secs),
            TaskCommand::Resolve { run_id, resolution, stats } => {
                task.resolve_measured(*run_id, *resolution, stats.as_deref().copied(), now)
            }
            TaskCommand::Cancel => task.cancel(now),
            TaskCommand::Rerun => task.rerun(now),
            TaskCommand::ChangePriority(priority) => task.change_priority(*priority, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::TaskDefinitionInput;
    use crate::slice::Capacity;
    use crate::status::TaskState;
    use crate::task::Claimant;
    use crate::{TaskId, Timestamp};

    fn task() -> (Task, Timestamp) {
        let now = Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap();
        let input: TaskDefinitionInput = serde_json::from_value(serde_json::json!({
            "taskQueueId": "proj/linux",
            "created": "2026-01-01T00:00:00.000Z",
            "deadline": "2026-01-01T01:00:00.000Z",
            "payload": {},
            "metadata": {"name": "t", "description": "d", "owner": "o@example.com", "source": "https://example.com"}
        }))
        .unwrap();
        let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        (Task::new(task_id, &input.validate(task_id, now).unwrap()), now)
    }

    #[test]
    fn each_command_runs_its_transition() {
        let (mut task, now) = task();
        let _scheduled = TaskCommand::Schedule.apply(&mut task, now, 60, &Capacity::Assumed).unwrap();
        assert_eq!(task.state(), TaskState::Pending);
        let _claimed = task.claim(0, &Claimant::named("g", "w"), now, 60).unwrap();
        let _reclaimed =
            TaskCommand::Reclaim { run_id: 0 }.apply(&mut task, now.plus_secs(10), 60, &Capacity::Assumed).unwrap();
        assert_eq!(task.running_until(), Some(now.plus_secs(70)), "the claim renewed for the timeout given");
        let _resolved = TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }
            .apply(&mut task, now, 60, &Capacity::Assumed)
            .unwrap();
        assert_eq!(task.state(), TaskState::Completed);
        let late =
            TaskCommand::ChangePriority(Priority::Named(2)).apply(&mut task, now, 60, &Capacity::Assumed).unwrap_err();
        assert_eq!(late.to_string(), format!("task {} is resolved; its priority cannot change", task.task_id));
        let _canceled = TaskCommand::Cancel.apply(&mut task, now, 60, &Capacity::Assumed).unwrap();
        assert_eq!(task.state(), TaskState::Completed, "a resolved task stays as it is");
    }
}
