//! Workers as the queue knows them: Taskcluster's worker registry and Swarming's bots.
//!
//! A worker is recorded when it first calls (claimWork, a heartbeat, declareWorker) and keeps
//! when it was seen, what it has (dimensions, version), what it claimed lately, quarantine and
//! termination, and a bounded history of lifecycle events. Claims and resolutions are not
//! stored as events: they are read from the runs of its recent tasks.

use serde::{Deserialize, Serialize};

use crate::dimensions::Dimensions;
use crate::id::split_task_queue_id;
use crate::rejection::Rejection;
use crate::status::Run;
use crate::{TaskId, Timestamp};

mod maintenance;

pub use maintenance::{MAX_MESSAGE, Maintenance, Posted, check_message};

/// How many recent claims a worker keeps (Taskcluster's `recentTasks`).
pub const RECENT_TASKS: usize = 20;
/// How many lifecycle events a worker keeps; older ones are deleted.
pub const KEPT_EVENTS: u64 = 100;
/// How many quarantine changes a worker keeps.
pub const KEPT_QUARANTINE_DETAILS: usize = 20;
/// Longest `quarantineInfo`, in bytes.
pub const MAX_QUARANTINE_INFO: usize = 4096;
/// Most named caches a worker's record lists.
pub const MAX_CACHES: usize = 100;
/// Longest named cache name, in bytes.
pub const MAX_CACHE_NAME: usize = 100;
/// Longest worker version, in bytes.
pub const MAX_VERSION: usize = 128;
/// Most task queues one worker serves at once.
pub const MAX_QUEUES: usize = 16;
/// How long a worker may stay silent before it is missing, unless set otherwise.
pub const DEFAULT_DEAD_AFTER_SECS: i64 = 120;

/// `workerGroup/workerId`, as the store indexes a run's worker.
#[must_use]
pub fn worker_name(worker_group: &str, worker_id: &str) -> String {
    format!("{worker_group}/{worker_id}")
}

/// Which worker: Taskcluster's (taskQueueId, workerGroup, workerId).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerKey {
    /// The task queue it claims from.
    pub task_queue_id: String,
    /// Its group.
    pub worker_group: String,
    /// Its id within the group.
    pub worker_id: String,
}

impl std::fmt::Display for WorkerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} of task queue {}", self.worker_group, self.worker_id, self.task_queue_id)
    }
}

/// A run a worker claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRun {
    /// The task.
    pub task_id: TaskId,
    /// The run.
    pub run_id: u32,
}

/// One change of a worker's quarantine (Taskcluster's `quarantineDetails`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineDetail {
    /// Who changed it.
    pub client_id: String,
    /// The new end of the quarantine.
    pub quarantine_until: Timestamp,
    /// When.
    pub updated_at: Timestamp,
    /// Why.
    pub quarantine_info: String,
}

/// Where a worker is in being terminated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum Termination {
    /// Not asked to stop.
    #[default]
    None,
    /// Asked to finish its runs, take no more and exit.
    Requested {
        /// When.
        at: Timestamp,
        /// By whom.
        client_id: String,
    },
    /// It said it exited.
    Done {
        /// When.
        at: Timestamp,
    },
}

/// What a worker's call says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sighting {
    /// The dimensions it sent (claimWork, heartbeats), if any.
    pub dimensions: Option<Dimensions>,
    /// Its software version, if it sent one.
    pub version: Option<String>,
    /// Whether it heartbeats (then silence past the dead-after time makes it missing).
    pub heartbeat: bool,
    /// The named caches it holds, most recently used first, if it said.
    pub caches: Option<Vec<String>>,
    /// Its own maintenance: a message to enter (or stay in) it, `Some(None)` to leave it.
    pub maintenance: Option<Option<String>>,
    /// Every task queue the worker serves from one process, when it said (its claims did).
    pub queues: Option<Vec<String>>,
}

/// The task queues one claim serves: `path`'s alone, or as the worker lists them (`listed`),
/// `path`'s first, each once, at most [`MAX_QUEUES`].
///
/// # Errors
/// Invalid naming `taskQueueIds` (or the entry) and the rule it breaks.
pub fn served_queues(path: &str, listed: Option<Vec<String>>) -> Result<Vec<String>, Rejection> {
    let Some(queues) = listed else { return Ok(vec![path.to_owned()]) };
    if queues.first().map(String::as_str) != Some(path) {
        return Err(Rejection::invalid("taskQueueIds", "must start with the task queue of the path"));
    }
    if queues.len() > MAX_QUEUES {
        return Err(Rejection::invalid("taskQueueIds", format!("must list at most {MAX_QUEUES} task queues")));
    }
    for (index, queue) in queues.iter().enumerate() {
        let field = || format!("taskQueueIds[{index}]");
        if split_task_queue_id(queue).is_none() {
            return Err(Rejection::invalid(field(), format!("`{queue}` must be provisionerId/workerType")));
        }
        if queues[..index].contains(queue) {
            return Err(Rejection::invalid(field(), format!("`{queue}` is listed twice")));
        }
    }
    Ok(queues)
}

