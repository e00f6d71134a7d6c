//! Running one command of a task: its own process group, output to the live log, and the
//! limits (run time, silence, cancellation) that stop it.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::limits::Watch;
use crate::logsink::LogSink;
use crate::memory;
use crate::payload::CommandSpec;
use crate::sandbox::{Network, Sandbox};

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this code (a signal counts as 128 + its number).
    Code(i32),
    /// The run's time was up.
    TimedOut,
    /// It printed nothing for the io timeout.
    Silent,
    /// The run was stopped (canceled, or the worker is shutting down).
    Stopped,
    /// It reached one of the slot's limits.
    Exceeded(shoal_engine::status::SlotLimit),
}

/// How often a running command's memory and processes are sampled.
const MEMORY_EVERY: Duration = Duration::from_millis(100);

/// How many samples apart the task directory's disk use is looked at.
const DISK_EVERY_SAMPLES: u32 = 10;

/// How a command ended, and the most memory its processes were seen holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ran {
    pub(crate) exit: Exit,
    /// Peak of the resident bytes of its process tree, sampled every [`MEMORY_EVERY`].
    pub(crate) peak_memory: Option<u64>,
}

/// What a command runs with.
pub(crate) struct Limits<'a> {
    pub(crate) deadline: Instant,
    pub(crate) io_timeout: Option<Duration>,
    pub(crate) stop: &'a CancellationToken,
    pub(crate) grace: Duration,
    /// The slot's limits, watched on every sample.
    pub(crate) watch: &'a Watch<'a>,
}

