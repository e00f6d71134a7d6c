//! claimWork calls parked with the writer while they wait.
//!
//! A batch that makes runs pending claims them, before it commits, for the longest-parked
//! claims that can take them: the waiting worker gets its run with that batch's commit and
//! sync, not with a commit and sync of its own after being woken (a chain link is then one
//! of each). A parked call and the writer settle who moved first by who takes the call's
//! reply sender: once the writer took it, the answer is coming and the call waits for it;
//! once the call took it back (its wait ended, it was woken for another reason, its client
//! went away), the writer passes the call over.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use shoal_engine::Timestamp;
use shoal_engine::dimensions::Dimensions;
use tokio::sync::oneshot;

use crate::{Claim, ClaimRequest, Committed, StoreError};

/// What a parked call is answered with: the claims a batch made for it, once durable.
pub type ClaimAnswer = Result<Committed<Vec<Claim>>, StoreError>;

/// A parked call, as the writer sees it.
pub(crate) struct ParkedClaim {
    pub(crate) request: ClaimRequest,
    /// The wall clock of the caller, read when the writer claims.
    pub(crate) clock: fn() -> Timestamp,
    /// Where to answer the call; here while it is parked, taken by whoever moves first.
    reply: Mutex<Option<oneshot::Sender<ClaimAnswer>>>,
}

impl ParkedClaim {
    /// Takes the call's reply sender: the writer's to answer it, or the call's to leave.
    fn take(&self) -> Option<oneshot::Sender<ClaimAnswer>> {
        self.reply.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn parked(&self) -> bool {
        self.reply.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }
}

/// A parked claimWork, as its caller holds it; leaves the line when dropped.
pub struct Parked {
    claim: Arc<ParkedClaim>,
    answer: oneshot::Receiver<ClaimAnswer>,
    /// This call left the line.
    left: bool,
}

impl Parked {
    /// The claims the writer made for this call (empty when what it was taken for went to
    /// another claim in the same batch).
    pub async fn answer(&mut self) -> ClaimAnswer {
        (&mut self.answer).await.unwrap_or_else(|_| Err(StoreError::Unavailable("the store is shut down".into())))
    }

    /// Leaves the line; false when the writer took this call first, so that its answer is
    /// coming and must be awaited.
    pub fn leave(&mut self) -> bool {
        self.left = self.left || self.claim.take().is_some();
        self.left
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // A call dropped while taken (its client went away) loses its answer: the claimed
        // run waits for its claim to expire, as when a client drops any claim in flight.
        self.leave();
    }
}

/// Parked calls the writer looks at, at most, for one run.
const MOST_EXAMINED: usize = 256;
/// Lines kept before the first sweep of every line.
const MIN_LINES_SWEEP: usize = 64;

/// The parked calls of every queue, longest-parked first.
#[derive(Default)]
pub(crate) struct Parking {
    queues: Mutex<Lines>,
}

/// Every queue's line. A client may park on any number of queue names and leave: once the
/// lines have doubled since the last sweep, lines where nobody is parked any more go.
#[derive(Default)]
struct Lines {
    by_queue: HashMap<String, Line>,
    sweep_above: usize,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Parking").field("queues", &queues.by_queue.len()).finish()
    }
}

#[derive(Default)]
struct Line {
    calls: VecDeque<Arc<ParkedClaim>>,
    /// Length past which the next park sweeps out calls that left (amortized O(1)).
    sweep_above: usize,
}

impl Parking {
    /// Parks a claimWork for `request` until the writer takes it or it leaves.
    pub(crate) fn park(&self, request: ClaimRequest, clock: fn() -> Timestamp) -> Parked {
        let (reply, answer) = oneshot::channel();
        let claim = Arc::new(ParkedClaim { request, clock, reply: Mutex::new(Some(reply)) });
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if queues.by_queue.len() >= queues.sweep_above {
            queues.by_queue.retain(|_, line| {
                line.calls.retain(|call| call.parked());
                !line.calls.is_empty()
            });
            queues.sweep_above = (2 * queues.by_queue.len()).max(MIN_LINES_SWEEP);
        }
        let line = queues.by_queue.entry(claim.request.task_queue_id.clone()).or_default();
        if line.calls.len() >= line.sweep_above {
            line.calls.retain(|call| call.parked());
            line.sweep_above = (2 * line.calls.len()).max(16);
        }
        line.calls.push_back(Arc::clone(&claim));
        Parked { claim, answer, left: false }
    }

