//! One image layer applied onto the root unpacked so far, as a container runtime applies
//! it: whiteouts (`.wh.<name>`) delete what lower layers put there, an opaque marker
//! (`.wh..wh..opq`) empties its directory of them. The worker (root) writes here, so no
//! entry is written through a link, hard links stay inside the root, devices and FIFOs are
//! refused, set-id bits are dropped and everything belongs to the worker's user; the
//! directories the image gives to users other than root are remembered (a task's user owns
//! them in its run).

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::unpack::{UnpackError, create_new};

/// The opaque marker's name.
const OPAQUE: &str = ".wh..wh..opq";
/// A whiteout's prefix.
const WHITEOUT: &str = ".wh.";

/// Most entries all of an image's layers may hold (a large image has some 100,000).
const MAX_ENTRIES: u64 = 2_000_000;

/// What applying layers has learnt of the root.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Bytes of the files written.
    pub(crate) bytes: u64,
    /// Entries read, in every layer so far.
    pub(crate) entries: u64,
    /// Directories (relative to the root) the image gives to a user other than root.
    pub(crate) owned: BTreeSet<String>,
}

/// Applies the layer `file` (a tar, plain, gzip or zstd) onto `root`, at most `limit` bytes
/// in all.
pub(crate) fn apply(file: &Path, root: &Path, applied: &mut Applied, limit: u64) -> Result<(), UnpackError> {
    let mut source = BufReader::new(File::open(file)?);
    let magic = source.fill_buf()?.get(..4).map(<[u8]>::to_vec).unwrap_or_default();
    let reader: Box<dyn Read> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(source))
    } else if magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Box::new(zstd::Decoder::with_buffer(source)?)
    } else {
        Box::new(source)
    };
    let mut archive = tar::Archive::new(reader);
    // Written in this layer: an opaque marker keeps them.
    let mut ours: HashSet<PathBuf> = HashSet::new();
    for entry in archive.entries().map_err(layer_corrupt)? {
        let mut entry = entry.map_err(layer_corrupt)?;
        applied.entries += 1;
        if applied.entries > MAX_ENTRIES {
            return Err(UnpackError::Unsafe(format!("the image has more than {MAX_ENTRIES} entries")));
        }
        let raw = entry.path().map_err(layer_corrupt)?.into_owned();
        let Some(rel) = plain(&raw)? else { continue };
        let name = rel.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let parent = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        make_parents(root, &rel)?;
        if name == OPAQUE {
            empty_but(root, &parent, &ours)?;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            let gone = parent.join(hidden);
            remove(&root.join(&gone))?;
            forget(&mut applied.owned, &gone);
            continue;
        }
        let at = root.join(&rel);
        let header = entry.header();
        let mode = header.mode().map_err(layer_corrupt)? & 0o1777;
        // Only whether it is root's matters; an unreadable owner is taken as root's.
        let other_owner = header.uid().is_ok_and(|uid| uid != 0);
        let kind = header.entry_type();
        match kind {
            tar::EntryType::Directory => {
                match std::fs::symlink_metadata(&at) {
                    Ok(metadata) if metadata.is_dir() => {}
                    Ok(_) => {
                        remove(&at)?;
                        std::fs::DirBuilder::new().mode(0o755).create(&at)?;
                    }
                    Err(_) => std::fs::DirBuilder::new().mode(0o755).create(&at)?,
                }
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode))?;
                let key = rel.to_string_lossy().into_owned();
                if other_owner {
                    applied.owned.insert(key);
                } else {
                    applied.owned.remove(&key);
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                remove(&at)?;
                applied.bytes += entry.size();
                if applied.bytes > limit {
                    return Err(UnpackError::Unsafe(format!(
                        "the image is larger than this worker's cache ({limit} bytes)"
                    )));
                }
                let mut out = create_new(&at, 0o600)?;
                std::io::copy(&mut entry, &mut out).map_err(|err| unpack_error(&raw, err))?;
                out.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            tar::EntryType::Symlink => {
                // Its target is read in the image's root, by the task; the worker never follows it.
                let target = entry
                    .link_name()
                    .map_err(layer_corrupt)?
                    .ok_or_else(|| layer_corrupt("a link without a target"))?;
                remove(&at)?;
                std::os::unix::fs::symlink(&*target, &at)?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(layer_corrupt)?
                    .ok_or_else(|| layer_corrupt("a link without a target"))?;
                let Some(target) = plain(&target)? else {
                    return Err(UnpackError::Unsafe(format!("the hard link `{}` names no file", raw.display())));
                };
                make_parents(root, &target)?;
                let source = root.join(&target);
                if !std::fs::symlink_metadata(&source).is_ok_and(|metadata| metadata.is_file()) {
                    return Err(UnpackError::Unsafe(format!(
                        "the hard link `{}` -> `{}` names no file of the image",
                        raw.display(),
                        target.display()
                    )));
                }
                remove(&at)?;
                std::fs::hard_link(&source, &at)?;
            }
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader | tar::EntryType::GNULongName => continue,
            other => {
                return Err(UnpackError::Unsafe(format!(
                    "`{}` is a {other:?} entry; images hold only files, directories and links here",
                    raw.display()
                )));
            }
        }
        ours.insert(rel);
    }
    Ok(())
}

