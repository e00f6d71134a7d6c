//! What a gathering's first round trip found, from which its operations are served while
//! they run as each runs alone: the transaction's loads, create lookups and claim queries
//! answer from here, and its queue records wait to be written in id order.

use std::collections::{HashMap, HashSet};

use serde_json::value::RawValue;
use shoal_engine::{TaskId, Timestamp};

use crate::ops::CreateLookup;
use crate::postgres::write::candidate;
use crate::row::{TaskRow, json};
use crate::{ClaimRequest, StoreError, TaskGroup};

/// A claim line's queue and dimensions (as stored) and the rows its query found, in line order.
pub(crate) type LineRows = ((String, String), Vec<tokio_postgres::Row>);

/// What a gathering read and locked before its operations run.
pub(crate) struct Gathered {
    /// The commanded tasks, locked, each as the gathering's writes left it.
    pub(crate) loaded: HashMap<TaskId, TaskRow>,
    /// The tasks the gathering commands (those of them not in `loaded` do not exist).
    commanded: HashSet<TaskId>,
    /// The groups the gathering touches, created, extended or locked.
    upserted: HashMap<TaskId, TaskGroup>,
    /// The created tasks that exist already, with their stored definitions.
    pub(crate) stored: HashMap<TaskId, (TaskRow, String)>,
    /// Each claim line's rows, not yet handed out.
    lines: Vec<((String, String), std::vec::IntoIter<tokio_postgres::Row>)>,
    /// The tasks handed to a claim: a task two lines both found goes to the first.
    taken: HashSet<TaskId>,
    /// The queues to record as active, written in id order once the operations ran, so that
    /// two servers' gatherings take those rows' locks in one order.
    pub(crate) touched: Vec<(String, Timestamp)>,
}

impl Gathered {
    /// What [`super::read::read_all`] found.
    pub(crate) fn new(
        commanded: HashSet<TaskId>,
        loaded: HashMap<TaskId, TaskRow>,
        upserted: HashMap<TaskId, TaskGroup>,
        stored: HashMap<TaskId, (TaskRow, String)>,
        lines: Vec<LineRows>,
    ) -> Gathered {
        Gathered {
            commanded,
            loaded,
            upserted,
            stored,
            lines: lines.into_iter().map(|(line, rows)| (line, rows.into_iter())).collect(),
            taken: HashSet::new(),
            touched: Vec::new(),
        }
    }

    /// A commanded task's row as the gathering's writes left it (`Some(None)`: it does not
    /// exist); `None` for a task the gathering does not command.
    pub(crate) fn load(&self, task_id: TaskId) -> Option<Option<TaskRow>> {
        self.commanded.contains(&task_id).then(|| self.loaded.get(&task_id).cloned())
    }

    /// Keeps a commanded task's row as written (later operations and the groups' judgement
    /// read it).
    pub(crate) fn written(&mut self, row: &TaskRow) {
        if let Some(loaded) = self.loaded.get_mut(&row.task.task_id) {
            loaded.clone_from(row);
        }
    }

    /// A gathered create's lookup: the task as stored, or its group as upserted (a create
    /// is gathered only without dependencies).
    pub(crate) fn lookup_create(&self, task_id: TaskId, group: TaskId) -> Result<CreateLookup, StoreError> {
        if let Some((row, existing)) = self.stored.get(&task_id) {
            return Ok(CreateLookup {
                existing: Some((existing.clone(), row.task.status())),
                group: None,
                dependencies: Vec::new(),
            });
        }
        let group =
            self.upserted.get(&group).ok_or_else(|| StoreError::Corrupt(format!("group {group} not upserted")))?;
        Ok(CreateLookup { existing: None, group: Some(group.clone()), dependencies: Vec::new() })
    }

    /// The next rows of the claim's line, up to its count; `None` when no line is the
    /// claim's (it was not gathered).
    #[allow(clippy::type_complexity)]
    pub(crate) fn claimable(
        &mut self,
        request: &ClaimRequest,
    ) -> Result<Option<Vec<(TaskRow, Box<RawValue>)>>, StoreError> {
        let dimensions = json(&request.dimensions)?;
        let Some((_, rows)) = self
            .lines
            .iter_mut()
            .find(|((queue, line_dimensions), _)| *queue == request.task_queue_id && *line_dimensions == dimensions)
        else {
            return Ok(None);
        };
        let mut candidates = Vec::with_capacity(request.count);
        while candidates.len() < request.count
            && let Some(found) = rows.next()
        {
            let (row, definition) = candidate(&found)?;
            if self.taken.insert(row.task.task_id) {
                candidates.push((row, definition));
            }
        }
        Ok(Some(candidates))
    }
}
