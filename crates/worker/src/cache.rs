//! The worker's cache, kept between tasks and across restarts under `<work dir>/cache`:
//! downloaded mount content (`content/<digest of its key>`), unpacked images
//! (`images/<digest of its key>`, shared read-only by the runs that hold them) and named
//! caches (`named/<name>/<n>`, one directory per copy, each lent to one task at a time). All
//! share one size bound; the least recently used entry nobody holds is evicted first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// Most names a worker reports of the named caches it holds.
pub(crate) const MAX_REPORTED: usize = 100;

/// The worker's cache.
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    limit: u64,
    state: Mutex<State>,
    /// One lock per content key being fetched, so that two tasks fetch it once.
    fetching: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Told when a named cache copy is made or goes, so the registry hears of it soon.
    named_changed: tokio::sync::Notify,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Id {
    /// A content file, by the digest of its key.
    Content(String),
    /// A copy of a named cache.
    Named(String, u32),
    /// An unpacked image, by the digest of its key.
    Image(String),
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Id, Entry>,
    /// Ticks up with every use; an entry's `used` orders eviction.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    used: u64,
    held: u32,
}

impl State {
    /// Marks `id` used now and held once more; false when it is not there.
    fn touch(&mut self, id: &Id) -> bool {
        self.clock += 1;
        let clock = self.clock;
        let Some(entry) = self.entries.get_mut(id) else { return false };
        entry.used = clock;
        entry.held += 1;
        true
    }

    fn total(&self) -> u64 {
        self.entries.values().map(|entry| entry.size).sum()
    }
}

/// A content file (or an unpacked image) held, not evicted, while a task uses it.
#[derive(Debug)]
pub(crate) struct HeldContent {
    cache: Arc<Cache>,
    id: Id,
    /// The file (the image's directory).
    pub(crate) path: PathBuf,
}

impl Drop for HeldContent {
    fn drop(&mut self) {
        self.cache.release(&self.id);
    }
}

/// A copy of a named cache lent to one task.
#[derive(Debug)]
pub(crate) struct Lease {
    id: Id,
    /// Where the copy lives while nobody holds it.
    pub(crate) home: PathBuf,
    /// Whether it was made for this task (empty).
    pub(crate) fresh: bool,
}

impl Cache {
    /// Opens (or makes) the cache under `root`, bounded by `limit` bytes, finding what an
    /// earlier run of the worker left there.
    ///
    /// # Errors
    /// When the directories cannot be made or read.
    pub fn open(root: &Path, limit: u64) -> std::io::Result<Cache> {
        let mut state = State::default();
        let content = root.join("content");
        std::fs::create_dir_all(&content)?;
        let mut found: Vec<(std::time::SystemTime, Id, u64)> = Vec::new();
        for entry in std::fs::read_dir(&content)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let metadata = entry.metadata()?;
            if name.starts_with('.') || !metadata.is_file() {
                // A download a crash cut short.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            found.push((metadata.modified()?, Id::Content(name), metadata.len()));
        }
        let images = root.join("images");
        std::fs::create_dir_all(&images)?;
        for entry in std::fs::read_dir(&images)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Its size, written last: an image without one was cut short.
            let size = std::fs::read_to_string(entry.path().join(IMAGE_SIZE)).ok().and_then(|n| n.trim().parse().ok());
            match size {
                Some(size) if !name.starts_with('.') => {
                    found.push((entry.metadata()?.modified()?, Id::Image(name), size));
                }
                _ => remove(&entry.path()),
            }
        }
        let named = root.join("named");
        std::fs::create_dir_all(&named)?;
        for cache in std::fs::read_dir(&named)? {
            let cache = cache?;
            let name = cache.file_name().to_string_lossy().into_owned();
            for copy in std::fs::read_dir(cache.path())? {
                let copy = copy?;
                let number = copy.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
                match number {
                    Some(number) if copy.file_type()?.is_dir() => {
                        let modified = copy.metadata()?.modified()?;
                        found.push((modified, Id::Named(name.clone(), number), disk_usage(&copy.path())));
                    }
                    _ => remove(&copy.path()),
                }
            }
        }
        found.sort();
        for (_, id, size) in found {
            state.clock += 1;
            state.entries.insert(id, Entry { size, used: state.clock, held: 0 });
        }
        let cache = Cache {
            root: root.to_path_buf(),
            limit,
            state: Mutex::new(state),
            fetching: tokio::sync::Mutex::default(),
            named_changed: tokio::sync::Notify::new(),
        };
        let victims = cache.victims();
        cache.remove_all(&victims);
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most bytes one download may have.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// The content file of `key`, held, when it is cached (and still on disk: an operator
    /// may have cleared the directory).
    pub(crate) fn content(self: &Arc<Self>, key: &str) -> Option<HeldContent> {
        self.hold(Id::Content(digest(key)), |path| path.is_file())
    }

