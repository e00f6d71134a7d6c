//! One run's root made of its image: the unpacked image (shared, read-only) below, the run's
//! own directory above (an overlay), so that nothing a task writes reaches the next. The
//! overlay is mounted in a mount namespace of the command's own, just before `bwrap` starts,
//! and goes with it; the worker reads what the run left (its artifacts) through the same
//! layers itself, without mounting: whiteouts hide, opaque directories cover, and no link
//! is followed.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A run's layers: what it wrote over its image.
#[derive(Debug, Clone)]
pub(crate) struct Overlay {
    /// The unpacked image's root.
    pub(crate) lower: PathBuf,
    /// The run's writes (overlayfs's upper directory).
    pub(crate) upper: PathBuf,
    /// overlayfs's work directory.
    pub(crate) work: PathBuf,
    /// Where the overlay is mounted (in the command's own mount namespace only).
    pub(crate) at: PathBuf,
}

/// What a mount point in the run's root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    Directory,
    File,
}

impl Overlay {
    /// The layers of a run in `run_dir` (empty) over the image root `lower`.
    pub(crate) fn new(lower: &Path, run_dir: &Path) -> Overlay {
        Overlay {
            lower: lower.to_path_buf(),
            upper: run_dir.join("upper"),
            work: run_dir.join("work"),
            at: run_dir.join("root"),
        }
    }

    /// Makes the run's directories: the image's directories of users other than root
    /// (`owned`) given to `user`, and each mount point in `points` that the image lacks.
    ///
    /// # Errors
    /// A mount point the image has as a link or a file on the way (as a message naming it),
    /// or the worker failing to write.
    pub(crate) fn prepare(&self, owned: &[String], user: u32, points: &[(String, Point)]) -> Result<(), String> {
        for dir in [&self.upper, &self.work, &self.at] {
            std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(|err| io(dir, &err))?;
        }
        for dir in owned {
            if self.make(dir, Point::Directory, owned, user)? {
                std::os::unix::fs::lchown(self.upper.join(dir), Some(user), Some(user))
                    .map_err(|err| io(&self.upper.join(dir), &err))?;
            }
        }
        for (path, point) in points {
            self.make(path, *point, owned, user)?;
        }
        Ok(())
    }

