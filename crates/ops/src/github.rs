//! Builds of the GitHub integration: a change's tasks created with its build's record in one
//! transaction, or the record of why it has none.

use shoal_engine::definition::TaskDefinition;
use shoal_engine::github::Build;
use shoal_engine::{TaskId, Timestamp};

use crate::documents::{DocKind, Document};
use crate::row::json;
use crate::{StoreError, WriteTx};

/// How long a build's record is kept.
const BUILD_KEPT_MS: i64 = 365 * 86_400_000;

/// A build's document key: `<owner>/<repository>/<sha>/<taskGroupId>`, so that a listing by
/// owner, repository or commit is a key range.
#[must_use]
pub fn build_key(build: &Build) -> String {
    format!("{}/{}/{}/{}", build.organization, build.repository, build.sha, build.task_group_id)
}

/// Records `build` (a new one, or one that made no tasks).
pub async fn record(tx: &mut impl WriteTx, build: &Build) -> Result<(), StoreError> {
    let document = Document { body: json(build)?, expires: Some(build.created.plus_millis(BUILD_KEPT_MS)), due: None };
    tx.put_document(DocKind::GithubBuild, &build_key(build), &document).await
}

/// Creates a change's `tasks` (dependencies first) and records its `build`: all of them or
/// none (a task refused undoes the others).
pub async fn create(
    tx: &mut impl WriteTx,
    build: &Build,
    tasks: &[(TaskId, TaskDefinition)],
    now: Timestamp,
) -> Result<(), StoreError> {
    for (task_id, definition) in tasks {
        crate::tasks::create_task(tx, definition, *task_id, now).await?;
    }
    record(tx, build).await
}
