//! Downloads whose bytes are streamed by the caller (a worker's mounts): an artifact read
//! with scopes narrowed to a task's, or any URL, redirects followed. Only the artifact reads
//! to this client's server are signed; a URL, or a redirect elsewhere (a reference artifact,
//! a store's signed URL), carries no credentials.

use std::time::Duration;

use reqwest::Method;

use crate::{Client, ClientError, Try, encode_path, error_of, retried};

/// Most redirects one download follows.
const MAX_REDIRECTS: usize = 5;
/// Longest wait for a connection or for the next bytes of a download.
const STALL: Duration = Duration::from_secs(60);

impl Client {
    /// The bytes of `name` from `task_id`'s run `run_id`, as an open response, read with
    /// this client's credentials restricted to `authorized_scopes` (so a private artifact is
    /// read only when those scopes allow it).
    ///
    /// # Errors
    /// As the server answers (403 without the scope, 404, 424 for an error artifact), or
    /// when it cannot be reached.
    pub async fn download_artifact(
        &self,
        task_id: &str,
        run_id: u32,
        name: &str,
        authorized_scopes: &[String],
    ) -> Result<reqwest::Response, ClientError> {
        let url = self.queue(&format!("/task/{task_id}/runs/{run_id}/artifacts/{}", encode_path(name)));
        self.download(url, Some(authorized_scopes)).await
    }

    /// The bytes at `url`, as an open response, fetched without credentials (even a URL of
    /// this client's server).
    ///
    /// # Errors
    /// As the server there answers, or when it cannot be reached.
    pub async fn download_url(&self, url: &str) -> Result<reqwest::Response, ClientError> {
        self.download(url.to_owned(), None).await
    }

    async fn download(
        &self,
        mut url: String,
        authorized_scopes: Option<&[String]>,
    ) -> Result<reqwest::Response, ClientError> {
        // No limit on the whole request (a large download takes long), only on stalls.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(STALL)
            .read_timeout(STALL)
            .build()
            .map_err(|err| ClientError::Transport(err.to_string()))?;
        for _ in 0..=MAX_REDIRECTS {
            let res = self.fetch_once(&http, &url, authorized_scopes).await?;
            let status = res.status();
            if status.is_success() {
                return Ok(res);
            }
            if status.is_redirection() {
                let location = res
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .ok_or_else(|| ClientError::Decode(format!("{url}: a redirect without a Location")))?;
                let next = url::Url::parse(&url)
                    .and_then(|base| base.join(location))
                    .map_err(|err| ClientError::Decode(format!("{url}: redirect to {location}: {err}")))?;
                url = next.to_string();
                continue;
            }
            let bytes = res.bytes().await.map_err(|err| ClientError::Transport(err.to_string()))?;
            return Err(error_of(status, &bytes));
        }
        Err(ClientError::Decode(format!("{url}: more than {MAX_REDIRECTS} redirects")))
    }

    /// One GET of `url` (signed, narrowed to `authorized_scopes`, when those are given and it
    /// is this server's), retried on transport errors and
    /// 5xx answers.
    async fn fetch_once(
        &self,
        http: &reqwest::Client,
        url: &str,
        authorized_scopes: Option<&[String]>,
    ) -> Result<reqwest::Response, ClientError> {
        // Signed only with scopes to narrow to: a plain URL is fetched as anyone would.
        let ours = authorized_scopes.is_some() && url.starts_with(&format!("{}/", self.root_url));
        retried(url, || async move {
            let mut request = http.request(Method::GET, url);
            if let (true, Some(credentials)) = (ours, &self.credentials) {
                let credentials = credentials.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                match credentials.authorization_restricted("GET", url, None, authorized_scopes) {
                    Ok(authorization) => request = request.header(reqwest::header::AUTHORIZATION, authorization),
                    Err(err) => return Try::Done(Err(err)),
                }
            }
            match request.send().await {
                Ok(res) if !res.status().is_server_error() => Try::Done(Ok(res)),
                Ok(res) => {
                    let status = res.status();
                    Try::Again(error_of(status, &res.bytes().await.unwrap_or_default()))
                }
                Err(err) => Try::Again(ClientError::Transport(err.to_string())),
            }
        })
        .await
    }
}
