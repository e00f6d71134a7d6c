//! Probes of a server as a hostile client on the network makes them, each with the latency of
//! an ordinary request (ping) while it lasts and the server's peak memory: event-stream
//! patterns that are costly to match against long routes, many slow connections from one
//! address, listings of large definitions, and getTasks naming one large task many times.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::server::Server;

/// What a query string must escape (escaping `.` too would triple the URL's length).
const UNSAFE_IN_QUERY: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b' ').add(b'"').add(b'#').add(b'%').add(b'&').add(b'+').add(b'{').add(b'}');

/// Runs the three probes against one server; `tasks` tasks carry the long routes.
pub(crate) async fn hostile(tasks: usize, slow_connections: usize) -> anyhow::Result<()> {
    let server = Server::start_as_deployed(None, &[]).await?;
    let client = server.client();
    // An honest client on another address than the attacker's (127.0.0.1).
    let honest = reqwest::Client::builder().local_address(std::net::IpAddr::from([127, 0, 0, 2])).build()?;
    let root = server.base.trim_end_matches("/api/queue/v1").to_owned();
    let quiet = ping_for(&honest, &server.base, Duration::from_secs(3)).await;
    println!("hostile: ping with nothing else going on: {}", quiet.summary());

    // 1. 30 event streams of 50 bindings each (what fits in a URL), every pattern 126 `#`s and
    //    a last word, and tasks with 64 distinct routes of 248 characters (124 words each).
    let hostile_pattern = format!("{}zz", "#.".repeat(126));
    let bindings: Vec<_> =
        (0..50).map(|_| json!({"exchange": "task-defined", "routingKeyPattern": hostile_pattern})).collect();
    let query = serde_json::to_string(&json!({"bindings": bindings}))?;
    let query = percent_encoding::utf8_percent_encode(&query, UNSAFE_IN_QUERY).to_string();
    let mut streams = Vec::new();
    let mut refused = 0;
    for _ in 0..30 {
        let res = client.get(format!("{root}/api/events/v1/connect/?bindings={query}")).send().await?;
        if res.status().is_success() {
            streams.push(res.bytes_stream());
        } else {
            refused += 1;
        }
    }
    let words = vec!["a"; 123].join(".");
    let routes: Vec<String> = (0..64).map(|n| format!("{words}.{n:02}")).collect();
    let cpu_before = server.cpu_secs();
    let started = Instant::now();
    for _ in 0..tasks {
        let mut definition = crate::definition_with_retries("bench/hostile", 0);
        definition["routes"] = json!(routes);
        let task_id = slugid::nice();
        let res = client.put(format!("{}/task/{task_id}", server.base)).json(&definition).send().await?;
        anyhow::ensure!(res.status().is_success(), "createTask: {}", res.text().await?);
    }
    let during = ping_for(&honest, &server.base, Duration::from_secs(10)).await;
    println!(
        "hostile: 30 event streams ({refused} refused) x 50 bindings of `#.#...(126x).zz`, {tasks} tasks x 64 routes \
         of 124 words: ping {}; server CPU {:.2} s over {:.1} s",
        during.summary(),
        server.cpu_secs() - cpu_before,
        started.elapsed().as_secs_f64()
    );
    for stream in &mut streams {
        // Each stream said `ready`; nothing matches these patterns.
        let _ = tokio::time::timeout(Duration::from_millis(1), stream.next()).await;
    }
    drop(streams);

    // 2. Many slow clients: half a request head each, then nothing.
    let addr = root.trim_start_matches("http://").to_owned();
    let mut slow = Vec::new();
    for _ in 0..slow_connections {
        match tokio::net::TcpStream::connect(&addr).await {
            Ok(mut stream) => {
                let _ = stream.write_all(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n").await;
                slow.push(stream);
            }
            Err(_) => break,
        }
    }
    // Those over the address's share were answered 503 and closed: a read sees it at once.
    let mut refused = 0;
    for stream in &mut slow {
        let mut byte = [0; 1];
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(1), stream.peek(&mut byte)).await {
            refused += 1;
        }
    }
    let held = ping_for(&honest, &server.base, Duration::from_secs(3)).await;
    println!(
        "hostile: {} slow clients from one address holding half a request head ({refused} refused): ping from \
         another address {}",
        slow.len(),
        held.summary()
    );
    drop(slow);

    // 3. 40 tasks of ~9.5 MB definitions in one group, listed three times at once.
    let group = slugid::nice();
    let blob = "x".repeat(9_500_000);
    let mut large = String::new();
    for _ in 0..40 {
        let mut definition = crate::definition_with_retries("bench/hostile", 0);
        definition["taskGroupId"] = json!(group);
        definition["payload"] = json!({"blob": blob});
        large = slugid::nice();
        let res = client.put(format!("{}/task/{large}", server.base)).json(&definition).send().await?;
        anyhow::ensure!(res.status().is_success(), "createTask: {}", res.text().await?);
    }
    let rss_before = server.rss_mb();
    let list = |client: reqwest::Client, url: String| async move {
        let mut pages = 0;
        let mut token: Option<String> = None;
        loop {
            let url = match &token {
                Some(token) => format!("{url}?continuationToken={token}"),
                None => url.clone(),
            };
            let Ok(res) = client.get(&url).send().await else { return pages };
            let Ok(page) = res.json::<serde_json::Value>().await else { return pages };
            pages += 1;
            match page["continuationToken"].as_str() {
                Some(next) => token = Some(next.to_owned()),
                None => return pages,
            }
        }
    };
    let url = format!("{}/task-group/{group}/list", server.base);
    let listings: Vec<_> = (0..3).map(|_| tokio::spawn(list(client.clone(), url.clone()))).collect();
    let mut peak = rss_before;
    while listings.iter().any(|listing| !listing.is_finished()) {
        peak = peak.max(server.rss_mb());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut pages = Vec::new();
    for listing in listings {
        pages.push(listing.await?);
    }
    println!(
        "hostile: 3 listTaskGroup at once over 40 definitions of 9.5 MB: server RSS {rss_before} MB before, peak \
         {peak} MB; pages each {pages:?}"
    );

    // 4. getTasks naming one of those tasks 300 times.
    let rss_before = server.rss_mb();
    let started = Instant::now();
    let res = client.post(format!("{}/tasks", server.base)).json(&json!({"taskIds": vec![large; 300]})).send().await?;
    let status = res.status();
    let bytes = res.bytes().await?.len();
    println!(
        "hostile: getTasks of one 9.5 MB task named 300 times: {status}, {:.1} MB answered in {:.2} s; server RSS \
         {rss_before} MB before, {} MB after",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        server.rss_mb()
    );
    server.stop().await;
    Ok(())
}

/// Ping latencies over a stretch of time.
struct Pings(Vec<Duration>, usize);

impl Pings {
    fn summary(&self) -> String {
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let at = |q: f64| sorted.get(((sorted.len() as f64 - 1.0) * q) as usize).copied().unwrap_or_default();
        format!(
            "{} answered, {} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            sorted.len(),
            self.1,
            at(0.5).as_secs_f64() * 1000.0,
            at(0.99).as_secs_f64() * 1000.0,
            sorted.last().copied().unwrap_or_default().as_secs_f64() * 1000.0
        )
    }
}

/// Pings one after another for `stretch` (each given at most 10 s).
async fn ping_for(client: &reqwest::Client, base: &str, stretch: Duration) -> Pings {
    let end = Instant::now() + stretch;
    let (mut times, mut failed) = (Vec::new(), 0);
    while Instant::now() < end {
        let sent = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(10), client.get(format!("{base}/ping")).send()).await;
        match answer {
            Ok(Ok(res)) if res.status().is_success() => times.push(sent.elapsed()),
            _ => failed += 1,
        }
    }
    Pings(times, failed)
}