    /// `id`, held, when it is cached and `there` finds it whole on disk (else forgotten).
    fn hold(self: &Arc<Self>, id: Id, there: impl Fn(&Path) -> bool) -> Option<HeldContent> {
        if !self.lock().touch(&id) {
            return None;
        }
        let held = self.held(id);
        if there(&held.path) {
            return Some(held);
        }
        self.lock().entries.remove(&held.id);
        None
    }

    fn held(self: &Arc<Self>, id: Id) -> HeldContent {
        HeldContent { cache: Arc::clone(self), path: self.home(&id), id }
    }

    /// The unpacked image kept as `key`, held, when it is cached (whole: its size written).
    pub(crate) fn image(self: &Arc<Self>, key: &str) -> Option<HeldContent> {
        self.hold(Id::Image(digest(key)), |path| path.join(IMAGE_SIZE).is_file())
    }

    /// Where an image is unpacked before it is complete.
    pub(crate) fn image_staging(&self) -> PathBuf {
        self.root.join("images").join(format!(".partial-{}", slugid::nice()))
    }

    /// Keeps the image unpacked at `staging` (`size` bytes) as `key`'s, held.
    ///
    /// # Errors
    /// When it cannot be moved into place.
    pub(crate) fn insert_image(self: &Arc<Self>, key: &str, staging: &Path, size: u64) -> std::io::Result<HeldContent> {
        let id = Id::Image(digest(key));
        let held = self.held(id.clone());
        std::fs::write(staging.join(IMAGE_SIZE), size.to_string())?;
        remove(&held.path);
        std::fs::rename(staging, &held.path)?;
        self.keep(id, size);
        Ok(held)
    }

    /// A lock that two fetches of `key` share: the second finds what the first cached.
    pub(crate) async fn fetch_lock(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = Arc::clone(self.fetching.lock().await.entry(digest(key)).or_default());
        lock.lock_owned().await
    }

    /// Where a download is written before it is complete.
    pub(crate) fn partial(&self) -> PathBuf {
        self.root.join("content").join(format!(".partial-{}", slugid::nice()))
    }

    /// Keeps the finished download at `partial` as `key`'s content, held.
    ///
    /// # Errors
    /// When it cannot be moved into place.
    pub(crate) fn insert_content(
        self: &Arc<Self>,
        key: &str,
        partial: &Path,
        size: u64,
    ) -> std::io::Result<HeldContent> {
        let id = Id::Content(digest(key));
        let held = self.held(id.clone());
        std::fs::rename(partial, &held.path)?;
        self.keep(id, size);
        Ok(held)
    }

    /// Records a new entry of `size` bytes, held once, and evicts what no longer fits.
    fn keep(&self, id: Id, size: u64) {
        let mut state = self.lock();
        state.clock += 1;
        let used = state.clock;
        let entry = state.entries.entry(id).or_insert(Entry { size, used, held: 0 });
        entry.held += 1;
        drop(state);
        let victims = self.victims();
        self.remove_all(&victims);
    }

    /// Lends a copy of the named cache `name`: the most recently used one nobody holds, or
    /// a new empty one when every copy is held.
    ///
    /// # Errors
    /// When a new copy cannot be made.
    pub(crate) fn lend(&self, name: &str) -> std::io::Result<Lease> {
        let mut state = self.lock();
        let free = state
            .entries
            .iter()
            .filter(|(id, entry)| matches!(id, Id::Named(n, _) if n == name) && entry.held == 0)
            .max_by_key(|(_, entry)| entry.used)
            .map(|(id, _)| id.clone());
        let (id, fresh) = match free {
            Some(id) => (id, false),
            None => {
                let number =
                    (0..).find(|n| !state.entries.contains_key(&Id::Named(name.to_owned(), *n))).unwrap_or(u32::MAX);
                let id = Id::Named(name.to_owned(), number);
                std::fs::create_dir_all(self.home(&id))?;
                state.entries.insert(id.clone(), Entry { size: 0, used: 0, held: 0 });
                self.named_changed.notify_one();
                (id, true)
            }
        };
        state.touch(&id);
        Ok(Lease { home: self.home(&id), id, fresh })
    }

    fn home(&self, id: &Id) -> PathBuf {
        match id {
            Id::Named(name, number) => self.root.join("named").join(name).join(number.to_string()),
            Id::Content(name) => self.root.join("content").join(name),
            Id::Image(name) => self.root.join("images").join(name),
        }
    }

    /// Takes a lent copy back, now holding `size` bytes at its home; `None` when the task's
    /// copy is not kept (purged, or not found where it was lent), and it is deleted.
    pub(crate) fn give_back(&self, lease: Lease, size: Option<u64>) {
        match size {
            Some(size) => {
                let mut state = self.lock();
                if let Some(entry) = state.entries.get_mut(&lease.id) {
                    entry.size = size;
                }
            }
            None => {
                self.lock().entries.remove(&lease.id);
                remove(&lease.home);
                self.named_changed.notify_one();
                return;
            }
        }
        self.release(&lease.id);
    }

