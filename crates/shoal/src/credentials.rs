//! Credentials on the command line: the server's root token (given, or made once and kept
//! in the data directory), and the client credentials the CLI and workers sign with.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use shoal_client::{Client, Credentials};

/// Shortest root access token accepted.
const MIN_TOKEN_LEN: usize = 16;
/// Where a server keeps the root token it made, under its data directory.
pub(crate) const ROOT_TOKEN_FILE: &str = "root-access-token";

/// A secret from the settings: never shown by `Debug`, so never in a log.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct Secret(pub(crate) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Secret, Self::Err> {
        Ok(Secret(text.to_owned()))
    }
}

/// Checks a configured root token.
pub(crate) fn check_root_token(token: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        token.len() >= MIN_TOKEN_LEN && token.bytes().all(|b| b.is_ascii_graphic()),
        // The setting's key is put before this by the settings' check.
        "must be at least {MIN_TOKEN_LEN} printable characters without spaces"
    );
    Ok(())
}

/// The root client's access token: `configured`, or the one kept under `data_dir` (made,
/// readable only by this user, on first start). Says where it is kept, never what it is.
pub(crate) fn root_access_token(
    configured: Option<&Secret>,
    data_dir: &Path,
) -> anyhow::Result<(String, Option<PathBuf>)> {
    if let Some(Secret(token)) = configured {
        return Ok((token.clone(), None));
    }
    let path = data_dir.join(ROOT_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(token) => return Ok((token.trim().to_owned(), Some(path))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    }
    std::fs::create_dir_all(data_dir).with_context(|| format!("making {}", data_dir.display()))?;
    let token = shoal_service::auth::new_secret();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(file, "{token}").with_context(|| format!("writing {}", path.display()))?;
    Ok((token, Some(path)))
}

/// Where a server is and who calls it: Taskcluster's variables, or flags.
#[derive(Clone, clap::Args)]
pub(crate) struct ServerAddress {
    /// The server's root URL [default: TASKCLUSTER_ROOT_URL, else http://127.0.0.1:8080].
    #[arg(long, env = "SHOAL_ROOT_URL", global = true)]
    root_url: Option<String>,
    /// Client id to sign requests with [default: anonymous].
    #[arg(long, env = "TASKCLUSTER_CLIENT_ID", global = true)]
    client_id: Option<String>,
    /// The client's access token.
    #[arg(long, env = "TASKCLUSTER_ACCESS_TOKEN", hide_env_values = true, global = true)]
    access_token: Option<String>,
    /// The certificate of temporary credentials (JSON).
    #[arg(long, env = "TASKCLUSTER_CERTIFICATE", hide_env_values = true, global = true)]
    certificate: Option<String>,
}

impl std::fmt::Debug for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAddress").field("root_url", &self.root_url).field("client_id", &self.client_id).finish()
    }
}

impl ServerAddress {
    /// The root URL, from the flag, `SHOAL_ROOT_URL`, or `TASKCLUSTER_ROOT_URL`.
    pub(crate) fn root_url(&self) -> String {
        self.root_url
            .clone()
            .or_else(|| std::env::var("TASKCLUSTER_ROOT_URL").ok().filter(|url| !url.is_empty()))
            .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned())
    }

    /// The credentials given, if any.
    pub(crate) fn credentials(&self) -> Option<Credentials> {
        let client_id = self.client_id.clone().filter(|id| !id.is_empty())?;
        Some(Credentials {
            client_id,
            access_token: self.access_token.clone().unwrap_or_default(),
            certificate: self.certificate.clone().filter(|cert| !cert.is_empty()),
        })
    }

    /// A client of the server signing with the credentials given.
    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(&self.root_url()).context("building the HTTP client")?.with_credentials(self.credentials()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_root_token_is_kept_readable_only_by_its_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (token, path) = root_access_token(None, dir.path()).unwrap();
        let path = path.unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let (again, _) = root_access_token(None, dir.path()).unwrap();
        assert_eq!(token, again, "the same token on the next start");
        let (given, kept) = root_access_token(Some(&Secret("configured-token-1234".into())), dir.path()).unwrap();
        assert_eq!((given.as_str(), kept), ("configured-token-1234", None));
        assert!(check_root_token("short").is_err());
        assert_eq!(format!("{:?}", Secret("hunter2".into())), "Secret(…)");
    }
}