fn layer_corrupt(err: impl std::fmt::Display) -> UnpackError {
    UnpackError::Corrupt(format!("a layer of the image is not a valid tar: {err}"))
}

fn unpack_error(path: &Path, err: std::io::Error) -> UnpackError {
    match err.kind() {
        std::io::ErrorKind::StorageFull => UnpackError::Io(err),
        _ => UnpackError::Corrupt(format!("cannot unpack `{}`: {err}", path.display())),
    }
}

/// An entry's path as plain names below the root (`./` and a leading `/` dropped; the root
/// itself is `None`); `..` refused.
fn plain(path: &Path) -> Result<Option<PathBuf>, UnpackError> {
    let mut rel = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => rel.push(name),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(UnpackError::Unsafe(format!("the entry `{}` has `..`", path.display())));
            }
        }
    }
    Ok((!rel.as_os_str().is_empty()).then_some(rel))
}

/// Makes the directories above `rel` that are missing; one that is a link (or a file) is
/// refused: nothing is written through a link.
fn make_parents(root: &Path, rel: &Path) -> Result<(), UnpackError> {
    let mut at = root.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                return Err(UnpackError::Unsafe(format!(
                    "the entry `{}` lies beyond `{}`, which is not a directory (a link is never followed)",
                    rel.display(),
                    at.strip_prefix(root).unwrap_or(&at).display()
                )));
            }
            Err(_) => std::fs::DirBuilder::new().mode(0o755).create(&at)?,
        }
    }
    Ok(())
}

/// Removes what is at `path` (a tree, a file or a link, never followed), if anything.
fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// Empties the directory `dir` of what lower layers put there (an opaque marker).
fn empty_but(root: &Path, dir: &Path, ours: &HashSet<PathBuf>) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else { return Ok(()) };
    for entry in entries {
        let entry = entry?;
        if !ours.contains(&dir.join(entry.file_name())) {
            remove(&entry.path())?;
        }
    }
    Ok(())
}

