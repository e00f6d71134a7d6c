//! Taskcluster's reference documents for the services Shoal serves, built from the endpoint
//! tables: `<rootUrl>/references/manifest.json`, each service's `api.json` and
//! `exchanges.json`, and the JSON schemas they name under `<rootUrl>/schemas/`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use shoal_engine::message::Exchange;

use crate::AppState;
use crate::auth::Scopes;
use crate::endpoints::{Endpoint, MONITORING, SERVICES, Service};

/// `(path, text)` for each schema file under `crates/api/schemas/`, named once.
macro_rules! schemas {
    ($($path:literal),+ $(,)?) => {
        &[$(($path, include_str!(concat!("../schemas/", $path)))),+]
    };
}

/// The JSON schemas the references name, by path under `/schemas/`.
const SCHEMAS: &[(&str, &str)] = schemas![
    "auth/v1/create-client-request.json",
    "auth/v1/create-role-request.json",
    "auth/v1/scopeset.json",
    "auth/v1/test-authenticate-request.json",
    "hooks/v1/create-hook-request.json",
    "hooks/v1/trigger-hook.json",
    "index/v1/insert-task-request.json",
    "index/v1/list-tasks-at-index.json",
    "queue/v1/artifact-created-message.json",
    "queue/v1/change-task-priority-request.json",
    "queue/v1/claim-work-request.json",
    "queue/v1/create-task-request.json",
    "queue/v1/finish-artifact-request.json",
    "queue/v1/maintain-worker-request.json",
    "queue/v1/post-artifact-request.json",
    "queue/v1/post-worker-event-request.json",
    "queue/v1/quarantine-worker-request.json",
    "queue/v1/task-claim-request.json",
    "queue/v1/task-completed-message.json",
    "queue/v1/task-defined-message.json",
    "queue/v1/task-exception-message.json",
    "queue/v1/task-exception-request.json",
    "queue/v1/task-failed-message.json",
    "queue/v1/task-group-changed-message.json",
    "queue/v1/task-group-priority-changed-message.json",
    "queue/v1/task-pending-message.json",
    "queue/v1/task-priority-changed-message.json",
    "queue/v1/task-queue-counts-request.json",
    "queue/v1/task-running-message.json",
    "queue/v1/task-status.json",
    "queue/v1/tasks-request.json",
    "queue/v1/update-worker-request.json",
    "queue/v1/worker-heartbeat-request.json",
    "scheduler/v1/create-task-graph-request.json",
    "scheduler/v1/extend-task-graph-request.json",
    "scheduler/v1/task-graph-message.json",
    "secrets/v1/secret.json",
];

/// The name Taskcluster's references give a route parameter.
fn arg_name(param: &str) -> &str {
    match param {
        "task_id" => "taskId",
        "run_id" => "runId",
        "group" => "taskGroupId",
        "queue" => "taskQueueId",
        "provisioner" => "provisionerId",
        "worker_type" => "workerType",
        "worker_group" => "workerGroup",
        "worker_id" => "workerId",
        "graph" => "taskGraphId",
        "client_id" => "clientId",
        "role_id" => "roleId",
        "entity_type" => "entityType",
        "entity_id" => "entityId",
        other => other,
    }
}

/// An axum route (`/task/{task_id}/artifacts/{*name}`) in Taskcluster's form
/// (`/task/<taskId>/artifacts/<name>`), with its arguments in order.
pub(crate) fn route_and_args(route: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(route.len());
    let mut args = Vec::new();
    let mut rest = route;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |close| open + close);
        let name = arg_name(rest[open + 1..close].trim_start_matches('*'));
        out.push_str(&format!("<{name}>"));
        args.push(name.to_owned());
        rest = rest.get(close + 1..).unwrap_or_default();
    }
    out.push_str(rest);
    (out, args)
}

/// A scope template in Taskcluster's scope-expression-template form; `None` for public.
fn scope_template(scopes: &Scopes) -> Option<Value> {
    Some(match scopes {
        Scopes::Public => return None,
        Scopes::Scope(scope) => json!(scope),
        Scopes::AllOf(all) => json!({ "AllOf": all.iter().filter_map(scope_template).collect::<Vec<_>>() }),
        Scopes::AnyOf(any) => json!({ "AnyOf": any.iter().filter_map(scope_template).collect::<Vec<_>>() }),
        Scopes::For { var, list, each: Scopes::Scope(each) } => json!({ "for": var, "in": list, "each": each }),
        // Taskcluster's `for` repeats one scope only: a nested expression is written once
        // for the list's elements (each `<field>` of it stands for that element's field).
        Scopes::For { each, .. } => return scope_template(each),
        Scopes::If { cond, then } => json!({ "if": cond, "then": scope_template(then)? }),
    })
}

