//! Waiting claimWork calls per task queue, and who is woken when a run becomes pending: the
//! longest-waiting one whose dimensions match the run, not every waiter (one would claim and
//! the others would look for nothing). The calls that can be woken are also filed under each
//! of their dimension values, so a run needing a rare value (a bot's own `id`, one device)
//! finds its worker among the few that have it, not by trying the whole fleet in turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use shoal_engine::dimensions::Dimensions;
use shoal_engine::line::Line;
use tokio::sync::Notify;

/// Queue -> its waiting claimWork calls.
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    by_queue: Mutex<HashMap<String, Waiting>>,
    /// The next place in line (also each waiter's id).
    next: AtomicU64,
}

/// One queue's waiting claimWork calls.
#[derive(Debug)]
struct Waiting {
    /// Every call, by id, woken or not.
    all: HashMap<u64, Arc<Waiter>>,
    /// Those that can be woken (neither woken nor quarantined), in line and filed by value.
    ready: Line<Arc<Waiter>>,
}

impl Waiting {
    fn new() -> Waiting {
        Waiting { all: HashMap::new(), ready: Line::new(|waiter| &waiter.dimensions) }
    }

    /// Files `waiter` as one that can be woken, at its place.
    fn enter(&mut self, waiter: &Arc<Waiter>) {
        self.ready.insert(waiter.place.load(Ordering::Relaxed), Arc::clone(waiter));
    }

    /// Takes `waiter` out of the calls that can be woken.
    fn leave(&mut self, waiter: &Waiter) {
        self.ready.remove(waiter.place.load(Ordering::Relaxed));
    }

    /// Wakes every call in line; none can be woken again until it looks.
    fn wake_all(&mut self) {
        for waiter in self.all.values() {
            waiter.woken.store(true, Ordering::Relaxed);
            // Its needs are unknown: passed on, it wakes anyone.
            *waiter.woken_for.lock().unwrap_or_else(PoisonError::into_inner) = None;
            waiter.notify.notify_one();
        }
        self.ready.clear();
    }
}

