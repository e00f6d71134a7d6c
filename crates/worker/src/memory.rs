//! What a command's processes hold, read from `/proc` and summed over its process tree: the
//! memory they hold and how many of them (threads included) run as the slot's user.

/// What a process tree was seen using.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Resident bytes of the whole tree.
    pub(crate) rss: u64,
    /// Threads of the tree's processes run by the slot's user (every thread when the slot
    /// has no user of its own): what `RLIMIT_NPROC` counts.
    pub(crate) tasks: u64,
    /// A process of the tree inside the sandbox (whose `/proc/<pid>/root` is its view).
    pub(crate) inner: Option<u32>,
}

/// Usage of process `root` and its descendants now; `None` when none is left.
pub(crate) fn tree_usage(root: u32, user: Option<u32>) -> Option<Usage> {
    let mut stack = vec![root];
    let mut usage: Option<Usage> = None;
    // A tree is bounded by the process limit; this only guards against a pid reused into a loop.
    let mut visits = 0;
    while let Some(pid) = stack.pop() {
        visits += 1;
        if visits > 65_536 {
            break;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next().and_then(|first| first.parse::<u64>().ok()))
        };
        let seen = usage.get_or_insert_with(Usage::default);
        seen.rss += field("VmRSS:").unwrap_or(0) * 1024;
        let uid = field("Uid:");
        if user.is_none_or(|user| uid == Some(u64::from(user))) {
            seen.tasks += field("Threads:").unwrap_or(1);
        }
        if pid != root && seen.inner.is_none() {
            seen.inner = Some(pid);
        }
        let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for thread in threads.flatten() {
            if let Ok(children) = std::fs::read_to_string(thread.path().join("children")) {
                stack.extend(children.split_whitespace().filter_map(|child| child.parse::<u32>().ok()));
            }
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_of_processes_is_summed() {
        use std::os::unix::process::CommandExt;
        let mut child =
            std::process::Command::new("sh").args(["-c", "sleep 5 & sleep 5 & wait"]).process_group(0).spawn().unwrap();
        let pid = child.id();
        // The shell starts its two children at once; wait until both show in the tree.
        let own = loop {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
            if children.split_whitespace().count() == 2 {
                break tree_usage(pid, None).expect("running").rss;
            }
            std::thread::yield_now();
        };
        let shell_alone = {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let kib: u64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .unwrap()
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap();
            kib * 1024
        };
        assert!(own > shell_alone, "the sleeps count too: {own} vs {shell_alone}");
        let me = nix::unistd::getuid().as_raw();
        let usage = tree_usage(pid, Some(me)).unwrap();
        assert_eq!(usage.tasks, 3, "the shell and its two sleeps: {usage:?}");
        assert!(usage.inner.is_some_and(|inner| inner != pid), "{usage:?}");
        assert_eq!(tree_usage(pid, Some(me + 1)).unwrap().tasks, 0, "another user's processes are not counted");
        let group = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        assert_eq!(tree_usage(pid, None), None, "nothing left");
    }
}
