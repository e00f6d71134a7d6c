//! Each command of a task in a sandbox made with bubblewrap: the system read-only, the task
//! directory the only writable place besides a private `/tmp`, its own PID namespace, the
//! worker's work directory (other slots, their secrets) out of sight, and, when the worker
//! runs as root, a user of its own per slot. `payload.network: false` adds a network
//! namespace of its own (loopback only): bubblewrap's, or the worker's when the run has a
//! credentials proxy listening in it (`netns.rs`).

use std::path::{Path, PathBuf};

/// How a worker isolates its tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// Each command in a bubblewrap sandbox, run by `bwrap`; when the worker runs as root,
    /// slot `n` runs as uid and gid `first_uid + n` (no account needs to exist for it).
    Bubblewrap {
        /// The `bwrap` program.
        bwrap: PathBuf,
        /// The uid of slot 0.
        first_uid: u32,
    },
    /// As the worker's own user, in its filesystem: tasks are not contained.
    None,
}

/// The default uid of slot 0 when the worker runs as root.
pub const SLOT_UID_BASE: u32 = 60_000;

impl Isolation {
    /// Bubblewrap, when its `bwrap` is found on `PATH` and can make a sandbox here; slots from
    /// `first_uid` on when the worker runs as root.
    ///
    /// # Errors
    /// What is missing, and how to get it (or to run without isolation).
    pub fn bubblewrap(first_uid: u32) -> Result<Isolation, String> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path).map(|dir| dir.join("bwrap")).find(|bwrap| bwrap.is_file());
        let Some(bwrap) = found else {
            return Err("bubblewrap (`bwrap`) is not installed: install it (Debian: `apt-get install bubblewrap`), \
                        or run with `--isolation none`, where tasks are not contained"
                .to_owned());
        };
        let trial = std::process::Command::new(&bwrap)
            .args(["--ro-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--", "true"])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|err| format!("running {}: {err}", bwrap.display()))?;
        if !trial.status.success() {
            return Err(format!(
                "{} cannot make a sandbox here ({}): allow unprivileged user namespaces, run the worker as root, \
                 or run with `--isolation none`, where tasks are not contained",
                bwrap.display(),
                String::from_utf8_lossy(&trial.stderr).trim()
            ));
        }
        Ok(Isolation::Bubblewrap { bwrap, first_uid })
    }
}

impl Isolation {
    /// The same isolation with slot 0 at `first_uid` (several workers on one machine).
    #[must_use]
    pub fn with_first_uid(self, first_uid: u32) -> Isolation {
        match self {
            Isolation::Bubblewrap { bwrap, .. } => Isolation::Bubblewrap { bwrap, first_uid },
            Isolation::None => Isolation::None,
        }
    }
}

/// The user slot `slot`'s tasks run as: its own when the worker runs as root, else the
/// worker's (`None`).
pub(crate) fn slot_user(isolation: &Isolation, slot: usize) -> Option<u32> {
    match isolation {
        Isolation::Bubblewrap { first_uid, .. } if nix::unistd::geteuid().is_root() => {
            Some(first_uid.saturating_add(u32::try_from(slot).unwrap_or(u32::MAX)))
        }
        Isolation::Bubblewrap { .. } | Isolation::None => None,
    }
}

/// Where one run's commands are contained.
pub(crate) struct Sandbox<'a> {
    pub(crate) bwrap: &'a Path,
    /// The worker's work directory, hidden.
    pub(crate) work_dir: &'a Path,
    /// The task directory, the one writable place besides `/tmp`.
    pub(crate) task_dir: &'a Path,
    /// The run's secrets file (in the work directory), shown read-only.
    pub(crate) secrets_file: Option<&'a Path>,
    /// The user the commands run as, when not the worker's.
    pub(crate) user: Option<u32>,
    /// The network the commands are in.
    pub(crate) network: Network<'a>,
}

/// The network a sandbox's commands are in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Network<'a> {
    /// The worker's.
    Shared,
    /// A namespace of their own with loopback only, made by bubblewrap.
    Loopback,
    /// The namespace this descriptor holds (joined before bubblewrap starts).
    Joined(std::os::fd::BorrowedFd<'a>),
}

impl Sandbox<'_> {
    /// The program and arguments that run `argv` in this sandbox.
    pub(crate) fn wrap(&self, argv: Vec<String>) -> (PathBuf, Vec<String>) {
        let path = |path: &Path| path.to_string_lossy().into_owned();
        let mut args: Vec<String> = [
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--perms",
            "1777",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        args.push(path(self.work_dir));
        args.extend(["--bind".to_owned(), path(self.task_dir), path(self.task_dir)]);
        if let Some(secrets) = self.secrets_file {
            args.extend(["--ro-bind".to_owned(), path(secrets), path(secrets)]);
        }
        if matches!(self.network, Network::Loopback) {
            args.push("--unshare-net".to_owned());
        }
        args.extend(["--chdir".to_owned(), path(self.task_dir)]);
        if let Some(user) = self.user {
            // bwrap runs as root here: the mounts are made as root, then setpriv drops to the
            // slot's user (no capabilities, no groups, no privileges gained by exec).
            args.extend(["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", "setpriv"].map(str::to_owned));
            args.extend([format!("--reuid={user}"), format!("--regid={user}")]);
            args.extend(["--clear-groups", "--no-new-privs", "--"].map(str::to_owned));
        } else {
            args.push("--".to_owned());
        }
        args.extend(argv);
        (self.bwrap.to_path_buf(), args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_directory_is_hidden_and_the_task_directory_bound_over_it() {
        let sandbox = Sandbox {
            bwrap: Path::new("/usr/bin/bwrap"),
            work_dir: Path::new("/w"),
            task_dir: Path::new("/w/slot-1"),
            secrets_file: Some(Path::new("/w/secrets-1.json")),
            user: Some(60_001),
            network: Network::Loopback,
        };
        let (program, args) = sandbox.wrap(vec!["make".into(), "test".into()]);
        assert_eq!(program, Path::new("/usr/bin/bwrap"));
        let joined = args.join(" ");
        let hidden = joined.find("--tmpfs /w ").expect("work dir hidden");
        let bound = joined.find("--bind /w/slot-1 /w/slot-1").expect("task dir bound");
        assert!(hidden < bound, "the task directory is mounted over the hidden work directory: {joined}");
        assert!(joined.contains("--ro-bind /w/secrets-1.json /w/secrets-1.json"), "{joined}");
        assert!(joined.contains("--unshare-net"), "{joined}");
        assert!(joined.ends_with("setpriv --reuid=60001 --regid=60001 --clear-groups --no-new-privs -- make test"));
        let open = Sandbox { user: None, network: Network::Shared, secrets_file: None, ..sandbox };
        let joined = open.wrap(vec!["true".into()]).1.join(" ");
        assert!(!joined.contains("--unshare-net") && !joined.contains("setpriv"), "{joined}");
        assert!(joined.ends_with("--chdir /w/slot-1 -- true"), "{joined}");
        let stdin = std::io::stdin();
        let joined = Sandbox { network: Network::Joined(std::os::fd::AsFd::as_fd(&stdin)), ..open }
            .wrap(vec!["true".into()])
            .1
            .join(" ");
        assert!(!joined.contains("--unshare-net"), "the namespace is joined before bwrap starts: {joined}");
    }
}
