//! Uploading what a task produced: each file a blob artifact, a missing one an error
//! artifact that says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest as _, Sha256};
use shoal_client::Client;

use crate::chain_of_trust;
use crate::image::overlay::Overlay;
use crate::logsink::LogSink;
use crate::payload::ArtifactSpec;

/// What a run left, where its artifacts are read: its task directory, or its image's root
/// (the run's writes over the image). No link is followed in either.
pub(crate) enum Tree<'a> {
    Dir(&'a Path),
    Image(&'a Overlay),
}

impl Tree<'_> {
    /// The plain file at `rel`.
    fn file(&self, rel: &str) -> Option<PathBuf> {
        match self {
            Tree::Dir(dir) => {
                let path = dir.join(rel);
                (reached_without_links(dir, &path) && is_plain_file(&path)).then_some(path)
            }
            Tree::Image(overlay) => overlay.file(rel),
        }
    }

    /// Every file under the directory at `rel`, with its path below it.
    fn files_under(&self, rel: &str) -> Option<Vec<(PathBuf, String)>> {
        match self {
            Tree::Dir(dir) => {
                let path = dir.join(rel);
                if reached_without_links(dir, &path) { files_under(&path) } else { None }
            }
            Tree::Image(overlay) => overlay.files_under(rel),
        }
    }
}

/// Where the uploads go and until when they are kept.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) client: &'a Client,
    pub(crate) task_id: &'a str,
    pub(crate) run_id: u32,
    pub(crate) expires: &'a str,
}

/// Uploads every artifact the payload names; problems are recorded as error artifacts and
/// logged, not fatal (as generic-worker does). With `digests`, records each uploaded file's
/// SHA-256 (hex) by its name there.
pub(crate) async fn upload_all(
    target: &Target<'_>,
    specs: &[ArtifactSpec],
    tree: &Tree<'_>,
    log: &LogSink,
    mut digests: Option<&mut BTreeMap<String, String>>,
) -> u64 {
    let mut uploaded = 0;
    for spec in specs {
        let expires = spec.expires.map(|expires| expires.to_string());
        let target = &Target { expires: expires.as_deref().unwrap_or(target.expires), ..*target };
        let files = if spec.directory {
            tree.files_under(&spec.path).map(|files| {
                files
                    .into_iter()
                    .map(|(file, relative)| (file, format!("{}/{relative}", spec.name.trim_end_matches('/'))))
                    .collect()
            })
        } else {
            tree.file(&spec.path).map(|file| vec![(file, spec.name.clone())])
        };
        let Some(files) = files else {
            missing(target, spec, log).await;
            continue;
        };
        for (file, name) in files {
            match upload(target, &file, &name, spec.content_type.as_deref()).await {
                Ok(size) => uploaded += size,
                Err(err) => {
                    log.line(&format!("uploading {name} failed: {err}")).await;
                    continue;
                }
            }
            if let Some(digests) = digests.as_deref_mut() {
                match sha256_of(file).await {
                    Ok(digest) => drop(digests.insert(name, digest)),
                    Err(err) => log.line(&format!("reading {name} for its digest failed: {err}")).await,
                }
            }
        }
    }
    uploaded
}

async fn missing(target: &Target<'_>, spec: &ArtifactSpec, log: &LogSink) {
    log.line(&format!("artifact {} not found at {}", spec.name, spec.path)).await;
    let body = json!({
        "storageType": "error",
        "expires": target.expires,
        "reason": "file-missing-on-worker",
        "message": format!("{} was not there when the commands finished", spec.path),
    });
    if let Err(err) = target.client.create_artifact(target.task_id, target.run_id, &spec.name, &body).await {
        log.line(&format!("recording the missing artifact {} failed: {err}", spec.name)).await;
    }
}

/// The name of a run's whole log, uploaded when it ends (generic-worker's).
pub(crate) const BACKING_LOG: &str = "public/logs/live_backing.log";

/// Uploads the run's whole log, kept at `file`, as [`BACKING_LOG`].
pub(crate) async fn upload_log(target: &Target<'_>, file: &Path) -> anyhow::Result<u64> {
    upload(target, file, BACKING_LOG, Some("text/plain; charset=utf-8")).await
}

