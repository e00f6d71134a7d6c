//! Requests passed on for someone else: a task's, through the worker's credentials proxy,
//! signed with this client's credentials narrowed to the scopes the task may use.

use reqwest::Method;
use reqwest::header::HeaderMap;

use crate::{Client, ClientError};

impl Client {
    /// Sends `method` to `path_and_query` below the root URL, once, with `headers` and `body`,
    /// signed with this client's current credentials restricted to `authorized_scopes`
    /// (Hawk's `authorizedScopes`), and answers the response as it came: errors and
    /// redirects are the caller's to pass on.
    ///
    /// # Errors
    /// When the client has no credentials, or the server cannot be reached.
    pub async fn forward(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        authorized_scopes: &[String],
    ) -> Result<reqwest::Response, ClientError> {
        let url = format!("{}{path_and_query}", self.root_url);
        let Some(credentials) = &self.credentials else {
            return Err(ClientError::Transport("no credentials to sign a forwarded request with".into()));
        };
        let credentials = credentials.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        // No payload hash: Hawk leaves it optional, and the bytes pass on as they came.
        let authorization =
            credentials.authorization_restricted(method.as_str(), &url, None, Some(authorized_scopes))?;
        self.http
            .request(method, url)
            .headers(headers)
            .header(reqwest::header::AUTHORIZATION, authorization)
            .body(body)
            .send()
            .await
            .map_err(|err| ClientError::Transport(err.to_string()))
    }
}
