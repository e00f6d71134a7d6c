//! One claimed run, from claim to report: live log, commands under their limits, reclaims,
//! artifacts, and the report that matches how it ended.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use shoal_client::{Claim, Client, Outcome};
use shoal_engine::status::{RunStats, TimeLimit, WorkerException};
use tokio_util::sync::CancellationToken;

use crate::WorkerConfig;
use crate::artifacts::{self, Target};
use crate::chain_of_trust;
use crate::control::Held;
use crate::image;
use crate::limits::{SlotLimits, Watch};
use crate::logsink::LogSink;
use crate::mount::{self, Setup, SetupError};
use crate::netns;
use crate::payload::{self, Payload};
use crate::process::{self, Exit, Limits};
use crate::proxy::Proxy;
use crate::sandbox::{self, Isolation, Network, Sandbox};

mod prepare;
use prepare::prepare;

/// What ended the commands.
enum Ending {
    /// Every command exited 0.
    Success,
    /// A command failed, ran too long or fell silent.
    Failure(String),
    /// The run could not start as asked (its mounts), for this reason.
    Exception(WorkerException, String),
    /// A command asked to be retried with one of the payload's retry exit codes.
    Retry(i32),
    /// The server refused a reclaim: the run is over (canceled or expired); report nothing.
    Revoked,
    /// The worker is shutting down: hand the run back.
    Shutdown,
}