/// Uploads a run's chain-of-trust `record` and its `signature`, written first to files
/// beside `files` (out of the task's reach).
pub(crate) async fn upload_signed(
    target: &Target<'_>,
    record: &[u8],
    signature: &[u8],
    files: &Path,
) -> anyhow::Result<()> {
    let (record_file, signature_file) = (files.with_extension("json"), files.with_extension("sig"));
    tokio::fs::write(&record_file, record).await?;
    tokio::fs::write(&signature_file, signature).await?;
    let uploaded = async {
        upload(target, &record_file, chain_of_trust::CERTIFICATE, Some("application/json")).await?;
        upload(target, &signature_file, chain_of_trust::SIGNATURE, Some("application/octet-stream")).await
    }
    .await;
    let _ = tokio::fs::remove_file(&record_file).await;
    let _ = tokio::fs::remove_file(&signature_file).await;
    uploaded.map(drop)
}

/// A file's SHA-256, hex, read off the async threads.
async fn sha256_of(file: PathBuf) -> std::io::Result<String> {
    tokio::task::spawn_blocking(move || {
        let mut hasher = Sha256::new();
        std::io::copy(&mut std::fs::File::open(file)?, &mut hasher)?;
        Ok(format!("{:x}", hasher.finalize()))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Uploads one file; its size.
async fn upload(target: &Target<'_>, file: &Path, name: &str, content_type: Option<&str>) -> anyhow::Result<u64> {
    let size = tokio::fs::metadata(file).await?.len();
    let content_type = content_type.unwrap_or_else(|| guess_content_type(name));
    let body = json!({
        "storageType": "s3",
        "expires": target.expires,
        "contentType": content_type,
        "contentLength": size,
    });
    let created = target.client.create_artifact(target.task_id, target.run_id, name, &body).await?;
    let put_url = created["putUrl"].as_str().ok_or_else(|| anyhow::anyhow!("createArtifact gave no putUrl"))?;
    target.client.upload_file(put_url, file).await?;
    Ok(size)
}

/// Whether `path` (under `dir`) is reached without following a symbolic link: the worker
/// reads what a task left with rights the task may not have, so a link must not lead it out
/// of the task directory.
fn reached_without_links(dir: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(dir) else { return false };
    let mut at = dir.to_path_buf();
    relative.components().all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|meta| !meta.file_type().is_symlink())
    })
}

/// Whether `path` is a regular file itself, not a link to one.
fn is_plain_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_file())
}

/// Every file under `dir` with its artifact name (`<prefix>/<relative path>`); `None` when
/// `dir` is not a directory.
fn files_under(dir: &Path) -> Option<Vec<(PathBuf, String)>> {
    if !std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()) {
        return None;
    }
    let mut res = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            // The entry's own type: a symbolic link is neither followed nor uploaded.
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(entry.path()),
                Ok(kind) if kind.is_file() => res.push(entry.path()),
                _ => {}
            }
        }
    }
    res.sort();
    Some(
        res.into_iter()
            .map(|path| (path.clone(), path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned()))
            .collect(),
    )
}

/// A content type from a file name's extension.
fn guess_content_type(name: &str) -> &'static str {
    let extension = name.rsplit_once('.').map_or("", |(_, ext)| ext);
    match extension {
        "txt" | "log" => "text/plain; charset=utf-8",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "xml" => "application/xml",
        "gz" | "tgz" => "application/gzip",
        "zip" => "application/zip",
        "png" => "image/png",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod link_tests {
    use super::*;

    #[test]
    fn links_are_neither_followed_nor_uploaded() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cr3t").unwrap();
        let task = dir.path();
        std::fs::create_dir(task.join("out")).unwrap();
        std::fs::write(task.join("out/report.txt"), "ok").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), task.join("out/leak.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path(), task.join("out/elsewhere")).unwrap();
        std::os::unix::fs::symlink(outside.path(), task.join("linked")).unwrap();
        let names: Vec<String> = files_under(&task.join("out")).unwrap().into_iter().map(|(_, name)| name).collect();
        assert_eq!(names, ["report.txt"]);
        assert!(!reached_without_links(task, &task.join("linked/secret")), "through a linked directory");
        assert!(!is_plain_file(&task.join("out/leak.txt")));
        assert!(
            reached_without_links(task, &task.join("out/report.txt")) && is_plain_file(&task.join("out/report.txt"))
        );
        assert!(files_under(&task.join("linked")).is_none(), "a linked directory is not walked");
    }
}
