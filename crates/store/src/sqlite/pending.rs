//! The pending index: which runs wait in which queue, grouped by dimension set, in claim order.
//!
//! Tasks with equal dimensions share one group (Swarming's task queues), so a claim looks at
//! each group a worker matches once, not at every pending task. Each group is filed under the
//! alternatives of one of its required values (its anchor, the one whose alternatives have
//! the fewest groups filed when it appeared); a worker looks only at the groups filed under
//! the values it has, and at those requiring nothing. A group is dropped when it empties.
//! Within a group entries are ordered by (priority rank, sequence): most urgent first, then
//! oldest.
//!
//! Changes are recorded in an undo log so the store can roll the index back together with a
//! failed transaction.

use std::collections::{BTreeMap, HashMap};

use shoal_engine::TaskId;
use shoal_engine::dimensions::{Dimensions, alternatives};

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

/// Every pending run, by queue and dimension set.
#[derive(Debug, Default)]
pub(crate) struct PendingIndex {
    queues: HashMap<String, QueueIndex>,
    undo: Vec<Undo>,
    len: usize,
}

#[derive(Debug, Default)]
struct QueueIndex {
    /// Slots; a dropped group's slot is `None` until reused.
    groups: Vec<Option<Group>>,
    free: Vec<usize>,
    group_of: HashMap<Dimensions, usize>,
    /// Key -> value -> the groups anchored on it.
    anchored: HashMap<String, HashMap<String, Vec<usize>>>,
    /// The groups requiring nothing.
    unconstrained: Vec<usize>,
    /// Runs pending in the queue.
    len: usize,
}

#[derive(Debug)]
struct Group {
    dimensions: Dimensions,
    /// The required value (key, `a|b` alternatives) the group is filed under; none if it
    /// requires nothing.
    anchor: Option<(String, String)>,
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

    /// The queues whose runs changed since the last commit, with the runs now pending in
    /// each (a queue may come more than once).
    pub(crate) fn changed_queues(&self) -> impl Iterator<Item = (&str, usize)> {
        let mut last: Option<&str> = None;
        self.undo.iter().filter_map(move |undo| {
            let queue = match undo {
                Undo::Inserted(key) | Undo::Removed(key, _) => key.task_queue_id.as_str(),
            };
            // A batch's changes mostly come in runs of one queue.
            if last == Some(queue) {
                return None;
            }
            last = Some(queue);
            Some((queue, self.queues.get(queue).map_or(0, |index| index.len)))
        })
    }

    /// Every queue that has held a pending run, with the runs now pending in each.
    pub(crate) fn queue_lengths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.queues.iter().map(|(queue, index)| (queue.as_str(), index.len))
    }

    /// Forgets the queues with nothing pending (between batches: the undo log must be empty).
    pub(crate) fn forget_empty_queues(&mut self) {
        debug_assert!(self.undo.is_empty());
        self.queues.retain(|_, queue| queue.len > 0);
    }

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
                .filter_map(|&slot| {
                    let group = queue.groups[slot].as_ref()?;
                    group.entries.first_key_value().map(|(order, _)| (*order, slot))
                })
                .min();
            let Some((order, slot)) = best else {
                break;
            };
            let Some(group) = queue.groups[slot].as_mut() else { break };
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
            queue.len -= 1;
            self.undo.push(Undo::Removed(key.clone(), run));
            res.push((key, run));
        }
        // Dropped after the loop: `matching` holds slots a drop would free for reuse.
        for slot in matching {
            queue.drop_if_empty(slot);
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
        let slot = match queue.group_of.get(&key.dimensions) {
            Some(&slot) => slot,
            None => queue.add_group(&key.dimensions),
        };
        let Some(group) = queue.groups[slot].as_mut() else { return };
        if group.entries.insert((key.rank, key.seq), run).is_none() {
            self.len += 1;
            queue.len += 1;
        }
    }

    fn remove_raw(&mut self, key: &PendingKey) -> Option<PendingRun> {
        let queue = self.queues.get_mut(&key.task_queue_id)?;
        let slot = *queue.group_of.get(&key.dimensions)?;
        let run = queue.groups[slot].as_mut()?.entries.remove(&(key.rank, key.seq))?;
        queue.drop_if_empty(slot);
        self.len -= 1;
        queue.len -= 1;
        Some(run)
    }
}

impl QueueIndex {
    /// The slots of the groups whose dimensions `worker` matches.
    fn matching_groups(&self, worker: &Dimensions) -> Vec<usize> {
        let mut matching: Vec<usize> = self.unconstrained.clone();
        for (key, values) in worker.iter() {
            let Some(by_value) = self.anchored.get(key) else { continue };
            for value in values {
                let Some(slots) = by_value.get(value) else { continue };
                matching.extend(slots.iter().copied().filter(|&slot| {
                    self.groups[slot].as_ref().is_some_and(|group| group.dimensions.matched_by(worker))
                }));
            }
        }
        // A worker having two alternatives of one anchor finds its group twice.
        matching.sort_unstable();
        matching.dedup();
        matching
    }

