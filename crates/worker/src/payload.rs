//! The payload a task gives this worker, parsed into what to run; anything it cannot
//! understand is an error naming the field (the run then ends as `malformed-payload`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use shoal_engine::Timestamp;

mod docker;
mod mounts;

pub use docker::ImageSpec;
pub use mounts::{ArchiveFormat, CacheSpec, Compression, Content, Mount, MountKind, cache_scopes};

/// Longest `maxRunTime` accepted (Taskcluster's deadline cap is 5 days).
const MAX_RUN_TIME_SECS: u64 = 5 * 24 * 3600;

/// What to run and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// Commands, run in order until one fails.
    pub commands: Vec<CommandSpec>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// The whole run may take at most this long.
    pub max_run_time: Duration,
    /// Ends the run when there is no output for this long.
    pub io_timeout: Option<Duration>,
    /// Exit codes that mean "retry me" (intermittent-task).
    pub retry_exit_codes: Vec<i32>,
    /// Exit codes after which the task's named caches are thrown away (`onExitStatus.purgeCaches`).
    pub purge_exit_codes: Vec<i32>,
    /// Files and directories to upload after the commands.
    pub artifacts: Vec<ArtifactSpec>,
    /// Whether the commands reach the network (`false`: loopback only, in a sandbox).
    pub network: bool,
    /// `features.taskclusterProxy`: the run's credentials proxy at `TASKCLUSTER_PROXY_URL`.
    pub taskcluster_proxy: bool,
    /// `features.chainOfTrust`: a signed record of the run and its artifacts' digests.
    pub chain_of_trust: bool,
    /// What is placed in the task directory first (`payload.mounts`).
    pub mounts: Vec<Mount>,
    /// Named caches bound into the task directory (`payload.caches`, or cache mounts), or
    /// at paths in the image.
    pub caches: Vec<CacheSpec>,
    /// docker-worker's payload: the image whose root the command runs in; artifact and
    /// cache paths are then in the image, relative to its root.
    pub image: Option<ImageSpec>,
}

/// One command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandSpec {
    /// A program and its arguments.
    Argv(Vec<String>),
    /// A line for `sh -c`.
    Shell(String),
}

/// Something to upload after the commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactSpec {
    /// A directory (every file under it) or a single file.
    pub directory: bool,
    /// Path relative to the task's directory.
    pub path: String,
    /// Artifact name (for a directory, the prefix of its files' names).
    pub name: String,
    /// Content type to declare (files only; guessed from the extension otherwise).
    pub content_type: Option<String>,
    /// When it is gone (the task's expiry when `None`).
    pub expires: Option<Timestamp>,
}

/// Parses a payload, docker-worker's when it names an `image` (as generic-worker's d2g tells
/// them apart), else generic-worker's; the error says which field is wrong and how.
///
/// # Errors
/// A message naming the field and the rule.
pub fn parse(payload: &Value) -> Result<Payload, String> {
    let object = payload.as_object().ok_or("payload must be a JSON object")?;
    if object.contains_key("image") {
        return docker::parse(object);
    }
    let commands = match object.get("command") {
        Some(Value::Array(items)) if !items.is_empty() => parse_commands(items)?,
        _ => return Err("payload.command must be a non-empty list of commands (argv lists or shell strings)".into()),
    };
    let env = env(object.get("env"))?;
    let max_run_time = match object.get("maxRunTime") {
        Some(value) => seconds(value, "payload.maxRunTime", 1)?,
        None => return Err("payload.maxRunTime is required (seconds)".into()),
    };
    let io_timeout = object.get("ioTimeout").map(|value| seconds(value, "payload.ioTimeout", 1)).transpose()?;
    let retry_exit_codes = exit_codes(object, "retry")?;
    let purge_exit_codes = exit_codes(object, "purgeCaches")?;
    let artifacts = match object.get("artifacts") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            items.iter().enumerate().map(|(idx, item)| parse_artifact(idx, item)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err("payload.artifacts must be a list".into()),
    };
    let network = match object.get("network") {
        None => true,
        Some(Value::Bool(network)) => *network,
        Some(_) => return Err("payload.network must be true or false".into()),
    };
    let Features { taskcluster_proxy, chain_of_trust } = parse_features(object.get("features"))?;
    match object.get("osGroups") {
        None => {}
        Some(Value::Array(groups)) if groups.is_empty() => {}
        Some(_) => {
            return Err("payload.osGroups must be empty: this worker runs each task as a user of its own slot, \
                        in no group of the host's"
                .into());
        }
    }
    let (mounts, caches) = mounts::parse(object.get("mounts"), object.get("caches"))?;
    Ok(Payload {
        commands,
        env,
        max_run_time,
        io_timeout,
        retry_exit_codes,
        purge_exit_codes,
        artifacts,
        network,
        taskcluster_proxy,
        chain_of_trust,
        mounts,
        caches,
        image: None,
    })
}

