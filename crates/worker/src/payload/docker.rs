//! docker-worker's payload (`image` present), read into the same [`Payload`] as
//! generic-worker's: one command in the image's root, artifacts and caches at absolute
//! paths in the image, and a `malformed-payload` naming what this worker cannot honour.

use serde_json::{Map, Value};

use super::mounts::{check_apart, check_cache_name};
use super::{ArtifactSpec, CommandSpec, Features, MAX_PATH, Payload, exit_codes, seconds};
use shoal_engine::Timestamp;

/// Most artifacts and caches one docker-worker payload may name.
const MAX_ENTRIES: usize = 256;

/// Where a task's image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSpec {
    /// A `docker save` or OCI archive that another task uploaded as an artifact.
    Artifact {
        /// The task.
        task_id: String,
        /// The artifact's name.
        path: String,
    },
    /// The same, of the task the Index holds at a namespace.
    Indexed {
        /// The namespace.
        namespace: String,
        /// The artifact's name.
        path: String,
    },
    /// An image in an OCI registry, by name (`ubuntu:24.04`, `host:5000/x@sha256:...`).
    Registry(String),
}

/// The live log's name, the only one this worker writes (docker-worker's default).
const LIVE_LOG: &str = "public/logs/live.log";

/// Parses a docker-worker payload; the error names the field and the rule.
pub(super) fn parse(object: &Map<String, Value>) -> Result<Payload, String> {
    let image = image(object.get("image").unwrap_or(&Value::Null))?;
    let argv = match object.get("command") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().filter(|arg| !arg.contains('\0')).map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("payload.command must be one argv list of strings (docker-worker's), without NUL")?,
        Some(_) => return Err("payload.command must be one argv list of strings (docker-worker's)".into()),
    };
    if argv.first().is_some_and(|program| program.contains('=')) {
        return Err("payload.command[0] names a program: it may not contain `=`".into());
    }
    let max_run_time = match object.get("maxRunTime") {
        Some(value) => seconds(value, "payload.maxRunTime", 1)?,
        None => return Err("payload.maxRunTime is required (seconds)".into()),
    };
    if let Some(name) = object.get("log").filter(|name| name.as_str() != Some(LIVE_LOG)) {
        return Err(format!("payload.log is {name}: this worker writes its live log as {LIVE_LOG} only"));
    }
    refuse_capabilities(object.get("capabilities"))?;
    let (features, artifacts_on) = features(object.get("features"))?;
    let artifacts = match object.get("artifacts") {
        None => Vec::new(),
        Some(Value::Object(items)) if items.len() <= MAX_ENTRIES => {
            items.iter().map(|(name, item)| artifact(name, item)).collect::<Result<Vec<_>, _>>()?
        }
        Some(_) => {
            return Err(format!(
                "payload.artifacts must be an object of at most {MAX_ENTRIES} artifacts by name (docker-worker's)"
            ));
        }
    };
    let caches = match object.get("cache") {
        None => Vec::new(),
        Some(Value::Object(caches)) if caches.len() <= MAX_ENTRIES => caches
            .iter()
            .map(|(name, path)| {
                check_cache_name(&format!("payload.cache.{name}"), name)?;
                let field = format!("payload.cache.{name}");
                let path = path.as_str().ok_or_else(|| format!("{field} must be an absolute path in the image"))?;
                Ok(super::CacheSpec { name: name.clone(), path: image_path(&field, path)?, preload: None })
            })
            .collect::<Result<Vec<_>, String>>()?,
        Some(_) => return Err(format!("payload.cache must be an object of at most {MAX_ENTRIES} paths by cache name")),
    };
    check_apart(&[], &caches).map_err(|err| err.replacen("payload.mounts", "payload.cache", 1))?;
    Ok(Payload {
        commands: vec![CommandSpec::Argv(argv)],
        env: super::env(object.get("env"))?,
        max_run_time,
        io_timeout: None,
        retry_exit_codes: exit_codes(object, "retry")?,
        purge_exit_codes: exit_codes(object, "purgeCaches")?,
        artifacts: if artifacts_on { artifacts } else { Vec::new() },
        network: true,
        taskcluster_proxy: features.taskcluster_proxy,
        chain_of_trust: features.chain_of_trust,
        mounts: Vec::new(),
        caches,
        image: Some(image),
    })
}

