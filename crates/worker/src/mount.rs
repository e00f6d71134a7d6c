//! Before a run's commands: its mounts fetched through the worker's cache and placed in the
//! task directory, and its named caches lent and moved in; after them, the caches moved
//! back (or thrown away). The worker does this itself, before any process of the task
//! runs, so paths are checked against links the task could have planted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest, Sha256};
use shoal_client::{Client, ClientError};
use shoal_engine::auth::scope::ScopeSet;

use crate::cache::{Cache, HeldContent, Lease, disk_usage};
use crate::logsink::LogSink;
use crate::payload::{CacheSpec, Content, Mount, MountKind, Payload, cache_scopes};
use crate::unpack::{self, UnpackError};

/// Why a run's mounts could not be placed.
#[derive(Debug)]
pub(crate) enum SetupError {
    /// The payload asks for what cannot be had (missing or forbidden artifact, wrong
    /// SHA-256, unsafe archive, a cache without its scope): `malformed-payload`.
    Payload(String),
    /// The worker failed (the server unreachable, a disk full): `internal-error`.
    Worker(String),
}

impl From<UnpackError> for SetupError {
    fn from(err: UnpackError) -> SetupError {
        match err {
            UnpackError::Unsafe(reason) | UnpackError::Corrupt(reason) => SetupError::Payload(reason),
            UnpackError::Io(err) => SetupError::Worker(err.to_string()),
        }
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> SetupError + '_ {
    move |err| SetupError::Worker(format!("{what}: {err}"))
}

/// What one run's setup needs.
pub(crate) struct Setup<'a> {
    pub(crate) cache: &'a Arc<Cache>,
    /// The run's client (its credentials), narrowed to `scopes` for artifacts.
    pub(crate) client: &'a Client,
    /// The task's scopes.
    pub(crate) scopes: &'a [String],
    /// The task's scopes expanded through the roles they assume, asked of the server once
    /// when a literal scope is missing (generic-worker asks the Auth service the same).
    pub(crate) expanded: tokio::sync::OnceCell<ScopeSet>,
    pub(crate) task_dir: &'a Path,
    /// The slot's own user, when it has one (what is placed is given to it).
    pub(crate) user: Option<u32>,
    pub(crate) log: &'a LogSink,
}

/// Whether the task's scopes, or else their expansion through roles, satisfy one of `needed`.
async fn holds_any(setup: &Setup<'_>, needed: &[String]) -> Result<bool, SetupError> {
    let literal = ScopeSet::new(setup.scopes.iter().cloned());
    if needed.iter().any(|scope| literal.satisfies(scope)) {
        return Ok(true);
    }
    let expanded = setup
        .expanded
        .get_or_try_init(|| async {
            let scopes = setup.client.expand_scopes(setup.scopes).await.map_err(|err| {
                SetupError::Worker(format!("cannot expand the task's scopes through their roles: {err}"))
            })?;
            Ok::<_, SetupError>(ScopeSet::new(scopes))
        })
        .await?;
    Ok(needed.iter().any(|scope| expanded.satisfies(scope)))
}

/// A named cache moved into a task directory.
pub(crate) struct Lent {
    lease: Lease,
    at: PathBuf,
}

/// Places the payload's caches and mounts; the caches lent are pushed to `lent` as they
/// are (to be given back whatever happens). Answers the bytes downloaded.
pub(crate) async fn place(setup: &Setup<'_>, payload: &Payload, lent: &mut Vec<Lent>) -> Result<u64, SetupError> {
    for spec in &payload.caches {
        if !holds_any(setup, &cache_scopes(&spec.name)).await? {
            let [ours, generic, docker] = cache_scopes(&spec.name);
            return Err(SetupError::Payload(format!(
                "the named cache `{}` needs one of the scopes {ours}, {generic} or {docker} in the task's scopes",
                spec.name
            )));
        }
    }
    let mut fetched = 0;
    for spec in &payload.caches {
        fetched += lend(setup, spec, lent).await?;
    }
    for mount in &payload.mounts {
        fetched += place_mount(setup, mount).await?;
    }
    Ok(fetched)
}