    /// Makes `rel` in the upper directory unless the image has it (with what is above it,
    /// as the image has them); answers whether it is (now) a directory of the upper one.
    fn make(&self, rel: &str, point: Point, owned: &[String], user: u32) -> Result<bool, String> {
        let parts: Vec<&str> = rel.split('/').collect();
        let mut prefix = String::new();
        for (idx, part) in parts.iter().enumerate() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            let last = idx + 1 == parts.len();
            let (lower, upper) = (self.lower.join(&prefix), self.upper.join(&prefix));
            if std::fs::symlink_metadata(&upper).is_ok_and(|metadata| metadata.is_dir()) {
                continue;
            }
            match std::fs::symlink_metadata(&lower) {
                Ok(metadata) if metadata.is_dir() => {
                    // Needed in the upper directory only to hold what is made below it (or to
                    // be given to the task's user); then as the image has it.
                    if last && !owned.iter().any(|dir| dir == rel) {
                        return Ok(false);
                    }
                    std::fs::DirBuilder::new().mode(0o700).create(&upper).map_err(|err| io(&upper, &err))?;
                    std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(metadata.mode() & 0o7777))
                        .map_err(|err| io(&upper, &err))?;
                    let owner = if owned.contains(&prefix) { user } else { metadata.uid() };
                    std::os::unix::fs::lchown(&upper, Some(owner), Some(owner)).map_err(|err| io(&upper, &err))?;
                }
                Ok(metadata) if last && point == Point::File && metadata.is_file() => return Ok(false),
                Ok(_) => {
                    return Err(format!("/{prefix} is a link or a file in the image, where a directory is needed"));
                }
                Err(_) if last && point == Point::File => {
                    std::fs::File::create_new(&upper).map_err(|err| io(&upper, &err))?;
                    return Ok(false);
                }
                Err(_) => std::fs::DirBuilder::new().mode(0o755).create(&upper).map_err(|err| io(&upper, &err))?,
            }
        }
        Ok(true)
    }

    /// The options overlayfs is mounted with (renamed directories copied, not redirected, so
    /// that the worker can read the layers as the kernel does).
    pub(crate) fn options(&self) -> Result<CString, String> {
        let paths = [&self.lower, &self.upper, &self.work].map(|path| path.to_string_lossy().into_owned());
        if paths.iter().any(|path| path.contains([',', ':', '\\'])) {
            return Err(format!("the work directory's path ({}) may not contain `,`, `:` or `\\`", paths[1]));
        }
        let [lower, upper, work] = paths;
        CString::new(format!(
            "lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,index=off,metacopy=off,xino=off"
        ))
        .map_err(|_| "the work directory's path has a NUL".to_owned())
    }

    /// The file that shows at `rel` in the run's root, reached without a link.
    pub(crate) fn file(&self, rel: &str) -> Option<PathBuf> {
        match self.find(rel)? {
            (path, false) => Some(path),
            (_, true) => None,
        }
    }

    /// Every file under the directory that shows at `rel`, with its path below it.
    pub(crate) fn files_under(&self, rel: &str) -> Option<Vec<(PathBuf, String)>> {
        let (_, true) = self.find(rel)? else { return None };
        let (upper, lower) = self.visible(rel);
        let mut files = Vec::new();
        walk(upper.as_deref(), lower.as_deref(), "", &mut files);
        files.sort_by(|a, b| a.1.cmp(&b.1));
        Some(files)
    }

    /// What shows at `rel`: its host path and whether it is a directory; `None` when nothing
    /// does, or when a link is on the way.
    fn find(&self, rel: &str) -> Option<(PathBuf, bool)> {
        let (upper, lower) = self.visible(rel);
        for path in [upper, lower].into_iter().flatten() {
            match std::fs::symlink_metadata(&path) {
                Ok(metadata) if metadata.is_dir() => return Some((path, true)),
                Ok(metadata) if metadata.is_file() => return Some((path, false)),
                Ok(_) => return None,
                Err(_) => {}
            }
        }
        None
    }

    /// The paths of `rel` in each layer that still shows there (`rel` itself unchecked).
    fn visible(&self, rel: &str) -> (Option<PathBuf>, Option<PathBuf>) {
        let (mut upper, mut lower) = (Some(self.upper.clone()), Some(self.lower.clone()));
        for part in rel.split('/').filter(|part| !part.is_empty() && *part != ".") {
            for layer in [&mut upper, &mut lower] {
                // A directory on the way, not a link, or the layer shows nothing below.
                if layer.as_ref().is_some_and(|dir| !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())) {
                    *layer = None;
                }
            }
            if upper.as_deref().is_some_and(is_opaque) {
                lower = None;
            }
            upper = upper.map(|dir| dir.join(part));
            lower = lower.map(|dir| dir.join(part));
            if upper.as_deref().is_some_and(|path| is_whiteout(path) || is_link(path)) {
                return (None, None);
            }
            if upper.as_deref().is_some_and(|path| std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir())) {
                lower = None;
            }
        }
        if upper
            .as_deref()
            .is_some_and(|dir| std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) && is_opaque(dir))
        {
            lower = None;
        }
        (upper, lower)
    }
}

/// Collects the files below a directory shown by `upper` over `lower`, named from `prefix`.
fn walk(upper: Option<&Path>, lower: Option<&Path>, prefix: &str, out: &mut Vec<(PathBuf, String)>) {
    let lower = lower.filter(|_| !upper.is_some_and(is_opaque));
    let mut names = std::collections::BTreeSet::new();
    for dir in [upper, lower].into_iter().flatten() {
        if let Ok(entries) = std::fs::read_dir(dir) {
            names.extend(entries.flatten().map(|entry| entry.file_name()));
        }
    }
    for name in names {
        let (up, low) = (upper.map(|dir| dir.join(&name)), lower.map(|dir| dir.join(&name)));
        let up_meta = up.as_deref().and_then(|path| std::fs::symlink_metadata(path).ok());
        let low_meta = low.as_deref().and_then(|path| std::fs::symlink_metadata(path).ok());
        let named = format!("{prefix}{}", name.to_string_lossy());
        let shown = match (&up_meta, &low_meta) {
            (Some(meta), _) if is_whiteout_meta(meta) => continue,
            (Some(meta), Some(below)) if meta.is_dir() && below.is_dir() => {
                walk(up.as_deref(), low.as_deref(), &format!("{named}/"), out);
                continue;
            }
            (Some(meta), _) => (up, meta),
            (None, Some(meta)) => (low, meta),
            (None, None) => continue,
        };
        match shown {
            (Some(path), meta) if meta.is_dir() => walk(Some(&path), None, &format!("{named}/"), out),
            (Some(path), meta) if meta.is_file() => out.push((path, named)),
            _ => {}
        }
    }
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_symlink())
}