/// Drops `gone` and what is below it from the directories owned by other users.
fn forget(owned: &mut BTreeSet<String>, gone: &Path) {
    let gone = gone.to_string_lossy();
    owned.retain(|dir| {
        dir != gone.as_ref() && !dir.strip_prefix(gone.as_ref()).is_some_and(|rest| rest.starts_with('/'))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `(path, kind)` entries: `d` a directory, `f:<text>` a file, `l:<target>` a
    /// symbolic link, `h:<target>` a hard link, `c` a character device.
    pub(crate) fn layer(entries: &[(&str, &str)], uid: u64) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_uid(uid);
            header.set_mode(0o4755);
            let (kind, rest) = kind.split_once(':').unwrap_or((kind, ""));
            match kind {
                "d" => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    builder.append_data(&mut header, path, std::io::empty()).unwrap();
                }
                "f" => {
                    header.set_size(rest.len() as u64);
                    builder.append_data(&mut header, path, rest.as_bytes()).unwrap();
                }
                "l" | "h" => {
                    header.set_entry_type(if kind == "l" { tar::EntryType::Symlink } else { tar::EntryType::Link });
                    header.set_size(0);
                    builder.append_link(&mut header, path, rest).unwrap();
                }
                "raw" => {
                    // A name the builder would refuse (with `..`), written as it is.
                    header.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
                    header.set_size(0);
                    header.set_cksum();
                    builder.append(&header, std::io::empty()).unwrap();
                }
                _ => {
                    header.set_entry_type(tar::EntryType::Char);
                    header.set_size(0);
                    builder.append_data(&mut header, path, std::io::empty()).unwrap();
                }
            }
        }
        builder.into_inner().unwrap()
    }

    fn apply_all(layers: &[Vec<u8>]) -> (tempfile::TempDir, Result<Applied, UnpackError>) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let mut applied = Applied::default();
        for (idx, bytes) in layers.iter().enumerate() {
            let file = dir.path().join(format!("layer-{idx}"));
            std::fs::write(&file, bytes).unwrap();
            if let Err(err) = apply(&file, &root, &mut applied, 1 << 20) {
                return (dir, Err(err));
            }
        }
        (dir, Ok(applied))
    }

    #[test]
    fn whiteouts_and_opaque_directories_hide_lower_layers() {
        let lower = layer(
            &[
                ("etc/", "d"),
                ("etc/gone", "f:x"),
                ("etc/kept", "f:y"),
                ("opt/", "d"),
                ("opt/old", "f:o"),
                ("bin", "l:usr/bin"),
            ],
            0,
        );
        let upper = layer(&[("etc/.wh.gone", "f:"), ("opt/new", "f:n"), ("opt/.wh..wh..opq", "f:")], 0);
        let (dir, applied) = apply_all(&[lower, upper]);
        applied.unwrap();
        let root = dir.path().join("root");
        assert!(!root.join("etc/gone").exists() && root.join("etc/kept").exists());
        assert!(!root.join("opt/old").exists(), "emptied by the opaque marker");
        assert_eq!(std::fs::read_to_string(root.join("opt/new")).unwrap(), "n", "this layer's own entry is kept");
        assert!(!root.join("opt/.wh..wh..opq").exists() && !root.join("etc/.wh.gone").exists());
        assert_eq!(std::fs::read_link(root.join("bin")).unwrap(), Path::new("usr/bin"));
        let mode = std::fs::metadata(root.join("etc/kept")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "set-id bits dropped");
    }

    #[test]
    fn nothing_is_written_through_a_link_nor_linked_from_outside() {
        let cases = [
            vec![layer(&[("etc", "l:/etc"), ("etc/cron.d/x", "f:evil")], 0)],
            vec![layer(&[("escape", "h:../../etc/passwd")], 0)],
            vec![layer(&[("d", "l:/"), ("x", "h:d/etc/passwd")], 0)],
            vec![layer(&[("dev/null", "c")], 0)],
            vec![layer(&[("../x", "raw")], 0)],
        ];
        for layers in cases {
            let (_dir, applied) = apply_all(&layers);
            assert!(matches!(applied, Err(UnpackError::Unsafe(_))), "{applied:?}");
        }
    }

    #[test]
    fn directories_of_other_users_are_remembered_until_removed() {
        let first = layer(&[("builds/", "d"), ("builds/worker/", "d"), ("builds/worker/a/", "d")], 1000);
        let second = layer(&[("builds/.wh.worker", "f:")], 0);
        let (_dir, applied) = apply_all(std::slice::from_ref(&first));
        assert_eq!(
            applied.unwrap().owned.into_iter().collect::<Vec<_>>(),
            ["builds", "builds/worker", "builds/worker/a"]
        );
        let (_dir, applied) = apply_all(&[first, second]);
        assert_eq!(applied.unwrap().owned.into_iter().collect::<Vec<_>>(), ["builds"]);
    }
}
