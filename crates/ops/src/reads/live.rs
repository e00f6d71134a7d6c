//! What is pending or running now, fleet-wide: each queue's line (pending, in line order) or
//! its running tasks (by id), queue after queue, read through the queues' own indexes.

use shoal_engine::Rejection;
use shoal_engine::status::TaskState;

use super::over::{ReadDb, ReadsOver, TaskQuery, created_of, record};
use crate::page::{not_issued, parse_seq};
use crate::{Page, StoreError, TagQuery, TaskRecord};

/// Most queues one page visits; a page may end short of its limit, with a token to go on.
const QUEUES_PER_PAGE: usize = 100;

impl<D: ReadDb> ReadsOver<D> {
    /// A page of the tasks in `query.state` (pending or running), of `query.task_queue_id` or
    /// of every queue, that `query` selects; the token is `<queue> <place in its listing>`.
    pub(super) fn live(
        &self,
        query: &TagQuery,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>, StoreError> {
        let state = query.state.filter(|state| matches!(state, TaskState::Pending | TaskState::Running));
        let Some(state) = state else {
            return Err(Rejection::invalid("state", "must be pending or running to list without a tag").into());
        };
        let (mut queue, mut place) = match after {
            None | Some("") => (query.task_queue_id.clone().unwrap_or_default(), String::new()),
            Some(token) => {
                let (queue, place) = token.split_once(' ').ok_or_else(not_issued)?;
                (queue.to_owned(), place.to_owned())
            }
        };
        let mut items = Vec::new();
        let mut visited = 0;
        // The first queue of a fleet-wide listing is the first known.
        if queue.is_empty() {
            match self.0.task_queues("", 1)?.into_iter().next() {
                Some(first) => queue = first.task_queue_id,
                None => return Ok(Page { items, continuation: None }),
            }
        }
        loop {
            visited += 1;
            let listing = match state {
                TaskState::Pending => TaskQuery::Pending(&queue, parse_seq(Some(&place))?),
                _ => TaskQuery::Claimed(&queue, &place),
            };
            let (found, more) = self.bounded(listing, limit - items.len())?;
            let mut last = None;
            for task in found {
                last = Some(match state {
                    TaskState::Pending => task.row.pending_seq.unwrap_or(0).to_string(),
                    _ => task.row.task.task_id.to_string(),
                });
                if query.selects(&task.row.task, created_of(&task)?) {
                    items.push(record(task));
                }
            }
            if more {
                let place = last.unwrap_or_default();
                return Ok(Page { items, continuation: Some(format!("{queue} {place}")) });
            }
            if query.task_queue_id.is_some() {
                return Ok(Page { items, continuation: None });
            }
            let Some(next) = self.0.task_queues(&queue, 1)?.into_iter().next() else {
                return Ok(Page { items, continuation: None });
            };
            (queue, place) = (next.task_queue_id, String::new());
            if items.len() >= limit || visited >= QUEUES_PER_PAGE {
                return Ok(Page { items, continuation: Some(format!("{queue} ")) });
            }
        }
    }
}
