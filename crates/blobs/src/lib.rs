//! Where artifact bytes live. [`Blobs`] is a closed enum over backends: a local directory
//! (`local.rs`), or S3-compatible storage for artifacts with live logs in a local directory
//! (`s3.rs`). Readers and writers hide the backend; bytes are written once, and a reader
//! never sees half a blob.

mod local;
mod s3;

use std::io;
use std::path::Path;

pub use local::LocalBlobs;
pub use s3::S3Blobs;

use local::LocalWriter;
use s3::S3Writer;

/// The blob backends.
#[derive(Debug, Clone)]
pub enum Blobs {
    /// Files under a directory.
    Local(LocalBlobs),
    /// Artifacts in a bucket; live logs in a local directory.
    S3 {
        /// The bucket.
        objects: S3Blobs,
        /// Where live logs are kept.
        logs: LocalBlobs,
    },
}

/// A blob being read: its bytes, and how many there are.
pub struct BlobReader {
    bytes: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    size: u64,
}

impl std::fmt::Debug for BlobReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobReader").field("size", &self.size).finish_non_exhaustive()
    }
}

impl BlobReader {
    /// How many bytes the blob holds.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl tokio::io::AsyncRead for BlobReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        self.bytes.as_mut().poll_read(cx, buf)
    }
}

/// An upload in progress; [`BlobWriter::finish`] keeps it, [`BlobWriter::abort`] (or a drop)
/// leaves nothing behind.
#[derive(Debug)]
pub struct BlobWriter {
    inner: Writer,
}

#[derive(Debug)]
enum Writer {
    Local(LocalWriter),
    S3(S3Writer),
}

/// A finished upload: its size, and the object holding it where the backend keeps each
/// upload apart (to be recorded with the artifact, and named to read it back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its bytes.
    pub bytes: u64,
    /// The object, for backends that name each upload (S3); `None` for the local directory.
    pub object: Option<String>,
}

/// What an append to a live log did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The log now has this many bytes (a repeated chunk adds nothing and is not an error).
    Size(u64),
    /// The chunk starts past the end: the log has only this many bytes.
    Gap(u64),
}

/// Names one blob: the artifact `name` of run `run_id` of task `task_id`.
#[derive(Debug, Clone, Copy)]
pub struct BlobKey<'a> {
    /// The task (a slugid).
    pub task_id: &'a str,
    /// The run.
    pub run_id: u32,
    /// The artifact name (any printable ASCII, slashes included).
    pub name: &'a str,
}

impl Blobs {
    /// Blobs stored under `root` (created if missing).
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn local(root: &Path) -> io::Result<Blobs> {
        Ok(Blobs::Local(LocalBlobs::new(root)?))
    }

    /// Artifacts in the bucket of `url` (`s3://bucket[/prefix]`, with `settings`: see
    /// [`S3Blobs::new`]), live logs under `logs` (created if missing).
    ///
    /// # Errors
    /// When the URL or the AWS settings are unusable, or the directory cannot be created.
    pub fn s3(url: &str, settings: &[(&str, &str)], logs: &Path) -> io::Result<Blobs> {
        Ok(Blobs::S3 { objects: S3Blobs::new(url, settings)?, logs: LocalBlobs::new(logs)? })
    }

    fn logs(&self) -> &LocalBlobs {
        match self {
            Blobs::Local(local) | Blobs::S3 { logs: local, .. } => local,
        }
    }

    /// Starts writing the blob `key` (a task id, a run id and an artifact name).
    ///
    /// # Errors
    /// When the upload cannot be started.
    pub async fn writer(&self, key: &BlobKey<'_>) -> io::Result<BlobWriter> {
        let inner = match self {
            Blobs::Local(local) => Writer::Local(local.writer(key).await?),
            Blobs::S3 { objects, .. } => Writer::S3(objects.writer(key).await?),
        };
        Ok(BlobWriter { inner })
    }

    /// Opens the blob `key` for reading (`object` as [`Stored`] named it); `None` when it
    /// does not exist.
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub async fn open(&self, key: &BlobKey<'_>, object: Option<&str>) -> io::Result<Option<BlobReader>> {
        match (self, object) {
            (Blobs::Local(local), _) => local.open(key).await,
            (Blobs::S3 { objects, .. }, Some(object)) => objects.open(key, object).await,
            // Recorded before the bucket was the store: not in it.
            (Blobs::S3 { .. }, None) => Ok(None),
        }
    }

