//! The environment a task's commands start with: nothing of the worker's but a documented
//! few variables, since the worker's own (its credentials among them) are not the task's.

use std::collections::BTreeMap;
use std::path::Path;

/// `PATH` when the worker itself has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// `LANG` when the worker itself has none.
const DEFAULT_LANG: &str = "C.UTF-8";

/// What the worker tells a task about its run.
pub(crate) struct RunFacts<'a> {
    pub(crate) task_id: &'a str,
    pub(crate) task_group_id: &'a str,
    pub(crate) run_id: u32,
    pub(crate) root_url: &'a str,
    /// The worker's group and id.
    pub(crate) worker_group: &'a str,
    pub(crate) worker_id: &'a str,
    /// The task directory, the commands' working directory, `HOME` and `TASK_WORKDIR`.
    pub(crate) dir: &'a Path,
    /// The name of the user the commands run as, when it has one.
    pub(crate) user: Option<&'a str>,
    /// The file holding the task's secrets, when it has any.
    pub(crate) secrets_file: Option<&'a Path>,
    /// The run's credentials proxy, when the task asked for one.
    pub(crate) proxy_url: Option<&'a str>,
}

/// The whole environment of a task's command: `PATH` and `LANG` (the worker's, or defaults),
/// `HOME` and `USER`, then the payload's `env` (which may replace those), then the run's facts
/// (`TASK_ID`, `RUN_ID`, `TASK_GROUP_ID`, `TASK_WORKDIR`, `TASKCLUSTER_ROOT_URL`,
/// `TASKCLUSTER_WORKER_GROUP`, `TASKCLUSTER_WORKER_ID`, `SHOAL_SECRETS`,
/// `TASKCLUSTER_PROXY_URL`), which the payload cannot replace: generic-worker's.
pub(crate) fn task_environment(
    worker_path: Option<&str>,
    worker_lang: Option<&str>,
    payload_env: &BTreeMap<String, String>,
    run: &RunFacts<'_>,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("PATH".into(), worker_path.unwrap_or(DEFAULT_PATH).into());
    env.insert("LANG".into(), worker_lang.unwrap_or(DEFAULT_LANG).into());
    let dir = run.dir.to_string_lossy().into_owned();
    env.insert("HOME".into(), dir.clone());
    if let Some(user) = run.user {
        env.insert("USER".into(), user.into());
    }
    env.extend(payload_env.iter().map(|(key, value)| (key.clone(), value.clone())));
    env.insert("TASK_ID".into(), run.task_id.into());
    env.insert("RUN_ID".into(), run.run_id.to_string());
    env.insert("TASK_GROUP_ID".into(), run.task_group_id.into());
    env.insert("TASK_WORKDIR".into(), dir);
    env.insert("TASKCLUSTER_ROOT_URL".into(), run.root_url.into());
    env.insert("TASKCLUSTER_WORKER_GROUP".into(), run.worker_group.into());
    env.insert("TASKCLUSTER_WORKER_ID".into(), run.worker_id.into());
    if let Some(file) = run.secrets_file {
        env.insert("SHOAL_SECRETS".into(), file.to_string_lossy().into_owned());
    }
    if let Some(url) = run.proxy_url {
        env.insert("TASKCLUSTER_PROXY_URL".into(), url.into());
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(secrets_file: Option<&Path>) -> RunFacts<'_> {
        RunFacts {
            task_id: "abc",
            task_group_id: "grp",
            run_id: 2,
            root_url: "http://127.0.0.1:8080",
            worker_group: "wg",
            worker_id: "w1",
            dir: Path::new("/work/slot-0"),
            user: None,
            secrets_file,
            proxy_url: None,
        }
    }

    #[test]
    fn only_the_documented_variables_and_the_payloads() {
        let payload = BTreeMap::from([("CI".to_owned(), "1".to_owned())]);
        let env = task_environment(Some("/bin"), None, &payload, &facts(None));
        let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "CI",
                "HOME",
                "LANG",
                "PATH",
                "RUN_ID",
                "TASKCLUSTER_ROOT_URL",
                "TASKCLUSTER_WORKER_GROUP",
                "TASKCLUSTER_WORKER_ID",
                "TASK_GROUP_ID",
                "TASK_ID",
                "TASK_WORKDIR"
            ]
        );
        assert!(env.contains(&("TASK_WORKDIR".into(), "/work/slot-0".into())));
        assert!(env.contains(&("TASK_GROUP_ID".into(), "grp".into())));
        assert!(env.contains(&("HOME".into(), "/work/slot-0".into())));
        assert!(env.contains(&("LANG".into(), DEFAULT_LANG.into())));
        assert!(env.contains(&("PATH".into(), "/bin".into())));
    }

    #[test]
    fn the_payload_may_set_path_but_not_the_runs_facts() {
        let payload = BTreeMap::from([
            ("PATH".to_owned(), "/opt/bin".to_owned()),
            ("TASK_ID".to_owned(), "forged".to_owned()),
            ("SHOAL_SECRETS".to_owned(), "/etc/shadow".to_owned()),
            ("TASKCLUSTER_PROXY_URL".to_owned(), "http://attacker.example".to_owned()),
        ]);
        let secrets = Path::new("/work/secrets-0.json");
        let facts = RunFacts { proxy_url: Some("http://127.0.0.1:9/p"), ..facts(Some(secrets)) };
        let env = task_environment(None, None, &payload, &facts);
        assert!(env.contains(&("TASKCLUSTER_PROXY_URL".into(), "http://127.0.0.1:9/p".into())));
        assert!(env.contains(&("PATH".into(), "/opt/bin".into())));
        assert!(env.contains(&("TASK_ID".into(), "abc".into())));
        assert!(env.contains(&("SHOAL_SECRETS".into(), "/work/secrets-0.json".into())));
    }
}