fn image(value: &Value) -> Result<ImageSpec, String> {
    let text = |object: &Map<String, Value>, key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty() && text.len() <= MAX_PATH)
            .map(str::to_owned)
            .ok_or_else(|| format!("payload.image.{key} must be a non-empty string"))
    };
    match value {
        Value::String(name) => registry_name("payload.image", name),
        Value::Object(object) => match object.get("type").and_then(Value::as_str) {
            Some("task-image") => {
                Ok(ImageSpec::Artifact { task_id: text(object, "taskId")?, path: text(object, "path")? })
            }
            Some("indexed-image") => {
                Ok(ImageSpec::Indexed { namespace: text(object, "namespace")?, path: text(object, "path")? })
            }
            Some("docker-image") => registry_name("payload.image.name", &text(object, "name")?),
            _ => Err("payload.image.type must be task-image, indexed-image or docker-image".into()),
        },
        _ => Err("payload.image is required: an image name, or an object of type task-image, indexed-image or \
                  docker-image"
            .into()),
    }
}

fn registry_name(field: &str, name: &str) -> Result<ImageSpec, String> {
    let fine = !name.is_empty()
        && name.len() <= 512
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-/:@".contains(&byte))
        && !name.starts_with(['/', ':', '@', '-']);
    if fine {
        Ok(ImageSpec::Registry(name.to_owned()))
    } else {
        Err(format!("{field} `{name}` is not an image reference (as `ubuntu:24.04` or `host:5000/name@sha256:...`)"))
    }
}

/// docker-worker's `capabilities` need a privileged container or the host's devices, which a
/// task here never gets.
fn refuse_capabilities(capabilities: Option<&Value>) -> Result<(), String> {
    let Some(capabilities) = capabilities else { return Ok(()) };
    let Value::Object(capabilities) = capabilities else {
        return Err("payload.capabilities must be an object".into());
    };
    for (name, value) in capabilities {
        let asked = match value {
            Value::Bool(on) => *on,
            Value::Object(devices) if name == "devices" => devices.values().any(|on| on != &Value::Bool(false)),
            _ => true,
        };
        if asked {
            return Err(format!(
                "payload.capabilities.{name} cannot be given: tasks here run unprivileged, with no device of the host"
            ));
        }
    }
    Ok(())
}

/// docker-worker's features: those it honours, and whether artifacts are uploaded.
fn features(features: Option<&Value>) -> Result<(Features, bool), String> {
    let mut on = Features::default();
    let mut artifacts = true;
    let Some(features) = features else { return Ok((on, artifacts)) };
    let Value::Object(features) = features else {
        return Err("payload.features must be an object of true or false".into());
    };
    for (name, value) in features {
        let Value::Bool(wanted) = *value else {
            return Err(format!("payload.features.{name} must be true or false"));
        };
        match name.as_str() {
            "taskclusterProxy" => on.taskcluster_proxy = wanted,
            "chainOfTrust" => on.chain_of_trust = wanted,
            "artifacts" => artifacts = wanted,
            // What this worker always does: a live log, and the whole log uploaded.
            "localLiveLog" | "bulkLog" => {}
            _ if !wanted => {}
            _ => {
                return Err(format!(
                    "payload.features.{name} is not a feature of this worker (of docker-worker's it has \
                     taskclusterProxy, chainOfTrust, artifacts, localLiveLog, bulkLog)"
                ));
            }
        }
    }
    Ok((on, artifacts))
}

fn artifact(name: &str, item: &Value) -> Result<ArtifactSpec, String> {
    let field = format!("payload.artifacts.{name}");
    if name.is_empty() || name.len() > MAX_PATH {
        return Err(format!("{field}: an artifact's name is 1..={MAX_PATH} bytes"));
    }
    let Value::Object(object) = item else { return Err(format!("{field} must be an object")) };
    let directory = match object.get("type").and_then(Value::as_str) {
        Some("file") => false,
        Some("directory" | "volume") => true,
        _ => return Err(format!("{field}.type must be file, directory or volume")),
    };
    let path = object.get("path").and_then(Value::as_str).ok_or_else(|| format!("{field}.path is required"))?;
    let expires =
        match object.get("expires") {
            None => None,
            Some(value) => Some(value.as_str().and_then(Timestamp::parse).ok_or_else(|| {
                format!("{field}.expires must be a date and time (RFC 3339, as 2026-01-31T12:00:00Z)")
            })?),
        };
    Ok(ArtifactSpec {
        directory,
        path: image_path(&format!("{field}.path"), path)?,
        name: name.to_owned(),
        content_type: None,
        expires,
    })
}

