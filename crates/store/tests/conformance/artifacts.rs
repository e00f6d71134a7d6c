//! Artifacts: recorded, uploaded, listed and expired, on every backend.

use super::*;
use shoal_store::operation::{ArtifactUploaded, CreateArtifact, ForgetArtifacts};

pub(crate) fn artifact_request(body: serde_json::Value) -> shoal_engine::artifact::ArtifactRequest {
    serde_json::from_value(body).expect("artifact request")
}

pub(crate) fn key(task_id: TaskId, run_id: u32, name: &str) -> shoal_store::ArtifactKey {
    shoal_store::ArtifactKey { task_id, run_id, name: name.to_owned() }
}

pub(crate) async fn artifacts_are_recorded_uploaded_listed_and_expired(name: &str, backend: Backend) {
    let store = &backend.store;
    let task_id = id(1);
    create(store, task_id, json!({}), at(0)).await;
    let blob = json!({"storageType": "s3", "expires": "2026-01-01T02:00:00.000Z", "contentType": "text/plain"});
    let before_claim = store
        .run(CreateArtifact { key: key(task_id, 0, "public/a"), request: artifact_request(blob.clone()) }, at(1))
        .await;
    assert!(matches!(before_claim, Err(StoreError::Rejected(Rejection::Input(_)))), "{name}: {before_claim:?}");
    let missing_run = store
        .run(CreateArtifact { key: key(task_id, 3, "public/a"), request: artifact_request(blob.clone()) }, at(1))
        .await;
    assert!(matches!(missing_run, Err(StoreError::Rejected(Rejection::NotFound(_)))), "{name}");

    claim_ids(store, worker(1), at(1)).await;
    let created = store
        .run(CreateArtifact { key: key(task_id, 0, "public/a"), request: artifact_request(blob.clone()) }, at(2))
        .await
        .unwrap()
        .value;
    assert!(!created.present, "{name}: not uploaded yet");
    let error = json!({"storageType": "error", "expires": "2026-01-01T03:00:00.000Z", "reason": "file-missing-on-worker", "message": "no"});
    let error = store
        .run(CreateArtifact { key: key(task_id, 0, "public/b"), request: artifact_request(error) }, at(2))
        .await
        .unwrap()
        .value;
    assert!(error.present, "{name}: an error artifact needs no upload");
    let uploaded = store
        .run(ArtifactUploaded { key: key(task_id, 0, "public/a"), bytes: 1_000, object: Some("o1".into()) }, at(2))
        .await
        .unwrap()
        .value;
    assert!(uploaded.present, "{name}");
    assert_eq!((uploaded.bytes, uploaded.object.as_deref()), (Some(1_000), Some("o1")), "{name}");
    let run_bytes = store.read(move |reads| reads.run_bytes(task_id, 0)).await.unwrap();
    assert_eq!(run_bytes, 1_000, "{name}: a run's bytes are its uploaded blobs'");
    let again = store.run(ArtifactUploaded { key: key(task_id, 0, "public/a"), bytes: 7, object: None }, at(2)).await;
    assert!(matches!(again, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}: bytes are accepted once");
    let repeat = store
        .run(CreateArtifact { key: key(task_id, 0, "public/a"), request: artifact_request(blob) }, at(3))
        .await
        .unwrap()
        .value;
    assert!(repeat.present, "{name}: repeating the creation keeps the upload");
    assert_eq!(repeat.bytes, Some(1_000), "{name}: and its size");
    let stored = store.read(move |reads| reads.artifact(task_id, 0, "public/a")).await.unwrap().unwrap();
    assert_eq!((stored.bytes, stored.object.as_deref()), (Some(1_000), Some("o1")), "{name}: read back");
    let not_blob =
        store.run(ArtifactUploaded { key: key(task_id, 0, "public/b"), bytes: 7, object: None }, at(3)).await;
    assert!(matches!(not_blob, Err(StoreError::Rejected(Rejection::Conflict(_)))), "{name}");

    let page = store.read(move |reads| reads.list_artifacts(task_id, 0, None, 1)).await.unwrap();
    assert_eq!(page.items[0].name, "public/a", "{name}");
    let after = page.continuation.clone();
    let rest = store.read(move |reads| reads.list_artifacts(task_id, 0, after.as_deref(), 5)).await.unwrap();
    let names: Vec<&str> = rest.items.iter().map(|artifact| artifact.name.as_str()).collect();
    assert_eq!(names, vec!["public/b", "public/logs/live.log"], "{name}: the claim made the live log");
    assert_eq!(rest.continuation, None, "{name}");

    let expired = store.read(|reads| reads.expired_artifacts(at(2 * 3600), 10)).await.unwrap();
    let names: Vec<&str> = expired.iter().map(|(k, _)| k.name.as_str()).collect();
    assert_eq!(names, vec!["public/a"], "{name}: only the first has expired");
    let keys = expired.into_iter().map(|(k, _)| k).collect();
    assert_eq!(store.run(ForgetArtifacts { keys }, shoal_engine::Timestamp(0)).await.unwrap().value, 1, "{name}");
    let gone = store.read(move |reads| reads.artifact(task_id, 0, "public/a")).await.unwrap();
    assert!(gone.is_none(), "{name}");

    let late = json!({"storageType": "s3", "expires": "2026-01-01T09:00:00.000Z", "contentType": "text/plain"});
    let _ = store
        .run(CreateArtifact { key: key(task_id, 0, "public/late"), request: artifact_request(late) }, at(3))
        .await
        .unwrap();
    apply(store, task_id, TaskCommand::Resolve { run_id: 0, resolution: Resolution::Completed, stats: None }, at(3))
        .await;
    let after_resolution =
        store.run(ArtifactUploaded { key: key(task_id, 0, "public/late"), bytes: 7, object: None }, at(4)).await;
    assert!(
        matches!(after_resolution, Err(StoreError::Rejected(Rejection::Conflict(_)))),
        "{name}: an upload ending after its run resolved: {after_resolution:?}"
    );
}
