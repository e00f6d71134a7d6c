//! Blobs as files under a directory, one per task and run
//! (`<root>/<taskId>/<runId>/<escaped name>`), and every live log (`<root>/.live`). Writes are
//! atomic: bytes go to a temporary file linked into place only once complete and only if the
//! name is free, so a reader never sees half an artifact and bytes are written once.

use std::io;
use std::path::{Path, PathBuf};

use tokio::fs::File;
use tokio::io::AsyncWriteExt;

use crate::{Appended, BlobKey, BlobReader, file_name};

/// How temporary upload files begin (escaped artifact names begin with `a` or `h`).
pub(crate) const UPLOAD_PREFIX: &str = ".upload-";

/// The directory of live logs, under the root (task ids never contain a `.`).
pub(crate) const LIVE_DIR: &str = ".live";

/// Blobs as files under `root`.
#[derive(Debug, Clone)]
pub struct LocalBlobs {
    pub(crate) root: PathBuf,
}

/// An upload to a file in progress; dropped unfinished it leaves nothing behind.
#[derive(Debug)]
pub(crate) struct LocalWriter {
    file: File,
    pub(crate) temp: PathBuf,
    target: PathBuf,
    written: u64,
    finished: bool,
}

fn gone(res: io::Result<()>) -> io::Result<()> {
    match res {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

impl LocalBlobs {
    /// Blobs under `root` (made if missing).
    pub(crate) fn new(root: &Path) -> io::Result<LocalBlobs> {
        std::fs::create_dir_all(root.join(LIVE_DIR))?;
        Ok(LocalBlobs { root: root.to_path_buf() })
    }

    pub(crate) fn path(&self, key: &BlobKey<'_>) -> PathBuf {
        self.root.join(key.task_id).join(key.run_id.to_string()).join(file_name(key.name))
    }

    /// Live logs are files in one directory, one per run: making directories per run costs
    /// inodes that ext4 allocates slowly when many were recently deleted.
    fn log_path(&self, task_id: &str, run_id: u32) -> PathBuf {
        self.root.join(LIVE_DIR).join(format!("{task_id}-{run_id}.log"))
    }

    pub(crate) async fn writer(&self, key: &BlobKey<'_>) -> io::Result<LocalWriter> {
        let target = self.path(key);
        let dir = target.parent().unwrap_or(&self.root).to_path_buf();
        tokio::fs::create_dir_all(&dir).await?;
        // Created only if new: servers on other machines sharing this directory may have the
        // same process id (each the first process of its container).
        loop {
            let temp = dir.join(format!("{UPLOAD_PREFIX}{}-{}", std::process::id(), next_upload()));
            match tokio::fs::OpenOptions::new().write(true).create_new(true).open(&temp).await {
                Ok(file) => return Ok(LocalWriter { file, temp, target, written: 0, finished: false }),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err),
            }
        }
    }

    pub(crate) async fn open(&self, key: &BlobKey<'_>) -> io::Result<Option<BlobReader>> {
        match File::open(self.path(key)).await {
            Ok(file) => {
                let size = file.metadata().await?.len();
                Ok(Some(BlobReader { bytes: Box::pin(file), size }))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    pub(crate) async fn delete(&self, key: &BlobKey<'_>) -> io::Result<()> {
        gone(tokio::fs::remove_file(self.path(key)).await)
    }

    /// Deletes the live logs of a task's `runs` runs.
    pub(crate) async fn delete_logs(&self, task_id: &str, runs: u32) -> io::Result<()> {
        for run_id in 0..runs {
            gone(tokio::fs::remove_file(self.log_path(task_id, run_id)).await)?;
        }
        Ok(())
    }

    /// Deletes a task's directory of artifact bytes.
    pub(crate) async fn delete_task(&self, task_id: &str) -> io::Result<()> {
        gone(tokio::fs::remove_dir_all(self.root.join(task_id)).await)
    }

    pub(crate) async fn remove_leftover(&self, key: &BlobKey<'_>, idle: std::time::Duration) -> io::Result<bool> {
        let path = self.path(key);
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

    pub(crate) fn remove_stale_uploads(&self, idle: std::time::Duration) -> io::Result<usize> {
        let now = std::time::SystemTime::now();
        let mut n_removed = 0;
        // <root>/<taskId>/<runId>/.upload-*; the live logs' directory holds no uploads.
        for task in std::fs::read_dir(&self.root)? {
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

    pub(crate) async fn append_log(
        &self,
        task_id: &str,
        run_id: u32,
        offset: u64,
        bytes: &[u8],
    ) -> io::Result<Appended> {
        let path = self.log_path(task_id, run_id);
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(&path).await?;
        let size = file.metadata().await?.len();
        let skip = match shoal_engine::artifact::log_append_skip(size, offset, bytes.len()) {
            Ok(skip) => skip,
            Err(size) => return Ok(Appended::Gap(size)),
        };
        let fresh = &bytes[skip..];
        if !fresh.is_empty() {
            file.write_all(fresh).await?;
            file.sync_data().await?;
        }
        Ok(Appended::Size(size + fresh.len() as u64))
    }

    pub(crate) async fn log_size(&self, task_id: &str, run_id: u32) -> io::Result<u64> {
        match tokio::fs::metadata(self.log_path(task_id, run_id)).await {
            Ok(metadata) => Ok(metadata.len()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(err) => Err(err),
        }
    }

    pub(crate) async fn read_log(&self, task_id: &str, run_id: u32, offset: u64, max: usize) -> io::Result<Vec<u8>> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let mut file = match File::open(self.log_path(task_id, run_id)).await {
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

pub(crate) fn next_upload() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl LocalWriter {
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes).await?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Makes the blob durable and visible under its key, unless a blob is there already (a
    /// hard link made only if the name is free, where a rename would replace).
    pub(crate) async fn finish(mut self) -> io::Result<u64> {
        self.file.sync_all().await?;
        tokio::fs::hard_link(&self.temp, &self.target).await?;
        self.finished = true;
        // The blob is in place; a temporary name left by a failure here is swept at start.
        let _ = tokio::fs::remove_file(&self.temp).await;
        Ok(self.written)
    }

    pub(crate) async fn abort(mut self) {
        self.finished = true;
        let _ = tokio::fs::remove_file(&self.temp).await;
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}
