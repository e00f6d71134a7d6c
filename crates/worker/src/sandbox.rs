//! Each command of a task in a sandbox made with bubblewrap: only the system's directories
//! (read-only, `/etc` without its secrets), the task directory, its secrets file and a
//! private `/tmp` of bounded size are there; its own PID, IPC and UTS namespaces and, when
//! the worker runs as root, a user of its own per slot with no capability left.
//! Nothing of the task reaches the programs that build the sandbox: `bwrap` and `setpriv`
//! run by absolute path with an empty environment, and the task's variables are applied
//! only to its own command (after the drop to the slot's user). `payload.network: false`
//! adds a network namespace of its own (loopback only): bubblewrap's, or the worker's when
//! the run has a credentials proxy listening in it (`netns.rs`).

mod view;

use std::path::{Path, PathBuf};

pub use view::SandboxOptions;
use view::View;

/// How a worker isolates its tasks.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// Each command in a bubblewrap sandbox; when the worker runs as root, slot `n` runs as
    /// uid and gid `first_uid + n` (no account needs to exist for it).
    Bubblewrap(Box<Bubblewrap>),
    /// As the worker's own user, in its filesystem: tasks are not contained.
    None,
}

/// What a bubblewrap sandbox is made with, found and checked when the worker starts.
#[derive(Debug, Clone)]
pub struct Bubblewrap {
    /// The `bwrap` program.
    bwrap: PathBuf,
    /// `setpriv` and `env`, by absolute path: the drop to the slot's user (as root only).
    drop: Option<(PathBuf, PathBuf)>,
    /// The uid of slot 0.
    first_uid: u32,
    /// What of the host a command sees.
    view: View,
    /// Bytes the private `/tmp` may hold.
    tmp_size: u64,
}

/// The default uid of slot 0 when the worker runs as root.
pub const SLOT_UID_BASE: u32 = 60_000;

/// Where the sandbox's programs are looked for (never the task's `PATH`, nor the worker's).
const SYSTEM_BIN: [&str; 4] = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"];

impl Isolation {
    /// Bubblewrap, when `bwrap` (and, as root, `setpriv` and `env`) are found in the system's
    /// directories and can make a sandbox here; slots from `first_uid` on when the worker
    /// runs as root.
    ///
    /// # Errors
    /// What is missing, and how to get it (or to run without isolation).
    pub fn bubblewrap(first_uid: u32, options: &SandboxOptions) -> Result<Isolation, String> {
        let root = nix::unistd::geteuid().is_root();
        let bwrap = system_program("bwrap", root).map_err(|missing| {
            format!(
                "{missing}: install bubblewrap (Debian: `apt-get install bubblewrap`), or run with \
                 `--isolation none`, where tasks are not contained"
            )
        })?;
        let drop = if root {
            let setpriv = system_program("setpriv", root)
                .map_err(|missing| format!("{missing}: install util-linux's setpriv (Debian: `util-linux`)"))?;
            let env = system_program("env", root).map_err(|missing| format!("{missing}: install coreutils"))?;
            Some((setpriv, env))
        } else {
            None
        };
        let view = View::of_host(options)?;
        let trial = std::process::Command::new(&bwrap)
            .args(["--ro-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--", "true"])
            .env_clear()
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
        Ok(Isolation::Bubblewrap(Box::new(Bubblewrap { bwrap, drop, first_uid, view, tmp_size: options.tmp_size })))
    }

    /// The same isolation with slot 0 at `first_uid` (several workers on one machine).
    #[must_use]
    pub fn with_first_uid(self, first_uid: u32) -> Isolation {
        match self {
            Isolation::Bubblewrap(mut bubblewrap) => {
                bubblewrap.first_uid = first_uid;
                Isolation::Bubblewrap(bubblewrap)
            }
            Isolation::None => Isolation::None,
        }
    }
}

