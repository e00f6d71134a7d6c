//! Artifact bytes through the server: a large upload and its download, with the bytes in the
//! local directory and in an S3-compatible store (moto's server on loopback), interleaved.

use super::*;

/// A moto server on a free loopback port, stopped when dropped.
struct Moto {
    child: tokio::process::Child,
    endpoint: String,
}

async fn moto(program: &str) -> anyhow::Result<Moto> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = tokio::process::Command::new(program)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {program} (pip install 'moto[server]')"))?;
    let moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}") };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            let res = reqwest::Client::new().put(format!("{}/bench", moto.endpoint)).send().await?;
            anyhow::ensure!(res.status().is_success(), "creating the bucket: {}", res.status());
            return Ok(moto);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("moto did not start")
}

pub(crate) async fn blobs(megabytes: usize, rounds: usize, moto_program: &str) -> anyhow::Result<()> {
    let moto = moto(moto_program).await?;
    let env = [
        ("AWS_ENDPOINT_URL", moto.endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "bench".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "bench".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    let local = Server::start(None, &[]).await?;
    let s3_args = ["--max-connections-per-address", "10000000", "--blob-store", "s3://bench/shoal"];
    let s3 = Server::start_with_env(None, &s3_args, &env).await?;
    let bytes: Vec<u8> = (0..megabytes * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let mib = megabytes as f64;
    for round in 1..=rounds {
        for (name, server) in [("local directory", &local), ("S3 (moto)", &s3)] {
            let (up, down) = round_trip(server, &bytes).await?;
            println!(
                "blobs round {round}: {megabytes} MiB, {name}: upload {:.0} MiB/s ({:.0} ms), download {:.0} MiB/s ({:.0} ms)",
                mib / up,
                up * 1000.0,
                mib / down,
                down * 1000.0
            );
        }
    }
    drop(moto.child);
    local.stop().await;
    s3.stop().await;
    Ok(())
}

/// Seconds to upload `bytes` as a new artifact and to read it back whole.
async fn round_trip(server: &Server, bytes: &[u8]) -> anyhow::Result<(f64, f64)> {
    let client = server.client();
    let task_id = slugid::nice();
    let res = client.put(format!("{}/task/{task_id}", server.base)).json(&definition("bench/blobs")).send().await?;
    anyhow::ensure!(res.status().is_success(), "createTask: {}", res.text().await?);
    let claim = json!({"workerGroup": "bench", "workerId": "b", "tasks": 1});
    let res = client.post(format!("{}/claim-work/bench%2Fblobs", server.base)).json(&claim).send().await?;
    let claimed: Value = res.json().await?;
    let run_id = claimed["tasks"][0]["runId"].as_u64().context("nothing claimed")?;
    let artifact = json!({"storageType": "s3", "contentType": "application/octet-stream",
        "expires": definition("x")["deadline"]});
    let url = format!("{}/task/{task_id}/runs/{run_id}/artifacts/public/big.bin", server.base);
    let created: Value = client.post(&url).json(&artifact).send().await?.json().await?;
    let put_url = created["putUrl"].as_str().context("no putUrl")?;
    let started = Instant::now();
    let res = client.put(put_url).body(bytes.to_vec()).send().await?;
    anyhow::ensure!(res.status().is_success(), "upload: {}", res.text().await?);
    let up = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut res = reqwest::Client::new().get(&url).send().await?;
    anyhow::ensure!(res.status().is_success(), "download: {}", res.status());
    let mut n_read = 0;
    while let Some(chunk) = res.chunk().await? {
        n_read += chunk.len();
    }
    anyhow::ensure!(n_read == bytes.len(), "read {n_read} of {} bytes", bytes.len());
    Ok((up, started.elapsed().as_secs_f64()))
}
