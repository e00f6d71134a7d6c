//! What a claimWork can see without the writer: per task queue, how many runs are pending
//! and when the queue was last recorded active, as the last commit left them.
//!
//! A claim that would find nothing and record nothing (the usual look of an idle worker)
//! answers from here instead of queueing behind writes. The writer publishes at each commit;
//! a run made pending after a claim looked here wakes that claim, which is in line before it
//! looks (`shoal_service`'s wakers), so skipping the writer never hides work.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use shoal_engine::Timestamp;

use crate::ops::queue_recorded_recently;

/// Per-queue pending counts and activity records, as of the last commit.
#[derive(Debug, Default)]
pub(crate) struct Glance {
    queues: Mutex<HashMap<String, QueueGlance>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct QueueGlance {
    /// Runs pending in the queue.
    pending: usize,
    /// When the queue was last recorded active (milliseconds), if since the server started.
    recorded_at: Option<i64>,
}

impl Glance {
    /// Publishes a commit's changes: pending counts of the queues whose runs changed, and the
    /// queues it recorded active.
    pub(crate) fn publish<'a>(
        &self,
        pending: impl IntoIterator<Item = (&'a str, usize)>,
        recorded: impl IntoIterator<Item = (&'a str, i64)>,
    ) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        for (queue, count) in pending {
            match queues.get_mut(queue) {
                Some(glance) => glance.pending = count,
                None => {
                    queues.insert(queue.to_owned(), QueueGlance { pending: count, recorded_at: None });
                }
            }
        }
        for (queue, at) in recorded {
            match queues.get_mut(queue) {
                Some(glance) => glance.recorded_at = Some(at),
                None => {
                    queues.insert(queue.to_owned(), QueueGlance { pending: 0, recorded_at: Some(at) });
                }
            }
        }
    }

    /// Whether a claim on `task_queue_id` at `now` would claim nothing and record nothing:
    /// no run is pending there and the queue was recorded active recently.
    pub(crate) fn nothing_to_claim(&self, task_queue_id: &str, now: Timestamp) -> bool {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.get(task_queue_id).is_some_and(|glance| {
            glance.pending == 0 && glance.recorded_at.is_some_and(|at| queue_recorded_recently(at, now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::QUEUE_TOUCH_INTERVAL_MS;

    #[test]
    fn a_claim_skips_the_writer_only_when_nothing_is_pending_and_the_queue_was_recorded_recently() {
        let glance = Glance::default();
        let at = Timestamp(1_000_000);
        assert!(!glance.nothing_to_claim("p/q", at), "an unknown queue must be recorded");
        glance.publish([("p/q", 2)], []);
        assert!(!glance.nothing_to_claim("p/q", at), "pending, and never recorded");
        glance.publish([], [("p/q", at.millis())]);
        assert!(!glance.nothing_to_claim("p/q", at), "two runs pending");
        glance.publish([("p/q", 0)], []);
        assert!(glance.nothing_to_claim("p/q", at));
        assert!(glance.nothing_to_claim("p/q", Timestamp(at.millis() + QUEUE_TOUCH_INTERVAL_MS - 1)));
        assert!(
            !glance.nothing_to_claim("p/q", Timestamp(at.millis() + QUEUE_TOUCH_INTERVAL_MS)),
            "the record is due again"
        );
        assert!(!glance.nothing_to_claim("p/other", at), "per queue");
    }
}
