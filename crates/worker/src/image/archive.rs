//! An image archive as another task uploads it: `docker save`'s (`manifest.json`) or an OCI
//! layout (`index.json`), whole or compressed with zstd, gzip or lz4. Its files are written
//! apart (never unpacked where their names say), then its manifest read: the config and the
//! layers in order, each blob named by digest checked against it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::unpack::UnpackError;

/// Most files an image archive may hold.
const MAX_FILES: usize = 10_000;

/// An archive read apart: its config and its layers' files, lowest first.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) config: Value,
    pub(crate) layers: Vec<PathBuf>,
}

/// Reads the archive `file` into `scratch` (at most `limit` bytes).
pub(crate) fn read(file: &Path, scratch: &Path, limit: u64) -> Result<Parts, UnpackError> {
    let mut source = BufReader::new(File::open(file)?);
    let magic = source.fill_buf()?.get(..4).map(<[u8]>::to_vec).unwrap_or_default();
    let reader: Box<dyn Read> = match magic.as_slice() {
        [0x1f, 0x8b, ..] => Box::new(flate2::bufread::MultiGzDecoder::new(source)),
        [0x28, 0xb5, 0x2f, 0xfd] => Box::new(zstd::Decoder::with_buffer(source)?),
        [0x04, 0x22, 0x4d, 0x18] => Box::new(lz4_flex::frame::FrameDecoder::new(source)),
        _ => Box::new(source),
    };
    let files = extract(reader, scratch, limit)?;
    if let Some(manifest) = files.get("manifest.json") {
        docker_save(&files, &json(manifest, "manifest.json")?)
    } else if let Some(index) = files.get("index.json") {
        oci_layout(&files, &json(index, "index.json")?)
    } else {
        Err(bad("it has neither manifest.json (docker save) nor index.json (an OCI layout)"))
    }
}

fn bad(why: &str) -> UnpackError {
    UnpackError::Corrupt(format!("the image archive is not an image: {why}"))
}

fn json(file: &Path, name: &str) -> Result<Value, UnpackError> {
    let bytes = std::fs::read(file)?;
    serde_json::from_slice(&bytes).map_err(|err| bad(&format!("{name} is not JSON: {err}")))
}

/// Writes each regular file of the archive to `scratch` under a number; answers the files by
/// their plain names (links resolved to the file they name).
fn extract(reader: impl Read, scratch: &Path, limit: u64) -> Result<HashMap<String, PathBuf>, UnpackError> {
    let mut files = HashMap::new();
    let mut links = Vec::new();
    let mut total = 0u64;
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(|err| bad(&err.to_string()))? {
        let mut entry = entry.map_err(|err| bad(&err.to_string()))?;
        let name = plain(&entry.path().map_err(|err| bad(&err.to_string()))?);
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                total += entry.size();
                if total > limit {
                    return Err(UnpackError::Unsafe(format!(
                        "the image archive is larger than this worker's cache ({limit} bytes)"
                    )));
                }
                if files.len() >= MAX_FILES {
                    return Err(bad(&format!("it holds more than {MAX_FILES} files")));
                }
                let at = scratch.join(files.len().to_string());
                std::io::copy(&mut entry, &mut File::create_new(&at)?).map_err(|err| match err.kind() {
                    std::io::ErrorKind::StorageFull => UnpackError::Io(err),
                    _ => bad(&err.to_string()),
                })?;
                files.insert(name, at);
            }
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = entry.link_name().ok().flatten().map(|target| target.into_owned()).unwrap_or_default();
                let base = if entry.header().entry_type() == tar::EntryType::Symlink {
                    Path::new(&name).parent().unwrap_or(Path::new("")).join(target)
                } else {
                    target
                };
                links.push((name, plain(&base)));
            }
            _ => {}
        }
    }
    for (name, target) in links {
        if let Some(file) = files.get(&target).cloned() {
            files.insert(name, file);
        }
    }
    Ok(files)
}

/// A path in the archive as plain names joined by `/` (`..` taken back within it).
fn plain(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            Component::ParentDir => drop(parts.pop()),
            _ => {}
        }
    }
    parts.join("/")
}

