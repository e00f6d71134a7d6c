//! The workers as this server sees them: when each sighting was last written (so that a busy
//! fleet's calls write each worker's record at most every few seconds) and whether each may
//! claim, as its record said then.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use shoal_engine::Timestamp;
pub use shoal_engine::worker::Standing;
use shoal_engine::worker::{Sighting, Worker, WorkerKey};

#[derive(Debug, Clone, Copy)]
struct Seen {
    written: Timestamp,
    told: SightingHashes,
    standing: Standing,
}

/// What the written sightings told, as hashes: a sighting telling nothing new need not be
/// written again before the interval ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SightingHashes {
    dimensions: Option<u64>,
    version: Option<u64>,
    caches: Option<u64>,
    maintenance: Option<u64>,
    queues: Option<u64>,
    heartbeat: bool,
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl SightingHashes {
    fn of(sighting: &Sighting) -> SightingHashes {
        SightingHashes {
            dimensions: sighting.dimensions.as_ref().map(hash_of),
            version: sighting.version.as_ref().map(hash_of),
            caches: sighting.caches.as_ref().map(hash_of),
            maintenance: sighting.maintenance.as_ref().map(hash_of),
            queues: sighting.queues.as_ref().map(hash_of),
            heartbeat: sighting.heartbeat,
        }
    }

    /// Whether `other` tells nothing this did not.
    fn covers(&self, other: &SightingHashes) -> bool {
        other.dimensions.is_none_or(|hash| self.dimensions == Some(hash))
            && other.version.is_none_or(|hash| self.version == Some(hash))
            && other.caches.is_none_or(|hash| self.caches == Some(hash))
            && other.maintenance.is_none_or(|hash| self.maintenance == Some(hash))
            && other.queues.is_none_or(|hash| self.queues == Some(hash))
            && (self.heartbeat || !other.heartbeat)
    }

    fn merged(self, newer: SightingHashes) -> SightingHashes {
        SightingHashes {
            dimensions: newer.dimensions.or(self.dimensions),
            version: newer.version.or(self.version),
            caches: newer.caches.or(self.caches),
            maintenance: newer.maintenance.or(self.maintenance),
            queues: newer.queues.or(self.queues),
            heartbeat: self.heartbeat || newer.heartbeat,
        }
    }
}

/// Sightings written lately, by worker, and the writes under way.
#[derive(Debug)]
pub(crate) struct Fleet {
    state: Mutex<State>,
    interval_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    seen: HashMap<WorkerKey, Seen>,
    writing: HashMap<WorkerKey, Writes>,
}

/// One worker's record writes under way on this server.
#[derive(Debug, Default)]
struct Writes {
    count: u32,
    /// Another write or change overlapped one of them: the store ordered them, and which
    /// record is newest is unknown here, so none of them is remembered.
    overlapped: bool,
}

/// A write of one worker's record under way; its end says what the record became.
pub(crate) struct Writing<'a> {
    fleet: &'a Fleet,
    key: WorkerKey,
}

impl Fleet {
    /// Sightings are written at most every `interval_ms` per worker, unless they change.
    pub(crate) fn new(interval_ms: i64) -> Fleet {
        Fleet { state: Mutex::new(State::default()), interval_ms }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The standing written for an equal sighting within the interval, if any.
    pub(crate) fn fresh(&self, key: &WorkerKey, sighting: &Sighting, now: Timestamp) -> Option<Standing> {
        let seen = *self.lock().seen.get(key)?;
        // An exited worker's sighting is always written: it is a new process, and brings the
        // record back.
        let fresh = seen.told.covers(&SightingHashes::of(sighting))
            && seen.written.plus_millis(self.interval_ms) > now
            && !seen.standing.exited;
        fresh.then_some(seen.standing)
    }

    /// A write of `key`'s record begins (a sighting or a change).
    pub(crate) fn writing(&self, key: &WorkerKey) -> Writing<'_> {
        let mut state = self.lock();
        let writes = state.writing.entry(key.clone()).or_default();
        writes.count += 1;
        writes.overlapped |= writes.count > 1;
        Writing { fleet: self, key: key.clone() }
    }

    /// Forgets what was written for `key`: its next sighting is written, and reads its record.
    pub(crate) fn forget(&self, key: &WorkerKey) {
        let mut state = self.lock();
        state.seen.remove(key);
        if let Some(writes) = state.writing.get_mut(key) {
            writes.overlapped = true;
        }
    }

    /// Forgets what was written for every worker (changes made elsewhere may have been missed).
    pub(crate) fn forget_all(&self) {
        let mut state = self.lock();
        state.seen.clear();
        for writes in state.writing.values_mut() {
            writes.overlapped = true;
        }
    }
}

