//! Git repositories served over git's smart HTTP protocol on loopback, as a forge serves
//! them: each request handed to `git http-backend` (CGI), as a web server would.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncWriteExt;

/// A server of the bare repositories under a directory.
pub(crate) struct GitServer {
    /// `http://127.0.0.1:<port>`.
    pub(crate) url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the bare repositories under `root` (`<root>/<owner>/<name>.git`).
pub(crate) async fn serve(root: &Path) -> GitServer {
    let app = axum::Router::new().fallback(handle).with_state(root.to_path_buf());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    GitServer { url, task }
}

async fn handle(State(root): State<PathBuf>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut backend = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or_default())
        .env("REQUEST_METHOD", method.as_str())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = backend.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let output = backend.wait_with_output().await.unwrap();
    let out = output.stdout;
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").map(|at| (at, 4));
    let split = split.or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2)));
    let Some((at, gap)) = split else { return StatusCode::INTERNAL_SERVER_ERROR.into_response() };
    let mut status = StatusCode::OK;
    let mut response = axum::http::Response::builder();
    for line in String::from_utf8_lossy(&out[..at]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        if name.eq_ignore_ascii_case("status") {
            let code = value.trim().split(' ').next().and_then(|code| code.parse().ok());
            status = code.and_then(|code| StatusCode::from_u16(code).ok()).unwrap_or(StatusCode::OK);
        } else {
            response = response.header(name.trim(), value.trim());
        }
    }
    response.status(status).body(axum::body::Body::from(out[at + gap..].to_vec())).unwrap()
}

/// Runs git in `dir`, which must succeed; its output.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=dev", "-c", "user.email=dev@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// A repository at `<root>/<owner>/<name>.git` whose first commit on main holds `files`;
/// answers its working copy (to commit more, then [`publish`]) and the commit's id.
pub(crate) fn repository(root: &Path, owner: &str, name: &str, files: &[(&str, &str)]) -> (PathBuf, String) {
    let work = root.join("work").join(name);
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "-b", "main"]);
    let sha = commit(&work, files, "First");
    let bare = root.join(owner).join(format!("{name}.git"));
    std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
    git(root, &["clone", "--quiet", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()]);
    (work, sha)
}

/// Commits `files` in the working copy `work`; the new commit's id.
pub(crate) fn commit(work: &Path, files: &[(&str, &str)], message: &str) -> String {
    for (path, text) in files {
        std::fs::write(work.join(path), text).unwrap();
    }
    git(work, &["add", "--all"]);
    git(work, &["commit", "--quiet", "--allow-empty", "-m", message]);
    git(work, &["rev-parse", "HEAD"]).trim().to_owned()
}

/// Pushes `work`'s `refspec` to its bare repository `<root>/<owner>/<name>.git`.
pub(crate) fn publish(work: &Path, root: &Path, owner: &str, name: &str, refspec: &str) {
    let bare = root.join(owner).join(format!("{name}.git"));
    git(work, &["push", "--quiet", "--force", bare.to_str().unwrap(), refspec]);
}
