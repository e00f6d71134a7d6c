//! claimWork's long poll: get in line on each task queue the worker serves, look, wait for a
//! wake-up or the deadline, look again. A worker serving several queues claims from them in
//! the order it gave, up to one count shared by all.

use std::time::Duration;

use futures_util::future::select_all;
use shoal_engine::worker::{Sighting, WorkerKey};
use shoal_store::operation::ClaimWork;
use shoal_store::{Claim, ClaimRequest, StoreError};

use crate::fleet::Standing;
use crate::wakers::Registration;
use crate::{Service, counts, now};

/// What a claimWork got: its claims, and the worker's standing.
#[derive(Debug)]
pub struct ClaimOutcome {
    /// The runs claimed.
    pub claims: Vec<Claim>,
    /// Whether the worker may claim (the claims are empty when it may not).
    pub standing: Standing,
}

/// What one look found: the claims from each queue, in the order looked at.
struct Looked {
    claims: Vec<Vec<Claim>>,
    standing: Standing,
}

impl Service {
    /// claimWork: claims what is there, or waits until matching work appears or `wait` passes;
    /// a quarantined worker or one in maintenance gets nothing, and one asked to terminate is
    /// told at once. `more_queues` are further task queues the same worker serves (after
    /// `request`'s, in order of preference); the request's count is shared by all.
    ///
    /// # Errors
    /// As the store.
    pub async fn claim_work(
        &self,
        request: ClaimRequest,
        more_queues: Vec<String>,
        sighting: Sighting,
        wait: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        let give_up = tokio::time::Instant::now() + wait;
        let more: Vec<ClaimRequest> =
            more_queues.into_iter().map(|task_queue_id| ClaimRequest { task_queue_id, ..request.clone() }).collect();
        let requests: Vec<ClaimRequest> = std::iter::once(request).chain(more).collect();
        let wakers = &self.inner.wakers;
        // In line before looking, so work that appears between the look and the wait still
        // wakes this call.
        let registrations: Vec<Registration<'_>> =
            requests.iter().map(|request| wakers.register(&request.task_queue_id, &request.dimensions)).collect();
        loop {
            let woken: Vec<bool> = registrations.iter().map(Registration::looking).collect();
            let looked = self.look(&requests, &sighting).await;
            let Looked { claims, standing } = match looked {
                Ok(looked) => looked,
                Err(err) => {
                    // The wake-ups this look used are passed on.
                    registrations.iter().zip(&woken).filter(|(_, woken)| **woken).for_each(|(r, _)| r.pass_on());
                    return Err(err);
                }
            };
            if standing.terminate || claims.iter().any(|claims| !claims.is_empty()) {
                // A wake-up for a queue this look took nothing from is another call's to use.
                for ((registration, woken), claimed) in registrations.iter().zip(&woken).zip(&claims) {
                    if *woken && claimed.is_empty() {
                        registration.pass_on();
                    }
                }
                return Ok(ClaimOutcome { claims: claims.into_iter().flatten().collect(), standing });
            }
            let mut until = give_up;
            let held = standing.held(now());
            for registration in &registrations {
                registration.set_quarantined(held);
            }
            if let Some(end) = standing.quarantine_until {
                // Waits out the quarantine (or the poll), or a change to the queue's workers.
                let left = u64::try_from(end.millis().saturating_sub(now().millis())).unwrap_or(0);
                until = until.min(tokio::time::Instant::now() + Duration::from_millis(left));
            }
            // Where the store can, a one-queue wait is also parked with it: a run made pending
            // is then claimed for this call in the batch that made it pending.
            let mut parked = match requests.as_slice() {
                [request] if !held => self.inner.store.park_claim(request, now),
                _ => None,
            };
            let woken_any = select_all(registrations.iter().map(|registration| Box::pin(registration.woken())));
            let (answer, timed_out) = tokio::select! {
                _ = woken_any => (None, false),
                answer = async {
                    match parked.as_mut() {
                        Some(parked) => parked.answer().await,
                        None => std::future::pending().await,
                    }
                } => (Some(answer), false),
                () = tokio::time::sleep_until(until) => (None, true),
            };
            // Unless answered, leave the line; if the writer took this call first, its answer
            // is coming and holds what was claimed for it.
            let answer = match (answer, parked.as_mut()) {
                (None, Some(parked)) => {
                    if parked.leave() {
                        None
                    } else {
                        Some(parked.answer().await)
                    }
                }
                (answer, _) => answer,
            };
            if let Some(answer) = answer {
                let claims = self.committed(answer?);
                counts::claimed(&claims);
                if !claims.is_empty() {
                    return Ok(ClaimOutcome { claims, standing });
                }
            }
            if timed_out && until == give_up {
                return Ok(ClaimOutcome { claims: Vec::new(), standing });
            }
        }
    }

    /// One look of a claimWork: the worker seen in each queue, then (unless it may not claim)
    /// what it can claim from each in turn, up to its count.
    async fn look(&self, requests: &[ClaimRequest], sighting: &Sighting) -> Result<Looked, StoreError> {
        let mut standing = Standing::default();
        for request in requests {
            let key: WorkerKey = request.worker_key();
            standing = standing.with(self.worker_seen(&key, sighting.clone()).await?);
        }
        let mut claims = Vec::with_capacity(requests.len());
        if standing.barred(now()) {
            claims.resize_with(requests.len(), Vec::new);
            return Ok(Looked { claims, standing });
        }
        let mut left = requests.first().map_or(0, |request| request.count);
        for request in requests {
            if left == 0 {
                claims.push(Vec::new());
                continue;
            }
            let request = ClaimRequest { count: left, ..request.clone() };
            let claimed = self.committed(self.inner.store.run(ClaimWork { request }, now()).await?);
            counts::claimed(&claimed);
            left -= claimed.len().min(left);
            claims.push(claimed);
        }
        Ok(Looked { claims, standing })
    }
}
