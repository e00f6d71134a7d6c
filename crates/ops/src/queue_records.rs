//! When each queue was last recorded active, as one server (or SQLite's writer) remembers it.

use std::collections::HashMap;

use shoal_engine::Timestamp;

use super::queue_recorded_recently;

/// Queues remembered before the quiet ones are first forgotten.
const MIN_SWEEP: usize = 1024;

/// Saves a read or a write per operation on a queue recorded moments ago. A client may make
/// up any number of queue names, so the quiet ones are forgotten once the map has doubled
/// since it last was swept: O(1) per record, and memory bounded by the recently active queues.
#[derive(Debug)]
pub struct QueueRecords {
    at: HashMap<String, i64>,
    /// Size past which the next record sweeps.
    sweep_above: usize,
}

impl Default for QueueRecords {
    fn default() -> Self {
        QueueRecords { at: HashMap::new(), sweep_above: MIN_SWEEP }
    }
}

impl QueueRecords {
    /// Whether `queue` was recorded recently enough at `now` to need no new record.
    pub fn recent(&self, queue: &str, now: Timestamp) -> bool {
        self.at.get(queue).is_some_and(|&at| queue_recorded_recently(at, now))
    }

    /// Remembers `queue` as recorded at `at` (milliseconds); returns whether that made the map
    /// sweep, forgetting the queues not recorded recently at `at`.
    pub fn insert(&mut self, queue: &str, at: i64) -> bool {
        self.at.insert(queue.to_owned(), at);
        if self.at.len() <= self.sweep_above {
            return false;
        }
        self.at.retain(|_, recorded| queue_recorded_recently(*recorded, Timestamp(at)));
        self.sweep_above = (2 * self.at.len()).max(MIN_SWEEP);
        true
    }

    /// Forgets `queue` if it is still remembered as recorded at `at` (a record given back).
    pub fn forget(&mut self, queue: &str, at: i64) {
        if self.at.get(queue) == Some(&at) {
            self.at.remove(queue);
        }
    }

    /// Forgets every queue.
    pub fn clear(&mut self) {
        self.at.clear();
    }

    /// How many queues it remembers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether it remembers no queue.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QUEUE_TOUCH_INTERVAL_MS;

    #[test]
    fn a_queue_is_recent_for_one_interval_after_its_record() {
        let mut records = QueueRecords::default();
        assert!(!records.recent("q", Timestamp(1_000)));
        records.insert("q", 1_000);
        assert!(records.recent("q", Timestamp(1_000 + QUEUE_TOUCH_INTERVAL_MS - 1)));
        assert!(!records.recent("q", Timestamp(1_000 + QUEUE_TOUCH_INTERVAL_MS)));
    }

    #[test]
    fn quiet_queues_are_forgotten_once_the_map_has_doubled() {
        let mut records = QueueRecords::default();
        let late = 10 * QUEUE_TOUCH_INTERVAL_MS;
        for n in 0..MIN_SWEEP {
            assert!(!records.insert(&format!("old-{n}"), 0));
        }
        // The next record passes the threshold: every old queue is quiet by its time.
        assert!(records.insert("new-0", late));
        assert_eq!(records.len(), 1);
        assert!(records.recent("new-0", Timestamp(late)));
        // The threshold stays at its minimum while few queues are active.
        for n in 1..MIN_SWEEP {
            assert!(!records.insert(&format!("new-{n}"), late));
        }
        assert!(records.insert("new-last", late), "the map sweeps again past the threshold");
        assert_eq!(records.len(), MIN_SWEEP + 1, "no active queue is forgotten");
        // Active queues double the threshold, so sweeps stay O(1) per record.
        for n in 0..MIN_SWEEP {
            assert!(!records.insert(&format!("more-{n}"), late));
        }
    }

    #[test]
    fn a_record_given_back_is_forgotten_unless_a_newer_one_replaced_it() {
        let mut records = QueueRecords::default();
        records.insert("q", 1_000);
        records.forget("q", 999);
        assert!(records.recent("q", Timestamp(1_000)));
        records.forget("q", 1_000);
        assert!(!records.recent("q", Timestamp(1_000)));
    }
}
