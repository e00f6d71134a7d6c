//! A VFS over SQLite's default one that gathers a connection's WAL appends into one write
//! per commit.
//!
//! SQLite writes each WAL frame as two writes (its 24-byte header, then the page), and a
//! frame of 4,120 bytes straddles the kernel's pages, so a commit of n frames costs the
//! kernel about 4n partial page writes; gathered, it is one write of whole pages (a commit
//! of 55 frames: 83 µs of kernel time against 18.5 µs on this project's machine).
//!
//! Only the WAL is gathered, and only appends. What is gathered is written out as soon as a
//! commit's last frame is complete, which is before SQLite makes the commit visible to other
//! connections (and before the syncer can be handed it), and before anything that reads,
//! syncs, sizes, truncates or controls the file, or writes elsewhere in it. Nothing
//! uncommitted is ever needed by another connection, so no reader can miss a frame.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub(crate) const NAME: &CStr = c"shoal-wal-gather";

/// Bytes of a WAL frame's header.
const FRAME_HEADER: usize = 24;
/// Most bytes passed to one write of the default VFS: it writes at most the low 17 bits of a
/// length at a time and takes a write of none as a full disk.
const MAX_WRITE: usize = 0x1ffff & !0xfff;
/// Most bytes gathered before they are written out regardless (a huge transaction).
const MAX_GATHERED: usize = 8 << 20;

/// What SQLite allocates for a WAL file opened through this VFS: this header, then the
/// default VFS's own file at [`REAL_OFFSET`].
#[repr(C)]
struct GatherFile {
    /// SQLite's view of the file: `pMethods` is [`METHODS`].
    base: ffi::sqlite3_file,
    /// The bytes gathered, to be written at `at`.
    gathered: Vec<u8>,
    at: i64,
    /// The last write was the header of a commit's last frame: its page completes the commit.
    committing: bool,
}

/// Where the default VFS's file lives inside ours (8-byte aligned).
const REAL_OFFSET: usize = std::mem::size_of::<GatherFile>().next_multiple_of(8);

/// Registers the VFS (once per process); later calls return the first call's result.
pub(crate) fn register() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            // SAFETY: the default VFS lives as long as the process; ours is leaked so it does too.
            unsafe {
                let base = ffi::sqlite3_vfs_find(ptr::null());
                if base.is_null() {
                    return Err("SQLite has no default VFS".into());
                }
                let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
                    iVersion: 2,
                    szOsFile: (REAL_OFFSET as c_int) + (*base).szOsFile,
                    mxPathname: (*base).mxPathname,
                    pNext: ptr::null_mut(),
                    zName: NAME.as_ptr(),
                    pAppData: base.cast(),
                    xOpen: Some(open),
                    xDelete: Some(delete),
                    xAccess: Some(access),
                    xFullPathname: Some(full_pathname),
                    xDlOpen: Some(dl_open),
                    xDlError: Some(dl_error),
                    xDlSym: Some(dl_sym),
                    xDlClose: Some(dl_close),
                    xRandomness: Some(randomness),
                    xSleep: Some(sleep),
                    xCurrentTime: Some(current_time),
                    xGetLastError: Some(last_error),
                    xCurrentTimeInt64: Some(current_time_int64),
                    xSetSystemCall: None,
                    xGetSystemCall: None,
                    xNextSystemCall: None,
                }));
                match ffi::sqlite3_vfs_register(vfs, 0) {
                    ffi::SQLITE_OK => Ok(()),
                    rc => Err(format!("registering the WAL-gathering VFS failed ({rc})")),
                }
            }
        })
        .clone()
}

/// The default VFS, which ours passes everything to.
unsafe fn base(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: `register` set pAppData to the default VFS.
    unsafe { (*vfs).pAppData.cast() }
}

/// The default VFS's file inside ours.
unsafe fn real(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: SQLite allocated szOsFile bytes for `file`, which covers REAL_OFFSET onwards.
    unsafe { file.cast::<u8>().add(REAL_OFFSET).cast() }
}

unsafe fn gather<'a>(file: *mut ffi::sqlite3_file) -> &'a mut GatherFile {
    // SAFETY: only files whose pMethods are METHODS reach here, and `open` wrote a GatherFile.
    unsafe { &mut *file.cast::<GatherFile>() }
}

