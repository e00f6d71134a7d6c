//! Who is calling, and whether they may: each request's credentials are checked before its
//! handler runs ([`authenticate`]); the handler then fills in its endpoint's scope template
//! with what the request names and asks [`Caller::authorize`].

pub(crate) mod hawk;
pub mod nonces;
pub mod template;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use shoal_engine::auth::{AuthFailure, KnownClient, ScopeExpr, ScopeSet};
use shoal_service::auth::AuthState;

use crate::endpoints::Endpoint;
use crate::error::ApiError;
pub use template::{Scopes, Vars};

/// What authenticating a request needs of the server's state.
#[derive(Clone)]
pub(crate) struct Gate {
    /// Clients, roles and keys.
    pub(crate) auth: shoal_service::Authority,
    /// Nonces seen lately.
    pub(crate) nonces: Arc<nonces::Nonces>,
    /// The queue, to ask whether a run whose credentials are used is still running.
    pub(crate) queue: shoal_service::Service,
}

/// The caller of one request: who, what they hold, and the endpoint they called.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client id the request was signed under; `None` for anonymous callers.
    pub client_id: Option<String>,
    /// What the request may do.
    pub scopes: Arc<ScopeSet>,
    endpoint: &'static Endpoint,
    /// Set once the handler asked for the endpoint's scopes.
    pub(crate) checked: Arc<AtomicBool>,
}

impl Caller {
    /// Checks the endpoint's scopes with `vars` filled in.
    ///
    /// # Errors
    /// 403 InsufficientScopes naming what is missing.
    pub fn authorize(&self, vars: &Vars) -> Result<(), ApiError> {
        if self.scopes.holds_everything() {
            // Nothing to fill in: `*` satisfies any expression.
            self.checked.store(true, Ordering::Relaxed);
            return Ok(());
        }
        let required = self.endpoint.scopes.render(vars).map_err(|err| {
            tracing::error!(endpoint = self.endpoint.name, error = %err, "scope template");
            ApiError::internal()
        })?;
        self.require(&required)
    }

    /// The same caller holding `scope` besides its own, for one check (what a request itself
    /// grants, as a graph grants its submitter the right to extend it).
    #[must_use]
    pub fn holding(&self, scope: String) -> Caller {
        let scopes = self.scopes.as_slice().iter().cloned().chain([scope]);
        Caller { scopes: Arc::new(ScopeSet::new(scopes)), ..self.clone() }
    }

    /// Checks an expression of the handler's own (beyond the endpoint's template).
    ///
    /// # Errors
    /// 403 InsufficientScopes naming what is missing.
    pub fn require(&self, required: &ScopeExpr) -> Result<(), ApiError> {
        self.checked.store(true, Ordering::Relaxed);
        match required.unsatisfied(&self.scopes) {
            None => Ok(()),
            Some(missing) => Err(ApiError::insufficient_scopes(self.client_id.as_deref(), required, &missing)),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(ApiError::internal)
    }
}

/// Where the client sent the request, as it signed it: the Host header's name and port,
/// the port told by a proxy in front (`X-Forwarded-Port`, or 443 for
/// `X-Forwarded-Proto: https`), else 80.
fn host_and_port(headers: &HeaderMap, uri: &axum::http::Uri) -> (String, u16) {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).or_else(|| uri.authority().map(|a| a.as_str()));
    let host = host.unwrap_or("");
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => (name, port.parse().ok()),
        _ => (host, None),
    };
    let forwarded_port = headers.get("x-forwarded-port").and_then(|v| v.to_str().ok()?.parse().ok());
    let https = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|v| v == "https");
    let port = forwarded_port.or(if https { Some(443) } else { None }).or(port).unwrap_or(80);
    (name.to_owned(), port)
}

/// The blob endpoint's upload, which takes the server's own signed `putUrl`s.
const PUT_BLOB: &str = "putBlob";

/// The Auth API's call that authenticates against a fake client described in its own body.
const TEST_AUTHENTICATE: &str = "testAuthenticate";

/// testAuthenticateGet's: the same client, with Taskcluster's fixed scopes for it.
const TEST_AUTHENTICATE_GET: &str = "testAuthenticateGet";