impl Writing<'_> {
    /// `sighting` was written at `now`, leaving the record `worker`; answers the standing
    /// remembered before, if any.
    pub(crate) fn written(self, sighting: &Sighting, worker: &Worker, now: Timestamp) -> Option<Standing> {
        let mut state = self.fleet.lock();
        if state.writing.get(&self.key).is_some_and(|writes| writes.overlapped) {
            state.seen.remove(&self.key);
            return None;
        }
        let before = state.seen.get(&self.key).copied();
        let told = before.map_or_else(SightingHashes::default, |seen| seen.told).merged(SightingHashes::of(sighting));
        state.seen.insert(self.key.clone(), Seen { written: now, told, standing: worker.standing(now) });
        // Workers gone for good are forgotten now and then.
        if state.seen.len().is_power_of_two() && state.seen.len() >= 1024 {
            let horizon = self.fleet.interval_ms.saturating_mul(20);
            state.seen.retain(|_, seen| seen.written.plus_millis(horizon) > now);
        }
        before.map(|seen| seen.standing)
    }

    /// A change made here left the record `worker`, with no sighting written.
    pub(crate) fn changed(self, worker: &Worker, now: Timestamp) {
        let mut state = self.fleet.lock();
        if state.writing.get(&self.key).is_some_and(|writes| writes.overlapped) {
            state.seen.remove(&self.key);
        } else if let Some(seen) = state.seen.get_mut(&self.key) {
            seen.standing = worker.standing(now);
        }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut state = self.fleet.lock();
        let Some(writes) = state.writing.get_mut(&self.key) else { return };
        writes.count -= 1;
        if writes.count == 0 {
            state.writing.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equal_sighting_within_the_interval_is_not_written_again() {
        let fleet = Fleet::new(5_000);
        let key = WorkerKey { task_queue_id: "p/w".into(), worker_group: "g".into(), worker_id: "i".into() };
        let sighting = Sighting { heartbeat: true, ..Sighting::default() };
        assert_eq!(fleet.fresh(&key, &sighting, Timestamp(0)), None, "never written");
        let (mut worker, _) = Worker::first(key.clone(), sighting.clone(), Timestamp(0), Timestamp(10_000));
        fleet.writing(&key).written(&sighting, &worker, Timestamp(0));
        assert_eq!(fleet.fresh(&key, &sighting, Timestamp(4_999)), Some(Standing::default()));
        assert_eq!(fleet.fresh(&key, &sighting, Timestamp(5_000)), None, "stale");
        let changed = Sighting { version: Some("2".into()), ..sighting.clone() };
        assert_eq!(fleet.fresh(&key, &changed, Timestamp(1)), None, "a new version is written at once");
        let cached = Sighting { caches: Some(vec!["checkout".into()]), ..sighting.clone() };
        assert_eq!(fleet.fresh(&key, &cached, Timestamp(1)), None, "new caches are written at once");
        let maintained = Sighting { maintenance: Some(Some("disk full".into())), ..sighting.clone() };
        assert_eq!(fleet.fresh(&key, &maintained, Timestamp(1)), None, "maintenance is written at once");
        let plain = Sighting::default();
        assert!(fleet.fresh(&key, &plain, Timestamp(1)).is_some(), "a sighting telling less is not written");
        worker.request_termination("admin", Timestamp(2));
        fleet.writing(&key).changed(&worker, Timestamp(2));
        assert!(fleet.fresh(&key, &sighting, Timestamp(3)).is_some_and(|standing| standing.barred(Timestamp(3))));
        // Exited, its next sighting is a new process's: written, so the record comes back.
        worker.exited(Timestamp(3));
        fleet.writing(&key).changed(&worker, Timestamp(3));
        assert_eq!(fleet.fresh(&key, &sighting, Timestamp(4)), None, "an exited worker's sighting is written");
    }

    fn in_maintenance(key: &WorkerKey, on: bool) -> (Sighting, Worker) {
        let sighting = Sighting { maintenance: Some(on.then(|| "cooling".to_owned())), ..Sighting::default() };
        (sighting.clone(), Worker::first(key.clone(), sighting, Timestamp(0), Timestamp(10_000)).0)
    }

    #[test]
    fn overlapping_writes_leave_nothing_remembered_as_the_store_may_have_ordered_them_either_way() {
        let fleet = Fleet::new(5_000);
        let key = WorkerKey { task_queue_id: "p/w".into(), worker_group: "g".into(), worker_id: "i".into() };
        let ((on, maintained), (off, ended)) = (in_maintenance(&key, true), in_maintenance(&key, false));
        // A claim's sighting reads the record in maintenance; a heartbeat ending it is written
        // meanwhile and remembered first.
        let (claim, heartbeat) = (fleet.writing(&key), fleet.writing(&key));
        heartbeat.written(&off, &ended, Timestamp(1));
        claim.written(&Sighting::default(), &maintained, Timestamp(1));
        assert_eq!(fleet.fresh(&key, &Sighting::default(), Timestamp(2)), None, "the next look reads the record");
        // Alone again, a write is remembered.
        fleet.writing(&key).written(&on, &maintained, Timestamp(3));
        assert!(fleet.fresh(&key, &Sighting::default(), Timestamp(4)).is_some_and(|standing| standing.maintenance));
        // An operator's change overlapping a sighting, and a change reaching a sibling record.
        let sighting = fleet.writing(&key);
        fleet.writing(&key).changed(&ended, Timestamp(5));
        sighting.written(&Sighting::default(), &maintained, Timestamp(5));
        assert_eq!(fleet.fresh(&key, &Sighting::default(), Timestamp(6)), None);
        let sighting = fleet.writing(&key);
        fleet.forget(&key);
        sighting.written(&Sighting::default(), &maintained, Timestamp(7));
        assert_eq!(fleet.fresh(&key, &Sighting::default(), Timestamp(8)), None);
        assert!(fleet.lock().writing.is_empty(), "every write's end is counted");
    }
}