/// Works on one claim until it is reported (or revoked).
pub(crate) async fn run_claim(
    client: Client,
    config: WorkerConfig,
    claim: Claim,
    slot: usize,
    shutdown: CancellationToken,
    held: Held,
) {
    let claimed = Instant::now();
    let task_id = claim.status.task_id.to_string();
    let run_id = claim.run_id;
    let expires = claim.task["expires"].as_str().unwrap_or_default().to_owned();
    let header = format!("task {task_id} run {run_id} on {}/{}", config.worker_group, config.worker_id);
    // Beside the task directory, out of the task's reach.
    let backing = config.work_dir.join(format!("log-{slot}.txt"));
    let (log, flusher) = LogSink::start(client.clone(), (task_id.clone(), run_id), header, backing.clone());

    let user = sandbox::slot_user(&config.isolation, slot);
    let parsed = payload::parse(&claim.task["payload"]).and_then(|payload| {
        let problem = unsupported(&payload, &config.isolation)
            .or_else(|| outlived(&payload, &expires))
            .or_else(|| unsignable(&payload, &config, user));
        problem.map_or(Ok(payload), Err)
    });
    let payload = match parsed {
        Ok(payload) => payload,
        Err(message) => {
            log.line(&format!("malformed payload: {message}")).await;
            drop(log);
            flusher.finish().await;
            let target = Target { client: &client, task_id: &task_id, run_id, expires: &expires };
            upload_backing_log(&target, &backing).await;
            let outcome = Outcome::Exception(WorkerException::MalformedPayload);
            report(&client, &task_id, run_id, &outcome, &RunStats::default()).await;
            return;
        }
    };

    // Stops the commands when the worker shuts down or the server revokes the run (a refused
    // reclaim, or an exception on the event stream).
    let stop = shutdown.child_token();
    let revoked = held.hold(&task_id, run_id);
    let reclaimer = tokio::spawn(keep_claim(
        client.clone(),
        task_id.clone(),
        run_id,
        claim.taken_until,
        stop.clone(),
        revoked.clone(),
    ));

    // One directory per slot, emptied after each run: cheaper than a new one per run.
    let dir = config.work_dir.join(format!("slot-{slot}"));
    let mut stats = RunStats::default();
    // Beside the task directory, not in it: an artifact of the whole directory must not take it.
    let secrets_file = config.work_dir.join(format!("secrets-{slot}.json"));
    let files = (dir.as_path(), secrets_file.as_path());
    let scopes = task_scopes(&claim.task);
    let mut lent = Vec::new();
    let prepared = async {
        let (namespace, proxy) = start_proxy(&client, &claim, &payload, &scopes, user).map_err(Ending::Failure)?;
        let proxy_url = proxy.as_ref().map(Proxy::url);
        let setup = Setup {
            cache: &config.cache,
            client: &client,
            scopes: &scopes,
            expanded: Default::default(),
            task_dir: &dir,
            user,
            log: &log,
        };
        let started = Instant::now();
        let image = match &payload.image {
            Some(spec) => {
                let (ready, fetched) = image::obtain(&setup, &config.registries, spec).await.map_err(setup_ending)?;
                stats.bytes_fetched = Some(fetched);
                Some(ready)
            }
            None => None,
        };
        let env = prepare(&client, &config, &claim, &payload, &task_id, files, (user, proxy_url), image.as_ref())
            .await
            .map_err(Ending::Failure)?;
        // In an image, the caches are lent under the run's directory and bound where it says.
        let placed = match &image {
            Some(_) => &Payload {
                caches: (payload.caches.iter().enumerate())
                    .map(|(idx, cache)| payload::CacheSpec { path: image::root::cache_home(idx), ..cache.clone() })
                    .collect(),
                ..payload.clone()
            },
            None => &payload,
        };
        if !placed.mounts.is_empty() || !placed.caches.is_empty() {
            let fetched = mount::place(&setup, placed, &mut lent).await.map_err(setup_ending)?;
            stats.bytes_fetched = Some(stats.bytes_fetched.unwrap_or(0) + fetched);
        }
        let mounted = image.is_some() || !placed.mounts.is_empty() || !placed.caches.is_empty();
        let root = match (image, user) {
            (Some(ready), Some(user)) => {
                let secrets = claim.secrets.is_some().then_some(secrets_file.as_path());
                Some(image::root::make(ready, &payload, &dir, user, secrets).await.map_err(setup_ending)?)
            }
            // `unsupported` refused an image for a worker without slot users.
            _ => None,
        };
        if mounted {
            stats.mount_ms = Some(millis(started.elapsed()));
        }
        Ok::<_, Ending>((env, namespace, proxy, root))
    }
    .await;
    let ending = match prepared {
        Ok((env, namespace, proxy, root)) => {
            stats.setup_ms = Some(millis(claimed.elapsed()));
            let started = Instant::now();
            let network = match &namespace {
                _ if payload.network => Network::Shared,
                Some(namespace) => Network::Joined(namespace.as_fd()),
                None => Network::Loopback,
            };
            let sandbox = match &config.isolation {
                Isolation::Bubblewrap(bubblewrap) => Some(Sandbox {
                    bubblewrap,
                    task_dir: &dir,
                    secrets_file: claim.secrets.is_some().then_some(secrets_file.as_path()),
                    user,
                    network,
                    image: root.as_ref(),
                }),
                Isolation::None => None,
            };
            // docker's command: the image's entrypoint, then the payload's command or the image's.
            let in_image = root.as_ref().map(|root| Payload {
                commands: (payload.commands.iter())
                    .map(|spec| match spec {
                        payload::CommandSpec::Argv(argv) => payload::CommandSpec::Argv(root.image.config.command(argv)),
                        other => other.clone(),
                    })
                    .collect(),
                ..payload.clone()
            });
            let commands = Commands {
                payload: in_image.as_ref().unwrap_or(&payload),
                dir: &dir,
                env: &env,
                sandbox: sandbox.as_ref(),
                limits: &config.limits,
                user,
            };
            let ending = run_commands(&commands, &log, &stop, config.grace, &mut stats).await;
            // Nothing of the task runs now; its proxy stops with it.
            drop(proxy);
            stats.run_ms = Some(millis(started.elapsed()));
            (ending, root)
        }
        Err(ending) => (ending, None),
    };
    let (ending, root) = ending;
    if claim.secrets.is_some() {
        let _ = tokio::fs::remove_file(&secrets_file).await;
    }
    let ending = match ending {
        Ending::Shutdown if revoked.is_cancelled() => Ending::Revoked,
        other => other,
    };
    reclaimer.abort();
    held.release(&task_id, run_id);

    if matches!(ending, Ending::Success | Ending::Failure(_) | Ending::Retry(_)) {
        let target = Target { client: &client, task_id: &task_id, run_id, expires: &expires };
        let started = Instant::now();
        let mut digests = payload.chain_of_trust.then(BTreeMap::new);
        let tree = match &root {
            Some(root) => artifacts::Tree::Image(&root.overlay),
            None => artifacts::Tree::Dir(&dir),
        };
        stats.bytes_uploaded =
            Some(artifacts::upload_all(&target, &payload.artifacts, &tree, &log, digests.as_mut()).await);
        if let (Some(digests), Some(key)) = (digests, &config.signing_key) {
            let runner = chain_of_trust::Runner {
                task_id: &task_id,
                run_id,
                worker_group: &config.worker_group,
                worker_id: &config.worker_id,
            };
            let record = chain_of_trust::certificate(&claim.task, &runner, &digests);
            let files = config.work_dir.join(format!("chain-of-trust-{slot}"));
            if let Err(err) = artifacts::upload_signed(&target, &record, &key.sign(&record), &files).await {
                log.line(&format!("uploading the chain of trust failed: {err}")).await;
            }
        }
        stats.upload_ms = Some(millis(started.elapsed()));
    }
    let purge = matches!(ending, Ending::Failure(_) | Ending::Retry(_))
        && stats.exit_code.is_some_and(|code| payload.purge_exit_codes.contains(&code));
    mount::give_back(&config.cache, &dir, lent, purge, &log).await;
    // The image is let go (it may be evicted) once nothing of the run reads it.
    drop(root);
    let outcome = outcome_of(&ending, &log).await;
    drop(log);
    flusher.finish().await;
    if let Some(outcome) = outcome {
        let target = Target { client: &client, task_id: &task_id, run_id, expires: &expires };
        upload_backing_log(&target, &backing).await;
        report(&client, &task_id, run_id, &outcome, &stats).await;
    }
    let _ = tokio::fs::remove_file(&backing).await;
    empty(&dir).await;
}

