//! What each slot's commands may use: processes (the kernel's `RLIMIT_NPROC` per slot user,
//! and the worker's count), resident memory, the private `/tmp` and the task directory. The
//! worker watches its commands' process tree and ends a run that reaches a limit, saying
//! which; the kernel itself holds the process count (a fork past it fails) and the size of
//! `/tmp` (a write past it fails).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_engine::status::SlotLimit;

use crate::memory::Usage;

/// What one slot's commands may use at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLimits {
    /// Processes and threads (`--max-processes`).
    pub processes: u64,
    /// Resident bytes of the commands' processes (`--max-memory`).
    pub memory: u64,
    /// Bytes in the task directory (`--max-task-disk`).
    pub disk: u64,
}

/// The default processes and threads of one slot.
pub const DEFAULT_PROCESSES: u64 = 4096;
/// The default bytes of one slot's task directory.
pub const DEFAULT_DISK: u64 = 20 << 30;

impl SlotLimits {
    /// The defaults for a worker of `capacity` slots on this machine: 4096 processes, three
    /// quarters of the machine's memory shared among the slots, 20 GiB of task directory.
    #[must_use]
    pub fn defaults(capacity: u32) -> SlotLimits {
        let total = physical_memory().unwrap_or(8 << 30);
        SlotLimits {
            processes: DEFAULT_PROCESSES,
            memory: total / 4 * 3 / u64::from(capacity.max(1)),
            disk: DEFAULT_DISK,
        }
    }

    /// Which limit of the process tree's `usage` it reached, if one.
    fn reached(&self, usage: &Usage) -> Option<SlotLimit> {
        if usage.tasks >= self.processes {
            Some(SlotLimit::Processes)
        } else if usage.rss > self.memory {
            Some(SlotLimit::Memory)
        } else {
            None
        }
    }

    /// What a run ended by `limit` says in its log.
    fn reason(&self, limit: SlotLimit, tmp_size: Option<u64>) -> String {
        match limit {
            SlotLimit::Processes => format!(
                "the task reached this worker's limit of {} processes and threads per slot (--max-processes); it was stopped",
                self.processes
            ),
            SlotLimit::Memory => format!(
                "the task's processes held more than this worker's {} bytes of memory per slot (--max-memory); it was stopped",
                self.memory
            ),
            SlotLimit::Tmp => format!(
                "the task filled its private /tmp ({} bytes, --tmp-size); it was stopped",
                tmp_size.unwrap_or_default()
            ),
            SlotLimit::Disk => format!(
                "the task directory held more than this worker's {} bytes per slot (--max-task-disk); it was stopped",
                self.disk
            ),
        }
    }
}

/// One run's commands watched against the slot's limits.
pub(crate) struct Watch<'a> {
    slot: &'a SlotLimits,
    /// The slot's own user, whose processes are counted (all are, without one).
    pub(crate) user: Option<u32>,
    /// The size of the sandbox's private `/tmp`, when there is one.
    tmp_size: Option<u64>,
    /// The task directory and the fewest bytes its filesystem was seen holding since the
    /// commands started (others' deletions lower it, so they hide none of the task's writes).
    disk: Option<(&'a Path, AtomicU64)>,
}

impl<'a> Watch<'a> {
    /// Watches the commands about to run in `dir` as `user`, with a private `/tmp` of
    /// `tmp_size` when sandboxed.
    pub(crate) fn new(slot: &'a SlotLimits, user: Option<u32>, tmp_size: Option<u64>, dir: &'a Path) -> Watch<'a> {
        let disk = filesystem_used(dir).map(|used| (dir, AtomicU64::new(used)));
        Watch { slot, user, tmp_size, disk }
    }

    /// Which limit the process tree's `usage` reached, looking at the disk when
    /// `look_at_disk`.
    pub(crate) fn reached(&self, usage: &Usage, look_at_disk: bool) -> Option<SlotLimit> {
        if let Some(limit) = self.slot.reached(usage) {
            return Some(limit);
        }
        if self.tmp_size.is_some() && usage.inner.is_some_and(tmp_full) {
            return Some(SlotLimit::Tmp);
        }
        let (dir, lowest) = self.disk.as_ref().filter(|_| look_at_disk)?;
        // Walked only once the filesystem grew by the limit: the directory cannot hold more.
        let used = filesystem_used(dir)?;
        let baseline = lowest.fetch_min(used, Ordering::Relaxed).min(used);
        let grown = used.saturating_sub(baseline) > self.slot.disk;
        (grown && holds_more_than(dir, self.slot.disk)).then_some(SlotLimit::Disk)
    }

    /// What a run ended by `limit` says in its log.
    pub(crate) fn reason(&self, limit: SlotLimit) -> String {
        self.slot.reason(limit, self.tmp_size)
    }
}

/// Sets the kernel's per-user process limit that every slot user's processes inherit (a fork
/// past it fails). Root, the worker, is not held by it.
///
/// # Errors
/// When the kernel refuses.
pub(crate) fn hold_slot_users(processes: u64) -> std::io::Result<()> {
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NPROC, processes, processes)
        .map_err(std::io::Error::from)
}

/// The machine's memory, from `/proc/meminfo`.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = info.lines().find_map(|line| line.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim();
    kib.parse::<u64>().ok().map(|kib| kib * 1024)
}

/// Bytes in use on the filesystem holding `path`.
fn filesystem_used(path: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    let blocks = stat.blocks().saturating_sub(stat.blocks_free());
    Some(blocks.saturating_mul(stat.fragment_size()))
}

/// Whether the private `/tmp` seen by process `inner` is full.
fn tmp_full(inner: u32) -> bool {
    nix::sys::statvfs::statvfs(format!("/proc/{inner}/root/tmp").as_str())
        .is_ok_and(|stat| stat.blocks() > 0 && stat.blocks_available() == 0)
}

/// Whether the files under `dir` (not following links) hold more than `limit` bytes; the
/// walk stops as soon as they do.
fn holds_more_than(dir: &Path, limit: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else { continue };
            total = total.saturating_add(metadata.blocks() * 512);
            if total > limit {
                return true;
            }
            if metadata.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_reached_at_the_count_or_past_the_bytes() {
        let limits = SlotLimits { processes: 10, memory: 100, disk: 1000 };
        let usage = |tasks, rss| Usage { tasks, rss, inner: None };
        assert_eq!(limits.reached(&usage(9, 100)), None);
        assert_eq!(limits.reached(&usage(10, 0)), Some(SlotLimit::Processes));
        assert_eq!(limits.reached(&usage(1, 101)), Some(SlotLimit::Memory));
        assert!(limits.reason(SlotLimit::Disk, None).contains("--max-task-disk"));
    }

    #[test]
    fn a_directory_is_measured_until_it_passes_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/big"), vec![1u8; 64 * 1024]).unwrap();
        assert!(holds_more_than(dir.path(), 32 * 1024));
        assert!(!holds_more_than(dir.path(), 1 << 30));
        assert!(filesystem_used(dir.path()).is_some());
    }
}
