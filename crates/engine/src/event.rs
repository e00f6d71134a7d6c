//! What a transition tells the world: one event per observable change of a task.

use crate::priority::Priority;

/// An observable change of one task, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The task was defined (createTask).
    Defined,
    /// Run `run_id` became pending.
    Pending {
        /// The run.
        run_id: u32,
    },
    /// Run `run_id` was claimed.
    Running {
        /// The run.
        run_id: u32,
    },
    /// Run `run_id` completed.
    Completed {
        /// The run.
        run_id: u32,
    },
    /// Run `run_id` failed.
    Failed {
        /// The run.
        run_id: u32,
    },
    /// Run `run_id` ended with an exception.
    Exception {
        /// The run.
        run_id: u32,
    },
    /// The priority changed.
    PriorityChanged {
        /// Before.
        old: Priority,
        /// After.
        new: Priority,
        /// Changed with its whole group (`changeTaskGroupPriority`), whose message tells of it.
        with_group: bool,
    },
}

impl Event {
    /// The run the event is about, if any.
    #[must_use]
    pub fn run_id(&self) -> Option<u32> {
        match *self {
            Event::Pending { run_id }
            | Event::Running { run_id }
            | Event::Completed { run_id }
            | Event::Failed { run_id }
            | Event::Exception { run_id } => Some(run_id),
            Event::Defined | Event::PriorityChanged { .. } => None,
        }
    }
}

/// The events of one step; dropping them would lose messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "effects must be persisted, then published"]
pub struct Effects(pub Vec<Event>);

impl Effects {
    /// No events: the command changed nothing.
    pub fn none() -> Effects {
        Effects(Vec::new())
    }

    /// Whether the command changed nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