    fn add_group(&mut self, dimensions: &Dimensions) -> usize {
        let anchor = dimensions
            .anchor(|key, one| self.anchored.get(key).and_then(|by_value| by_value.get(one)).map_or(0, Vec::len))
            .map(|(key, value)| (key.to_owned(), value.to_owned()));
        let group = Group { dimensions: dimensions.clone(), anchor, entries: BTreeMap::new() };
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.groups.push(None);
                self.groups.len() - 1
            }
        };
        match &group.anchor {
            None => self.unconstrained.push(slot),
            Some((key, value)) => {
                let by_value = self.anchored.entry(key.clone()).or_default();
                for one in alternatives(value) {
                    by_value.entry(one.to_owned()).or_default().push(slot);
                }
            }
        }
        self.group_of.insert(dimensions.clone(), slot);
        self.groups[slot] = Some(group);
        slot
    }

    /// Drops the group in `slot` if it holds nothing, so groups of dimension sets no longer
    /// pending cost later claims nothing.
    fn drop_if_empty(&mut self, slot: usize) {
        if !self.groups[slot].as_ref().is_some_and(|group| group.entries.is_empty()) {
            return;
        }
        let Some(group) = self.groups[slot].take() else { return };
        self.group_of.remove(&group.dimensions);
        let unfile = |slots: &mut Vec<usize>| {
            if let Some(at) = slots.iter().position(|&s| s == slot) {
                slots.swap_remove(at);
            }
        };
        match &group.anchor {
            None => unfile(&mut self.unconstrained),
            Some((key, value)) => {
                if let Some(by_value) = self.anchored.get_mut(key.as_str()) {
                    for one in alternatives(value) {
                        if let Some(slots) = by_value.get_mut(one) {
                            unfile(slots);
                            if slots.is_empty() {
                                by_value.remove(one);
                            }
                        }
                    }
                    if by_value.is_empty() {
                        self.anchored.remove(key.as_str());
                    }
                }
            }
        }
        self.free.push(slot);
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
    fn each_queue_counts_its_runs_and_a_commit_names_the_queues_it_changed() {
        let mut index = PendingIndex::default();
        let any = Dimensions::default();
        let linux = dims(&[("os", "linux")]);
        let other = |seq| PendingKey { task_queue_id: "p/other".into(), dimensions: any.clone(), rank: 1, seq };
        index.insert(key(&any, 1, 1), PendingRun { task_id: id(1), run_id: 0 });
        index.insert(key(&linux, 1, 2), PendingRun { task_id: id(2), run_id: 0 });
        index.insert(other(3), PendingRun { task_id: id(3), run_id: 0 });
        let changed: Vec<(&str, usize)> = index.changed_queues().collect();
        assert_eq!(changed, vec![("p/w", 2), ("p/other", 1)]);
        index.commit();
        assert_eq!(index.changed_queues().count(), 0, "nothing changed since the commit");

        let mark = index.mark();
        assert_eq!(index.pop_matching("p/w", &linux, 5).len(), 2);
        index.remove(&other(3));
        let changed: Vec<(&str, usize)> = index.changed_queues().collect();
        assert_eq!(changed, vec![("p/w", 0), ("p/other", 0)]);
        index.rollback_to(mark);
        let mut lengths: Vec<(&str, usize)> = index.queue_lengths().collect();
        lengths.sort_unstable();
        assert_eq!(lengths, vec![("p/other", 1), ("p/w", 2)], "a rollback restores the counts");
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

    #[test]
    fn groups_are_found_through_any_alternative_and_dropped_when_empty() {
        let mut index = PendingIndex::default();
        let raw =
            BTreeMap::from([("os".to_owned(), vec!["mac|win".to_owned()]), ("pool".to_owned(), vec!["ci".to_owned()])]);
        let either = Dimensions::parse_required("dimensions", raw).unwrap();
        for seq in 1..=3 {
            index.insert(key(&either, 1, seq), PendingRun { task_id: id(seq as u8), run_id: 0 });
        }
        index.insert(key(&dims(&[("pool", "ci")]), 1, 4), PendingRun { task_id: id(4), run_id: 0 });
        index.commit();
        let mark = index.mark();
        let linux = dims(&[("os", "linux"), ("pool", "ci")]);
        assert_eq!(index.pop_matching("p/w", &linux, 5).len(), 1, "only the pool-only task");
        assert_eq!(index.pop_matching("p/w", &dims(&[("os", "win")]), 5).len(), 0, "pool is required too");
        let both = dims(&[("os", "mac"), ("os", "win"), ("pool", "ci")]);
        assert_eq!(index.pop_matching("p/w", &both, 1)[0].1.task_id, id(1), "found once, in order");
        index.remove(&key(&either, 1, 2));
        assert_eq!(index.pop_matching("p/w", &dims(&[("os", "mac"), ("pool", "ci")]), 5)[0].1.task_id, id(3));
        let queue = &index.queues["p/w"];
        assert!(queue.groups.iter().all(Option::is_none), "every group emptied is dropped");
        assert!(queue.anchored.is_empty() && queue.unconstrained.is_empty() && queue.group_of.is_empty());
        index.rollback_to(mark);
        assert_eq!(index.len(), 4, "a rollback brings dropped groups back");
        assert_eq!(index.pop_matching("p/w", &both, 5).len(), 4);
    }
}