fn is_whiteout(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|metadata| is_whiteout_meta(&metadata))
}

/// overlayfs's whiteout: a character device numbered 0/0.
fn is_whiteout_meta(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    metadata.file_type().is_char_device() && metadata.rdev() == 0
}

/// overlayfs's opaque directory, which hides the one below it.
fn is_opaque(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    let mut value = [0u8; 2];
    // SAFETY: both strings are NUL-terminated and the buffer's length is given.
    let len = unsafe {
        libc::lgetxattr(path.as_ptr(), c"trusted.overlay.opaque".as_ptr(), value.as_mut_ptr().cast(), value.len())
    };
    len == 1 && value[0] == b'y'
}

fn io(path: &Path, err: &std::io::Error) -> String {
    format!("preparing the image's root at {}: {err}", path.display())
}

/// Where, in a command's own mount namespace, what `bwrap` binds is shown to it: a small
/// tmpfs over `/tmp` (the host's work directory may be out of the slot user's reach, and
/// `bwrap` reads its sources by path as that user).
pub(crate) const STAGE: &std::ffi::CStr = c"/tmp";

/// What a command's process does between fork and exec to enter its image's root: a mount
/// namespace of its own with the overlay mounted and shown under [`STAGE`] with the caches
/// and the secrets file, then the drop to the slot's user (who starts `bwrap`).
pub(crate) struct Entry {
    pub(crate) at: CString,
    pub(crate) options: CString,
    /// What is shown under [`STAGE`], the root first.
    pub(crate) binds: Vec<Bind>,
    pub(crate) user: u32,
}

/// A host path shown under [`STAGE`]: opened in the command's own namespace (before the
/// stage covers it) at a descriptor number the parent reserved, then bound from there.
pub(crate) struct Bind {
    pub(crate) path: CString,
    pub(crate) fd: RawFd,
    /// `/proc/self/fd/<fd>`.
    pub(crate) via: CString,
    pub(crate) target: CString,
    pub(crate) file: bool,
}

