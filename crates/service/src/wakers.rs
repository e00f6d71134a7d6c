//! One wake-up signal per task queue, for long-polling claimWork calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Queue -> the signal its waiting workers listen to.
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    by_queue: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wakers {
    pub(crate) fn get(&self, task_queue_id: &str) -> Arc<Notify> {
        let mut by_queue = self.by_queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match by_queue.get(task_queue_id) {
            Some(notify) => Arc::clone(notify),
            None => {
                let notify = Arc::new(Notify::new());
                by_queue.insert(task_queue_id.to_owned(), Arc::clone(&notify));
                notify
            }
        }
    }

    /// Wakes every waiting worker of every queue.
    pub(crate) fn wake_all(&self) {
        let by_queue = self.by_queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for notify in by_queue.values() {
            notify.notify_waiters();
        }
    }

    /// Wakes every worker waiting on the queue; each then tries to claim. (Waking all rather
    /// than one keeps a worker whose dimensions do not match from swallowing the signal.)
    pub(crate) fn wake(&self, task_queue_id: &str) {
        let notify = {
            let by_queue = self.by_queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            by_queue.get(task_queue_id).cloned()
        };
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }
}
