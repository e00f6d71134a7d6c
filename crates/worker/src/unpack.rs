//! Archives and compressed files placed in a task directory by the worker (which may be
//! root), so that nothing lands outside it: entries with `..` or absolute paths, links
//! pointing out, and entries reached through a link are refused, not skipped; devices and
//! FIFOs are refused; set-id bits are dropped. Blocking: run it off the async threads.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Component, Path, PathBuf};

use crate::payload::{ArchiveFormat, Compression};

/// Why an archive was not unpacked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnpackError {
    /// An entry would land outside the directory, or is of a kind never unpacked.
    #[error("{0}")]
    Unsafe(String),
    /// The bytes are not an archive of the format named.
    #[error("{0}")]
    Corrupt(String),
    /// The worker could not write.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Writes `file`'s bytes, decompressed when `compression` says so, to a new file `dest`.
pub(crate) fn place_file(file: &Path, compression: Option<Compression>, dest: &Path) -> Result<(), UnpackError> {
    if compression.is_none() {
        // File to file: the kernel copies (copy_file_range), nothing passes through here.
        std::io::copy(&mut File::open(file)?, &mut create_new(dest, 0o644)?)?;
        return Ok(());
    }
    let source = BufReader::new(File::open(file)?);
    let mut reader: Box<dyn Read> = match compression {
        None => Box::new(source),
        Some(compression) => decompressed(source, compression)?,
    };
    let mut out = create_new(dest, 0o644)?;
    std::io::copy(&mut reader, &mut out).map_err(|err| match compression {
        Some(_) if err.kind() != std::io::ErrorKind::StorageFull => {
            UnpackError::Corrupt(format!("the content is not in the format given: {err}"))
        }
        _ => UnpackError::Io(err),
    })?;
    Ok(())
}

/// Unpacks the archive `file` into the directory `dest` (made when missing).
pub(crate) fn unpack(file: &Path, format: ArchiveFormat, dest: &Path) -> Result<(), UnpackError> {
    std::fs::create_dir_all(dest)?;
    let source = BufReader::new(File::open(file)?);
    match format {
        ArchiveFormat::Tar => unpack_tar(source, dest),
        ArchiveFormat::CompressedTar(compression) => unpack_tar(decompressed(source, compression)?, dest),
        ArchiveFormat::Zip => unpack_zip(source, dest),
    }
}

/// `source`'s bytes decompressed (each format read whole, with every stream it holds).
pub(crate) fn decompressed(source: BufReader<File>, compression: Compression) -> Result<Box<dyn Read>, UnpackError> {
    Ok(match compression {
        Compression::Gz => Box::new(flate2::bufread::MultiGzDecoder::new(source)),
        Compression::Bz2 => Box::new(bzip2::bufread::MultiBzDecoder::new(source)),
        Compression::Xz => Box::new(liblzma::bufread::XzDecoder::new_multi_decoder(source)),
        Compression::Zst => Box::new(zstd::Decoder::with_buffer(source)?),
    })
}

fn corrupt(err: impl std::fmt::Display) -> UnpackError {
    UnpackError::Corrupt(format!("not a valid archive of the format given: {err}"))
}

fn unpack_tar(reader: impl Read, dest: &Path) -> Result<(), UnpackError> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let path = entry.path().map_err(corrupt)?.into_owned();
        let rel = inside(&path)?;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::Directory => {}
            tar::EntryType::Symlink => {
                let target = entry.link_name().map_err(corrupt)?.ok_or_else(|| corrupt("a link without a target"))?;
                check_link(&rel, &target)?;
            }
            tar::EntryType::Link => {
                let target = entry.link_name().map_err(corrupt)?.ok_or_else(|| corrupt("a link without a target"))?;
                // link(2) follows links on the way to its target: none may be there.
                let target = inside(&target)?;
                no_links_on_the_way(dest, &target)?;
            }
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            other => {
                return Err(UnpackError::Unsafe(format!(
                    "`{}` is a {other:?} entry; only files, directories and links are unpacked",
                    path.display()
                )));
            }
        }
        if rel.as_os_str().is_empty() {
            continue;
        }
        no_links_on_the_way(dest, &rel)?;
        if !entry.unpack_in(dest).map_err(|err| unpack_failed(&path, err))? {
            return Err(UnpackError::Unsafe(format!("`{}` would land outside the directory", path.display())));
        }
        if kind == tar::EntryType::Symlink {
            resolves_inside(dest, &rel)?;
        }
    }
    every_link_resolves_inside(dest)
}

