//! `payload.mounts` (generic-worker's shape) and `payload.caches` (Swarming's named caches):
//! what a task wants placed in its directory before its commands run.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::{MAX_PATH, relative_path};

/// Most mounts and caches one task may ask for.
const MAX_MOUNTS: usize = 64;
/// Longest cache name, in bytes.
const MAX_CACHE_NAME: usize = 100;

/// Something placed in the task directory before the commands run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where, relative to the task directory.
    pub path: String,
    /// The bytes.
    pub content: Content,
    /// As a file, or unpacked as a directory.
    pub kind: MountKind,
}

/// How a mount's bytes are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    /// A file, decompressed first when it has a format.
    File(Option<Compression>),
    /// A directory the archive is unpacked into.
    Directory(ArchiveFormat),
}

/// A compressed file's format (a file mount's `format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// gzip.
    Gz,
    /// bzip2.
    Bz2,
    /// xz (LZMA2).
    Xz,
    /// Zstandard.
    Zst,
}

impl Compression {
    /// The names a payload gives them, as generic-worker's.
    pub const NAMES: &str = "gz, bz2, xz, zst";

    /// The format a payload names.
    #[must_use]
    pub fn named(name: &str) -> Option<Compression> {
        Some(match name {
            "gz" => Compression::Gz,
            "bz2" => Compression::Bz2,
            "xz" => Compression::Xz,
            "zst" => Compression::Zst,
            _ => return None,
        })
    }
}

/// An archive's format (a directory mount's `format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveFormat {
    /// Plain tar.
    Tar,
    /// A compressed tar.
    CompressedTar(Compression),
    /// zip (stored or deflated entries).
    Zip,
}

impl ArchiveFormat {
    /// The names a payload gives them, as generic-worker's.
    pub const NAMES: &str = "tar, tar.gz, tar.bz2, tar.xz, tar.zst, zip";

    /// The format a payload names.
    #[must_use]
    pub fn named(name: &str) -> Option<ArchiveFormat> {
        match name {
            "tar" => Some(ArchiveFormat::Tar),
            "zip" => Some(ArchiveFormat::Zip),
            _ => name.strip_prefix("tar.").and_then(Compression::named).map(ArchiveFormat::CompressedTar),
        }
    }
}

/// Where a mount's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Another task's artifact (its latest run's), read with the task's scopes.
    Artifact {
        /// The task.
        task_id: String,
        /// The artifact's name.
        artifact: String,
        /// The bytes' SHA-256, lowercase hex, when the task pins them.
        sha256: Option<String>,
    },
    /// The artifact of the task the Index holds at a namespace (looked up when the run starts).
    Indexed {
        /// The namespace.
        namespace: String,
        /// The artifact's name.
        artifact: String,
        /// The bytes' SHA-256, lowercase hex, when the task pins them.
        sha256: Option<String>,
    },
    /// A URL, fetched by the worker.
    Url {
        /// The URL (http or https).
        url: String,
        /// The bytes' SHA-256, lowercase hex, when the task pins them.
        sha256: Option<String>,
    },
    /// Bytes in the payload itself (`raw` or `base64`).
    Inline {
        /// The bytes.
        bytes: Vec<u8>,
        /// The bytes' SHA-256, lowercase hex, when the task pins them.
        sha256: Option<String>,
    },
}

impl Content {
    /// The SHA-256 the task pinned, if any.
    pub fn sha256(&self) -> Option<&str> {
        match self {
            Content::Artifact { sha256, .. }
            | Content::Indexed { sha256, .. }
            | Content::Url { sha256, .. }
            | Content::Inline { sha256, .. } => sha256.as_deref(),
        }
    }
}

/// A named cache: a directory the worker keeps between tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSpec {
    /// Its name (`[A-Za-z0-9._:-]`, not starting with a dot).
    pub name: String,
    /// Where it appears, relative to the task directory.
    pub path: String,
    /// What a new (empty) cache is filled with first (generic-worker's `content`).
    pub preload: Option<(Content, ArchiveFormat)>,
}

/// The scopes that let a task use the named cache `name`: Shoal's, generic-worker's or
/// docker-worker's.
#[must_use]
pub fn cache_scopes(name: &str) -> [String; 3] {
    [format!("queue:cache:{name}"), format!("generic-worker:cache:{name}"), format!("docker-worker:cache:{name}")]
}

