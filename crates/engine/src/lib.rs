//! Shoal's engine: the rules of tasks and runs, as pure functions of (state, command, now).
//!
//! Nothing here performs I/O or reads the clock; the store makes each step durable and the
//! service decides when to call it. A task's life, driven by hand:
//!
//! ```
//! use shoal_engine::{definition::TaskDefinitionInput, task::{Claimant, Resolution, Task}, TaskId, Timestamp};
//!
//! let now = Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap();
//! let input: TaskDefinitionInput = serde_json::from_value(serde_json::json!({
//!     "taskQueueId": "proj/linux",
//!     "created": "2026-01-01T00:00:00.000Z",
//!     "deadline": "2026-01-01T01:00:00.000Z",
//!     "payload": {},
//!     "metadata": {"name": "t", "description": "d", "owner": "o@example.com", "source": "https://example.com"}
//! })).unwrap();
//! let task_id = TaskId::parse("fN1S_sG4TTu5SNmTb0Xd6A").unwrap();
//! let definition = input.validate(task_id, now).unwrap();
//! let mut task = Task::new(task_id, &definition);
//! task.schedule(now, &shoal_engine::slice::Capacity::Assumed).unwrap();
//! let effects = task.claim(0, &Claimant::named("group", "worker"), now, 1200).unwrap();
//! assert_eq!(effects.0, vec![shoal_engine::event::Event::Running { run_id: 0 }]);
//! task.resolve(0, Resolution::Completed, now).unwrap();
//! assert_eq!(task.state().as_str(), "completed");
//! ```

#![warn(missing_docs)]

pub mod artifact;
pub mod auth;
pub mod backlog;
pub mod command;
pub mod dedup;
pub mod definition;
pub mod dimensions;
pub mod event;
pub mod github;
pub mod graph;
pub mod group;
pub mod hook;
pub mod id;
pub mod index;
pub mod line;
pub mod message;
pub mod priority;
pub mod rejection;
pub mod result;
pub mod secrets;
pub mod slice;
pub mod status;
pub mod task;
pub mod timestamp;
pub mod topic;
pub mod worker;

pub use id::TaskId;
pub use rejection::Rejection;
pub use timestamp::Timestamp;