fn unpack_failed(path: &Path, err: std::io::Error) -> UnpackError {
    match err.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::PermissionDenied => UnpackError::Io(err),
        _ => UnpackError::Corrupt(format!("cannot unpack `{}`: {err}", path.display())),
    }
}

fn unpack_zip(reader: impl Read + std::io::Seek, dest: &Path) -> Result<(), UnpackError> {
    let mut archive = zip::ZipArchive::new(reader).map_err(corrupt)?;
    for idx in 0..archive.len() {
        let mut entry = archive.by_index(idx).map_err(corrupt)?;
        let name = entry.name().map_err(corrupt)?.into_owned();
        let rel = inside(Path::new(&name))?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        no_links_on_the_way(dest, &rel)?;
        let target = dest.join(&rel);
        if entry.is_dir() {
            std::fs::create_dir_all(&target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        remove_non_directory(&target)?;
        if entry.is_symlink() {
            let mut link = String::new();
            entry.by_ref().take(4096).read_to_string(&mut link).map_err(corrupt)?;
            check_link(&rel, Path::new(&link))?;
            std::os::unix::fs::symlink(&link, &target)?;
            resolves_inside(dest, &rel)?;
            continue;
        }
        let mode = entry.unix_mode().map_or(0o644, |mode| mode & 0o777);
        let mut out = create_new(&target, mode)?;
        std::io::copy(&mut entry, &mut out).map_err(|err| unpack_failed(&rel, err))?;
    }
    every_link_resolves_inside(dest)
}

/// A new file (never through a link), with `mode`.
pub(crate) fn create_new(path: &Path, mode: u32) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc_nofollow()).open(path)
}

fn libc_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

fn remove_non_directory(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if !metadata.is_dir() => std::fs::remove_file(path),
        _ => Ok(()),
    }
}

/// `path` as plain names below the directory (`.` dropped); `..` and absolute paths refused.
fn inside(path: &Path) -> Result<PathBuf, UnpackError> {
    let mut rel = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => rel.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(UnpackError::Unsafe(format!(
                    "the entry `{}` would land outside the directory (absolute or with `..`)",
                    path.display()
                )));
            }
        }
    }
    Ok(rel)
}

/// A link at `rel` pointing to `target` must stay inside the directory.
fn check_link(rel: &Path, target: &Path) -> Result<(), UnpackError> {
    let out = || {
        UnpackError::Unsafe(format!(
            "the link `{}` -> `{}` points outside the directory",
            rel.display(),
            target.display()
        ))
    };
    let mut depth = rel.components().count().saturating_sub(1);
    for component in target.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => depth = depth.checked_sub(1).ok_or_else(out)?,
            Component::RootDir | Component::Prefix(_) => return Err(out()),
        }
    }
    Ok(())
}

/// Most links followed resolving one path, as the kernel's bound (`ELOOP`).
const MAX_LINK_HOPS: usize = 40;

/// Most entries of a placed tree walked to check its links.
const MAX_WALKED: usize = 1_000_000;

