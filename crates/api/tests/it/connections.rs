//! Connections as a hostile network makes them: slow request heads, stalled bodies, more
//! connections than the server takes.

use std::time::Duration;

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Settings, TestApp};

fn limits(header_ms: u64, body_ms: u64, max_connections: usize) -> shoal_api::ConnectionLimits {
    shoal_api::ConnectionLimits {
        header_timeout: Duration::from_millis(header_ms),
        body_timeout: Duration::from_millis(body_ms),
        max_connections,
    }
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.root.trim_start_matches("http://")).await.unwrap()
}

/// Everything the server sends until it closes the connection (a guard ends a hang: the
/// server closing it is what is asserted).
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the server left the connection open");
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn a_slow_request_head_is_closed_while_others_are_served() {
    let app = TestApp::with(Settings { limits: limits(300, 60_000, 64), ..Settings::default() }).await;
    let mut slow = connect(&app).await;
    // Half a request head, then nothing (a slowloris client).
    slow.write_all(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let idle = connect(&app).await;
    let (status, _) = app.get("/ping").await;
    assert_eq!(status, StatusCode::OK, "a normal client is served meanwhile");
    let answer = until_closed(&mut slow).await;
    assert!(!answer.contains("200 OK"), "the half-sent request was never served: {answer}");
    drop(idle);
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_at_once() {
    let app = TestApp::with(Settings { limits: limits(60_000, 60_000, 2), ..Settings::default() }).await;
    let (_first, _second) = (connect(&app).await, connect(&app).await);
    let mut third = connect(&app).await;
    let answer = until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many open connections"), "{answer}");
}

#[tokio::test]
async fn a_stalled_body_is_cut_off() {
    let app = TestApp::with(Settings { limits: limits(60_000, 300, 64), ..Settings::default() }).await;
    let mut stream = connect(&app).await;
    let head = "PUT /api/queue/v1/task/fN1S_sG4TTu5SNmTb0Xd6A HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
                content-length: 1000\r\nconnection: close\r\n\r\n{\"taskQueueId\": ";
    stream.write_all(head.as_bytes()).await.unwrap();
    // The rest of the body never comes.
    let answer = until_closed(&mut stream).await;
    assert!(!answer.starts_with("HTTP/1.1 200"), "a body that stopped is not taken: {answer}");
    let (status, _) = app.get("/ping").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let app = TestApp::with(Settings { limits: limits(300, 60_000, 64), ..Settings::default() }).await;
    let mut stream = connect(&app).await;
    stream.write_all(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    // The answer comes, then the connection stays open for a next request that never comes.
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
