//! The server's data directory: private to its user, and held by one server at a time.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use nix::sys::stat::{Mode, umask};

/// Makes everything this process creates from now on private to its user (files 0600,
/// directories 0700, as PostgreSQL's server does), then makes `data_dir` (0700) and tightens
/// it and what lies directly in it when an earlier start or an operator left them looser: the
/// directory holds the server's signing token, clients' access tokens and tasks' secrets.
pub(crate) fn make_private(data_dir: &Path) -> anyhow::Result<()> {
    umask(Mode::from_bits_truncate(0o077));
    std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    tighten(data_dir, 0o700)?;
    let entries = std::fs::read_dir(data_dir).with_context(|| format!("reading {}", data_dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", data_dir.display()))?;
        let kind = entry.file_type().with_context(|| format!("reading {}", entry.path().display()))?;
        if kind.is_dir() {
            tighten(&entry.path(), 0o700)?;
        } else if kind.is_file() {
            tighten(&entry.path(), 0o600)?;
        }
    }
    Ok(())
}

/// Takes from `path` every permission bit not in `most`, saying so when there were any.
fn tighten(path: &Path, most: u32) -> anyhow::Result<()> {
    let mode = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.permissions().mode();
    if mode & 0o777 & !most == 0 {
        return Ok(());
    }
    let tightened = mode & most;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(tightened))
        .with_context(|| format!("tightening the permissions of {}", path.display()))?;
    tracing::warn!(
        path = %path.display(),
        was = format!("{:o}", mode & 0o777),
        now = format!("{:o}", tightened & 0o777),
        "the data directory was readable by others; tightened"
    );
    Ok(())
}

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
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_loose_directory_is_tightened_and_new_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(data.join("shoal.db"), b"").unwrap();
        std::fs::set_permissions(data.join("shoal.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir(data.join("blobs")).unwrap();
        std::fs::set_permissions(data.join("blobs"), std::fs::Permissions::from_mode(0o775)).unwrap();
        super::make_private(&data).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("shoal.db")), 0o600);
        assert_eq!(mode(&data.join("blobs")), 0o700);
        std::fs::write(data.join("new"), b"").unwrap();
        std::fs::create_dir(data.join("newdir")).unwrap();
        assert_eq!((mode(&data.join("new")), mode(&data.join("newdir"))), (0o600, 0o700));
    }

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
