//! A private PostgreSQL cluster for this test binary (started on first use with
//! `scripts/postgres`, stopped when the process exits) and a fresh database per caller.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// `scripts/postgres` of the tree under test: cargo names it when it runs the tests (the
/// path compiled in may be another clone's when builds share a target directory).
fn script() -> PathBuf {
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest.join("../../scripts/postgres")
}

struct Cluster {
    dir: PathBuf,
    url: String,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);

extern "C" fn stop_cluster() {
    if let Some(cluster) = CLUSTER.get() {
        let _ = std::process::Command::new(script()).arg("stop").arg(&cluster.dir).output();
        let _ = std::fs::remove_dir_all(&cluster.dir);
    }
}

fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("shoal-pg-").tempdir().expect("tempdir").keep();
        let out = std::process::Command::new(script()).arg("start").arg(&dir).output().expect("run scripts/postgres");
        assert!(out.status.success(), "starting PostgreSQL: {}", String::from_utf8_lossy(&out.stderr));
        // SAFETY: registers a plain function to run at exit; nothing else is required of it.
        unsafe { libc::atexit(stop_cluster) };
        Cluster { dir, url: String::from_utf8(out.stdout).expect("utf-8").trim().to_owned() }
    })
}

/// The URL of a new, empty database on the shared cluster.
pub(crate) fn fresh_database() -> String {
    let cluster = cluster();
    let name = format!("t{}_{}", std::process::id(), NEXT_DATABASE.fetch_add(1, Ordering::Relaxed));
    let (url, create) = (cluster.url.clone(), format!("CREATE DATABASE {name}"));
    // On a thread of its own: the blocking client must not run inside a test's runtime.
    std::thread::spawn(move || {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect to the cluster");
        admin.batch_execute(&create).expect("create database");
    })
    .join()
    .expect("no panic");
    let (base, _) = cluster.url.rsplit_once('/').expect("url with a database");
    format!("{base}/{name}")
}

/// Directory of the shared cluster, for pausing and resuming it.
#[allow(dead_code)]
pub(crate) fn cluster_dir() -> &'static std::path::Path {
    &cluster().dir
}

/// Runs `scripts/postgres <command>` on the shared cluster (`pause`, `resume`).
#[allow(dead_code)]
pub(crate) fn control(command: &str) {
    let out = std::process::Command::new(script()).arg(command).arg(cluster_dir()).output().expect("scripts/postgres");
    assert!(out.status.success(), "postgres {command}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A TCP proxy to the database that stops passing bytes on, both ways, while stalled, and
/// keeps every connection open: a database that hangs, or a network gone silent.
#[allow(dead_code)]
pub(crate) struct Stall {
    pub(crate) url: String,
    pub(crate) stalled: tokio::sync::watch::Sender<bool>,
}

#[allow(dead_code)]
impl Stall {
    /// Starts a proxy to the database at `url`; connect to its `url` instead.
    pub(crate) async fn start(url: &str) -> Stall {
        let (base, database) = url.rsplit_once('/').unwrap();
        let (user, target) = base.rsplit_once('@').unwrap();
        let target = target.to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("{user}@{}/{database}", listener.local_addr().unwrap());
        let (stalled, watch) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else { return };
                let ((client_in, client_out), (server_in, server_out)) = (client.into_split(), server.into_split());
                tokio::spawn(Stall::pump(client_in, server_out, watch.clone()));
                tokio::spawn(Stall::pump(server_in, client_out, watch.clone()));
            }
        });
        Stall { url, stalled }
    }

    /// Passes what `from` sends on to `to`, holding it while stalled.
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut stalled: tokio::sync::watch::Receiver<bool>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if stalled.wait_for(|stalled| !*stalled).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
}
