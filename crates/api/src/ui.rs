//! The web UI: a few static files compiled into the binary and served at Taskcluster's page
//! URLs (`/tasks/<taskId>`, `/tasks/groups/<taskGroupId>`, `/provisioners/...`). Every page
//! is the same shell; the script draws the page its URL names from the public API, signing
//! requests with the credentials a person signs in with. Nothing here reads the store.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Each asset: its path under `/ui/`, content type, and bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("app.css", "text/css; charset=utf-8", include_bytes!("../ui/app.css")),
    ("js/app.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/app.js")),
    ("js/api.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/api.js")),
    ("js/hawk.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/hawk.js")),
    ("js/view.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/view.js")),
    ("js/log.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/log.js")),
    ("js/pages/overview.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/overview.js")),
    ("js/pages/group.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/group.js")),
    ("js/pages/create.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/create.js")),
    ("js/pages/graph.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/graph.js")),
    ("js/pages/task.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/task.js")),
    ("js/pages/tasks.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/tasks.js")),
    ("js/pages/workers.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/workers.js")),
    ("js/pages/index.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/index.js")),
    ("js/pages/hooks.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/hooks.js")),
    ("js/pages/secrets.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/secrets.js")),
    ("js/pages/actions.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/actions.js")),
    ("js/pages/builds.js", "text/javascript; charset=utf-8", include_bytes!("../ui/js/pages/builds.js")),
    ("favicon.svg", "image/svg+xml", include_bytes!("../ui/favicon.svg")),
];

/// The shell every page URL answers with.
const SHELL: &[u8] = include_bytes!("../ui/index.html");

/// Scripts and styles only from this server, no inline code, no framing (the pages carry
/// buttons that act with the viewer's credentials).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The UI's routes: the shell at each page URL, and the assets under `/ui/`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let shell = get(|| async { page(SHELL, "text/html; charset=utf-8") });
    let mut router = Router::new().route("/ui/{*path}", get(asset));
    for path in [
        "/",
        "/tasks",
        "/tasks/{task_id}",
        "/tasks/{task_id}/runs/{run_id}",
        "/tasks/groups/{group}",
        "/task-graphs/{graph}",
        "/provisioners",
        "/provisioners/{*rest}",
        "/workers",
        "/workers/{*rest}",
        "/tasks/index",
        "/tasks/index/{namespace}",
        "/hooks",
        "/hooks/{*rest}",
        "/secrets",
        "/builds",
        // Taskcluster's log URL, as people paste it.
        "/tasks/{task_id}/runs/{run_id}/logs/{*name}",
    ] {
        router = router.route(path, shell.clone());
        // The same with a trailing slash, as Taskcluster's UI writes some of them.
        if !path.ends_with('/') && !path.contains('*') {
            router = router.route(&format!("{path}/"), shell.clone());
        }
    }
    router
}

/// What answers a path nothing else does: a browser (asking for HTML, outside the APIs) gets
/// the shell, whose script shows the page a pasted Taskcluster URL names (a trailing slash, a
/// log URL) or its own not-found page; an API client gets Taskcluster's JSON 404.
pub(crate) async fn fallback(
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    let api = ["/api/", "/blobs/", "/logs/", "/metrics", "/ui/"].iter().any(|prefix| uri.path().starts_with(prefix));
    if method == axum::http::Method::GET && wants_html && !api {
        let mut res = page(SHELL, "text/html; charset=utf-8");
        *res.status_mut() = StatusCode::NOT_FOUND;
        // The script draws the page; the status is for crawlers and scripts.
        return res;
    }
    crate::error::ApiError::not_found("no such endpoint").into_response()
}

async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == path) {
        Some((_, content_type, bytes)) => page(bytes, content_type),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

fn page(bytes: &'static [u8], content_type: &'static str) -> Response {
    let mut res = (StatusCode::OK, bytes).into_response();
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    // Small, and a new binary brings new ones: revalidate rather than serve a stale script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_scripts_import_is_served() {
        // A page fails silently in the browser when an import is missing; catch it here.
        for (name, _, bytes) in ASSETS.iter().filter(|(name, _, _)| name.ends_with(".js")) {
            let text = std::str::from_utf8(bytes).unwrap();
            for line in text.lines().filter(|line| line.starts_with("import ")) {
                let target = line.rsplit_once(" from '").map(|(_, rest)| rest.trim_end_matches("';")).unwrap();
                let base = name.rsplit_once('/').map_or("", |(dir, _)| dir);
                let mut parts: Vec<&str> = base.split('/').filter(|part| !part.is_empty()).collect();
                for part in target.split('/') {
                    match part {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        part => parts.push(part),
                    }
                }
                let resolved = parts.join("/");
                assert!(ASSETS.iter().any(|(asset, _, _)| *asset == resolved), "{name} imports {target}: not served");
            }
        }
    }
}
