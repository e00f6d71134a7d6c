//! Authentication and scopes through the HTTP API: each refusal answers 401 or 403 as
//! Taskcluster's do and writes nothing; clients and roles made with the Auth API grant
//! exactly what they say.

use std::time::{Duration, SystemTime};

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shoal_client::Credentials;

use crate::{TestApp, from_now, root_credentials, slugid, task_def};

fn creds(client_id: &str, access_token: &str) -> Credentials {
    Credentials { client_id: client_id.into(), access_token: access_token.into(), certificate: None }
}

impl TestApp {
    fn auth_url(&self, path: &str) -> String {
        format!("{}/api/auth/v1{path}", self.root)
    }

    /// Makes a client with `scopes` as root; answers its credentials.
    pub(crate) async fn make_client(&self, client_id: &str, scopes: &[&str]) -> Credentials {
        let body = json!({"description": "for a test", "expires": from_now(3600), "scopes": scopes});
        let url = self.auth_url(&format!("/clients/{}", client_id.replace('/', "%2F")));
        let (status, made) = self.call_as(Some(&root_credentials()), Method::PUT, &url, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{made}");
        creds(client_id, made["accessToken"].as_str().unwrap())
    }

    /// createTask of a new task with `credentials`; answers the status, the body and the id.
    async fn create_as(&self, credentials: Option<&Credentials>, patch: Value) -> (StatusCode, Value, String) {
        let task_id = slugid();
        let url = format!("{}/task/{task_id}", self.base);
        let (status, body) = self.call_as(credentials, Method::PUT, &url, Some(task_def(patch))).await;
        (status, body, task_id)
    }

    /// Whether the task exists (read anonymously, as anyone may).
    async fn exists(&self, task_id: &str) -> bool {
        let url = format!("{}/task/{task_id}", self.base);
        let (status, _) = self.call_as(None, Method::GET, &url, None).await;
        status == StatusCode::OK
    }
}

/// Sends createTask with a hand-made Authorization header.
async fn create_with_header(app: &TestApp, task_id: &str, header: &str, body: &[u8]) -> (StatusCode, Value) {
    let res = reqwest::Client::new()
        .put(format!("{}/task/{task_id}", app.base))
        .header("authorization", header)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let status = res.status();
    (status, res.json().await.unwrap())
}

/// A Hawk header for createTask of `task_id` made at `ts` with `nonce`, over `body`.
fn header_at(
    app: &TestApp,
    credentials: &Credentials,
    task_id: &str,
    body: &[u8],
    ts: SystemTime,
    nonce: &str,
) -> String {
    let url = url::Url::parse(&format!("{}/task/{task_id}", app.base)).unwrap();
    let hash = hawk::PayloadHasher::hash("application/json", hawk::SHA256, body).unwrap();
    let key = hawk::Key::new(credentials.access_token.as_bytes(), hawk::SHA256).unwrap();
    let hawk_credentials = hawk::Credentials { id: credentials.client_id.clone(), key };
    let request = hawk::RequestBuilder::from_url("PUT", &url).unwrap().hash(&hash[..]).request();
    let header = request.make_header_full(&hawk_credentials, ts, nonce).unwrap();
    format!("Hawk {header}")
}

fn assert_refused(status: StatusCode, body: &Value, expected: StatusCode, code: &str, says: &str) {
    assert_eq!(status, expected, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(body["message"].as_str().unwrap().contains(says), "expected `{says}` in {body}");
}

#[tokio::test]
async fn bad_credentials_are_refused_and_write_nothing() {
    let app = TestApp::start().await;
    let (status, body, task_id) = app.create_as(None, json!({})).await;
    assert_refused(status, &body, StatusCode::FORBIDDEN, "InsufficientScopes", "queue:create-task:project:none");
    assert!(!app.exists(&task_id).await, "no credentials: nothing written");

    let (status, body, task_id) = app.create_as(Some(&creds("nobody", "x")), json!({})).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "client `nobody` not found");
    assert!(!app.exists(&task_id).await);

    let (status, body, task_id) = app.create_as(Some(&creds("root", "wrong-key")), json!({})).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "Bad mac");
    assert!(!app.exists(&task_id).await);

