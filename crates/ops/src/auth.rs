//! Clients and roles: each change checked against what is stored, then written, and the
//! auth generation moved on so that every server reloads what authentication holds.

use shoal_engine::Timestamp;
use shoal_engine::auth::client::{Client, Role};
use shoal_engine::auth::roles::Roles;
use shoal_engine::rejection::Missing;
use shoal_engine::{Rejection, rejection::Conflict};

use crate::StoreError;
use crate::WriteTx;
use crate::row::corrupt;

/// A backend's transaction, as the client and role operations use it.
pub trait AuthTx {
    /// A client's or role's stored JSON.
    async fn load_auth(&mut self, kind: AuthKind, id: &str) -> Result<Option<String>, StoreError>;

    /// Every stored JSON of a kind.
    async fn all_auth(&mut self, kind: AuthKind) -> Result<Vec<String>, StoreError>;

    /// Stores (or with `None` deletes) a client's or role's JSON.
    async fn save_auth(&mut self, kind: AuthKind, id: &str, body: Option<&str>) -> Result<(), StoreError>;

    /// Moves the auth generation on, so that every server reloads clients and roles.
    async fn bump_auth_generation(&mut self) -> Result<(), StoreError>;

    /// The server's signing token: the one stored, or `candidate` stored now.
    async fn signing_token(&mut self, candidate: &str) -> Result<String, StoreError>;
}

/// What is stored under a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthKind {
    /// A client, as JSON.
    Client,
    /// A role, as JSON.
    Role,
}

impl AuthKind {
    /// Its name in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthKind::Client => "client",
            AuthKind::Role => "role",
        }
    }
}

/// A change to clients or roles.
#[derive(Debug, Clone)]
pub enum AuthChange {
    /// A new client (409 when the id is taken); its times are set to the change's.
    CreateClient(Client),
    /// A client's new settings; `edit` is given the stored client (404 when missing).
    UpdateClient(String, ClientEdit),
    /// Deletes a client (nothing when missing).
    DeleteClient(String),
    /// A new role (409 when the id is taken).
    CreateRole(Role),
    /// A role's new description and scopes (404 when missing).
    UpdateRole(Role),
    /// Deletes a role (nothing when missing).
    DeleteRole(String),
}

/// How an update changes a stored client.
#[derive(Debug, Clone)]
pub enum ClientEdit {
    /// New description, expiry, and (when given) scopes and deleteOnExpiration.
    Settings(shoal_engine::auth::client::ClientChange),
    /// Enabled or disabled.
    Disabled(bool),
    /// A new access token.
    AccessToken(String),
}

/// What a change left: the client or role as stored now, or nothing (deleted).
#[derive(Debug, Clone)]
pub enum AuthOutcome {
    /// A client.
    Client(Client),
    /// A role.
    Role(Role),
    /// Deleted (or was not there).
    Deleted,
}

fn decode<T: serde::de::DeserializeOwned>(kind: AuthKind, body: &str) -> Result<T, StoreError> {
    serde_json::from_str(body).map_err(|err| corrupt(format!("{} record: {err}", kind.as_str())))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Internal(err.to_string()))
}

/// Applies `change` at `now`.
pub async fn change(tx: &mut impl WriteTx, change: &AuthChange, now: Timestamp) -> Result<AuthOutcome, StoreError> {
    let outcome = match change {
        AuthChange::CreateClient(client) => {
            if tx.load_auth(AuthKind::Client, &client.client_id).await?.is_some() {
                return Err(Rejection::from(Conflict::ClientExists(client.client_id.clone())).into());
            }
            let mut client = client.clone();
            (client.created, client.last_modified, client.last_rotated) = (now, now, now);
            tx.save_auth(AuthKind::Client, &client.client_id, Some(&encode(&client)?)).await?;
            AuthOutcome::Client(client)
        }
        AuthChange::UpdateClient(client_id, edit) => {
            let Some(body) = tx.load_auth(AuthKind::Client, client_id).await? else {
                return Err(Rejection::from(Missing::Client(client_id.clone())).into());
            };
            let mut client: Client = decode(AuthKind::Client, &body)?;
            match edit {
                ClientEdit::Settings(settings) => {
                    client.description.clone_from(&settings.description);
                    client.expires = settings.expires;
                    if let Some(scopes) = &settings.scopes {
                        client.scopes.clone_from(scopes);
                    }
                    if let Some(delete) = settings.delete_on_expiration {
                        client.delete_on_expiration = delete;
                    }
                }
                ClientEdit::Disabled(disabled) => client.disabled = *disabled,
                ClientEdit::AccessToken(token) => {
                    client.access_token.clone_from(token);
                    client.last_rotated = now;
                }
            }
            client.last_modified = now;
            tx.save_auth(AuthKind::Client, client_id, Some(&encode(&client)?)).await?;
            AuthOutcome::Client(client)
        }
        AuthChange::DeleteClient(client_id) => {
            tx.save_auth(AuthKind::Client, client_id, None).await?;
            AuthOutcome::Deleted
        }
        AuthChange::CreateRole(role) | AuthChange::UpdateRole(role) => {
            let existing = tx.load_auth(AuthKind::Role, &role.role_id).await?;
            let mut role = role.clone();
            (role.created, role.last_modified) = (now, now);
            match (change, existing) {
                (AuthChange::CreateRole(_), Some(_)) => {
                    return Err(Rejection::from(Conflict::RoleExists(role.role_id.clone())).into());
                }
                (AuthChange::UpdateRole(_), None) => {
                    return Err(Rejection::from(Missing::Role(role.role_id.clone())).into());
                }
                (AuthChange::UpdateRole(_), Some(body)) => {
                    role.created = decode::<Role>(AuthKind::Role, &body)?.created;
                }
                _ => {}
            }
            check_roles_expand(tx, &role).await?;
            tx.save_auth(AuthKind::Role, &role.role_id, Some(&encode(&role)?)).await?;
            AuthOutcome::Role(role)
        }
        AuthChange::DeleteRole(role_id) => {
            tx.save_auth(AuthKind::Role, role_id, None).await?;
            AuthOutcome::Deleted
        }
    };
    tx.bump_auth_generation().await?;
    Ok(outcome)
}

/// Refuses a role whose addition makes some role's expansion run away.
async fn check_roles_expand(tx: &mut impl WriteTx, changed: &Role) -> Result<(), StoreError> {
    let mut roles: Vec<(String, Vec<String>)> = Vec::new();
    for body in tx.all_auth(AuthKind::Role).await? {
        let role: Role = decode(AuthKind::Role, &body)?;
        if role.role_id != changed.role_id {
            roles.push((role.role_id, role.scopes));
        }
    }
    roles.push((changed.role_id.clone(), changed.scopes.clone()));
    let all = Roles::new(roles);
    all.check_expansions_end().map_err(|(role_id, err)| {
        let rule = if role_id == changed.role_id { format!("{err}") } else { format!("{err}; through role {role_id}") };
        Rejection::invalid("scopes", rule)
    })?;
    Ok(())
}
