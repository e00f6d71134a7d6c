//! Uploading what a task produced: each file a blob artifact, a missing one an error
//! artifact that says why.

use std::path::{Path, PathBuf};

use serde_json::json;
use shoal_client::Client;

use crate::logsink::LogSink;
use crate::payload::ArtifactSpec;

/// Where the uploads go and until when they are kept.
pub(crate) struct Target<'a> {
    pub(crate) client: &'a Client,
    pub(crate) task_id: &'a str,
    pub(crate) run_id: u32,
    pub(crate) expires: &'a str,
}

/// Uploads every artifact the payload names; problems are recorded as error artifacts and
/// logged, not fatal (as generic-worker does).
pub(crate) async fn upload_all(target: &Target<'_>, specs: &[ArtifactSpec], dir: &Path, log: &LogSink) -> u64 {
    let mut uploaded = 0;
    for spec in specs {
        let path = dir.join(&spec.path);
        let files = if spec.directory {
            files_under(&path).map(|files| {
                files
                    .into_iter()
                    .map(|(file, relative)| (file, format!("{}/{relative}", spec.name.trim_end_matches('/'))))
                    .collect()
            })
        } else {
            path.is_file().then(|| vec![(path.clone(), spec.name.clone())])
        };
        let Some(files) = files else {
            missing(target, spec, log).await;
            continue;
        };
        for (file, name) in files {
            match upload(target, &file, &name, spec.content_type.as_deref()).await {
                Ok(size) => uploaded += size,
                Err(err) => log.line(&format!("uploading {name} failed: {err}")).await,
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

/// Every file under `dir` with its artifact name (`<prefix>/<relative path>`); `None` when
/// `dir` is not a directory.
fn files_under(dir: &Path) -> Option<Vec<(PathBuf, String)>> {
    if !dir.is_dir() {
        return None;
    }
    let mut res = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.is_file() {
                res.push(path);
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
