//! What a worker says of itself (Swarming's bot states and bot events): maintenance, which the
//! worker or an operator puts it in, and the events it posts.

use serde::{Deserialize, Serialize};

use super::{Termination, Worker, WorkerEvent, WorkerEventKind};
use crate::Timestamp;
use crate::rejection::Rejection;

/// Longest maintenance message or posted event message, in bytes.
pub const MAX_MESSAGE: usize = 1024;

/// Why a worker claims nothing for now, and who said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// Why.
    pub message: String,
    /// Since when.
    pub since: Timestamp,
    /// The operator who put it there; absent when the worker did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
}

/// An event a worker posts about itself (Swarming's `bot_error`, `bot_rebooting`,
/// `bot_shutdown`, `bot_log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Posted {
    /// Something went wrong on the worker.
    Error,
    /// The machine restarts.
    Rebooting,
    /// The worker exits.
    Shutdown,
    /// Anything worth keeping in its history.
    Log,
}

impl Posted {
    /// Every kind.
    pub const ALL: [Posted; 4] = [Posted::Error, Posted::Rebooting, Posted::Shutdown, Posted::Log];

    /// The name, as in the API and scopes.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Posted::Error => "error",
            Posted::Rebooting => "rebooting",
            Posted::Shutdown => "shutdown",
            Posted::Log => "log",
        }
    }

    /// The kind named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Posted> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    fn event_kind(self) -> WorkerEventKind {
        match self {
            Posted::Error => WorkerEventKind::Error,
            Posted::Rebooting => WorkerEventKind::Rebooting,
            Posted::Shutdown => WorkerEventKind::Shutdown,
            Posted::Log => WorkerEventKind::Log,
        }
    }
}

/// Checks a maintenance or event message's length; `field` names it in the error.
///
/// # Errors
/// Invalid naming `field` when it is too long.
pub fn check_message(field: &str, message: &str) -> Result<(), Rejection> {
    if message.len() > MAX_MESSAGE {
        return Err(Rejection::invalid(field, format!("must be at most {MAX_MESSAGE} bytes")));
    }
    Ok(())
}

impl Worker {
    /// Puts the worker in maintenance with `message`, or takes it out (`None`), on behalf of
    /// operator `client_id`, or of the worker itself (`None`). The worker's own word neither
    /// overrides nor ends an operator's; an operator's ends either.
    ///
    /// # Errors
    /// Invalid naming `maintenance` when the message is too long.
    pub fn maintain(
        &mut self,
        message: Option<String>,
        client_id: Option<&str>,
        now: Timestamp,
    ) -> Result<Vec<WorkerEvent>, Rejection> {
        if let Some(message) = &message {
            check_message("maintenance", message)?;
        }
        let operators = self.maintenance.as_ref().is_some_and(|held| held.client_id.is_some());
        if client_id.is_none() && operators {
            return Ok(Vec::new());
        }
        let event = |kind, detail| WorkerEvent {
            client_id: client_id.map(str::to_owned),
            detail,
            ..WorkerEvent::at(kind, now)
        };
        match message {
            Some(message) => {
                let unchanged = self
                    .maintenance
                    .as_ref()
                    .is_some_and(|held| held.message == message && held.client_id.as_deref() == client_id);
                if unchanged {
                    return Ok(Vec::new());
                }
                let since = self.maintenance.as_ref().map_or(now, |held| held.since);
                let client = client_id.map(str::to_owned);
                self.maintenance = Some(Maintenance { message: message.clone(), since, client_id: client });
                Ok(vec![event(WorkerEventKind::Maintenance, Some(message))])
            }
            None if self.maintenance.take().is_some() => Ok(vec![event(WorkerEventKind::MaintenanceEnded, None)]),
            None => Ok(Vec::new()),
        }
    }

    /// Records an event the worker posted (by client `client_id`); a shutdown says it exited.
    ///
    /// # Errors
    /// Invalid naming `message` when it is too long.
    pub fn posted(
        &mut self,
        kind: Posted,
        message: String,
        client_id: &str,
        now: Timestamp,
    ) -> Result<Vec<WorkerEvent>, Rejection> {
        check_message("message", &message)?;
        if kind == Posted::Shutdown {
            self.termination = Termination::Done { at: now };
        }
        Ok(vec![WorkerEvent {
            client_id: Some(client_id.to_owned()),
            detail: (!message.is_empty()).then_some(message),
            ..WorkerEvent::at(kind.event_kind(), now)
        }])
    }
}