/// The link at `rel` resolved as the kernel would, against the tree placed so far under
/// `dest` (each link on the way followed, `..` taken from where a link led): it must stay
/// under `dest`. A name not placed yet counts as a plain directory, so a `..` after it is
/// judged lexically.
fn resolves_inside(dest: &Path, rel: &Path) -> Result<(), UnpackError> {
    let out =
        |why: &str| UnpackError::Unsafe(format!("the link `{}` resolves outside the directory ({why})", rel.display()));
    let target = std::fs::read_link(dest.join(rel))?;
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    let push = |todo: &mut Vec<std::ffi::OsString>, path: &Path| -> Result<(), UnpackError> {
        // Pushed reversed: the next component is popped from the end.
        for component in path.components().rev() {
            match component {
                Component::Normal(name) => todo.push(name.to_owned()),
                Component::ParentDir => todo.push("..".into()),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => return Err(out("an absolute target")),
            }
        }
        Ok(())
    };
    push(&mut todo, &target)?;
    let mut at: Vec<std::ffi::OsString> =
        rel.parent().map(|parent| parent.iter().map(ToOwned::to_owned).collect()).unwrap_or_default();
    let mut hops = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            at.pop().ok_or_else(|| out("`..` above it"))?;
            continue;
        }
        at.push(name);
        let here: PathBuf = at.iter().fold(dest.to_path_buf(), |path, name| path.join(name));
        if std::fs::symlink_metadata(&here).is_ok_and(|metadata| metadata.file_type().is_symlink()) {
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(out("too many links"));
            }
            at.pop();
            push(&mut todo, &std::fs::read_link(&here)?)?;
        }
    }
    Ok(())
}

/// Every link under `dest` resolved against the finished tree: a later entry can change
/// where an earlier link leads (`x -> b/..` before `b -> .`).
fn every_link_resolves_inside(dest: &Path) -> Result<(), UnpackError> {
    let mut stack = vec![PathBuf::new()];
    let mut walked = 0;
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(dest.join(&rel))? {
            walked += 1;
            if walked > MAX_WALKED {
                return Err(UnpackError::Unsafe(format!("more than {MAX_WALKED} entries")));
            }
            let entry = entry?;
            let kind = entry.file_type()?;
            let child = rel.join(entry.file_name());
            if kind.is_symlink() {
                resolves_inside(dest, &child)?;
            } else if kind.is_dir() {
                stack.push(child);
            }
        }
    }
    Ok(())
}