/// Uploads the run's whole log (kept at `backing`) as a blob like any artifact, before the
/// run is reported (then it takes no more), and removes the file. A run that printed nothing
/// has no log, live or uploaded.
async fn upload_backing_log(target: &Target<'_>, backing: &Path) {
    let printed = tokio::fs::metadata(backing).await.is_ok_and(|metadata| metadata.len() > 0);
    if !printed {
        let _ = tokio::fs::remove_file(backing).await;
        return;
    }
    if let Err(err) = artifacts::upload_log(target, backing).await {
        tracing::warn!(task.id = %target.task_id, run.id = target.run_id, error = %err, "uploading the run's log failed");
    }
    let _ = tokio::fs::remove_file(backing).await;
}

/// What a setup error ends a run as.
fn setup_ending(err: SetupError) -> Ending {
    match err {
        SetupError::Payload(reason) => Ending::Exception(WorkerException::MalformedPayload, reason),
        SetupError::Worker(reason) => Ending::Exception(WorkerException::InternalError, reason),
    }
}

/// Why this worker cannot run a payload as asked, when it cannot.
fn unsupported(payload: &Payload, isolation: &Isolation) -> Option<String> {
    let contained = matches!(isolation, Isolation::Bubblewrap(_)) && nix::unistd::geteuid().is_root();
    if payload.image.is_some() && !contained {
        return Some(
            "payload.image: this worker cannot run tasks in images (that needs --isolation bubblewrap, with the \
             worker running as root to mount each run's root)"
                .into(),
        );
    }
    if payload.network {
        return None;
    }
    match isolation {
        Isolation::None => Some(
            "payload.network is false, but this worker runs tasks without isolation (--isolation none) \
             and cannot take their network away"
                .into(),
        ),
        Isolation::Bubblewrap(_) if payload.taskcluster_proxy && !nix::unistd::geteuid().is_root() => Some(
            "payload.features.taskclusterProxy with payload.network false needs a worker running as root \
             (the proxy listens in the task's own network namespace)"
                .into(),
        ),
        Isolation::Bubblewrap(_) => None,
    }
}

/// Why this worker cannot sign the run's chain of trust, when the task asks for one and it
/// cannot (generic-worker refuses such a task the same way).
fn unsignable(payload: &Payload, config: &WorkerConfig, user: Option<u32>) -> Option<String> {
    if !payload.chain_of_trust {
        return None;
    }
    if config.signing_key.is_none() {
        return Some(
            "payload.features.chainOfTrust: this worker has no signing key (shoal worker --signing-key)".into(),
        );
    }
    if user.is_none() {
        return Some(
            "payload.features.chainOfTrust: this worker runs tasks as its own user, who could read its signing key \
             (it needs --isolation bubblewrap, run as root)"
                .into(),
        );
    }
    let reserved = [chain_of_trust::CERTIFICATE, chain_of_trust::SIGNATURE];
    payload.artifacts.iter().enumerate().find(|(_, artifact)| reserved.contains(&artifact.name.as_str())).map(
        |(idx, artifact)| {
            format!("payload.artifacts[{idx}].name `{}` is the chain of trust's own; choose another", artifact.name)
        },
    )
}

