//! Settings of the PostgreSQL backend and what every connection is opened with.

use std::time::Duration;

use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use crate::StoreError;
use crate::postgres::pool::Manager;

/// Planner settings of the pooled connections, sent when they connect (no round trip).
///
/// Every statement Shoal sends reaches its rows through a key or an index, and the writes,
/// the outbox's steps and the common reads run thousands of times a second, so each is
/// planned once per connection and that plan serves every execution (a generic plan:
/// planning each execution anew cost about a tenth of the database's CPU). The plan must
/// not scan a table whole nor hash or merge a join over one: a plan made while a fresh
/// database's tables held a few rows would keep doing so as they grow, since only an ANALYZE
/// replaces it and autovacuum's first comes a minute later (by then every report read tens
/// of thousands of rows). No JIT: it pays only for long queries, and with scans disabled a
/// query on a table without an index (the outbox's state) looks long enough to be compiled.
/// Settings in the URL's `options` come after these, so they win.
const PLANNER_SETTINGS: &str = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off \
     -c enable_hashjoin=off -c enable_mergejoin=off -c jit=off";

/// Connection options: `first`, then those `given` (which win where both set a value).
fn options_after(first: &str, given: Option<&str>) -> String {
    match given {
        Some(given) => format!("{first} {given}"),
        None => first.to_owned(),
    }
}

/// What the database lets a vanished or stuck server hold, sent on every connection.
///
/// A server machine that disappears (power, network) leaves its backends waiting on sockets
/// nobody writes to, holding their row locks and, for the publishing server, the publishing
/// lock: keepalive probes end them after ~25 s instead of the operating system's two hours,
/// and unacknowledged answers after 30 s. A transaction left idle for a minute (a server
/// process frozen mid-transaction) is ended too: Shoal's own never pause that long between
/// statements. Options in the URL come after these, so they win.
const SESSION_LIMITS: &str = "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3 \
     -c tcp_user_timeout=30000 -c idle_in_transaction_session_timeout=60s";

/// The same limits on this side of each connection: a database that vanished is noticed
/// after ~25 s of silence (or 30 s of unacknowledged requests) and its connections fail, so
/// that requests get 503 and the listener reconnects, instead of waiting on a dead socket.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// tokio-postgres' keepalive idle time when the URL names none.
const DEFAULT_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// `config` with [`SESSION_LIMITS`] and this side's limits, where the URL set none of its own.
fn with_session_limits(mut config: tokio_postgres::Config, connect_timeout: Duration) -> tokio_postgres::Config {
    let options = options_after(SESSION_LIMITS, config.get_options());
    config.options(&options).keepalives(true);
    if config.get_keepalives_idle() == DEFAULT_KEEPALIVE_IDLE {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(connect_timeout);
    }
    config
}

/// How long a request waits for the database by default: less than the 30 s after which
/// Taskcluster's clients give up on a call, so that they get a 503 they retry instead.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Settings of the PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// `postgres://user[:password]@host[:port]/database[?options]`.
    pub url: String,
    /// Most connections each of this server's two pools keeps open (writes; reads and
    /// background work), besides its one listening connection.
    pub max_connections: u32,
    /// How long a request waits for a connection before failing as unavailable.
    pub connect_timeout: Duration,
    /// How long a request waits for the database to answer before failing as unavailable
    /// (a database that hangs, or a network that went silent).
    pub request_timeout: Duration,
    /// The rules' settings.
    pub settings: crate::StoreSettings,
}

impl PgConfig {
    /// Settings for `url` with the defaults.
    #[must_use]
    pub fn new(url: &str) -> PgConfig {
        PgConfig {
            url: url.to_owned(),
            max_connections: 32,
            connect_timeout: Duration::from_secs(5),
            request_timeout: REQUEST_TIMEOUT,
            settings: crate::StoreSettings::default(),
        }
    }

    /// The URL parsed, as the asynchronous client takes it, with the [`SESSION_LIMITS`].
    pub(crate) fn parsed(&self) -> Result<tokio_postgres::Config, StoreError> {
        let config = self.url.parse().map_err(|err| {
            StoreError::Settings(format!("database: must be a postgres://user@host:port/database URL ({err})"))
        })?;
        Ok(with_session_limits(config, self.connect_timeout))
    }

    pub(crate) fn client_config(&self) -> Result<postgres::Config, StoreError> {
        self.parsed().map(postgres::Config::from)
    }

    pub(crate) fn manager(&self) -> Result<Manager, StoreError> {
        let mut config = self.client_config()?;
        let options = options_after(PLANNER_SETTINGS, config.get_options());
        config.options(&options);
        Ok(Manager(PostgresConnectionManager::new(config, NoTls)))
    }

    /// The pool of asynchronous connections the write operations run on.
    pub(crate) fn writer(&self) -> Result<deadpool_postgres::Pool, StoreError> {
        let mut config = self.parsed()?;
        config.options(options_after(PLANNER_SETTINGS, config.get_options()));
        // A connection found closed is dropped (not tested with a query per checkout: a
        // round trip per request); one that dies while idle fails its request's first
        // statement, which is then retried on another.
        let recycling = deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast };
        let manager = deadpool_postgres::Manager::from_config(config, NoTls, recycling);
        deadpool_postgres::Pool::builder(manager)
            .max_size(self.max_connections as usize)
            .wait_timeout(Some(self.connect_timeout))
            .create_timeout(Some(self.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|err| StoreError::Settings(format!("database pool: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_in_the_url_come_after_the_planner_settings_so_they_win() {
        assert_eq!(options_after(PLANNER_SETTINGS, None), PLANNER_SETTINGS);
        let options = options_after(PLANNER_SETTINGS, Some("-c jit=on"));
        assert!(options.starts_with(PLANNER_SETTINGS) && options.ends_with(" -c jit=on"), "{options}");
    }

    #[test]
    fn connections_carry_the_session_limits_unless_the_url_sets_its_own() {
        let config = PgConfig::new("postgres://shoal@db:5432/shoal").parsed().unwrap();
        assert_eq!(config.get_options(), Some(SESSION_LIMITS));
        assert_eq!(config.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(config.get_keepalives_interval(), Some(KEEPALIVE_INTERVAL));
        assert_eq!(config.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
        assert_eq!(config.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
        let url = "postgres://shoal@db:5432/shoal?keepalives_idle=60&tcp_user_timeout=5&options=-c%20tcp_keepalives_idle%3D99";
        let config = PgConfig::new(url).parsed().unwrap();
        let options = config.get_options().unwrap();
        assert!(options.starts_with(SESSION_LIMITS) && options.ends_with(" -c tcp_keepalives_idle=99"), "{options}");
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(60));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(5)));
    }

    #[test]
    fn bad_urls_name_the_field() {
        let Err(err) = PgConfig::new("mysql://nope").manager() else { panic!("refused") };
        assert!(err.to_string().contains("database: must be a postgres://"), "{err}");
    }
}