/// Runs `spec` in `dir` with `env` as its whole environment, in `sandbox` when given,
/// streaming its output to `log`, within `limits`.
pub(crate) async fn run(
    spec: &CommandSpec,
    dir: &Path,
    env: &[(String, String)],
    sandbox: Option<&Sandbox<'_>>,
    log: &LogSink,
    limits: &Limits<'_>,
) -> std::io::Result<Ran> {
    let argv = match spec {
        CommandSpec::Argv(argv) => argv.clone(),
        CommandSpec::Shell(line) => vec!["sh".to_owned(), "-c".to_owned(), line.clone()],
    };
    let mut command = match sandbox {
        Some(sandbox) => {
            // bwrap itself (root, when the worker is) gets nothing of the task's: its
            // variables are handed to the task's own command.
            let (program, args) = sandbox.wrap(argv, env);
            let mut command = Command::new(program);
            command.args(args).current_dir("/").env_clear();
            command
        }
        None => {
            let mut argv = argv.into_iter();
            let program = argv.next().unwrap_or_default();
            let mut command = Command::new(on_path(&program, env, dir));
            command
                .args(argv)
                .current_dir(dir)
                .env_clear()
                .envs(env.iter().map(|(key, value)| (key.as_str(), value.as_str())));
            command
        }
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so stopping it stops everything it started.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(Sandbox { network: Network::Joined(namespace), .. }) = sandbox {
        let namespace = std::os::fd::AsRawFd::as_raw_fd(namespace);
        // SAFETY: between fork and exec only a system call is made (setns).
        unsafe {
            command.pre_exec(move || crate::netns::join(namespace));
        }
    }
    if let Some(image) = sandbox.and_then(|sandbox| sandbox.image) {
        let entry = image.entry();
        // SAFETY: between fork and exec only system calls are made, on what `entry` holds.
        unsafe {
            command.pre_exec(move || entry.enter());
        }
    }
    let mut child = command.spawn()?;
    let started = Instant::now();
    let pid = child.id();
    let mut peak_memory = pid.and_then(|pid| memory::tree_usage(pid, limits.watch.user)).map(|usage| usage.rss);
    let mut samples = 0u32;
    let mut sample = tokio::time::interval_at((started + MEMORY_EVERY).into(), MEMORY_EVERY);
    let last_output = Arc::new(AtomicI64::new(0));
    let mut pumps = tokio::task::JoinSet::new();
    if let Some(stdout) = child.stdout.take() {
        pumps.spawn(pump(stdout, log.clone(), Arc::clone(&last_output), started));
    }
    if let Some(stderr) = child.stderr.take() {
        pumps.spawn(pump(stderr, log.clone(), Arc::clone(&last_output), started));
    }
    let exit = loop {
        let silence_ends = limits.io_timeout.map(|timeout| {
            let last = Duration::from_millis(last_output.load(Ordering::Relaxed).max(0) as u64);
            started + last + timeout
        });
        let wake_at = silence_ends.map_or(limits.deadline, |at| at.min(limits.deadline));
        tokio::select! {
            status = child.wait() => break Exit::Code(code_of(status?)),
            () = limits.stop.cancelled() => break Exit::Stopped,
            _ = sample.tick() => {
                let Some(usage) = pid.and_then(|pid| memory::tree_usage(pid, limits.watch.user)) else { continue };
                peak_memory = peak_memory.max(Some(usage.rss));
                samples = samples.wrapping_add(1);
                if let Some(limit) = limits.watch.reached(&usage, samples.is_multiple_of(DISK_EVERY_SAMPLES)) {
                    break Exit::Exceeded(limit);
                }
                continue;
            }
            () = tokio::time::sleep_until(wake_at.into()) => {
                if Instant::now() >= limits.deadline {
                    break Exit::TimedOut;
                }
                if silence_ends.is_some_and(|at| Instant::now() >= at) {
                    // Output may have come meanwhile: only a real silence counts.
                    let last = Duration::from_millis(last_output.load(Ordering::Relaxed).max(0) as u64);
                    if limits.io_timeout.is_some_and(|timeout| started.elapsed() >= last + timeout) {
                        break Exit::Silent;
                    }
                }
            }
        }
    };
    if !matches!(exit, Exit::Code(_)) {
        stop(&mut child, limits.grace).await;
    }
    // Let the pumps deliver what the process wrote before it ended.
    while pumps.join_next().await.is_some() {}
    Ok(Ran { exit, peak_memory })
}

/// Where `program` is found on the `PATH` of `env`, as the command's own exec would find it.
/// Named by path, a program is started with `posix_spawn`; a bare name with a `PATH` of the
/// task's own makes the standard library fork the whole worker instead (its page tables
/// copied per command: a third of the throughput of trivial tasks).
fn on_path(program: &str, env: &[(String, String)], dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return program.into();
    }
    let path = env.iter().find(|(name, _)| name == "PATH").map_or("", |(_, value)| value.as_str());
    let found = path
        .split(':')
        .map(|entry| if entry.is_empty() { dir.join(program) } else { Path::new(entry).join(program) })
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        });
    found.unwrap_or_else(|| program.into())
}

/// SIGTERM to the whole group, then SIGKILL after the grace period.
async fn stop(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else { return };
    let group = Pid::from_raw(pid as i32);
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    } else {
        // The leader left; anything else it started in the group goes too.
        let _ = killpg(group, Signal::SIGKILL);
    }
}

async fn pump(mut from: impl AsyncRead + Unpin, log: LogSink, last_output: Arc<AtomicI64>, started: Instant) {
    let mut buf = vec![0; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n_read) => {
                last_output.store(started.elapsed().as_millis() as i64, Ordering::Relaxed);
                log.write(buf[..n_read].to_vec()).await;
            }
        }
    }
}

fn code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_bare_program_name_is_found_on_the_tasks_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::write(bin.join("plain"), "not executable").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = [("PATH".to_owned(), format!("/nonexistent:{}", bin.display()))];
        assert_eq!(on_path("tool", &env, dir.path()), tool);
        assert_eq!(on_path("plain", &env, dir.path()), Path::new("plain"), "not executable: left to exec");
        assert_eq!(on_path("./tool", &env, dir.path()), Path::new("./tool"), "a path is kept");
        assert_eq!(on_path("tool", &[], dir.path()), Path::new("tool"));
    }
}
