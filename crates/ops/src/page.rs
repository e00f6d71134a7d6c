//! Pages of listings and their continuation tokens, the same on both backends.

use shoal_engine::TaskId;
use shoal_engine::artifact::{Artifact, LIVE_LOG_NAME};

use crate::StoreError;

/// One page of a listing; `continuation` is set when there is more.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// Items.
    pub items: Vec<T>,
    /// Opaque token for the next page.
    pub continuation: Option<String>,
}

/// A page of a run's artifacts from up to `limit + 1` stored ones in name order, with the
/// run's implicit live log (looked up only when needed) in its place unless a stored one
/// replaced it.
pub fn artifact_page(
    mut items: Vec<Artifact>,
    after: Option<&str>,
    limit: usize,
    implicit: impl FnOnce() -> Result<Option<Artifact>, StoreError>,
) -> Result<Page<Artifact>, StoreError> {
    let in_range = after.is_none_or(|after| LIVE_LOG_NAME > after);
    if in_range
        && !items.iter().any(|artifact| artifact.name == LIVE_LOG_NAME)
        && let Some(live) = implicit()?
    {
        let at = items.partition_point(|artifact| artifact.name.as_str() < LIVE_LOG_NAME);
        items.insert(at, live);
    }
    let continuation = (items.len() > limit).then(|| {
        items.truncate(limit);
        items.last().map(|artifact| artifact.name.clone()).unwrap_or_default()
    });
    Ok(Page { items, continuation })
}

/// A listing's continuation token as the sequence it stopped at (0 for the first page).
pub fn parse_seq(after: Option<&str>) -> Result<u64, StoreError> {
    match after {
        None | Some("") => Ok(0),
        Some(text) => text.parse().map_err(|_| {
            StoreError::Rejected(shoal_engine::Rejection::invalid(
                "continuationToken",
                "is not a token this listing issued",
            ))
        }),
    }
}

/// A task-id continuation token as the task id to list after (none for the first page).
pub fn parse_task_id(after: Option<&str>) -> Result<Option<TaskId>, StoreError> {
    match after {
        None | Some("") => Ok(None),
        Some(text) => match TaskId::parse(text) {
            Some(task_id) => Ok(Some(task_id)),
            None => {
                Err(shoal_engine::Rejection::invalid("continuationToken", "is not a token this listing issued").into())
            }
        },
    }
}
