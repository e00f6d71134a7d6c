//! Starting and stopping a `shoal server` child process, and preloading its database.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use shoal_engine::TaskId;
use shoal_engine::definition::TaskDefinitionInput;
use shoal_store::{SqliteConfig, SqliteStore, Store};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A fresh temporary directory only this user may enter, as the server wants its data
/// directory (it tightens, and warns about, one others may read).
pub(crate) fn private_dir() -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let permissions = std::fs::Permissions::from_mode(0o700);
    Ok(tempfile::Builder::new().prefix("shoal-bench-").permissions(permissions).tempdir_in(std::env::temp_dir())?)
}

/// A running server process with its data directory.
pub(crate) struct Server {
    pub(crate) base: String,
    child: Child,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `shoal server` on a free loopback port, over `data_dir` or a fresh directory. Its
    /// clients all come from 127.0.0.1 but stand for a fleet of machines, so one address may
    /// hold every connection.
    pub(crate) async fn start(data_dir: Option<&Path>, extra_args: &[&str]) -> anyhow::Result<Server> {
        let mut args = vec!["--max-connections-per-address", "10000000"];
        args.extend_from_slice(extra_args);
        Server::start_as_deployed(data_dir, &args).await
    }

    /// [`Server::start`] with the server's own limits per client address.
    pub(crate) async fn start_as_deployed(data_dir: Option<&Path>, extra_args: &[&str]) -> anyhow::Result<Server> {
        Server::start_with_env(data_dir, extra_args, &[]).await
    }

    /// [`Server::start_as_deployed`] with more environment variables.
    pub(crate) async fn start_with_env(
        data_dir: Option<&Path>,
        extra_args: &[&str],
        env: &[(&str, String)],
    ) -> anyhow::Result<Server> {
        let (dir, path) = match data_dir {
            Some(path) => (None, path.to_path_buf()),
            None => {
                let dir = private_dir()?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        let mut child = Command::new(server_binary()?)
            .args(["server", "--listen", "127.0.0.1:0", "--root-access-token", crate::ROOT_TOKEN, "--data-dir"])
            .arg(&path)
            .args(extra_args)
            .envs(env.iter().map(|(key, value)| (*key, value.as_str())))
            .env("SHOAL_LOG", "warn")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting shoal server")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next_line().await?.context("server exited before listening")?;
        let addr =
            line.split("http://").nth(1).and_then(|rest| rest.split_whitespace().next()).context("no address")?;
        let server = Server { base: format!("http://{addr}/api/queue/v1"), child, _dir: dir };
        server.let_anonymous_callers_do_everything().await?;
        Ok(server)
    }

    /// Gives the `anonymous` role `*`, so that scenarios measuring other things than
    /// authentication need not sign (those that do still have every signature checked).
    async fn let_anonymous_callers_do_everything(&self) -> anyhow::Result<()> {
        let url = self.base.replace("/api/queue/v1", "/api/auth/v1/roles/anonymous");
        let body = serde_json::to_vec(&serde_json::json!({"description": "benchmark", "scopes": ["*"]}))?;
        let root = shoal_client::Credentials {
            client_id: "root".into(),
            access_token: crate::ROOT_TOKEN.into(),
            certificate: None,
        };
        let authorization = root.authorization("PUT", &url, Some(("application/json", &body)))?;
        let res = self
            .client()
            .put(&url)
            .header("authorization", authorization)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        // On a database other servers share, the role may be there already.
        anyhow::ensure!(
            res.status().is_success() || res.status() == 409,
            "granting the anonymous role: {}",
            res.status()
        );
        Ok(())
    }

    /// A pooled HTTP client.
    pub(crate) fn client(&self) -> reqwest::Client {
        reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap_or_default()
    }

    /// The server's process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The server's resident memory in MB.
    pub(crate) fn rss_mb(&self) -> u64 {
        let Some(pid) = self.child.id() else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kb: u64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        kb / 1024
    }

    /// CPU seconds (user + system) the server has used so far.
    pub(crate) fn cpu_secs(&self) -> f64 {
        self.child.id().map_or(0.0, |pid| process_cpu_secs(&format!("/proc/{pid}/stat")))
    }

    /// Stops the server.
    pub(crate) async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Starts `shoal worker` on `queue` (with `extra` flags); it stops when the returned child is
/// dropped.
pub(crate) fn start_worker(
    root_url: &str,
    queue: &str,
    capacity: u32,
    work_dir: &Path,
    extra: &[&str],
) -> anyhow::Result<Child> {
    Command::new(server_binary()?)
        .args(["worker", "--root-url", root_url, "--queue", queue, "--capacity", &capacity.to_string(), "--work-dir"])
        .arg(work_dir)
        .args(extra)
        .env("SHOAL_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .context("starting shoal worker")
}

fn server_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name("shoal");
    anyhow::ensure!(path.exists(), "{} not found: build it with `cargo build --release --bins`", path.display());
    Ok(path)
}

/// Writes `n` pending tasks in `queue` straight into a database under `dir`.
pub(crate) async fn preload(dir: &Path, queue: &str, n: usize) -> anyhow::Result<()> {
    let config = SqliteConfig { path: dir.join("shoal.db"), settings: shoal_store::StoreSettings::default() };
    let store = Store::Sqlite(SqliteStore::open(&config)?);
    let n_loaders = 64;
    let mut loaders = tokio::task::JoinSet::new();
    for l in 0..n_loaders {
        let (store, queue) = (store.clone(), queue.to_owned());
        loaders.spawn(async move {
            let mut idx = l;
            while idx < n {
                let input: TaskDefinitionInput = serde_json::from_value(crate::definition_with_retries(&queue, 49))?;
                let task_id = TaskId::parse(&slugid::nice()).context("slugid")?;
                let now = crate::now();
                let definition = input.validate(task_id, now).map_err(|r| anyhow::anyhow!("{r}"))?;
                let _ = store.run(shoal_store::operation::CreateTask { definition, task_id }, now).await?;
                idx += n_loaders;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(res) = loaders.join_next().await {
        res??;
    }
    store.close().await;
    Ok(())
}

/// User + system CPU seconds of a process, from its `/proc/<pid>/stat`.
pub(crate) fn process_cpu_secs(stat_path: &str) -> f64 {
    stat_ticks(stat_path, 2) / 100.0
}

/// CPU seconds (user + system) of the process at `stat_path` and of the children it has
/// waited for, theirs included (a worker's commands, with their sandboxes).
pub(crate) fn process_tree_cpu_secs(stat_path: &str) -> f64 {
    stat_ticks(stat_path, 4) / 100.0
}

/// The sum of `n` clock-tick fields of `/proc/<pid>/stat` from utime (14) on: utime, stime,
/// cutime, cstime.
fn stat_ticks(stat_path: &str, n: usize) -> f64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    // Fields after the parenthesized command name; utime is field 14.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // The kernel reports in clock ticks, 100 per second on Linux.
    (11..11 + n).map(|idx| fields.get(idx).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0)).sum()
}