impl Entry {
    /// Runs in the child after fork: only system calls, on what was prepared before.
    ///
    /// # Errors
    /// The failing call's error (the command then does not start).
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        use nix::mount::{MsFlags, mount};
        use nix::sched::{CloneFlags, unshare};
        use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
        let none = None::<&std::ffi::CStr>;
        unshare(CloneFlags::CLONE_NEWNS)?;
        mount(none, c"/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
        let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        mount(Some(c"overlay"), self.at.as_c_str(), Some(c"overlay"), quiet, Some(self.options.as_c_str()))?;
        for bind in &self.binds {
            let directory = if bind.file { 0 } else { libc::O_DIRECTORY };
            // SAFETY: plain system calls on NUL-terminated paths and descriptor numbers.
            unsafe {
                let fd = libc::open(bind.path.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC | directory);
                if fd < 0 || libc::dup3(fd, bind.fd, libc::O_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
        }
        mount(Some(c"tmpfs"), STAGE, Some(c"tmpfs"), quiet, Some(c"mode=0755,size=65536"))?;
        for bind in &self.binds {
            // SAFETY: as above.
            let made = unsafe {
                if bind.file {
                    let fd = libc::open(bind.target.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o600);
                    if fd >= 0 { libc::close(fd) } else { fd }
                } else {
                    libc::mkdir(bind.target.as_ptr(), 0o755)
                }
            };
            if made < 0 {
                return Err(std::io::Error::last_os_error());
            }
            mount(Some(bind.via.as_c_str()), bind.target.as_c_str(), none, MsFlags::MS_BIND | MsFlags::MS_REC, none)?;
        }
        let (uid, gid) = (Uid::from_raw(self.user), Gid::from_raw(self.user));
        setgroups(&[])?;
        setresgid(gid, gid, gid)?;
        setresuid(uid, uid, uid)?;
        nix::sys::prctl::set_no_new_privs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layers_read_as_the_kernel_shows_them() {
        let dir = tempfile::tempdir().unwrap();
        let (lower, run) = (dir.path().join("lower"), dir.path().join("run"));
        for sub in ["out/kept", "out/gone", "covered"] {
            std::fs::create_dir_all(lower.join(sub)).unwrap();
        }
        std::fs::write(lower.join("out/kept/a.txt"), "image").unwrap();
        std::fs::write(lower.join("out/gone/b.txt"), "image").unwrap();
        std::fs::write(lower.join("out/c.txt"), "image").unwrap();
        std::fs::write(lower.join("covered/old.txt"), "image").unwrap();
        std::os::unix::fs::symlink("/etc", lower.join("out/etc")).unwrap();
        let overlay = Overlay::new(&lower, &run);
        overlay.prepare(&[], 0, &[]).unwrap();
        let upper = &overlay.upper;
        std::fs::create_dir_all(upper.join("out/kept")).unwrap();
        std::fs::write(upper.join("out/kept/a.txt"), "task").unwrap();
        std::fs::write(upper.join("out/new.txt"), "task").unwrap();
        nix::sys::stat::mknod(
            &upper.join("out/gone"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        let names: Vec<String> = overlay.files_under("out").unwrap().into_iter().map(|(_, name)| name).collect();
        assert_eq!(names, ["c.txt", "kept/a.txt", "new.txt"], "whiteouts hide, links are not followed");
        assert_eq!(std::fs::read_to_string(overlay.file("out/kept/a.txt").unwrap()).unwrap(), "task");
        assert!(overlay.file("out/gone/b.txt").is_none() && overlay.file("out/etc/passwd").is_none());
        assert!(overlay.file("out").is_none(), "a directory is not a file");
        std::fs::create_dir_all(upper.join("covered")).unwrap();
        std::fs::write(upper.join("covered/new.txt"), "task").unwrap();
        let set = CString::new(upper.join("covered").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: NUL-terminated strings, a one-byte value.
        let set =
            unsafe { libc::lsetxattr(set.as_ptr(), c"trusted.overlay.opaque".as_ptr(), c"y".as_ptr().cast(), 1, 0) };
        if set == 0 {
            let names: Vec<String> =
                overlay.files_under("covered").unwrap().into_iter().map(|(_, name)| name).collect();
            assert_eq!(names, ["new.txt"], "an opaque directory covers the image's");
            assert!(overlay.file("covered/old.txt").is_none());
        }
    }

    #[test]
    fn mount_points_are_made_where_the_image_lacks_them_and_never_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let (lower, run) = (dir.path().join("lower"), dir.path().join("run"));
        std::fs::create_dir_all(lower.join("builds/worker")).unwrap();
        std::fs::create_dir_all(lower.join("dev")).unwrap();
        std::os::unix::fs::symlink("/etc", lower.join("linked")).unwrap();
        let overlay = Overlay::new(&lower, &run);
        let points = [
            ("dev".to_owned(), Point::Directory),
            ("tmp".to_owned(), Point::Directory),
            ("builds/worker/checkouts".to_owned(), Point::Directory),
            ("run/shoal/secrets.json".to_owned(), Point::File),
        ];
        let owned = ["builds/worker".to_owned()];
        let uid = nix::unistd::getuid().as_raw();
        overlay.prepare(&owned, uid, &points).unwrap();
        let upper = &overlay.upper;
        assert!(!upper.join("dev").exists(), "the image has it");
        assert!(upper.join("tmp").is_dir() && upper.join("builds/worker/checkouts").is_dir());
        assert!(upper.join("run/shoal/secrets.json").is_file());
        assert_eq!(std::fs::metadata(upper.join("builds/worker")).unwrap().uid(), uid);
        let err = overlay.prepare(&[], uid, &[("linked/cron.d".to_owned(), Point::Directory)]).unwrap_err();
        assert!(err.contains("/linked is a link"), "{err}");
        assert!(!Path::new("/etc/cron.d/.shoal").exists());
    }
}
