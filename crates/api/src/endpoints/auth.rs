//! The Auth API v1 (clients, roles, scopes), under `/api/auth/v1`.

use axum::routing::on;

use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::{AllOf, For, Public, Scope};
use crate::routes::auth;

/// The Auth API v1 (clients, roles, scopes), under `/api/auth/v1`.
pub const AUTH_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "listClients",
        Get,
        "/clients/",
        Public,
        Stable,
        auth::list_clients,
        "Clients, by prefix, paged.",
        query = ["prefix", "continuationToken", "limit"]
    ),
    endpoint!("client", Get, "/clients/{client_id}", Public, Stable, auth::get_client, "One client."),
    endpoint!(
        "createClient",
        Put,
        "/clients/{client_id}",
        AllOf(&[Scope("auth:create-client:<clientId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::create_client,
        "Creates a client; answers its access token once.",
        input = "create-client-request"
    ),
    endpoint!(
        "resetAccessToken",
        Post,
        "/clients/{client_id}/reset",
        Scope("auth:reset-access-token:<clientId>"),
        Stable,
        auth::reset_access_token,
        "Gives a client a new access token, answered once."
    ),
    endpoint!(
        "updateClient",
        Post,
        "/clients/{client_id}",
        AllOf(&[
            Scope("auth:update-client:<clientId>"),
            For { var: "scope", list: "scopesAdded", each: &Scope("<scope>") },
        ]),
        Stable,
        auth::update_client,
        "Changes a client's description, expiry and scopes.",
        input = "create-client-request"
    ),
    endpoint!(
        "enableClient",
        Post,
        "/clients/{client_id}/enable",
        AllOf(&[Scope("auth:enable-client:<clientId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::enable_client,
        "Enables a client."
    ),
    endpoint!(
        "disableClient",
        Post,
        "/clients/{client_id}/disable",
        Scope("auth:disable-client:<clientId>"),
        Stable,
        auth::disable_client,
        "Disables a client: its credentials are refused."
    ),
    endpoint!(
        "deleteClient",
        Delete,
        "/clients/{client_id}",
        Scope("auth:delete-client:<clientId>"),
        Stable,
        auth::delete_client,
        "Deletes a client."
    ),
    endpoint!("listRoles", Get, "/roles/", Public, Stable, auth::list_roles, "Every role."),
    endpoint!(
        "listRoleIds",
        Get,
        "/roleids/",
        Public,
        Stable,
        auth::list_role_ids,
        "Every role's id, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!("role", Get, "/roles/{role_id}", Public, Stable, auth::get_role, "One role, with its expanded scopes."),
    endpoint!(
        "createRole",
        Put,
        "/roles/{role_id}",
        AllOf(&[Scope("auth:create-role:<roleId>"), For { var: "scope", list: "scopes", each: &Scope("<scope>") }]),
        Stable,
        auth::create_role,
        "Creates a role.",
        input = "create-role-request"
    ),
    endpoint!(
        "updateRole",
        Post,
        "/roles/{role_id}",
        AllOf(&[
            Scope("auth:update-role:<roleId>"),
            For { var: "scope", list: "scopesAdded", each: &Scope("<scope>") }
        ]),
        Stable,
        auth::update_role,
        "Changes a role.",
        input = "create-role-request"
    ),
    endpoint!(
        "deleteRole",
        Delete,
        "/roles/{role_id}",
        Scope("auth:delete-role:<roleId>"),
        Stable,
        auth::delete_role,
        "Deletes a role."
    ),
    endpoint!(
        "expandScopes",
        Post,
        "/scopes/expand",
        Public,
        Stable,
        auth::expand_scopes,
        "Expands scopes through the roles they assume.",
        input = "scopeset"
    ),
    endpoint!(
        "currentScopes",
        Get,
        "/scopes/current",
        Public,
        Stable,
        auth::current_scopes,
        "The caller's scopes, expanded."
    ),
    endpoint!(
        "testAuthenticate",
        Post,
        "/test-authenticate",
        Public,
        Stable,
        auth::test_authenticate,
        "Checks a signature made with the test client `tester`.",
        input = "test-authenticate-request"
    ),
    endpoint!(
        "testAuthenticateGet",
        Get,
        "/test-authenticate-get/",
        Scope("test:authenticate-get"),
        Stable,
        auth::test_authenticate_get,
        "Checks a signed GET made with the test client `tester`."
    ),
    endpoint!(
        "listAuditHistory",
        Get,
        "/clients/{client_id}/audit",
        Scope("auth:client-audit-history:<clientId>"),
        Stable,
        auth::list_audit_history,
        "A client's history (Shoal keeps none)."
    ),
    endpoint!(
        "getEntityHistory",
        Get,
        "/audit/{entity_type}/{entity_id}",
        Scope("auth:audit-history:<entityType>"),
        Stable,
        auth::get_entity_history,
        "An entity's history (Shoal keeps none)."
    ),
];
