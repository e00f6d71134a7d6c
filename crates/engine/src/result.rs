//! Shoal's facts about a task that Taskcluster's status has no place for (Swarming's task
//! result): who created it, its slices, its dedup, and what each run's worker had and measured.

use serde::Serialize;

use crate::TaskId;
use crate::dimensions::Dimensions;
use crate::slice::SliceAt;
use crate::status::{RunStats, TaskStatus};

/// What `GET /task/<taskId>/result` answers beside the status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult<'a> {
    /// The task.
    pub task_id: TaskId,
    /// The authenticated client that created it (Swarming's `authenticated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<&'a str>,
    /// For a task with slices, the index of the slice its last run waits or ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_slice: Option<u32>,
    /// For a deduped task, the task whose completion stands for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deduped_from: Option<TaskId>,
    /// Each run's own facts, oldest first (`runId` as in the status).
    pub runs: Vec<RunResult<'a>>,
}

/// One run's facts beyond Taskcluster's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult<'a> {
    /// Index in the task's runs.
    pub run_id: u32,
    /// The dimensions the claiming worker had when it claimed (Swarming's `bot_dimensions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_dimensions: Option<&'a Dimensions>,
    /// The claiming worker's software version (Swarming's `bot_version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_version: Option<&'a str>,
    /// The slice it waited on (or ran on), for a task with slices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice: Option<SliceAt>,
    /// What its worker measured, if it reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<RunStats>,
    /// The task whose completion stands for this run, which no worker ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deduped_from: Option<TaskId>,
}

impl<'a> TaskResult<'a> {
    /// The facts `status` holds beyond Taskcluster's shape.
    #[must_use]
    pub fn of(status: &'a TaskStatus) -> TaskResult<'a> {
        TaskResult {
            task_id: status.task_id,
            created_by: status.created_by.as_deref(),
            current_slice: status.current_slice(),
            deduped_from: status.deduped_from(),
            runs: status
                .runs
                .iter()
                .map(|run| RunResult {
                    run_id: run.run_id,
                    worker_dimensions: run.worker_dimensions.as_ref(),
                    worker_version: run.worker_version.as_deref(),
                    slice: run.slice,
                    stats: run.stats,
                    deduped_from: run.deduped_from,
                })
                .collect(),
        }
    }
}
