//! claimWork calls parked with the writer while they wait.
//!
//! A batch that makes runs pending claims them, before it commits, for the longest-parked
//! claims that can take them: the waiting worker gets its run with that batch's commit and
//! sync, not with a commit and sync of its own after being woken (a chain link is then one
//! of each). A parked call and the writer settle who moved first by who takes the call's
//! reply sender: once the writer took it, the answer is coming and the call waits for it;
//! once the call took it back (its wait ended, it was woken for another reason, its client
//! went away), the writer passes the call over. Each queue's calls are an engine `Line`,
//! filed by dimension value, so a run needing a rare value finds its worker's call at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use shoal_engine::Timestamp;
use shoal_engine::dimensions::Dimensions;
use shoal_engine::line::Line;
use tokio::sync::oneshot;

use crate::{Claim, ClaimRequest, Committed, StoreError};

/// What a parked call is answered with: the claims a batch made for it, once durable.
pub type ClaimAnswer = Result<Committed<Vec<Claim>>, StoreError>;

/// A parked call, as the writer sees it.
pub(crate) struct WaitingClaim {
    pub(crate) request: ClaimRequest,
    /// The wall clock of the caller, read when the writer claims.
    pub(crate) clock: fn() -> Timestamp,
    /// Its place in its queue's line.
    place: u64,
    /// Where to answer the call; here while it is parked, taken by whoever moves first.
    reply: Mutex<Option<oneshot::Sender<ClaimAnswer>>>,
}

impl WaitingClaim {
    /// Takes the call's reply sender: the writer's to answer it, or the call's to leave.
    fn take(&self) -> Option<oneshot::Sender<ClaimAnswer>> {
        self.reply.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// A parked claimWork, as its caller holds it; leaves the line when dropped.
pub struct Parked {
    claim: Arc<WaitingClaim>,
    answer: oneshot::Receiver<ClaimAnswer>,
    waiting: Arc<WaitingClaims>,
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
        if !self.left && self.claim.take().is_some() {
            self.left = true;
            self.waiting.remove(&self.claim);
        }
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

/// Parked calls the writer tries, at most, for one run (of each alternative of the value
/// it looks by): a run none of them can take still wakes a waiting claim at the commit.
const MOST_TRIED: usize = 256;

/// The parked calls of every queue, longest-parked first, filed by dimension value.
#[derive(Default)]
pub(crate) struct WaitingClaims {
    by_queue: Mutex<HashMap<String, Line<Arc<WaitingClaim>>>>,
    /// The next place in line.
    next: AtomicU64,
}

impl std::fmt::Debug for WaitingClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingClaims").field("queues", &self.lines().len()).finish()
    }
}

impl WaitingClaims {
    fn lines(&self) -> MutexGuard<'_, HashMap<String, Line<Arc<WaitingClaim>>>> {
        self.by_queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parks a claimWork for `request` until the writer takes it or it leaves.
    pub(crate) fn park(self: &Arc<Self>, request: ClaimRequest, clock: fn() -> Timestamp) -> Parked {
        let (reply, answer) = oneshot::channel();
        let place = self.next.fetch_add(1, Ordering::Relaxed);
        let claim = Arc::new(WaitingClaim { request, clock, place, reply: Mutex::new(Some(reply)) });
        let mut lines = self.lines();
        let queue = &claim.request.task_queue_id;
        if !lines.contains_key(queue) {
            lines.insert(queue.clone(), Line::new(|call| &call.request.dimensions));
        }
        lines.get_mut(queue).expect("inserted above").insert(place, Arc::clone(&claim));
        drop(lines);
        Parked { claim, answer, waiting: Arc::clone(self), left: false }
    }

    /// Takes `claim` out of its line, and the line away once nobody is parked in it.
    fn remove(&self, claim: &WaitingClaim) {
        let mut lines = self.lines();
        let queue = claim.request.task_queue_id.as_str();
        if let Some(line) = lines.get_mut(queue) {
            line.remove(claim.place);
            if line.is_empty() {
                lines.remove(queue);
            }
        }
    }

    /// Takes the longest-parked call on `task_queue_id` whose worker can take a run needing
    /// `needs` (none: any worker).
    pub(crate) fn take(
        &self,
        task_queue_id: &str,
        needs: Option<&Dimensions>,
    ) -> Option<(Arc<WaitingClaim>, oneshot::Sender<ClaimAnswer>)> {
        let mut lines = self.lines();
        let line = lines.get_mut(task_queue_id)?;
        let mut taken = None;
        while let Some(place) = line.first_able(needs, MOST_TRIED) {
            let call = line.remove(place).expect("found in line");
            // A call that took its sender back is about to leave: passed over.
            if let Some(reply) = call.take() {
                taken = Some((call, reply));
                break;
            }
        }
        if line.is_empty() {
            lines.remove(task_queue_id);
        }
        taken
    }

    /// Whether any call is parked on `task_queue_id`.
    #[cfg(test)]
    pub(crate) fn any(&self, task_queue_id: &str) -> bool {
        self.lines().contains_key(task_queue_id)
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
            version: None,
            count: 1,
        }
    }

    fn os(os: &str) -> Dimensions {
        serde_json::from_value(serde_json::json!({"os": [os]})).unwrap()
    }

    fn clock() -> Timestamp {
        Timestamp(0)
    }

