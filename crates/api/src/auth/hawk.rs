//! Checking a request's Hawk signature: the `Authorization: Hawk …` header (with its
//! payload hash when it has one) or a `bewit` in the URL, under the key its credentials
//! stand for.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hawk::{Bewit, Header, Key, PayloadHasher, RequestBuilder, SHA256};
use shoal_engine::auth::{AuthFailure, Ext, Principal, QUEUE_CLIENT_ID, TIMESTAMP_SKEW_SECS, principal};
use shoal_service::auth::AuthState;

use crate::auth::nonces::Nonces;

/// What a signature covers of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) method: &'a str,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    /// Path and query, as sent.
    pub(crate) resource: &'a str,
}

fn key(token: &str) -> Result<Key, AuthFailure> {
    Key::new(token.as_bytes(), SHA256).map_err(|err| AuthFailure::Malformed(format!("key: {err}")))
}

fn seconds(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

fn lookup(name: &str, ext: Option<&str>, state: &AuthState, now: SystemTime) -> Result<Principal, AuthFailure> {
    let ext = ext.map(Ext::parse).transpose()?;
    let now_ms = i64::try_from(now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())).unwrap_or(i64::MAX);
    principal(name, ext.as_ref(), |id| state.clients.get(id), &state.expander, now_ms)
}

/// Parses an `Authorization: Hawk …` header, checking nothing yet (once per request: the
/// parse is a tenth of a request's authentication).
pub(crate) fn parse_header(authorization: &str) -> Result<Header, AuthFailure> {
    let attributes = authorization.strip_prefix("Hawk ").ok_or(AuthFailure::NotHawk)?;
    let header = Header::from_str(attributes).map_err(|err| AuthFailure::Malformed(format!("Hawk header: {err}")))?;
    // The parser keeps the last of a repeated attribute; what was signed is then ambiguous.
    // Each attribute it took has one quoted value, and a value holds no quote, so a header
    // with more quoted values than attributes set repeats one.
    let quotes = memchr::memchr_iter(b'"', attributes.as_bytes()).count();
    if quotes != 2 * attributes_set(&header) {
        return Err(AuthFailure::RepeatedAttribute(repeated_attribute(attributes).unwrap_or("?").to_owned()));
    }
    Ok(header)
}

/// How many of its attributes a parsed header has.
fn attributes_set(header: &Header) -> usize {
    [
        header.id.is_some(),
        header.ts.is_some(),
        header.nonce.is_some(),
        header.mac.is_some(),
        header.ext.is_some(),
        header.hash.is_some(),
        header.app.is_some(),
        header.dlg.is_some(),
    ]
    .into_iter()
    .filter(|&set| set)
    .count()
}

/// The first attribute named twice in a Hawk header's `name="value", ...` list (which has
/// parsed, so every value is quoted and holds no quote), to name it in the refusal.
fn repeated_attribute(attributes: &str) -> Option<&str> {
    let mut seen: Vec<&str> = Vec::with_capacity(8);
    let mut rest = attributes;
    while let Some((name, after)) = rest.split_once('=') {
        let name = name.trim_matches(|c: char| c == ',' || c.is_whitespace());
        if seen.contains(&name) {
            return Some(name);
        }
        seen.push(name);
        // Past the quoted value.
        let after = after.trim_start().strip_prefix('"')?;
        rest = &after[after.find('"')? + 1..];
    }
    None
}

