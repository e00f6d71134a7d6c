//! The pending index: which runs wait in which queue, grouped by dimension set, in claim order.
//!
//! Tasks with equal dimensions share one group (Swarming's task queues), so a claim looks at
//! each group a worker matches once, not at every pending task; which groups a worker matches
//! is cached per worker dimension set until a new group appears. Within a group entries are
//! ordered by (priority rank, sequence): most urgent first, then oldest.
//!
//! Changes are recorded in an undo log so the store can roll the index back together with a
//! failed transaction.

use std::collections::{BTreeMap, HashMap};

use shoal_engine::TaskId;
use shoal_engine::dimensions::Dimensions;

/// Where one pending run sits in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingKey {
    /// Task queue.
    pub task_queue_id: String,
    /// Required dimensions.
    pub dimensions: Dimensions,
    /// Priority rank (lower first).
    pub rank: u8,
    /// Insertion order within a rank (lower first).
    pub seq: u64,
}

/// A pending run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingRun {
    /// The task.
    pub task_id: TaskId,
    /// The pending run.
    pub run_id: u32,
}

/// Cache entries kept per queue before the match cache is dropped and rebuilt.
const MATCH_CACHE_LIMIT: usize = 4096;

/// Every pending run, by queue and dimension set.
#[derive(Debug, Default)]
pub(crate) struct PendingIndex {
    queues: HashMap<String, QueueIndex>,
    undo: Vec<Undo>,
    len: usize,
}

#[derive(Debug, Default)]
struct QueueIndex {
    groups: Vec<Group>,
    group_of: HashMap<Dimensions, usize>,
    /// Worker dimensions -> indexes of the groups they match; valid while `groups.len()` is
    /// what it was when computed (groups are only ever added).
    match_cache: HashMap<Dimensions, (usize, Vec<usize>)>,
}

#[derive(Debug)]
struct Group {
    dimensions: Dimensions,
    entries: BTreeMap<(u8, u64), PendingRun>,
}

#[derive(Debug)]
enum Undo {
    Inserted(PendingKey),
    Removed(PendingKey, PendingRun),
}

impl PendingIndex {
    /// Number of pending runs.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is pending.
    /// Adds a pending run.
    pub(crate) fn insert(&mut self, key: PendingKey, run: PendingRun) {
        self.insert_raw(&key, run);
        self.undo.push(Undo::Inserted(key));
    }

    /// Adds a pending run that is already durable (rebuilding the index at start): no undo
    /// record, so a rebuild of millions of runs costs only the index itself.
    pub(crate) fn restore(&mut self, key: &PendingKey, run: PendingRun) {
        self.insert_raw(key, run);
    }

    /// Removes a pending run if present.
    pub(crate) fn remove(&mut self, key: &PendingKey) {
        if let Some(run) = self.remove_raw(key) {
            self.undo.push(Undo::Removed(key.clone(), run));
        }
    }

    /// Takes up to `n` runs a worker with `worker` dimensions may claim, most urgent first.
    pub(crate) fn pop_matching(
        &mut self,
        task_queue_id: &str,
        worker: &Dimensions,
        n: usize,
    ) -> Vec<(PendingKey, PendingRun)> {
        let Some(queue) = self.queues.get_mut(task_queue_id) else {
            return Vec::new();
        };
        let matching = queue.matching_groups(worker);
        let mut res = Vec::with_capacity(n);
        while res.len() < n {
            let best = matching
                .iter()
                .filter_map(|&group_idx| {
                    queue.groups[group_idx].entries.first_key_value().map(|(order, _)| (*order, group_idx))
                })
                .min();
            let Some((order, group_idx)) = best else {
                break;
            };
            let group = &mut queue.groups[group_idx];
            let Some(run) = group.entries.remove(&order) else {
                break;
            };
            let key = PendingKey {
                task_queue_id: task_queue_id.to_owned(),
                dimensions: group.dimensions.clone(),
                rank: order.0,
                seq: order.1,
            };
            self.len -= 1;
            self.undo.push(Undo::Removed(key.clone(), run));
            res.push((key, run));
        }
        res
    }

    /// Forgets the undo log: the transaction that made these changes committed.
    pub(crate) fn commit(&mut self) {
        self.undo.clear();
    }

    /// A mark to roll back to.
    #[must_use]
    pub(crate) fn mark(&self) -> usize {
        self.undo.len()
    }

