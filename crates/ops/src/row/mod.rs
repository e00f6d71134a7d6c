//! What both backends store of a task, and the helpers their row conversions share.

mod columns;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod drivers;

use shoal_engine::task::Task;

pub use columns::{
    Backends, Cell, Cells, Column, Kind, READ, SelectList, TASK_COLUMNS, Value, insert_cells, select_list, step_cells,
    step_columns, task_from_cells,
};

use crate::StoreError;

/// "The task is unresolved", in both backends' SQL: its `deadline_due` column is set exactly
/// while it is, since `Task::deadline_due` is `None` once the task resolves (the column is
/// written from it with every row; the engine's `invariants_hold_for_any_command_sequence` holds it).
/// `unresolved!("t")` says it of the rows of alias `t`.
#[macro_export]
macro_rules! unresolved {
    () => {
        "deadline_due IS NOT NULL"
    };
    ($alias:literal) => {
        concat!($alias, ".deadline_due IS NOT NULL")
    };
}
pub use crate::unresolved;

/// A task as stored: the engine's task plus the store's bookkeeping.
#[derive(Debug, Clone)]
pub struct TaskRow {
    /// The engine's task.
    pub task: Task,
    /// Claim order while pending (SQLite's; PostgreSQL draws it in SQL and does not read it back).
    pub pending_seq: Option<u64>,
}

/// A stored value that does not decode.
pub fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("corrupt row: {what}"))
}

/// `value` as stored JSON text.
pub fn json(value: &(impl serde::Serialize + ?Sized)) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Internal(format!("encoding json: {err}")))
}
