//! A task's image (docker-worker's payload): fetched from another task's artifact, the
//! Index or an OCI registry, unpacked layer by layer once into the worker's cache (keyed by
//! where it came from: an artifact of a finished run, or a manifest's digest) and shared
//! read-only by the runs that use it, each of which writes over it in an overlay of its own.

mod archive;
mod layer;
pub(crate) mod overlay;
mod registry;
pub(crate) mod root;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::HeldContent;
use crate::mount::{self, Setup, SetupError};
use crate::payload::{Content, ImageSpec};
use crate::unpack::UnpackError;

pub use registry::Registries;

/// What of an image's config a run uses, kept beside its root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ImageConfig {
    /// `NAME=value` lines.
    pub(crate) env: Vec<String>,
    pub(crate) working_dir: String,
    pub(crate) entrypoint: Vec<String>,
    pub(crate) cmd: Vec<String>,
    /// Directories the image gives to users other than root (relative to its root).
    pub(crate) owned: Vec<String>,
}

impl ImageConfig {
    fn of(config: &Value, owned: Vec<String>) -> ImageConfig {
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let inner = &config["config"];
        ImageConfig {
            env: strings(&inner["Env"]),
            working_dir: inner["WorkingDir"].as_str().unwrap_or_default().to_owned(),
            entrypoint: strings(&inner["Entrypoint"]),
            cmd: strings(&inner["Cmd"]),
            owned,
        }
    }

    /// The image's variables, by name.
    pub(crate) fn variables(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.env.iter().filter_map(|line| line.split_once('=')).map(|(key, value)| (key.to_owned(), value.to_owned()))
    }

