//! `--health-check`: a command the worker runs every so often. While it fails, the worker is
//! in maintenance: it claims nothing and its heartbeats say why; running tasks go on.

use std::process::Stdio;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The command and how often it runs.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// Run with `sh -c`, as the worker's user, outside any sandbox.
    pub command: String,
    /// Time between checks; also the most one check may take.
    pub every: Duration,
}

/// The latest check's verdict: `None` healthy, or why not.
pub(crate) type Verdict = Option<String>;

/// Most of a failed check's output kept in its message.
const OUTPUT_KEPT: usize = 200;

/// Runs the check once: a non-zero exit, a signal or a run past `check.every` fails it.
pub(crate) async fn verdict(check: &HealthCheck) -> Verdict {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&check.command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(err) => return Some(format!("health check failed: cannot start it: {err}")),
    };
    let output = match tokio::time::timeout(check.every, child.wait_with_output()).await {
        Err(_) => return Some(format!("health check failed: still running after {}s", check.every.as_secs())),
        Ok(Err(err)) => return Some(format!("health check failed: {err}")),
        Ok(Ok(output)) => output,
    };
    if output.status.success() {
        return None;
    }
    let said = [&output.stderr, &output.stdout]
        .into_iter()
        .find_map(|bytes| {
            String::from_utf8_lossy(bytes).lines().rev().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
        })
        .map(|line| format!(": {}", truncated(&line, OUTPUT_KEPT)))
        .unwrap_or_default();
    Some(format!("health check failed ({}){said}", output.status))
}

/// `text` cut to at most `most` bytes, on a character boundary.
fn truncated(text: &str, most: usize) -> &str {
    let mut end = most.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Checks every `check.every` until `done`, publishing each verdict that differs from the last.
pub(crate) async fn keep_checking(check: HealthCheck, verdicts: watch::Sender<Verdict>, done: CancellationToken) {
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(check.every) => {}
        }
        let verdict = tokio::select! {
            () = done.cancelled() => return,
            verdict = verdict(&check) => verdict,
        };
        match &verdict {
            Some(why) if verdicts.borrow().is_none() => {
                tracing::warn!(reason = %why, "unhealthy: in maintenance, claiming nothing")
            }
            None if verdicts.borrow().is_some() => tracing::info!("healthy again: claiming"),
            _ => {}
        }
        verdicts.send_if_modified(|last| {
            let changed = *last != verdict;
            *last = verdict;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(command: &str) -> HealthCheck {
        HealthCheck { command: command.into(), every: Duration::from_secs(5) }
    }

    #[tokio::test]
    async fn a_check_fails_by_exit_status_or_time_and_says_why() {
        assert_eq!(verdict(&check("true")).await, None);
        let failed = verdict(&check("echo fine; echo 'disk /var full' >&2; exit 3")).await.unwrap();
        assert!(failed.contains("exit status: 3") && failed.ends_with(": disk /var full"), "{failed}");
        let slow = HealthCheck { command: "sleep 5".into(), every: Duration::from_millis(100) };
        assert!(verdict(&slow).await.unwrap().contains("still running"));
        let long = verdict(&check(&format!("echo {} >&2; exit 1", "é".repeat(300)))).await.unwrap();
        assert!(long.len() < 300, "{long}");
    }
}