    /// Takes the longest-parked call on `task_queue_id` whose worker can take a run needing
    /// `needs` (none: any worker), dropping calls that left on the way.
    pub(crate) fn take(
        &self,
        task_queue_id: &str,
        needs: Option<&Dimensions>,
    ) -> Option<(Arc<ParkedClaim>, oneshot::Sender<ClaimAnswer>)> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let line = queues.by_queue.get_mut(task_queue_id)?;
        let mut taken = None;
        let mut at = 0;
        // Bounded: the writer does this, and a fleet of bots with dimensions of their own may
        // all park on one queue. A run none of the first calls can take still wakes a
        // waiting claim at the commit. (Each call that left is removed once, so those are not
        // counted.)
        let mut examined = 0;
        while examined < MOST_EXAMINED {
            let Some(call) = line.calls.get(at) else { break };
            if !call.parked() {
                line.calls.remove(at);
                continue;
            }
            examined += 1;
            if needs.is_none_or(|needs| needs.matched_by(&call.request.dimensions))
                && let Some(reply) = call.take()
            {
                taken = line.calls.remove(at).map(|call| (call, reply));
                break;
            }
            at += 1;
        }
        if line.calls.is_empty() {
            queues.by_queue.remove(task_queue_id);
        }
        taken
    }

    /// Whether any call is parked (or left and not yet swept) on `task_queue_id`.
    #[cfg(test)]
    pub(crate) fn any(&self, task_queue_id: &str) -> bool {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner).by_queue.contains_key(task_queue_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(queue: &str, os: &str) -> ClaimRequest {
        ClaimRequest {
            task_queue_id: queue.into(),
            worker_group: "g".into(),
            worker_id: os.into(),
            dimensions: serde_json::from_value(serde_json::json!({"os": [os]})).unwrap(),
            count: 1,
        }
    }

    fn clock() -> Timestamp {
        Timestamp(0)
    }

    #[test]
    fn the_longest_parked_call_that_can_take_the_run_is_taken() {
        let parking = Parking::default();
        let (mac, mut first, second) = (
            parking.park(request("q", "mac"), clock),
            parking.park(request("q", "linux"), clock),
            parking.park(request("q", "linux"), clock),
        );
        let linux: Dimensions = serde_json::from_value(serde_json::json!({"os": ["linux"]})).unwrap();
        let (taken, _reply) = parking.take("q", Some(&linux)).unwrap();
        assert!(Arc::ptr_eq(&taken, &first.claim));
        assert!(!first.leave(), "taken: its answer is coming");
        let (taken, _reply) = parking.take("q", None).unwrap();
        assert!(Arc::ptr_eq(&taken, &mac.claim), "a run that needs nothing goes to the longest-parked");
        assert!(parking.take("other", None).is_none());
        drop(second);
        assert!(parking.take("q", None).is_none(), "a dropped call left the line");
        assert!(!parking.any("q"), "an empty line is forgotten");
    }

    #[test]
    fn the_writer_looks_at_a_bounded_number_of_calls_for_one_run() {
        let parking = Parking::default();
        let macs: Vec<Parked> = (0..MOST_EXAMINED).map(|_| parking.park(request("q", "mac"), clock)).collect();
        let linux = parking.park(request("q", "linux"), clock);
        let needs: Dimensions = serde_json::from_value(serde_json::json!({"os": ["linux"]})).unwrap();
        assert!(parking.take("q", Some(&needs)).is_none(), "past the bound: left to the wake-up at commit");
        drop(macs.into_iter().next());
        let (taken, _reply) = parking.take("q", Some(&needs)).unwrap();
        assert!(Arc::ptr_eq(&taken, &linux.claim), "within the bound once one call before it left");
    }

    #[test]
    fn a_call_that_left_is_passed_over_and_cannot_be_taken_after() {
        let parking = Parking::default();
        let mut gone = parking.park(request("q", "linux"), clock);
        let waiting = parking.park(request("q", "linux"), clock);
        assert!(gone.leave());
        assert!(gone.leave(), "leaving twice is leaving");
        let (taken, _reply) = parking.take("q", None).unwrap();
        assert!(Arc::ptr_eq(&taken, &waiting.claim));
        assert!(gone.claim.take().is_none());
    }

    #[tokio::test]
    async fn a_taken_call_gets_the_answer_sent_to_it() {
        let parking = Parking::default();
        let mut parked = parking.park(request("q", "linux"), clock);
        let (_, reply) = parking.take("q", None).unwrap();
        reply.send(Ok(Committed { value: Vec::new(), events: Vec::new() })).unwrap();
        assert!(parked.answer().await.unwrap().value.is_empty());
    }

    #[test]
    fn calls_that_left_are_swept_as_others_park() {
        let parking = Parking::default();
        for _ in 0..100 {
            drop(parking.park(request("q", "linux"), clock));
        }
        let len = parking.queues.lock().unwrap().by_queue["q"].calls.len();
        assert!(len < 40, "{len} calls kept of 100 that left");
    }

    #[test]
    fn lines_nobody_is_parked_in_are_swept_as_others_park() {
        let parking = Parking::default();
        for n in 0..1000 {
            drop(parking.park(request(&format!("made-up-{n}"), "linux"), clock));
        }
        let waiting = parking.park(request("q", "linux"), clock);
        let lines = parking.queues.lock().unwrap().by_queue.len();
        assert!(lines < 2 * MIN_LINES_SWEEP.max(2), "{lines} lines kept of 1001, all but one left");
        assert!(parking.any("q"));
        assert!(parking.take("q", None).is_some(), "a parked call survives the sweep");
        drop(waiting);
    }
}
