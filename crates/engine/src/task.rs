//! A task's mutable life: its runs and every transition between them.
//!
//! Each transition checks its preconditions, changes the task, and returns the events it
//! caused; a refused transition changes nothing.

use std::collections::BTreeMap;

use crate::definition::{Requires, TaskDefinition};
use crate::dimensions::Dimensions;
use crate::event::{Effects, Event};
use crate::priority::Priority;
use crate::rejection::{Conflict, Missing};
use crate::slice::{self, Capacity, Slice, SliceAt};
use crate::status::{ReasonCreated, ReasonResolved, Run, RunState, RunStats, TaskState, TaskStatus, WorkerException};
use crate::{Rejection, TaskId, Timestamp};

/// A task may have at most this many runs; rerunTask refuses past it.
pub const MAX_RUNS: usize = 50;

/// The parts of a definition the rules read; the rest is opaque to transitions.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskMeta {
    /// `provisionerId/workerType`.
    pub task_queue_id: String,
    /// Scheduler.
    pub scheduler_id: String,
    /// Project.
    pub project_id: String,
    /// Group.
    pub task_group_id: TaskId,
    /// Current priority (changeTaskPriority moves it).
    pub priority: Priority,
    /// Automatic retries the definition asked for.
    pub retries: u32,
    /// Deadline.
    pub deadline: Timestamp,
    /// Expiry.
    pub expires: Timestamp,
    /// When dependencies count as satisfied.
    pub requires: Requires,
    /// Required worker dimensions: the current slice's, for a task with slices.
    pub dimensions: Dimensions,
    /// Swarming's slices (empty when none).
    pub slices: Vec<Slice>,
    /// For an idempotent task, the hash of its properties (`dedup`).
    pub dedup_hash: Option<String>,
    /// Routes its messages are also published under (`route.<r>`).
    pub routes: Vec<String>,
    /// Tags its messages carry.
    pub tags: BTreeMap<String, String>,
    /// Whether it has secrets (kept apart from its definition, handed to the worker that claims it).
    pub has_secrets: bool,
    /// The authenticated client that created it, when known.
    pub created_by: Option<String>,
    /// Its `extra.index` when its routes ask for indexing (see [`crate::index::options_of`]).
    pub index: Option<serde_json::Value>,
}

impl TaskMeta {
    /// The rule-relevant part of a definition.
    #[must_use]
    pub fn of(definition: &TaskDefinition) -> TaskMeta {
        TaskMeta {
            task_queue_id: definition.task_queue_id.clone(),
            scheduler_id: definition.scheduler_id.clone(),
            project_id: definition.project_id.clone(),
            task_group_id: definition.task_group_id,
            priority: definition.priority,
            retries: definition.retries,
            deadline: definition.deadline,
            expires: definition.expires,
            requires: definition.requires,
            dimensions: definition
                .slices
                .first()
                .map_or_else(|| definition.dimensions.clone(), |s| s.dimensions.clone()),
            slices: definition.slices.clone(),
            dedup_hash: definition.dedup_hash.clone(),
            routes: definition.routes.clone(),
            tags: definition.tags.clone(),
            has_secrets: definition.has_secrets,
            created_by: definition.created_by.clone(),
            index: crate::index::options_of(&definition.routes, &definition.extra),
        }
    }
}

/// The worker claiming a run, as the run records it (Swarming's `bot_dimensions` and
/// `bot_version` of a run).
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// Its group.
    pub worker_group: &'a str,
    /// Its id.
    pub worker_id: &'a str,
    /// The dimensions it claimed with, if it sent any.
    pub dimensions: Option<&'a Dimensions>,
    /// Its software version, if it sent one.
    pub version: Option<&'a str>,
}

impl<'a> Claimant<'a> {
    /// A worker known by name alone.
    #[must_use]
    pub fn named(worker_group: &'a str, worker_id: &'a str) -> Claimant<'a> {
        Claimant { worker_group, worker_id, dimensions: None, version: None }
    }
}

/// How a worker (or the queue) ends a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// reportCompleted.
    Completed,
    /// reportFailed.
    Failed,
    /// reportException (or the queue's own exceptions).
    Exception(ReasonResolved),
}

impl Resolution {
    fn state(self) -> RunState {
        match self {
            Resolution::Completed => RunState::Completed,
            Resolution::Failed => RunState::Failed,
            Resolution::Exception(_) => RunState::Exception,
        }
    }

    fn reason(self) -> ReasonResolved {
        match self {
            Resolution::Completed => ReasonResolved::Completed,
            Resolution::Failed => ReasonResolved::Failed,
            Resolution::Exception(reason) => reason,
        }
    }

