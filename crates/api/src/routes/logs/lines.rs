//! A log's lines, found by scanning it from the start in large reads: where line `n` starts,
//! the number of the line at an offset, and a search of the whole log streamed as it goes,
//! each match a line number and the line's text. A log only grows, so the lines of each
//! whole block of it, once counted, are kept (four bytes a MiB) and never counted again.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use axum::body::Bytes;
use memchr::memmem::Finder;
use shoal_engine::TaskId;
use shoal_service::Service;
use shoal_store::StoreError;

/// Bytes read from the store at a time while scanning.
const SCAN_BYTES: usize = 1 << 20;
/// Most matches a search answers; it says when there were more.
pub(crate) const MAX_MATCHES: usize = 1000;
/// Most bytes of a matching line answered.
const MAX_TEXT: usize = 400;
/// A line longer than this is searched in pieces of this size.
const MAX_LINE: usize = 1 << 20;

/// Logs whose blocks' lines are kept; past it, all are forgotten and counted again as asked.
const MAX_INDEXED_LOGS: usize = 4096;

/// The lines of each whole [`SCAN_BYTES`] block of a log, by its run.
type BlockLines = HashMap<(TaskId, u32), Vec<u32>>;

/// The blocks' lines of the logs read.
static BLOCK_LINES: LazyLock<Mutex<BlockLines>> = LazyLock::new(Mutex::default);

/// One run's log, `size` bytes of it.
#[derive(Clone)]
pub(super) struct Log {
    pub(super) queue: Service,
    pub(super) task_id: TaskId,
    pub(super) run_id: u32,
    pub(super) size: u64,
}

impl Log {
    async fn read(&self, offset: u64, want: usize) -> Result<Vec<u8>, StoreError> {
        let want = want.min(usize::try_from(self.size.saturating_sub(offset)).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(Vec::new());
        }
        self.queue.read_log(self.task_id, self.run_id, offset, want).await
    }

    /// The lines of each whole block of the log, counted now for those not known yet.
    async fn blocks(&self) -> Result<Vec<u32>, StoreError> {
        let key = (self.task_id, self.run_id);
        let known = BLOCK_LINES.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned().unwrap_or_default();
        let whole = usize::try_from(self.size / SCAN_BYTES as u64).unwrap_or(usize::MAX);
        if known.len() >= whole {
            return Ok(known);
        }
        let mut blocks = known;
        while blocks.len() < whole {
            let buf = self.read(blocks.len() as u64 * SCAN_BYTES as u64, SCAN_BYTES).await?;
            if buf.len() < SCAN_BYTES {
                break;
            }
            blocks.push(u32::try_from(memchr::memchr_iter(b'\n', &buf).count()).unwrap_or(u32::MAX));
        }
        let mut kept = BLOCK_LINES.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= MAX_INDEXED_LOGS {
            kept.clear();
        }
        kept.insert(key, blocks.clone());
        Ok(blocks)
    }

    /// Where line `line` (from 1) starts; the log's size when it has fewer lines.
    pub(super) async fn line_start(&self, line: u64) -> Result<u64, StoreError> {
        let mut left = line.saturating_sub(1);
        let mut offset = 0;
        for lines in self.blocks().await? {
            if u64::from(lines) >= left {
                break;
            }
            left -= u64::from(lines);
            offset += SCAN_BYTES as u64;
        }
        while left > 0 && offset < self.size {
            let buf = self.read(offset, SCAN_BYTES).await?;
            if buf.is_empty() {
                break;
            }
            if let Some(pos) = memchr::memchr_iter(b'\n', &buf).nth(usize::try_from(left - 1).unwrap_or(usize::MAX)) {
                return Ok(offset + pos as u64 + 1);
            }
            left -= memchr::memchr_iter(b'\n', &buf).count() as u64;
            offset += buf.len() as u64;
        }
        Ok(if left == 0 { offset } else { self.size })
    }

