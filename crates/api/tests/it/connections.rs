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
        max_connections_per_address: max_connections,
    }
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.root.trim_start_matches("http://")).await.unwrap()
}

/// A connection to the server from `local`, another address of the loopback range.
async fn connect_from(app: &TestApp, local: [u8; 4]) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((local, 0))).unwrap();
    socket.connect(app.root.trim_start_matches("http://").parse().unwrap()).await.unwrap()
}

/// Sends a GET of `path` and reads the answer's status line (and what came with it).
async fn status_line(stream: &mut TcpStream, path: &str) -> String {
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut received = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut received)).await;
    let n = read.expect("an answer").unwrap();
    String::from_utf8_lossy(&received[..n]).into_owned()
}

/// Reads a chunked body (after its head was read) until its last chunk.
async fn until_body_ends(stream: &mut TcpStream) {
    let mut received = Vec::new();
    let mut chunk = vec![0; 4096];
    while !received.ends_with(b"0\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut chunk)).await;
        let n = read.expect("the body to end").unwrap();
        assert!(n > 0, "closed before the last chunk");
        received.extend_from_slice(&chunk[..n]);
    }
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

#[tokio::test]
async fn one_address_at_its_share_leaves_room_for_another() {
    let settings = limits(60_000, 60_000, 64);
    let settings = shoal_api::ConnectionLimits { max_connections_per_address: 3, ..settings };
    let app = TestApp::with(Settings { limits: settings, ..Settings::default() }).await;
    let held = [connect(&app).await, connect(&app).await, connect(&app).await];
    let mut fourth = connect(&app).await;
    let answer = until_closed(&mut fourth).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("from this client address"), "{answer}");
    let mut other = connect_from(&app, [127, 0, 0, 2]).await;
    let answer = status_line(&mut other, "/api/queue/v1/ping").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "another address is served: {answer}");
    drop(held);
}

#[tokio::test]
async fn live_log_follows_and_event_streams_share_one_limit_per_address() {
    let app = TestApp::start().await;
    let task_id = crate::slugid();
    app.create(&task_id, serde_json::json!({"taskQueueId": "conn/q"})).await;
    assert_eq!(app.claim("conn/q", "w", 1).await.len(), 1);
    let follow = format!("/logs/v1/{task_id}/0?follow=1");
    let mut held = Vec::new();
    for _ in 0..32 {
        let mut stream = connect(&app).await;
        let answer = status_line(&mut stream, &follow).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(stream);
    }
    let mut over = connect(&app).await;
    let answer = status_line(&mut over, &follow).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "the 33rd follow of one address: {answer}");
    let bindings = "%7B%22bindings%22%3A%5B%7B%22exchange%22%3A%22exchange%2Ftaskcluster-queue%2Fv1%2Ftask-defined%22%2C%22routingKeyPattern%22%3A%22%23%22%7D%5D%7D";
    let mut events = connect(&app).await;
    let answer = status_line(&mut events, &format!("/api/events/v1/connect/?bindings={bindings}")).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "an event stream counts with them: {answer}");
    let mut other = connect_from(&app, [127, 0, 0, 2]).await;
    let answer = status_line(&mut other, &follow).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "another address may follow: {answer}");
    // Follows end with their run, and free their places: each body ends (its last chunk is
    // written after the follow let its place go).
    app.report(&task_id, 0, "completed").await;
    for mut stream in held {
        until_body_ends(&mut stream).await;
    }
    let mut again = connect(&app).await;
    let answer = status_line(&mut again, &format!("/api/events/v1/connect/?bindings={bindings}")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
