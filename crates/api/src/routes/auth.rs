//! The Auth API's calls for clients, roles and scopes (`/api/auth/v1`), so that
//! `taskcluster.Auth` manages a Shoal server's clients as it would Taskcluster's.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use shoal_engine::Timestamp;
use shoal_engine::auth::client::{Client, ClientInput, Role, RoleInput, check_client_id, check_role_id};
use shoal_engine::auth::{QUEUE_CLIENT_ID, ROOT_CLIENT_ID, ScopeExpr, ScopeSet};
use shoal_service::auth::AuthState;
use shoal_store::ClientEdit;

use crate::AppState;
use crate::auth::{Caller, Vars};
use crate::error::ApiError;
use crate::extract::{Body, Paging, Params};
use crate::routes::with_continuation;

/// The clients the server keeps itself, with what getClient says of them.
const BUILT_IN: [(&str, &str); 2] = [
    (ROOT_CLIENT_ID, "The root client: holds `*`; its accessToken is set in the server's settings."),
    (QUEUE_CLIENT_ID, "The server itself: signs the credentials and URLs it hands out."),
];

fn client_id(params: &Params) -> Result<String, ApiError> {
    let id = params.0.get("client_id").cloned().unwrap_or_default();
    shoal_engine::auth::client::is_client_id(&id)
        .then_some(id)
        .ok_or_else(|| ApiError::bad_argument("clientId: must match ^[A-Za-z0-9!@/:.+|_-]+$ (at most 256 characters)"))
}

fn role_id(params: &Params) -> Result<String, ApiError> {
    let id = params.0.get("role_id").cloned().unwrap_or_default();
    check_role_id(&id).map_err(|err| ApiError::bad_argument(err.to_string()))?;
    Ok(id)
}

fn expanded(auth: &AuthState, scopes: &[String]) -> ScopeSet {
    auth.expander.expand(scopes.iter().cloned()).unwrap_or_else(|_| ScopeSet::new(scopes.iter().cloned()))
}

/// A client as the API shows it; the access token only when `with_token`.
fn client_body(auth: &AuthState, client: &Client, with_token: bool) -> Value {
    let mut body = json!({
        "clientId": client.client_id,
        "description": client.description,
        "expires": client.expires,
        "created": client.created,
        "lastModified": client.last_modified,
        // Not tracked: recording every use would cost a write per request.
        "lastDateUsed": client.created,
        "lastRotated": client.last_rotated,
        "deleteOnExpiration": client.delete_on_expiration,
        "disabled": client.disabled,
        "scopes": client.scopes,
        "expandedScopes": expanded(auth, &client.scopes),
    });
    if with_token {
        body["accessToken"] = json!(client.access_token);
    }
    body
}

fn built_in(client_id: &str, description: &str) -> Client {
    let epoch = Timestamp(0);
    Client {
        client_id: client_id.to_owned(),
        access_token: String::new(),
        description: description.to_owned(),
        scopes: vec!["*".to_owned()],
        expires: Timestamp::parse("3000-01-01T00:00:00.000Z").unwrap_or(epoch),
        disabled: false,
        delete_on_expiration: false,
        created: epoch,
        last_modified: epoch,
        last_rotated: epoch,
    }
}

/// Every client, stored or built in, by id.
fn all_clients(auth: &AuthState) -> Vec<Client> {
    let mut clients: Vec<Client> = auth.stored.values().cloned().collect();
    clients.extend(BUILT_IN.iter().map(|(id, description)| built_in(id, description)));
    clients.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    clients
}

fn role_body(auth: &AuthState, role: &Role) -> Value {
    json!({
        "roleId": role.role_id,
        "scopes": role.scopes,
        "description": role.description,
        "created": role.created,
        "lastModified": role.last_modified,
        "expandedScopes": expanded(auth, &role.scopes),
    })
}

#[derive(Deserialize)]
pub(crate) struct Prefix {
    prefix: Option<String>,
}

pub(crate) async fn list_clients(
    State(state): State<AppState>,
    paging: Paging,
    axum::extract::Query(query): axum::extract::Query<Prefix>,
) -> Result<Json<Value>, ApiError> {
    let auth = state.auth.current();
    let prefix = query.prefix.unwrap_or_default();
    let after = paging.continuation.unwrap_or_default();
    let matching: Vec<Client> =
        all_clients(&auth).into_iter().filter(|c| c.client_id.starts_with(&prefix) && c.client_id > after).collect();
    let more = matching.len() > paging.limit;
    let page: Vec<Value> = matching.iter().take(paging.limit).map(|c| client_body(&auth, c, false)).collect();
    let token = more.then(|| matching[paging.limit - 1].client_id.clone());
    Ok(with_continuation(json!({ "clients": page }), token))
}