/// Parses `payload.mounts` and `payload.caches`; a generic-worker cache mount
/// (`{cacheName, directory}`) in `mounts` is a named cache.
pub(super) fn parse(mounts: Option<&Value>, caches: Option<&Value>) -> Result<(Vec<Mount>, Vec<CacheSpec>), String> {
    let mut placed = Vec::new();
    let mut named = Vec::new();
    match mounts {
        None => {}
        Some(Value::Array(items)) if items.len() <= MAX_MOUNTS => {
            for (idx, item) in items.iter().enumerate() {
                let field = format!("payload.mounts[{idx}]");
                let object = item.as_object().ok_or_else(|| format!("{field} must be an object"))?;
                if object.contains_key("cacheName") {
                    named.push(cache_mount(&field, object)?);
                } else {
                    placed.push(mount(&field, object)?);
                }
            }
        }
        Some(_) => return Err(format!("payload.mounts must be a list of at most {MAX_MOUNTS} mounts")),
    }
    match caches {
        None => {}
        Some(Value::Array(items)) if items.len() <= MAX_MOUNTS => {
            for (idx, item) in items.iter().enumerate() {
                let field = format!("payload.caches[{idx}]");
                let object = item.as_object().ok_or_else(|| format!("{field} must be an object {{name, path}}"))?;
                let name = text(object, &field, "name")?;
                check_cache_name(&format!("{field}.name"), name)?;
                let path = relative_path(&format!("{field}.path"), text(object, &field, "path")?)?;
                named.push(CacheSpec { name: name.to_owned(), path, preload: None });
            }
        }
        Some(_) => return Err(format!("payload.caches must be a list of at most {MAX_MOUNTS} {{name, path}}")),
    }
    check_apart(&placed, &named)?;
    Ok((placed, named))
}

fn mount(field: &str, object: &Map<String, Value>) -> Result<Mount, String> {
    let content = || content(&format!("{field}.content"), object.get("content"));
    let format = object.get("format").map(|format| format.as_str().ok_or(format!("{field}.format must be a string")));
    match (object.get("file"), object.get("directory")) {
        (Some(path), None) => {
            let path = path.as_str().ok_or_else(|| format!("{field}.file must be a string"))?;
            let path = relative_path(&format!("{field}.file"), path)?;
            let compression = match format.transpose()? {
                None => None,
                Some(name) => Some(Compression::named(name).ok_or_else(|| {
                    format!("{field}.format `{name}` is not one of {} (for a file)", Compression::NAMES)
                })?),
            };
            Ok(Mount { path, content: content()?, kind: MountKind::File(compression) })
        }
        (None, Some(path)) => {
            let path = path.as_str().ok_or_else(|| format!("{field}.directory must be a string"))?;
            let path = relative_path(&format!("{field}.directory"), path)?;
            let format = archive_format(field, format.transpose()?)?;
            Ok(Mount { path, content: content()?, kind: MountKind::Directory(format) })
        }
        _ => Err(format!("{field} must have exactly one of file, directory (or cacheName with directory)")),
    }
}

fn cache_mount(field: &str, object: &Map<String, Value>) -> Result<CacheSpec, String> {
    let name = text(object, field, "cacheName")?;
    check_cache_name(&format!("{field}.cacheName"), name)?;
    let path = relative_path(&format!("{field}.directory"), text(object, field, "directory")?)?;
    let preload = match object.get("content") {
        None => None,
        Some(value) => {
            let format = object.get("format").map(|f| f.as_str().ok_or(format!("{field}.format must be a string")));
            Some((content(&format!("{field}.content"), Some(value))?, archive_format(field, format.transpose()?)?))
        }
    };
    Ok(CacheSpec { name: name.to_owned(), path, preload })
}

fn archive_format(field: &str, format: Option<&str>) -> Result<ArchiveFormat, String> {
    let names = ArchiveFormat::NAMES;
    match format {
        Some(name) => ArchiveFormat::named(name)
            .ok_or_else(|| format!("{field}.format `{name}` is not one of {names} (for a directory)")),
        None => Err(format!("{field}.format is required for a directory: one of {names}")),
    }
}

