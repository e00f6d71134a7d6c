//! The Auth, Index, Secrets and Hooks services' calls the CLI and the worker make, answered as
//! JSON.

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{Body, Client, ClientError, encode_path};

/// A delivery id in GitHub's form (a GUID), of random bytes.
fn uuid_like() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    // A delivery id only tells deliveries apart: a failure to draw leaves zeros.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

impl Client {
    fn service(&self, service: &str, path: &str) -> String {
        format!("{}/api/{service}/v1{path}", self.root_url)
    }

    /// findTask: the task indexed at `namespace`.
    ///
    /// # Errors
    /// As the server answers (404 when nothing is indexed there).
    pub async fn find_indexed(&self, namespace: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, &self.service("index", &format!("/task/{}", encode_path(namespace))), None).await
    }

    /// expandScopes: `scopes` with every scope the roles they assume grant.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn expand_scopes(&self, scopes: &[String]) -> Result<Vec<String>, ClientError> {
        let body = json!({ "scopes": scopes });
        let answer: Value =
            self.call(Method::POST, &self.service("auth", "/scopes/expand"), Some(Body::Json(&body))).await?;
        Ok(answer["scopes"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect())
    }

    /// githubWebHookConsumer: delivers a webhook event (`X-GitHub-Event` `event`) in GitHub's
    /// format, signed with `secret` as a forge signs it; the server's answer (the build made).
    ///
    /// # Errors
    /// As the server answers (403 for a signature made with another secret).
    pub async fn deliver_webhook(&self, event: &str, body: &Value, secret: &str) -> Result<Value, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|err| ClientError::Decode(err.to_string()))?;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let signature: String = ring::hmac::sign(&key, &bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect();
        let answer = self
            .http
            .post(self.service("github", "/github"))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", uuid_like())
            .header("x-hub-signature-256", format!("sha256={signature}"))
            .body(bytes)
            .send()
            .await
            .map_err(|err| ClientError::Transport(err.to_string()))?;
        let status = answer.status();
        let bytes = answer.bytes().await.map_err(|err| ClientError::Transport(err.to_string()))?;
        if !status.is_success() {
            return Err(crate::error_of(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|err| ClientError::Decode(err.to_string()))
    }

    /// The Secrets service's `get`.
    ///
    /// # Errors
    /// As the server answers (403 without `secrets:get:<name>`, 404 when there is none).
    pub async fn secret(&self, name: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, &self.service("secrets", &format!("/secret/{}", encode_path(name))), None).await
    }

    /// The Secrets service's `set`: `secret` (an object) until `expires`.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn set_secret(&self, name: &str, secret: &Value, expires: &str) -> Result<(), ClientError> {
        let body = json!({ "secret": secret, "expires": expires });
        let url = self.service("secrets", &format!("/secret/{}", encode_path(name)));
        self.call::<Value>(Method::PUT, &url, Some(Body::Json(&body))).await.map(drop)
    }

    /// The Secrets service's `list`, every page: the secrets' names.
    ///
    /// # Errors
    /// As the server answers (403 without `secrets:list-secrets`).
    pub async fn secret_names(&self) -> Result<Vec<String>, ClientError> {
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = self.service("secrets", "/secrets");
            if let Some(token) = &token {
                url = format!("{url}?continuationToken={}", utf8_percent_encode(token, NON_ALPHANUMERIC));
            }
            let page: Value = self.call(Method::GET, &url, None).await?;
            names
                .extend(page["secrets"].as_array().into_iter().flatten().filter_map(|n| n.as_str().map(str::to_owned)));
            match page["continuationToken"].as_str() {
                Some(next) => token = Some(next.to_owned()),
                None => return Ok(names),
            }
        }
    }

    /// triggerHook with `payload`: the created task's id in `taskId` (`{}` when the hook declined).
    ///
    /// # Errors
    /// As the server answers (400 for a payload its triggerSchema refuses).
    pub async fn trigger_hook(&self, group: &str, id: &str, payload: &Value) -> Result<Value, ClientError> {
        let path = format!(
            "/hooks/{}/{}/trigger",
            utf8_percent_encode(group, NON_ALPHANUMERIC),
            utf8_percent_encode(id, NON_ALPHANUMERIC)
        );
        self.call(Method::POST, &self.service("hooks", &path), Some(Body::Json(payload))).await
    }
}
