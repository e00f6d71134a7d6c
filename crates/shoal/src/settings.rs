//! The settings of `shoal server`, each declared once (config-file key, flag, variable,
//! default, rule, help line): the file's keys, the flags and the `SHOAL_*` variables are
//! made from [`server_settings!`], and a test holds docs/settings.md's table to it.

use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use shoal_bus::{AmqpBus, Bus};
use shoal_service::SizeLimits;
use shoal_store::{PgConfig, PgStore, SqliteConfig, SqliteStore, Store, StoreSettings};

use crate::credentials;

/// One setting as docs/settings.md's table shows it.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Setting {
    /// Config-file key (and flag, with `--`).
    pub(crate) key: &'static str,
    /// Environment variable.
    pub(crate) env: &'static str,
    /// The default, as docs/settings.md's table writes it.
    pub(crate) default: &'static str,
}

/// Declares the server's settings: each entry is a help line, then
/// `name: config type [flag type], env, default value, default as shown, rule;`.
macro_rules! server_settings {
    ($(
        #[doc = $doc:literal]
        $name:ident: $ty:ty [$arg:ty], $env:literal, $default:expr, $shown:literal, $check:expr;
    )+) => {
        /// Flags of `shoal server`; each overrides the same key of the config file.
        #[derive(Debug, Clone, Default, clap::Args)]
        pub(crate) struct ServerArgs {
            /// TOML file with any of the keys below (flags and SHOAL_* variables win over it).
            #[arg(long, env = "SHOAL_CONFIG")]
            pub(crate) config: Option<PathBuf>,
            $(
                #[arg(long, env = $env, help = concat!($doc, " [default: ", $shown, "]"), hide_env_values = true)]
                pub(crate) $name: Option<$arg>,
            )+
        }

        /// The settings of `shoal server`, as written in the config file; every default is
        /// local and safe.
        #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
        #[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
        pub(crate) struct ServerConfig {
            $(#[doc = $doc] pub(crate) $name: $ty,)+
        }

        impl Default for ServerConfig {
            fn default() -> ServerConfig {
                ServerConfig { $($name: $default,)+ }
            }
        }

        impl ServerConfig {
            /// Each flag or variable given replaces the file's value.
            fn merge(&mut self, args: &ServerArgs) {
                $(if let Some(value) = &args.$name {
                    self.$name = value.clone().into();
                })+
            }

            /// Each setting's rule; the error names the key.
            fn check(&self) -> anyhow::Result<()> {
                $({
                    let check: fn(&$ty) -> Result<(), String> = $check;
                    check(&self.$name).map_err(|rule| anyhow::anyhow!("{} {rule}", key(stringify!($name))))?;
                })+
                Ok(())
            }
        }

        #[cfg(test)]
        /// Every setting, in declaration order (defaults as docs/settings.md writes them, without backquotes).
        pub(crate) const SETTINGS: &[Setting] = &[$(Setting { key: stringify!($name), env: $env, default: $shown },)+];

        /// The settings whose default as shown reads as a value other than the default itself
        /// (a shown default that is words, such as "none", is not read), and how many were read.
        #[cfg(test)]
        pub(crate) fn shown_defaults_that_differ() -> (Vec<String>, usize) {
            let defaults = ServerConfig::default();
            let (mut differ, mut read) = (Vec::new(), 0);
            $(if let Some(shown) = read_shown::<$ty>($shown) {
                read += 1;
                if shown != defaults.$name {
                    differ.push(format!("{}: shown {:?}, is {:?}", stringify!($name), $shown, defaults.$name));
                }
            })+
            (differ, read)
        }
    };
}

/// A default as docs/settings.md shows it, read as a config value: `none`, a number, a size
/// (`8 GiB`) or a string; `None` for words standing for a value made at start (`<listen>`).
#[cfg(test)]
fn read_shown<T: serde::de::DeserializeOwned>(shown: &str) -> Option<T> {
    if shown == "none" || shown.starts_with("none (") {
        return serde_json::from_value(serde_json::Value::Null).ok();
    }
    if shown.contains('<') {
        return None; // words standing for a value made at start
    }
    // The worker's own size parser reads `8 GiB` (and a plain number as itself).
    let text = crate::worker::parse_size(shown).map_or_else(|_| shown.to_owned(), |bytes| bytes.to_string());
    serde_json::from_str(&text).ok().or_else(|| serde_json::from_value(serde_json::Value::String(text)).ok())
}

/// The config-file key of field `name`.
pub(crate) fn key(name: &str) -> String {
    name.replace('_', "-")
}

fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

fn within<T: PartialOrd + Display + Copy>(value: &T, low: T, high: T, unit: &str) -> Result<(), String> {
    if (low..=high).contains(value) { Ok(()) } else { Err(format!("must be {low}..={high}{unit}")) }
}

fn seconds(value: &u64, low: u64, high: u64) -> Result<(), String> {
    within(value, low, high, " seconds")
}

fn bytes(value: &u64) -> Result<(), String> {
    if *value >= 1024 { Ok(()) } else { Err("must be at least 1024 bytes".to_owned()) }
}

fn optional<T>(value: &Option<T>, check: impl Fn(&T) -> Result<(), String>) -> Result<(), String> {
    value.as_ref().map_or(Ok(()), check)
}

server_settings! {
    #[doc = "Address to listen on"]
    listen: SocketAddr [SocketAddr], "SHOAL_LISTEN", SocketAddr::from(([127, 0, 0, 1], 8080)), "127.0.0.1:8080", any;
    #[doc = "Directory for the embedded database, blobs and the root token"]
    data_dir: PathBuf [PathBuf], "SHOAL_DATA_DIR", PathBuf::from("shoal-data"), "shoal-data", any;
    #[doc = "Seconds a claim holds before the worker must reclaim"]
    claim_timeout: u64 [u64], "SHOAL_CLAIM_TIMEOUT", shoal_store::DEFAULT_CLAIM_TIMEOUT_SECS as u64, "1200",
        |secs| seconds(secs, 1, 86_400);
    #[doc = "Seconds an idle claimWork waits for work before answering empty"]
    claim_wait: u64 [u64], "SHOAL_CLAIM_WAIT", shoal_service::DEFAULT_CLAIM_WAIT.as_secs(), "20", |secs| seconds(secs, 0, 300);
    #[doc = "The URL clients reach this server at, used in the URLs it hands out"]
    root_url: Option<String> [String], "SHOAL_ROOT_URL", None, "http://<listen>", |url| optional(url, |url| {
        if url.starts_with("http://") || url.starts_with("https://") { Ok(()) } else {
            Err("must be an http:// or https:// URL".to_owned())
        }
    });
    #[doc = "Also publish every event to this AMQP 0-9-1 broker (RabbitMQ), amqp://user:pass@host:5672/%2f"]
    amqp_url: Option<String> [String], "SHOAL_AMQP_URL", None, "none", |url| optional(url, |url| {
        AmqpBus::new(url).map(drop).map_err(|err| err.to_string())
    });
    #[doc = "Keep state in this PostgreSQL database, shared with other servers (else embedded SQLite under data-dir)"]
    database: Option<String> [String], "SHOAL_DATABASE_URL", None, "none (embedded SQLite under data-dir)",
        |url| optional(url, |url| {
            if url.starts_with("postgres://") || url.starts_with("postgresql://") { Ok(()) } else {
                Err("must be a postgres:// URL (leave it out for the embedded SQLite database under data-dir)"
                    .to_owned())
            }
        });
    #[doc = "Keep artifact bytes in this S3-compatible bucket, s3://bucket/prefix (else under data-dir)"]
    blob_store: Option<String> [String], "SHOAL_BLOB_STORE", None, "none (<data-dir>/blobs)",
        |url| optional(url, |url| {
            if url.strip_prefix("s3://").is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/')) { Ok(()) } else {
                Err("must be s3://bucket or s3://bucket/prefix (leave it out for <data-dir>/blobs)".to_owned())
            }
        });
    #[doc = "Seconds a request waits for PostgreSQL to answer before failing with 503"]
    database_timeout: u64 [u64], "SHOAL_DATABASE_TIMEOUT", shoal_store::PG_REQUEST_TIMEOUT.as_secs(), "20",
        |secs| seconds(secs, 1, 600);
    #[doc = "The schedulerId of task-graph tasks (/api/scheduler/v1/)"]
    scheduler_id: String [String], "SHOAL_SCHEDULER_ID", shoal_engine::graph::DEFAULT_SCHEDULER_ID.to_owned(),
        "task-graph-scheduler", |id| {
            if shoal_engine::id::is_identifier(id) { Ok(()) } else {
                Err("must be 1 to 38 characters of [a-zA-Z0-9-_]".to_owned())
            }
        };
    #[doc = "Most client connections open at once; more are answered 503 and closed"]
    max_connections: Option<usize> [usize], "SHOAL_MAX_CONNECTIONS", None,
        "the open-descriptor limit (raised to the hard limit at start) less 256",
        |max| optional(max, |max| within(max, 16, 10_000_000, ""));
    #[doc = "Most connections one client address may hold open at once (behind a proxy, raise it to max-connections)"]
    max_connections_per_address: Option<usize> [usize], "SHOAL_MAX_CONNECTIONS_PER_ADDRESS", None,
        "a sixteenth of max-connections", |max| optional(max, |max| within(max, 1, 10_000_000, ""));
    #[doc = "Most bytes one artifact's upload may hold"]
    max_artifact_bytes: u64 [u64], "SHOAL_MAX_ARTIFACT_BYTES", SizeLimits::default().artifact_bytes, "8 GiB", bytes;
    #[doc = "Most bytes one run's artifacts may hold together"]
    max_run_bytes: u64 [u64], "SHOAL_MAX_RUN_BYTES", SizeLimits::default().run_bytes, "32 GiB", bytes;
    #[doc = "Most bytes one run's live log may hold"]
    max_log_bytes: u64 [u64], "SHOAL_MAX_LOG_BYTES", SizeLimits::default().log_bytes, "1 GiB", bytes;
    #[doc = "The root client's access token (made on first start and kept in <data-dir>/root-access-token)"]
    root_access_token: Option<credentials::Secret> [credentials::Secret], "SHOAL_ROOT_ACCESS_TOKEN", None,
        "made on first start, kept in <data-dir>/root-access-token",
        |token| optional(token, |credentials::Secret(token)| {
            credentials::check_root_token(token).map_err(|err| err.to_string())
        });
    #[doc = "Seconds a task queue's record is kept after it was last used"]
    queue_retention: u64 [u64], "SHOAL_QUEUE_RETENTION", shoal_store::DEFAULT_QUEUE_RETENTION_SECS as u64,
        "432000 (5 days)", |secs| seconds(secs, 3600, 31_536_000);
    #[doc = "Seconds a heartbeating worker may stay silent before it is marked missing and its runs end"]
    worker_dead_after: u64 [u64], "SHOAL_WORKER_DEAD_AFTER", shoal_engine::worker::DEFAULT_DEAD_AFTER_SECS as u64,
        "120", |secs| seconds(secs, 1, 86_400);
    #[doc = "The secret a forge (GitHub, Gitea, Forgejo) signs webhook deliveries to /api/github/v1/github with (none: they are refused)"]
    github_webhook_secret: Option<credentials::Secret> [credentials::Secret], "SHOAL_GITHUB_WEBHOOK_SECRET", None,
        "none (webhooks refused)", |secret| optional(secret, |credentials::Secret(secret)| {
            if secret.len() >= 16 { Ok(()) } else { Err("must be at least 16 characters".to_owned()) }
        });
    #[doc = "Seconds a completed idempotent task may stand for an identical new one"]
    dedup_window: u64 [u64], "SHOAL_DEDUP_WINDOW", shoal_engine::dedup::DEFAULT_WINDOW_SECS as u64, "604800",
        |secs| seconds(secs, 1, 31_536_000);
}