/// The artifact that would outlive its task, when one would (generic-worker refuses it too).
fn outlived(payload: &Payload, task_expires: &str) -> Option<String> {
    let task_expires = shoal_engine::Timestamp::parse(task_expires)?;
    payload.artifacts.iter().enumerate().find_map(|(idx, artifact)| {
        artifact.expires.filter(|expires| *expires > task_expires).map(|expires| {
            format!("payload.artifacts[{idx}].expires ({expires}) is after the task's expires ({task_expires})")
        })
    })
}

/// The run's credentials proxy when the task asked for one, listening on the worker's
/// loopback (answering only the slot's `user`, when it has one) or, for a task without
/// network, in a network namespace made for the run (returned, for its sandboxes to join).
fn start_proxy(
    client: &Client,
    claim: &Claim,
    payload: &Payload,
    scopes: &[String],
    user: Option<u32>,
) -> Result<(Option<OwnedFd>, Option<Proxy>), String> {
    if !payload.taskcluster_proxy {
        return Ok((None, None));
    }
    if claim.credentials.is_none() {
        return Err("the server gave this run no credentials, so it can have no taskclusterProxy".into());
    }
    let (namespace, listener, user) = if payload.network {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|err| format!("cannot listen on 127.0.0.1 for the proxy: {err}"))?;
        (None, listener, user)
    } else {
        let private =
            netns::private_network().map_err(|err| format!("cannot make a network namespace for the proxy: {err}"))?;
        // Nothing but the task is in that namespace.
        (Some(private.namespace), private.listener, None)
    };
    let proxy = Proxy::start(listener, client.clone(), scopes.to_vec(), user)
        .map_err(|err| format!("cannot start the credentials proxy: {err}"))?;
    Ok((namespace, Some(proxy)))
}

