//! The blob contract on every backend: the local directory, and S3 as a real S3-compatible
//! server (moto's, started here on loopback: `SHOAL_MOTO_SERVER` names its program, else
//! `moto_server` on `PATH`; `./scripts/test.sh` installs it).

#[path = "support/moto.rs"]
mod moto;

use moto::moto;
use shoal_blobs::{BlobKey, Blobs, Stored};
use tokio::io::AsyncReadExt;

fn bucket(endpoint: &str, name: &str) -> Blobs {
    let settings = [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
        ("aws_region", "us-east-1"),
    ];
    let logs = tempfile::tempdir().unwrap().keep();
    Blobs::s3(&format!("s3://{name}/shoal"), &settings, &logs).unwrap()
}

async fn read(blobs: &Blobs, key: &BlobKey<'_>, object: Option<&str>) -> Option<(Vec<u8>, u64)> {
    let mut reader = blobs.open(key, object).await.unwrap()?;
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).await.unwrap();
    Some((bytes, reader.size()))
}

/// What every backend keeps: bytes readable once finished, with their size, large ones
/// (several parts) whole; an aborted upload leaves nothing; delete and delete_task remove.
async fn contract(name: &str, blobs: &Blobs) {
    let key = BlobKey { task_id: "fN1S_sG4TTu5SNmTb0Xd6A", run_id: 0, name: "public/a b/c.txt" };
    let mut writer = blobs.writer(&key).await.unwrap();
    writer.write(b"hello ").await.unwrap();
    writer.write(b"world").await.unwrap();
    let Stored { bytes, object } = writer.finish().await.unwrap();
    assert_eq!(bytes, 11, "{name}");
    let read_back = read(blobs, &key, object.as_deref()).await;
    assert_eq!(read_back, Some((b"hello world".to_vec(), 11)), "{name}");

    // 20 MiB and a bit, written in odd-sized pieces: more than two parts in S3.
    let big_key = BlobKey { name: "public/big.bin", ..key };
    let piece: Vec<u8> = (0..=250u8).cycle().take(1_000_003).collect();
    let mut writer = blobs.writer(&big_key).await.unwrap();
    for _ in 0..21 {
        writer.write(&piece).await.unwrap();
    }
    let big = writer.finish().await.unwrap();
    let (bytes, size) = read(blobs, &big_key, big.object.as_deref()).await.expect("the big blob");
    assert_eq!((size, bytes.len()), (21_000_063, 21_000_063), "{name}");
    assert!(bytes.chunks(1_000_003).all(|chunk| chunk == piece.as_slice()), "{name}: the bytes in order");

    let aborted_key = BlobKey { name: "public/aborted", ..key };
    let mut aborted = blobs.writer(&aborted_key).await.unwrap();
    aborted.write(b"never").await.unwrap();
    aborted.abort().await;

    blobs.delete(&key, object.as_deref()).await.unwrap();
    assert_eq!(read(blobs, &key, object.as_deref()).await, None, "{name}: deleted");
    blobs.delete(&key, object.as_deref()).await.unwrap();

    blobs.append_log(key.task_id, 0, 0, b"log line\n").await.unwrap();
    blobs.delete_task(key.task_id, 1).await.unwrap();
    assert_eq!(read(blobs, &big_key, big.object.as_deref()).await, None, "{name}: the task's bytes are gone");
    assert_eq!(blobs.log_size(key.task_id, 0).await.unwrap(), 0, "{name}: and its log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_directory() {
    let dir = tempfile::tempdir().unwrap();
    contract("local", &Blobs::local(dir.path()).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3() {
    let moto = moto();
    moto.create_bucket("contract").await;
    let blobs = bucket(&moto.endpoint, "contract");
    contract("s3", &blobs).await;

    // Two uploads of one artifact are two objects: neither replaces the other (the store
    // records the one it accepts).
    let key = BlobKey { task_id: "fN1S_sG4TTu5SNmTb0Xd6A", run_id: 1, name: "public/twice" };
    let (mut first, mut second) = (blobs.writer(&key).await.unwrap(), blobs.writer(&key).await.unwrap());
    first.write(b"first").await.unwrap();
    second.write(b"second").await.unwrap();
    let (second, first) = (second.finish().await.unwrap(), first.finish().await.unwrap());
    assert_ne!(first.object, second.object);
    assert_eq!(read(&blobs, &key, first.object.as_deref()).await.unwrap().0, b"first");
    assert_eq!(read(&blobs, &key, second.object.as_deref()).await.unwrap().0, b"second");
    assert_eq!(read(&blobs, &key, None).await, None, "a record without an object is not in the bucket");
}
