//! Where artifact bytes live. [`Blobs`] is a closed enum over backends; today a local
//! directory under the data dir. Writes are atomic: bytes go to a temporary file that is
//! renamed into place only once complete, so a reader never sees half an artifact.

use std::io;
use std::path::{Path, PathBuf};

use tokio::fs::File;
use tokio::io::AsyncWriteExt;

/// The blob backends.
#[derive(Debug, Clone)]
pub enum Blobs {
    /// Files under a directory.
    Local(LocalBlobs),
}

/// Blobs as files under `root`, one directory per task and run.
#[derive(Debug, Clone)]
pub struct LocalBlobs {
    root: PathBuf,
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
    async fn of_file(path: &Path) -> io::Result<Option<BlobReader>> {
        match File::open(path).await {
            Ok(file) => {
                let size = file.metadata().await?.len();
                Ok(Some(BlobReader { bytes: Box::pin(file), size }))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

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
    file: File,
    temp: PathBuf,
    target: PathBuf,
    written: u64,
    finished: bool,
}

impl Blobs {
    /// Blobs stored under `root` (created if missing).
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn local(root: &Path) -> io::Result<Blobs> {
        std::fs::create_dir_all(root.join(LIVE_DIR))?;
        Ok(Blobs::Local(LocalBlobs { root: root.to_path_buf() }))
    }

    /// Starts writing the blob `key` (a task id, a run id and an artifact name).
    ///
    /// # Errors
    /// When the file cannot be created.
    pub async fn writer(&self, key: &BlobKey<'_>) -> io::Result<BlobWriter> {
        match self {
            Blobs::Local(local) => {
                let target = local.path(key);
                let dir = target.parent().unwrap_or(&local.root).to_path_buf();
                tokio::fs::create_dir_all(&dir).await?;
                // Created only if new: servers on other machines sharing this directory may
                // have the same process id (each the first process of its container).
                loop {
                    let temp = dir.join(format!("{UPLOAD_PREFIX}{}-{}", std::process::id(), next_upload()));
                    match tokio::fs::OpenOptions::new().write(true).create_new(true).open(&temp).await {
                        Ok(file) => return Ok(BlobWriter { file, temp, target, written: 0, finished: false }),
                        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(err) => return Err(err),
                    }
                }
            }
        }
    }

    /// Opens the blob `key` for reading; `None` when it does not exist.
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub async fn open(&self, key: &BlobKey<'_>) -> io::Result<Option<BlobReader>> {
        match self {
            Blobs::Local(local) => BlobReader::of_file(&local.path(key)).await,
        }
    }

    /// Deletes what is left of a task's files: the live logs of its `runs` runs and its
    /// directory of artifact bytes (those expire before the task, so it is normally empty).
    ///
    /// # Errors
    /// When something exists but cannot be removed.
    pub async fn delete_task(&self, task_id: &str, runs: u32) -> io::Result<()> {
        let gone = |res: io::Result<()>| match res {
            Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        };
        match self {
            Blobs::Local(local) => {
                for run_id in 0..runs {
                    gone(tokio::fs::remove_file(local.log_path(task_id, run_id)).await)?;
                }
                gone(tokio::fs::remove_dir_all(local.root.join(task_id)).await)
            }
        }
    }

    /// Deletes the blob `key` if it was last written more than `idle` ago; says whether it
    /// did. For bytes a crash left in place without the record that accepts them: an upload
    /// that just put its bytes there is recording them now, and is left alone.
    ///
    /// # Errors
    /// When it exists but cannot be read or removed.
    pub async fn remove_leftover(&self, key: &BlobKey<'_>, idle: std::time::Duration) -> io::Result<bool> {
        match self {
            Blobs::Local(local) => {
                let path = local.path(key);
                let modified = match tokio::fs::metadata(&path).await {
                    Ok(metadata) => metadata.modified()?,
                    Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
                    Err(err) => return Err(err),
                };
                if modified.elapsed().unwrap_or_default() < idle {
                    return Ok(false);
                }
                tokio::fs::remove_file(&path).await?;
                Ok(true)
            }
        }
    }

    /// Deletes the blob `key` if it exists.
    ///
    /// # Errors
    /// When it exists but cannot be removed.
    pub async fn delete(&self, key: &BlobKey<'_>) -> io::Result<()> {
        match self {
            Blobs::Local(local) => match tokio::fs::remove_file(local.path(key)).await {
                Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            },
        }
    }
}

impl Blobs {
    /// Deletes temporary upload files not written to for `idle` (what a process killed
    /// mid-upload left behind); says how many. Uploads in progress, this server's or another
    /// sharing the directory, keep writing theirs, so an idle time far above any pause in an
    /// upload leaves them alone.
    ///
    /// # Errors
    /// When a directory cannot be read.
    pub fn remove_stale_uploads(&self, idle: std::time::Duration) -> io::Result<usize> {
        match self {
            Blobs::Local(local) => {
                let now = std::time::SystemTime::now();
                let mut n_removed = 0;
                // <root>/<taskId>/<runId>/.upload-*; the live logs' directory holds no uploads.
                for task in std::fs::read_dir(&local.root)? {
                    let task = task?;
                    if task.file_name() == LIVE_DIR || !task.file_type()?.is_dir() {
                        continue;
                    }
                    for run in std::fs::read_dir(task.path())? {
                        let run = run?;
                        if !run.file_type()?.is_dir() {
                            continue;
                        }
                        for file in std::fs::read_dir(run.path())? {
                            let file = file?;
                            let stale = file.file_name().to_string_lossy().starts_with(UPLOAD_PREFIX)
                                && file.metadata()?.modified()?.checked_add(idle).is_some_and(|at| at < now);
                            if stale {
                                std::fs::remove_file(file.path())?;
                                n_removed += 1;
                            }
                        }
                    }
                }
                Ok(n_removed)
            }
        }
    }
}

/// What an append to a live log did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The log now has this many bytes (a repeated chunk adds nothing and is not an error).
    Size(u64),
    /// The chunk starts past the end: the log has only this many bytes.
    Gap(u64),
}

impl Blobs {
    /// Appends `bytes`, which belong at `offset`, to the live log of a run, durably.
    /// Re-sent bytes (a retry after a lost answer) are skipped, so appends are idempotent.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub async fn append_log(&self, task_id: &str, run_id: u32, offset: u64, bytes: &[u8]) -> io::Result<Appended> {
        match self {
            Blobs::Local(local) => {
                let path = local.log_path(task_id, run_id);
                let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(&path).await?;
                let size = file.metadata().await?.len();
                if offset > size {
                    return Ok(Appended::Gap(size));
                }
                let skip = usize::try_from(size - offset).unwrap_or(usize::MAX).min(bytes.len());
                let fresh = &bytes[skip..];
                if !fresh.is_empty() {
                    file.write_all(fresh).await?;
                    file.sync_data().await?;
                }
                Ok(Appended::Size(size + fresh.len() as u64))
            }
        }
    }

    /// The size of a run's live log (0 before the first chunk).
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub async fn log_size(&self, task_id: &str, run_id: u32) -> io::Result<u64> {
        match self {
            Blobs::Local(local) => match tokio::fs::metadata(local.log_path(task_id, run_id)).await {
                Ok(metadata) => Ok(metadata.len()),
                Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
                Err(err) => Err(err),
            },
        }
    }

    /// Up to `max` bytes of a run's live log from `offset` (fewer at its end; none before
    /// the first chunk).
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub async fn read_log(&self, task_id: &str, run_id: u32, offset: u64, max: usize) -> io::Result<Vec<u8>> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        match self {
            Blobs::Local(local) => {
                let mut file = match File::open(local.log_path(task_id, run_id)).await {
                    Ok(file) => file,
                    Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(err) => return Err(err),
                };
                file.seek(io::SeekFrom::Start(offset)).await?;
                let mut buf = Vec::with_capacity(max.min(1 << 20));
                file.take(max as u64).read_to_end(&mut buf).await?;
                Ok(buf)
            }
        }
    }
}