impl Sighting {
    /// Checks the version's length and the cache names.
    ///
    /// # Errors
    /// Invalid naming `version` or `caches`.
    pub fn check(&self) -> Result<(), Rejection> {
        if self.version.as_ref().is_some_and(|version| version.len() > MAX_VERSION) {
            return Err(Rejection::invalid("version", format!("must be at most {MAX_VERSION} bytes")));
        }
        let names_fine = |names: &Vec<String>| {
            names.len() <= MAX_CACHES
                && names.iter().all(|name| {
                    (1..=MAX_CACHE_NAME).contains(&name.len())
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
                })
        };
        if let Some(Some(message)) = &self.maintenance {
            check_message("maintenance", message)?;
        }
        if self.caches.as_ref().is_some_and(|names| !names_fine(names)) {
            return Err(Rejection::invalid(
                "caches",
                format!("must list at most {MAX_CACHES} names of 1..={MAX_CACHE_NAME} of A-Z a-z 0-9 . _ : -"),
            ));
        }
        Ok(())
    }
}

/// What happened to a worker (Swarming's bot events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerEventKind {
    /// First call.
    FirstSeen,
    /// Claimed a run.
    Claimed,
    /// A run it held ended.
    Resolved,
    /// Quarantined.
    Quarantined,
    /// Quarantine lifted.
    Released,
    /// Silent past the dead-after time.
    Missing,
    /// Heard from again after missing or exiting.
    Back,
    /// Asked to terminate.
    Terminating,
    /// Exited after being asked to.
    Terminated,
    /// Put in maintenance (by itself, or an operator: `clientId`).
    Maintenance,
    /// Out of maintenance.
    MaintenanceEnded,
    /// It posted an error.
    Error,
    /// It posted that it reboots.
    Rebooting,
    /// It posted that it exits.
    Shutdown,
    /// It posted a line for its history.
    Log,
}

/// One event of a worker's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerEvent {
    /// What.
    pub kind: WorkerEventKind,
    /// When.
    pub at: Timestamp,
    /// Who asked (quarantine, termination).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// More words (a quarantine's reason, a run's resolution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The run, for claims and resolutions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The run, for claims and resolutions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<u32>,
}

impl WorkerEvent {
    fn at(kind: WorkerEventKind, at: Timestamp) -> WorkerEvent {
        WorkerEvent { kind, at, client_id: None, detail: None, task_id: None, run_id: None }
    }
}

/// Whether a worker may claim, as its record says at one moment ([`Worker::standing`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    /// The end of its quarantine, while one lasts.
    pub quarantine_until: Option<Timestamp>,
    /// Whether it was asked to terminate (and has not exited).
    pub terminate: bool,
    /// Whether it is in maintenance.
    pub maintenance: bool,
    /// Whether it said it exited: a claim still waiting from that process gets nothing, while
    /// a new call under its name is a new process, whose sighting brings the record back.
    pub exited: bool,
}

impl Standing {
    /// Whether its claims get nothing at `now`.
    #[must_use]
    pub fn barred(&self, now: Timestamp) -> bool {
        self.terminate || self.exited || self.held(now)
    }

    /// Whether its claims wait without taking work at `now`: quarantined or in maintenance.
    #[must_use]
    pub fn held(&self, now: Timestamp) -> bool {
        self.maintenance || self.quarantine_until.is_some_and(|until| until > now)
    }

    /// The standing of one worker serving several queues, from its records' `self` and
    /// `other`: held back by any.
    #[must_use]
    pub fn with(self, other: Standing) -> Standing {
        Standing {
            quarantine_until: self.quarantine_until.max(other.quarantine_until),
            terminate: self.terminate || other.terminate,
            maintenance: self.maintenance || other.maintenance,
            exited: self.exited || other.exited,
        }
    }
}

/// A worker's state as listings show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Alive, running nothing.
    Idle,
    /// Alive, running something.
    Busy,
    /// Kept from claiming until its quarantine ends.
    Quarantined,
    /// Kept from claiming while in maintenance; its runs go on.
    Maintenance,
    /// Silent past the dead-after time.
    Missing,
    /// Exited (asked to, or said it shut down).
    Terminated,
}