/// An absolute path in the image, in its plain form relative to the image's root.
fn image_path(field: &str, path: &str) -> Result<String, String> {
    super::plain_path(path).filter(|_| path.starts_with('/')).ok_or_else(|| {
        format!("{field} must be an absolute path in the image, below its root (no `..`, at most {MAX_PATH} bytes)")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::parse as parse_payload;
    use super::*;

    #[test]
    fn reads_docker_workers_payload() {
        let payload = parse_payload(&json!({
            "image": {"type": "task-image", "taskId": "T1", "path": "public/image.tar.zst"},
            "command": ["/bin/sh", "-c", "echo hi > /builds/worker/out.txt"],
            "env": {"MOZ": "1"},
            "maxRunTime": 600,
            "cache": {"level-1-checkouts": "/builds/worker/checkouts"},
            "artifacts": {
                "public/out.txt": {"type": "file", "path": "/builds/worker/out.txt", "expires": "2030-01-01T00:00:00Z"},
                "public/build": {"type": "directory", "path": "/builds/worker/artifacts/"}
            },
            "features": {"taskclusterProxy": true, "localLiveLog": true, "interactive": false},
            "capabilities": {"privileged": false, "devices": {"kvm": false}},
            "onExitStatus": {"retry": [72], "purgeCaches": [73]},
            "supersederUrl": "https://example.com/ignored"
        }))
        .unwrap();
        assert_eq!(
            payload.image,
            Some(ImageSpec::Artifact { task_id: "T1".into(), path: "public/image.tar.zst".into() })
        );
        assert_eq!(payload.commands.len(), 1);
        assert!(matches!(&payload.commands[0], CommandSpec::Argv(argv) if argv[0] == "/bin/sh"));
        assert_eq!(payload.caches[0].path, "builds/worker/checkouts");
        let paths: Vec<(&str, &str, bool)> =
            payload.artifacts.iter().map(|a| (a.name.as_str(), a.path.as_str(), a.directory)).collect();
        assert_eq!(
            paths,
            [("public/build", "builds/worker/artifacts", true), ("public/out.txt", "builds/worker/out.txt", false)]
        );
        assert!(payload.taskcluster_proxy && !payload.chain_of_trust);
        assert_eq!((payload.retry_exit_codes, payload.purge_exit_codes), (vec![72], vec![73]));
        let named = parse_payload(&json!({"image": "localhost:5000/busybox@sha256:ab12", "maxRunTime": 5})).unwrap();
        assert_eq!(named.image, Some(ImageSpec::Registry("localhost:5000/busybox@sha256:ab12".into())));
        assert_eq!(named.commands, [CommandSpec::Argv(Vec::new())], "the image's own command");
    }

    #[test]
    fn what_cannot_be_honoured_is_named() {
        let base = json!({"image": "busybox", "maxRunTime": 5});
        let cases = [
            (json!({"capabilities": {"privileged": true}}), "payload.capabilities.privileged"),
            (json!({"capabilities": {"devices": {"kvm": true}}}), "payload.capabilities.devices"),
            (json!({"features": {"dind": true}}), "payload.features.dind"),
            (json!({"features": {"allowPtrace": true}}), "payload.features.allowPtrace"),
            (json!({"artifacts": [{"type": "file", "path": "/x"}]}), "payload.artifacts must be an object"),
            (json!({"artifacts": {"a": {"type": "file", "path": "relative"}}}), "payload.artifacts.a.path"),
            (json!({"artifacts": {"a": {"type": "file", "path": "/a/../../etc"}}}), "payload.artifacts.a.path"),
            (json!({"cache": {"c": "/"}}), "payload.cache.c"),
            (json!({"cache": {"../c": "/x"}}), "payload.cache.../c"),
            (json!({"command": "echo hi"}), "payload.command"),
            (json!({"image": {"type": "task-image", "taskId": "T"}}), "payload.image.path"),
            (json!({"image": {"type": "nope"}}), "payload.image.type"),
            (json!({"image": "has space"}), "payload.image"),
            (json!({"log": "public/other.log"}), "payload.log"),
            (json!({"maxRunTime": null}), "payload.maxRunTime"),
        ];
        for (change, field) in cases {
            let mut payload = base.clone();
            for (key, value) in change.as_object().unwrap() {
                payload[key] = value.clone();
            }
            let err = parse_payload(&payload).unwrap_err();
            assert!(err.starts_with(field), "{payload}: {err}");
        }
    }
}