/// How temporary upload files begin (escaped artifact names begin with `a` or `h`).
const UPLOAD_PREFIX: &str = ".upload-";

/// The directory of live logs, under the root (task ids never contain a `.`).
const LIVE_DIR: &str = ".live";

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

impl LocalBlobs {
    fn path(&self, key: &BlobKey<'_>) -> PathBuf {
        self.root.join(key.task_id).join(key.run_id.to_string()).join(file_name(key.name))
    }

    /// Live logs are files in one directory, one per run: making directories per run costs
    /// inodes that ext4 allocates slowly when many were recently deleted.
    fn log_path(&self, task_id: &str, run_id: u32) -> PathBuf {
        self.root.join(LIVE_DIR).join(format!("{task_id}-{run_id}.log"))
    }
}

/// Longest file name the file systems Shoal runs on take (Linux's NAME_MAX).
const MAX_FILE_NAME: usize = 255;

/// One file name per artifact name: everything but `[A-Za-z0-9_.-]` is percent-escaped, so
/// slashes cannot leave the run's directory and no two names collide. A name whose escaped
/// form would be longer than a file name may be is stored under `h` and the SHA-256 of the
/// name instead (escaped names start with `a`, so the two forms never meet).
fn file_name(name: &str) -> String {
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

fn next_upload() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl BlobWriter {
    /// Appends bytes.
    ///
    /// # Errors
    /// When the write fails.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes).await?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Makes the blob durable and visible under its key, unless a blob is there already:
    /// bytes are written once, so a second upload never replaces the first's (a hard link
    /// made only if the name is free, where a rename would replace). Returns its size.
    ///
    /// # Errors
    /// `AlreadyExists` when the key holds a blob; otherwise when flushing or linking fails.
    pub async fn finish(mut self) -> io::Result<u64> {
        self.file.sync_all().await?;
        tokio::fs::hard_link(&self.temp, &self.target).await?;
        self.finished = true;
        // The blob is in place; a temporary name left by a failure here is swept at start.
        let _ = tokio::fs::remove_file(&self.temp).await;
        Ok(self.written)
    }
}

impl BlobWriter {
    /// Gives the upload up: nothing of it is kept.
    pub async fn abort(mut self) {
        self.finished = true;
        let _ = tokio::fs::remove_file(&self.temp).await;
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

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
        let reader = blobs.open(&key).await.unwrap().expect("stored");
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
        std::fs::File::options().write(true).open(&left.temp).unwrap().set_modified(old).unwrap();
        let mut live = blobs.writer(&key("public/live")).await.unwrap();
        let mut done = blobs.writer(&key("public/done")).await.unwrap();
        done.write(b"x").await.unwrap();
        done.finish().await.unwrap();
        assert_eq!(blobs.remove_stale_uploads(hour).unwrap(), 1);
        assert!(!left.temp.exists(), "the stale upload is gone");
        assert!(live.temp.exists(), "the upload in progress stays");
        live.write(b"y").await.unwrap();
        live.finish().await.unwrap();
        assert!(blobs.open(&key("public/done")).await.unwrap().is_some(), "finished blobs are kept");
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
        assert!(blobs.open(&key).await.unwrap().is_none(), "not visible before finish");
        assert_eq!(writer.finish().await.unwrap(), 11);
        let mut reader = blobs.open(&key).await.unwrap().unwrap();
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!((text.as_str(), reader.size()), ("hello world", 11));
        let run_dir = dir.path().join("t").join("0");
        assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), 1, "the name stayed inside its run's directory");
        blobs.delete(&key).await.unwrap();
        assert!(blobs.open(&key).await.unwrap().is_none());
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
        let mut reader = blobs.open(&key).await.unwrap().unwrap();
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "second");
        let run_dir = dir.path().join("t").join("0");
        assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), 1, "no temporary file is left");
        let hour = std::time::Duration::from_secs(3600);
        assert!(!blobs.remove_leftover(&key, hour).await.unwrap(), "fresh bytes are left alone");
        assert!(blobs.remove_leftover(&key, std::time::Duration::ZERO).await.unwrap());
        assert!(blobs.open(&key).await.unwrap().is_none());
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
        let mut reader = blobs.open(&key).await.unwrap().unwrap();
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
        assert!(blobs.open(&key).await.unwrap().is_none());
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