/// One waiting claimWork. Its flags change only under the lock of the lines, with its place
/// in them.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// Its key in its line's `all`.
    id: u64,
    /// The worker's dimensions.
    dimensions: Dimensions,
    /// Its place in its queue's line (a new one, at the back, when it looks after a wake-up).
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
    /// Whether a run may wake it.
    fn able(&self) -> bool {
        !self.woken.load(Ordering::Relaxed) && !self.quarantined.load(Ordering::Relaxed)
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

    /// The waiter is about to look for work: a wake-up it had is used (says whether it had
    /// one), and it goes to the back of the line.
    pub(crate) fn looking(&self) -> bool {
        // Only a wake-up sets the flag (under the lock); one that comes after this read is
        // used by the next look.
        if !self.waiter.woken.load(Ordering::Relaxed) {
            return false;
        }
        let mut by_queue = self.wakers.lines();
        if !self.waiter.woken.swap(false, Ordering::Relaxed) {
            return false;
        }
        // What it was woken for stays: a look that fails passes the wake-up on with it.
        if let Some(line) = by_queue.get_mut(self.task_queue_id)
            && self.waiter.able()
        {
            self.waiter.place.store(self.wakers.next.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
            line.enter(&self.waiter);
        }
        true
    }

    /// Passes on a wake-up the last look used without answering (it failed).
    pub(crate) fn pass_on(&self) {
        self.wakers.pass_on(&self.waiter, self.task_queue_id);
    }

    /// The worker is quarantined (or no longer): while it is, runs wake the others, and a
    /// wake-up it got while looking goes to the next in line.
    pub(crate) fn set_quarantined(&self, quarantined: bool) {
        // Only this call changes its quarantine.
        if self.waiter.quarantined.load(Ordering::Relaxed) == quarantined {
            return;
        }
        let mut by_queue = self.wakers.lines();
        let Some(line) = by_queue.get_mut(self.task_queue_id) else { return };
        if self.waiter.quarantined.swap(quarantined, Ordering::Relaxed) == quarantined {
            return;
        }
        if !quarantined {
            if self.waiter.able() {
                line.enter(&self.waiter);
            }
            return;
        }
        line.leave(&self.waiter);
        let woken = self.waiter.woken.swap(false, Ordering::Relaxed);
        drop(by_queue);
        if woken {
            self.wakers.pass_on(&self.waiter, self.task_queue_id);
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut by_queue = self.wakers.lines();
        if let Some(line) = by_queue.get_mut(self.task_queue_id) {
            line.leave(&self.waiter);
            line.all.remove(&self.waiter.id);
            if line.all.is_empty() {
                by_queue.remove(self.task_queue_id);
            }
        }
        let woken = self.waiter.woken.load(Ordering::Relaxed);
        drop(by_queue);
        if woken {
            // Woken for a run it will never look for: the next one that matches looks instead.
            self.wakers.pass_on(&self.waiter, self.task_queue_id);
        }
    }
}

impl Wakers {
    fn lines(&self) -> MutexGuard<'_, HashMap<String, Waiting>> {
        self.by_queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts a claimWork of a worker with `dimensions` in line on `task_queue_id`.
    pub(crate) fn register<'a>(&'a self, task_queue_id: &'a str, dimensions: &Dimensions) -> Registration<'a> {
        let place = self.next.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Waiter {
            id: place,
            dimensions: dimensions.clone(),
            place: AtomicU64::new(place),
            notify: Notify::new(),
            woken: AtomicBool::new(false),
            quarantined: AtomicBool::new(false),
            woken_for: Mutex::new(None),
        });
        let mut by_queue = self.lines();
        if !by_queue.contains_key(task_queue_id) {
            by_queue.insert(task_queue_id.to_owned(), Waiting::new());
        }
        let line = by_queue.get_mut(task_queue_id).expect("inserted above");
        line.all.insert(place, Arc::clone(&waiter));
        line.enter(&waiter);
        Registration { wakers: self, task_queue_id, waiter }
    }

    /// Passes the wake-up `waiter` had on to the next call in line that can take its run.
    fn pass_on(&self, waiter: &Waiter, task_queue_id: &str) {
        let required = waiter.woken_for.lock().unwrap_or_else(PoisonError::into_inner).take();
        self.wake(task_queue_id, required.as_ref());
    }

    /// A run needing `required` (none: any worker) became pending on `task_queue_id`: wakes
    /// the longest-waiting claimWork that can take it, if any waits.
    pub(crate) fn wake(&self, task_queue_id: &str, required: Option<&Dimensions>) {
        let mut by_queue = self.lines();
        let Some(line) = by_queue.get_mut(task_queue_id) else { return };
        let Some(waiter) = line.ready.first_able(required, usize::MAX).and_then(|place| line.ready.get(place).cloned())
        else {
            return;
        };
        line.leave(&waiter);
        *waiter.woken_for.lock().unwrap_or_else(PoisonError::into_inner) = required.cloned();
        waiter.woken.store(true, Ordering::Relaxed);
        waiter.notify.notify_one();
    }

    /// Wakes every claimWork waiting on `task_queue_id` (work whose needs are unknown, e.g.
    /// committed by another server).
    pub(crate) fn wake_queue(&self, task_queue_id: &str) {
        if let Some(line) = self.lines().get_mut(task_queue_id) {
            line.wake_all();
        }
    }

    /// How many claimWork calls wait (or look), over every queue.
    pub(crate) fn waiting(&self) -> usize {
        self.lines().values().map(|line| line.all.len()).sum()
    }

    /// Wakes every waiting claimWork of every queue.
    pub(crate) fn wake_all(&self) {
        for line in self.lines().values_mut() {
            line.wake_all();
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

    /// Dimensions from `key:value` pairs.
    fn with(pairs: &[(&str, &str)]) -> Dimensions {
        let mut raw: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in pairs {
            raw.entry((*key).to_owned()).or_default().push((*value).to_owned());
        }
        Dimensions::parse_required("dimensions", raw).unwrap()
    }

    #[test]
    fn a_run_needing_a_rare_value_finds_the_worker_that_has_it_among_many() {
        let wakers = Wakers::default();
        let fleet: Vec<Registration<'_>> =
            (0..1000).map(|n| wakers.register("q", &with(&[("id", &format!("bot{n}")), ("os", "linux")]))).collect();
        wakers.wake("q", Some(&with(&[("id", "bot700"), ("os", "linux")])));
        let woken_now: Vec<usize> = (0..1000).filter(|&n| woken(&fleet[n])).collect();
        assert_eq!(woken_now, vec![700]);
        // Woken, it is out of the index until it looks; a second run for it wakes nobody.
        wakers.wake("q", Some(&with(&[("id", "bot700")])));
        assert_eq!((0..1000).filter(|&n| woken(&fleet[n])).count(), 1);
        // Looking puts it back (at the back of the line): now it can be woken again.
        fleet[700].looking();
        wakers.wake("q", Some(&with(&[("id", "bot700")])));
        assert!(woken(&fleet[700]));
        // A run needing a value nobody has wakes nobody.
        fleet[700].looking();
        wakers.wake("q", Some(&with(&[("id", "bot1000")])));
        assert_eq!((0..1000).filter(|&n| woken(&fleet[n])).count(), 0);
        drop(fleet);
        assert!(wakers.lines().is_empty(), "every index entry left with its call");
    }

    #[test]
    fn alternatives_wake_the_longest_waiting_worker_having_any_of_them() {
        let wakers = Wakers::default();
        let (windows, mac, linux) = (
            wakers.register("q", &with(&[("os", "windows")])),
            wakers.register("q", &with(&[("os", "mac")])),
            wakers.register("q", &with(&[("os", "linux")])),
        );
        wakers.wake("q", Some(&with(&[("os", "linux|mac")])));
        assert_eq!((woken(&windows), woken(&mac), woken(&linux)), (false, true, false));
        wakers.wake("q", Some(&with(&[("os", "linux|mac")])));
        assert!(woken(&linux));
        // Two required values: only a worker having both can be woken.
        let both = wakers.register("q", &with(&[("os", "windows"), ("gpu", "none")]));
        wakers.wake("q", Some(&with(&[("os", "windows"), ("gpu", "none")])));
        assert_eq!((woken(&windows), woken(&both)), (false, true));
    }

    #[test]
    fn a_worker_out_of_quarantine_waits_in_its_place_again() {
        let wakers = Wakers::default();
        let (first, second) = (wakers.register("q", &dims("linux")), wakers.register("q", &dims("linux")));
        first.set_quarantined(true);
        first.set_quarantined(false);
        wakers.wake("q", Some(&dims("linux")));
        assert_eq!((woken(&first), woken(&second)), (true, false), "it kept its place");
        // Quarantined while woken: the wake-up goes to the next in line.
        first.set_quarantined(true);
        assert_eq!((woken(&first), woken(&second)), (false, true));
    }

    #[test]
    fn a_look_that_failed_passes_its_wake_up_to_a_worker_that_can_take_the_run() {
        let wakers = Wakers::default();
        let (failed, mac, linux) = (
            wakers.register("q", &dims("linux")),
            wakers.register("q", &dims("mac")),
            wakers.register("q", &dims("linux")),
        );
        wakers.wake("q", Some(&dims("linux")));
        assert!(woken(&failed));
        failed.looking();
        failed.pass_on();
        assert_eq!((woken(&mac), woken(&linux)), (false, true), "passed on for the run it was woken for");
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
