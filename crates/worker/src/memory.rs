//! The memory a command's processes hold, read from `/proc` and summed over its process tree.

/// Resident bytes of process `root` and its descendants now; `None` when none is left.
pub(crate) fn tree_rss_bytes(root: u32) -> Option<u64> {
    let mut stack = vec![root];
    let mut total = None;
    // A tree is small; the bound only guards against a pid reused into a loop.
    let mut visits = 0;
    while let Some(pid) = stack.pop() {
        visits += 1;
        if visits > 4096 {
            break;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        if let Some(kib) = kib {
            total = Some(total.unwrap_or(0) + kib * 1024);
        }
        let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for thread in threads.flatten() {
            if let Ok(children) = std::fs::read_to_string(thread.path().join("children")) {
                stack.extend(children.split_whitespace().filter_map(|child| child.parse::<u32>().ok()));
            }
        }
    }
    total
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
                break tree_rss_bytes(pid).expect("running");
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
        let group = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        assert_eq!(tree_rss_bytes(pid), None, "nothing left");
    }
}
