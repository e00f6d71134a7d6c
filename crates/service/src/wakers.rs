//! Waiting claimWork calls per task queue, and who is woken when a run becomes pending: the
//! longest-waiting one whose dimensions match the run, not every waiter (one would claim and
//! the others would look for nothing).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use shoal_engine::dimensions::Dimensions;
use tokio::sync::Notify;

/// Queue -> its waiting claimWork calls by place in line (longest-waiting first), so that
/// joining, leaving and going to the back are logarithmic however many wait.
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    by_queue: Mutex<HashMap<String, BTreeMap<u64, Arc<Waiter>>>>,
    /// The next place in line.
    next: AtomicU64,
}

/// One waiting claimWork.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// The worker's dimensions.
    dimensions: Dimensions,
    /// Its place in its queue's line (changed, under the lock, when it goes to the back).
    place: AtomicU64,
    notify: Notify,
    /// Woken for a run and not yet looked.
    woken: AtomicBool,
    /// Quarantined: claims nothing, so runs wake the others; woken only with all of them.
    quarantined: AtomicBool,
    /// What the run it was woken for needs, to pass the wake-up on to a worker that can take it.
    woken_for: Mutex<Option<Dimensions>>,
}

impl Waiter {
    /// Passes an unused wake-up on to the next worker in line that can take its run.
    fn pass_on(&self, wakers: &Wakers, task_queue_id: &str) {
        let required = self.woken_for.lock().unwrap_or_else(PoisonError::into_inner).take();
        wakers.wake(task_queue_id, required.as_ref());
    }
}

/// A waiter's place in its queue's list, held while a claimWork looks and waits; dropped
/// woken without having looked (its client went away), it passes its wake-up on.
pub(crate) struct Registration<'a> {
    wakers: &'a Wakers,
    task_queue_id: &'a str,
    waiter: Arc<Waiter>,
}

impl Registration<'_> {
    /// Resolves once woken.
    pub(crate) async fn woken(&self) {
        self.waiter.notify.notified().await;
    }

    /// The waiter is about to look for work: a wake-up it had is used.
    pub(crate) fn looking(&self) {
        self.waiter.woken.store(false, Ordering::Relaxed);
    }

    /// Passes on a wake-up the last look used without answering (it failed).
    pub(crate) fn pass_on(&self) {
        self.waiter.pass_on(self.wakers, self.task_queue_id);
    }

    /// The worker is quarantined (or no longer): while it is, runs wake the others, and a
    /// wake-up it got while looking goes to the next in line.
    pub(crate) fn set_quarantined(&self, quarantined: bool) {
        self.waiter.quarantined.store(quarantined, Ordering::Relaxed);
        if quarantined && self.waiter.woken.swap(false, Ordering::Relaxed) {
            self.waiter.pass_on(self.wakers, self.task_queue_id);
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut by_queue = self.wakers.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waiters) = by_queue.get_mut(self.task_queue_id) {
            waiters.remove(&self.waiter.place.load(Ordering::Relaxed));
            if waiters.is_empty() {
                by_queue.remove(self.task_queue_id);
            }
        }
        drop(by_queue);
        if self.waiter.woken.load(Ordering::Relaxed) {
            // Woken for a run it will never look for: the next one that matches looks instead.
            self.waiter.pass_on(self.wakers, self.task_queue_id);
        }
    }
}

