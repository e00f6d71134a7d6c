//! Live logs over HTTP: workers append chunks by offset; readers fetch from an offset or
//! follow the log as it grows until the run ends.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};
use shoal_engine::rejection::Conflict;
use shoal_engine::{Rejection, TaskId};
use shoal_service::{Appended, LogProgress, Service};
use tokio::sync::watch;

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{LogQuery, Params, RawBody, SearchQuery};
use crate::per_address::Place;
use crate::serve::PeerAddr;

mod lines;

/// Largest chunk a worker may send at once.
pub(crate) const MAX_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Most bytes sent to a follower per read.
const READ_BYTES: usize = 256 * 1024;

/// Appends a chunk; answers the log's new size. A chunk past the end is refused with the
/// size to resend from.
pub(crate) async fn append_log(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    query: LogQuery,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    let (task_id, run_id) = (params.task_id()?, params.run_id()?);
    caller.authorize(&Vars::new().one("taskId", task_id).one("runId", run_id))?;
    match state.queue.append_log(task_id, run_id, query.offset, &body).await? {
        Appended::Size(size) => Ok(Json(json!({ "size": size }))),
        Appended::Gap(size) => Err(Rejection::from(Conflict::LogGap { offset: query.offset, size }).into()),
    }
}

/// The log from `offset`: what there is now, or (with `follow`) everything until the run ends.
pub(crate) async fn read_log(
    State(state): State<AppState>,
    peer: Option<Extension<PeerAddr>>,
    params: Params,
    query: LogQuery,
) -> Result<Response, ApiError> {
    // A deduped run's log is its original's.
    let (task_id, run_id) = crate::routes::artifacts::run_of(&state, &params, false).await?;
    let mut progress = state.queue.watch_log(task_id, run_id).await?;
    if !query.follow {
        // Not following: what is there now, and done (through any server, when logs are shared).
        let mut size = progress.borrow_and_update().size;
        if state.queue.logs_shared() {
            size = size.max(state.queue.log_size(task_id, run_id).await?);
        }
        progress = watch::Sender::new(LogProgress { size, done: true }).subscribe();
    }
    // Where the answer starts: `offset`, the start of `line`, or the start of the first line
    // within `tail` bytes of the end as it is now; with the number of its line when known.
    let mut size = progress.borrow().size;
    if state.queue.logs_shared() && (query.tail.is_some() || query.line.is_some()) {
        size = size.max(state.queue.log_size(task_id, run_id).await?);
    }
    let log = lines::Log { queue: state.queue.clone(), task_id, run_id, size };
    let (start, line) = match (query.tail, query.line) {
        (Some(tail), _) => {
            let from = size.saturating_sub(tail);
            match log.next_line_start(from).await? {
                Some(start) => (start, Some(log.line_at(start).await?)),
                None => (from, None),
            }
        }
        (None, Some(line)) => (log.line_start(line).await?, Some(line)),
        (None, None) => (query.offset, (query.offset == 0).then_some(1)),
    };
    // A follow that may wait counts as an open stream of its address (in-process requests,
    // with no connection, are not counted).
    let slot = match peer {
        Some(Extension(PeerAddr(peer))) if !progress.borrow().done => Some(state.subscribers.take(peer)?),
        _ => None,
    };
    let follower = Follower {
        queue: state.queue.clone(),
        task_id,
        run_id,
        offset: start,
        stop: query.limit.map(|limit| start.saturating_add(limit)),
        progress,
        looked: 0,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(follower, |mut follower| async move {
        match follower.next_chunk().await {
            Ok(Some(bytes)) => Some((Ok::<Bytes, std::io::Error>(bytes), follower)),
            Ok(None) => None,
            Err(err) => Some((Err(err), follower)),
        }
    });
    let mut res = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-log-offset", HeaderValue::from(start));
    if let Some(line) = line {
        headers.insert("x-log-line", HeaderValue::from(line));
    }
    crate::routes::blobs::sandbox(headers);
    Ok(res)
}

/// Searches the whole log (as it is now) for `q`, any case: newline-delimited JSON, one
/// `{line, text}` per matching line as the scan finds it, then `{done, lines, matches,
/// truncated}` (`lines` searched; a search stops after 1,000 matching lines, `truncated`).
pub(crate) async fn search_log(
    State(state): State<AppState>,
    params: Params,
    SearchQuery(wanted): SearchQuery,
) -> Result<Response, ApiError> {
    let (task_id, run_id) = crate::routes::artifacts::run_of(&state, &params, false).await?;
    let size = state.queue.log_size(task_id, run_id).await?;
    let log = lines::Log { queue: state.queue.clone(), task_id, run_id, size };
    let search = lines::Search::new(log, &wanted);
    let stream = futures_util::stream::unfold(search, |mut search| async move {
        search.next().await.map(|part| (part.map_err(io_error), search))
    });
    let mut res = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(res)
}

/// A reader working through a log as it grows.
struct Follower {
    queue: Service,
    task_id: TaskId,
    run_id: u32,
    offset: u64,
    /// Where the answer ends, when it is limited.
    stop: Option<u64>,
    progress: watch::Receiver<LogProgress>,
    /// The size last looked up in the database (appends through other servers announce
    /// nothing here).
    looked: u64,
    /// The follow's place among its address's open streams, freed with the follower.
    _slot: Option<Place>,
}

/// How often a follower looks for bytes appended through other servers, in case their
/// announcements were lost (they come at once otherwise).
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn io_error(err: shoal_store::StoreError) -> std::io::Error {
    std::io::Error::other(err.to_string())
}

impl Follower {
    /// The next bytes, waiting for them if need be; `None` once the run ended and all is read.
    async fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            let progress = *self.progress.borrow_and_update();
            // Once the run ended, the log (not the last announcement) says where the end is.
            let end = if progress.done {
                self.queue.log_size(self.task_id, self.run_id).await.map_err(io_error)?
            } else {
                progress.size.max(self.looked)
            };
            let end = self.stop.map_or(end, |stop| end.min(stop));
            if self.stop.is_some_and(|stop| self.offset >= stop) {
                return Ok(None);
            }
            if self.offset < end {
                return self.read(end).await.map(Some);
            }
            if progress.done {
                return Ok(None);
            }
            let changed = if self.queue.logs_shared() {
                tokio::select! {
                    changed = self.progress.changed() => changed,
                    () = tokio::time::sleep(LOOK_EVERY) => {
                        self.looked = self.queue.log_size(self.task_id, self.run_id).await.map_err(io_error)?;
                        Ok(())
                    }
                }
            } else {
                self.progress.changed().await
            };
            if changed.is_err() {
                // The entry went away: the run ended. Drain what the log holds.
                self.progress = watch::Sender::new(LogProgress { size: progress.size, done: true }).subscribe();
            }
        }
    }

    async fn read(&mut self, end: u64) -> std::io::Result<Bytes> {
        let offset = self.offset;
        let want = usize::try_from(end - offset).unwrap_or(READ_BYTES).min(READ_BYTES);
        let buf = self.queue.read_log(self.task_id, self.run_id, offset, want).await.map_err(io_error)?;
        let n_read = buf.len();
        self.offset += n_read as u64;
        if n_read == 0 {
            // The file is shorter than announced (cannot happen while appends are durable
            // before they are announced); stop rather than spin.
            self.offset = end;
        }
        Ok(Bytes::from(buf))
    }
}
