//! The server's hold on its data directory.

use std::path::Path;

use anyhow::Context;

/// Locks `data_dir` for this server: two servers on one embedded database would each keep
/// their own index of pending runs and hand the same run out twice. Other processes (`shoal
/// expire --dry-run`) still read it. The kernel lets go of the lock when the process ends,
/// however it ends.
pub(crate) fn lock(data_dir: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let path = data_dir.join("server.lock");
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another Shoal server is running on the data directory {} (it holds {}); \
             several servers need a shared PostgreSQL database (--database)",
            data_dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(err)) => Err(err).with_context(|| format!("locking {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_holder_at_a_time_and_free_again_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let held = super::lock(&data).unwrap();
        let refused = super::lock(&data).unwrap_err().to_string();
        assert!(refused.contains("another Shoal server is running on the data directory"), "{refused}");
        drop(held);
        super::lock(&data).unwrap();
    }
}
