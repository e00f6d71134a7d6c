//! The Secrets service (Taskcluster's Secrets API v1), under `/api/secrets/v1`.

use axum::routing::on;

use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::Scope;
use crate::routes::secrets;

/// The Secrets API v1, under `/api/secrets/v1`.
pub const SECRETS_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "set",
        Put,
        "/secret/{*name}",
        Scope("secrets:set:<name>"),
        Stable,
        secrets::set,
        "Sets a secret, replacing any of its name.",
        input = "secret"
    ),
    endpoint!(
        "remove",
        Delete,
        "/secret/{*name}",
        Scope("secrets:set:<name>"),
        Stable,
        secrets::remove,
        "Removes a secret."
    ),
    endpoint!("get", Get, "/secret/{*name}", Scope("secrets:get:<name>"), Stable, secrets::get, "Reads a secret."),
    endpoint!(
        "list",
        Get,
        "/secrets",
        Scope("secrets:list-secrets"),
        Stable,
        secrets::list,
        "Lists the secrets' names (never their values), paged.",
        query = ["continuationToken", "limit"]
    ),
];
