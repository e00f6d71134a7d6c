//! What each slot's commands may use: processes (the kernel's `RLIMIT_NPROC` per slot user,
//! and the worker's count), resident memory, the private `/tmp` and the task directory. The
//! worker watches its commands' process tree and ends a run that reaches a limit, saying
//! which; the kernel itself holds the process count (a fork past it fails) and the size of
//! `/tmp` (a write past it fails).

use std::path::Path;

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

    /// Which limit `usage` reached, if one.
    pub(crate) fn reached(&self, usage: &Usage) -> Option<SlotLimit> {
        if usage.tasks >= self.processes {
            Some(SlotLimit::Processes)
        } else if usage.rss > self.memory {
            Some(SlotLimit::Memory)
        } else {
            None
        }
    }

    /// What a run ended by `limit` says in its log.
    pub(crate) fn reason(&self, limit: SlotLimit, tmp_size: Option<u64>) -> String {
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
pub(crate) fn filesystem_used(path: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    let blocks = stat.blocks().saturating_sub(stat.blocks_free());
    Some(blocks.saturating_mul(stat.fragment_size()))
}

/// Whether the private `/tmp` seen by process `inner` is full.
pub(crate) fn tmp_full(inner: u32) -> bool {
    nix::sys::statvfs::statvfs(format!("/proc/{inner}/root/tmp").as_str())
        .is_ok_and(|stat| stat.blocks() > 0 && stat.blocks_available() == 0)
}

/// Whether the files under `dir` (not following links) hold more than `limit` bytes; the
/// walk stops as soon as they do.
pub(crate) fn holds_more_than(dir: &Path, limit: u64) -> bool {
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
