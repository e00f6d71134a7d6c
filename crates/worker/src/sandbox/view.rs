//! What of the host a sandboxed command sees, worked out once when the worker starts: the
//! system's directories read-only (links such as `/bin -> usr/bin` kept as links), `/etc`
//! with every entry other users may not read covered, and the paths an operator adds.

use std::path::{Path, PathBuf};

/// The system's directories a task sees, read-only, when they exist.
const SYSTEM: [&str; 8] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

/// Most entries of `/etc` looked at for secrets to cover.
const MAX_ETC_ENTRIES: usize = 100_000;

/// How deep below `/etc` secrets are looked for.
const MAX_ETC_DEPTH: usize = 8;

/// The operator's settings of the sandbox.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Further host paths shown read-only (`--sandbox-path`).
    pub paths: Vec<PathBuf>,
    /// Bytes the private `/tmp` may hold (`--tmp-size`).
    pub tmp_size: u64,
}

impl Default for SandboxOptions {
    fn default() -> SandboxOptions {
        SandboxOptions { paths: Vec::new(), tmp_size: DEFAULT_TMP_SIZE }
    }
}

/// The default size of a task's private `/tmp`.
const DEFAULT_TMP_SIZE: u64 = 2 << 30;

/// The `bwrap` arguments that make the view.
#[derive(Debug, Clone)]
pub(crate) struct View {
    args: Vec<String>,
    /// The host directories bound (the system's and the operator's).
    shown: Vec<PathBuf>,
}

impl View {
    /// The view of this host with the operator's `options`.
    pub(crate) fn of_host(options: &SandboxOptions) -> Result<View, String> {
        let mut args = Vec::new();
        let mut shown: Vec<PathBuf> = Vec::new();
        for dir in SYSTEM {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    let target = std::fs::read_link(path).map_err(|err| format!("{dir}: {err}"))?;
                    args.extend(["--symlink".to_owned(), text(&target), dir.to_owned()]);
                }
                Ok(metadata) if metadata.is_dir() => {
                    args.extend(["--ro-bind".to_owned(), dir.to_owned(), dir.to_owned()]);
                    shown.push(path.to_path_buf());
                }
                _ => {}
            }
        }
        for path in &options.paths {
            if !path.is_absolute() || !path.exists() {
                return Err(format!("--sandbox-path {}: not an absolute path that exists", path.display()));
            }
            if path.starts_with("/tmp") {
                return Err(format!("--sandbox-path {}: a task's /tmp is its own", path.display()));
            }
            traversable(path, |above| shown.iter().any(|dir| above.starts_with(dir)), &mut args);
            args.extend(["--ro-bind".to_owned(), text(path), text(path)]);
            shown.push(path.clone());
        }
        let etc = Path::new("/etc");
        if etc.is_dir() {
            args.extend(linked_out(etc, &shown));
            args.extend(covers(etc)?);
        }
        Ok(View { args, shown })
    }

    /// Whether `path` is in a directory bound from the host.
    pub(crate) fn shows(&self, path: &Path) -> bool {
        self.shown.iter().any(|dir| path.starts_with(dir))
    }

    /// The arguments, in order.
    pub(crate) fn args(&self) -> &[String] {
        &self.args
    }

    #[cfg(test)]
    pub(crate) fn for_tests(args: &[&str]) -> View {
        View { args: args.iter().map(|arg| (*arg).to_owned()).collect(), shown: vec!["/usr".into()] }
    }
}

/// Makes the directories above `path` that nothing else makes (not `/`, nor `/tmp`, nor one
/// `shown`) traversable by the task's user: bwrap would give them the host's modes.
pub(crate) fn traversable(path: &Path, shown: impl Fn(&Path) -> bool, args: &mut Vec<String>) {
    for above in path.ancestors().skip(1).collect::<Vec<_>>().into_iter().rev() {
        if above != Path::new("/") && above != Path::new("/tmp") && !shown(above) {
            args.extend(["--perms".to_owned(), "0711".to_owned(), "--dir".to_owned(), text(above)]);
        }
    }
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// What covers each entry under `etc` that other users may not read: an unreadable
/// `/dev/null` over a file, an empty read-only directory over a directory (not entered).
fn covers(etc: &Path) -> Result<Vec<String>, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut args = Vec::new();
    let mut stack = vec![(etc.to_path_buf(), 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ETC_ENTRIES {
                return Err(format!("{} has more than {MAX_ETC_ENTRIES} entries", etc.display()));
            }
            let Ok(metadata) = entry.metadata() else { continue };
            let (path, mode) = (entry.path(), metadata.permissions().mode());
            if metadata.file_type().is_symlink() {
                continue;
            }
            if metadata.is_dir() {
                if mode & 0o005 != 0o005 {
                    args.extend(["--perms", "0555", "--size", "4096", "--tmpfs"].map(str::to_owned));
                    args.push(text(&path));
                    args.extend(["--remount-ro".to_owned(), text(&path)]);
                } else if depth < MAX_ETC_DEPTH {
                    stack.push((path, depth + 1));
                }
            } else if mode & 0o004 == 0 {
                args.extend(["--ro-bind".to_owned(), "/dev/null".to_owned(), text(&path)]);
            }
        }
    }
    Ok(args)
}

/// Files that links directly in `etc` lead to outside what is shown (`/etc/resolv.conf`
/// into `/run`), shown read-only at their own path when everyone may read them.
fn linked_out(etc: &Path, shown: &[PathBuf]) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut args = Vec::new();
    let Ok(entries) = std::fs::read_dir(etc) else { return args };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|kind| kind.is_symlink()) {
            continue;
        }
        let Ok(target) = std::fs::canonicalize(entry.path()) else { continue };
        let readable = std::fs::metadata(&target)
            .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o004 != 0);
        let outside = !shown.iter().any(|dir| target.starts_with(dir)) && !target.starts_with("/proc");
        if readable && outside {
            args.extend(["--ro-bind".to_owned(), text(&target), text(&target)]);
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_entries_are_covered_and_readable_ones_left() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path();
        std::fs::write(etc.join("passwd"), "root:x:0:0").unwrap();
        std::fs::write(etc.join("shadow"), "root:hash").unwrap();
        std::fs::set_permissions(etc.join("shadow"), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::create_dir_all(etc.join("ssl/private")).unwrap();
        std::fs::write(etc.join("ssl/private/key.pem"), "key").unwrap();
        std::fs::set_permissions(etc.join("ssl/private"), std::fs::Permissions::from_mode(0o710)).unwrap();
        std::fs::write(etc.join("ssl/cert.pem"), "cert").unwrap();
        let joined = covers(etc).unwrap().join(" ");
        let shadow = etc.join("shadow");
        assert!(joined.contains(&format!("--ro-bind /dev/null {}", shadow.display())), "{joined}");
        let private = etc.join("ssl/private");
        assert!(joined.contains(&format!("--tmpfs {} --remount-ro {}", private.display(), private.display())));
        assert!(!joined.contains("passwd") && !joined.contains("cert.pem") && !joined.contains("key.pem"), "{joined}");
    }

    #[test]
    fn an_operators_path_must_exist() {
        let options = SandboxOptions { paths: vec!["/nonexistent/shoal".into()], ..SandboxOptions::default() };
        assert!(View::of_host(&options).unwrap_err().contains("--sandbox-path /nonexistent/shoal"));
        let options = SandboxOptions { paths: vec!["relative".into()], ..SandboxOptions::default() };
        assert!(View::of_host(&options).is_err());
    }
}
