//! The GitHub service (Taskcluster's GitHub API v1, its webhook and builds), under
//! `/api/github/v1`.

use axum::routing::on;

use super::{Endpoint, Method, Stability};
use crate::auth::Scopes::{Public, Scope};
use crate::routes::github;

/// The GitHub API v1's webhook and builds, under `/api/github/v1`.
pub const GITHUB_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "githubWebHookConsumer",
        Post,
        "/github",
        // Checked by its signature (X-Hub-Signature-256) under the server's
        // github-webhook-secret, not by scopes: the forge holds no Taskcluster credentials.
        Public,
        Stable,
        github::webhook,
        "Takes a push or pull-request webhook delivery in GitHub's format and creates the tasks its \
         commit's .taskcluster.yml makes, with the scopes of the repository's role."
    ),
    endpoint!(
        "builds",
        Get,
        "/builds",
        Scope("github:list-builds"),
        Stable,
        github::builds,
        "Lists the builds (each change's tasks, or why it has none), filtered by organization, repository, \
         sha or pullRequest, paged.",
        query = ["continuationToken", "limit", "organization", "repository", "sha", "pullRequest"]
    ),
];
