//! The PostgreSQL backend: many stateless servers on one database.
//!
//! Work in progress (issue 5): the schema, its migrations and the connection pool are here;
//! the operations are not yet, so [`crate::Store`] has no PostgreSQL variant and the server
//! does not accept a PostgreSQL URL. See ARCHITECTURE.md for the plan.

mod schema;

use std::time::Duration;

use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use crate::StoreError;

/// The schema version this build migrates databases to.
pub const PG_SCHEMA_VERSION: usize = schema::MIGRATIONS.len();

/// Settings of the PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// `postgres://user[:password]@host[:port]/database[?options]`.
    pub url: String,
    /// Most connections this server keeps open.
    pub max_connections: u32,
    /// How long a request waits for a connection before failing as unavailable.
    pub connect_timeout: Duration,
}

impl PgConfig {
    /// Settings for `url` with the defaults.
    #[must_use]
    pub fn new(url: &str) -> PgConfig {
        PgConfig { url: url.to_owned(), max_connections: 32, connect_timeout: Duration::from_secs(5) }
    }

    fn client_config(&self) -> Result<postgres::Config, StoreError> {
        self.url.parse().map_err(|err| {
            StoreError::Other(format!("database: must be a postgres://user@host:port/database URL ({err})"))
        })
    }

    fn manager(&self) -> Result<PostgresConnectionManager<NoTls>, StoreError> {
        Ok(PostgresConnectionManager::new(self.client_config()?, NoTls))
    }
}

type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;

/// A pool of connections to one PostgreSQL database whose schema is current.
#[derive(Clone)]
pub struct PgPool {
    pool: Pool,
}

impl PgPool {
    /// Connects and brings the schema up to date (waiting for another server doing the same).
    ///
    /// # Errors
    /// Unavailable when the database cannot be reached; Other for a bad URL or a failed migration.
    pub fn open(config: &PgConfig) -> Result<PgPool, StoreError> {
        let pool = r2d2::Pool::builder()
            .max_size(config.max_connections)
            .min_idle(Some(0))
            .connection_timeout(config.connect_timeout)
            .build_unchecked(config.manager()?);
        let mut client = pool.get().map_err(unavailable)?;
        let applied = schema::migrate(&mut *client)?;
        tracing::info!(applied, version = schema::MIGRATIONS.len(), "database schema is current");
        drop(client);
        Ok(PgPool { pool })
    }

    /// The schema version the database is at.
    ///
    /// # Errors
    /// Unavailable when the database cannot be reached.
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        let row = self.get()?.query_one("SELECT version FROM shoal_schema", &[])?;
        Ok(row.get::<_, i32>(0) as usize)
    }

    /// A connection from the pool.
    fn get(&self) -> Result<r2d2::PooledConnection<PostgresConnectionManager<NoTls>>, StoreError> {
        self.pool.get().map_err(unavailable)
    }
}

/// Applies pending migrations to the database at `url` (`shoal migrate`); returns how many.
///
/// # Errors
/// As [`PgPool::open`].
pub fn migrate(url: &str) -> Result<usize, StoreError> {
    let mut client = PgConfig::new(url).client_config()?.connect(NoTls)?;
    schema::migrate(&mut client)
}

fn unavailable(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("database unreachable: {err}"))
}

impl From<postgres::Error> for StoreError {
    fn from(err: postgres::Error) -> StoreError {
        // Lost connections, a server shutting down or refusing connections: retryable (503).
        let transient = err.is_closed()
            || err.code().is_some_and(|code| {
                let code = code.code();
                code.starts_with("08") || code.starts_with("57P") || code == "53300"
            })
            || (err.code().is_none()
                && std::error::Error::source(&err).is_some_and(|source| source.is::<std::io::Error>()));
        if transient { StoreError::Unavailable(err.to_string()) } else { StoreError::Other(err.to_string()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_name_the_field() {
        let Err(err) = PgConfig::new("mysql://nope").manager() else { panic!("refused") };
        assert!(err.to_string().contains("database: must be a postgres://"), "{err}");
    }
}