impl WorkerState {
    /// Every state.
    pub const ALL: [WorkerState; 6] =
        [Self::Idle, Self::Busy, Self::Quarantined, Self::Maintenance, Self::Missing, Self::Terminated];

    /// The name, as in listings and the `state` filter.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Idle => "idle",
            WorkerState::Busy => "busy",
            WorkerState::Quarantined => "quarantined",
            WorkerState::Maintenance => "maintenance",
            WorkerState::Missing => "missing",
            WorkerState::Terminated => "terminated",
        }
    }

    /// The state named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<WorkerState> {
        Self::ALL.into_iter().find(|state| state.as_str() == name)
    }
}

/// A worker's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    /// Which worker.
    #[serde(flatten)]
    pub key: WorkerKey,
    /// Its first call.
    pub first_seen: Timestamp,
    /// Its latest call (written at most every few seconds).
    pub last_seen: Timestamp,
    /// Its first claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_claim: Option<Timestamp>,
    /// The dimensions it last sent.
    #[serde(default)]
    pub dimensions: Dimensions,
    /// The version it last sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The named caches it last said it holds, most recently used first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<String>,
    /// Its latest claims, oldest first.
    #[serde(default)]
    pub recent_tasks: Vec<TaskRun>,
    /// Until when it may not claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_until: Option<Timestamp>,
    /// The latest quarantine changes, oldest first.
    #[serde(default)]
    pub quarantine_details: Vec<QuarantineDetail>,
    /// Its maintenance, while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// Every task queue the machine serves from one process (this one included), when more
    /// than this one: its records in them are one worker's, which operators' changes reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_queue_ids: Vec<String>,
    /// Whether it heartbeats.
    #[serde(default)]
    pub heartbeats: bool,
    /// Whether it was found missing (and its runs ended).
    #[serde(default)]
    pub missing: bool,
    /// Termination.
    #[serde(default)]
    pub termination: Termination,
    /// When the record is deleted unless it is seen again.
    pub expires: Timestamp,
    /// How many lifecycle events were recorded, ever (the next one's number is one more).
    #[serde(default)]
    pub events_recorded: u64,
}

impl Worker {
    /// A worker seen for the first time.
    #[must_use]
    pub fn first(key: WorkerKey, sighting: Sighting, now: Timestamp, expires: Timestamp) -> (Worker, Vec<WorkerEvent>) {
        let maintenance = sighting.maintenance.clone().flatten();
        let queues = sighting.queues.clone();
        let mut worker = Worker {
            key,
            first_seen: now,
            last_seen: now,
            first_claim: None,
            dimensions: sighting.dimensions.unwrap_or_default(),
            version: sighting.version,
            caches: sighting.caches.unwrap_or_default(),
            recent_tasks: Vec::new(),
            quarantine_until: None,
            quarantine_details: Vec::new(),
            maintenance: None,
            task_queue_ids: Vec::new(),
            heartbeats: sighting.heartbeat,
            missing: false,
            termination: Termination::None,
            expires,
            events_recorded: 0,
        };
        worker.serves(queues);
        let mut events = vec![WorkerEvent::at(WorkerEventKind::FirstSeen, now)];
        // Checked with the sighting: too long a message cannot get here.
        events.extend(worker.maintain(maintenance, None, now).unwrap_or_default());
        (worker, events)
    }

    /// The worker called: it is alive, has what it says, and is kept until `expires`.
    pub fn seen(&mut self, sighting: Sighting, now: Timestamp, expires: Timestamp) -> Vec<WorkerEvent> {
        let mut events = Vec::new();
        self.last_seen = self.last_seen.max(now);
        self.expires = self.expires.max(expires);
        if let Some(dimensions) = sighting.dimensions {
            self.dimensions = dimensions;
        }
        if sighting.version.is_some() {
            self.version = sighting.version;
        }
        if let Some(caches) = sighting.caches {
            self.caches = caches;
        }
        self.serves(sighting.queues);
        if let Some(maintenance) = sighting.maintenance {
            // Checked with the sighting: too long a message cannot get here.
            events.extend(self.maintain(maintenance, None, now).unwrap_or_default());
        }
        self.heartbeats |= sighting.heartbeat;
        if std::mem::take(&mut self.missing) {
            events.push(WorkerEvent::at(WorkerEventKind::Back, now));
        }
        if matches!(self.termination, Termination::Done { .. }) {
            // A new process under the same name.
            self.termination = Termination::None;
            events.push(WorkerEvent::at(WorkerEventKind::Back, now));
        }
        events.dedup();
        events
    }