fn file<'a>(files: &'a HashMap<String, PathBuf>, name: &str) -> Result<&'a Path, UnpackError> {
    files.get(name).map(PathBuf::as_path).ok_or_else(|| bad(&format!("it names {name}, which it does not hold")))
}

/// `docker save`: the first image of `manifest.json`.
fn docker_save(files: &HashMap<String, PathBuf>, manifest: &Value) -> Result<Parts, UnpackError> {
    let image = manifest.get(0).ok_or_else(|| bad("manifest.json lists no image"))?;
    let config = image["Config"].as_str().ok_or_else(|| bad("manifest.json has no Config"))?;
    let layers = image["Layers"].as_array().ok_or_else(|| bad("manifest.json has no Layers"))?;
    let layers = layers
        .iter()
        .map(|layer| {
            let name = layer.as_str().ok_or_else(|| bad("manifest.json's Layers are not names"))?;
            checked(files, name, None)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = json(&checked(files, config, None)?, config)?;
    Ok(Parts { config, layers })
}

/// An OCI layout: the manifest `index.json` names (for this machine, when it lists several).
fn oci_layout(files: &HashMap<String, PathBuf>, index: &Value) -> Result<Parts, UnpackError> {
    let mut manifest = json(&blob(files, pick(index)?)?, "the image's manifest")?;
    // An index inside: choose again.
    if manifest.get("manifests").is_some() {
        manifest = json(&blob(files, pick(&manifest)?)?, "the image's manifest")?;
    }
    let config_digest = manifest["config"]["digest"].as_str().ok_or_else(|| bad("the manifest has no config"))?;
    let config = json(&blob(files, config_digest)?, "the image's config")?;
    let layers = manifest["layers"]
        .as_array()
        .ok_or_else(|| bad("the manifest has no layers"))?
        .iter()
        .map(|layer| blob(files, layer["digest"].as_str().unwrap_or_default()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Parts { config, layers })
}

/// The digest of the manifest an index lists for linux on this machine's architecture (or
/// its only one).
pub(crate) fn pick(index: &Value) -> Result<&str, UnpackError> {
    let manifests = index["manifests"].as_array().ok_or_else(|| bad("the index lists no manifest"))?;
    let arch = super::architecture();
    let ours = manifests.iter().find(|manifest| {
        manifest["platform"]["os"].as_str() == Some("linux")
            && manifest["platform"]["architecture"].as_str() == Some(arch)
    });
    let chosen = match (ours, manifests.as_slice()) {
        (Some(manifest), _) => manifest,
        (None, [only]) => only,
        _ => return Err(bad(&format!("none of its manifests is for linux/{arch}"))),
    };
    chosen["digest"].as_str().ok_or_else(|| bad("a manifest is listed without its digest"))
}

/// The blob `digest` names (`sha256:<hex>`), its bytes checked against it.
fn blob(files: &HashMap<String, PathBuf>, digest: &str) -> Result<PathBuf, UnpackError> {
    let hex =
        digest.strip_prefix("sha256:").filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    let hex = hex.ok_or_else(|| bad(&format!("`{digest}` is not a sha256 digest")))?;
    checked(files, &format!("blobs/sha256/{hex}"), Some(hex))
}

/// The file `name`, checked against `hex` (or against the digest its name carries).
fn checked(files: &HashMap<String, PathBuf>, name: &str, hex: Option<&str>) -> Result<PathBuf, UnpackError> {
    let path = file(files, &plain(Path::new(name)))?;
    let named = name.strip_prefix("blobs/sha256/");
    if let Some(expected) = hex.or(named) {
        let actual = sha256(path)?;
        if actual != expected {
            return Err(UnpackError::Corrupt(format!(
                "the image archive's {name} has the digest sha256:{actual}, not the one it is named by"
            )));
        }
    }
    Ok(path.to_path_buf())
}

pub(crate) fn sha256(path: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut File::open(path)?, &mut hasher)?;
    Ok(format!("{:x}", hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use serde_json::json;

    use super::*;

    fn hex(bytes: &[u8]) -> String {
        format!("{:x}", Sha256::digest(bytes))
    }

    /// A tar of `(name, bytes)` files.
    fn tar(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, bytes) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            builder.append_data(&mut header, name, bytes.as_slice()).unwrap();
        }
        builder.into_inner().unwrap()
    }

    /// An OCI layout whose index lists an index of two platforms' manifests.
    fn oci_layout(layer: &[u8]) -> Vec<u8> {
        let config = serde_json::to_vec(&json!({"config": {"Env": ["A=1"]}})).unwrap();
        let manifest = serde_json::to_vec(&json!({
            "config": {"digest": format!("sha256:{}", hex(&config))},
            "layers": [{"digest": format!("sha256:{}", hex(layer))}]
        }))
        .unwrap();
        let other = b"{}".to_vec();
        let platforms = serde_json::to_vec(&json!({"manifests": [
            {"digest": format!("sha256:{}", hex(&other)), "platform": {"os": "linux", "architecture": "s390x"}},
            {"digest": format!("sha256:{}", hex(&manifest)), "platform": {"os": "linux", "architecture": crate::image::architecture()}}
        ]}))
        .unwrap();
        let index =
            serde_json::to_vec(&json!({"manifests": [{"digest": format!("sha256:{}", hex(&platforms))}]})).unwrap();
        let blob = |bytes: &[u8]| (format!("blobs/sha256/{}", hex(bytes)), bytes.to_vec());
        let files = [blob(&config), blob(&manifest), blob(&other), blob(&platforms), blob(layer)];
        let mut all: Vec<(&str, Vec<u8>)> = files.iter().map(|(name, bytes)| (name.as_str(), bytes.clone())).collect();
        all.push(("index.json", index));
        all.push(("oci-layout", br#"{"imageLayoutVersion": "1.0.0"}"#.to_vec()));
        tar(&all)
    }

    fn read_bytes(bytes: &[u8]) -> Result<Parts, UnpackError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("image");
        std::fs::write(&file, bytes).unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let parts = read(&file, &scratch, 1 << 20);
        // The layers are read before the scratch directory goes.
        parts.map(|parts| {
            assert!(parts.layers.iter().all(|layer| layer.is_file()));
            Parts { config: parts.config, layers: Vec::new() }
        })
    }

    #[test]
    fn an_oci_layout_is_read_for_this_machine_whole_or_compressed() {
        let layout = oci_layout(b"layer bytes");
        let zstd = zstd::encode_all(layout.as_slice(), 1).unwrap();
        let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz4.write_all(&layout).unwrap();
        let lz4 = lz4.finish().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&layout).unwrap();
        let gz = gz.finish().unwrap();
        for bytes in [layout, zstd, lz4, gz] {
            let parts = read_bytes(&bytes).unwrap();
            assert_eq!(parts.config["config"]["Env"][0], "A=1");
        }
    }

    #[test]
    fn a_blob_that_is_not_what_its_digest_says_or_a_missing_one_is_refused() {
        let config = b"{}".to_vec();
        let manifest = json!([{"Config": format!("blobs/sha256/{}", hex(b"other")), "Layers": []}]);
        let archive = tar(&[
            ("manifest.json", serde_json::to_vec(&manifest).unwrap()),
            (&format!("blobs/sha256/{}", hex(b"other")), config),
        ]);
        let err = read_bytes(&archive).unwrap_err().to_string();
        assert!(err.contains("has the digest"), "{err}");
        let manifest = json!([{"Config": "c.json", "Layers": ["missing/layer.tar"]}]);
        let archive = tar(&[("manifest.json", serde_json::to_vec(&manifest).unwrap()), ("c.json", b"{}".to_vec())]);
        let err = read_bytes(&archive).unwrap_err().to_string();
        assert!(err.contains("missing/layer.tar"), "{err}");
        let err = read_bytes(b"plain text, no tar").unwrap_err().to_string();
        assert!(err.contains("not an image"), "{err}");
    }
}