/// What testAuthenticate authenticates against: only the client `tester` (access token
/// `no-secret`) holding the body's `clientScopes` (testAuthenticateGet: `test:*` and
/// `auth:create-client:test:*`).
fn tester(body: Option<&[u8]>) -> AuthState {
    let scopes = match body {
        Some(body) => serde_json::from_slice::<crate::routes::auth::TestAuthenticate>(body)
            .map(|body| body.client_scopes)
            .unwrap_or_default(),
        None => vec!["test:*".to_owned(), "auth:create-client:test:*".to_owned()],
    };
    let client = KnownClient {
        access_token: "no-secret".into(),
        scopes: Arc::new(ScopeSet::new(scopes)),
        expires: i64::MAX,
        disabled: false,
    };
    AuthState { clients: [("tester".to_owned(), client)].into_iter().collect(), ..AuthState::default() }
}

fn has_bewit(uri: &axum::http::Uri) -> bool {
    uri.query().is_some_and(|query| query.split('&').any(|pair| pair.starts_with("bewit=")))
}

/// Whether the task's run `run_id` is running: a run's credentials act with the task's
/// scopes (through the worker's proxy) only until the run ends, not until they expire.
async fn running(queue: &shoal_service::Service, task_id: shoal_engine::TaskId, run_id: u32) -> Result<bool, ApiError> {
    let record = queue.store().read(move |reads| reads.task(task_id)).await?;
    let run = record.as_ref().and_then(|record| record.status.runs.get(run_id as usize));
    Ok(run.is_some_and(|run| run.state == shoal_engine::status::RunState::Running))
}

/// Authenticates `req` for `endpoint`: inserts its [`Caller`], with the body read back into
/// the request when its payload hash had to be checked.
///
/// # Errors
/// 401 AuthenticationFailed saying why; 413 for a signed body over `max_body` bytes.
pub(crate) async fn authenticate(
    state: &Gate,
    endpoint: &'static Endpoint,
    req: Request,
    max_body: usize,
) -> Result<Request, ApiError> {
    let now = SystemTime::now();
    let authorization = req.headers().get(header::AUTHORIZATION).map(|value| {
        value
            .to_str()
            .map_err(|_| AuthFailure::Malformed("Authorization header: must be ASCII".into()))
            .and_then(hawk::parse_header)
    });
    let (parts, body) = req.into_parts();
    let testing = endpoint.name == TEST_AUTHENTICATE;
    let signs_body = matches!(&authorization, Some(Ok(parsed)) if parsed.hash.is_some());
    // The body is read here only when the signature covers it (or it says who `tester` is).
    let (bytes, body) = if signs_body || testing {
        let bytes = axum::body::to_bytes(body, max_body)
            .await
            .map_err(|_| ApiError::too_large(format!("body: must be at most {max_body} bytes")))?;
        (Some(bytes.clone()), Body::from(bytes))
    } else {
        (None, body)
    };
    let auth = if testing {
        Arc::new(tester(Some(bytes.as_deref().unwrap_or_default())))
    } else if endpoint.name == TEST_AUTHENTICATE_GET {
        Arc::new(tester(None))
    } else {
        state.auth.current()
    };
    // Inside a nested router the URI lacks the API's prefix; the signature covers all of it.
    let uri = parts.extensions.get::<axum::extract::OriginalUri>().map_or(&parts.uri, |original| &original.0);
    let (host, port) = host_and_port(&parts.headers, uri);
    let resource = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let target = hawk::Target { method: parts.method.as_str(), host: &host, port, resource };
    let principal = match authorization {
        Some(Err(failure)) => Err(failure),
        Some(Ok(parsed)) => {
            let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            let signed_body = bytes.as_ref().filter(|_| signs_body).map(|bytes| (content_type, bytes.as_ref()));
            hawk::check_header(&parsed, target, signed_body, &auth, &state.nonces, now).map(Some)
        }
        None if has_bewit(uri) => hawk::check_bewit(target, endpoint.name == PUT_BLOB, &auth, now).map(Some),
        None => Ok(None),
    };
    let caller = match principal {
        Ok(Some(found)) => {
            if let Some((task_id, run_id)) = shoal_engine::auth::run_of_client_id(&found.client_id)
                && !shoal_engine::auth::RUN_OWN_CALLS.contains(&endpoint.name)
                && !running(&state.queue, task_id, run_id).await?
            {
                return Err(ApiError::unauthorized(&AuthFailure::RunEnded(found.client_id)));
            }
            Caller { client_id: Some(found.client_id), scopes: found.scopes, endpoint, checked: Arc::default() }
        }
        Ok(None) => Caller { client_id: None, scopes: Arc::clone(&auth.anonymous), endpoint, checked: Arc::default() },
        Err(failure) => return Err(ApiError::unauthorized(&failure)),
    };
    let mut req = Request::from_parts(parts, body);
    req.extensions_mut().insert(caller);
    Ok(req)
}