    /// Records the task queues the worker says it serves (one alone: none kept).
    fn serves(&mut self, queues: Option<Vec<String>>) {
        if let Some(queues) = queues {
            self.task_queue_ids = if queues.len() > 1 { queues } else { Vec::new() };
        }
    }

    /// The worker's records in the other task queues it serves: one machine's, to which an
    /// operator's change to this one reaches.
    pub fn siblings(&self) -> impl Iterator<Item = WorkerKey> + '_ {
        self.task_queue_ids.iter().filter(|queue| **queue != self.key.task_queue_id).map(|queue| WorkerKey {
            task_queue_id: queue.clone(),
            worker_group: self.key.worker_group.clone(),
            worker_id: self.key.worker_id.clone(),
        })
    }

    /// Whether `record`, found at one of [`Worker::siblings`]' keys, is this machine's: it
    /// lists this record's queue among those it serves too (a namesake in a queue the worker
    /// never listed is another machine).
    #[must_use]
    pub fn is_sibling(&self, record: &Worker) -> bool {
        record.key.task_queue_id != self.key.task_queue_id && record.task_queue_ids.contains(&self.key.task_queue_id)
    }

    /// Numbers `events` on from those recorded before, and counts them recorded.
    pub fn number(&mut self, events: Vec<WorkerEvent>) -> Vec<(u64, WorkerEvent)> {
        let first = self.events_recorded + 1;
        self.events_recorded += events.len() as u64;
        (first..).zip(events).collect()
    }

    /// The worker claimed `runs`.
    pub fn claimed(&mut self, runs: impl IntoIterator<Item = TaskRun>, now: Timestamp) {
        self.first_claim.get_or_insert(now);
        self.recent_tasks.extend(runs);
        let excess = self.recent_tasks.len().saturating_sub(RECENT_TASKS);
        self.recent_tasks.drain(..excess);
    }

    /// Quarantines the worker until `until` (lifts the quarantine when that is not after `now`).
    ///
    /// # Errors
    /// Invalid naming `quarantineInfo` when it is too long.
    pub fn quarantine(
        &mut self,
        until: Timestamp,
        info: String,
        client_id: &str,
        now: Timestamp,
    ) -> Result<Vec<WorkerEvent>, Rejection> {
        if info.len() > MAX_QUARANTINE_INFO {
            return Err(Rejection::invalid("quarantineInfo", format!("must be at most {MAX_QUARANTINE_INFO} bytes")));
        }
        let was = self.is_quarantined(now);
        let detail = QuarantineDetail {
            client_id: client_id.to_owned(),
            quarantine_until: until,
            updated_at: now,
            quarantine_info: info.clone(),
        };
        self.quarantine_details.push(detail);
        let excess = self.quarantine_details.len().saturating_sub(KEPT_QUARANTINE_DETAILS);
        self.quarantine_details.drain(..excess);
        self.quarantine_until = Some(until);
        // A quarantined worker stays listed until its quarantine ends, as Taskcluster's.
        self.expires = self.expires.max(until);
        let kind = match (was, self.is_quarantined(now)) {
            (_, true) => WorkerEventKind::Quarantined,
            (true, false) => WorkerEventKind::Released,
            (false, false) => return Ok(Vec::new()),
        };
        let event = WorkerEvent {
            client_id: Some(client_id.to_owned()),
            detail: (!info.is_empty()).then_some(info),
            ..WorkerEvent::at(kind, now)
        };
        Ok(vec![event])
    }

    /// Asks the worker to finish its runs, take no more and exit (nothing when already asked).
    pub fn request_termination(&mut self, client_id: &str, now: Timestamp) -> Vec<WorkerEvent> {
        if matches!(self.termination, Termination::Requested { .. }) {
            return Vec::new();
        }
        self.termination = Termination::Requested { at: now, client_id: client_id.to_owned() };
        vec![WorkerEvent {
            client_id: Some(client_id.to_owned()),
            ..WorkerEvent::at(WorkerEventKind::Terminating, now)
        }]
    }

    /// The worker says it exited after being asked to (nothing otherwise).
    pub fn exited(&mut self, now: Timestamp) -> Vec<WorkerEvent> {
        if !matches!(self.termination, Termination::Requested { .. }) {
            return Vec::new();
        }
        self.termination = Termination::Done { at: now };
        vec![WorkerEvent::at(WorkerEventKind::Terminated, now)]
    }

    /// Marks a heartbeating worker missing when it has been silent since before `cutoff`;
    /// its runs are then ended by the caller.
    pub fn lose(&mut self, cutoff: Timestamp, now: Timestamp) -> Vec<WorkerEvent> {
        if !self.watched() || self.last_seen >= cutoff {
            return Vec::new();
        }
        self.missing = true;
        vec![WorkerEvent::at(WorkerEventKind::Missing, now)]
    }

    /// Whether silence makes this worker missing: it heartbeats, and is neither missing nor gone.
    #[must_use]
    pub fn watched(&self) -> bool {
        self.heartbeats && !self.missing && !self.has_exited()
    }

    /// Whether it is quarantined at `now`.
    #[must_use]
    pub fn is_quarantined(&self, now: Timestamp) -> bool {
        self.standing(now).quarantine_until.is_some()
    }

    /// Whether it was asked to terminate and has not exited yet.
    #[must_use]
    pub fn terminating(&self) -> bool {
        matches!(self.termination, Termination::Requested { .. })
    }

    /// Whether it said it exited (and has not been heard from since).
    #[must_use]
    pub fn has_exited(&self) -> bool {
        matches!(self.termination, Termination::Done { .. })
    }

    /// Whether it may claim at `now`, and why not: the one rule the claim path, the fleet
    /// cache, the backlog, the worker's state and the API read.
    #[must_use]
    pub fn standing(&self, now: Timestamp) -> Standing {
        Standing {
            quarantine_until: self.quarantine_until.filter(|&until| until > now),
            terminate: self.terminating(),
            maintenance: self.maintenance.is_some(),
            exited: self.has_exited(),
        }
    }

    /// Whether it was heard from within `dead_after_ms` of `now` and has not exited.
    #[must_use]
    pub fn is_live(&self, now: Timestamp, dead_after_ms: i64) -> bool {
        !self.missing && !self.has_exited() && self.last_seen.plus_millis(dead_after_ms) >= now
    }

    /// Its state at `now`; `busy` says whether it holds a running run.
    #[must_use]
    pub fn state(&self, now: Timestamp, dead_after_ms: i64, busy: bool) -> WorkerState {
        let standing = self.standing(now);
        if standing.exited {
            WorkerState::Terminated
        } else if !self.is_live(now, dead_after_ms) {
            WorkerState::Missing
        } else if standing.quarantine_until.is_some() {
            WorkerState::Quarantined
        } else if standing.maintenance {
            WorkerState::Maintenance
        } else if busy {
            WorkerState::Busy
        } else {
            WorkerState::Idle
        }
    }

    /// Whether its dimensions have every `key:value` of `filter`.
    #[must_use]
    pub fn has_dimensions(&self, filter: &[(String, String)]) -> bool {
        filter.iter().all(|(key, value)| {
            self.dimensions.iter().any(|(have, values)| have == key && values.iter().any(|v| v == value))
        })
    }
}

