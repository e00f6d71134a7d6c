//! A load generator's HTTP/1.1 connection: one kept-alive connection per client, driven in
//! the client's own task, so a request costs no pool lookup, no URL parsing and no wake-up
//! of a connection task. The load generator shares the machine with the server it measures:
//! through reqwest's pool it spent 66–77 µs of CPU per task on PostgreSQL runs, this way 38–50.

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper::client::conn::http1::{Connection, SendRequest, handshake};
use hyper_util::rt::TokioIo;
use shoal_client::Credentials;
use tokio::net::TcpStream;

/// One connection to a server, used by one client at a time.
pub(crate) struct Conn {
    host: String,
    prefix: String,
    /// Signs every request when set (the benchmark's root credentials, unless `--unsigned`).
    credentials: Option<Credentials>,
    sender: SendRequest<Full<Bytes>>,
    connection: Connection<TokioIo<TcpStream>, Full<Bytes>>,
    closed: bool,
    /// When the last answer came: the server closes a connection idle for its header
    /// timeout (30 s), and this one is not polled between requests to notice.
    last_used: std::time::Instant,
}

/// Idle time after which a connection is opened anew before the next request.
const MAX_IDLE: std::time::Duration = std::time::Duration::from_secs(20);

/// An answer's status and body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

impl Conn {
    /// Connects to `base` (`http://host:port/prefix`); requests go to paths under its prefix.
    pub(crate) async fn open(base: &str) -> anyhow::Result<Conn> {
        let rest = base.strip_prefix("http://").unwrap_or(base);
        Conn::connect(rest).await
    }

    async fn connect(rest: &str) -> anyhow::Result<Conn> {
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let stream = TcpStream::connect(authority).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = handshake(TokioIo::new(stream)).await?;
        let credentials = crate::root_credentials();
        Ok(Conn {
            host: authority.to_owned(),
            prefix: prefix.to_owned(),
            credentials,
            sender,
            connection,
            closed: false,
            last_used: std::time::Instant::now(),
        })
    }

    /// Whether requests are signed.
    pub(crate) fn signs(&self) -> bool {
        self.credentials.is_some()
    }

    /// Sends `method` to `path` under the prefix with `body` (JSON when not empty) and waits
    /// for the whole answer.
    pub(crate) async fn send(&mut self, method: &str, path: &str, body: Bytes) -> anyhow::Result<Answer> {
        let credentials = self.credentials.clone();
        self.send_as(credentials.as_ref(), method, path, body).await
    }

    /// [`Conn::send`] signed with `credentials` (or not at all with `None`).
    pub(crate) async fn send_as(
        &mut self,
        credentials: Option<&Credentials>,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> anyhow::Result<Answer> {
        let uri = format!("{}{path}", self.prefix);
        let mut request = Request::builder().method(method).uri(&uri).header("host", &self.host);
        if !body.is_empty() {
            request = request.header("content-type", "application/json");
        }
        if let Some(credentials) = credentials {
            let (host, port) = self.host.rsplit_once(':').unwrap_or((&self.host, "80"));
            let signed = (!body.is_empty()).then_some(("application/json", &body[..]));
            // The certificate's ext is made once per credentials, as a worker would.
            let ext = match &credentials.certificate {
                None => None,
                Some(_) => Some(credentials.ext()?.unwrap_or_default()),
            };
            let header = credentials.authorization_for(method, (host, port.parse()?), &uri, signed, ext.as_deref())?;
            request = request.header("authorization", header);
        }
        let request = request.body(Full::new(body))?;
        if self.last_used.elapsed() > MAX_IDLE {
            let credentials = self.credentials.take();
            *self = Conn::connect(&format!("{}{}", self.host, self.prefix)).await?;
            self.credentials = credentials;
        }
        let answer = self.exchange(request).await;
        self.last_used = std::time::Instant::now();
        answer
    }

    /// Sends `request` and waits for its whole answer, driving the connection meanwhile.
    async fn exchange(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
        anyhow::ensure!(!self.closed, "the server closed the connection");
        let Conn { sender, connection, closed, .. } = self;
        let mut answer = std::pin::pin!(async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>(Answer { status, body })
        });
        // The connection makes progress only while polled: drive it beside the answer.
        tokio::select! {
            biased;
            answer = &mut answer => return Ok(answer?),
            ended = &mut *connection => {
                *closed = true;
                ended?;
            }
        }
        // The server closed the connection; an answer it sent first is whole all the same.
        Ok(answer.await?)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Answers `answers` requests on one connection with their request lines, then closes it.
    async fn echo_request_lines(listener: TcpListener, answers: usize) -> anyhow::Result<()> {
        let (mut stream, _) = listener.accept().await?;
        let mut buf = Vec::new();
        for _ in 0..answers {
            let head_end = loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end + 4;
                }
                let mut chunk = [0u8; 1024];
                let n = stream.read(&mut chunk).await?;
                anyhow::ensure!(n > 0, "the client closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            };
            let head = String::from_utf8(buf.drain(..head_end).collect())?;
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(Ok(0), str::parse::<usize>)?;
            while buf.len() < length {
                let mut chunk = [0u8; 1024];
                let n = stream.read(&mut chunk).await?;
                buf.extend_from_slice(&chunk[..n]);
            }
            let body: Vec<u8> = buf.drain(..length).collect();
            let line = format!("{} {}", head.lines().next().unwrap_or_default(), String::from_utf8(body)?);
            let answer = format!("HTTP/1.1 201 Created\r\ncontent-length: {}\r\n\r\n{line}", line.len());
            stream.write_all(answer.as_bytes()).await?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn requests_share_one_connection_under_the_bases_prefix_until_the_server_closes_it() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}/api/queue/v1", listener.local_addr()?);
        // One accept only: a second connection would never be answered.
        let server = tokio::spawn(echo_request_lines(listener, 2));
        let mut conn = Conn::open(&base).await?;
        let first = conn.send("PUT", "/task/a", Bytes::from_static(b"{}")).await?;
        assert_eq!((first.status, &first.body[..]), (201, &b"PUT /api/queue/v1/task/a HTTP/1.1 {}"[..]));
        // The server closes the connection right after this answer: the answer still counts.
        let second = conn.send("POST", "/task/a/runs/0/completed", Bytes::new()).await?;
        assert_eq!(&second.body[..], b"POST /api/queue/v1/task/a/runs/0/completed HTTP/1.1 ");
        server.await??;
        assert!(conn.send("POST", "/claim-work/q", Bytes::new()).await.is_err());
        Ok(())
    }
}