fn content(field: &str, value: Option<&Value>) -> Result<Content, String> {
    let object = value.and_then(Value::as_object).ok_or_else(|| {
        format!(
            "{field} must be an object: {{taskId, artifact}}, {{namespace, artifact}}, {{url}}, {{raw}} or {{base64}}"
        )
    })?;
    let sha256 = match object.get("sha256") {
        None => None,
        Some(Value::String(hex))
            if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Some(hex.clone())
        }
        Some(_) => return Err(format!("{field}.sha256 must be 64 lowercase hexadecimal digits")),
    };
    if let Some(task_id) = object.get("taskId") {
        let task_id = task_id
            .as_str()
            .filter(|id| shoal_engine::TaskId::parse(id).is_some())
            .ok_or_else(|| format!("{field}.taskId must be a slugid"))?;
        let artifact = artifact_name(object, field)?;
        return Ok(Content::Artifact { task_id: task_id.to_owned(), artifact: artifact.to_owned(), sha256 });
    }
    if let Some(url) = object.get("url") {
        let url = url
            .as_str()
            .filter(|url| (url.starts_with("http://") || url.starts_with("https://")) && url.len() <= 8192)
            .ok_or_else(|| format!("{field}.url must be an http or https URL"))?;
        return Ok(Content::Url { url: url.to_owned(), sha256 });
    }
    if let Some(raw) = object.get("raw") {
        let raw = raw.as_str().ok_or_else(|| format!("{field}.raw must be a string"))?;
        return Ok(Content::Inline { bytes: raw.as_bytes().to_vec(), sha256 });
    }
    if let Some(encoded) = object.get("base64") {
        let bytes = encoded
            .as_str()
            .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
            .ok_or_else(|| format!("{field}.base64 must be a base64 string"))?;
        return Ok(Content::Inline { bytes, sha256 });
    }
    if let Some(namespace) = object.get("namespace") {
        let namespace = namespace
            .as_str()
            .filter(|text| !text.is_empty() && shoal_engine::index::Namespace::parse("namespace", text).is_ok())
            .ok_or_else(|| format!("{field}.namespace must be an index namespace (dot-separated words)"))?;
        let artifact = artifact_name(object, field)?;
        return Ok(Content::Indexed { namespace: namespace.to_owned(), artifact: artifact.to_owned(), sha256 });
    }
    Err(format!("{field} must have one of taskId or namespace (with artifact), url, raw, base64"))
}

fn artifact_name<'a>(object: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    let artifact = text(object, field, "artifact")?;
    if artifact.starts_with('/') || artifact.len() > MAX_PATH {
        return Err(format!(
            "{field}.artifact must be an artifact name (not starting with /, at most {MAX_PATH} bytes)"
        ));
    }
    Ok(artifact)
}

fn text<'a>(object: &'a Map<String, Value>, field: &str, key: &str) -> Result<&'a str, String> {
    object.get(key).and_then(Value::as_str).ok_or_else(|| format!("{field}.{key} is required (a string)"))
}

pub(super) fn check_cache_name(field: &str, name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= MAX_CACHE_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if fine {
        Ok(())
    } else {
        Err(format!("{field} must be 1..={MAX_CACHE_NAME} of A-Z a-z 0-9 . _ : - (not starting with a dot)"))
    }
}

