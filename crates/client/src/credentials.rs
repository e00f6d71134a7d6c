//! Signing requests with Hawk, as Taskcluster's clients do: a client id and access token,
//! or temporary credentials (with their certificate in `ext`).

use std::hash::BuildHasher;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hawk::{Key, PayloadHasher, RequestBuilder, SHA256};

use crate::ClientError;

/// A client's credentials (`Debug` shows the client id only).
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    /// The client id.
    pub client_id: String,
    /// Its access token (the Hawk key).
    pub access_token: String,
    /// The certificate of temporary credentials, as JSON text.
    #[serde(default, deserialize_with = "empty_is_none")]
    pub certificate: Option<String>,
}

/// A nonce unique to this process and call: a random prefix drawn once and a counter (Hawk
/// asks only that a nonce not repeat for a client and timestamp), without a system call per
/// request.
fn next_nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let random = format!("{:016x}", std::collections::hash_map::RandomState::new().hash_one(std::process::id()));
        random[..12].to_owned()
    });
    format!("{prefix}{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

fn empty_is_none<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    let text: Option<String> = serde::Deserialize::deserialize(de)?;
    Ok(text.filter(|text| !text.is_empty()))
}

fn unusable(what: &str, err: &dyn std::fmt::Display) -> ClientError {
    ClientError::Transport(format!("signing {what}: {err}"))
}

impl Credentials {
    /// Credentials from Taskcluster's variables `TASKCLUSTER_CLIENT_ID`,
    /// `TASKCLUSTER_ACCESS_TOKEN` and `TASKCLUSTER_CERTIFICATE`; `None` when no client id is set.
    #[must_use]
    pub fn from_env() -> Option<Credentials> {
        let client_id = std::env::var("TASKCLUSTER_CLIENT_ID").ok().filter(|id| !id.is_empty())?;
        Some(Credentials {
            client_id,
            access_token: std::env::var("TASKCLUSTER_ACCESS_TOKEN").unwrap_or_default(),
            certificate: std::env::var("TASKCLUSTER_CERTIFICATE").ok().filter(|cert| !cert.is_empty()),
        })
    }

    /// The `ext` attribute carrying the certificate, when there is one.
    ///
    /// # Errors
    /// When the certificate is not JSON.
    pub fn ext(&self) -> Result<Option<String>, ClientError> {
        self.ext_restricted(None)
    }

    /// The `ext` attribute carrying the certificate and, when given, `authorizedScopes`: the
    /// signed request then acts with those scopes only (which the credentials must hold).
    ///
    /// # Errors
    /// When the certificate is not JSON.
    pub fn ext_restricted(&self, authorized_scopes: Option<&[String]>) -> Result<Option<String>, ClientError> {
        let mut ext = serde_json::Map::new();
        if let Some(certificate) = &self.certificate {
            let certificate: serde_json::Value = serde_json::from_str(certificate)
                .map_err(|err| ClientError::Decode(format!("certificate: not JSON: {err}")))?;
            ext.insert("certificate".into(), certificate);
        }
        if let Some(scopes) = authorized_scopes {
            ext.insert("authorizedScopes".into(), serde_json::json!(scopes));
        }
        Ok((!ext.is_empty()).then(|| STANDARD.encode(serde_json::Value::Object(ext).to_string())))
    }

    /// The `Authorization` header for `method` on `url` with `body` (its content type and
    /// bytes, hashed when given).
    ///
    /// # Errors
    /// When the URL or the credentials cannot be used.
    pub fn authorization(&self, method: &str, url: &str, body: Option<(&str, &[u8])>) -> Result<String, ClientError> {
        self.authorization_restricted(method, url, body, None)
    }

    /// [`Credentials::authorization`] acting with `authorized_scopes` only, when given.
    ///
    /// # Errors
    /// When the URL or the credentials cannot be used.
    pub fn authorization_restricted(
        &self,
        method: &str,
        url: &str,
        body: Option<(&str, &[u8])>,
        authorized_scopes: Option<&[String]>,
    ) -> Result<String, ClientError> {
        let parsed = url::Url::parse(url).map_err(|err| unusable("a bad URL", &err))?;
        let host = parsed.host_str().unwrap_or_default();
        let port = parsed.port_or_known_default().unwrap_or(80);
        let resource = &parsed[url::Position::BeforePath..];
        let ext = self.ext_restricted(authorized_scopes)?;
        self.authorization_for(method, (host, port), resource, body, ext.as_deref())
    }

    /// The `Authorization` header for `method` on `resource` (path and query) of the server
    /// at (host, port), with `ext` as [`Credentials::ext`] made it (callers that sign many
    /// requests make it once).
    ///
    /// # Errors
    /// When the credentials cannot be used.
    pub fn authorization_for(
        &self,
        method: &str,
        (host, port): (&str, u16),
        resource: &str,
        body: Option<(&str, &[u8])>,
        ext: Option<&str>,
    ) -> Result<String, ClientError> {
        let key = Key::new(self.access_token.as_bytes(), SHA256).map_err(|err| unusable("with the key", &err))?;
        let credentials = hawk::Credentials { id: self.client_id.clone(), key };
        let hash = match body {
            Some((content_type, bytes)) => {
                Some(PayloadHasher::hash(content_type, SHA256, bytes).map_err(|err| unusable("the body", &err))?)
            }
            None => None,
        };
        let request = RequestBuilder::new(method, host, port, resource).hash(hash.as_deref()).ext(ext).request();
        let header = request
            .make_header_full(&credentials, std::time::SystemTime::now(), next_nonce())
            .map_err(|err| unusable("the request", &err))?;
        Ok(format!("Hawk {header}"))
    }
}
