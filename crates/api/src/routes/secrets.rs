//! The Secrets API's calls (`/api/secrets/v1`). A secret's value goes to the store and back to
//! a caller holding `secrets:get:<name>`, and nowhere else: no log, event or metric holds it.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use shoal_engine::rejection::Missing;
use shoal_engine::{Rejection, Timestamp};
use shoal_service::now;
use shoal_store::named_secrets::{NamedSecret, check_name};
use shoal_store::operation::{RemoveSecret, SetSecret};

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params};
use crate::routes::with_continuation;

fn name(params: &Params) -> Result<String, ApiError> {
    let name = params.0.get("name").cloned().unwrap_or_default();
    check_name(&name)?;
    Ok(name)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SecretInput {
    secret: Map<String, Value>,
    expires: String,
}

pub(crate) async fn set(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(input): Body<SecretInput>,
) -> Result<Json<Value>, ApiError> {
    let name = name(&params)?;
    caller.authorize(&Vars::new().one("name", &name))?;
    let expires = Timestamp::parse(&input.expires)
        .ok_or_else(|| Rejection::invalid("expires", "must be an RFC 3339 date-time"))?;
    let secret = NamedSecret { secret: input.secret, expires };
    state.queue.run(SetSecret { name, secret }).await?;
    Ok(Json(json!({})))
}

pub(crate) async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let name = name(&params)?;
    caller.authorize(&Vars::new().one("name", &name))?;
    state.queue.run(RemoveSecret { name }).await?;
    Ok(Json(json!({})))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let name = name(&params)?;
    // Checked before the look-up: a caller without the scope learns nothing of whether it exists.
    caller.authorize(&Vars::new().one("name", &name))?;
    let at = now();
    let lookup = name.clone();
    let secret = state.queue.store().read(move |reads| reads.secret(&lookup, at)).await?;
    let secret = secret.ok_or_else(|| ApiError::from(Rejection::from(Missing::Secret(name))))?;
    Ok(Json(json!({ "secret": secret.secret, "expires": secret.expires })))
}

pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    paging: Paging,
) -> Result<Json<Value>, ApiError> {
    caller.authorize(&Vars::new())?;
    let (limit, at) = (paging.limit, now());
    let page =
        state.queue.store().read(move |reads| reads.secret_names(paging.continuation.as_deref(), limit, at)).await?;
    Ok(with_continuation(json!({ "secrets": page.items }), page.continuation))
}
