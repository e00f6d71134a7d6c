//! The server's own blob endpoint: where `putUrl`s and artifact redirects point. Bytes
//! stream to and from the blob store without being held in memory.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use shoal_store::ArtifactKey;

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::Params;
use shoal_engine::artifact::private_names;

fn key_of(params: &Params) -> Result<ArtifactKey, ApiError> {
    let name = params.0.get("name").cloned().unwrap_or_default();
    shoal_engine::artifact::check_name(&name)?;
    Ok(ArtifactKey { task_id: params.task_id()?, run_id: params.run_id()?, name })
}

/// Receives a blob artifact's bytes, then marks it uploaded.
pub(crate) async fn put_blob(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    mut body: Body,
) -> Result<StatusCode, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&Vars::new().one("taskId", key.task_id).one("runId", key.run_id))?;
    let mut upload = state.queue.begin_upload(key).await?;
    let received = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|err| ApiError::invalid_input(format!("body: upload interrupted: {err}")))?;
            if let Some(data) = frame.data_ref() {
                upload.write(data).await?;
            }
        }
        Ok::<_, ApiError>(())
    }
    .await;
    if let Err(err) = received {
        upload.abort().await;
        return Err(err);
    }
    state.queue.finish_upload(upload).await?;
    Ok(StatusCode::OK)
}

/// Bytes read from a blob file at a time.
const BLOB_READ: usize = 256 * 1024;

/// Serves a blob artifact's bytes with its content type.
pub(crate) async fn get_blob(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Response, ApiError> {
    let key = key_of(&params)?;
    caller.authorize(&Vars::new().many("privateNames", private_names([key.name.as_str()])))?;
    let (artifact, reader) = state.queue.open_blob(&key).await?;
    let size = reader.size();
    // Large reads: each read of a tokio file is a trip to a blocking thread (4 KiB by default).
    let stream = tokio_util::io::ReaderStream::with_capacity(reader, BLOB_READ);
    let mut res = Body::from_stream(stream).into_response();
    let content_type = HeaderValue::from_str(artifact.kind.content_type())
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    res.headers_mut().insert(header::CONTENT_TYPE, content_type);
    res.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    sandbox(res.headers_mut());
    Ok(res)
}

/// Marks a response as content someone uploaded: a browser shows it without running it as a
/// page of this origin (an HTML artifact's scripts would otherwise run with the origin of the
/// API and its UI), and without guessing another type than the one declared.
pub(crate) fn sandbox(headers: &mut axum::http::HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}
