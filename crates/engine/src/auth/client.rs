//! Clients and roles as the Auth API defines them, and the rules of their fields.

use serde::{Deserialize, Serialize};

use crate::auth::scope::check_scopes;
use crate::{Rejection, Timestamp};

/// Longest description of a client or role (Taskcluster's schema).
pub const MAX_DESCRIPTION: usize = 10_240;
/// Most scopes a client or role may list directly.
pub const MAX_SCOPES: usize = 1000;
/// Client ids the server keeps for itself: they cannot be created, changed or deleted.
pub const RESERVED_PREFIX: &str = "static/";

/// Whether `client_id` fits Taskcluster's pattern `^[A-Za-z0-9!@/:.+|_-]+$` (at most 256).
#[must_use]
pub fn is_client_id(client_id: &str) -> bool {
    !client_id.is_empty()
        && client_id.len() <= 256
        && client_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"!@/:.+|_-".contains(&b))
}

/// Whether `role_id` fits Taskcluster's pattern `^[\x20-\x7e]+$` (at most 256).
#[must_use]
pub fn is_role_id(role_id: &str) -> bool {
    !role_id.is_empty() && role_id.len() <= 256 && role_id.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// A stored client. The access token is the Hawk key; it is never shown after creation
/// or reset (nor by `Debug`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Client {
    /// Its id.
    pub client_id: String,
    /// Its Hawk key.
    pub access_token: String,
    /// What it is for.
    pub description: String,
    /// Its scopes, as given (not expanded).
    pub scopes: Vec<String>,
    /// When it stops working.
    pub expires: Timestamp,
    /// Whether it is disabled.
    pub disabled: bool,
    /// Whether it is deleted once expired.
    pub delete_on_expiration: bool,
    /// Created at.
    pub created: Timestamp,
    /// Last changed at.
    pub last_modified: Timestamp,
    /// When its access token was last set.
    pub last_rotated: Timestamp,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("expires", &self.expires)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

/// A stored role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Role {
    /// Its id; ending in `*` makes it parameterized.
    pub role_id: String,
    /// Its scopes, as given.
    pub scopes: Vec<String>,
    /// What it is for.
    pub description: String,
    /// Created at.
    pub created: Timestamp,
    /// Last changed at.
    pub last_modified: Timestamp,
}

/// createClient's and updateClient's body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientInput {
    /// What it is for.
    pub description: String,
    /// When it stops working.
    pub expires: String,
    /// Its scopes.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Whether it is deleted once expired.
    #[serde(default)]
    pub delete_on_expiration: Option<bool>,
}

/// A checked [`ClientInput`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientChange {
    /// What it is for.
    pub description: String,
    /// When it stops working.
    pub expires: Timestamp,
    /// Its scopes, when given.
    pub scopes: Option<Vec<String>>,
    /// Whether it is deleted once expired, when given.
    pub delete_on_expiration: Option<bool>,
}

fn check_description(description: &str) -> Result<(), Rejection> {
    if description.len() > MAX_DESCRIPTION {
        return Err(Rejection::invalid("description", format!("must be at most {MAX_DESCRIPTION} characters")));
    }
    Ok(())
}

fn check_scope_list(scopes: &[String]) -> Result<(), Rejection> {
    if scopes.len() > MAX_SCOPES {
        return Err(Rejection::invalid("scopes", format!("must have at most {MAX_SCOPES} items")));
    }
    check_scopes("scopes", scopes)
}

/// Checks a client id given in a URL.
///
/// # Errors
/// Invalid when it breaks the pattern or is reserved.
pub fn check_client_id(client_id: &str) -> Result<(), Rejection> {
    if !is_client_id(client_id) {
        return Err(Rejection::invalid("clientId", "must match ^[A-Za-z0-9!@/:.+|_-]+$ (at most 256 characters)"));
    }
    if client_id.starts_with(RESERVED_PREFIX) || client_id == super::ROOT_CLIENT_ID {
        return Err(Rejection::Input(format!("client {client_id} is kept by the server and cannot be changed")));
    }
    Ok(())
}

/// Checks a role id given in a URL.
///
/// # Errors
/// Invalid when it breaks the pattern.
pub fn check_role_id(role_id: &str) -> Result<(), Rejection> {
    if !is_role_id(role_id) {
        return Err(Rejection::invalid("roleId", "must match ^[\\x20-\\x7e]+$ (at most 256 characters)"));
    }
    Ok(())
}

impl ClientInput {
    /// The checked change.
    ///
    /// # Errors
    /// Invalid naming the field.
    pub fn validate(self) -> Result<ClientChange, Rejection> {
        check_description(&self.description)?;
        let expires = Timestamp::parse(&self.expires)
            .ok_or_else(|| Rejection::invalid("expires", "must be an RFC 3339 date-time"))?;
        if let Some(scopes) = &self.scopes {
            check_scope_list(scopes)?;
        }
        Ok(ClientChange {
            description: self.description,
            expires,
            scopes: self.scopes,
            delete_on_expiration: self.delete_on_expiration,
        })
    }
}

/// createRole's and updateRole's body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RoleInput {
    /// What it is for.
    pub description: String,
    /// Its scopes.
    pub scopes: Vec<String>,
}

impl RoleInput {
    /// The checked input.
    ///
    /// # Errors
    /// Invalid naming the field.
    pub fn validate(self) -> Result<RoleInput, Rejection> {
        check_description(&self.description)?;
        check_scope_list(&self.scopes)?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_and_role_ids_follow_taskcluster() {
        assert!(is_client_id("project/ci:worker|1"));
        assert!(!is_client_id("has space"));
        assert!(!is_client_id(""));
        assert!(is_role_id("repo:github.com/org/*"));
        assert!(!is_role_id("tab\t"));
        assert!(check_client_id("static/shoal/queue").is_err());
        assert!(check_client_id("root").is_err());
    }

    #[test]
    fn inputs_name_the_bad_field() {
        let input = ClientInput {
            description: "d".into(),
            expires: "tomorrow".into(),
            scopes: None,
            delete_on_expiration: None,
        };
        assert_eq!(input.validate().unwrap_err().to_string(), "expires: must be an RFC 3339 date-time");
        let role = RoleInput { description: "d".into(), scopes: vec!["ok".into(), "no\u{1}".into()] };
        assert!(role.validate().unwrap_err().to_string().starts_with("scopes[1]"));
    }
}
