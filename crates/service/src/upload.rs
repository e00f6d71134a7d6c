//! Artifact bytes: uploads allowed by the rules, and downloads of what was uploaded.

use shoal_blobs::{BlobKey, BlobReader, BlobWriter};
use shoal_engine::Rejection;
use shoal_engine::artifact::{Artifact, check_run_takes_artifacts, check_size};
use shoal_engine::rejection::{Conflict, Missing};
use shoal_store::operation::ArtifactUploaded;
use shoal_store::{ArtifactKey, StoreError};

use crate::{Service, now};

/// How long bytes in place without their record must have been there before an upload takes
/// them for a crash's leftovers (an upload records its bytes within moments of placing them).
const LEFTOVER_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// An upload the rules allowed: write the bytes, then [`Service::finish_upload`].
#[derive(Debug)]
pub struct Upload {
    key: ArtifactKey,
    writer: BlobWriter,
    /// Bytes written so far.
    written: u64,
    /// Most bytes it may hold: the artifact's limit, or what the run's has left.
    limit: u64,
    /// What the limit bounds, as the refusal names it.
    limited: String,
}

impl Upload {
    /// Appends bytes, within the artifact's and the run's size limits.
    ///
    /// # Errors
    /// TooLarge past a limit (nothing of the upload is kept); Unavailable when the bytes
    /// cannot be stored.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.written += bytes.len() as u64;
        check_size(|| self.limited.clone(), self.written, self.limit)?;
        self.writer.write(bytes).await.map_err(blob_error)
    }

    /// Gives the upload up (the client went away, or a limit refused it): nothing is kept.
    pub async fn abort(self) {
        self.writer.abort().await;
    }
}

impl Service {
    /// Starts an upload of a blob artifact's bytes: the artifact must be an upload and, like
    /// its record, may change only while its run takes artifacts.
    ///
    /// # Errors
    /// NotFound for an unknown artifact or run; Conflict for another kind of artifact or a run
    /// that takes no more artifacts.
    pub async fn begin_upload(&self, key: ArtifactKey) -> Result<Upload, StoreError> {
        self.blob_record(&key).await?.check_writable()?;
        let task_id = key.task_id;
        let record = self.store().read(move |reads| reads.task(task_id)).await?;
        let run = record
            .as_ref()
            .and_then(|record| record.status.runs.get(key.run_id as usize))
            .ok_or_else(|| Rejection::from(Missing::Run { task_id: key.task_id, run_id: key.run_id }))?;
        check_run_takes_artifacts(run, now())?;
        let blob = BlobKey { task_id: key.task_id.as_str(), run_id: key.run_id, name: &key.name };
        let sizes = self.config().sizes;
        let (task_id, run_id) = (key.task_id, key.run_id);
        let stored = self.store().read(move |reads| reads.run_bytes(task_id, run_id)).await?;
        let run_left = sizes.run_bytes.saturating_sub(stored);
        let (limit, limited) = match run_left < sizes.artifact_bytes {
            true => (run_left, format!("the artifacts of run {} of task {} together", key.run_id, key.task_id)),
            false => (sizes.artifact_bytes, format!("artifact {}", key.name)),
        };
        // Bytes in place without their record were left by a crash between the two: never
        // accepted, so they give way to this upload.
        if self.blobs().remove_leftover(&blob, LEFTOVER_AFTER).await.map_err(blob_error)? {
            tracing::warn!(task.id = %key.task_id, run.id = key.run_id, name = %key.name, "removed the bytes of an unrecorded upload");
        }
        let writer = self.blobs().writer(&blob).await.map_err(blob_error)?;
        Ok(Upload { key, writer, written: 0, limit, limited })
    }

    /// Makes the uploaded bytes durable and visible, and records the artifact as present.
    /// Bytes are written once: of two uploads of one artifact the second to finish is refused,
    /// and so is an upload that ends after its run resolved (its bytes are removed again).
    ///
    /// # Errors
    /// Conflict as above; otherwise as the blob store and the store.
    pub async fn finish_upload(&self, upload: Upload) -> Result<Artifact, StoreError> {
        let Upload { key, writer, .. } = upload;
        let stored = match writer.finish().await {
            Ok(stored) => stored,
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Rejection::from(Conflict::AlreadyUploaded(key.name)).into());
            }
            Err(err) => return Err(blob_error(err)),
        };
        let object = stored.object.clone();
        match self.run(ArtifactUploaded { key: key.clone(), bytes: stored.bytes, object: stored.object }).await {
            Err(StoreError::Rejected(rejection)) => {
                // Refused, so never accepted: these bytes are this upload's own.
                let blob = BlobKey { task_id: key.task_id.as_str(), run_id: key.run_id, name: &key.name };
                self.blobs().delete(&blob, object.as_deref()).await.map_err(blob_error)?;
                Err(StoreError::Rejected(rejection))
            }
            other => other,
        }
    }

    /// A blob artifact's record and bytes.
    ///
    /// # Errors
    /// NotFound when the artifact does not exist or has not been uploaded.
    pub async fn open_blob(&self, key: &ArtifactKey) -> Result<(Artifact, BlobReader), StoreError> {
        let artifact = self.blob_record(key).await?;
        let blob = BlobKey { task_id: key.task_id.as_str(), run_id: key.run_id, name: &key.name };
        match self.blobs().open(&blob, artifact.object.as_deref()).await.map_err(blob_error)? {
            Some(reader) if artifact.present => Ok((artifact, reader)),
            _ => Err(Rejection::from(Missing::NotUploaded(key.name.clone())).into()),
        }
    }

    async fn blob_record(&self, key: &ArtifactKey) -> Result<Artifact, StoreError> {
        let (task_id, run_id, name) = (key.task_id, key.run_id, key.name.clone());
        let found = self.store().read(move |reads| reads.artifact(task_id, run_id, &name)).await?;
        match found {
            Some(artifact) => {
                artifact.check_upload()?;
                Ok(artifact)
            }
            None => Err(Rejection::from(Missing::NotCreated(key.name.clone())).into()),
        }
    }
}

fn blob_error(err: std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("blob storage: {err}"))
}
