//! Images by name, pulled from an OCI registry with the distribution API (the `oci-client`
//! crate: anonymous access, or a registry's bearer-token flow, and every blob checked
//! against its digest). A name with a digest is looked up in the cache without asking the
//! registry; a tag is resolved to its manifest's digest first.

use std::time::Instant;

use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::io::AsyncWriteExt;

use super::{Found, Ready, cached_or_locked, keep, load, unpack};
use crate::mount::{self, Setup, SetupError};

/// The worker's registry client.
#[derive(Clone)]
pub struct Registries {
    client: std::sync::Arc<Client>,
}

impl Registries {
    /// A client speaking HTTPS, or plain HTTP to the registries `insecure` names
    /// (`host:port`, as docker's `insecure-registries`).
    #[must_use]
    pub fn new(insecure: &[String]) -> Registries {
        let protocol = if insecure.is_empty() {
            oci_client::client::ClientProtocol::Https
        } else {
            oci_client::client::ClientProtocol::HttpsExcept(insecure.to_vec())
        };
        let config = oci_client::client::ClientConfig {
            protocol,
            platform_resolver: Some(Box::new(oci_client::client::current_platform_resolver)),
            ..Default::default()
        };
        Registries { client: std::sync::Arc::new(Client::new(config)) }
    }
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Registries")
    }
}

/// A registry's refusal is the payload's (no such image, not allowed); not reaching it is
/// the worker's.
fn refused(name: &str, err: &oci_client::errors::OciDistributionError) -> SetupError {
    match err {
        oci_client::errors::OciDistributionError::RequestError(_) => {
            SetupError::Worker(format!("cannot reach the registry of {name}: {err}"))
        }
        _ => SetupError::Payload(format!("payload.image: cannot pull {name}: {err}")),
    }
}

pub(super) async fn obtain(setup: &Setup<'_>, registries: &Registries, name: &str) -> Result<(Ready, u64), SetupError> {
    let started = Instant::now();
    let reference: Reference = name
        .parse()
        .map_err(|err| SetupError::Payload(format!("payload.image `{name}` is not an image reference: {err}")))?;
    let auth = RegistryAuth::Anonymous;
    let client = &registries.client;
    let digest = match reference.digest() {
        Some(digest) => digest.to_owned(),
        None => client.fetch_manifest_digest(&reference, &auth).await.map_err(|err| refused(name, &err))?,
    };
    let pinned =
        Reference::with_digest(reference.registry().to_owned(), reference.repository().to_owned(), digest.clone());
    let key = format!("image:registry:{pinned}");
    let what = format!("{name} ({digest})");
    let _pulling = match cached_or_locked(setup, &key, &what).await? {
        Found::Cached(ready) => return Ok((ready, 0)),
        Found::Locked(guard) => guard,
    };
    let (manifest, _, config) =
        client.pull_manifest_and_config(&pinned, &auth).await.map_err(|err| refused(name, &err))?;
    let config: serde_json::Value = serde_json::from_str(&config)
        .map_err(|err| SetupError::Payload(format!("payload.image: {name}'s config is not JSON: {err}")))?;
    let staging = setup.cache.image_staging();
    let layers_dir = staging.join("layers");
    let limit = setup.cache.limit();
    let pulled = async {
        tokio::fs::create_dir_all(&layers_dir)
            .await
            .map_err(|err| SetupError::Worker(format!("pulling {name}: {err}")))?;
        let mut files = Vec::new();
        let mut total = 0u64;
        for (idx, layer) in manifest.layers.iter().enumerate() {
            total = total.saturating_add(u64::try_from(layer.size).unwrap_or(u64::MAX));
            if total > limit {
                return Err(SetupError::Payload(format!(
                    "payload.image: {name} is larger than this worker's cache ({limit} bytes)"
                )));
            }
            let file = layers_dir.join(idx.to_string());
            let mut out = tokio::fs::File::create(&file)
                .await
                .map_err(|err| SetupError::Worker(format!("pulling {name}: {err}")))?;
            // The crate checks the bytes against the layer's digest.
            client.pull_blob(&pinned, layer, &mut out).await.map_err(|err| refused(name, &err))?;
            out.flush().await.map_err(|err| SetupError::Worker(format!("pulling {name}: {err}")))?;
            files.push(file);
        }
        Ok((files, total))
    }
    .await;
    let (files, fetched) = match pulled {
        Ok(pulled) => pulled,
        Err(err) => {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            return Err(err);
        }
    };
    let unpacked = mount::blocking(move || {
        let layers: Vec<&std::path::Path> = files.iter().map(std::path::PathBuf::as_path).collect();
        let size = unpack(&staging, &config, &layers, limit)?;
        let _ = std::fs::remove_dir_all(staging.join("layers"));
        Ok((size, staging))
    })
    .await;
    let held = keep(setup, &key, unpacked).await?;
    let ready = load(held).await?;
    let millis = started.elapsed().as_millis();
    setup.log.line(&format!("image: {what}, {fetched} bytes pulled and unpacked in {millis} ms")).await;
    Ok((ready, fetched))
}