    /// A worker's reportException.
    #[must_use]
    pub fn worker_exception(reason: WorkerException) -> Resolution {
        Resolution::Exception(reason.into())
    }
}

/// A task's rule-relevant state: its meta, its runs and its retry budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The task.
    pub task_id: TaskId,
    /// The rule-relevant part of the definition.
    pub meta: TaskMeta,
    /// Never more than `meta.retries` and never negative; only transitions change it.
    retries_left: u32,
    /// Append-only; `runs[i].run_id == i`; at most one run is pending or running, and only the last.
    runs: Vec<Run>,
}

impl Task {
    /// A freshly defined task: no runs, a full retry budget.
    #[must_use]
    pub fn new(task_id: TaskId, definition: &TaskDefinition) -> Task {
        Task { task_id, meta: TaskMeta::of(definition), retries_left: definition.retries, runs: Vec::new() }
    }

    /// Reassembles a task the store saved; the store only hands back what transitions made.
    #[must_use]
    pub fn from_parts(task_id: TaskId, meta: TaskMeta, retries_left: u32, runs: Vec<Run>) -> Task {
        Task { task_id, meta, retries_left, runs }
    }

    /// Runs, oldest first.
    #[must_use]
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Automatic retries left.
    #[must_use]
    pub fn retries_left(&self) -> u32 {
        self.retries_left
    }

    /// The state of the last run, or unscheduled.
    #[must_use]
    pub fn state(&self) -> TaskState {
        self.runs.last().map_or(TaskState::Unscheduled, |run| run.state.task_state())
    }

    /// The last run, when it is running: the claim a due-time index must watch.
    #[must_use]
    pub fn running_until(&self) -> Option<Timestamp> {
        self.runs.last().filter(|run| run.state == RunState::Running).and_then(|run| run.taken_until)
    }

    /// The worker running the last run (`workerGroup/workerId`), while it runs.
    #[must_use]
    pub fn running_worker(&self) -> Option<String> {
        let run = self.runs.last().filter(|run| run.state == RunState::Running)?;
        Some(crate::worker::worker_name(run.worker_group.as_deref()?, run.worker_id.as_deref()?))
    }

    /// The status structure.
    #[must_use]
    pub fn status(&self) -> TaskStatus {
        let (provisioner_id, worker_type) =
            self.meta.task_queue_id.split_once('/').unwrap_or((self.meta.task_queue_id.as_str(), ""));
        TaskStatus {
            task_id: self.task_id,
            provisioner_id: provisioner_id.to_owned(),
            worker_type: worker_type.to_owned(),
            task_queue_id: self.meta.task_queue_id.clone(),
            scheduler_id: self.meta.scheduler_id.clone(),
            project_id: self.meta.project_id.clone(),
            task_group_id: self.meta.task_group_id,
            priority: self.meta.priority,
            deadline: self.meta.deadline,
            expires: self.meta.expires,
            retries_left: self.retries_left,
            state: self.state(),
            runs: self.runs.clone(),
            created_by: self.meta.created_by.clone(),
        }
    }

