//! Operations on artifact records: create, mark uploaded, forget.

use shoal_engine::artifact::{Artifact, ArtifactRequest, LIVE_LOG_NAME, check_run_takes_artifacts, implicit_live_log};
use shoal_engine::message;
use shoal_engine::rejection::Missing;
use shoal_engine::task::Task;
use shoal_engine::{Rejection, Timestamp};

use crate::{ArtifactKey, StoreError};
use crate::{WriteTx, load_existing};

/// A backend's transaction, as the artifact operations use it.
pub trait ArtifactTx {
    /// The stored record of an artifact (not the implicit live log).
    async fn stored_artifact(&mut self, key: &ArtifactKey) -> Result<Option<Artifact>, StoreError>;

    /// Stores an artifact's record, replacing any under its key.
    async fn put_artifact(&mut self, key: &ArtifactKey, artifact: &Artifact) -> Result<(), StoreError>;

    /// Deletes artifact records; says how many there were.
    async fn delete_artifacts(&mut self, keys: &[ArtifactKey]) -> Result<usize, StoreError>;
}

/// createArtifact: the engine decides against the run and what is stored; then it is stored.
pub async fn create(
    tx: &mut impl WriteTx,
    key: &ArtifactKey,
    request: ArtifactRequest,
    now: Timestamp,
) -> Result<Artifact, StoreError> {
    let row = load_existing(tx, key.task_id).await?;
    let Some(run) = row.task.runs().get(key.run_id as usize) else {
        return Err(Rejection::from(Missing::Run { task_id: key.task_id, run_id: key.run_id }).into());
    };
    let existing = stored(tx, key, &row.task).await?;
    let stored = request.apply(&key.name, run, row.task.meta.expires, existing.as_ref(), now)?;
    if existing.as_ref() != Some(&stored) {
        tx.put_artifact(key, &stored).await?;
        // Listeners hear of an artifact when it is created, save of blobs (`s3`), of which
        // Taskcluster says nothing.
        if let Some(created) = message::artifact_created(&row.task, key.run_id, &stored) {
            tx.publish(created);
        }
    }
    Ok(stored)
}

/// Records that a blob artifact's bytes are complete: once, and only while its run takes
/// artifacts, so an upload that ends after the run resolved or after another upload of the
/// same artifact is refused.
pub async fn uploaded(
    tx: &mut impl WriteTx,
    key: &ArtifactKey,
    (bytes, object): (u64, Option<String>),
    now: Timestamp,
) -> Result<Artifact, StoreError> {
    let row = load_existing(tx, key.task_id).await?;
    let Some(mut stored) = stored(tx, key, &row.task).await? else {
        let missing = Missing::Artifact { task_id: key.task_id, run_id: key.run_id, name: key.name.clone() };
        return Err(Rejection::from(missing).into());
    };
    stored.check_writable()?;
    let Some(run) = row.task.runs().get(key.run_id as usize) else {
        return Err(Rejection::from(Missing::Run { task_id: key.task_id, run_id: key.run_id }).into());
    };
    check_run_takes_artifacts(run, now)?;
    stored.present = true;
    stored.bytes = Some(bytes);
    stored.object = object;
    tx.put_artifact(key, &stored).await?;
    Ok(stored)
}

/// Forgets expired artifacts (their bytes are already gone); says how many there were.
pub async fn forget(tx: &mut impl WriteTx, keys: &[ArtifactKey]) -> Result<usize, StoreError> {
    tx.delete_artifacts(keys).await
}

/// The artifact under `key` as this transaction sees it; `task`'s runs have implicit live logs.
async fn stored(tx: &mut impl WriteTx, key: &ArtifactKey, task: &Task) -> Result<Option<Artifact>, StoreError> {
    match tx.stored_artifact(key).await? {
        Some(artifact) => Ok(Some(artifact)),
        None if key.name == LIVE_LOG_NAME => {
            Ok(task.runs().get(key.run_id as usize).and_then(|run| implicit_live_log(run, task.meta.expires)))
        }
        None => Ok(None),
    }
}