/// Checks a parsed `Authorization: Hawk …` header; `body` is the request's content type and
/// bytes when the header signs a payload hash.
pub(crate) fn check_header(
    header: &Header,
    target: Target<'_>,
    body: Option<(&str, &[u8])>,
    state: &AuthState,
    nonces: &Nonces,
    now: SystemTime,
) -> Result<Principal, AuthFailure> {
    let (Some(id), Some(ts), Some(nonce), Some(_)) = (&header.id, header.ts, &header.nonce, &header.mac) else {
        return Err(AuthFailure::Malformed("Hawk header: id, ts, nonce and mac are required".into()));
    };
    let skew = match now.duration_since(ts) {
        Ok(behind) => behind,
        Err(ahead) => ahead.duration(),
    };
    if skew > Duration::from_secs(TIMESTAMP_SKEW_SECS) {
        return Err(AuthFailure::StaleTimestamp);
    }
    let found = lookup(id, header.ext.as_deref(), state, now)?;
    let request = RequestBuilder::new(target.method, target.host, target.port, target.resource).request();
    // The MAC covers the header's hash; the body is compared with it below.
    if !request.validate_header(header, &key(&found.key)?, Duration::from_secs(TIMESTAMP_SKEW_SECS)) {
        return Err(AuthFailure::BadMac);
    }
    if let Some(signed) = &header.hash {
        let (content_type, bytes) = body.unwrap_or(("", &[]));
        let computed = PayloadHasher::hash(media_type(content_type), SHA256, bytes)
            .map_err(|err| AuthFailure::Malformed(format!("payload hash: {err}")))?;
        if !ring_eq(&computed, signed) {
            return Err(AuthFailure::BadPayloadHash);
        }
    }
    if !nonces.first_use(id, nonce, seconds(ts), seconds(now)) {
        return Err(AuthFailure::Replayed);
    }
    Ok(found)
}

/// Checks the `bewit` of a signed URL: for GET and HEAD requests as Hawk allows, and for
/// uploads (`upload`, the blob endpoint's PUT) only the server's own, as its `putUrl`s are.
pub(crate) fn check_bewit(
    target: Target<'_>,
    upload: bool,
    state: &AuthState,
    now: SystemTime,
) -> Result<Principal, AuthFailure> {
    let read = matches!(target.method, "GET" | "HEAD");
    if !read && !upload {
        return Err(AuthFailure::BewitMethod);
    }
    let mut bewit: Option<Bewit<'_>> = None;
    let builder = RequestBuilder::new(target.method, target.host, target.port, target.resource)
        .extract_bewit(&mut bewit)
        .map_err(|err| AuthFailure::Malformed(format!("bewit: {err}")))?;
    let bewit = bewit.ok_or_else(|| AuthFailure::Malformed("bewit: missing".into()))?;
    if bewit.exp() < now {
        return Err(AuthFailure::BewitExpired);
    }
    let found = lookup(bewit.id(), bewit.ext(), state, now)?;
    if !builder.request().validate_bewit(&bewit, &key(&found.key)?) {
        return Err(AuthFailure::BadMac);
    }
    if !read && found.client_id != QUEUE_CLIENT_ID {
        return Err(AuthFailure::BewitMethod);
    }
    Ok(found)
}

/// A signed URL for `method` on `resource` of the server at (host, port), valid until `exp`:
/// `resource` with a `bewit` added to its query.
pub(crate) fn sign_url(
    (host, port): (&str, u16),
    method: &str,
    resource: &str,
    (client_id, token): (&str, &str),
    exp: SystemTime,
) -> Option<String> {
    let credentials = hawk::Credentials { id: client_id.to_owned(), key: key(token).ok()? };
    let bewit = RequestBuilder::new(method, host, port, resource).request().make_bewit(&credentials, exp).ok()?;
    let separator = if resource.contains('?') { '&' } else { '?' };
    Some(format!("{resource}{separator}bewit={}", bewit.to_str()))
}

/// A content type as Hawk hashes it: the media type, lower case, without parameters.
fn media_type(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_with_a_repeated_attribute_is_refused() {
        let once = r#"Hawk id="a", ts="1353832234", nonce="n", mac="6R4rV5iE+NPoym+WwjeHzjAGXUtLNIxmo1vpMofpLAE=""#;
        assert!(parse_header(once).is_ok());
        let twice = format!(r#"{once}, id="b""#);
        assert_eq!(parse_header(&twice).unwrap_err(), AuthFailure::RepeatedAttribute("id".into()));
    }

    #[test]
    fn a_repeated_attribute_is_found_whatever_the_spacing() {
        assert_eq!(repeated_attribute(r#"id="a", ts="1", nonce="n", mac="m""#), None);
        assert_eq!(repeated_attribute(r#"id="a", ts="1", id="b", mac="m""#), Some("id"));
        assert_eq!(repeated_attribute(r#"id="a",mac="x=y",mac="m""#), Some("mac"));
        assert_eq!(repeated_attribute(r#"ext="a, b=c", ts="1""#), None, "a value's commas and `=` are not names");
    }
}