async fn lend(setup: &Setup<'_>, spec: &CacheSpec, lent: &mut Vec<Lent>) -> Result<u64, SetupError> {
    let lease = setup.cache.lend(&spec.name).map_err(io("making a named cache"))?;
    let at = setup.task_dir.join(&spec.path);
    let fresh = lease.fresh;
    let (task_dir, user, home) = (setup.task_dir.to_path_buf(), setup.user, lease.home.clone());
    let target = at.clone();
    let moved = blocking(move || {
        make_parents(&task_dir, &target, user)?;
        std::fs::rename(&home, &target)?;
        if let Some(user) = user {
            use std::os::unix::fs::MetadataExt;
            if std::fs::symlink_metadata(&target)?.uid() != user {
                give_tree(&target, user)?;
            }
        }
        Ok(())
    })
    .await;
    lent.push(Lent { lease, at: at.clone() });
    moved.map_err(io("moving a named cache into the task directory"))?;
    let said = if fresh { "new (empty)" } else { "kept from an earlier task" };
    setup.log.line(&format!("cache {} at {}: {said}", spec.name, spec.path)).await;
    match &spec.preload {
        Some((content, format)) if fresh => {
            let (source, fetched) = obtain(setup, content, &spec.path).await?;
            let (file, format, target) = (source.path().to_path_buf(), *format, at);
            let user = setup.user;
            blocking(move || {
                unpack::unpack(&file, format, &target)?;
                if let Some(user) = user {
                    give_tree(&target, user)?;
                }
                Ok::<_, UnpackError>(())
            })
            .await?;
            Ok(fetched)
        }
        _ => Ok(0),
    }
}

/// Gives the lent caches back: each kept as the task left it, or thrown away when `purge`
/// or when the task put something else than a directory in its place.
pub(crate) async fn give_back(cache: &Arc<Cache>, task_dir: &Path, lent: Vec<Lent>, purge: bool, log: &LogSink) {
    if purge && !lent.is_empty() {
        log.line("named caches purged (the exit code is in onExitStatus.purgeCaches)").await;
    }
    for Lent { lease, at } in lent {
        if purge {
            cache.give_back(lease, None);
            continue;
        }
        let (task_dir, home) = (task_dir.to_path_buf(), lease.home.clone());
        let moved = blocking(move || {
            let rel = at.strip_prefix(&task_dir).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            if !no_links(&task_dir, rel) || !std::fs::symlink_metadata(&at)?.is_dir() {
                return Err(std::io::Error::other("the task left no directory in the cache's place"));
            }
            std::fs::rename(&at, &home)?;
            Ok(disk_usage(&home))
        })
        .await;
        match moved {
            Ok(size) => cache.give_back(lease, Some(size)),
            Err(err) => {
                tracing::warn!(error = %err, "a named cache is not kept");
                cache.give_back(lease, None);
            }
        }
    }
}

async fn place_mount(setup: &Setup<'_>, mount: &Mount) -> Result<u64, SetupError> {
    let (source, fetched) = obtain(setup, &mount.content, &mount.path).await?;
    let (file, kind, task_dir, user) =
        (source.path().to_path_buf(), mount.kind, setup.task_dir.to_path_buf(), setup.user);
    let target = setup.task_dir.join(&mount.path);
    blocking(move || {
        make_parents(&task_dir, &target, user)?;
        match kind {
            MountKind::File(compression) => unpack::place_file(&file, compression, &target)?,
            MountKind::Directory(format) => unpack::unpack(&file, format, &target)?,
        }
        if let Some(user) = user {
            give_tree(&target, user)?;
        }
        Ok::<_, UnpackError>(())
    })
    .await
    .map_err(|err| match SetupError::from(err) {
        SetupError::Payload(reason) => SetupError::Payload(format!("mount {}: {reason}", mount.path)),
        SetupError::Worker(reason) => SetupError::Worker(format!("mount {}: {reason}", mount.path)),
    })?;
    drop(source);
    Ok(fetched)
}

/// Bytes to place: a cached file (held while placed), or inline bytes in a file of their own.
pub(crate) enum Source {
    Cached(HeldContent),
    Inline(PathBuf),
}

