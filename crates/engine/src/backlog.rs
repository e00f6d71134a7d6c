//! A queue's backlog by dimension set (Swarming's pending tasks by dimensions): how many runs
//! wait on each set, since when, and which of the queue's workers could take them. A set that
//! no live worker matches is what an operator must look at: nothing will run it.

use serde::Serialize;

use crate::Timestamp;
use crate::dimensions::Dimensions;
use crate::worker::Worker;

/// Pending runs waiting on one dimension set (a task's, or its current slice's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSet {
    /// The dimensions they require.
    pub dimensions: Dimensions,
    /// How many wait.
    pub pending: u64,
    /// When the longest-waiting of them became pending.
    pub oldest: Timestamp,
}

/// How many of a queue's workers match a set, by whether they could claim now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Matching {
    /// Heard from lately and free to claim (idle or busy).
    pub live: u64,
    /// Live but quarantined.
    pub quarantined: u64,
    /// Live but in maintenance.
    pub maintenance: u64,
    /// Live but asked to terminate.
    pub terminating: u64,
    /// Not heard from lately (and not known to have exited).
    pub missing: u64,
}

/// One dimension set of the backlog with the workers that match it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BacklogLine {
    /// The dimensions the runs require.
    pub dimensions: Dimensions,
    /// How many runs wait on them.
    pub pending_tasks: u64,
    /// When the longest-waiting became pending.
    pub oldest_pending: Timestamp,
    /// The queue's workers having them.
    pub workers: Matching,
}

impl BacklogLine {
    /// Whether no worker that could claim now matches: its runs wait for one to appear.
    #[must_use]
    pub fn stranded(&self) -> bool {
        self.workers.live == 0
    }
}

/// Most sets a backlog shows: the longest-waiting (each is matched against every worker).
pub const MAX_LINES: usize = 100;

/// The backlog of `sets` against the queue's `workers` at `now` (a worker unheard from for
/// `dead_after_ms` is missing; one that exited is left out): the [`MAX_LINES`]
/// longest-waiting sets, longest-waiting first.
#[must_use]
pub fn backlog(mut sets: Vec<PendingSet>, workers: &[Worker], now: Timestamp, dead_after_ms: i64) -> Vec<BacklogLine> {
    sets.sort_by_key(|set| set.oldest);
    sets.truncate(MAX_LINES);
    let classed: Vec<(&Dimensions, Class)> =
        workers.iter().filter_map(|worker| Some((&worker.dimensions, class(worker, now, dead_after_ms)?))).collect();
    sets.into_iter()
        .map(|set| {
            let mut matching = Matching::default();
            for (have, class) in &classed {
                if set.dimensions.matched_by(have) {
                    *class.count_in(&mut matching) += 1;
                }
            }
            BacklogLine {
                dimensions: set.dimensions,
                pending_tasks: set.pending,
                oldest_pending: set.oldest,
                workers: matching,
            }
        })
        .collect()
}

/// What a worker could do for a pending run now.
#[derive(Debug, Clone, Copy)]
enum Class {
    Live,
    Quarantined,
    Maintenance,
    Terminating,
    Missing,
}

impl Class {
    fn count_in(self, matching: &mut Matching) -> &mut u64 {
        match self {
            Class::Live => &mut matching.live,
            Class::Quarantined => &mut matching.quarantined,
            Class::Maintenance => &mut matching.maintenance,
            Class::Terminating => &mut matching.terminating,
            Class::Missing => &mut matching.missing,
        }
    }
}

/// `None` for a worker that exited: it is no one's capacity, not even missing.
fn class(worker: &Worker, now: Timestamp, dead_after_ms: i64) -> Option<Class> {
    let standing = worker.standing(now);
    if standing.exited {
        None
    } else if !worker.is_live(now, dead_after_ms) {
        Some(Class::Missing)
    } else if standing.terminate {
        Some(Class::Terminating)
    } else if standing.quarantine_until.is_some() {
        Some(Class::Quarantined)
    } else if standing.maintenance {
        Some(Class::Maintenance)
    } else {
        Some(Class::Live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::{Maintenance, Sighting, WorkerKey};

    fn dims(pairs: &[(&str, &str)]) -> Dimensions {
        let mut map = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (key, value) in pairs {
            map.entry((*key).to_owned()).or_default().push((*value).to_owned());
        }
        Dimensions::parse_required("dimensions", map).unwrap()
    }

    fn worker(id: &str, have: &[(&str, &str)]) -> Worker {
        let key = WorkerKey { task_queue_id: "p/w".into(), worker_group: "g".into(), worker_id: id.into() };
        let sighting = Sighting { dimensions: Some(dims(have)), heartbeat: true, ..Sighting::default() };
        Worker::first(key, sighting, Timestamp(100_000), Timestamp(100_000 + 86_400_000)).0
    }

    #[test]
    fn each_set_counts_the_workers_matching_it_by_what_they_can_do() {
        let now = Timestamp(100_000);
        let linux = worker("a", &[("os", "linux"), ("gpu", "none")]);
        let mut quarantined = worker("b", &[("os", "linux")]);
        quarantined.quarantine_until = Some(Timestamp(200_000));
        let mut gone = worker("c", &[("os", "mac")]);
        gone.last_seen = Timestamp(0);
        let sets = vec![
            PendingSet { dimensions: dims(&[("os", "mac")]), pending: 2, oldest: Timestamp(1_500) },
            PendingSet { dimensions: dims(&[("os", "linux")]), pending: 5, oldest: Timestamp(1_200) },
            PendingSet {
                dimensions: dims(&[("os", "windows|linux"), ("gpu", "none")]),
                pending: 1,
                oldest: Timestamp(1_900),
            },
        ];
        let lines = backlog(sets, &[linux, quarantined, gone], now, 60_000);
        let counts: Vec<(u64, Matching, bool)> =
            lines.iter().map(|line| (line.pending_tasks, line.workers, line.stranded())).collect();
        assert_eq!(
            counts,
            vec![
                (5, Matching { live: 1, quarantined: 1, ..Matching::default() }, false),
                (2, Matching { missing: 1, ..Matching::default() }, true),
                (1, Matching { live: 1, ..Matching::default() }, false),
            ]
        );
    }

    #[test]
    fn a_worker_that_exited_or_is_leaving_runs_nothing() {
        let now = Timestamp(100_000);
        let mut leaving = worker("a", &[("os", "linux")]);
        leaving.request_termination("ops", now);
        let mut resting = worker("b", &[("os", "linux")]);
        resting.maintenance = Some(Maintenance { message: "disk full".into(), since: now, client_id: None });
        let sets = vec![PendingSet { dimensions: dims(&[("os", "linux")]), pending: 1, oldest: now }];
        let line = &backlog(sets, &[leaving, resting], now, 60_000)[0];
        assert_eq!(line.workers, Matching { terminating: 1, maintenance: 1, ..Matching::default() });
        assert!(line.stranded());
    }
}