fn find_client(auth: &AuthState, client_id: &str) -> Result<Client, ApiError> {
    if let Some((id, description)) = BUILT_IN.iter().find(|(id, _)| *id == client_id) {
        return Ok(built_in(id, description));
    }
    auth.stored.get(client_id).cloned().ok_or_else(|| ApiError::not_found(format!("client {client_id} not found")))
}

pub(crate) async fn get_client(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let auth = state.auth.current();
    let client = find_client(&auth, &client_id(&params)?)?;
    Ok(Json(client_body(&auth, &client, false)))
}

pub(crate) async fn create_client(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(input): Body<ClientInput>,
) -> Result<Json<Value>, ApiError> {
    let client_id = client_id(&params)?;
    let change = input.validate()?;
    let scopes = change.scopes.clone().unwrap_or_default();
    caller.authorize(&Vars::new().one("clientId", &client_id).many("scopes", scopes))?;
    check_client_id(&client_id)?;
    let client = state.auth.create_client(client_id, change).await?;
    Ok(Json(client_body(&state.auth.current(), &client, true)))
}

pub(crate) async fn update_client(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(input): Body<ClientInput>,
) -> Result<Json<Value>, ApiError> {
    let client_id = client_id(&params)?;
    let change = input.validate()?;
    let auth = state.auth.current();
    let current = find_client(&auth, &client_id)?;
    let held = expanded(&auth, &current.scopes);
    let added: Vec<String> = change.scopes.iter().flatten().filter(|scope| !held.satisfies(scope)).cloned().collect();
    caller.authorize(&Vars::new().one("clientId", &client_id).many("scopesAdded", added))?;
    check_client_id(&client_id)?;
    let client = state.auth.update_client(client_id, ClientEdit::Settings(change)).await?;
    Ok(Json(client_body(&state.auth.current(), &client, false)))
}

/// Changes a stored client once the caller holds the endpoint's scopes for it (with the
/// client's own scopes as `scopes` when `with_scopes`: enabling it gives them back).
async fn edit_client(
    state: &AppState,
    caller: &Caller,
    params: &Params,
    with_scopes: bool,
    edit: ClientEdit,
) -> Result<Client, ApiError> {
    let client_id = client_id(params)?;
    let mut vars = Vars::new().one("clientId", &client_id);
    if with_scopes {
        vars = vars.many("scopes", find_client(&state.auth.current(), &client_id)?.scopes);
    }
    caller.authorize(&vars)?;
    check_client_id(&client_id)?;
    Ok(state.auth.update_client(client_id, edit).await?)
}

pub(crate) async fn enable_client(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let client = edit_client(&state, &caller, &params, true, ClientEdit::Disabled(false)).await?;
    Ok(Json(client_body(&state.auth.current(), &client, false)))
}

pub(crate) async fn disable_client(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let client = edit_client(&state, &caller, &params, false, ClientEdit::Disabled(true)).await?;
    Ok(Json(client_body(&state.auth.current(), &client, false)))
}

pub(crate) async fn reset_access_token(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let token = shoal_service::auth::new_secret();
    let client = edit_client(&state, &caller, &params, false, ClientEdit::AccessToken(token)).await?;
    Ok(Json(client_body(&state.auth.current(), &client, true)))
}

