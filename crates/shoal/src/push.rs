//! `shoal push`: a push to a repository that sends no webhooks, delivered as its forge would
//! deliver it (GitHub's push event, signed with the server's webhook secret), so it is built
//! on the one path every push takes.

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::credentials::ServerAddress;

/// Flags of `shoal push`.
#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// The repository's clone URL (http or https), e.g. https://git.example.com/org/proj.git.
    repository: String,
    /// The commit pushed: its full id (40 hexadecimal digits; `git rev-parse HEAD`).
    commit: String,
    /// The branch it was pushed to.
    #[arg(long, default_value = "main")]
    branch: String,
    /// The server's github-webhook-secret.
    #[arg(long, env = "SHOAL_GITHUB_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: String,
}

/// The push event a forge sends for `commit` pushed to `branch` of the repository at `url`.
fn push_event(url: &str, commit: &str, branch: &str) -> anyhow::Result<Value> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("the repository must be an http or https URL, not {url}");
    }
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("the commit must be its full id, 40 hexadecimal digits (`git rev-parse HEAD`), not {commit}");
    }
    // The path after the host: its last two parts are the owner and the name.
    let path = url.split("://").nth(1).and_then(|rest| rest.split_once('/')).map_or("", |(_, path)| path);
    let mut parts = path.trim_end_matches('/').rsplit('/');
    let name = parts.next().unwrap_or_default().trim_end_matches(".git");
    let owner = parts.next().unwrap_or_default();
    if name.is_empty() || owner.is_empty() {
        bail!("the repository URL must end in <owner>/<name>, as {url} does not");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "shoal".to_owned());
    Ok(json!({
        "ref": format!("refs/heads/{branch}"),
        "before": "0000000000000000000000000000000000000001",
        "after": commit.to_ascii_lowercase(),
        "repository": {
            "name": name,
            "full_name": format!("{owner}/{name}"),
            "owner": {"name": owner, "login": owner},
            "clone_url": url,
            "html_url": url.trim_end_matches(".git"),
            "default_branch": branch,
        },
        "pusher": {"name": user},
        "sender": {"login": user},
        "head_commit": {"id": commit.to_ascii_lowercase(), "message": ""},
    }))
}

/// Delivers the push and prints the build it made: its task group and state, or its error.
pub(crate) async fn push(args: PushArgs) -> anyhow::Result<()> {
    let event = push_event(&args.repository, &args.commit, &args.branch)?;
    let client = args.address.client()?;
    let answer = client.deliver_webhook("push", &event, &args.webhook_secret).await.context("delivering the push")?;
    let build = &answer["build"];
    if build.is_null() {
        println!("{}", answer["message"].as_str().unwrap_or("no build"));
        return Ok(());
    }
    println!("{}\t{}", build["taskGroupId"].as_str().unwrap_or("-"), build["state"].as_str().unwrap_or("-"));
    if let Some(error) = build["error"].as_str() {
        bail!("the push made no tasks: {error}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_is_described_as_a_forge_would() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let event = push_event("http://127.0.0.1:3000/org/proj.git", sha, "main").unwrap();
        assert_eq!((event["ref"].as_str(), event["after"].as_str()), (Some("refs/heads/main"), Some(sha)));
        assert_eq!(event["repository"]["full_name"], "org/proj");
        for (url, commit, says) in [
            ("file:///srv/proj.git", sha, "http or https"),
            ("http://host/org/proj.git", "HEAD", "40 hexadecimal"),
            ("http://host/proj.git", sha, "<owner>/<name>"),
        ] {
            let err = push_event(url, commit, "main").unwrap_err().to_string();
            assert!(err.contains(says), "{url} {commit}: {err}");
        }
    }
}