/// No mount or cache lies inside another, and no cache is asked for twice.
pub(super) fn check_apart(mounts: &[Mount], caches: &[CacheSpec]) -> Result<(), String> {
    let paths: Vec<&str> =
        mounts.iter().map(|m| m.path.as_str()).chain(caches.iter().map(|c| c.path.as_str())).collect();
    let within =
        |inner: &str, outer: &str| inner == outer || inner.strip_prefix(outer).is_some_and(|r| r.starts_with('/'));
    for (idx, path) in paths.iter().enumerate() {
        if let Some(other) = paths[idx + 1..].iter().find(|other| within(path, other) || within(other, path)) {
            return Err(format!(
                "payload.mounts: `{path}` and `{other}` overlap; each mount and cache needs a place of its own"
            ));
        }
    }
    for (idx, cache) in caches.iter().enumerate() {
        if caches[..idx].iter().any(|other| other.name == cache.name) {
            return Err(format!("payload.caches: the cache `{}` is asked for twice", cache.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn generic_workers_mounts_and_swarmings_caches_are_read() {
        let mounts = json!([
            {"file": "./bin//tool", "content": {"url": "https://example.com/tool", "sha256": SHA}},
            {"directory": "./tools/", "format": "tar.bz2", "content": {"url": "https://example.com/tools.tar.bz2"}},
            {"file": "data.json", "format": "xz", "content": {"url": "https://example.com/data.json.xz"}},
            {"directory": "app", "format": "tar.gz", "content": {"taskId": "fN1SbArXTPSVFNUvaOlinQ", "artifact": "public/app.tar.gz"}},
            {"file": "notes.txt", "content": {"raw": "hello"}},
            {"cacheName": "checkout", "directory": "src"}
        ]);
        let caches = json!([{"name": "ccache", "path": ".ccache"}]);
        let (placed, named) = parse(Some(&mounts), Some(&caches)).unwrap();
        assert_eq!(placed.len(), 5);
        assert_eq!((placed[0].path.as_str(), placed[0].content.sha256()), ("bin/tool", Some(SHA)));
        assert_eq!(placed[1].path, "tools");
        assert_eq!(placed[1].kind, MountKind::Directory(ArchiveFormat::CompressedTar(Compression::Bz2)));
        assert_eq!(placed[2].kind, MountKind::File(Some(Compression::Xz)));
        assert_eq!(placed[3].kind, MountKind::Directory(ArchiveFormat::CompressedTar(Compression::Gz)));
        assert_eq!(placed[4].content, Content::Inline { bytes: b"hello".to_vec(), sha256: None });
        let names: Vec<(&str, &str)> = named.iter().map(|c| (c.name.as_str(), c.path.as_str())).collect();
        assert_eq!(names, [("checkout", "src"), ("ccache", ".ccache")]);
    }

    #[test]
    fn errors_name_the_field_and_the_rule() {
        let artifact = json!({"taskId": "fN1SbArXTPSVFNUvaOlinQ", "artifact": "public/a"});
        let cases = [
            (json!([{"file": "../x", "content": artifact}]), json!(null), "payload.mounts[0].file"),
            (json!([{"file": "/etc/x", "content": artifact}]), json!(null), "payload.mounts[0].file"),
            (json!([{"file": "./", "content": artifact}]), json!(null), "payload.mounts[0].file"),
            (json!([{"file": "a/./../b", "content": artifact}]), json!(null), "payload.mounts[0].file"),
            (
                json!([{"file": "f", "format": "lz4", "content": artifact}]),
                json!(null),
                "payload.mounts[0].format `lz4` is not one of gz, bz2, xz, zst",
            ),
            (json!([{"directory": "d", "content": artifact}]), json!(null), "payload.mounts[0].format"),
            (
                json!([{"directory": "d", "format": "rar", "content": artifact}]),
                json!(null),
                "payload.mounts[0].format",
            ),
            (json!([{"file": "f", "content": {"url": "ftp://x"}}]), json!(null), "payload.mounts[0].content.url"),
            (
                json!([{"file": "f", "content": {"url": "https://x", "sha256": "ABC"}}]),
                json!(null),
                "payload.mounts[0].content.sha256",
            ),
            (
                json!([{"file": "f", "content": {"taskId": "nope", "artifact": "a"}}]),
                json!(null),
                "payload.mounts[0].content.taskId",
            ),
            (
                json!([{"file": "f", "content": {"namespace": "x..y", "artifact": "a"}}]),
                json!(null),
                "payload.mounts[0].content.namespace",
            ),
            (json!(null), json!([{"name": "../up", "path": "c"}]), "payload.caches[0].name"),
            (json!(null), json!([{"name": "c", "path": "a/../b"}]), "payload.caches[0].path"),
            (
                json!([{"file": "a/b", "content": artifact}]),
                json!([{"name": "c", "path": "a"}]),
                "payload.mounts: `a/b` and `a`",
            ),
            (
                json!(null),
                json!([{"name": "c", "path": "x"}, {"name": "c", "path": "y"}]),
                "payload.caches: the cache `c`",
            ),
        ];
        for (mounts, caches, field) in cases {
            let err =
                parse(Some(&mounts).filter(|m| !m.is_null()), Some(&caches).filter(|c| !c.is_null())).unwrap_err();
            assert!(err.starts_with(field), "{mounts} {caches}: {err}");
        }
    }
}
