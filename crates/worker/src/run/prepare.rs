//! What a run's commands start with: the task directory (emptied of what a crash left), the
//! secrets file, both the slot user's, and the commands' whole environment (in the image's
//! root, for a run in one).

use std::path::Path;

use shoal_client::{Claim, Client};

use crate::WorkerConfig;
use crate::environment::{RunFacts, task_environment};
use crate::image::{self, Ready};
use crate::payload::Payload;

use super::empty;

/// Makes the task directory and the secrets file (owned by the slot's `user` when it has
/// one of its own), and the commands' environment (in the image's root, for a run in one).
#[allow(clippy::too_many_arguments)]
pub(super) async fn prepare(
    client: &Client,
    config: &WorkerConfig,
    claim: &Claim,
    payload: &Payload,
    task_id: &str,
    (dir, secrets_file): (&Path, &Path),
    (user, proxy_url): (Option<u32>, Option<&str>),
    image: Option<&Ready>,
) -> Result<Vec<(String, String)>, String> {
    // Whatever a crash left in the slot's directory goes first: mounts are placed only where
    // nothing is.
    empty(dir).await;
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|err| format!("cannot create the task directory {}: {err}", dir.display()))?;
    let dir = std::path::absolute(dir)
        .map_err(|err| format!("cannot resolve the task directory {}: {err}", dir.display()))?;
    if let Some(user) = user {
        give(&dir, user).map_err(|err| format!("cannot give the task directory to uid {user}: {err}"))?;
    }
    if let Some(secrets) = &claim.secrets {
        write_private(secrets_file, secrets.expose().as_bytes())
            .map_err(|err| format!("cannot write the secrets file {}: {err}", secrets_file.display()))?;
        if let Some(user) = user {
            give(secrets_file, user).map_err(|err| format!("cannot give the secrets file to uid {user}: {err}"))?;
        }
    }
    let secrets_file = std::path::absolute(secrets_file).unwrap_or_else(|_| secrets_file.to_path_buf());
    // Who the commands run as, by name (generic-worker's `USER`): the slot's user, whose bare
    // uid may have no name, or the worker's own.
    let user_name = match user {
        Some(uid) => nix::unistd::User::from_uid(uid.into()).ok().flatten().map(|user| user.name),
        None => std::env::var("USER").ok(),
    };
    let workdir = image.map(|ready| Path::new("/").join(ready.config.working_dir()));
    let facts = RunFacts {
        task_id,
        task_group_id: claim.task["taskGroupId"].as_str().unwrap_or_default(),
        user: user_name.as_deref(),
        run_id: claim.run_id,
        root_url: client.root_url(),
        worker_group: &config.worker_group,
        worker_id: &config.worker_id,
        dir: workdir.as_deref().unwrap_or(&dir),
        secrets_file: match image {
            Some(_) => claim.secrets.is_some().then_some(Path::new(crate::sandbox::IMAGE_SECRETS)),
            None => claim.secrets.is_some().then_some(secrets_file.as_path()),
        },
        proxy_url,
    };
    if let Some(ready) = image {
        let env = image::root::variables(ready, payload);
        return Ok(task_environment(Some(image::root::DEFAULT_PATH), None, &env, &facts));
    }
    let (path, lang) = (std::env::var("PATH").ok(), std::env::var("LANG").ok());
    Ok(task_environment(path.as_deref(), lang.as_deref(), &payload.env, &facts))
}

/// Makes `path` belong to `user` (uid and gid), readable by it alone.
fn give(path: &Path, user: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(user), Some(user))?;
    let mode = if path.is_dir() { 0o700 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Writes `bytes` to a new file at `path` that only this user may read (replacing any left
/// over from a crash).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