    /// Deletes the blob `key` (`object` as [`Stored`] named it) if it exists.
    ///
    /// # Errors
    /// When it exists but cannot be removed.
    pub async fn delete(&self, key: &BlobKey<'_>, object: Option<&str>) -> io::Result<()> {
        match (self, object) {
            (Blobs::Local(local), _) => local.delete(key).await,
            (Blobs::S3 { objects, .. }, Some(object)) => objects.delete(key, object).await,
            (Blobs::S3 { .. }, None) => Ok(()),
        }
    }

    /// Deletes what is left of a task's bytes: the live logs of its `runs` runs and its
    /// artifacts' bytes (those expire before the task, so normally none, but an upload a
    /// crash left unrecorded may be there).
    ///
    /// # Errors
    /// When something exists but cannot be removed.
    pub async fn delete_task(&self, task_id: &str, runs: u32) -> io::Result<()> {
        self.logs().delete_logs(task_id, runs).await?;
        match self {
            Blobs::Local(local) => local.delete_task(task_id).await,
            Blobs::S3 { objects, .. } => objects.delete_task(task_id).await,
        }
    }

    /// Deletes the blob `key` if it was last written more than `idle` ago; says whether it
    /// did. For bytes a crash left in place without the record that accepts them: an upload
    /// that just put its bytes there is recording them now, and is left alone. (S3 keeps
    /// each upload apart, so nothing is ever in an upload's way there.)
    ///
    /// # Errors
    /// When it exists but cannot be read or removed.
    pub async fn remove_leftover(&self, key: &BlobKey<'_>, idle: std::time::Duration) -> io::Result<bool> {
        match self {
            Blobs::Local(local) => local.remove_leftover(key, idle).await,
            Blobs::S3 { .. } => Ok(false),
        }
    }

    /// Deletes temporary upload files not written to for `idle` (what a process killed
    /// mid-upload left behind); says how many. Uploads in progress, this server's or another
    /// sharing the directory, keep writing theirs, so an idle time far above any pause in an
    /// upload leaves them alone. (A bucket's unfinished multipart uploads are its lifecycle
    /// rule's to remove.)
    ///
    /// # Errors
    /// When a directory cannot be read.
    pub fn remove_stale_uploads(&self, idle: std::time::Duration) -> io::Result<usize> {
        match self {
            Blobs::Local(local) => local.remove_stale_uploads(idle),
            Blobs::S3 { .. } => Ok(0),
        }
    }

    /// Appends `bytes`, which belong at `offset`, to the live log of a run, durably.
    /// Re-sent bytes (a retry after a lost answer) are skipped, so appends are idempotent.
    ///
    /// # Errors
    /// When the log cannot be written.
    pub async fn append_log(&self, task_id: &str, run_id: u32, offset: u64, bytes: &[u8]) -> io::Result<Appended> {
        self.logs().append_log(task_id, run_id, offset, bytes).await
    }

    /// The size of a run's live log (0 before the first chunk).
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub async fn log_size(&self, task_id: &str, run_id: u32) -> io::Result<u64> {
        self.logs().log_size(task_id, run_id).await
    }

    /// Up to `max` bytes of a run's live log from `offset` (fewer at its end; none before
    /// the first chunk).
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub async fn read_log(&self, task_id: &str, run_id: u32, offset: u64, max: usize) -> io::Result<Vec<u8>> {
        self.logs().read_log(task_id, run_id, offset, max).await
    }
}

impl BlobWriter {
    /// Appends bytes.
    ///
    /// # Errors
    /// When the write fails.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.inner {
            Writer::Local(writer) => writer.write(bytes).await,
            Writer::S3(writer) => writer.write(bytes).await,
        }
    }

    /// Makes the blob durable and readable. On the local directory it takes the blob's name
    /// only if the name is free (bytes are written once); in S3 it is an object of its own,
    /// and the artifact's record says which.
    ///
    /// # Errors
    /// `AlreadyExists` when the local name holds a blob; otherwise when the bytes cannot be
    /// stored.
    pub async fn finish(self) -> io::Result<Stored> {
        match self.inner {
            Writer::Local(writer) => Ok(Stored { bytes: writer.finish().await?, object: None }),
            Writer::S3(writer) => {
                let (bytes, object) = writer.finish().await?;
                Ok(Stored { bytes, object: Some(object) })
            }
        }
    }

    /// Gives the upload up: nothing of it is kept.
    pub async fn abort(self) {
        match self.inner {
            Writer::Local(writer) => writer.abort().await,
            Writer::S3(writer) => writer.abort().await,
        }
    }
}

