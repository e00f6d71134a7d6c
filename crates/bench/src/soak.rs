//! A soak run: a constant create → claim → complete load whose tasks expire a minute after
//! they are created, for long enough that expiry must keep up; the database and data
//! directory should stop growing once the first tasks expire.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::server::Server;
use crate::{bytes_of, definition, http1, trivial_worker};

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_bytes(&entry.path()),
            _ => entry.metadata().map_or(0, |meta| meta.len()),
        })
        .sum()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The size of the database at `url` (tables, indexes and their dead rows; not the WAL,
/// which belongs to the whole cluster).
async fn database_bytes(url: &str) -> anyhow::Result<u64> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(connection);
    let row = client.query_one("SELECT pg_database_size(current_database())", &[]).await?;
    drop(client);
    let _ = connection.await;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

/// Runs the load for `seconds` at `rate` tasks/s, tasks expiring `expires_after` seconds after
/// they are created; prints the sizes every `every` seconds (on `database`, when given).
pub(crate) async fn soak(
    seconds: u64,
    rate: usize,
    expires_after: i64,
    every: u64,
    database: Option<&str>,
) -> anyhow::Result<()> {
    let data = crate::server::private_dir()?;
    let args: Vec<&str> = database.map(|url| vec!["--database", url]).unwrap_or_default();
    let server = Server::start(Some(data.path()), &args).await?;
    let db = data.path().join("shoal.db");
    let completed = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (base, completed, timings) = (server.base.clone(), Arc::clone(&completed), Arc::default());
        workers.spawn(trivial_worker(base, "bench%2Fsoak", format!("w{w}"), 8, completed, usize::MAX, timings));
    }
    let mut conn = http1::Conn::open(&server.base).await?;
    let started = Instant::now();
    let mut created = 0usize;
    let mut next_report = Duration::from_secs(every);
    let tick = Duration::from_millis(100);
    let per_tick = (rate / 10).max(1);
    println!("soak: {rate} tasks/s for {seconds} s, each expiring {expires_after} s after it is created");
    let db_column = if database.is_some() { "database MiB" } else { "db+wal MiB" };
    println!("{:>6} {:>9} {:>9} {:>12} {:>14}", "secs", "created", "done", db_column, "data dir MiB");
    while started.elapsed() < Duration::from_secs(seconds) {
        let now = crate::now();
        let mut body: Value = definition("bench/soak");
        body["deadline"] = Value::from(now.plus_secs(expires_after).to_string());
        body["expires"] = body["deadline"].clone();
        let body = hyper::body::Bytes::from(bytes_of(&body)?);
        for _ in 0..per_tick {
            let answer = conn.send("PUT", &format!("/task/{}", slugid::nice()), body.clone()).await?;
            anyhow::ensure!(
                (200..300).contains(&answer.status),
                "createTask: {}",
                String::from_utf8_lossy(&answer.body)
            );
            created += 1;
        }
        if let Some(res) = workers.try_join_next() {
            res??;
        }
        if started.elapsed() >= next_report {
            let wal = data.path().join("shoal.db-wal");
            let db_bytes = match database {
                Some(url) => database_bytes(url).await?,
                None => std::fs::metadata(&db).map_or(0, |m| m.len()) + std::fs::metadata(&wal).map_or(0, |m| m.len()),
            };
            println!(
                "{:>6} {:>9} {:>9} {:>12.1} {:>14.1}",
                started.elapsed().as_secs(),
                created,
                completed.load(Ordering::Relaxed),
                mib(db_bytes),
                mib(dir_bytes(data.path()))
            );
            next_report += Duration::from_secs(every);
        }
        let target = tick.mul_f64((created / per_tick) as f64);
        if let Some(wait) = target.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    workers.abort_all();
    server.stop().await;
    Ok(())
}