/// The claims and resolutions of a worker's recent runs, as events: `runs` are the runs its
/// recent tasks have (each with its task), of which those it ran count.
#[must_use]
pub fn run_events(key: &WorkerKey, runs: &[(TaskId, Run)]) -> Vec<WorkerEvent> {
    let mut events = Vec::new();
    for (task_id, run) in runs {
        let ours =
            run.worker_group.as_deref() == Some(&key.worker_group) && run.worker_id.as_deref() == Some(&key.worker_id);
        let Some(started) = run.started.filter(|_| ours) else { continue };
        let of_run = |kind, at, detail| WorkerEvent {
            detail,
            task_id: Some(*task_id),
            run_id: Some(run.run_id),
            ..WorkerEvent::at(kind, at)
        };
        events.push(of_run(WorkerEventKind::Claimed, started, None));
        if let (Some(resolved), true) = (run.resolved, run.state.is_resolved()) {
            let state = run.state.task_state().as_str();
            let reason = run.reason_resolved.and_then(|reason| serde_json::to_value(reason).ok());
            let detail = match reason.as_ref().and_then(serde_json::Value::as_str) {
                Some(reason) if reason != state => format!("{state} ({reason})"),
                _ => state.to_owned(),
            };
            events.push(of_run(WorkerEventKind::Resolved, resolved, Some(detail)));
        }
    }
    events
}

/// Orders a worker's events newest first. Stable: of events at the same time the given order
/// holds (stored events come newest first), except that a worker's first sighting is older than
/// whatever else happened in its millisecond (its first claim, say).
pub fn newest_first(events: &mut [WorkerEvent]) {
    events.sort_by_key(|event| (std::cmp::Reverse(event.at), event.kind == WorkerEventKind::FirstSeen));
}

#[cfg(test)]
mod tests;