impl ServerConfig {
    /// Defaults, then the file, then environment and flags.
    pub(crate) fn resolve(args: &ServerArgs) -> anyhow::Result<ServerConfig> {
        let mut config = match &args.config {
            None => ServerConfig::default(),
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))?
            }
        };
        config.merge(args);
        config.check()?;
        Ok(config)
    }

    /// The rules' settings, the same on either backend.
    pub(crate) fn store_settings(&self) -> StoreSettings {
        // Each is range-checked far below i64::MAX.
        let signed = |secs: u64| secs as i64;
        StoreSettings {
            claim_timeout_secs: signed(self.claim_timeout),
            graph_scheduler_id: self.scheduler_id.clone(),
            queue_retention_secs: signed(self.queue_retention),
            worker_dead_after_secs: signed(self.worker_dead_after),
            dedup_window_secs: signed(self.dedup_window),
        }
    }

    /// The embedded SQLite database under the data directory, or the PostgreSQL one named.
    pub(crate) async fn open_store(&self) -> anyhow::Result<Store> {
        let Some(url) = &self.database else {
            let path = self.data_dir.join("shoal.db");
            let store = SqliteStore::open(&SqliteConfig { path: path.clone(), settings: self.store_settings() })
                .with_context(|| format!("opening the database {}", path.display()))?;
            return Ok(Store::Sqlite(store));
        };
        let pg = self.pg_config(url);
        // The PostgreSQL client blocks: connect and migrate off the async threads.
        let store = tokio::task::spawn_blocking(move || PgStore::open(&pg))
            .await
            .context("opening the database")?
            .context("opening the PostgreSQL database")?;
        Ok(Store::Postgres(store))
    }

    /// The PostgreSQL backend's settings for the database at `url`.
    pub(crate) fn pg_config(&self, url: &str) -> PgConfig {
        let mut pg = PgConfig::new(url);
        pg.request_timeout = Duration::from_secs(self.database_timeout);
        pg.settings = self.store_settings();
        pg
    }

    /// Where events are published besides the outbox's subscribers.
    pub(crate) fn bus(&self) -> anyhow::Result<Bus> {
        Ok(match &self.amqp_url {
            None => Bus::Local,
            Some(url) => Bus::Amqp(Box::new(AmqpBus::new(url).map_err(|err| anyhow::anyhow!("amqp-url: {err}"))?)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: Option<PathBuf>, listen: Option<&str>) -> ServerArgs {
        ServerArgs { config, listen: listen.map(|l| l.parse().unwrap()), claim_wait: Some(5), ..ServerArgs::default() }
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shoal.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:9000\"\ndata-dir = \"/var/lib/shoal\"\nclaim-wait = 7\n").unwrap();
        let config = ServerConfig::resolve(&args(Some(path.clone()), None)).unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/shoal"));
        assert_eq!(config.claim_wait, 5, "the flag wins over the file");
        assert_eq!(config.claim_timeout, 1200, "unset keys keep their defaults");
        let config = ServerConfig::resolve(&args(Some(path), Some("127.0.0.1:1"))).unwrap();
        assert_eq!(config.listen.port(), 1);
    }

    #[test]
    fn the_database_settings_reach_the_store() {
        let args = ServerArgs { database_timeout: Some(3), claim_timeout: Some(60), ..ServerArgs::default() };
        let pg = ServerConfig::resolve(&args).unwrap().pg_config("postgres://shoal@db/shoal");
        assert_eq!((pg.request_timeout, pg.settings.claim_timeout_secs), (Duration::from_secs(3), 60));
    }

    #[test]
    fn bad_files_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shoal.toml");
        for (line, error) in [
            ("claim-timeout = 0", "claim-timeout must be 1..=86400 seconds"),
            ("database-timeout = 0", "database-timeout must be 1..=600 seconds"),
            ("queue-retention = 60", "queue-retention must be 3600..=31536000 seconds"),
            ("database = \"mysql://x\"", "database must be a postgres:// URL"),
            ("max-log-bytes = 10", "max-log-bytes must be at least 1024 bytes"),
            ("scheduler-id = \"a b\"", "scheduler-id must be 1 to 38 characters"),
            ("colour = \"blue\"", "colour"),
            ("claim-wait = -1", "claim-wait"),
        ] {
            std::fs::write(&path, format!("{line}\n")).unwrap();
            let err = ServerConfig::resolve(&args(Some(path.clone()), None)).unwrap_err();
            assert!(format!("{err:#}").contains(error), "{line}: {err:#}");
        }
    }

    #[test]
    fn every_setting_is_a_file_key_a_flag_and_a_variable() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Probe {
            #[command(flatten)]
            args: ServerArgs,
        }
        let command = Probe::command();
        for setting in SETTINGS {
            let key = key(setting.key);
            let flag = command.get_arguments().find(|arg| arg.get_long() == Some(key.as_str()));
            let flag = flag.unwrap_or_else(|| panic!("no flag --{key}"));
            assert_eq!(flag.get_env().and_then(|env| env.to_str()), Some(setting.env), "--{key}");
            assert!(setting.env.starts_with("SHOAL_"), "{}", setting.env);
        }
        assert_eq!(command.get_arguments().count(), SETTINGS.len() + 1, "a flag without a setting");
    }

    #[test]
    fn a_refused_setting_is_named_once() {
        let config =
            ServerConfig { root_access_token: Some(credentials::Secret("short".into())), ..ServerConfig::default() };
        let refused = config.check().unwrap_err().to_string();
        assert_eq!(refused, "root-access-token must be at least 16 printable characters without spaces");
    }

    #[test]
    fn each_default_is_shown_as_it_is() {
        let (differ, read) = shown_defaults_that_differ();
        assert!(differ.is_empty(), "defaults shown otherwise than they are:\n{}", differ.join("\n"));
        // The value-like ones (numbers, sizes, addresses, names) are all read.
        assert!(read >= 12, "only {read} shown defaults read");
    }

    #[test]
    fn the_settings_doc_lists_every_setting_as_declared() {
        let table = include_str!("../../../docs/settings.md");
        let rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|line| line.starts_with("| `") && line.contains("| `--"))
            .map(|line| line.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        for setting in SETTINGS {
            let key = key(setting.key);
            let row = rows.iter().find(|row| row[0] == format!("`{key}`"));
            let row = row.unwrap_or_else(|| panic!("docs/settings.md has no row for {key}"));
            assert_eq!(row[1], format!("`--{key}`"), "{key}'s flag");
            assert_eq!(row[2], format!("`{}`", setting.env), "{key}'s variable");
            assert_eq!(row[3].replace('`', ""), setting.default, "{key}'s default");
        }
        assert_eq!(rows.len(), SETTINGS.len(), "docs/settings.md lists a setting that is not declared");
    }
}
