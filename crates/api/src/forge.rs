//! A repository's `.taskcluster.yml` at a commit, read over git's HTTP protocols (smart, or
//! dumb) with the `git` program into a scratch repository: only http and https are allowed
//! (no `file://`, no `ext::`), nothing of the host's git configuration is read, nothing
//! prompts, each step has a time limit and the file a size limit.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use shoal_engine::github::{Rendered, Rendering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The file a change's tasks are made from.
pub(crate) const CONFIG_FILE: &str = ".taskcluster.yml";
/// Most bytes of `.taskcluster.yml` read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Longest one git step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Where in a repository to read from.
pub(crate) enum Revision<'a> {
    /// A commit, reachable from `git_ref` (fetched by its id first, where the server allows).
    Commit { sha: &'a str, git_ref: &'a str },
    /// A ref's tip (a default branch, for its policy).
    Tip(&'a str),
}

/// `.taskcluster.yml` at `revision` of the repository at `url` (`None`: it has none).
///
/// # Errors
/// The repository or revision could not be fetched, or the file is too large, in words for
/// the build's record.
pub(crate) async fn read_config(url: &str, revision: Revision<'_>) -> Result<Option<String>, String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("{url} is not an http or https URL"));
    }
    let scratch = tempfile::tempdir().map_err(|err| format!("a scratch directory: {err}"))?;
    let dir = scratch.path();
    git(dir, &["init", "--bare", "--quiet", "."]).await?;
    let at = match revision {
        Revision::Commit { sha, git_ref } => {
            // By id first (one commit, shallow); a server that gives no commit by its id (or
            // speaks only the dumb protocol) gets asked for the ref, whole.
            if git(dir, &["fetch", "--quiet", "--no-tags", "--depth=1", url, sha]).await.is_err() {
                let refspec = format!("+{git_ref}:refs/shoal/fetched");
                git(dir, &["fetch", "--quiet", "--no-tags", url, &refspec])
                    .await
                    .map_err(|err| format!("cannot fetch {sha} ({git_ref}) from {url}: {err}"))?;
            }
            sha.to_owned()
        }
        Revision::Tip(git_ref) => {
            let refspec = format!("+{git_ref}:refs/shoal/fetched");
            if git(dir, &["fetch", "--quiet", "--no-tags", "--depth=1", url, &refspec]).await.is_err() {
                git(dir, &["fetch", "--quiet", "--no-tags", url, &refspec])
                    .await
                    .map_err(|err| format!("cannot fetch {git_ref} from {url}: {err}"))?;
            }
            "refs/shoal/fetched".to_owned()
        }
    };
    let object = format!("{at}:{CONFIG_FILE}");
    let Ok(size) = git(dir, &["cat-file", "-s", &object]).await else {
        // Fetched, but the commit has no such file.
        git(dir, &["cat-file", "-e", &format!("{at}^{{commit}}")])
            .await
            .map_err(|_| format!("{at} is not a commit of {url}"))?;
        return Ok(None);
    };
    if size.trim().parse::<u64>().map_or(true, |size| size > MAX_CONFIG_BYTES) {
        return Err(format!("{CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes"));
    }
    git(dir, &["cat-file", "blob", &object]).await.map(Some)
}

/// Longest a rendering apart may take, beside its own CPU limit.
const RENDER_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of tasks a rendering may answer.
const MAX_RENDERED_BYTES: u64 = 64 << 20;

/// Renders `rendering` in a process of its own (`program render-taskcluster-yml`, which limits
/// its CPU and memory), with an empty environment, a time limit and an output limit: whoever
/// pushes writes the template, and JSON-e bounds nothing.
///
/// # Errors
/// The template's own error, or the limit it ran into, in words for the build's record.
pub(crate) async fn render_apart(program: &Path, rendering: &Rendering) -> Result<Rendered, String> {
    let input = serde_json::to_vec(rendering).map_err(|err| format!("the rendering's input: {err}"))?;
    let mut child = Command::new(program)
        .arg("render-taskcluster-yml")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("cannot start the renderer {}: {err}", program.display()))?;
    let mut stdin = child.stdin.take().ok_or("the renderer's input")?;
    let stdout = child.stdout.take().ok_or("the renderer's output")?;
    let exchange = async {
        // Written while read: a large input must not wait on a full output pipe.
        let write = async move {
            let written = stdin.write_all(&input).await;
            drop(stdin);
            written
        };
        let read = async move {
            let mut output = Vec::new();
            let mut stdout = stdout;
            (&mut stdout).take(MAX_RENDERED_BYTES + 1).read_to_end(&mut output).await.map(|_| output)
        };
        let (written, read) = tokio::join!(write, read);
        written.and(read)
    };
    let too_much =
        || format!("rendering {CONFIG_FILE} took more than its limits (20 s of CPU, 1 GiB, 64 MiB of tasks)");
    let output =
        tokio::time::timeout(RENDER_TIMEOUT, exchange).await.map_err(|_| too_much())?.map_err(|_| too_much())?;
    let status = child.wait().await.map_err(|err| format!("the renderer: {err}"))?;
    if !status.success() || output.len() as u64 > MAX_RENDERED_BYTES {
        return Err(too_much());
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Answer {
        Ok(Rendered),
        Error(String),
    }
    match serde_json::from_slice::<Answer>(&output).map_err(|err| format!("the renderer's answer: {err}"))? {
        Answer::Ok(rendered) => Ok(rendered),
        Answer::Error(error) => Err(error),
    }
}

/// Runs `git args` in `dir`; its output, or the last line it printed on failure.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(["-c", "credential.helper=", "-c", "core.askPass=", "-c", "protocol.version=2"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ALLOW_PROTOCOL", "http:https")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(STEP_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("git {} took longer than {} s", args[0], STEP_TIMEOUT.as_secs()))?
        .map_err(|err| format!("cannot run git (is it installed?): {err}"))?;
    if output.status.success() {
        return String::from_utf8(output.stdout).map_err(|_| format!("git {} printed no UTF-8", args[0]));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(stderr.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("git failed").trim().to_owned())
}