/// `payload.env`: variables by name.
fn env(value: Option<&Value>) -> Result<BTreeMap<String, String>, String> {
    match value {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(key, value)| match value {
                _ if key.is_empty() || key.contains(['=', '\0']) => Err(format!(
                    "payload.env has the name `{key}`: a variable's name is not empty and has no `=` or NUL"
                )),
                Value::String(text) if !text.contains('\0') => Ok((key.clone(), text.clone())),
                _ => Err(format!("payload.env.{key} must be a string without NUL")),
            })
            .collect(),
        Some(_) => Err("payload.env must be an object of strings".into()),
    }
}

/// `payload.onExitStatus.<key>`: a list of exit codes.
fn exit_codes(object: &serde_json::Map<String, Value>, key: &str) -> Result<Vec<i32>, String> {
    match object.get("onExitStatus").and_then(|on| on.get(key)) {
        None => Ok(Vec::new()),
        Some(Value::Array(codes)) => codes
            .iter()
            .map(|code| {
                code.as_i64()
                    .and_then(|code| i32::try_from(code).ok())
                    .ok_or(format!("payload.onExitStatus.{key} must list integer exit codes"))
            })
            .collect(),
        Some(_) => Err(format!("payload.onExitStatus.{key} must be a list of exit codes")),
    }
}

/// The generic-worker features a payload turned on (of those this worker has).
#[derive(Default)]
struct Features {
    taskcluster_proxy: bool,
    chain_of_trust: bool,
}

/// `payload.features`, generic-worker's switches; this worker has `taskclusterProxy` and
/// `chainOfTrust`.
fn parse_features(features: Option<&Value>) -> Result<Features, String> {
    let mut on = Features::default();
    match features {
        None => {}
        Some(Value::Object(features)) => {
            for (name, value) in features {
                let Value::Bool(wanted) = value else {
                    return Err(format!("payload.features.{name} must be true or false"));
                };
                match name.as_str() {
                    "taskclusterProxy" => on.taskcluster_proxy = *wanted,
                    "chainOfTrust" => on.chain_of_trust = *wanted,
                    // Off is what this worker does anyway.
                    _ if !wanted => {}
                    _ => {
                        return Err(format!(
                            "payload.features.{name} is not a feature of this worker (it has taskclusterProxy, \
                             chainOfTrust)"
                        ));
                    }
                }
            }
        }
        Some(_) => return Err("payload.features must be an object of true or false".into()),
    }
    Ok(on)
}