    /// Undoes every change made since `mark`.
    pub(crate) fn rollback_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            match self.undo.pop() {
                Some(Undo::Inserted(key)) => {
                    self.remove_raw(&key);
                }
                Some(Undo::Removed(key, run)) => self.insert_raw(&key, run),
                None => break,
            }
        }
    }

    fn insert_raw(&mut self, key: &PendingKey, run: PendingRun) {
        // Look up before inserting: `entry` would allocate a copy of the name every time.
        if !self.queues.contains_key(&key.task_queue_id) {
            self.queues.insert(key.task_queue_id.clone(), QueueIndex::default());
        }
        let Some(queue) = self.queues.get_mut(&key.task_queue_id) else { return };
        let group_idx = match queue.group_of.get(&key.dimensions) {
            Some(&idx) => idx,
            None => {
                queue.groups.push(Group { dimensions: key.dimensions.clone(), entries: BTreeMap::new() });
                queue.group_of.insert(key.dimensions.clone(), queue.groups.len() - 1);
                queue.groups.len() - 1
            }
        };
        if queue.groups[group_idx].entries.insert((key.rank, key.seq), run).is_none() {
            self.len += 1;
        }
    }

    fn remove_raw(&mut self, key: &PendingKey) -> Option<PendingRun> {
        let queue = self.queues.get_mut(&key.task_queue_id)?;
        let group_idx = *queue.group_of.get(&key.dimensions)?;
        let run = queue.groups[group_idx].entries.remove(&(key.rank, key.seq))?;
        self.len -= 1;
        Some(run)
    }
}

impl QueueIndex {
    fn matching_groups(&mut self, worker: &Dimensions) -> Vec<usize> {
        let n_groups = self.groups.len();
        if let Some((seen, cached)) = self.match_cache.get_mut(worker) {
            if *seen < n_groups {
                let new = (*seen..n_groups).filter(|&idx| self.groups[idx].dimensions.matched_by(worker));
                cached.extend(new);
                *seen = n_groups;
            }
            return cached.clone();
        }
        if self.match_cache.len() >= MATCH_CACHE_LIMIT {
            self.match_cache.clear();
        }
        let matching: Vec<usize> =
            (0..n_groups).filter(|&idx| self.groups[idx].dimensions.matched_by(worker)).collect();
        self.match_cache.insert(worker.clone(), (n_groups, matching.clone()));
        matching
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn dims(pairs: &[(&str, &str)]) -> Dimensions {
        let mut raw: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in pairs {
            raw.entry((*key).to_owned()).or_default().push((*value).to_owned());
        }
        Dimensions::parse("dimensions", raw).unwrap()
    }

    fn id(n: u8) -> TaskId {
        let text = format!("{n:08}QxCxxxxxxxxxxA");
        TaskId::parse(&text).unwrap_or_else(|| panic!("bad id {text}"))
    }

    fn key(dimensions: &Dimensions, rank: u8, seq: u64) -> PendingKey {
        PendingKey { task_queue_id: "p/w".into(), dimensions: dimensions.clone(), rank, seq }
    }

    #[test]
    fn claims_by_rank_then_age_across_matching_groups() {
        let mut index = PendingIndex::default();
        let linux = dims(&[("os", "linux")]);
        let mac = dims(&[("os", "mac")]);
        let any = Dimensions::default();
        index.insert(key(&linux, 100, 1), PendingRun { task_id: id(1), run_id: 0 });
        index.insert(key(&any, 100, 2), PendingRun { task_id: id(2), run_id: 0 });
        index.insert(key(&mac, 10, 3), PendingRun { task_id: id(3), run_id: 0 });
        index.insert(key(&linux, 50, 4), PendingRun { task_id: id(4), run_id: 0 });
        let worker = dims(&[("os", "linux"), ("cpu", "x86")]);
        let got: Vec<TaskId> = index.pop_matching("p/w", &worker, 10).into_iter().map(|(_, run)| run.task_id).collect();
        assert_eq!(got, vec![id(4), id(1), id(2)], "the mac task is not for this worker");
        assert_eq!(index.len(), 1);
        assert!(index.pop_matching("other/q", &worker, 1).is_empty());
    }

    #[test]
    fn rollback_restores_exactly() {
        let mut index = PendingIndex::default();
        let any = Dimensions::default();
        index.insert(key(&any, 1, 1), PendingRun { task_id: id(1), run_id: 0 });
        index.commit();
        let mark = index.mark();
        index.insert(key(&any, 1, 2), PendingRun { task_id: id(2), run_id: 0 });
        let popped = index.pop_matching("p/w", &any, 5);
        assert_eq!(popped.len(), 2);
        index.rollback_to(mark);
        assert_eq!(index.len(), 1);
        let left = index.pop_matching("p/w", &any, 5);
        assert_eq!(left[0].1.task_id, id(1));
    }

    #[test]
    fn new_groups_reach_cached_workers() {
        let mut index = PendingIndex::default();
        let worker = dims(&[("os", "linux")]);
        assert!(index.pop_matching("p/w", &worker, 1).is_empty());
        index.insert(key(&Dimensions::default(), 1, 1), PendingRun { task_id: id(1), run_id: 0 });
        assert_eq!(index.pop_matching("p/w", &worker, 1).len(), 1);
        index.insert(key(&dims(&[("os", "linux")]), 1, 2), PendingRun { task_id: id(2), run_id: 0 });
        assert_eq!(index.pop_matching("p/w", &worker, 1).len(), 1, "a group added after caching is seen");
    }
}