    /// Makes the first run pending (dependencies met, or scheduleTask); a task that already
    /// has a run is left as it is. A task with slices waits on the first that could run
    /// (`capacity`: whether a live worker matches dimensions), or ends `resource-unavailable`
    /// when none could.
    ///
    /// # Errors
    /// Conflict once the deadline has passed.
    pub fn schedule(&mut self, now: Timestamp, capacity: &Capacity) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        if !self.runs.is_empty() {
            return Ok(Effects::none());
        }
        if self.meta.slices.is_empty() {
            return Ok(self.push_pending(ReasonCreated::Scheduled, now));
        }
        match slice::next_runnable(&self.meta.slices, 0, capacity) {
            Some(index) => {
                self.enter_slice(index);
                Ok(self.push_pending(ReasonCreated::Scheduled, now))
            }
            None => Ok(self.end_unresolved(ReasonResolved::ResourceUnavailable, now)),
        }
    }

    /// Moves a pending task whose slice has waited its `expiresAfter` on to the next slice
    /// that could run, keeping its place in line (the pending message is sent again); past
    /// the last, it ends `deadline-exceeded`. `None` when no slice is due.
    pub fn expire_slice(&mut self, now: Timestamp, capacity: &Capacity) -> Option<Effects> {
        let due = self.slice_due()?;
        if now < due {
            return None;
        }
        let run = self.runs.last()?;
        let (run_id, from) = (run.run_id, run.slice?.index as usize + 1);
        match slice::next_runnable(&self.meta.slices, from, capacity) {
            Some(index) => {
                self.enter_slice(index);
                if let Some(run) = self.runs.last_mut() {
                    run.slice = Some(SliceAt { index: index as u32, since: now });
                }
                Some(Effects(vec![Event::Pending { run_id }]))
            }
            None => Some(self.end_unresolved(ReasonResolved::DeadlineExceeded, now)),
        }
    }

    /// Resolves a task that has not run as `completed` at once, its result being `original`'s
    /// (Swarming's dedup): one completed run that no worker ran.
    ///
    /// # Errors
    /// Conflict once the deadline has passed; a task that already has a run is left as it is.
    pub fn dedupe(&mut self, original: TaskId, now: Timestamp) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        if !self.runs.is_empty() {
            return Ok(Effects::none());
        }
        self.runs.push(Run {
            run_id: 0,
            state: RunState::Completed,
            reason_created: ReasonCreated::Scheduled,
            reason_resolved: Some(ReasonResolved::Completed),
            worker_group: None,
            worker_id: None,
            worker_dimensions: None,
            worker_version: None,
            taken_until: None,
            scheduled: now,
            started: Some(now),
            resolved: Some(now),
            slice: None,
            stats: None,
            deduped_from: Some(original),
        });
        Ok(Effects(vec![Event::Completed { run_id: 0 }]))
    }

    /// The slice the last run waits or ran on, for a task with slices.
    #[must_use]
    pub fn status_slice(&self) -> Option<u32> {
        crate::status::current_slice(&self.runs)
    }

    /// When the pending run's current slice has waited its `expiresAfter`.
    #[must_use]
    pub fn slice_due(&self) -> Option<Timestamp> {
        let run = self.runs.last().filter(|run| run.state == RunState::Pending)?;
        let at = run.slice?;
        let slice = self.meta.slices.get(at.index as usize)?;
        Some(at.since.plus_secs(i64::from(slice.expires_after)))
    }

    /// When the queue must next look at this unresolved task on its own: its deadline, or
    /// sooner its pending slice's expiry; `None` once resolved.
    #[must_use]
    pub fn deadline_due(&self) -> Option<Timestamp> {
        if self.state().is_resolved() {
            return None;
        }
        Some(self.slice_due().map_or(self.meta.deadline, |due| due.min(self.meta.deadline)))
    }

    fn enter_slice(&mut self, index: usize) {
        if let Some(slice) = self.meta.slices.get(index) {
            self.meta.dimensions = slice.dimensions.clone();
        }
    }

    /// Hands pending run `run_id` to a worker until `now + claim_timeout_secs`.
    ///
    /// # Errors
    /// NotFound for an unknown run; Conflict when the run is not the pending last run or
    /// the deadline has passed.
    pub fn claim(
        &mut self,
        run_id: u32,
        by: &Claimant<'_>,
        now: Timestamp,
        claim_timeout_secs: i64,
    ) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        let run = self.last_run_in(run_id, RunState::Pending, "is not pending")?;
        run.state = RunState::Running;
        run.worker_group = Some(by.worker_group.to_owned());
        run.worker_id = Some(by.worker_id.to_owned());
        run.worker_dimensions = by.dimensions.filter(|dimensions| !dimensions.is_empty()).cloned();
        run.worker_version = by.version.map(str::to_owned);
        run.taken_until = Some(taken_until(now, claim_timeout_secs));
        run.started = Some(now);
        Ok(Effects(vec![Event::Running { run_id }]))
    }

    /// Extends the claim on running run `run_id`; takenUntil never moves back.
    ///
    /// # Errors
    /// NotFound for an unknown run; Conflict when the run is resolved or the deadline has passed.
    pub fn reclaim(&mut self, run_id: u32, now: Timestamp, claim_timeout_secs: i64) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        let run = self.last_run_in(run_id, RunState::Running, "is resolved or not running")?;
        let until = taken_until(now, claim_timeout_secs);
        run.taken_until = run.taken_until.max(Some(until));
        Ok(Effects::none())
    }

    /// Ends running run `run_id`; retries when the reason allows and budget remains.
    /// Repeating the same resolution is a no-op.
    ///
    /// # Errors
    /// NotFound for an unknown run; Conflict when the run is not running (or resolved differently).
    pub fn resolve(&mut self, run_id: u32, resolution: Resolution, now: Timestamp) -> Result<Effects, Rejection> {
        self.resolve_measured(run_id, resolution, None, now)
    }

    /// [`Task::resolve`], keeping what the worker measured of the run.
    ///
    /// # Errors
    /// As [`Task::resolve`].
    pub fn resolve_measured(
        &mut self,
        run_id: u32,
        resolution: Resolution,
        stats: Option<RunStats>,
        now: Timestamp,
    ) -> Result<Effects, Rejection> {
        let run = self.run(run_id)?;
        if run.state == resolution.state() && run.reason_resolved == Some(resolution.reason()) {
            return Ok(Effects::none());
        }
        let run = self.last_run_in(run_id, RunState::Running, "is not running")?;
        if stats.is_some() {
            run.stats = stats;
        }
        let retry = match resolution {
            Resolution::Exception(ReasonResolved::WorkerShutdown) => Some(ReasonCreated::Retry),
            Resolution::Exception(ReasonResolved::IntermittentTask) => Some(ReasonCreated::TaskRetry),
            _ => None,
        };
        Ok(self.end_last_run(resolution, retry, now))
    }

    /// Resolves an expired claim as claim-expired (and retries); `None` when the claim was
    /// extended or the run already ended, so an outdated due-time changes nothing.
    /// Past the deadline the run ends as deadline-exceeded instead, as Taskcluster's claim
    /// resolver leaves such runs to its deadline resolver.
    pub fn expire_claim(&mut self, now: Timestamp) -> Option<Effects> {
        let expired = self.running_until().is_some_and(|until| until <= now);
        if !expired {
            return None;
        }
        self.lose_claim(now)
    }

    /// Ends the running last run at once because its worker was found missing (Swarming's
    /// BOT_DIED), as a claim expiry does: `claim-expired`, retried while retries remain;
    /// `None` when the last run is not running.
    pub fn lose_claim(&mut self, now: Timestamp) -> Option<Effects> {
        self.running_until()?;
        if self.meta.deadline <= now {
            return Some(self.end_unresolved(ReasonResolved::DeadlineExceeded, now));
        }
        let reason = Resolution::Exception(ReasonResolved::ClaimExpired);
        Some(self.end_last_run(reason, Some(ReasonCreated::Retry), now))
    }

    /// Ends an unresolved task as deadline-exceeded; `None` when it is resolved or the
    /// deadline is still ahead.
    pub fn exceed_deadline(&mut self, now: Timestamp) -> Option<Effects> {
        let due = self.meta.deadline <= now && !self.state().is_resolved();
        due.then(|| self.end_unresolved(ReasonResolved::DeadlineExceeded, now))
    }

    /// Cancels an unresolved task (exception `canceled`); a resolved task is left as it is.
    ///
    /// # Errors
    /// Conflict once the deadline has passed.
    pub fn cancel(&mut self, now: Timestamp) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        if self.state().is_resolved() {
            return Ok(Effects::none());
        }
        Ok(self.end_unresolved(ReasonResolved::Canceled, now))
    }

    /// Starts a new run of a resolved task, or schedules an unscheduled one (its
    /// dependencies aside, as Taskcluster does), and resets its retry budget; a pending or
    /// running task is left as it is.
    ///
    /// # Errors
    /// Conflict past the deadline or at the run limit.
    pub fn rerun(&mut self, now: Timestamp) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        if matches!(self.state(), TaskState::Pending | TaskState::Running) {
            return Ok(Effects::none());
        }
        if self.runs.len() >= MAX_RUNS {
            return Err(Conflict::TooManyRuns { task_id: self.task_id, max: MAX_RUNS }.into());
        }
        // A rerun may not let retries push the task past the run limit.
        let room = (MAX_RUNS - self.runs.len() - 1) as u32;
        self.retries_left = self.meta.retries.min(room);
        Ok(self.push_pending(ReasonCreated::Rerun, now))
    }

    /// Moves an unresolved task to another priority.
    ///
    /// # Errors
    /// Conflict when the task is resolved or past its deadline.
    pub fn change_priority(&mut self, priority: Priority, now: Timestamp) -> Result<Effects, Rejection> {
        self.reprioritize(priority, now, false)
    }

    /// [`Task::change_priority`] as part of its whole group's change: no message of its own
    /// (Taskcluster publishes only `task-group-priority-changed` then).
    ///
    /// # Errors
    /// As [`Task::change_priority`].
    pub fn change_priority_with_group(&mut self, priority: Priority, now: Timestamp) -> Result<Effects, Rejection> {
        self.reprioritize(priority, now, true)
    }

    fn reprioritize(&mut self, priority: Priority, now: Timestamp, with_group: bool) -> Result<Effects, Rejection> {
        self.check_deadline(now)?;
        if self.state().is_resolved() {
            return Err(Conflict::PriorityOfResolved(self.task_id).into());
        }
        let old = std::mem::replace(&mut self.meta.priority, priority);
        if old == priority {
            return Ok(Effects::none());
        }
        Ok(Effects(vec![Event::PriorityChanged { old, new: priority, with_group }]))
    }

    fn check_deadline(&self, now: Timestamp) -> Result<(), Rejection> {
        if self.meta.deadline <= now {
            return Err(Conflict::DeadlinePassed { task_id: self.task_id, deadline: self.meta.deadline }.into());
        }
        Ok(())
    }

    fn run(&self, run_id: u32) -> Result<&Run, Rejection> {
        self.runs.get(run_id as usize).ok_or_else(|| Missing::Run { task_id: self.task_id, run_id }.into())
    }

    fn last_run_in(&mut self, run_id: u32, state: RunState, otherwise: &'static str) -> Result<&mut Run, Rejection> {
        self.run(run_id)?;
        let n_runs = self.runs.len();
        let task_id = self.task_id;
        match self.runs.last_mut() {
            Some(run) if run.run_id == run_id && run.state == state => Ok(run),
            _ if (run_id as usize) + 1 < n_runs => Err(Conflict::NotLastRun { task_id, run_id }.into()),
            _ => Err(Conflict::RunState { task_id, run_id, is_not: otherwise }.into()),
        }
    }

    fn push_pending(&mut self, reason: ReasonCreated, now: Timestamp) -> Effects {
        let run_id = self.runs.len() as u32;
        // A retry or rerun waits on the slice its last run was at; a first run, on the one
        // `schedule` entered (its dimensions are the meta's).
        let slice = (!self.meta.slices.is_empty()).then(|| {
            let last = self.runs.last().and_then(|run| run.slice).map(|at| at.index as usize);
            let entered = || self.meta.slices.iter().position(|s| s.dimensions == self.meta.dimensions);
            SliceAt { index: last.or_else(entered).unwrap_or(0) as u32, since: now }
        });
        self.runs.push(Run {
            run_id,
            state: RunState::Pending,
            reason_created: reason,
            reason_resolved: None,
            worker_group: None,
            worker_id: None,
            worker_dimensions: None,
            worker_version: None,
            taken_until: None,
            scheduled: now,
            started: None,
            resolved: None,
            slice,
            stats: None,
            deduped_from: None,
        });
        Effects(vec![Event::Pending { run_id }])
    }

    /// Resolves the last (pending or running) run and, if `retry` is given and the budget,
    /// the deadline and the run limit allow, appends a pending retry run.
    fn end_last_run(&mut self, resolution: Resolution, retry: Option<ReasonCreated>, now: Timestamp) -> Effects {
        let Some(run) = self.runs.last_mut() else {
            return Effects::none();
        };
        run.state = resolution.state();
        run.reason_resolved = Some(resolution.reason());
        run.resolved = Some(now);
        let run_id = run.run_id;
        let mut events = vec![match resolution {
            Resolution::Completed => Event::Completed { run_id },
            Resolution::Failed => Event::Failed { run_id },
            Resolution::Exception(_) => Event::Exception { run_id },
        }];
        let may_retry = self.retries_left > 0 && now < self.meta.deadline && self.runs.len() < MAX_RUNS;
        if let (Some(reason), true) = (retry, may_retry) {
            self.retries_left -= 1;
            events.extend(self.push_pending(reason, now).0);
        }
        Effects(events)
    }

    /// Ends an unresolved task with `reason`, creating an exception run if it has none.
    fn end_unresolved(&mut self, reason: ReasonResolved, now: Timestamp) -> Effects {
        if self.runs.is_empty() {
            let run_id = 0;
            self.runs.push(Run {
                run_id,
                state: RunState::Exception,
                reason_created: ReasonCreated::Exception,
                reason_resolved: Some(reason),
                worker_group: None,
                worker_id: None,
                worker_dimensions: None,
                worker_version: None,
                taken_until: None,
                scheduled: now,
                started: None,
                resolved: Some(now),
                slice: None,
                stats: None,
                deduped_from: None,
            });
            return Effects(vec![Event::Exception { run_id }]);
        }
        self.end_last_run(Resolution::Exception(reason), None, now)
    }
}

/// Taskcluster rounds takenUntil up to a whole second.
fn taken_until(now: Timestamp, claim_timeout_secs: i64) -> Timestamp {
    let raw = now.plus_secs(claim_timeout_secs).millis();
    Timestamp(raw.div_euclid(1000) * 1000 + if raw.rem_euclid(1000) == 0 { 0 } else { 1000 })
}

#[cfg(test)]
mod tests;
