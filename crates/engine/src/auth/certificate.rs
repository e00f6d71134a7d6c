//! Temporary credentials, Taskcluster's: a certificate signed with the issuing client's
//! access token grants a subset of the issuer's scopes for a bounded time, under a key
//! derived from the same token.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::auth::scope::{ScopeSet, is_valid_scope};

/// Longest a certificate may last.
pub const MAX_LIFETIME_MS: i64 = 31 * 24 * 3600 * 1000;
/// Clock skew allowed on a certificate's start and expiry.
pub const SKEW_MS: i64 = 5 * 60 * 1000;

/// A temporary-credentials certificate as clients send it (in `ext.certificate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    /// Always 1.
    pub version: u32,
    /// What the credentials may do.
    pub scopes: Vec<String>,
    /// Valid from (ms since the epoch).
    pub start: i64,
    /// Valid until (ms since the epoch).
    pub expiry: i64,
    /// 44 random characters the temporary key is derived from.
    pub seed: String,
    /// Base64 HMAC-SHA256 over the fields, keyed with the issuer's access token.
    pub signature: String,
    /// The issuing client, for named credentials (whose own id is then another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

/// Why a certificate is refused; each reads as Taskcluster's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    /// Not version 1.
    #[error("ext.certificate.version must be 1")]
    Version,
    /// A seed of another length.
    #[error("ext.certificate.seed must be 44 characters")]
    Seed,
    /// A scope that is not printable ASCII.
    #[error("ext.certificate.scopes must be an array of valid scopes")]
    Scopes,
    /// Starts in the future.
    #[error("ext.certificate.start > now")]
    NotYetValid,
    /// Expired.
    #[error("ext.certificate.expiry < now")]
    Expired,
    /// Lasts longer than 31 days.
    #[error("ext.certificate cannot last longer than 31 days!")]
    TooLong,
    /// The issuer names itself.
    #[error("ext.certificate.issuer must differ from the supplied clientId")]
    IssuerIsSelf,
    /// The issuer may not create clients of this name.
    #[error("ext.certificate issuer `{issuer}` doesn't have `auth:create-client:{name}` for supplied clientId.")]
    NameNotAllowed {
        /// The issuer.
        issuer: String,
        /// The credentials' name.
        name: String,
    },
    /// The issuer does not hold every scope of the certificate.
    #[error("ext.certificate issuer `{0}` doesn't satisfy all certificate scopes")]
    ScopesBeyondIssuer(String),
    /// The signature does not match.
    #[error("ext.certificate.signature is not valid")]
    Signature,
}

fn signed_text(cert: &Certificate, name: &str) -> String {
    let mut text = String::from("version:1\n");
    if let Some(issuer) = &cert.issuer {
        text.push_str(&format!("clientId:{name}\nissuer:{issuer}\n"));
    }
    text.push_str(&format!("seed:{}\nstart:{}\nexpiry:{}\nscopes:", cert.seed, cert.start, cert.expiry));
    for scope in &cert.scopes {
        text.push('\n');
        text.push_str(scope);
    }
    text
}

fn key(access_token: &str) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, access_token.as_bytes())
}

/// The temporary access token of credentials with `seed` issued by a client holding
/// `issuer_token`.
#[must_use]
pub fn temporary_token(issuer_token: &str, seed: &str) -> String {
    URL_SAFE_NO_PAD.encode(hmac::sign(&key(issuer_token), seed.as_bytes()).as_ref())
}

/// Issues a certificate: `name` is the credentials' own client id when it differs from
/// `issuer` (named credentials). Answers the certificate and the temporary access token.
#[must_use]
pub fn issue(
    issuer: &str,
    issuer_token: &str,
    name: Option<&str>,
    scopes: Vec<String>,
    (start, expiry): (i64, i64),
    seed: String,
) -> (Certificate, String) {
    let mut cert = Certificate {
        version: 1,
        scopes,
        start,
        expiry,
        seed,
        signature: String::new(),
        issuer: name.map(|_| issuer.to_owned()),
    };
    let text = signed_text(&cert, name.unwrap_or(issuer));
    cert.signature = STANDARD.encode(hmac::sign(&key(issuer_token), text.as_bytes()).as_ref());
    let token = temporary_token(issuer_token, &cert.seed);
    (cert, token)
}

/// What a checked certificate grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The key the request must be signed with.
    pub access_token: String,
    /// Until when (ms since the epoch).
    pub expiry: i64,
}