    /// The number of the line starting at `offset` (a line's start).
    pub(super) async fn line_at(&self, offset: u64) -> Result<u64, StoreError> {
        let blocks = self.blocks().await?;
        let before = usize::try_from(offset / SCAN_BYTES as u64).unwrap_or(usize::MAX).min(blocks.len());
        let mut lines = 1 + blocks[..before].iter().map(|n| u64::from(*n)).sum::<u64>();
        let mut at = before as u64 * SCAN_BYTES as u64;
        while at < offset {
            let want = usize::try_from(offset - at).unwrap_or(SCAN_BYTES).min(SCAN_BYTES);
            let buf = self.read(at, want).await?;
            if buf.is_empty() {
                break;
            }
            lines += memchr::memchr_iter(b'\n', &buf).count() as u64;
            at += buf.len() as u64;
        }
        Ok(lines)
    }

    /// The first line's start at or after `offset`, when one begins within a scan's reach.
    pub(super) async fn next_line_start(&self, offset: u64) -> Result<Option<u64>, StoreError> {
        if offset == 0 {
            return Ok(Some(0));
        }
        let buf = self.read(offset - 1, SCAN_BYTES).await?;
        Ok(memchr::memchr(b'\n', &buf).map(|pos| offset + pos as u64))
    }
}

/// A search of a whole log, case-insensitive (ASCII), read a scan at a time.
pub(super) struct Search {
    log: Log,
    offset: u64,
    /// The end of the last chunk that did not end a line.
    carry: Vec<u8>,
    /// Lines ended before `carry`.
    lines: u64,
    finder: Finder<'static>,
    found: usize,
    done: bool,
}

impl Search {
    pub(super) fn new(log: Log, wanted: &str) -> Search {
        let needle = wanted.to_ascii_lowercase().into_bytes();
        Search {
            log,
            offset: 0,
            carry: Vec::new(),
            lines: 0,
            finder: Finder::new(&needle).into_owned(),
            found: 0,
            done: false,
        }
    }

    /// The next part of the answer (newline-delimited JSON: a line per match, then a
    /// summary); `None` once it is all said.
    pub(super) async fn next(&mut self) -> Option<Result<Bytes, StoreError>> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        let at_end = self.offset >= self.log.size;
        if at_end {
            let last = std::mem::take(&mut self.carry);
            if !last.is_empty() {
                self.matches(&last, &mut out);
                self.lines += 1;
            }
        } else {
            let chunk = match self.log.read(self.offset, SCAN_BYTES).await {
                Ok(chunk) if chunk.is_empty() => {
                    self.log.size = self.offset;
                    return Some(Ok(Bytes::new()));
                }
                Ok(chunk) => chunk,
                Err(err) => {
                    self.done = true;
                    return Some(Err(err));
                }
            };
            self.offset += chunk.len() as u64;
            let mut data = std::mem::take(&mut self.carry);
            data.extend_from_slice(&chunk);
            let cut = match memchr::memrchr(b'\n', &data) {
                Some(pos) => pos + 1,
                None if data.len() > MAX_LINE => data.len(),
                None => 0,
            };
            self.carry = data.split_off(cut);
            self.matches(&data, &mut out);
            self.lines += memchr::memchr_iter(b'\n', &data).count() as u64;
        }
        if at_end || self.found >= MAX_MATCHES {
            self.done = true;
            let summary = serde_json::json!({
                "done": true,
                "lines": self.lines,
                "matches": self.found.min(MAX_MATCHES),
                "truncated": self.found > MAX_MATCHES,
            });
            out.extend_from_slice(summary.to_string().as_bytes());
            out.push(b'\n');
        }
        Some(Ok(Bytes::from(out)))
    }

    /// Writes a JSON line for each line of `data` (whole lines) holding the text.
    fn matches(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let lowered = data.to_ascii_lowercase();
        let (mut line, mut counted_to, mut last_line) = (self.lines + 1, 0, 0);
        for hit in self.finder.find_iter(&lowered) {
            line += memchr::memchr_iter(b'\n', &data[counted_to..hit]).count() as u64;
            counted_to = hit;
            if line == last_line {
                continue;
            }
            last_line = line;
            self.found += 1;
            if self.found > MAX_MATCHES {
                return;
            }
            let start = memchr::memrchr(b'\n', &data[..hit]).map_or(0, |pos| pos + 1);
            let end = memchr::memchr(b'\n', &data[hit..]).map_or(data.len(), |pos| hit + pos);
            let text = String::from_utf8_lossy(&data[start..end.min(start + MAX_TEXT)]);
            out.extend_from_slice(serde_json::json!({"line": line, "text": text}).to_string().as_bytes());
            out.push(b'\n');
        }
    }
}