/// An endpoint's entry in Taskcluster's api-reference format.
fn entry(endpoint: &Endpoint) -> Value {
    let (route, args) = route_and_args(endpoint.route);
    let title = [". ", ": ", "; ", " ("]
        .iter()
        .filter_map(|stop| endpoint.doc.find(stop))
        .min()
        .map_or(endpoint.doc.trim_end_matches('.'), |end| &endpoint.doc[..end]);
    let category = match endpoint.route.split('/').nth(1).unwrap_or_default() {
        "task" | "tasks" => "Tasks",
        "task-group" | "task-groups" => "Task Groups",
        "claim-work" => "Worker Interface",
        "task-queues" | "pending" => "Task Queues",
        "provisioners" => "Workers",
        "clients" => "Clients",
        "roles" | "roleids" => "Roles",
        "scopes" | "test-authenticate" | "test-authenticate-get" => "Scopes",
        "task-graph" | "task-graphs" => "Task Graphs",
        _ => "Monitoring",
    };
    let mut entry = json!({
        "type": "function",
        "method": endpoint.method.as_str().to_ascii_lowercase(),
        "route": route,
        "args": args,
        "query": endpoint.query,
        "name": endpoint.name,
        "stability": endpoint.stability,
        "title": title,
        "description": endpoint.doc,
        "category": category,
    });
    if let Some(scopes) = scope_template(&endpoint.scopes) {
        // A `for` is not an expression of its own at the top: it stands in an AllOf.
        entry["scopes"] = if scopes.get("for").is_some() { json!({ "AllOf": [scopes] }) } else { scopes };
    }
    if let Some(input) = endpoint.input {
        entry["input"] = json!(format!("v1/{input}.json#"));
    }
    entry
}

/// A service's `api.json`.
pub(crate) fn api_reference(service: &Service) -> Value {
    json!({
        "$schema": "/schemas/common/api-reference-v0.json#",
        "apiVersion": "v1",
        "serviceName": service.name,
        "title": service.title,
        "description": service.description,
        "entries": MONITORING.iter().chain(service.endpoints).map(entry).collect::<Vec<_>>(),
    })
}

/// What an exchange's messages are about: a task's run, a task group, a task graph.
enum Subject {
    Run,
    Group,
    Graph,
}

/// An exchange's title, message schema and subject.
fn exchange_facts(exchange: Exchange) -> (&'static str, &'static str, Subject) {
    match exchange {
        Exchange::TaskDefined => ("A task was defined", "task-defined-message", Subject::Run),
        Exchange::TaskPending => ("A run became pending", "task-pending-message", Subject::Run),
        Exchange::TaskRunning => ("A run was claimed", "task-running-message", Subject::Run),
        Exchange::ArtifactCreated => ("An artifact was created", "artifact-created-message", Subject::Run),
        Exchange::TaskCompleted => ("A run completed", "task-completed-message", Subject::Run),
        Exchange::TaskFailed => ("A run failed", "task-failed-message", Subject::Run),
        Exchange::TaskException => ("A run ended with an exception", "task-exception-message", Subject::Run),
        Exchange::TaskGroupResolved => {
            ("A task group has no unresolved task left", "task-group-changed-message", Subject::Group)
        }
        Exchange::TaskGroupSealed => ("A task group was sealed", "task-group-changed-message", Subject::Group),
        Exchange::TaskPriorityChanged => ("A task's priority changed", "task-priority-changed-message", Subject::Run),
        Exchange::TaskGroupPriorityChanged => {
            ("A task group's priority changed", "task-group-priority-changed-message", Subject::Group)
        }
        Exchange::TaskGraphRunning => ("A task graph is running", "task-graph-message", Subject::Graph),
        Exchange::TaskGraphBlocked => {
            ("A task graph's task failed with no reruns left", "task-graph-message", Subject::Graph)
        }
        Exchange::TaskGraphFinished => ("Every task of a task graph completed", "task-graph-message", Subject::Graph),
    }
}

/// One routing-key word: name, summary, several words, always present.
fn key(name: &str, summary: &str, multiple_words: bool, required: bool) -> Value {
    json!({ "name": name, "summary": summary, "multipleWords": multiple_words, "required": required })
}

fn routing_key(subject: &Subject) -> Vec<Value> {
    let mut words = vec![json!({ "name": "routingKeyKind", "summary": "`primary` (`route` for a task's routes)",
        "constant": "primary", "multipleWords": false, "required": true })];
    let run_words = [
        key("taskId", "The task", false, true),
        key("runId", "The run, or `_`", false, false),
        key("workerGroup", "The run's worker group, or `_`", false, false),
        key("workerId", "The run's worker, or `_`", false, false),
        key("provisionerId", "First half of the task queue id", false, true),
        key("workerType", "Second half of the task queue id", false, true),
        key("schedulerId", "The task group's scheduler", false, true),
        key("taskGroupId", "The task group", false, true),
    ];
    match subject {
        Subject::Run => words.extend(run_words),
        Subject::Group => {
            words.push(key("taskGroupId", "The task group", false, true));
            words.push(key("schedulerId", "The task group's scheduler", false, true));
        }
        Subject::Graph => {
            for word in ["taskId", "runId", "workerGroup", "workerId", "provisionerId", "workerType"] {
                words.push(key(word, "Always `_` (where the queue's keys name a run)", false, false));
            }
            words.push(key("schedulerId", "The graph's scheduler", false, true));
            words.push(key("taskGraphId", "The graph (its tasks' task group)", false, true));
        }
    }
    let last = match subject {
        Subject::Graph => key("routing", "The graph's routing", true, false),
        _ => key("reserved", "Space reserved for future routing-key entries", true, false),
    };
    words.push(last);
    words
}

