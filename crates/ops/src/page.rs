//! Pages of listings and their continuation tokens, the same on both backends.

use shoal_engine::artifact::{Artifact, LIVE_LOG_NAME};
use shoal_engine::id::is_identifier;
use shoal_engine::{Rejection, TaskId};

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

/// The refusal of a continuation token its listing never issued.
pub(crate) fn not_issued() -> StoreError {
    Rejection::invalid("continuationToken", "is not a token this listing issued").into()
}

/// A listing's continuation token as the sequence it stopped at (0 for the first page).
pub fn parse_seq(after: Option<&str>) -> Result<u64, StoreError> {
    match after {
        None | Some("") => Ok(0),
        Some(text) => text.parse().map_err(|_| not_issued()),
    }
}

/// A task-id continuation token as the task id to list after (none for the first page).
pub fn parse_task_id(after: Option<&str>) -> Result<Option<TaskId>, StoreError> {
    match after {
        None | Some("") => Ok(None),
        Some(text) => TaskId::parse(text).map(Some).ok_or_else(not_issued),
    }
}

/// A task-id continuation token as the id to list after ("" for the first page).
pub(crate) fn task_token(after: Option<&str>) -> Result<String, StoreError> {
    Ok(parse_task_id(after)?.map(|task_id| task_id.to_string()).unwrap_or_default())
}

/// A newest-first listing's continuation token (`created:id`) as the place it stopped; the
/// first page starts after everything.
pub(crate) fn newest_first_token(after: Option<&str>) -> Result<(i64, &str), StoreError> {
    match after {
        None | Some("") => Ok((i64::MAX, "")),
        Some(token) => match token.split_once(':') {
            Some((created, id)) if TaskId::parse(id).is_some() => Ok((created.parse().map_err(|_| not_issued())?, id)),
            _ => Err(not_issued()),
        },
    }
}

/// A worker-listing token (`group/id` of the last worker listed) as where to list after.
pub(crate) fn worker_token(after: Option<&str>) -> Result<(String, String), StoreError> {
    match after {
        None | Some("") => Ok((String::new(), String::new())),
        Some(token) => match token.split_once('/') {
            Some((group, id)) if is_identifier(group) && is_identifier(id) => Ok((group.to_owned(), id.to_owned())),
            _ => Err(not_issued()),
        },
    }
}

/// A worker-history token (`at:taskId`, the last claim listed) as where to list from.
pub(crate) fn worker_claim_token(token: &str) -> Result<(i64, String), StoreError> {
    let (at, task) = token.split_once(':').ok_or_else(not_issued)?;
    match (at.parse(), TaskId::parse(task)) {
        (Ok(at), Some(task_id)) => Ok((at, task_id.to_string())),
        _ => Err(not_issued()),
    }
}

/// A page of `items`; when `more` follow, the last one's `token` continues.
pub(crate) fn page<T>(items: Vec<T>, more: bool, token: impl Fn(&T) -> String) -> Page<T> {
    let continuation = if more { items.last().map(token) } else { None };
    Page { items, continuation }
}

/// Most bytes of task definitions one page of a listing holds (a page has at least one task).
pub const MAX_PAGE_BYTES: u64 = 8 * 1024 * 1024;

/// How many of the tasks of `sizes` (bytes of each definition, in order) go on a page of at
/// most `limit`: as many as fit in [`MAX_PAGE_BYTES`], and always the first.
pub(crate) fn fitting(sizes: &[u64], limit: usize) -> usize {
    let mut total = 0;
    let mut n = 0;
    for &size in sizes.iter().take(limit) {
        if n > 0 && total + size > MAX_PAGE_BYTES {
            break;
        }
        total += size;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_what_fits_and_always_its_first_task() {
        const MB: u64 = 1024 * 1024;
        assert_eq!(fitting(&[10, 10, 10], 2), 2, "by count");
        assert_eq!(fitting(&[3 * MB, 3 * MB, 3 * MB, 3 * MB], 1000), 2, "by bytes");
        assert_eq!(fitting(&[20 * MB, 1], 1000), 1, "a task larger than a page comes alone");
        assert_eq!(fitting(&[], 1000), 0);
    }

    #[test]
    fn a_token_a_listing_never_issued_is_refused() {
        assert!(newest_first_token(Some("x:00000001QxCxxxxxxxxxxA")).is_err());
        assert!(worker_token(Some("a/b/c")).is_err());
        assert!(worker_claim_token("12").is_err());
        assert_eq!(worker_claim_token("12:00000001QxCxxxxxxxxxxA").unwrap().0, 12);
        assert!(parse_seq(Some("x")).is_err() && task_token(Some("nope")).is_err());
    }
}