pub(crate) async fn delete_client(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<StatusCode, ApiError> {
    let client_id = client_id(&params)?;
    caller.authorize(&Vars::new().one("clientId", &client_id))?;
    check_client_id(&client_id)?;
    state.auth.delete_client(client_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn list_roles(State(state): State<AppState>) -> Json<Value> {
    let auth = state.auth.current();
    Json(Value::Array(auth.roles.values().map(|role| role_body(&auth, role)).collect()))
}

pub(crate) async fn list_role_ids(State(state): State<AppState>, paging: Paging) -> Json<Value> {
    let auth = state.auth.current();
    let after = paging.continuation.unwrap_or_default();
    let ids: Vec<&String> = auth.roles.keys().filter(|id| **id > after).collect();
    let more = ids.len() > paging.limit;
    let page: Vec<&String> = ids.iter().take(paging.limit).copied().collect();
    let token = more.then(|| page.last().map(|id| (*id).clone())).flatten();
    with_continuation(json!({ "roleIds": page }), token)
}

pub(crate) async fn get_role(State(state): State<AppState>, params: Params) -> Result<Json<Value>, ApiError> {
    let role_id = role_id(&params)?;
    let auth = state.auth.current();
    let role = auth.roles.get(&role_id).ok_or_else(|| ApiError::not_found(format!("role {role_id} not found")))?;
    Ok(Json(role_body(&auth, role)))
}

pub(crate) async fn create_role(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(input): Body<RoleInput>,
) -> Result<Json<Value>, ApiError> {
    let role_id = role_id(&params)?;
    let input = input.validate()?;
    caller.authorize(&Vars::new().one("roleId", &role_id).many("scopes", input.scopes.clone()))?;
    let role = state.auth.put_role(role_id, input, true).await?;
    Ok(Json(role_body(&state.auth.current(), &role)))
}

pub(crate) async fn update_role(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
    Body(input): Body<RoleInput>,
) -> Result<Json<Value>, ApiError> {
    let role_id = role_id(&params)?;
    let input = input.validate()?;
    let auth = state.auth.current();
    let held = auth.roles.get(&role_id).map(|role| expanded(&auth, &role.scopes)).unwrap_or_default();
    let added: Vec<String> = input.scopes.iter().filter(|scope| !held.satisfies(scope)).cloned().collect();
    caller.authorize(&Vars::new().one("roleId", &role_id).many("scopesAdded", added))?;
    let role = state.auth.put_role(role_id, input, false).await?;
    Ok(Json(role_body(&state.auth.current(), &role)))
}

pub(crate) async fn delete_role(
    State(state): State<AppState>,
    caller: Caller,
    params: Params,
) -> Result<StatusCode, ApiError> {
    let role_id = role_id(&params)?;
    caller.authorize(&Vars::new().one("roleId", &role_id))?;
    state.auth.delete_role(role_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScopesBody {
    scopes: Vec<String>,
}

pub(crate) async fn expand_scopes(
    State(state): State<AppState>,
    Body(body): Body<ScopesBody>,
) -> Result<Json<Value>, ApiError> {
    shoal_engine::auth::scope::check_scopes("scopes", &body.scopes)?;
    Ok(Json(json!({ "scopes": expanded(&state.auth.current(), &body.scopes) })))
}

pub(crate) async fn current_scopes(caller: Caller) -> Json<Value> {
    Json(json!({ "scopes": caller.scopes.as_slice() }))
}

/// testAuthenticate's body: the scopes the fake client `tester` (access token `no-secret`)
/// holds for this one request, and what it must satisfy.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestAuthenticate {
    #[serde(default)]
    pub(crate) client_scopes: Vec<String>,
    #[serde(default)]
    pub(crate) required_scopes: Vec<String>,
}

pub(crate) async fn test_authenticate(
    caller: Caller,
    Body(body): Body<TestAuthenticate>,
) -> Result<Json<Value>, ApiError> {
    caller.require(&ScopeExpr::all_of(body.required_scopes))?;
    Ok(Json(json!({ "clientId": caller.client_id, "scopes": caller.scopes.as_slice() })))
}

/// testAuthenticateGet: as testAuthenticate, with GET (so with a bewit too), as the fake
/// client `tester` (access token `no-secret`) holding Taskcluster's fixed scopes for it.
pub(crate) async fn test_authenticate_get(caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.authorize(&Vars::new())?;
    Ok(Json(json!({ "clientId": caller.client_id, "scopes": caller.scopes.as_slice() })))
}

/// listAuditHistory: Shoal keeps no audit history, so the list is empty (docs/API.md).
pub(crate) async fn list_audit_history(caller: Caller, params: Params) -> Result<Json<Value>, ApiError> {
    let client_id = client_id(&params)?;
    caller.authorize(&Vars::new().one("clientId", &client_id))?;
    Ok(Json(json!({ "auditHistory": [] })))
}

/// getEntityHistory: Shoal keeps no audit history, so the list is empty (docs/API.md).
pub(crate) async fn get_entity_history(caller: Caller, params: Params) -> Result<Json<Value>, ApiError> {
    let entity_type = params.get("entity_type")?;
    caller.authorize(&Vars::new().one("entityType", entity_type))?;
    Ok(Json(json!({ "auditHistory": [] })))
}