    #[test]
    fn the_longest_parked_call_that_can_take_the_run_is_taken() {
        let waiting = Arc::new(WaitingClaims::default());
        let (mac, mut first, second) = (
            waiting.park(request("q", "mac"), clock),
            waiting.park(request("q", "linux"), clock),
            waiting.park(request("q", "linux"), clock),
        );
        let (taken, _reply) = waiting.take("q", Some(&os("linux"))).unwrap();
        assert!(Arc::ptr_eq(&taken, &first.claim));
        assert!(!first.leave(), "taken: its answer is coming");
        let (taken, _reply) = waiting.take("q", None).unwrap();
        assert!(Arc::ptr_eq(&taken, &mac.claim), "a run that needs nothing goes to the longest-parked");
        assert!(waiting.take("other", None).is_none());
        drop(second);
        assert!(waiting.take("q", None).is_none(), "a dropped call left the line");
        assert!(!waiting.any("q"), "an empty line is forgotten");
    }

    #[test]
    fn a_run_finds_the_one_call_that_can_take_it_behind_many_that_cannot() {
        let waiting = Arc::new(WaitingClaims::default());
        let macs: Vec<Parked> = (0..4 * MOST_TRIED).map(|_| waiting.park(request("q", "mac"), clock)).collect();
        let linux = waiting.park(request("q", "linux"), clock);
        let (taken, _reply) = waiting.take("q", Some(&os("linux"))).unwrap();
        assert!(Arc::ptr_eq(&taken, &linux.claim));
        assert!(waiting.take("q", Some(&os("linux"))).is_none(), "taken calls leave the line");
        drop(macs);
    }

    #[test]
    fn the_writer_tries_a_bounded_number_of_calls_for_one_run() {
        let waiting = Arc::new(WaitingClaims::default());
        // Each has the run's rarer value but not the other: none can take it.
        let linux_only = |n: usize| {
            let mut request = request("q", "linux");
            request.dimensions =
                serde_json::from_value(serde_json::json!({"os": ["linux"], "n": [n.to_string()]})).unwrap();
            request
        };
        let others: Vec<Parked> = (0..MOST_TRIED).map(|n| waiting.park(linux_only(n), clock)).collect();
        let mut able = request("q", "linux");
        able.dimensions = serde_json::from_value(serde_json::json!({"os": ["linux"], "gpu": ["yes"]})).unwrap();
        let able = waiting.park(able, clock);
        let mut commons: Vec<Parked> = (0..2 * MOST_TRIED)
            .map(|n| {
                let mut request = request("q", "mac");
                request.dimensions =
                    serde_json::from_value(serde_json::json!({"gpu": ["yes"], "n": [n.to_string()]})).unwrap();
                waiting.park(request, clock)
            })
            .collect();
        let needs: Dimensions = serde_json::from_value(serde_json::json!({"os": ["linux"], "gpu": ["yes"]})).unwrap();
        assert!(waiting.take("q", Some(&needs)).is_none(), "past the bound: left to the wake-up at commit");
        drop(others.into_iter().next());
        let (taken, _reply) = waiting.take("q", Some(&needs)).unwrap();
        assert!(Arc::ptr_eq(&taken, &able.claim), "within the bound once one call before it left");
        commons.clear();
    }

    #[test]
    fn a_call_that_left_is_passed_over_and_cannot_be_taken_after() {
        let claims = Arc::new(WaitingClaims::default());
        let mut gone = claims.park(request("q", "linux"), clock);
        let parked = claims.park(request("q", "linux"), clock);
        assert!(gone.leave());
        assert!(gone.leave(), "leaving twice is leaving");
        let (taken, _reply) = claims.take("q", None).unwrap();
        assert!(Arc::ptr_eq(&taken, &parked.claim));
        assert!(gone.claim.take().is_none());
    }

    #[test]
    fn a_call_that_took_its_sender_back_is_passed_over_by_the_writer() {
        let claims = Arc::new(WaitingClaims::default());
        let leaving = claims.park(request("q", "linux"), clock);
        let parked = claims.park(request("q", "linux"), clock);
        // The call's half of leaving, before it takes itself out of the line.
        assert!(leaving.claim.take().is_some());
        let (taken, _reply) = claims.take("q", None).unwrap();
        assert!(Arc::ptr_eq(&taken, &parked.claim));
        drop(leaving);
        assert!(!claims.any("q"));
    }

    #[tokio::test]
    async fn a_taken_call_gets_the_answer_sent_to_it() {
        let claims = Arc::new(WaitingClaims::default());
        let mut parked = claims.park(request("q", "linux"), clock);
        let (_, reply) = claims.take("q", None).unwrap();
        reply.send(Ok(Committed { value: Vec::new(), events: Vec::new() })).unwrap();
        assert!(parked.answer().await.unwrap().value.is_empty());
    }

    #[test]
    fn calls_and_lines_go_as_their_callers_leave() {
        let claims = Arc::new(WaitingClaims::default());
        for n in 0..1000 {
            drop(claims.park(request(&format!("made-up-{n}"), "linux"), clock));
        }
        let parked = claims.park(request("q", "linux"), clock);
        assert_eq!(claims.lines().len(), 1, "only the line somebody is parked in is kept");
        drop(parked);
        assert!(claims.lines().is_empty());
    }
}
