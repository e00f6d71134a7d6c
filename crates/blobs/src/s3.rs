//! Blobs in S3-compatible storage, through `object_store`. Each upload is an object of its
//! own, `<prefix>/<taskId>/<runId>/<escaped name>/<upload id>`, and the store records which
//! one holds an artifact's bytes: a second upload never replaces what readers fetched, with
//! no conditional writes asked of the storage. Live logs stay in the local directory.

use std::io;
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};

use crate::{BlobKey, BlobReader, file_name};

/// Bytes sent to the storage per part (S3 takes parts of 5 MiB and more, the last aside).
const PART: usize = 8 * 1024 * 1024;
/// Parts in flight at once per upload.
const PARTS_IN_FLIGHT: usize = 2;

/// A bucket (and a prefix in it) holding blobs.
#[derive(Debug, Clone)]
pub struct S3Blobs {
    store: Arc<AmazonS3>,
    prefix: ObjectPath,
}

/// An upload to S3 in progress.
pub(crate) struct S3Writer {
    upload: WriteMultipart,
    object: String,
    written: u64,
}

impl std::fmt::Debug for S3Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Writer").field("object", &self.object).field("written", &self.written).finish()
    }
}

fn storage_error(err: object_store::Error) -> io::Error {
    match err {
        object_store::Error::NotFound { .. } => io::Error::new(io::ErrorKind::NotFound, err.to_string()),
        other => io::Error::other(other.to_string()),
    }
}

impl S3Blobs {
    /// The bucket and prefix of `url` (`s3://bucket[/prefix]`), reached with the standard AWS
    /// variables (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`) and then `settings` (`object_store`'s keys, e.g.
    /// `aws_endpoint`); an `http://` endpoint is allowed (a store on a private network).
    ///
    /// # Errors
    /// When the URL is not `s3://bucket/...` or the settings are incomplete or unknown.
    pub fn new(url: &str, settings: &[(&str, &str)]) -> io::Result<S3Blobs> {
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let rest = url.strip_prefix("s3://").ok_or_else(|| invalid(format!("`{url}` is not an s3:// URL")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid(format!("`{url}` names no bucket")));
        }
        let endpoint = std::env::var("AWS_ENDPOINT_URL_S3").or_else(|_| std::env::var("AWS_ENDPOINT_URL")).ok();
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(endpoint) = endpoint {
            builder = builder.with_allow_http(endpoint.starts_with("http://")).with_endpoint(endpoint);
        }
        for (key, value) in settings {
            let key: object_store::aws::AmazonS3ConfigKey =
                key.parse().map_err(|_| invalid(format!("`{key}` is not an S3 setting")))?;
            if matches!(key, object_store::aws::AmazonS3ConfigKey::Endpoint) {
                builder = builder.with_allow_http(value.starts_with("http://"));
            }
            builder = builder.with_config(key, *value);
        }
        let store = builder.build().map_err(|err| invalid(format!("S3 blob store {url}: {err}")))?;
        Ok(S3Blobs { store: Arc::new(store), prefix: ObjectPath::from(prefix.trim_matches('/')) })
    }

    fn object(&self, key: &BlobKey<'_>, upload: &str) -> ObjectPath {
        let run = key.run_id.to_string();
        let name = file_name(key.name);
        self.prefix.clone().join(key.task_id).join(run.as_str()).join(name.as_str()).join(upload)
    }

    pub(crate) async fn writer(&self, key: &BlobKey<'_>) -> io::Result<S3Writer> {
        let object = slugid::nice();
        let upload = self.store.put_multipart(&self.object(key, &object)).await.map_err(storage_error)?;
        Ok(S3Writer { upload: WriteMultipart::new_with_chunk_size(upload, PART), object, written: 0 })
    }

    pub(crate) async fn open(&self, key: &BlobKey<'_>, object: &str) -> io::Result<Option<BlobReader>> {
        match self.store.get(&self.object(key, object)).await {
            Ok(got) => {
                let size = got.meta.size;
                let bytes = got.into_stream().map_err(storage_error);
                Ok(Some(BlobReader { bytes: Box::pin(tokio_util::io::StreamReader::new(bytes)), size }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(storage_error(err)),
        }
    }

    pub(crate) async fn delete(&self, key: &BlobKey<'_>, object: &str) -> io::Result<()> {
        match self.store.delete(&self.object(key, object)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(storage_error(err)),
        }
    }

    /// Deletes every object of a task (its artifacts' bytes, and any upload a crash left
    /// unrecorded).
    pub(crate) async fn delete_task(&self, task_id: &str) -> io::Result<()> {
        let prefix = self.prefix.clone().join(task_id);
        let locations = self.store.list(Some(&prefix)).map_ok(|meta| meta.location).boxed();
        let mut deleted = self.store.delete_stream(locations);
        while let Some(done) = deleted.next().await {
            match done {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => return Err(storage_error(err)),
            }
        }
        Ok(())
    }
}

impl S3Writer {
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.upload.wait_for_capacity(PARTS_IN_FLIGHT).await.map_err(storage_error)?;
        self.upload.write(bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    pub(crate) async fn finish(self) -> io::Result<(u64, String)> {
        self.upload.finish().await.map_err(storage_error)?;
        Ok((self.written, self.object))
    }

    pub(crate) async fn abort(self) {
        if let Err(err) = self.upload.abort().await {
            tracing::warn!(error = %err, "aborting an S3 upload failed; the bucket's lifecycle rule removes its parts");
        }
    }
}