    /// The working directory, relative to the root (empty: the root).
    pub(crate) fn working_dir(&self) -> String {
        self.working_dir
            .split('/')
            .filter(|part| !part.is_empty() && *part != "." && *part != "..")
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The command a payload's `argv` runs as docker runs it: the entrypoint first, then the
    /// payload's command or else the image's.
    pub(crate) fn command(&self, argv: &[String]) -> Vec<String> {
        let rest = if argv.is_empty() { &self.cmd } else { argv };
        self.entrypoint.iter().chain(rest).cloned().collect()
    }
}

/// An image ready for runs: held in the cache while they use it.
#[derive(Debug)]
pub(crate) struct Ready {
    held: HeldContent,
    pub(crate) config: ImageConfig,
}

impl Ready {
    /// The unpacked root.
    pub(crate) fn root(&self) -> PathBuf {
        self.held.path.join(ROOT)
    }
}

/// The root's directory, and the config's file, in an image's directory.
const ROOT: &str = "rootfs";
const CONFIG: &str = "image.json";

/// The OCI name of this machine's architecture.
pub(crate) fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The image `spec` names, from the worker's cache or fetched and unpacked into it (once,
/// when two runs want it at once); answers how many bytes were downloaded.
pub(crate) async fn obtain(
    setup: &Setup<'_>,
    registries: &Registries,
    spec: &ImageSpec,
) -> Result<(Ready, u64), SetupError> {
    let started = Instant::now();
    let (task_id, artifact) = match spec {
        ImageSpec::Artifact { task_id, path } => (task_id.clone(), path),
        ImageSpec::Indexed { namespace, path } => (mount::indexed_task(setup, namespace, "image").await?, path),
        ImageSpec::Registry(name) => return registry::obtain(setup, registries, name).await,
    };
    let run_id = mount::latest_run(setup.client, &task_id, artifact).await?;
    let key = format!("image:artifact:{task_id}/{run_id}/{artifact}");
    let what = format!("artifact {artifact} of task {task_id} run {run_id}");
    let _unpacking = match cached_or_locked(setup, &key, &what).await? {
        Found::Cached(ready) => return Ok((ready, 0)),
        Found::Locked(guard) => guard,
    };
    let content = Content::Artifact { task_id: task_id.clone(), artifact: artifact.clone(), sha256: None };
    let (source, fetched) = mount::obtain(setup, &content, "image").await?;
    let (file, cache) = (source.path().to_path_buf(), std::sync::Arc::clone(setup.cache));
    let staging = cache.image_staging();
    let unpacked = mount::blocking(move || {
        let scratch = staging.join("archive");
        let read = std::fs::create_dir_all(&scratch).map_err(UnpackError::from).and_then(|()| {
            let parts = archive::read(&file, &scratch, cache.limit())?;
            let layers: Vec<&Path> = parts.layers.iter().map(PathBuf::as_path).collect();
            unpack(&staging, &parts.config, &layers, cache.limit())
        });
        if read.is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        let _ = std::fs::remove_dir_all(&scratch);
        Ok::<_, UnpackError>((read?, staging))
    })
    .await;
    drop(source);
    let held = keep(setup, &key, unpacked).await?;
    let ready = load(held).await?;
    let millis = started.elapsed().as_millis();
    setup.log.line(&format!("image: {what}, unpacked in {millis} ms")).await;
    Ok((ready, fetched))
}

/// The image kept as `key`, or else the lock under which it is made (once, when two runs
/// want it at once: the second finds it made).
enum Found {
    Cached(Ready),
    Locked(tokio::sync::OwnedMutexGuard<()>),
}

async fn cached_or_locked(setup: &Setup<'_>, key: &str, what: &str) -> Result<Found, SetupError> {
    if let Some(ready) = cached(setup, key, what).await? {
        return Ok(Found::Cached(ready));
    }
    let lock = setup.cache.fetch_lock(key).await;
    Ok(match cached(setup, key, what).await? {
        Some(ready) => Found::Cached(ready),
        None => Found::Locked(lock),
    })
}

/// The image kept as `key`, when it is.
async fn cached(setup: &Setup<'_>, key: &str, what: &str) -> Result<Option<Ready>, SetupError> {
    let Some(held) = setup.cache.image(key) else { return Ok(None) };
    setup.log.line(&format!("image: {what}, from the worker's cache")).await;
    load(held).await.map(Some)
}

async fn load(held: HeldContent) -> Result<Ready, SetupError> {
    let file = held.path.join(CONFIG);
    let bytes =
        tokio::fs::read(&file).await.map_err(|err| SetupError::Worker(format!("reading {}: {err}", file.display())))?;
    let config = serde_json::from_slice(&bytes)
        .map_err(|err| SetupError::Worker(format!("reading {}: {err}", file.display())))?;
    Ok(Ready { held, config })
}

/// Keeps what was unpacked at its staging directory as `key`'s image (or removes it, when
/// unpacking failed).
async fn keep(
    setup: &Setup<'_>,
    key: &str,
    unpacked: Result<(u64, PathBuf), UnpackError>,
) -> Result<HeldContent, SetupError> {
    let (size, staging) = unpacked.map_err(|err| match SetupError::from(err) {
        SetupError::Payload(reason) => SetupError::Payload(format!("payload.image: {reason}")),
        SetupError::Worker(reason) => SetupError::Worker(format!("unpacking the image: {reason}")),
    })?;
    setup.cache.insert_image(key, &staging, size).map_err(|err| SetupError::Worker(format!("keeping the image: {err}")))
}

/// Applies `layers` (lowest first) into `<staging>/rootfs` and writes the config beside it;
/// answers the bytes written. The staging directory goes when this fails.
fn unpack(staging: &Path, config: &Value, layers: &[&Path], limit: u64) -> Result<u64, UnpackError> {
    let root = staging.join(ROOT);
    let unpacked = (|| {
        std::fs::create_dir_all(&root)?;
        std::fs::set_permissions(&root, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755))?;
        let mut applied = layer::Applied::default();
        for layer in layers {
            layer::apply(layer, &root, &mut applied, limit)?;
        }
        let config = ImageConfig::of(config, applied.owned.into_iter().collect());
        std::fs::write(staging.join(CONFIG), serde_json::to_vec(&config).map_err(std::io::Error::other)?)?;
        Ok(applied.bytes)
    })();
    if unpacked.is_err() {
        let _ = std::fs::remove_dir_all(staging);
    }
    unpacked
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_command_is_dockers_entrypoint_then_the_payloads_or_the_images() {
        let config = ImageConfig::of(
            &json!({"config": {"Entrypoint": ["/run-task"], "Cmd": ["sh"], "WorkingDir": "/builds/../worker/", "Env": ["A=1", "B"]}}),
            Vec::new(),
        );
        assert_eq!(config.command(&["make".into()]), ["/run-task", "make"]);
        assert_eq!(config.command(&[]), ["/run-task", "sh"]);
        assert_eq!(config.working_dir(), "builds/worker", "no `..` leads out of the image's root");
        assert_eq!(config.variables().collect::<Vec<_>>(), [("A".to_owned(), "1".to_owned())]);
    }
}