/// Refuses an entry whose parent directories include a link (a link planted by an earlier
/// entry would carry the write elsewhere).
fn no_links_on_the_way(dest: &Path, rel: &Path) -> Result<(), UnpackError> {
    let mut at = dest.to_path_buf();
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            break;
        }
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                return Err(UnpackError::Unsafe(format!(
                    "the entry `{}` is reached through a link; refused",
                    rel.display()
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_with(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_mode(0o4755);
            match kind {
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    header.set_size(0);
                    builder.append_link(&mut header, path, data).unwrap();
                }
                _ => {
                    header.set_size(data.len() as u64);
                    // Written raw: the builder itself refuses `..`, an attacker's tool would not.
                    let name = &mut header.as_old_mut().name;
                    name[..path.len()].copy_from_slice(path.as_bytes());
                    header.set_cksum();
                    builder.append(&header, data.as_bytes()).unwrap();
                }
            }
        }
        builder.into_inner().unwrap()
    }

    fn unpacked(archive: &[u8]) -> (tempfile::TempDir, Result<(), UnpackError>) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.tar");
        std::fs::write(&file, archive).unwrap();
        let result = unpack(&file, ArchiveFormat::Tar, &dir.path().join("out"));
        (dir, result)
    }

    #[test]
    fn files_links_inside_and_directories_are_unpacked_without_set_id_bits() {
        let (dir, result) = unpacked(&tar_with(&[
            ("bin/", tar::EntryType::Directory, ""),
            ("bin/app", tar::EntryType::Regular, "#!/bin/sh\n"),
            ("lib/current", tar::EntryType::Symlink, "../bin/app"),
            ("here", tar::EntryType::Symlink, "."),
            ("deep", tar::EntryType::Symlink, "here/here/lib/../bin"),
            ("dangling", tar::EntryType::Symlink, "not/yet/there"),
        ]));
        result.unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("out/bin/app")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "set-uid dropped");
        assert_eq!(std::fs::read_to_string(dir.path().join("out/lib/current")).unwrap(), "#!/bin/sh\n");
        assert!(dir.path().join("out/deep/app").is_file(), "a chain of links that stays inside is kept");
    }

    #[test]
    fn entries_that_would_land_outside_are_refused() {
        for entries in [
            vec![("../x", tar::EntryType::Regular, "escaped")],
            vec![("/tmp/x", tar::EntryType::Regular, "escaped")],
            vec![("link", tar::EntryType::Symlink, "/etc")],
            vec![("a/link", tar::EntryType::Symlink, "../../x")],
            vec![("hard", tar::EntryType::Link, "../x")],
            vec![("up", tar::EntryType::Symlink, "."), ("up/x", tar::EntryType::Regular, "through a link")],
            vec![("fifo", tar::EntryType::Fifo, "")],
            // Each link looks inward; followed as the kernel does, `up` is the parent.
            vec![("a", tar::EntryType::Symlink, "."), ("up", tar::EntryType::Symlink, "a/a/../..")],
            vec![("a", tar::EntryType::Symlink, "."), ("up", tar::EntryType::Symlink, "a/a/../../..")],
            // A later link changes where an earlier one leads.
            vec![("x", tar::EntryType::Symlink, "b/.."), ("b", tar::EntryType::Symlink, ".")],
            vec![("l1", tar::EntryType::Symlink, "l2"), ("l2", tar::EntryType::Symlink, "l1")],
            // link(2) would follow `a` on the way to its target.
            vec![
                ("d/", tar::EntryType::Directory, ""),
                ("d/a", tar::EntryType::Symlink, ".."),
                ("hard", tar::EntryType::Link, "d/a/x"),
            ],
        ] {
            let (dir, result) = unpacked(&tar_with(&entries));
            assert!(matches!(result, Err(UnpackError::Unsafe(_))), "{entries:?}: {result:?}");
            assert!(!dir.path().join("x").exists(), "{entries:?}");
        }
    }

    #[test]
    fn compressed_tars_and_files_are_read_in_each_format() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let tar = tar_with(&[("bin/app", tar::EntryType::Regular, "payload")]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        let mut bz2 = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        bz2.write_all(&tar).unwrap();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(&tar).unwrap();
        let cases = [
            (Compression::Gz, gz.finish().unwrap()),
            (Compression::Bz2, bz2.finish().unwrap()),
            (Compression::Xz, xz.finish().unwrap()),
            (Compression::Zst, zstd::encode_all(&tar[..], 1).unwrap()),
        ];
        for (idx, (compression, bytes)) in cases.into_iter().enumerate() {
            let (format, compression) = (ArchiveFormat::CompressedTar(compression), Some(compression));
            let file = dir.path().join(format!("archive-{idx}"));
            std::fs::write(&file, &bytes).unwrap();
            let out = dir.path().join(format!("out-{idx}"));
            unpack(&file, format, &out).unwrap();
            assert_eq!(std::fs::read_to_string(out.join("bin/app")).unwrap(), "payload", "{format:?}");
            let placed = dir.path().join(format!("placed-{idx}.tar"));
            place_file(&file, compression, &placed).unwrap();
            assert_eq!(std::fs::read(&placed).unwrap(), tar, "{compression:?}");
            let result = unpack(&placed, format, &dir.path().join(format!("wrong-{idx}")));
            assert!(matches!(result, Err(UnpackError::Corrupt(_))), "a plain tar is not {format:?}: {result:?}");
        }
    }

    #[test]
    fn zip_entries_are_checked_the_same_way() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let write = |entries: &[(&str, bool, &str)]| {
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            for (name, link, data) in entries {
                let options = zip::write::SimpleFileOptions::default();
                if *link {
                    zip.add_symlink(*name, *data, options).unwrap();
                } else {
                    zip.start_file(*name, options).unwrap();
                    zip.write_all(data.as_bytes()).unwrap();
                }
            }
            let file = dir.path().join("a.zip");
            std::fs::write(&file, zip.finish().unwrap().into_inner()).unwrap();
            let out = dir.path().join("out");
            let _ = std::fs::remove_dir_all(&out);
            unpack(&file, ArchiveFormat::Zip, &out)
        };
        write(&[("a/b.txt", false, "hello"), ("a/c", true, "b.txt")]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("out/a/c")).unwrap(), "hello");
        for entries in [vec![("../x", false, "escaped")], vec![("l", true, "/etc/passwd")]] {
            let result = write(&entries);
            assert!(matches!(result, Err(UnpackError::Unsafe(_))), "{entries:?}: {result:?}");
        }
    }
}
