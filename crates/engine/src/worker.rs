//! Workers as the queue knows them: Taskcluster's worker registry and Swarming's bots.
//!
//! A worker is recorded when it first calls (claimWork, a heartbeat, declareWorker) and keeps
//! when it was seen, what it has (dimensions, version), what it claimed lately, quarantine and
//! termination, and a bounded history of lifecycle events. Claims and resolutions are not
//! stored as events: they are read from the runs of its recent tasks.

use serde::{Deserialize, Serialize};

use crate::dimensions::Dimensions;
use crate::rejection::Rejection;
use crate::status::Run;
use crate::{TaskId, Timestamp};

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
    /// Silent past the dead-after time.
    Missing,
    /// Exited after being asked to.
    Terminated,
}

impl WorkerState {
    /// Every state.
    pub const ALL: [WorkerState; 5] = [Self::Idle, Self::Busy, Self::Quarantined, Self::Missing, Self::Terminated];

    /// The name, as in listings and the `state` filter.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Idle => "idle",
            WorkerState::Busy => "busy",
            WorkerState::Quarantined => "quarantined",
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
        let worker = Worker {
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
            heartbeats: sighting.heartbeat,
            missing: false,
            termination: Termination::None,
            expires,
            events_recorded: 0,
        };
        (worker, vec![WorkerEvent::at(WorkerEventKind::FirstSeen, now)])
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
        self.heartbeats && !self.missing && !matches!(self.termination, Termination::Done { .. })
    }

    /// Whether it is quarantined at `now`.
    #[must_use]
    pub fn is_quarantined(&self, now: Timestamp) -> bool {
        self.quarantine_until.is_some_and(|until| until > now)
    }

    /// Whether it was asked to terminate and has not exited yet.
    #[must_use]
    pub fn terminating(&self) -> bool {
        matches!(self.termination, Termination::Requested { .. })
    }

    /// Until when its claims get nothing: the quarantine's end, or forever once asked to
    /// terminate; `None` when it may claim.
    #[must_use]
    pub fn barred_until(&self, now: Timestamp) -> Option<Timestamp> {
        if self.termination != Termination::None {
            return Some(Timestamp(i64::MAX));
        }
        self.quarantine_until.filter(|&until| until > now)
    }

    /// Whether it was heard from within `dead_after_ms` of `now` and has not exited.
    #[must_use]
    pub fn is_live(&self, now: Timestamp, dead_after_ms: i64) -> bool {
        !self.missing
            && !matches!(self.termination, Termination::Done { .. })
            && self.last_seen.plus_millis(dead_after_ms) >= now
    }

    /// Its state at `now`; `busy` says whether it holds a running run.
    #[must_use]
    pub fn state(&self, now: Timestamp, dead_after_ms: i64, busy: bool) -> WorkerState {
        if matches!(self.termination, Termination::Done { .. }) {
            WorkerState::Terminated
        } else if !self.is_live(now, dead_after_ms) {
            WorkerState::Missing
        } else if self.is_quarantined(now) {
            WorkerState::Quarantined
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
mod tests {
    use super::*;

    #[test]
    fn a_sighting_names_what_is_wrong_with_its_caches() {
        let with = |caches: Vec<String>| Sighting { caches: Some(caches), ..Sighting::default() }.check();
        assert!(with(vec!["checkout".into(), "ccache:v2".into()]).is_ok());
        for bad in [vec!["../up".to_owned()], vec![String::new()], vec!["x".to_owned(); MAX_CACHES + 1]] {
            let refused = with(bad).unwrap_err();
            assert!(format!("{refused:?}").contains("caches"), "{refused:?}");
        }
    }

    #[test]
    fn a_first_sighting_is_the_oldest_event_of_its_millisecond() {
        let at = Timestamp(1_790_000_000_000);
        let mut events = vec![
            WorkerEvent::at(WorkerEventKind::FirstSeen, at),
            WorkerEvent::at(WorkerEventKind::Claimed, at),
            WorkerEvent::at(WorkerEventKind::Resolved, Timestamp(at.0 + 1)),
        ];
        newest_first(&mut events);
        let kinds: Vec<_> = events.iter().map(|event| event.kind).collect();
        assert_eq!(kinds, [WorkerEventKind::Resolved, WorkerEventKind::Claimed, WorkerEventKind::FirstSeen]);
    }

    fn key() -> WorkerKey {
        WorkerKey { task_queue_id: "p/w".into(), worker_group: "g".into(), worker_id: "i".into() }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp(1_800_000_000_000 + secs * 1000)
    }

    fn heartbeat() -> Sighting {
        Sighting { heartbeat: true, ..Sighting::default() }
    }

    #[test]
    fn a_silent_heartbeating_worker_goes_missing_once_and_comes_back() {
        let (mut worker, events) = Worker::first(key(), heartbeat(), at(0), at(100));
        assert_eq!(events[0].kind, WorkerEventKind::FirstSeen);
        assert!(worker.lose(at(0), at(130)).is_empty(), "seen at the cutoff is not missing");
        let lost = worker.lose(at(10), at(130));
        assert_eq!(lost[0].kind, WorkerEventKind::Missing);
        assert!(worker.lose(at(10), at(131)).is_empty(), "missing once");
        assert_eq!(worker.state(at(131), 120_000, false), WorkerState::Missing);
        let back = worker.seen(heartbeat(), at(140), at(200));
        assert_eq!(back[0].kind, WorkerEventKind::Back);
        assert_eq!(worker.state(at(141), 120_000, true), WorkerState::Busy);
    }

    #[test]
    fn a_worker_that_does_not_heartbeat_is_never_marked_missing() {
        let (mut worker, _) = Worker::first(key(), Sighting::default(), at(0), at(100));
        assert!(worker.lose(at(500), at(600)).is_empty());
        assert_eq!(worker.state(at(600), 120_000, false), WorkerState::Missing, "but listed as silent");
    }

    #[test]
    fn quarantine_bars_claims_until_it_ends_and_a_past_time_releases() {
        let (mut worker, _) = Worker::first(key(), Sighting::default(), at(0), at(100));
        let events = worker.quarantine(at(60), "flaky disk".into(), "admin", at(1)).unwrap();
        assert_eq!(events[0].kind, WorkerEventKind::Quarantined);
        assert_eq!(events[0].detail.as_deref(), Some("flaky disk"));
        assert_eq!(worker.barred_until(at(2)), Some(at(60)));
        assert_eq!(worker.state(at(2), 120_000, false), WorkerState::Quarantined);
        assert_eq!(worker.barred_until(at(61)), None, "ends by itself");
        let events = worker.quarantine(at(1), String::new(), "admin", at(3)).unwrap();
        assert_eq!(events[0].kind, WorkerEventKind::Released);
        assert_eq!(worker.barred_until(at(4)), None);
        assert_eq!(worker.quarantine_details.len(), 2);
        worker.quarantine(at(5000), String::new(), "admin", at(4)).unwrap();
        assert_eq!(worker.expires, at(5000), "kept while quarantined");
        let long = "x".repeat(MAX_QUARANTINE_INFO + 1);
        assert!(matches!(worker.quarantine(at(9), long, "a", at(5)), Err(Rejection::Invalid { .. })));
    }

    #[test]
    fn termination_bars_claims_until_the_worker_exits_and_a_new_process_starts_afresh() {
        let (mut worker, _) = Worker::first(key(), heartbeat(), at(0), at(100));
        assert!(worker.exited(at(1)).is_empty(), "not asked");
        assert_eq!(worker.request_termination("admin", at(1))[0].kind, WorkerEventKind::Terminating);
        assert!(worker.request_termination("admin", at(2)).is_empty());
        assert!(worker.barred_until(at(2)).is_some());
        assert_eq!(worker.exited(at(3))[0].kind, WorkerEventKind::Terminated);
        assert!(worker.lose(at(500), at(600)).is_empty(), "an exited worker is not missing");
        assert_eq!(worker.state(at(4), 120_000, false), WorkerState::Terminated);
        assert_eq!(worker.seen(heartbeat(), at(5), at(100))[0].kind, WorkerEventKind::Back);
        assert_eq!(worker.barred_until(at(6)), None);
    }

    #[test]
    fn recent_tasks_keep_the_latest_twenty() {
        let (mut worker, _) = Worker::first(key(), Sighting::default(), at(0), at(100));
        let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
        worker.claimed((0..25).map(|run_id| TaskRun { task_id, run_id }), at(1));
        worker.claimed([TaskRun { task_id, run_id: 25 }], at(2));
        assert_eq!(worker.recent_tasks.len(), RECENT_TASKS);
        assert_eq!(worker.recent_tasks[0].run_id, 6);
        assert_eq!(worker.first_claim, Some(at(1)));
    }

    #[test]
    fn events_are_numbered_on_from_those_recorded() {
        let (mut worker, events) = Worker::first(key(), Sighting::default(), at(0), at(100));
        let numbers = |numbered: Vec<(u64, WorkerEvent)>| numbered.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(numbers(worker.number(events)), [1]);
        let later = worker.request_termination("admin", at(1));
        let again = worker.exited(at(2));
        assert_eq!(numbers(worker.number([later, again].concat())), [2, 3]);
        assert_eq!(worker.events_recorded, 3);
    }

    #[test]
    fn dimension_filters_need_every_pair() {
        let raw = [("os".to_owned(), vec!["Linux".to_owned(), "Ubuntu".to_owned()])].into_iter().collect();
        let sighting = Sighting { dimensions: Some(Dimensions::parse("dimensions", raw).unwrap()), ..heartbeat() };
        let (worker, _) = Worker::first(key(), sighting, at(0), at(100));
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert!(worker.has_dimensions(&[pair("os", "Linux"), pair("os", "Ubuntu")]));
        assert!(!worker.has_dimensions(&[pair("os", "Linux"), pair("pool", "x")]));
    }
}