/// `name` in the system's directories; as root, only a file that root owns and nobody else
/// may change (a program the worker runs as root must not be anyone else's).
fn system_program(name: &str, root: bool) -> Result<PathBuf, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let found = SYSTEM_BIN.iter().map(|dir| Path::new(dir).join(name)).find(|path| path.is_file());
    let path = found.ok_or_else(|| format!("`{name}` is not installed in {}", SYSTEM_BIN.join(", ")))?;
    let metadata = std::fs::metadata(&path).map_err(|err| format!("{}: {err}", path.display()))?;
    if root && (metadata.uid() != 0 || metadata.permissions().mode() & 0o022 != 0) {
        return Err(format!("{} is not root's alone (owner uid {}, mode {:o})", path.display(), metadata.uid(), {
            metadata.permissions().mode() & 0o7777
        }));
    }
    Ok(path)
}

impl Bubblewrap {
    /// Bytes the private `/tmp` may hold.
    pub(crate) fn tmp_size(&self) -> u64 {
        self.tmp_size
    }
}

/// The user slot `slot`'s tasks run as: its own when the worker runs as root, else the
/// worker's (`None`).
pub(crate) fn slot_user(isolation: &Isolation, slot: usize) -> Option<u32> {
    match isolation {
        Isolation::Bubblewrap(bubblewrap) if nix::unistd::geteuid().is_root() => {
            Some(bubblewrap.first_uid.saturating_add(u32::try_from(slot).unwrap_or(u32::MAX)))
        }
        Isolation::Bubblewrap(_) | Isolation::None => None,
    }
}

/// Where one run's commands are contained.
pub(crate) struct Sandbox<'a> {
    pub(crate) bubblewrap: &'a Bubblewrap,
    /// The task directory, the one writable place besides `/tmp`.
    pub(crate) task_dir: &'a Path,
    /// The run's secrets file (in the work directory), shown read-only.
    pub(crate) secrets_file: Option<&'a Path>,
    /// The user the commands run as, when not the worker's.
    pub(crate) user: Option<u32>,
    /// The network the commands are in.
    pub(crate) network: Network<'a>,
    /// The image whose root the commands run in (docker-worker's payload), instead of the
    /// host's system directories.
    pub(crate) image: Option<&'a ImageRoot>,
}

/// A run's image root as its commands see it: the overlay, mounted by each command's own
/// process (as root, in a mount namespace of its own) before it drops to the slot's user and
/// starts `bwrap` unprivileged, which binds it as `/` with the caches and the secrets file.
#[derive(Debug)]
pub(crate) struct ImageRoot {
    /// The image, held in the worker's cache (not evicted) while the run uses it.
    pub(crate) image: crate::image::Ready,
    pub(crate) overlay: crate::image::overlay::Overlay,
    pub(crate) options: std::ffi::CString,
    /// The working directory, absolute in the image.
    pub(crate) workdir: String,
    /// What the commands' processes show `bwrap` besides the root: each named cache's
    /// directory on the host and where it shows in the image, then the secrets file (shown
    /// at [`IMAGE_SECRETS`]) when the run has one.
    pub(crate) caches: Vec<(std::path::PathBuf, String)>,
    pub(crate) secrets: Option<std::path::PathBuf>,
    /// Descriptor numbers held (close-on-exec) for the root and each of those, which each
    /// command's process replaces with what it opens.
    pub(crate) reserved: Vec<std::os::fd::OwnedFd>,
    /// The slot's user, whom the commands' processes become before `bwrap`.
    pub(crate) user: u32,
}

/// Where an image's commands find the run's secrets file.
pub(crate) const IMAGE_SECRETS: &str = "/run/shoal/secrets.json";

