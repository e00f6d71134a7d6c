//! A run's root made of its image, once per run: the overlay's directories and mount
//! points prepared, the named caches (lent under the run's directory) and the secrets file
//! opened for `bwrap` to bind, and the environment the image and the payload give.

use std::os::fd::OwnedFd;
use std::path::Path;

use super::Ready;
use super::overlay::{Overlay, Point};
use crate::mount::SetupError;
use crate::payload::Payload;
use crate::sandbox::{IMAGE_SECRETS, ImageRoot};

/// Where a run's named caches are lent, below its directory, when it runs in an image.
pub(crate) fn cache_home(idx: usize) -> String {
    format!("caches/{idx}")
}

/// `PATH` in an image that sets none (docker's).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Prepares the root of a run in `dir` (whose caches are lent already) for the slot's `user`;
/// it holds the image until it is dropped.
pub(crate) async fn make(
    ready: Ready,
    payload: &Payload,
    dir: &Path,
    user: u32,
    secrets_file: Option<&Path>,
) -> Result<ImageRoot, SetupError> {
    let overlay = Overlay::new(&ready.root(), &dir.join("image"));
    let mut points: Vec<(String, Point)> =
        ["dev", "proc", "tmp"].into_iter().map(|dir| (dir.to_owned(), Point::Directory)).collect();
    points.extend(payload.caches.iter().map(|cache| (cache.path.clone(), Point::Directory)));
    if secrets_file.is_some() {
        points.push((IMAGE_SECRETS.trim_start_matches('/').to_owned(), Point::File));
    }
    let workdir = ready.config.working_dir();
    if !workdir.is_empty() {
        points.push((workdir.clone(), Point::Directory));
    }
    let (owned, prepared) = (ready.config.owned.clone(), overlay.clone());
    crate::mount::blocking(move || prepared.prepare(&owned, user, &points).map_err(std::io::Error::other))
        .await
        .map_err(|err| SetupError::Payload(format!("payload.image: {err}")))?;
    let options = overlay.options().map_err(SetupError::Worker)?;
    let caches: Vec<_> = (payload.caches.iter().enumerate())
        .map(|(idx, cache)| (dir.join(cache_home(idx)), format!("/{}", cache.path)))
        .collect();
    let secrets = secrets_file.map(Path::to_path_buf);
    // Numbers held for what each command's process opens itself: the root, then those.
    let reserved = (0..1 + caches.len() + usize::from(secrets.is_some()))
        .map(|_| std::fs::File::open("/").map(OwnedFd::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| SetupError::Worker(format!("holding descriptors for the image's root: {err}")))?;
    Ok(ImageRoot { image: ready, overlay, options, workdir: format!("/{workdir}"), caches, secrets, reserved, user })
}

/// The variables the image and then the payload give, over docker's defaults.
pub(crate) fn variables(ready: &Ready, payload: &Payload) -> std::collections::BTreeMap<String, String> {
    let mut env: std::collections::BTreeMap<String, String> = ready.config.variables().collect();
    env.extend(payload.env.iter().map(|(key, value)| (key.clone(), value.clone())));
    env
}
