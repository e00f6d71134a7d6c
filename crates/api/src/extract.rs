//! Turning requests into typed values: path parameters, query strings and JSON bodies, each
//! failure a 400 that names the field.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use serde::Deserialize;
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
    /// A parameter as given.
    ///
    /// # Errors
    /// 400 when the route has no such parameter.
    pub fn get(&self, name: &str) -> Result<&str, ApiError> {
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

/// Query parameters as they arrive; unknown ones are ignored, as Taskcluster does.
#[derive(Deserialize)]
struct RawQuery {
    #[serde(rename = "continuationToken")]
    continuation_token: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
    follow: Option<String>,
    tail: Option<String>,
    line: Option<String>,
    q: Option<String>,
}

async fn raw_query(parts: &mut Parts) -> Result<RawQuery, ApiError> {
    let Query(raw) = Query::<RawQuery>::try_from_uri(&parts.uri)
        .map_err(|err| ApiError::bad_argument(format!("bad query string: {err}")))?;
    Ok(raw)
}

impl<S: Send + Sync> FromRequestParts<S> for Paging {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Paging, ApiError> {
        let raw = raw_query(parts).await?;
        let limit = match raw.limit {
            None => 1000,
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| ApiError::bad_argument("limit must be an integer 1..=1000"))?,
        };
        Ok(Paging { continuation: raw.continuation_token.filter(|token| !token.is_empty()), limit })
    }
}

/// `?offset=&follow=&tail=&limit=` of live-log calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogQuery {
    /// Byte offset into the log.
    pub offset: u64,
    /// Keep the response open and stream new bytes until the run ends.
    pub follow: bool,
    /// Start this many bytes before the end instead (a viewer's first screen of a big log).
    pub tail: Option<u64>,
    /// Most bytes answered (not with `follow`).
    pub limit: Option<u64>,
    /// Start at the start of this line (from 1) instead.
    pub line: Option<u64>,
}

impl<S: Send + Sync> FromRequestParts<S> for LogQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<LogQuery, ApiError> {
        let raw = raw_query(parts).await?;
        let offset = match raw.offset {
            None => 0,
            Some(text) => {
                text.parse().map_err(|_| ApiError::bad_argument("offset must be a byte offset (an integer >= 0)"))?
            }
        };
        let follow = raw.follow.is_some_and(|value| matches!(value.as_str(), "" | "1" | "true"));
        let bytes = |name: &str, text: Option<String>| {
            text.map(|text| {
                text.parse::<u64>().map_err(|_| ApiError::bad_argument(format!("{name} must be a number of bytes")))
            })
            .transpose()
        };
        let (tail, limit) = (bytes("tail", raw.tail)?, bytes("limit", raw.limit)?);
        if tail.is_some() && offset > 0 {
            return Err(ApiError::bad_argument("tail: give offset or tail, not both"));
        }
        if limit.is_some() && follow {
            return Err(ApiError::bad_argument("limit: a follow reads until the run ends; give one or the other"));
        }
        let line = raw
            .line
            .map(|text| {
                text.parse::<u64>()
                    .ok()
                    .filter(|line| *line >= 1)
                    .ok_or_else(|| ApiError::bad_argument("line must be a line's number (an integer >= 1)"))
            })
            .transpose()?;
        if line.is_some() && (tail.is_some() || offset > 0) {
            return Err(ApiError::bad_argument("line: give offset, tail or line, one of them"));
        }
        Ok(LogQuery { offset, follow, tail, limit, line })
    }
}

/// `q`: the text a log search looks for.
#[derive(Debug, Clone)]
pub struct SearchQuery(pub String);

/// Longest text a log search looks for, in bytes.
const MAX_SEARCH: usize = 256;

impl<S: Send + Sync> FromRequestParts<S> for SearchQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<SearchQuery, ApiError> {
        match raw_query(parts).await?.q {
            Some(q) if !q.is_empty() && q.len() <= MAX_SEARCH && !q.contains('\n') => Ok(SearchQuery(q)),
            _ => Err(ApiError::bad_argument(format!(
                "q must be the text to search for: 1 to {MAX_SEARCH} bytes, within one line"
            ))),
        }
    }
}

/// A body's bytes, at most [`MAX_BODY_BYTES`]; a larger one is refused with Taskcluster's
/// error body (413 `InputTooLarge`), not axum's plain text.
#[derive(Debug, Clone)]
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<RawBody, ApiError> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(RawBody(bytes)),
            Err(rejection) if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::too_large(format!("body: must be at most {MAX_BODY_BYTES} bytes")))
            }
            Err(rejection) => Err(ApiError::invalid_input(format!("body: {}", rejection.body_text()))),
        }
    }
}

/// A JSON body of type `T`; a body that does not fit names the field and the problem.
#[derive(Debug, Clone)]
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Body<T>, ApiError> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
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
        // A body cut short or not JSON at all has no field to name (its path reads `?`).
        if inner.is_eof() || inner.is_syntax() {
            return ApiError::invalid_input(format!("body: must be a JSON document ({inner})"));
        }
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

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "only deserialized, to check error paths")]
    struct Outer {
        inner: Inner,
    }

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "only deserialized, to check error paths")]
    struct Inner {
        count: u32,
    }

    #[test]
    fn json_errors_name_the_field_path() {
        let err = parse_json::<Outer>(br#"{"inner": {"count": "three"}}"#).unwrap_err();
        assert!(err.message.starts_with("inner.count: "), "{}", err.message);
        let err = parse_json::<Outer>(b"not json").unwrap_err();
        assert!(err.message.starts_with("body: "), "{}", err.message);
        assert!(parse_json::<Outer>(b"  ").is_err(), "an empty body is an empty object, missing `inner`");
        let err = parse_json::<Outer>(br#"{"inner": {"cou"#).unwrap_err();
        assert!(err.message.starts_with("body: must be a JSON document (EOF"), "a truncated body: {}", err.message);
    }
}
