//! Listening to the server's event stream (Server-Sent Events).

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use crate::{Client, ClientError, error_of};

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// `ready`, `message`, `ping` or `error`.
    pub event: String,
    /// For messages, their sequence in the server's outbox.
    pub id: Option<String>,
    /// The JSON data.
    pub data: String,
}

/// An open subscription; bindings are in place (the server said `ready`).
pub struct EventStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Client {
    /// Subscribes to the messages of `exchange` (full or short name) whose routing key matches
    /// `pattern`, for each pair; returns once the server has the bindings in place.
    ///
    /// # Errors
    /// When the server cannot be reached or refuses the bindings.
    pub async fn listen(&self, bindings: &[(String, String)]) -> Result<EventStream, ClientError> {
        let bindings: Vec<Value> = bindings
            .iter()
            .map(|(exchange, pattern)| json!({"exchange": exchange, "routingKeyPattern": pattern}))
            .collect();
        let query = json!({ "bindings": bindings }).to_string();
        let url = format!(
            "{}/api/events/v1/connect/?bindings={}",
            self.root_url,
            utf8_percent_encode(&query, NON_ALPHANUMERIC)
        );
        // A subscription lasts as long as the listener wants: no request timeout.
        let response =
            reqwest::Client::new().get(url).send().await.map_err(|err| ClientError::Transport(err.to_string()))?;
        if !response.status().is_success() {
            let status = response.status();
            let bytes = response.bytes().await.map_err(|err| ClientError::Transport(err.to_string()))?;
            return Err(error_of(status, &bytes));
        }
        let mut stream = EventStream { response, buffer: Vec::new() };
        match stream.next().await? {
            Some(event) if event.event == "ready" => Ok(stream),
            other => Err(ClientError::Decode(format!("expected the ready event, got {other:?}"))),
        }
    }
}

impl EventStream {
    /// The next event, or `None` when the server ended the stream.
    ///
    /// # Errors
    /// When the connection breaks.
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, ClientError> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|pair| pair == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.response.chunk().await.map_err(|err| ClientError::Transport(err.to_string()))? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }

    /// The next `message` event's data (`{exchange, routingKey, routes, payload}`), skipping
    /// pings; `None` when the stream ended.
    ///
    /// # Errors
    /// When the connection breaks, or the server reports this listener fell behind.
    pub async fn next_message(&mut self) -> Result<Option<Value>, ClientError> {
        while let Some(event) = self.next().await? {
            match event.event.as_str() {
                "message" => {
                    return serde_json::from_str(&event.data)
                        .map(Some)
                        .map_err(|err| ClientError::Decode(err.to_string()));
                }
                "error" => return Err(ClientError::Transport(format!("the server ended the stream: {}", event.data))),
                _ => {}
            }
        }
        Ok(None)
    }
}

/// One event block; `None` for a comment-only block.
fn parse(block: &str) -> Option<StreamEvent> {
    let mut event = StreamEvent { event: "message".into(), id: None, data: String::new() };
    let mut fields = 0;
    for line in block.lines() {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match name {
            "event" => event.event = value.to_owned(),
            "id" => event.id = Some(value.to_owned()),
            "data" => {
                if fields > 0 && !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(value);
            }
            _ => continue,
        }
        fields += 1;
    }
    (fields > 0).then_some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_into_events_and_comments_are_skipped() {
        let event = parse("event: message\nid: 7\ndata: {\"a\":1}\n\n").unwrap();
        assert_eq!(event, StreamEvent { event: "message".into(), id: Some("7".into()), data: "{\"a\":1}".into() });
        assert_eq!(parse(": keep-alive\n\n"), None);
        assert_eq!(parse("data: x\n\n").unwrap().event, "message", "message is the default event");
    }
}