fn parse_commands(items: &[Value]) -> Result<Vec<CommandSpec>, String> {
    items
        .iter()
        .enumerate()
        .map(|(idx, item)| match item {
            Value::String(line) => Ok(CommandSpec::Shell(line.clone())),
            // A program named with `=` would read as a variable where the sandbox hands the
            // command its environment (`env -i NAME=VALUE... PROGRAM`).
            Value::Array(argv) if argv.first().and_then(Value::as_str).is_some_and(|program| program.contains('=')) => {
                Err(format!("payload.command[{idx}][0] names a program: it may not contain `=`"))
            }
            Value::Array(argv) if !argv.is_empty() => argv
                .iter()
                .map(|arg| arg.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .map(CommandSpec::Argv)
                .ok_or_else(|| format!("payload.command[{idx}] must list strings")),
            _ => Err(format!("payload.command[{idx}] must be a shell string or a non-empty argv list")),
        })
        .collect()
}

fn seconds(value: &Value, field: &str, min: u64) -> Result<Duration, String> {
    value
        .as_u64()
        .filter(|secs| (min..=MAX_RUN_TIME_SECS).contains(secs))
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{field} must be an integer number of seconds, {min}..={MAX_RUN_TIME_SECS}"))
}

fn parse_artifact(idx: usize, item: &Value) -> Result<ArtifactSpec, String> {
    let field = |name: &str| item.get(name).and_then(Value::as_str);
    let directory = match field("type") {
        Some("file") => false,
        Some("directory") => true,
        _ => return Err(format!("payload.artifacts[{idx}].type must be file or directory")),
    };
    let path = field("path").ok_or_else(|| format!("payload.artifacts[{idx}].path is required"))?;
    // `.` (or `./`) is the whole task directory, a directory artifact of everything in it.
    let whole = !path.starts_with('/') && path.split('/').all(|part| part.is_empty() || part == ".");
    let path = if whole { ".".to_owned() } else { relative_path(&format!("payload.artifacts[{idx}].path"), path)? };
    let expires = match item.get("expires") {
        None => None,
        Some(value) => Some(value.as_str().and_then(Timestamp::parse).ok_or_else(|| {
            format!("payload.artifacts[{idx}].expires must be a date and time (RFC 3339, as 2026-01-31T12:00:00Z)")
        })?),
    };
    Ok(ArtifactSpec {
        directory,
        name: field("name").map_or_else(|| path.clone(), str::to_owned),
        path,
        content_type: field("contentType").map(str::to_owned),
        expires,
    })
}

/// Longest path of a mount, cache or artifact, in bytes.
const MAX_PATH: usize = 1024;

/// A path inside the task directory as a payload gives it, in its plain form: relative,
/// without `..`, and with the harmless `.` and empty parts (`./run-task`, `a//b/`) dropped,
/// as generic-worker takes them.
pub(crate) fn relative_path(field: &str, path: &str) -> Result<String, String> {
    plain_path(path).filter(|_| !path.starts_with('/')).ok_or_else(|| {
        format!(
            "{field} must be a relative path inside the task directory (no `..`, not `/` first, \
             not empty, at most {MAX_PATH} bytes)"
        )
    })
}

/// `path`'s names joined by `/`, without `.` and empty ones, when it has a name, no `..`
/// and no NUL, in at most [`MAX_PATH`] bytes.
fn plain_path(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    let plain = path.len() <= MAX_PATH && !path.contains('\0') && !parts.is_empty() && !parts.contains(&"..");
    plain.then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_argv_lists_and_shell_strings() {
        let payload = parse(&json!({
            "command": [["echo", "hi"], "make test"],
            "env": {"CI": "1"},
            "maxRunTime": 60,
            "ioTimeout": 10,
            "onExitStatus": {"retry": [75]},
            "artifacts": [{"type": "file", "path": "out/report.txt", "name": "public/report.txt"}]
        }))
        .unwrap();
        assert_eq!(
            payload.commands,
            vec![CommandSpec::Argv(vec!["echo".into(), "hi".into()]), CommandSpec::Shell("make test".into())]
        );
        assert_eq!(payload.max_run_time, Duration::from_secs(60));
        assert_eq!(payload.io_timeout, Some(Duration::from_secs(10)));
        assert_eq!(payload.retry_exit_codes, vec![75]);
        assert_eq!(payload.artifacts[0].name, "public/report.txt");
        assert!(!payload.taskcluster_proxy && payload.network);
        let proxied = parse(&json!({"command": ["true"], "maxRunTime": 5, "features": {"taskclusterProxy": true}}));
        assert!(proxied.unwrap().taskcluster_proxy);
    }

    #[test]
    fn takes_generic_workers_forms_as_taskgraph_writes_them() {
        let payload = parse(&json!({
            "command": [["bash", "-c", "true"]],
            "maxRunTime": 5,
            "osGroups": [],
            "features": {"chainOfTrust": true, "interactive": false},
            "artifacts": [
                {"type": "directory", "path": "./artifacts/", "name": "public/build", "expires": "2030-01-01T00:00:00.000Z"},
                {"type": "file", "path": "out//report.txt"},
                {"type": "directory", "path": "./", "name": "public/all"}
            ]
        }))
        .unwrap();
        assert!(payload.chain_of_trust && !payload.taskcluster_proxy);
        let artifacts: Vec<(&str, &str)> =
            payload.artifacts.iter().map(|a| (a.path.as_str(), a.name.as_str())).collect();
        assert_eq!(
            artifacts,
            [("artifacts", "public/build"), ("out/report.txt", "out/report.txt"), (".", "public/all")]
        );
        assert_eq!(payload.artifacts[0].expires, Timestamp::parse("2030-01-01T00:00:00Z"));
        assert_eq!(payload.artifacts[1].expires, None);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!({"maxRunTime": 5}), "payload.command"),
            (json!({"command": [[]], "maxRunTime": 5}), "payload.command[0]"),
            (json!({"command": ["true"]}), "payload.maxRunTime"),
            (json!({"command": ["true"], "maxRunTime": 0}), "payload.maxRunTime"),
            (json!({"command": ["true"], "maxRunTime": 5, "env": {"A": 1}}), "payload.env.A"),
            (json!({"command": ["true"], "maxRunTime": 5, "env": {"A=B": "1"}}), "payload.env has the name `A=B`"),
            (json!({"command": ["true"], "maxRunTime": 5, "env": {"": "1"}}), "payload.env has the name ``"),
            (json!({"command": [["A=1", "true"]], "maxRunTime": 5}), "payload.command[0][0]"),
            (
                json!({"command": ["true"], "maxRunTime": 5, "artifacts": [{"type": "file", "path": "../x"}]}),
                "payload.artifacts[0].path",
            ),
            (
                json!({"command": ["true"], "maxRunTime": 5, "onExitStatus": {"retry": ["x"]}}),
                "payload.onExitStatus.retry",
            ),
            (
                json!({"command": ["true"], "maxRunTime": 5, "features": {"interactive": true}}),
                "payload.features.interactive",
            ),
            (
                json!({"command": ["true"], "maxRunTime": 5, "features": {"taskclusterProxy": 1}}),
                "payload.features.taskclusterProxy",
            ),
            (json!({"command": ["true"], "maxRunTime": 5, "features": []}), "payload.features"),
            (json!({"command": ["true"], "maxRunTime": 5, "osGroups": ["docker"]}), "payload.osGroups"),
            (
                json!({"command": ["true"], "maxRunTime": 5, "artifacts": [{"type": "file", "path": "x", "expires": "soon"}]}),
                "payload.artifacts[0].expires",
            ),
            (
                json!({"command": ["true"], "maxRunTime": 5, "artifacts": [{"type": "file", "path": "/"}]}),
                "payload.artifacts[0].path",
            ),
        ];
        for (payload, field) in cases {
            let err = parse(&payload).unwrap_err();
            assert!(err.starts_with(field), "{payload}: {err}");
        }
    }
}