impl Wakers {
    /// Puts a claimWork of a worker with `dimensions` in line on `task_queue_id`.
    pub(crate) fn register<'a>(&'a self, task_queue_id: &'a str, dimensions: &Dimensions) -> Registration<'a> {
        let place = self.next.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Waiter {
            dimensions: dimensions.clone(),
            place: AtomicU64::new(place),
            notify: Notify::new(),
            woken: AtomicBool::new(false),
            quarantined: AtomicBool::new(false),
            woken_for: Mutex::new(None),
        });
        let mut by_queue = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        by_queue.entry(task_queue_id.to_owned()).or_default().insert(place, Arc::clone(&waiter));
        Registration { wakers: self, task_queue_id, waiter }
    }

    /// A run needing `required` (none: any worker) became pending on `task_queue_id`: wakes
    /// the longest-waiting claimWork that can take it, if any waits.
    pub(crate) fn wake(&self, task_queue_id: &str, required: Option<&Dimensions>) {
        let mut by_queue = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(waiters) = by_queue.get_mut(task_queue_id) else { return };
        let at = waiters.iter().find_map(|(place, waiter)| {
            let can = !waiter.woken.load(Ordering::Relaxed)
                && !waiter.quarantined.load(Ordering::Relaxed)
                && required.is_none_or(|required| required.matched_by(&waiter.dimensions));
            can.then_some(*place)
        });
        if let Some(waiter) = at.and_then(|at| waiters.remove(&at)) {
            *waiter.woken_for.lock().unwrap_or_else(PoisonError::into_inner) = required.cloned();
            waiter.woken.store(true, Ordering::Relaxed);
            waiter.notify.notify_one();
            // To the back of the line: it stays registered until its claimWork looks.
            let place = self.next.fetch_add(1, Ordering::Relaxed);
            waiter.place.store(place, Ordering::Relaxed);
            waiters.insert(place, waiter);
        }
    }

    /// Wakes every claimWork waiting on `task_queue_id` (work whose needs are unknown, e.g.
    /// committed by another server).
    pub(crate) fn wake_queue(&self, task_queue_id: &str) {
        let by_queue = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        for waiter in by_queue.get(task_queue_id).into_iter().flat_map(BTreeMap::values) {
            waiter.woken.store(true, Ordering::Relaxed);
            waiter.notify.notify_one();
        }
    }

    /// How many claimWork calls wait (or look), over every queue.
    pub(crate) fn waiting(&self) -> usize {
        self.by_queue.lock().unwrap_or_else(PoisonError::into_inner).values().map(BTreeMap::len).sum()
    }

    /// Wakes every waiting claimWork of every queue.
    pub(crate) fn wake_all(&self) {
        let by_queue = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        for waiter in by_queue.values().flat_map(BTreeMap::values) {
            waiter.woken.store(true, Ordering::Relaxed);
            waiter.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn dims(os: &str) -> Dimensions {
        Dimensions::parse("dimensions", BTreeMap::from([("os".to_owned(), vec![os.to_owned()])])).unwrap()
    }

    fn woken(registration: &Registration<'_>) -> bool {
        registration.waiter.woken.load(Ordering::Relaxed)
    }

    #[test]
    fn waiting_counts_the_calls_in_line_on_every_queue() {
        let wakers = Wakers::default();
        let a = wakers.register("q/a", &dims("linux"));
        let b = wakers.register("q/b", &dims("linux"));
        let c = wakers.register("q/b", &dims("mac"));
        assert_eq!(wakers.waiting(), 3);
        wakers.wake("q/b", None);
        assert_eq!(wakers.waiting(), 3, "a woken call stays in line until it looks");
        drop((a, b));
        assert_eq!(wakers.waiting(), 1);
        drop(c);
        assert_eq!(wakers.waiting(), 0);
    }

    #[test]
    fn a_run_wakes_the_longest_waiting_worker_that_can_take_it() {
        let wakers = Wakers::default();
        let (mac, first, second) = (
            wakers.register("q", &dims("mac")),
            wakers.register("q", &dims("linux")),
            wakers.register("q", &dims("linux")),
        );
        wakers.wake("q", Some(&dims("linux")));
        assert_eq!((woken(&mac), woken(&first), woken(&second)), (false, true, false));
        // A second run wakes the next, not the one already woken.
        wakers.wake("q", Some(&dims("linux")));
        assert!(woken(&second));
        // Nobody left who can take a third.
        wakers.wake("q", Some(&dims("linux")));
        assert!(!woken(&mac));
        // A run that needs nothing wakes anyone.
        wakers.wake("q", None);
        assert!(woken(&mac));
        wakers.wake("other", None);
    }

    #[test]
    fn a_wake_up_nobody_looked_for_is_passed_on() {
        let wakers = Wakers::default();
        let (gone, next) = (wakers.register("q", &dims("linux")), wakers.register("q", &dims("linux")));
        wakers.wake("q", Some(&dims("linux")));
        assert!(woken(&gone) && !woken(&next));
        drop(gone);
        assert!(woken(&next), "the one that went away passed it on");
        // One that looked used it: dropping it wakes nobody.
        let last = wakers.register("q", &dims("linux"));
        next.looking();
        drop(next);
        assert!(!woken(&last));
    }

    #[test]
    fn quarantined_workers_are_passed_over_but_hear_changes_to_the_queue() {
        let wakers = Wakers::default();
        let (held, free) = (wakers.register("q", &Dimensions::default()), wakers.register("q", &Dimensions::default()));
        held.set_quarantined(true);
        wakers.wake("q", None);
        assert_eq!((woken(&held), woken(&free)), (false, true));
        wakers.wake_queue("q");
        assert!(woken(&held));
    }
}
