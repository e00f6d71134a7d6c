//! The Index service (Taskcluster's Index API v1), under `/api/index/v1`.

use axum::routing::on;

use super::{Endpoint, GET_ARTIFACT, Method, Stability};
use crate::auth::Scopes::{Public, Scope};
use crate::routes::index;

/// The Index API v1, under `/api/index/v1`. Its reads need no scopes, as the queue's (docs/API.md).
pub const INDEX_ENDPOINTS: &[Endpoint] = &[
    endpoint!(
        "findTask",
        Get,
        "/task/{namespace}",
        Public,
        Stable,
        index::find_task,
        "Finds the task indexed at a namespace."
    ),
    endpoint!(
        "findTasksAtIndex",
        Post,
        "/tasks/indexes",
        Public,
        Experimental,
        index::find_tasks_at_index,
        "Finds the tasks indexed at each of several namespaces, paged.",
        input = "list-tasks-at-index",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listNamespaces",
        Get,
        "/namespaces/",
        Public,
        Stable,
        index::list_namespaces,
        "Lists the namespaces at the top, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listNamespaces",
        Get,
        "/namespaces/{namespace}",
        Public,
        Stable,
        index::list_namespaces,
        "Lists the namespaces directly under a namespace, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listTasks",
        Get,
        "/tasks/",
        Public,
        Stable,
        index::list_tasks,
        "Lists the tasks indexed at the top, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "listTasks",
        Get,
        "/tasks/{namespace}",
        Public,
        Stable,
        index::list_tasks,
        "Lists the tasks indexed directly under a namespace, paged.",
        query = ["continuationToken", "limit"]
    ),
    endpoint!(
        "insertTask",
        Put,
        "/task/{namespace}",
        Scope("index:insert-task:<namespace>"),
        Stable,
        index::insert_task,
        "Indexes a task at a namespace, unless a task of higher rank is there.",
        input = "insert-task-request"
    ),
    endpoint!(
        "deleteTask",
        Delete,
        "/task/{namespace}",
        Scope("index:delete-task:<namespace>"),
        Stable,
        index::delete_task,
        "Removes the task indexed at a namespace."
    ),
    endpoint!(
        "findArtifactFromTask",
        Get,
        "/task/{namespace}/artifacts/{*name}",
        GET_ARTIFACT,
        Stable,
        index::find_artifact,
        "Redirects to an artifact of the latest run of the task indexed at a namespace."
    ),
];
