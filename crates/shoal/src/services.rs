//! The services' verbs: `shoal index find`, `shoal secrets get|set|list`, `shoal hooks
//! trigger`. Each speaks to a server over HTTP only, with the caller's credentials.

use std::io::Read;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::credentials::ServerAddress;

/// `shoal index …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum IndexCommand {
    /// Print the task indexed at a namespace (its taskId, rank, data and expiry) as JSON.
    Find {
        /// The namespace, e.g. project.main.build.latest.
        namespace: String,
    },
}

/// `shoal secrets …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SecretsCommand {
    /// Print a secret ({secret, expires}) as JSON.
    Get {
        /// Its name.
        name: String,
    },
    /// Set a secret to the JSON object read from standard input (never from the command line,
    /// which other users can see).
    Set {
        /// Its name.
        name: String,
        /// How long it lasts, e.g. 30d, 12h [default: 1 year].
        #[arg(long, default_value = "365d", value_parser = crate::workers::parse_duration)]
        expires_in: i64,
    },
    /// Print the secrets' names, one per line.
    List,
}

/// `shoal hooks …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum HooksCommand {
    /// Fire a hook (`<hookGroupId>/<hookId>`) with a JSON payload (default `{}`); prints the
    /// created task's id.
    Trigger {
        /// The hook, e.g. project-x/nightly.
        hook: String,
        /// The payload, as JSON.
        payload: Option<String>,
    },
}

pub(crate) async fn index(address: &ServerAddress, command: IndexCommand) -> anyhow::Result<()> {
    let client = address.client()?;
    match command {
        IndexCommand::Find { namespace } => print_json(&client.find_indexed(&namespace).await?),
    }
}

pub(crate) async fn secrets(address: &ServerAddress, command: SecretsCommand) -> anyhow::Result<()> {
    let client = address.client()?;
    match command {
        SecretsCommand::Get { name } => print_json(&client.secret(&name).await?),
        SecretsCommand::Set { name, expires_in } => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the secret from standard input")?;
            let secret: Value = serde_json::from_str(&text).context("the secret on standard input is not JSON")?;
            if !secret.is_object() {
                bail!("the secret must be a JSON object");
            }
            let expires = shoal_client::now().plus_millis(expires_in).to_string();
            client.set_secret(&name, &secret, &expires).await?;
            Ok(())
        }
        SecretsCommand::List => {
            for name in client.secret_names().await? {
                println!("{name}");
            }
            Ok(())
        }
    }
}

pub(crate) async fn hooks(address: &ServerAddress, command: HooksCommand) -> anyhow::Result<()> {
    let client = address.client()?;
    match command {
        HooksCommand::Trigger { hook, payload } => {
            let Some((group, id)) = hook.split_once('/') else {
                bail!("the hook must be <hookGroupId>/<hookId>, e.g. project-x/nightly");
            };
            let payload: Value = match payload {
                Some(text) => serde_json::from_str(&text).context("the payload is not JSON")?,
                None => Value::Object(Default::default()),
            };
            let answer = client.trigger_hook(group, id, &payload).await?;
            match answer["taskId"].as_str() {
                Some(task_id) => println!("{task_id}"),
                None => eprintln!("the hook declined to create a task"),
            }
            Ok(())
        }
    }
}

fn print_json(value: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