impl ImageRoot {
    /// What a command's process does before `bwrap` starts.
    pub(crate) fn entry(&self) -> crate::image::overlay::Entry {
        use std::os::fd::AsRawFd;
        let text = |text: String| std::ffi::CString::new(text).unwrap_or_default();
        let path = |path: &std::path::Path| text(path.to_string_lossy().into_owned());
        let mut shown = vec![(path(&self.overlay.at), staged("root"), false)];
        for (idx, (dir, _)) in self.caches.iter().enumerate() {
            shown.push((path(dir), staged(&format!("cache-{idx}")), false));
        }
        if let Some(file) = &self.secrets {
            shown.push((path(file), staged("secrets"), true));
        }
        let binds = (shown.into_iter().zip(&self.reserved))
            .map(|((path, target, file), fd)| crate::image::overlay::Bind {
                path,
                fd: fd.as_raw_fd(),
                via: text(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                target: text(target),
                file,
            })
            .collect();
        crate::image::overlay::Entry {
            at: path(&self.overlay.at),
            options: self.options.clone(),
            binds,
            user: self.user,
        }
    }

    fn args(&self, tmp_size: u64, args: &mut Vec<String>) {
        let own = |args: &[&str]| args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
        args.extend(["--bind".to_owned(), staged("root"), "/".to_owned()]);
        args.extend(own(&["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size"]));
        args.extend([tmp_size.to_string(), "--tmpfs".to_owned(), "/tmp".to_owned()]);
        for (idx, (_, at)) in self.caches.iter().enumerate() {
            args.extend(["--bind".to_owned(), staged(&format!("cache-{idx}")), at.clone()]);
        }
        if self.secrets.is_some() {
            args.extend(["--ro-bind".to_owned(), staged("secrets"), IMAGE_SECRETS.to_owned()]);
        }
    }
}

/// Where `name` is shown to `bwrap` in a command's own mount namespace.
fn staged(name: &str) -> String {
    format!("{}/shoal-{name}", crate::image::overlay::STAGE.to_string_lossy())
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
    /// The program and arguments that run `argv` with `env` as its whole environment in this
    /// sandbox; the program itself is started with an empty environment.
    pub(crate) fn wrap(&self, argv: Vec<String>, env: &[(String, String)]) -> (PathBuf, Vec<String>) {
        let path = |path: &Path| path.to_string_lossy().into_owned();
        let own = |args: &[&str]| args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
        let bubblewrap = self.bubblewrap;
        let mut args = own(&["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--clearenv"]);
        if let Some(image) = self.image {
            // bwrap runs as the slot's user already: it applies the variables to the command.
            image.args(bubblewrap.tmp_size, &mut args);
            if matches!(self.network, Network::Loopback) {
                args.push("--unshare-net".to_owned());
            }
            args.extend(["--chdir".to_owned(), image.workdir.clone()]);
            for (key, value) in env {
                args.extend(["--setenv".to_owned(), key.clone(), value.clone()]);
            }
            args.push("--".to_owned());
            args.extend(argv);
            return (bubblewrap.bwrap.clone(), args);
        }
        args.extend(own(&["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size"]));
        args.extend([bubblewrap.tmp_size.to_string(), "--tmpfs".to_owned(), "/tmp".to_owned()]);
        args.extend(bubblewrap.view.args().iter().cloned());
        // The directories on the way to the task directory, made traversable (bwrap would
        // copy the host's modes, 0700 for the work directory).
        view::traversable(self.task_dir, |above| bubblewrap.view.shows(above), &mut args);
        args.extend(["--bind".to_owned(), path(self.task_dir), path(self.task_dir)]);
        if let Some(secrets) = self.secrets_file {
            args.extend(["--ro-bind".to_owned(), path(secrets), path(secrets)]);
        }
        if matches!(self.network, Network::Loopback) {
            args.push("--unshare-net".to_owned());
        }
        match (self.user, &bubblewrap.drop) {
            (Some(user), Some((setpriv, env_program))) => {
                // bwrap runs as root: the mounts are made as root, then setpriv (with no
                // variable of the task's) drops to the slot's user with no capability left,
                // and only then `env` gives the task's command its variables.
                args.extend(own(&["--cap-drop", "ALL"]));
                args.extend(own(&["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]));
                args.extend(["--".to_owned(), path(setpriv)]);
                args.extend([format!("--reuid={user}"), format!("--regid={user}")]);
                args.extend(own(&["--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]));
                // The task directory is the slot user's alone (0700): entered after the drop.
                args.extend(["--".to_owned(), path(env_program), "-i".to_owned(), "-C".to_owned()]);
                args.extend([path(self.task_dir), "--".to_owned()]);
                args.extend(env.iter().map(|(key, value)| format!("{key}={value}")));
            }
            _ => {
                // bwrap runs as the worker's user: it applies the variables to the command alone.
                args.extend(["--chdir".to_owned(), path(self.task_dir)]);
                for (key, value) in env {
                    args.extend(["--setenv".to_owned(), key.clone(), value.clone()]);
                }
                args.push("--".to_owned());
            }
        }
        args.extend(argv);
        (bubblewrap.bwrap.clone(), args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bubblewrap(drop: bool) -> Bubblewrap {
        Bubblewrap {
            bwrap: "/usr/bin/bwrap".into(),
            drop: drop.then(|| ("/usr/bin/setpriv".into(), "/usr/bin/env".into())),
            first_uid: SLOT_UID_BASE,
            view: View::for_tests(&["--ro-bind", "/usr", "/usr"]),
            tmp_size: 1 << 20,
        }
    }

    #[test]
    fn the_task_directory_is_bound_and_the_variables_reach_only_the_command() {
        let root = bubblewrap(true);
        let sandbox = Sandbox {
            bubblewrap: &root,
            task_dir: Path::new("/w/slot-1"),
            secrets_file: Some(Path::new("/w/secrets-1.json")),
            user: Some(60_001),
            network: Network::Loopback,
            image: None,
        };
        let env = [("LD_PRELOAD".to_owned(), "./x.so".to_owned()), ("PATH".to_owned(), ".:/bin".to_owned())];
        let (program, args) = sandbox.wrap(vec!["make".into(), "test".into()], &env);
        assert_eq!(program, Path::new("/usr/bin/bwrap"));
        let joined = args.join(" ");
        assert!(joined.starts_with("--die-with-parent --unshare-pid --unshare-ipc --unshare-uts --clearenv"));
        assert!(!joined.contains("--ro-bind / /"), "the host's root is not shown: {joined}");
        assert!(joined.contains("--size 1048576 --tmpfs /tmp --ro-bind /usr /usr"), "{joined}");
        assert!(joined.contains("/usr --perms 0711 --dir /w --bind /w/slot-1 /w/slot-1"), "{joined}");
        assert!(joined.contains("--ro-bind /w/secrets-1.json /w/secrets-1.json"), "{joined}");
        assert!(joined.contains("--unshare-net"), "{joined}");
        assert!(joined.contains("--cap-drop ALL"), "{joined}");
        assert!(joined.ends_with(
            "-- /usr/bin/setpriv --reuid=60001 --regid=60001 --clear-groups --no-new-privs --inh-caps=-all \
             --bounding-set=-all -- /usr/bin/env -i -C /w/slot-1 -- LD_PRELOAD=./x.so PATH=.:/bin make test"
        ));
        let unprivileged = bubblewrap(false);
        let open =
            Sandbox { bubblewrap: &unprivileged, user: None, network: Network::Shared, secrets_file: None, ..sandbox };
        let joined = open.wrap(vec!["true".into()], &env).1.join(" ");
        assert!(!joined.contains("--unshare-net") && !joined.contains("setpriv"), "{joined}");
        assert!(
            joined.ends_with("--chdir /w/slot-1 --setenv LD_PRELOAD ./x.so --setenv PATH .:/bin -- true"),
            "{joined}"
        );
        let stdin = std::io::stdin();
        let joined = Sandbox { network: Network::Joined(std::os::fd::AsFd::as_fd(&stdin)), ..open }
            .wrap(vec!["true".into()], &[])
            .1
            .join(" ");
        assert!(!joined.contains("--unshare-net"), "the namespace is joined before bwrap starts: {joined}");
    }
}