/// Checks `cert`, presented under client id `name`, against its issuer `issuer` (its access
/// token and expanded scopes), at `now` (ms since the epoch).
///
/// # Errors
/// The first rule the certificate breaks.
pub fn check(
    cert: &Certificate,
    name: &str,
    issuer: &str,
    issuer_token: &str,
    issuer_scopes: &ScopeSet,
    now: i64,
) -> Result<Granted, CertificateError> {
    if cert.version != 1 {
        return Err(CertificateError::Version);
    }
    if cert.seed.len() != 44 {
        return Err(CertificateError::Seed);
    }
    if !cert.scopes.iter().all(|scope| is_valid_scope(scope)) {
        return Err(CertificateError::Scopes);
    }
    if cert.start > now + SKEW_MS {
        return Err(CertificateError::NotYetValid);
    }
    if cert.expiry < now - SKEW_MS {
        return Err(CertificateError::Expired);
    }
    if cert.expiry - cert.start > MAX_LIFETIME_MS {
        return Err(CertificateError::TooLong);
    }
    if cert.issuer.is_some() && name == issuer {
        return Err(CertificateError::IssuerIsSelf);
    }
    if name != issuer && !issuer_scopes.satisfies(&format!("auth:create-client:{name}")) {
        return Err(CertificateError::NameNotAllowed { issuer: issuer.to_owned(), name: name.to_owned() });
    }
    if !issuer_scopes.satisfies_all(cert.scopes.iter().map(String::as_str)) {
        return Err(CertificateError::ScopesBeyondIssuer(issuer.to_owned()));
    }
    let signature = STANDARD.decode(&cert.signature).map_err(|_| CertificateError::Signature)?;
    hmac::verify(&key(issuer_token), signed_text(cert, name).as_bytes(), &signature)
        .map_err(|_| CertificateError::Signature)?;
    Ok(Granted { access_token: temporary_token(issuer_token, &cert.seed), expiry: cert.expiry })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn issuer_scopes() -> ScopeSet {
        ScopeSet::new(["queue:*".to_owned(), "auth:create-client:task-client/*".to_owned()])
    }

    #[test]
    fn an_issued_certificate_checks() {
        let (cert, token) =
            issue("issuer", "secret", None, vec!["queue:claim-work:p/w".into()], (1000, 2000), SEED.into());
        let granted = check(&cert, "issuer", "issuer", "secret", &issuer_scopes(), 1500).unwrap();
        assert_eq!(granted.access_token, token);
        assert_eq!(granted.expiry, 2000);
    }

    #[test]
    fn named_credentials_need_the_issuer_to_create_the_name() {
        let (cert, _) =
            issue("issuer", "secret", Some("task-client/x"), vec!["queue:a".into()], (1000, 2000), SEED.into());
        assert!(check(&cert, "task-client/x", "issuer", "secret", &issuer_scopes(), 1500).is_ok());
        // Presented under another name, the signature does not match.
        let other = check(&cert, "task-client/y", "issuer", "secret", &issuer_scopes(), 1500);
        assert_eq!(other, Err(CertificateError::Signature));
        let (cert, _) = issue("issuer", "secret", Some("someone"), vec![], (1000, 2000), SEED.into());
        assert!(matches!(
            check(&cert, "someone", "issuer", "secret", &issuer_scopes(), 1500),
            Err(CertificateError::NameNotAllowed { .. })
        ));
    }

    #[test]
    fn forged_expired_or_overreaching_certificates_are_refused() {
        let (mut cert, _) = issue("issuer", "secret", None, vec!["queue:a".into()], (1000, 2000), SEED.into());
        let scopes = issuer_scopes();
        assert_eq!(check(&cert, "issuer", "issuer", "wrong", &scopes, 1500), Err(CertificateError::Signature));
        assert_eq!(
            check(&cert, "issuer", "issuer", "secret", &scopes, 2000 + SKEW_MS + 1),
            Err(CertificateError::Expired)
        );
        assert_eq!(
            check(&cert, "issuer", "issuer", "secret", &scopes, 1000 - SKEW_MS - 1),
            Err(CertificateError::NotYetValid)
        );
        cert.scopes.push("queue:b".into());
        assert_eq!(check(&cert, "issuer", "issuer", "secret", &scopes, 1500), Err(CertificateError::Signature));
        let (cert, _) = issue("issuer", "secret", None, vec!["secrets:get".into()], (1000, 2000), SEED.into());
        assert!(matches!(
            check(&cert, "issuer", "issuer", "secret", &scopes, 1500),
            Err(CertificateError::ScopesBeyondIssuer(_))
        ));
        let (cert, _) = issue("issuer", "secret", None, vec![], (0, MAX_LIFETIME_MS + 1), SEED.into());
        assert_eq!(check(&cert, "issuer", "issuer", "secret", &scopes, 1500), Err(CertificateError::TooLong));
    }
}