/// Longest file name the file systems Shoal runs on take (Linux's NAME_MAX).
const MAX_FILE_NAME: usize = 255;

/// One file name per artifact name: everything but `[A-Za-z0-9_.-]` is percent-escaped, so
/// slashes cannot leave the run's directory and no two names collide. A name whose escaped
/// form would be longer than a file name may be is stored under `h` and the SHA-256 of the
/// name instead (escaped names start with `a`, so the two forms never meet).
pub(crate) fn file_name(name: &str) -> String {
    let escaped = escaped_name(name);
    if escaped.len() <= MAX_FILE_NAME {
        return escaped;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let mut res = String::with_capacity(65);
    res.push('h');
    for byte in digest {
        res.push_str(&format!("{byte:02x}"));
    }
    res
}

fn escaped_name(name: &str) -> String {
    let mut res = String::with_capacity(name.len() + 1);
    // A leading marker keeps names like `.` and `..` ordinary files.
    res.push('a');
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"_.-".contains(&byte) {
            res.push(byte as char);
        } else {
            res.push_str(&format!("%{byte:02X}"));
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::local::next_upload;
    use super::*;

    impl BlobWriter {
        fn temp(&self) -> &Path {
            match &self.inner {
                Writer::Local(writer) => &writer.temp,
                Writer::S3(_) => unreachable!("local tests"),
            }
        }
    }

    #[tokio::test]
    async fn a_name_too_long_for_a_file_is_stored_under_a_fixed_length_name() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        // 255 bytes that each escape to three: far past the file system's 255.
        let long = "%".repeat(255);
        assert_eq!(file_name(&long).len(), 65);
        assert_ne!(file_name(&long), file_name(&"%".repeat(254)), "different names, different files");
        assert!(file_name("public/a").starts_with('a'), "short names are escaped as before");
        let key = BlobKey { task_id: "fN1S_sG4TTu5SNmTb0Xd6A", run_id: 0, name: &long };
        let mut writer = blobs.writer(&key).await.unwrap();
        writer.write(b"bytes").await.unwrap();
        writer.finish().await.unwrap();
        let reader = blobs.open(&key, None).await.unwrap().expect("stored");
        assert_eq!(reader.size(), 5);
    }

    #[tokio::test]
    async fn stale_temporary_uploads_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        let key = |name| BlobKey { task_id: "fN1S_sG4TTu5SNmTb0Xd6A", run_id: 0, name };
        // An upload left by a killed process (written to two hours ago), and one in progress.
        let left = blobs.writer(&key("public/left")).await.unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let old = std::time::SystemTime::now() - 2 * hour;
        std::fs::File::options().write(true).open(left.temp()).unwrap().set_modified(old).unwrap();
        let mut live = blobs.writer(&key("public/live")).await.unwrap();
        let mut done = blobs.writer(&key("public/done")).await.unwrap();
        done.write(b"x").await.unwrap();
        done.finish().await.unwrap();
        assert_eq!(blobs.remove_stale_uploads(hour).unwrap(), 1);
        assert!(!left.temp().exists(), "the stale upload is gone");
        assert!(live.temp().exists(), "the upload in progress stays");
        live.write(b"y").await.unwrap();
        live.finish().await.unwrap();
        assert!(blobs.open(&key("public/done"), None).await.unwrap().is_some(), "finished blobs are kept");
        assert_eq!(blobs.remove_stale_uploads(hour).unwrap(), 0);
        drop(left);
    }

    #[tokio::test]
    async fn writes_appear_only_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        let key = BlobKey { task_id: "t", run_id: 0, name: "public/../logs/a b.txt" };
        let mut writer = blobs.writer(&key).await.unwrap();
        writer.write(b"hello ").await.unwrap();
        writer.write(b"world").await.unwrap();
        assert!(blobs.open(&key, None).await.unwrap().is_none(), "not visible before finish");
        assert_eq!(writer.finish().await.unwrap(), Stored { bytes: 11, object: None });
        let mut reader = blobs.open(&key, None).await.unwrap().unwrap();
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!((text.as_str(), reader.size()), ("hello world", 11));
        let run_dir = dir.path().join("t").join("0");
        assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), 1, "the name stayed inside its run's directory");
        blobs.delete(&key, None).await.unwrap();
        assert!(blobs.open(&key, None).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn the_first_upload_to_finish_keeps_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        let key = BlobKey { task_id: "t", run_id: 0, name: "public/a" };
        let mut first = blobs.writer(&key).await.unwrap();
        let mut second = blobs.writer(&key).await.unwrap();
        first.write(b"first").await.unwrap();
        second.write(b"second").await.unwrap();
        second.finish().await.unwrap();
        let refused = first.finish().await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::AlreadyExists);
        let mut reader = blobs.open(&key, None).await.unwrap().unwrap();
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "second");
        let run_dir = dir.path().join("t").join("0");
        assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), 1, "no temporary file is left");
        let hour = std::time::Duration::from_secs(3600);
        assert!(!blobs.remove_leftover(&key, hour).await.unwrap(), "fresh bytes are left alone");
        assert!(blobs.remove_leftover(&key, std::time::Duration::ZERO).await.unwrap());
        assert!(blobs.open(&key, None).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_upload_never_takes_a_temporary_file_another_server_made() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        let key = BlobKey { task_id: "t", run_id: 2, name: "x" };
        let run_dir = dir.path().join("t").join("2");
        std::fs::create_dir_all(&run_dir).unwrap();
        // The next names this process would use, taken by a server elsewhere with its pid.
        let next = next_upload();
        let theirs: Vec<_> =
            (next + 1..next + 200).map(|n| run_dir.join(format!(".upload-{}-{n}", std::process::id()))).collect();
        for path in &theirs {
            std::fs::write(path, b"theirs").unwrap();
        }
        let mut writer = blobs.writer(&key).await.unwrap();
        writer.write(b"mine").await.unwrap();
        writer.finish().await.unwrap();
        for path in &theirs {
            assert_eq!(std::fs::read(path).unwrap(), b"theirs", "{}", path.display());
        }
        let mut reader = blobs.open(&key, None).await.unwrap().unwrap();
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "mine");
    }

    #[tokio::test]
    async fn an_abandoned_upload_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        let key = BlobKey { task_id: "t", run_id: 1, name: "x" };
        let mut writer = blobs.writer(&key).await.unwrap();
        writer.write(b"partial").await.unwrap();
        drop(writer);
        assert_eq!(std::fs::read_dir(dir.path().join("t").join("1")).unwrap().count(), 0);
        let mut aborted = blobs.writer(&key).await.unwrap();
        aborted.write(b"partial").await.unwrap();
        aborted.abort().await;
        assert_eq!(std::fs::read_dir(dir.path().join("t").join("1")).unwrap().count(), 0, "aborted");
        assert!(blobs.open(&key, None).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn log_appends_are_idempotent_and_refuse_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::local(dir.path()).unwrap();
        assert_eq!(blobs.log_size("t", 0).await.unwrap(), 0);
        assert!(blobs.read_log("t", 0, 0, 100).await.unwrap().is_empty());
        assert_eq!(blobs.append_log("t", 0, 0, b"hello ").await.unwrap(), Appended::Size(6));
        assert_eq!(blobs.append_log("t", 0, 0, b"hello ").await.unwrap(), Appended::Size(6), "a resend adds nothing");
        assert_eq!(blobs.append_log("t", 0, 3, b"lo world").await.unwrap(), Appended::Size(11), "overlap is skipped");
        assert_eq!(blobs.append_log("t", 0, 20, b"later").await.unwrap(), Appended::Gap(11));
        assert_eq!(blobs.read_log("t", 0, 0, 100).await.unwrap(), b"hello world");
        assert_eq!(blobs.read_log("t", 0, 6, 3).await.unwrap(), b"wor", "a window of it");
        assert_eq!(blobs.log_size("t", 0).await.unwrap(), 11);
    }

    #[test]
    fn file_names_are_distinct_and_flat() {
        assert_eq!(file_name("public/a.txt"), "apublic%2Fa.txt");
        assert_ne!(file_name("a/b"), file_name("a%2Fb"));
        assert_eq!(file_name(".."), "a..");
    }
}