/// The task's `scopes`.
fn task_scopes(task: &Value) -> Vec<String> {
    task["scopes"]
        .as_array()
        .map(|scopes| scopes.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// What a run's ending reports, said in its log too; nothing for a revoked run.
async fn outcome_of(ending: &Ending, log: &LogSink) -> Option<Outcome> {
    match ending {
        Ending::Success => Some(Outcome::Completed),
        Ending::Failure(reason) => {
            log.line(reason).await;
            Some(Outcome::Failed)
        }
        Ending::Exception(reason, message) => {
            log.line(message).await;
            Some(Outcome::Exception(*reason))
        }
        Ending::Retry(code) => {
            log.line(&format!("exit code {code} asks for a retry (onExitStatus.retry)")).await;
            Some(Outcome::Exception(WorkerException::IntermittentTask))
        }
        Ending::Shutdown => {
            log.line("the worker is shutting down; the run is handed back").await;
            Some(Outcome::Exception(WorkerException::WorkerShutdown))
        }
        Ending::Revoked => None,
    }
}

fn millis(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// Removes everything in `dir`, keeping `dir`.
async fn empty(dir: &Path) {
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else { return };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let path = entry.path();
        let removed = match entry.file_type().await {
            Ok(kind) if kind.is_dir() => tokio::fs::remove_dir_all(&path).await,
            _ => tokio::fs::remove_file(&path).await,
        };
        if let Err(err) = removed {
            tracing::warn!(path = %path.display(), error = %err, "cleaning the task directory failed");
        }
    }
}

/// A run's commands and where they run.
#[derive(Clone, Copy)]
struct Commands<'a> {
    payload: &'a Payload,
    dir: &'a Path,
    env: &'a [(String, String)],
    sandbox: Option<&'a Sandbox<'a>>,
    limits: &'a SlotLimits,
    /// The slot's own user, when it has one.
    user: Option<u32>,
}

/// Runs the payload's commands in order with `env` as their whole environment; `stats` gets
/// the last exit code and the peak memory.
async fn run_commands(
    commands: &Commands<'_>,
    log: &LogSink,
    stop: &CancellationToken,
    grace: Duration,
    stats: &mut RunStats,
) -> Ending {
    let Commands { payload, dir, env, sandbox, limits: slot, user } = *commands;
    let watch = Watch::new(slot, user, sandbox.map(|sandbox| sandbox.bubblewrap.tmp_size()), dir);
    let limits = Limits {
        deadline: Instant::now() + payload.max_run_time,
        io_timeout: payload.io_timeout,
        stop,
        grace,
        watch: &watch,
    };
    for (idx, spec) in payload.commands.iter().enumerate() {
        let exit = match process::run(spec, dir, env, sandbox, log, &limits).await {
            Ok(ran) => {
                stats.peak_memory_bytes = stats.peak_memory_bytes.max(ran.peak_memory);
                if let Exit::Code(code) = ran.exit {
                    stats.exit_code = Some(code);
                }
                ran.exit
            }
            Err(err) => return Ending::Failure(format!("command {idx} could not start: {err}")),
        };
        match exit {
            Exit::Code(0) => {}
            Exit::Code(code) if payload.retry_exit_codes.contains(&code) => return Ending::Retry(code),
            Exit::Code(code) => return Ending::Failure(format!("command {idx} exited with code {code}")),
            Exit::TimedOut => {
                stats.timed_out = Some(TimeLimit::MaxRunTime);
                return Ending::Failure(format!(
                    "maxRunTime of {} s exceeded; the task was stopped",
                    payload.max_run_time.as_secs()
                ));
            }
            Exit::Silent => {
                stats.timed_out = Some(TimeLimit::IoTimeout);
                let secs = payload.io_timeout.map_or(0, |timeout| timeout.as_secs());
                return Ending::Failure(format!("no output for {secs} s (ioTimeout); the task was stopped"));
            }
            Exit::Stopped => return Ending::Shutdown,
            Exit::Exceeded(limit) => {
                stats.limit_exceeded = Some(limit);
                return Ending::Failure(watch.reason(limit));
            }
        }
    }
    Ending::Success
}

/// Longest time between reclaims: when the event stream is down, a cancel reaches the worker
/// as a refused reclaim, so this bounds how long a canceled task keeps running then.
const MAX_RECLAIM_INTERVAL: Duration = Duration::from_secs(15);

/// Reclaims at a third of the remaining claim (at least every 15 s); a refusal, or `revoked`
/// cancelled by the event stream, means the run is over, so the commands are stopped and
/// nothing more is reported.
async fn keep_claim(
    client: Client,
    task_id: String,
    run_id: u32,
    mut taken_until: shoal_engine::Timestamp,
    stop: CancellationToken,
    revoked: CancellationToken,
) {
    loop {
        let now = shoal_client::now();
        let remaining = (taken_until.millis() - now.millis()).max(0) as u64;
        let wait = Duration::from_millis((remaining / 3).max(200)).min(MAX_RECLAIM_INTERVAL);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = revoked.cancelled() => {
                stop.cancel();
                return;
            }
        }
        match client.reclaim(&task_id, run_id).await {
            Ok((until, renewed)) => {
                taken_until = until;
                if let Some(renewed) = renewed {
                    client.renew_credentials(renewed);
                }
            }
            Err(err) if err.is_conflict() => {
                tracing::info!(task.id = %task_id, run.id = run_id, "the run was canceled or expired; stopping it");
                revoked.cancel();
                stop.cancel();
                return;
            }
            Err(err) => tracing::warn!(task.id = %task_id, run.id = run_id, error = %err, "reclaim failed; will retry"),
        }
    }
}

async fn report(client: &Client, task_id: &str, run_id: u32, outcome: &Outcome, stats: &RunStats) {
    let stats = (*stats != RunStats::default()).then_some(stats);
    match client.report_measured(task_id, run_id, outcome, stats).await {
        Ok(status) => tracing::info!(task.id = %task_id, run.id = run_id, state = status.state.as_str(), "reported"),
        Err(err) => tracing::warn!(task.id = %task_id, run.id = run_id, error = %err, "reporting failed"),
    }
}