impl Source {
    pub(crate) fn path(&self) -> &Path {
        match self {
            Source::Cached(held) => &held.path,
            Source::Inline(path) => path,
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        if let Source::Inline(path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The task the Index holds at `namespace` (said in the log, for `what`). The Index answers
/// anyone; that task's artifacts are then read as any other task's.
pub(crate) async fn indexed_task(setup: &Setup<'_>, namespace: &str, what: &str) -> Result<String, SetupError> {
    let found = setup.client.find_indexed(namespace).await.map_err(|err| match err.status() {
        Some(status) if status.as_u16() == 404 => {
            SetupError::Payload(format!("{what}: no task is indexed at {namespace}"))
        }
        _ => refused(&format!("the task indexed at {namespace}"), &err),
    })?;
    let task_id = found["taskId"].as_str().unwrap_or_default().to_owned();
    setup.log.line(&format!("{what}: {namespace} is task {task_id}")).await;
    Ok(task_id)
}

/// The content's bytes: from the cache, or fetched into it (once, when two runs want them at
/// once); answers how many bytes were downloaded.
pub(crate) async fn obtain(setup: &Setup<'_>, content: &Content, path: &str) -> Result<(Source, u64), SetupError> {
    let started = Instant::now();
    let indexed;
    let content = match content {
        Content::Indexed { namespace, artifact, sha256 } => {
            let task_id = indexed_task(setup, namespace, &format!("mount {path}")).await?;
            indexed = Content::Artifact { task_id, artifact: artifact.clone(), sha256: sha256.clone() };
            &indexed
        }
        other => other,
    };
    let (key, what, fetch) = match content {
        Content::Inline { bytes, sha256 } => {
            check_digest(&format!("{:x}", Sha256::digest(bytes)), sha256.as_deref(), path)?;
            let file = setup.cache.partial();
            std::fs::write(&file, bytes).map_err(io("writing inline content"))?;
            return Ok((Source::Inline(file), 0));
        }
        Content::Artifact { task_id, artifact, sha256 } => {
            // Checked here, not only by the server: a cached copy must not reach a task that
            // could not have downloaded it (generic-worker checks the same way).
            if let Some(private) = shoal_engine::artifact::private_names([artifact.as_str()]).first() {
                let needed = format!("queue:get-artifact:{private}");
                if !holds_any(setup, std::slice::from_ref(&needed)).await? {
                    return Err(SetupError::Payload(format!(
                        "mount {path}: cannot get artifact {artifact} of task {task_id}: it is private and the \
                         task's scopes do not include {needed}"
                    )));
                }
            }
            let run_id = latest_run(setup.client, task_id, artifact).await?;
            // Keyed by where the bytes come from: a digest alone never finds them.
            let key = content_key(&format!("artifact:{task_id}/{run_id}/{artifact}"), sha256.as_deref());
            let what = format!("artifact {artifact} of task {task_id} run {run_id}");
            (key, what, Fetch::Artifact { task_id, artifact, run_id })
        }
        Content::Url { url, sha256 } => {
            let key = content_key(&format!("url:{url}"), sha256.as_deref());
            (key, url.clone(), Fetch::Url(url))
        }
        Content::Indexed { .. } => unreachable!("looked up above"),
    };
    if let Some(held) = setup.cache.content(&key) {
        setup.log.line(&format!("mount {path}: {what}, from the worker's cache")).await;
        return Ok((Source::Cached(held), 0));
    }
    let _fetching = setup.cache.fetch_lock(&key).await;
    if let Some(held) = setup.cache.content(&key) {
        setup.log.line(&format!("mount {path}: {what}, from the worker's cache")).await;
        return Ok((Source::Cached(held), 0));
    }
    let response = match fetch {
        Fetch::Artifact { task_id, artifact, run_id } => {
            setup.client.download_artifact(task_id, run_id, artifact, setup.scopes).await
        }
        Fetch::Url(url) => setup.client.download_url(url).await,
    }
    .map_err(|err| refused(&what, &err))?;
    let partial = setup.cache.partial();
    let written = write_download(response, &partial, setup.cache.limit(), &what).await;
    let (size, digest) = match written {
        Ok(written) => written,
        Err(err) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(err);
        }
    };
    if let Err(err) = check_digest(&digest, content.sha256(), path) {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(err);
    }
    let held = setup.cache.insert_content(&key, &partial, size).map_err(io("keeping a download in the cache"))?;
    let millis = started.elapsed().as_millis();
    setup.log.line(&format!("mount {path}: {what}, {size} bytes fetched in {millis} ms")).await;
    Ok((Source::Cached(held), size))
}

/// The cache key of content from `source`: the source itself, and the digest it was
/// checked against when the payload pins one (a copy kept under another pin, or none, is
/// fetched and checked again).
fn content_key(source: &str, sha256: Option<&str>) -> String {
    match sha256 {
        Some(sha256) => format!("{source}#sha256:{sha256}"),
        None => source.to_owned(),
    }
}

/// What a download asks the server (or the URL's host) for.
enum Fetch<'a> {
    Artifact { task_id: &'a str, artifact: &'a str, run_id: u32 },
    Url(&'a str),
}

/// The latest run of `task_id` (whose artifact a mount reads, as getLatestArtifact does).
pub(crate) async fn latest_run(client: &Client, task_id: &str, artifact: &str) -> Result<u32, SetupError> {
    let status = client.task_status(task_id).await.map_err(|err| refused(&format!("task {task_id}"), &err))?;
    status
        .runs
        .last()
        .map(|run| run.run_id)
        .ok_or_else(|| SetupError::Payload(format!("task {task_id} has no run, so no artifact {artifact} to mount")))
}

/// A refused download: the payload's fault when the server said no (4xx), the worker's
/// when it could not be reached.
fn refused(what: &str, err: &ClientError) -> SetupError {
    match err.status() {
        Some(status) if status.is_client_error() => SetupError::Payload(format!("cannot get {what}: {err}")),
        _ => SetupError::Worker(format!("cannot get {what}: {err}")),
    }
}

/// Streams a download into `file`, bounded by `limit` bytes; answers its size and SHA-256.
async fn write_download(
    mut response: reqwest::Response,
    file: &Path,
    limit: u64,
    what: &str,
) -> Result<(u64, String), SetupError> {
    use tokio::io::AsyncWriteExt;
    let mut out = tokio::fs::File::create(file).await.map_err(io("writing a download"))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) =
        response.chunk().await.map_err(|err| SetupError::Worker(format!("downloading {what}: {err}")))?
    {
        size += chunk.len() as u64;
        if size > limit {
            return Err(SetupError::Worker(format!("{what} is larger than this worker's cache ({limit} bytes)")));
        }
        hasher.update(&chunk);
        out.write_all(&chunk).await.map_err(io("writing a download"))?;
    }
    out.sync_all().await.map_err(io("writing a download"))?;
    Ok((size, format!("{:x}", hasher.finalize())))
}

fn check_digest(actual: &str, expected: Option<&str>, path: &str) -> Result<(), SetupError> {
    match expected {
        Some(expected) if expected != actual => Err(SetupError::Payload(format!(
            "mount {path}: the content's SHA-256 is {actual}, not {expected} as the payload says"
        ))),
        _ => Ok(()),
    }
}

pub(crate) async fn blocking<T: Send + 'static, E: From<std::io::Error> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| Err(std::io::Error::other(format!("the worker's setup thread failed: {err}")).into()))
}

/// Whether no directory between `task_dir` and `task_dir/rel` (`rel` itself excluded) is a
/// link.
fn no_links(task_dir: &Path, rel: &Path) -> bool {
    let mut at = task_dir.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    parts[..parts.len().saturating_sub(1)].iter().all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|metadata| metadata.is_dir())
    })
}

/// Makes the directories above `target` (below `task_dir`), given to `user`.
fn make_parents(task_dir: &Path, target: &Path, user: Option<u32>) -> std::io::Result<()> {
    let rel = target.strip_prefix(task_dir).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut at = task_dir.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => return Err(std::io::Error::other(format!("{} is in the way", at.display()))),
            Err(_) => {
                std::fs::create_dir(&at)?;
                if let Some(user) = user {
                    std::os::unix::fs::lchown(&at, Some(user), Some(user))?;
                }
            }
        }
    }
    Ok(())
}

/// Gives everything under `path` to `user` (links themselves, never what they point to).
fn give_tree(path: &Path, user: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(user), Some(user))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            give_tree(&entry?.path(), user)?;
        }
    }
    Ok(())
}
