//! Turning requests into typed values: path parameters, query strings and JSON bodies, each
//! failure a 400 that names the field.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use shoal_engine::TaskId;
use shoal_engine::id::split_task_queue_id;

use crate::error::ApiError;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The path parameters of a route, already percent-decoded.
#[derive(Debug, Clone, Default)]
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Params, ApiError> {
        let axum::extract::Path(map) = axum::extract::Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|err| ApiError::bad_argument(format!("bad path parameter: {err}")))?;
        Ok(Params(map))
    }
}

impl Params {
    fn get(&self, name: &str) -> Result<&str, ApiError> {
        self.0.get(name).map(String::as_str).ok_or_else(|| ApiError::bad_argument(format!("{name} is missing")))
    }

    /// A slugid parameter (`taskId`, `taskGroupId`).
    pub fn slugid(&self, name: &str, wire_name: &str) -> Result<TaskId, ApiError> {
        let text = self.get(name)?;
        TaskId::parse(text).ok_or_else(|| ApiError::bad_argument(format!("{wire_name} `{text}` is not a slugid")))
    }

    /// The `taskId` parameter.
    pub fn task_id(&self) -> Result<TaskId, ApiError> {
        self.slugid("task_id", "taskId")
    }

    /// The `runId` parameter.
    pub fn run_id(&self) -> Result<u32, ApiError> {
        let text = self.get("run_id")?;
        text.parse::<u32>()
            .ok()
            .filter(|n| *n <= 1000)
            .ok_or_else(|| ApiError::bad_argument(format!("runId `{text}` must be an integer 0..=1000")))
    }

    /// The `taskQueueId` parameter, given percent-encoded as one segment or raw as two.
    pub fn task_queue_id(&self) -> Result<String, ApiError> {
        let first = self.get("queue")?;
        let full = match self.0.get("queue_wt") {
            Some(worker_type) => format!("{first}/{worker_type}"),
            None => first.to_owned(),
        };
        match split_task_queue_id(&full) {
            Some(_) => Ok(full),
            None => Err(ApiError::bad_argument(format!(
                "taskQueueId `{full}` must match ^[a-zA-Z0-9-_]{{1,38}}/[a-z]([-a-z0-9]{{0,36}}[a-z0-9])?$"
            ))),
        }
    }
}

/// `?continuationToken=&limit=` of listings.
#[derive(Debug, Clone, Default)]
pub struct Paging {
    /// Where the previous page ended.
    pub continuation: Option<String>,
    /// Page size, 1..=1000.
    pub limit: usize,
}

impl<S: Send + Sync> FromRequestParts<S> for Paging {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Paging, ApiError> {
        let mut paging = Paging { continuation: None, limit: 1000 };
        for pair in parts.uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "continuationToken" => paging.continuation = Some(value).filter(|v| !v.is_empty()),
                "limit" => {
                    paging.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| ApiError::bad_argument("limit must be an integer 1..=1000"))?;
                }
                _ => {}
            }
        }
        Ok(paging)
    }
}

/// `?offset=&follow=` of live-log calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogQuery {
    /// Byte offset into the log.
    pub offset: u64,
    /// Keep the response open and stream new bytes until the run ends.
    pub follow: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for LogQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<LogQuery, ApiError> {
        let mut query = LogQuery::default();
        for pair in parts.uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "offset" => {
                    query.offset = value
                        .parse()
                        .map_err(|_| ApiError::bad_argument("offset must be a byte offset (an integer >= 0)"))?;
                }
                "follow" => query.follow = matches!(value, "" | "1" | "true"),
                _ => {}
            }
        }
        Ok(query)
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut res = Vec::with_capacity(bytes.len());
    let mut idx = 0;
    while idx < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[idx] {
            b'%' if idx + 2 < bytes.len() => match (hex(bytes[idx + 1]), hex(bytes[idx + 2])) {
                (Some(hi), Some(lo)) => {
                    res.push((hi * 16 + lo) as u8);
                    idx += 3;
                    continue;
                }
                _ => res.push(b'%'),
            },
            b'+' => res.push(b' '),
            other => res.push(other),
        }
        idx += 1;
    }
    String::from_utf8_lossy(&res).into_owned()
}

/// A JSON body of type `T`; a body that does not fit names the field and the problem.
#[derive(Debug, Clone)]
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Body<T>, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|_| ApiError::too_large(format!("request body must be at most {MAX_BODY_BYTES} bytes")))?;
        parse_json(&bytes).map(Body)
    }
}

/// Parses a JSON body, naming the failing field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) { b"{}" } else { bytes };
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." {
            ApiError::invalid_input(format!("body: {inner}"))
        } else {
            ApiError::invalid_input(format!("{path}: {inner}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%41%42"), "AB");
    }
}
