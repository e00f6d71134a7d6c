//! The Hooks service (Taskcluster's Hooks API v1), under `/api/hooks/v1`.

use axum::routing::on;

use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::{AllOf, Public, Scope};
use crate::routes::hooks;

/// The Hooks API v1, under `/api/hooks/v1`. A hookId holding `/` is given percent-encoded.
pub const HOOKS_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "listHookGroups",
        Get,
        "/hooks",
        Scope("hooks:list-hooks:"),
        Stable,
        hooks::list_hook_groups,
        "Lists the groups that have hooks."
    ),
    endpoint!(
        "listHooks",
        Get,
        "/hooks/{hook_group_id}",
        Scope("hooks:list-hooks:<hookGroupId>"),
        Stable,
        hooks::list_hooks,
        "Lists a group's hooks."
    ),
    endpoint!(
        "hook",
        Get,
        "/hooks/{hook_group_id}/{hook_id}",
        Scope("hooks:get:<hookGroupId>:<hookId>"),
        Stable,
        hooks::hook,
        "A hook's definition."
    ),
    endpoint!(
        "getHookStatus",
        Get,
        "/hooks/{hook_group_id}/{hook_id}/status",
        Scope("hooks:status:<hookGroupId>/<hookId>"),
        Deprecated,
        hooks::status,
        "A hook's last fire and next scheduled fire (listLastFires says more)."
    ),
    endpoint!(
        "createHook",
        Put,
        "/hooks/{hook_group_id}/{hook_id}",
        AllOf(&[Scope("hooks:modify-hook:<hookGroupId>/<hookId>"), Scope("assume:hook-id:<hookGroupId>/<hookId>")]),
        Stable,
        hooks::create_hook,
        "Creates a hook.",
        input = "create-hook-request"
    ),
    endpoint!(
        "updateHook",
        Post,
        "/hooks/{hook_group_id}/{hook_id}",
        AllOf(&[Scope("hooks:modify-hook:<hookGroupId>/<hookId>"), Scope("assume:hook-id:<hookGroupId>/<hookId>")]),
        Stable,
        hooks::update_hook,
        "Replaces a hook's definition.",
        input = "create-hook-request"
    ),
    endpoint!(
        "removeHook",
        Delete,
        "/hooks/{hook_group_id}/{hook_id}",
        Scope("hooks:modify-hook:<hookGroupId>/<hookId>"),
        Stable,
        hooks::remove_hook,
        "Removes a hook and its fires."
    ),
    endpoint!(
        "triggerHook",
        Post,
        "/hooks/{hook_group_id}/{hook_id}/trigger",
        Scope("hooks:trigger-hook:<hookGroupId>/<hookId>"),
        Stable,
        hooks::trigger_hook,
        "Fires a hook with a payload its triggerSchema takes.",
        input = "trigger-hook"
    ),
    endpoint!(
        "getTriggerToken",
        Get,
        "/hooks/{hook_group_id}/{hook_id}/token",
        Scope("hooks:get-trigger-token:<hookGroupId>/<hookId>"),
        Stable,
        hooks::get_trigger_token,
        "A hook's trigger token."
    ),
    endpoint!(
        "resetTriggerToken",
        Post,
        "/hooks/{hook_group_id}/{hook_id}/token",
        Scope("hooks:reset-trigger-token:<hookGroupId>/<hookId>"),
        Stable,
        hooks::reset_trigger_token,
        "Gives a hook a new trigger token; the old one stops working."
    ),
    endpoint!(
        "triggerHookWithToken",
        Post,
        "/hooks/{hook_group_id}/{hook_id}/trigger/{token}",
        Public,
        Stable,
        hooks::trigger_hook_with_token,
        "Fires a hook with its trigger token instead of credentials.",
        input = "trigger-hook"
    ),
    endpoint!(
        "listLastFires",
        Get,
        "/hooks/{hook_group_id}/{hook_id}/last-fires",
        Scope("hooks:list-last-fires:<hookGroupId>/<hookId>"),
        Stable,
        hooks::list_last_fires,
        "A hook's fires, newest first, paged.",
        query = ["continuationToken", "limit"]
    ),
];