/// The default VFS's methods for the real file.
unsafe fn methods<'a>(file: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: the real file was opened successfully, so its methods are set.
    unsafe { &*(*real(file)).pMethods }
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands a file of our szOsFile bytes; everything is passed to the default
    // VFS as SQLite would have passed it.
    unsafe {
        let base = base(vfs);
        let open = (*base).xOpen.expect("the default VFS opens files");
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            // Not the WAL: the default VFS's file, with its own methods, is the whole file.
            return open(base, name, file, flags, out_flags);
        }
        (*file).pMethods = ptr::null();
        let rc = open(base, name, real(file), flags, out_flags);
        if rc != ffi::SQLITE_OK || (*real(file)).pMethods.is_null() {
            return if rc == ffi::SQLITE_OK { ffi::SQLITE_CANTOPEN } else { rc };
        }
        ptr::write(
            file.cast::<GatherFile>(),
            GatherFile {
                base: ffi::sqlite3_file { pMethods: &raw const METHODS },
                gathered: Vec::new(),
                at: 0,
                committing: false,
            },
        );
        ffi::SQLITE_OK
    }
}

/// Writes out what was gathered.
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is one of ours (see `gather`).
    unsafe {
        let gathered = gather(file);
        if gathered.gathered.is_empty() {
            return ffi::SQLITE_OK;
        }
        #[cfg(test)]
        tests::FLUSHES.with(|flushes| flushes.set(flushes.get() + 1));
        let write = methods(file).xWrite.expect("files are written");
        let bytes = std::mem::take(&mut gathered.gathered);
        gathered.committing = false;
        let mut rc = ffi::SQLITE_OK;
        let mut at = gathered.at;
        for piece in bytes.chunks(MAX_WRITE) {
            rc = write(real(file), piece.as_ptr().cast(), piece.len() as c_int, at);
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += piece.len() as i64;
        }
        // Keep the allocation for the next commit.
        gathered.gathered = bytes;
        gathered.gathered.clear();
        rc
    }
}

unsafe extern "C" fn write(file: *mut ffi::sqlite3_file, data: *const c_void, amount: c_int, offset: i64) -> c_int {
    // SAFETY: SQLite passes `amount` readable bytes at `data`.
    unsafe {
        let end = {
            let gathered = gather(file);
            gathered.at + gathered.gathered.len() as i64
        };
        if offset != end {
            let rc = flush(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let gathered = gather(file);
        if gathered.gathered.is_empty() {
            gathered.at = offset;
        }
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), amount as usize);
        gathered.gathered.extend_from_slice(bytes);
        if std::mem::take(&mut gathered.committing) || gathered.gathered.len() >= MAX_GATHERED {
            return flush(file);
        }
        // A frame header whose "database size after commit" is set ends a transaction.
        gathered.committing = bytes.len() == FRAME_HEADER && bytes[4..8] != [0; 4];
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes each file once; the GatherFile is dropped here and never used again.
    unsafe {
        let flushed = flush(file);
        let rc = methods(file).xClose.map_or(ffi::SQLITE_OK, |close| close(real(file)));
        ptr::drop_in_place(&raw mut gather(file).gathered);
        (*file).pMethods = ptr::null();
        if flushed != ffi::SQLITE_OK { flushed } else { rc }
    }
}

/// Passes a method through to the real file once what was gathered is written out.
macro_rules! flushed_first {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: `file` is one of ours; the arguments are SQLite's, passed on unchanged.
            unsafe {
                let rc = flush(file);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                match methods(file).$method {
                    Some(method) => method(real(file) $(, $arg)*),
                    None => ffi::SQLITE_OK,
                }
            }
        }
    };
}

flushed_first!(read, xRead, (data: *mut c_void, amount: c_int, offset: i64));
flushed_first!(truncate, xTruncate, (size: i64));
flushed_first!(sync, xSync, (flags: c_int));
flushed_first!(file_size, xFileSize, (size: *mut i64));
flushed_first!(lock, xLock, (level: c_int));
flushed_first!(unlock, xUnlock, (level: c_int));
flushed_first!(check_reserved_lock, xCheckReservedLock, (out: *mut c_int));
flushed_first!(file_control, xFileControl, (op: c_int, arg: *mut c_void));

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is one of ours.
    unsafe { methods(file).xSectorSize.map_or(4096, |method| method(real(file))) }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is one of ours.
    unsafe { methods(file).xDeviceCharacteristics.map_or(0, |method| method(real(file))) }
}

/// Version 1: a WAL file has no shared memory and is not memory-mapped.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

/// Passes a VFS method through to the default VFS.
macro_rules! to_base {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(vfs: *mut ffi::sqlite3_vfs $(, $arg: $ty)*) -> $ret {
            // SAFETY: the arguments are SQLite's, passed on unchanged to the default VFS.
            unsafe {
                let base = base(vfs);
                match (*base).$method {
                    Some(method) => method(base $(, $arg)*),
                    None => $missing,
                }
            }
        }
    };
}