    fn release(&self, id: &Id) {
        if let Some(entry) = self.lock().entries.get_mut(id) {
            entry.held = entry.held.saturating_sub(1);
        }
        let victims = self.victims();
        self.remove_all(&victims);
    }

    /// The entries to evict so that the cache fits its bound, taken out of the state.
    fn victims(&self) -> Vec<PathBuf> {
        let mut state = self.lock();
        let mut total = state.total();
        let mut free: Vec<(u64, Id)> = state
            .entries
            .iter()
            .filter(|(_, entry)| entry.held == 0)
            .map(|(id, entry)| (entry.used, id.clone()))
            .collect();
        free.sort();
        let mut victims = Vec::new();
        for (_, id) in free {
            if total <= self.limit {
                break;
            }
            if let Some(entry) = state.entries.remove(&id) {
                total -= entry.size;
                if matches!(id, Id::Named(..)) {
                    self.named_changed.notify_one();
                }
                victims.push(self.home(&id));
            }
        }
        victims
    }

    fn remove_all(&self, victims: &[PathBuf]) {
        for victim in victims {
            tracing::debug!(path = %victim.display(), "evicting from the cache");
            remove(victim);
        }
    }

    /// The named caches this worker holds, most recently used first (at most
    /// [`MAX_REPORTED`]).
    pub(crate) fn names(&self) -> Vec<String> {
        let state = self.lock();
        let mut named: Vec<(u64, &str)> = state
            .entries
            .iter()
            .filter_map(|(id, entry)| match id {
                Id::Named(name, _) => Some((entry.used, name.as_str())),
                _ => None,
            })
            .collect();
        named.sort_by(|a, b| b.cmp(a));
        let mut names: Vec<String> = Vec::new();
        for (_, name) in named {
            if !names.iter().any(|known| known == name) && names.len() < MAX_REPORTED {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// Resolves when a named cache copy was made or went since the last call.
    pub(crate) async fn named_changed(&self) {
        self.named_changed.notified().await;
    }

    /// Bytes the cache holds now.
    #[cfg(test)]
    fn size(&self) -> u64 {
        self.lock().total()
    }
}

/// The file in an image's directory that holds its size, written when it is complete.
const IMAGE_SIZE: &str = "size";

/// The file name content cached under `key` has.
fn digest(key: &str) -> String {
    format!("{:x}", Sha256::digest(key.as_bytes()))
}

/// Bytes of the files under `path`, links not followed.
pub(crate) fn disk_usage(path: &Path) -> u64 {
    let Ok(metadata) = std::fs::symlink_metadata(path) else { return 0 };
    if !metadata.is_dir() {
        return metadata.len();
    }
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries.filter_map(Result::ok).map(|entry| disk_usage(&entry.path())).sum()
}

/// Removes a file or a directory tree (links removed, never followed).
fn remove(path: &Path) {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    };
    if let Err(err) = removed {
        tracing::warn!(path = %path.display(), error = %err, "removing from the cache failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(cache: &Arc<Cache>, key: &str, bytes: usize) -> HeldContent {
        let partial = cache.partial();
        std::fs::write(&partial, vec![7u8; bytes]).unwrap();
        cache.insert_content(key, &partial, bytes as u64).unwrap()
    }

    #[test]
    fn the_least_recently_used_entry_nobody_holds_goes_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::open(dir.path(), 250).unwrap());
        drop(put(&cache, "a", 100));
        drop(put(&cache, "b", 100));
        drop(cache.content("a").expect("a is cached"));
        let held = put(&cache, "c", 100);
        assert!(cache.content("b").is_none(), "b was used least recently");
        assert!(cache.content("a").is_some() && held.path.exists());
        assert_eq!(cache.size(), 200);
        // Held entries stay even beyond the bound; they go once let go.
        let big = put(&cache, "d", 300);
        assert!(big.path.exists());
        drop(big);
        assert!(cache.size() <= 250, "{}", cache.size());
        // A file cleared from under the worker is a miss, not an error later.
        let gone = put(&cache, "e", 10).path.clone();
        std::fs::remove_file(gone).unwrap();
        assert!(cache.content("e").is_none());
    }

    #[test]
    fn a_named_cache_is_lent_to_one_task_at_a_time_and_found_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let first = cache.lend("checkout").unwrap();
        assert!(first.fresh);
        std::fs::write(first.home.join("kept"), b"12345").unwrap();
        let second = cache.lend("checkout").unwrap();
        assert!(second.fresh && second.home != first.home, "a held copy is not lent twice");
        cache.give_back(second, None);
        let home = first.home.clone();
        cache.give_back(first, Some(5));
        assert_eq!(cache.names(), ["checkout"]);
        drop(cache);
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let again = cache.lend("checkout").unwrap();
        assert!(!again.fresh && again.home == home && again.home.join("kept").exists());
    }
}