    // A body other than the one signed.
    let task_id = slugid();
    let signed = serde_json::to_vec(&task_def(json!({}))).unwrap();
    let sent = serde_json::to_vec(&task_def(json!({"priority": "highest"}))).unwrap();
    let header = header_at(&app, &root_credentials(), &task_id, &signed, SystemTime::now(), "n1");
    let (status, body) = create_with_header(&app, &task_id, &header, &sent).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "Bad payload hash");
    assert!(!app.exists(&task_id).await);

    // A timestamp 20 minutes old.
    let old = SystemTime::now() - Duration::from_secs(20 * 60);
    let header = header_at(&app, &root_credentials(), &task_id, &signed, old, "n2");
    let (status, body) = create_with_header(&app, &task_id, &header, &signed).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "Stale timestamp");
    assert!(!app.exists(&task_id).await);

    // The same signed request twice: the second is a replay.
    let header = header_at(&app, &root_credentials(), &task_id, &signed, SystemTime::now(), "n3");
    let (status, body) = create_with_header(&app, &task_id, &header, &signed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = create_with_header(&app, &task_id, &header, &signed).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "Replayed");

    // Not Hawk at all.
    let (status, body) = create_with_header(&app, &slugid(), "Bearer abc", &signed).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "Hawk");
}

#[tokio::test]
async fn bewits_sign_reads_only_and_a_header_names_each_attribute_once() {
    let app = TestApp::start().await;
    // A bewit of root's for createTask: Hawk allows bewits for GET and HEAD only.
    let task_id = slugid();
    let url = url::Url::parse(&format!("{}/task/{task_id}", app.base)).unwrap();
    let key = hawk::Key::new(root_credentials().access_token.as_bytes(), hawk::SHA256).unwrap();
    let credentials = hawk::Credentials { id: "root".into(), key };
    let until = SystemTime::now() + Duration::from_secs(600);
    let bewit = hawk::RequestBuilder::from_url("PUT", &url).unwrap().request().make_bewit(&credentials, until).unwrap();
    let signed = format!("{url}?bewit={}", bewit.to_str());
    let body = serde_json::to_vec(&task_def(json!({}))).unwrap();
    let res = app.raw(Method::PUT, &signed, Some(body.clone())).await;
    let status = res.status();
    let answer: Value = res.json().await.unwrap();
    assert_refused(status, &answer, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "only for GET and HEAD");
    assert!(!app.exists(&task_id).await);
    // The same for a GET works.
    let read = hawk::RequestBuilder::from_url("GET", &url).unwrap().request().make_bewit(&credentials, until).unwrap();
    app.create(&task_id, json!({})).await;
    let res = app.raw(Method::GET, &format!("{url}?bewit={}", read.to_str()), None).await;
    assert_eq!(res.status(), StatusCode::OK);

    // A header with `mac` twice (the parser would keep the last).
    let other = slugid();
    let header = header_at(&app, &root_credentials(), &other, &body, SystemTime::now(), "dup");
    let doubled = format!(r#"{header}, mac="AAAA""#);
    let (status, answer) = create_with_header(&app, &other, &doubled, &body).await;
    assert_refused(status, &answer, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "attribute `mac`");
    let doubled_id = header.replacen("Hawk ", r#"Hawk id="nobody", "#, 1);
    let (status, answer) = create_with_header(&app, &other, &doubled_id, &body).await;
    assert_refused(status, &answer, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "attribute `id`");
    assert!(!app.exists(&other).await);
}

/// Temporary credentials as `taskcluster.createTemporaryCredentials` makes them.
fn temporary(issuer: &Credentials, scopes: &[&str], start: i64, expiry: i64) -> Credentials {
    let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
    let (cert, token) = shoal_engine::auth::certificate::issue(
        &issuer.client_id,
        &issuer.access_token,
        None,
        scopes,
        (start, expiry),
        "s".repeat(44),
    );
    Credentials {
        client_id: issuer.client_id.clone(),
        access_token: token,
        certificate: Some(serde_json::to_string(&cert).unwrap()),
    }
}

#[tokio::test]
async fn temporary_credentials_and_authorized_scopes_grant_no_more_than_they_say() {
    let app = TestApp::start().await;
    let maker = app.make_client("ci/maker", &["queue:create-task:*", "queue:scheduler-id:*", "queue:route:*"]).await;
    let now = shoal_service::now().millis();
    let hour = 3_600_000;
    let good = temporary(&maker, &["queue:create-task:*", "queue:scheduler-id:*"], now - 1000, now + hour);
    let (status, body, _) = app.create_as(Some(&good), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The certificate's scopes, not the issuer's: no routes.
    let (status, body, task_id) = app.create_as(Some(&good), json!({"routes": ["index.x"]})).await;
    assert_refused(status, &body, StatusCode::FORBIDDEN, "InsufficientScopes", "queue:route:index.x");
    assert!(!app.exists(&task_id).await);

    let expired = temporary(&maker, &["queue:create-task:*"], now - 2 * hour, now - hour);
    let (status, body, _) = app.create_as(Some(&expired), json!({})).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "expiry < now");

    let mut forged = good.clone();
    let mut cert: Value = serde_json::from_str(forged.certificate.as_deref().unwrap()).unwrap();
    cert["scopes"] = json!(["queue:create-task:*", "queue:scheduler-id:*", "queue:route:*"]);
    forged.certificate = Some(cert.to_string());
    let (status, body, _) = app.create_as(Some(&forged), json!({"routes": ["index.x"]})).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "signature is not valid");

    let beyond = temporary(&maker, &["secrets:get:everything"], now - 1000, now + hour);
    let (status, body, _) = app.create_as(Some(&beyond), json!({})).await;
    assert_refused(
        status,
        &body,
        StatusCode::UNAUTHORIZED,
        "AuthenticationFailed",
        "doesn't satisfy all certificate scopes",
    );

    // authorizedScopes: a restriction the client must hold.
    let restricted = |scopes: Value| {
        let ext = base64::engine::general_purpose::STANDARD.encode(json!({"authorizedScopes": scopes}).to_string());
        (maker.clone(), ext)
    };
    for (scopes, expected) in [
        (json!(["queue:create-task:*", "queue:scheduler-id:*"]), StatusCode::OK),
        (json!(["queue:create-task:*", "queue:scheduler-id:*", "secrets:get:x"]), StatusCode::UNAUTHORIZED),
    ] {
        let (credentials, ext) = restricted(scopes);
        let task_id = slugid();
        let body = serde_json::to_vec(&task_def(json!({}))).unwrap();
        let url = url::Url::parse(&format!("{}/task/{task_id}", app.base)).unwrap();
        let hash = hawk::PayloadHasher::hash("application/json", hawk::SHA256, &body).unwrap();
        let key = hawk::Key::new(credentials.access_token.as_bytes(), hawk::SHA256).unwrap();
        let hawk_credentials = hawk::Credentials { id: credentials.client_id.clone(), key };
        let request = hawk::RequestBuilder::from_url("PUT", &url).unwrap().hash(&hash[..]).ext(ext.as_str()).request();
        let header = format!("Hawk {}", request.make_header(&hawk_credentials).unwrap());
        let (status, answer) = create_with_header(&app, &task_id, &header, &body).await;
        assert_eq!(status, expected, "{answer}");
        assert_eq!(app.exists(&task_id).await, expected == StatusCode::OK);
    }
}

#[tokio::test]
async fn a_runs_credentials_work_on_that_run_only() {
    let app = TestApp::start().await;
    let (first, second) = (slugid(), slugid());
    app.create(&first, json!({"scopes": ["secrets:get:build"]})).await;
    app.create(&second, json!({})).await;
    let claims = app.claim("prov/wt", "w", 2).await;
    let credentials =
        |idx: usize| -> Credentials { serde_json::from_value(claims[idx]["credentials"].clone()).unwrap() };
    let (mine, theirs) = if claims[0]["status"]["taskId"] == first.as_str() { (0, 1) } else { (1, 0) };
    let (run, other_run) = (credentials(mine), credentials(theirs));
    assert!(run.client_id.starts_with(&format!("task-client/{first}/0/on/g/w/until/")), "{}", run.client_id);
    let other = claims[theirs]["status"]["taskId"].as_str().unwrap().to_owned();

    // Its own run: reclaim (fresh credentials), artifacts, resolve.
    let url = |path: &str| format!("{}{path}", app.base);
    let (status, reclaimed) =
        app.call_as(Some(&run), Method::POST, &url(&format!("/task/{first}/runs/0/reclaim")), None).await;
    assert_eq!(status, StatusCode::OK, "{reclaimed}");
    assert!(reclaimed["credentials"]["accessToken"].as_str().is_some_and(|t| !t.is_empty()));
    // What the run may do, as the server sees it: the run's scopes and the task's own.
    let (status, current) = app.call_as(Some(&run), Method::GET, &app.auth_url("/scopes/current"), None).await;
    assert_eq!(status, StatusCode::OK);
    let held: Vec<&str> = current["scopes"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(held.contains(&"secrets:get:build") && held.contains(&format!("queue:resolve-task:{first}/0").as_str()));

    // Another task's run, or another run of its own task: refused, nothing changed.
    for path in [format!("/task/{other}/runs/0/completed"), format!("/task/{first}/runs/1/completed")] {
        let (status, body) = app.call_as(Some(&run), Method::POST, &url(&path), None).await;
        assert_refused(status, &body, StatusCode::FORBIDDEN, "InsufficientScopes", "queue:resolve-task:");
    }
    let (status, body) =
        app.call_as(Some(&run), Method::PUT, &url(&format!("/task/{}", slugid())), Some(task_def(json!({})))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a run's credentials create no tasks: {body}");
    let (_, status_of_other) = app.get(&format!("/task/{other}/status")).await;
    assert_eq!(status_of_other["status"]["state"], "running");

    let (status, body) =
        app.call_as(Some(&run), Method::POST, &url(&format!("/task/{first}/runs/0/completed")), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The run has ended: its credentials (still unexpired) no longer act with the task's
    // scopes, and the run's own calls answer as for any ended run.
    let (status, body) = app.call_as(Some(&run), Method::GET, &app.auth_url("/scopes/current"), None).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "no longer running");
    let (status, body) = app.call_as(Some(&run), Method::GET, &url(&format!("/task/{first}")), None).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "no longer running");
    let (status, body) =
        app.call_as(Some(&run), Method::POST, &url(&format!("/task/{first}/runs/0/reclaim")), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, _) = app.call_as(Some(&other_run), Method::GET, &app.auth_url("/scopes/current"), None).await;
    assert_eq!(status, StatusCode::OK, "another run still running keeps its credentials");
}

#[tokio::test]
async fn signed_urls_cover_one_blob_and_private_artifacts_need_their_scope() {
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    app.claim("prov/wt", "w", 1).await;
    let request = json!({"storageType": "s3", "expires": from_now(3600), "contentType": "text/plain"});
    let (status, created) = app.post(&format!("/task/{task_id}/runs/0/artifacts/private%2Fsecret.txt"), request).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let put_url = created["putUrl"].as_str().unwrap().to_owned();
    assert!(put_url.contains("?bewit="), "{put_url}");

    // Edited: another name, another task, or no signature at all.
    for edited in [
        put_url.replace("secret.txt", "other.txt"),
        put_url.replace(&task_id, &slugid()),
        crate::artifacts::unsigned(&put_url),
    ] {
        let res = app.raw(Method::PUT, &edited, Some(b"evil".to_vec())).await;
        assert!(matches!(res.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN), "{edited}: {}", res.status());
    }
    assert_eq!(app.raw(Method::PUT, &put_url, Some(b"the secret".to_vec())).await.status(), StatusCode::OK);

    // Reading it: anonymous callers may not; root's redirect carries a signature that works.
    let path = format!("/task/{task_id}/runs/0/artifacts/private%2Fsecret.txt");
    let (status, body) = app.call_as(None, Method::GET, &format!("{}{path}", app.base), None).await;
    assert_refused(status, &body, StatusCode::FORBIDDEN, "InsufficientScopes", "queue:get-artifact:private/secret.txt");
    let blob = app.raw(Method::GET, &crate::artifacts::unsigned(&put_url), None).await;
    assert_eq!(blob.status(), StatusCode::FORBIDDEN, "the blob itself needs the scope too");
    let (status, redirect) = app.get(&path).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let location = redirect["url"].as_str().unwrap();
    assert!(location.contains("bewit="), "{location}");
    let download = app.raw(Method::GET, location, None).await;
    assert_eq!(download.status(), StatusCode::OK);
    assert_eq!(download.bytes().await.unwrap().as_ref(), b"the secret");
}

#[tokio::test]
async fn clients_and_roles_from_the_auth_api_grant_what_they_say() {
    let app = TestApp::start().await;
    let root = root_credentials();
    // A role, and a client that assumes it.
    let role = json!({"description": "CI submitters", "scopes": ["queue:create-task:*", "queue:scheduler-id:*"]});
    let (status, made) = app.call_as(Some(&root), Method::PUT, &app.auth_url("/roles/ci%3Asubmit"), Some(role)).await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let ci = app.make_client("ci/submitter", &["assume:ci:submit"]).await;
    let (status, got) = app.call_as(None, Method::GET, &app.auth_url("/clients/ci%2Fsubmitter"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(got.get("accessToken").is_none(), "the token is shown only when made: {got}");
    assert!(got["expandedScopes"].as_array().unwrap().contains(&json!("queue:create-task:*")), "{got}");
    let (status, body, _) = app.create_as(Some(&ci), json!({})).await;
    assert_eq!(status, StatusCode::OK, "the role's scopes: {body}");

    // expandScopes, and a client may not grant what it does not hold.
    let (_, expanded) = app
        .call_as(None, Method::POST, &app.auth_url("/scopes/expand"), Some(json!({"scopes": ["assume:ci:submit"]})))
        .await;
    assert!(expanded["scopes"].as_array().unwrap().contains(&json!("queue:scheduler-id:*")), "{expanded}");
    let helper = app.make_client("ci/helper", &["auth:create-client:ci/*", "queue:create-task:*"]).await;
    let body = json!({"description": "d", "expires": from_now(60), "scopes": ["secrets:get:*"]});
    let (status, refused) =
        app.call_as(Some(&helper), Method::PUT, &app.auth_url("/clients/ci%2Fescalated"), Some(body)).await;
    assert_refused(status, &refused, StatusCode::FORBIDDEN, "InsufficientScopes", "secrets:get:*");

    // Disabled: refused until enabled. Reset: the old token stops working.
    let (status, _) =
        app.call_as(Some(&root), Method::POST, &app.auth_url("/clients/ci%2Fsubmitter/disable"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body, _) = app.create_as(Some(&ci), json!({})).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "disabled");
    let (status, _) =
        app.call_as(Some(&root), Method::POST, &app.auth_url("/clients/ci%2Fsubmitter/enable"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, reset) =
        app.call_as(Some(&root), Method::POST, &app.auth_url("/clients/ci%2Fsubmitter/reset"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = app.create_as(Some(&ci), json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the old token");
    let fresh = creds("ci/submitter", reset["accessToken"].as_str().unwrap());
    let (status, _, _) = app.create_as(Some(&fresh), json!({})).await;
    assert_eq!(status, StatusCode::OK);

    // Deleted: its credentials are refused.
    let (status, _) = app.call_as(Some(&root), Method::DELETE, &app.auth_url("/clients/ci%2Fsubmitter"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body, task_id) = app.create_as(Some(&fresh), json!({})).await;
    assert_refused(status, &body, StatusCode::UNAUTHORIZED, "AuthenticationFailed", "not found");
    assert!(!app.exists(&task_id).await);

    // Roles changed take effect at once; the anonymous role gives anonymous callers scopes.
    let anonymous = json!({"description": "everyone", "scopes": ["queue:create-task:*", "queue:scheduler-id:*"]});
    let (status, _) = app.call_as(Some(&root), Method::PUT, &app.auth_url("/roles/anonymous"), Some(anonymous)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body, _) = app.create_as(None, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_role_whose_expansion_runs_away_for_concrete_parameters_is_refused() {
    let app = TestApp::start().await;
    let root = root_credentials();
    // `assume:grow:*` expands to itself; `assume:grow:X` grows without end.
    let role = json!({"description": "runaway", "scopes": ["assume:grow:<..>x"]});
    let (status, body) = app.call_as(Some(&root), Method::PUT, &app.auth_url("/roles/grow%3A*"), Some(role)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().starts_with("scopes:"), "{body}");
    let (status, _) = app.call_as(None, Method::GET, &app.auth_url("/roles/grow%3A*"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was kept");
    // Through another role: the first is fine alone, the second closes the loop.
    let (status, body) = app
        .call_as(
            Some(&root),
            Method::PUT,
            &app.auth_url("/roles/a%3A*"),
            Some(json!({"description": "d", "scopes": ["assume:b:<..>"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app
        .call_as(
            Some(&root),
            Method::PUT,
            &app.auth_url("/roles/b%3Aq*"),
            Some(json!({"description": "d", "scopes": ["assume:a:q<..>x"]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("expand"), "{body}");
}

/// Fills an endpoint's route with ids of things that exist, so the call gets as far as its
/// scopes.
fn route_of(route: &str, task_id: &str) -> String {
    route
        .replace("{task_id}", task_id)
        .replace("{run_id}", "0")
        .replace("{*name}", "private%2Fx")
        .replace("{queue}", "prov%2Fwt")
        .replace("{group}", task_id)
        .replace("{graph}", &slugid())
        .replace("{client_id}", "someone")
        .replace("{role_id}", "somerole")
        .replace("{provisioner}", "prov")
        .replace("{worker_type}", "wt")
        .replace("{worker_group}", "g")
        .replace("{worker_id}", "w")
}

fn body_of(name: &str) -> Option<Value> {
    Some(match name {
        "createTask" => task_def(json!({})),
        "claimWork" | "claimTask" => json!({"workerGroup": "g", "workerId": "w"}),
        "reportException" => json!({"reason": "worker-shutdown"}),
        "createArtifact" => json!({"storageType": "s3", "expires": from_now(60), "contentType": "text/plain"}),
        "changeTaskPriority" | "changeTaskGroupPriority" => json!({"newPriority": "high"}),
        "createClient" | "updateClient" => json!({"description": "d", "expires": from_now(60)}),
        "createRole" | "updateRole" => json!({"description": "d", "scopes": []}),
        "createTaskGraph" => json!({"routing": "r", "tasks": {"a": {"task": task_def(json!({}))}}}),
        "extendTaskGraph" => json!({"tasks": {"a": {"task": task_def(json!({}))}}}),
        "quarantineWorker" => json!({"quarantineUntil": from_now(60)}),
        "declareWorker" => json!({"expires": from_now(60)}),
        "workerHeartbeat" => json!({}),
        "maintainWorker" => json!({"maintenance": "x"}),
        "postWorkerEvent" => json!({"kind": "log"}),
        _ => return None,
    })
}

#[tokio::test]
async fn every_endpoint_with_scopes_refuses_an_anonymous_caller() {
    use shoal_api::auth::Scopes;
    use shoal_api::endpoints::{AUTH_ENDPOINTS, BLOB_ENDPOINTS, ENDPOINTS, LOG_ENDPOINTS, SCHEDULER_ENDPOINTS};
    let app = TestApp::start().await;
    let task_id = slugid();
    app.create(&task_id, json!({})).await;
    app.post(&format!("/task-group/{task_id}/seal"), json!({})).await;
    // Existing things to act on: a group, a client and a role.
    app.make_client("someone", &[]).await;
    let role = json!({"description": "d", "scopes": []});
    app.call_as(Some(&root_credentials()), Method::PUT, &app.auth_url("/roles/somerole"), Some(role)).await;
    let apis: [(&str, &[shoal_api::endpoints::Endpoint]); 5] = [
        ("/api/queue/v1", ENDPOINTS),
        ("/api/scheduler/v1", SCHEDULER_ENDPOINTS),
        ("/api/auth/v1", AUTH_ENDPOINTS),
        ("/blobs/v1", BLOB_ENDPOINTS),
        ("/logs/v1", LOG_ENDPOINTS),
    ];
    let mut checked = 0;
    for (base, endpoints) in apis {
        for endpoint in endpoints.iter().filter(|e| !matches!(e.scopes, Scopes::Public)) {
            let url = format!("{}{base}{}", app.root, route_of(endpoint.route, &task_id));
            let method = Method::from_bytes(endpoint.method.as_str().as_bytes()).unwrap();
            let (status, body) = app.call_as(None, method, &url, body_of(endpoint.name)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{} {url}: {body}", endpoint.name);
            assert_eq!(body["code"], "InsufficientScopes", "{}: {body}", endpoint.name);
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} endpoints have scopes?");
    let (_, status) = app.get(&format!("/task/{task_id}/status")).await;
    assert_eq!(status["status"]["state"], "pending", "nothing happened to the task");
}