to_base!(delete, xDelete, (name: *const c_char, sync_dir: c_int) -> c_int, ffi::SQLITE_IOERR_DELETE);
to_base!(access, xAccess, (name: *const c_char, flags: c_int, out: *mut c_int) -> c_int, ffi::SQLITE_IOERR_ACCESS);
to_base!(full_pathname, xFullPathname, (name: *const c_char, size: c_int, out: *mut c_char) -> c_int, ffi::SQLITE_CANTOPEN);
to_base!(dl_open, xDlOpen, (name: *const c_char) -> *mut c_void, ptr::null_mut());
to_base!(dl_error, xDlError, (size: c_int, out: *mut c_char) -> (), ());
to_base!(dl_close, xDlClose, (handle: *mut c_void) -> (), ());
to_base!(randomness, xRandomness, (size: c_int, out: *mut c_char) -> c_int, 0);
to_base!(sleep, xSleep, (micros: c_int) -> c_int, 0);
to_base!(current_time, xCurrentTime, (out: *mut f64) -> c_int, ffi::SQLITE_ERROR);
to_base!(last_error, xGetLastError, (size: c_int, out: *mut c_char) -> c_int, 0);
to_base!(current_time_int64, xCurrentTimeInt64, (out: *mut i64) -> c_int, ffi::SQLITE_ERROR);

/// A symbol of a loaded library: the default VFS's answer.
type Symbol = Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>;

unsafe extern "C" fn dl_sym(vfs: *mut ffi::sqlite3_vfs, handle: *mut c_void, symbol: *const c_char) -> Symbol {
    // SAFETY: passed on unchanged to the default VFS.
    unsafe {
        let base = base(vfs);
        (*base).xDlSym.and_then(|method| method(base, handle, symbol))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use rusqlite::{Connection, OpenFlags};

    use super::*;

    thread_local! {
        /// Gathered writes written out by this thread.
        pub(super) static FLUSHES: Cell<usize> = const { Cell::new(0) };
    }

    fn open(path: &std::path::Path) -> Connection {
        register().unwrap();
        let conn = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), NAME).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; \
             CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB NOT NULL);",
        )
        .unwrap();
        conn
    }

    /// Inserts `n` rows of random keys (each on its own page, as task ids are) in one commit.
    fn insert(conn: &Connection, from: usize, n: usize) {
        conn.execute_batch("BEGIN").unwrap();
        for i in from..from + n {
            let key = format!("{:016x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            conn.execute("INSERT INTO t (k, v) VALUES (?1, zeroblob(300))", [key]).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |row| row.get(0)).unwrap()
    }

    #[test]
    fn other_connections_see_each_commit_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let writer = open(&path);
        let reader = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        for round in 0..50 {
            insert(&writer, round * 40, 40);
            assert_eq!(count(&reader), (round as i64 + 1) * 40, "round {round}");
        }
        let check: String = reader.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn a_commit_reaches_the_file_in_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open(&dir.path().join("db"));
        insert(&writer, 0, 2000);
        for round in 1..=10 {
            FLUSHES.with(|flushes| flushes.set(0));
            // 40 random keys: dozens of frames, each written by SQLite as a header and a page.
            insert(&writer, round * 1000 + 5000, 40);
            assert_eq!(FLUSHES.with(Cell::get), 1, "round {round}");
        }
    }

    #[test]
    fn a_transaction_larger_than_the_page_cache_reads_back_what_it_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let writer = open(&path);
        // A tiny cache makes SQLite spill pages to the WAL mid-transaction and read them back.
        writer.execute_batch("PRAGMA cache_size = 10;").unwrap();
        insert(&writer, 0, 5000);
        writer.execute_batch("BEGIN").unwrap();
        writer.execute("DELETE FROM t WHERE rowid % 2 = 0", []).unwrap();
        writer.execute_batch("ROLLBACK").unwrap();
        insert(&writer, 5000, 3000);
        let reader = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        assert_eq!(count(&reader), 8000);
        let check: String = reader.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn a_transaction_larger_than_what_is_gathered_commits_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let writer = open(&path);
        FLUSHES.with(|flushes| flushes.set(0));
        writer.execute_batch("BEGIN").unwrap();
        for i in 0..2500 {
            writer.execute("INSERT INTO t (k, v) VALUES (?1, zeroblob(4000))", [format!("big{i:05}")]).unwrap();
        }
        writer.execute_batch("COMMIT").unwrap();
        assert!(FLUSHES.with(Cell::get) > 1, "10 MB is written out in more than one go");
        let reader = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        assert_eq!(count(&reader), 2500);
        let bytes: i64 = reader.query_row("SELECT sum(length(v)) FROM t", [], |row| row.get(0)).unwrap();
        assert_eq!(bytes, 2500 * 4000);
    }

    #[test]
    fn the_wal_restarts_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let writer = open(&path);
            for round in 0..20 {
                insert(&writer, round * 100, 100);
                if round % 5 == 4 {
                    writer.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())).unwrap();
                }
            }
        }
        let again = open(&path);
        assert_eq!(count(&again), 2000);
        insert(&again, 2000, 10);
        assert_eq!(count(&again), 2010);
    }
}