/// A service's `exchanges.json`, if it publishes.
pub(crate) fn exchanges_reference(service: &Service) -> Option<Value> {
    let prefix = service.exchange_prefix?;
    let entries: Vec<Value> = Exchange::ALL
        .into_iter()
        .filter(|exchange| exchange.name().starts_with(prefix))
        .map(|exchange| {
            let (title, schema, subject) = exchange_facts(exchange);
            json!({
                "type": "topic-exchange",
                "exchange": exchange.short_name(),
                "name": exchange.short_name(),
                "title": title,
                "description": format!("{title}. Messages also go to `route.<route>` for each of the task's routes."),
                "routingKey": routing_key(&subject),
                "schema": format!("v1/{schema}.json#"),
            })
        })
        .collect();
    Some(json!({
        "$schema": "/schemas/common/exchanges-reference-v0.json#",
        "apiVersion": "v1",
        "serviceName": service.name,
        "title": format!("{} exchanges", service.title),
        "description": "Every transition is published as a message; Shoal serves them at `/api/events/v1/connect/` \
                        (and to AMQP when configured).",
        "exchangePrefix": prefix,
        "entries": entries,
    }))
}

/// `/references/manifest.json`: every reference document, by absolute URL.
pub(crate) async fn manifest(State(state): State<AppState>) -> Json<Value> {
    let root = &state.root_url;
    let mut references = Vec::new();
    for service in SERVICES {
        references.push(format!("{root}/references/{}/v1/api.json", service.name));
        if service.exchange_prefix.is_some() {
            references.push(format!("{root}/references/{}/v1/exchanges.json", service.name));
        }
    }
    Json(json!({ "references": references }))
}

/// `/references/<service>/v1/<api|exchanges>.json`.
pub(crate) async fn document(Path((service, file)): Path<(String, String)>) -> Response {
    let found = SERVICES.iter().find(|known| known.name == service).and_then(|service| match file.as_str() {
        "api.json" => Some(api_reference(service)),
        "exchanges.json" => exchanges_reference(service),
        _ => None,
    });
    match found {
        Some(document) => Json(document).into_response(),
        None => not_found(&format!("no reference /references/{service}/v1/{file}")),
    }
}

/// `/schemas/<service>/v1/<name>.json`.
pub(crate) async fn schema(Path((service, file)): Path<(String, String)>) -> Response {
    let path = format!("{service}/v1/{file}");
    match SCHEMAS.iter().find(|(known, _)| *known == path) {
        Some((_, text)) => ([(header::CONTENT_TYPE, "application/json")], *text).into_response(),
        None => not_found(&format!("no schema /schemas/{path}")),
    }
}

fn not_found(message: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "code": "ResourceNotFound", "message": message }))).into_response()
}

/// Every schema path a reference names, for the tests.
#[cfg(test)]
fn named_schemas() -> Vec<String> {
    let mut named = Vec::new();
    for service in SERVICES {
        named.extend(
            service.endpoints.iter().filter_map(|e| e.input).map(|input| format!("{}/v1/{input}.json", service.name)),
        );
        for entry in exchanges_reference(service)
            .map(|doc| doc["entries"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
        {
            let schema = entry["schema"].as_str().unwrap_or_default().trim_end_matches('#');
            named.push(format!("{}/{schema}", service.name));
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_read_as_taskclusters() {
        let (route, args) = route_and_args("/task/{task_id}/runs/{run_id}/artifacts/{*name}");
        assert_eq!(route, "/task/<taskId>/runs/<runId>/artifacts/<name>");
        assert_eq!(args, ["taskId", "runId", "name"]);
        assert_eq!(route_and_args("/task-graph/{graph}/extend").0, "/task-graph/<taskGraphId>/extend");
    }

    #[test]
    fn every_schema_a_reference_names_is_served_and_parses() {
        for path in named_schemas() {
            let (_, text) =
                SCHEMAS.iter().find(|(known, _)| *known == path).unwrap_or_else(|| panic!("{path} not served"));
            let schema: Value = serde_json::from_str(text).unwrap_or_else(|err| panic!("{path}: {err}"));
            assert_eq!(schema["$id"], format!("/schemas/{path}#"), "{path}");
        }
        // And nothing is served that no reference names, save the status the messages share.
        for (path, _) in SCHEMAS {
            assert!(
                named_schemas().iter().any(|named| named == path) || *path == "queue/v1/task-status.json",
                "{path}"
            );
        }
    }

    #[test]
    fn every_endpoint_says_what_it_does() {
        for service in SERVICES {
            for endpoint in MONITORING.iter().chain(service.endpoints) {
                assert!(endpoint.doc.ends_with('.') && endpoint.doc.len() > 10, "{}: {}", endpoint.name, endpoint.doc);
            }
        }
    }
}
