//! The pool of blocking connections that reads and the background loops use.

use std::sync::Arc;

use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use crate::StoreError;
use crate::postgres::config::PgConfig;
use crate::postgres::{schema, unavailable};

type Pool = r2d2::Pool<Manager>;

/// A blocking connection that prepares each statement once (a round trip, and the
/// server's parsing and planning, saved on every later use).
pub(crate) struct PgConn {
    pub(crate) client: postgres::Client,
    statements: std::collections::HashMap<String, postgres::Statement>,
    /// Set when a request on it failed for want of the database: the pool drops it.
    pub(crate) broken: bool,
}

impl PgConn {
    pub(crate) fn new(client: postgres::Client) -> PgConn {
        PgConn { client, statements: std::collections::HashMap::new(), broken: false }
    }

    /// The statement for `sql`, prepared on this connection the first time.
    pub(crate) fn prepared(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs `sql` (prepared once) outside any transaction.
    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.query(&statement, params)
    }
}

/// Makes [`PgConn`]s: PostgreSQL connections that keep their prepared statements.
pub(crate) struct Manager(pub(crate) PostgresConnectionManager<NoTls>);

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        Ok(PgConn::new(self.0.connect()?))
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), postgres::Error> {
        self.0.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.broken || self.0.has_broken(&mut conn.client)
    }
}

/// Holds the pool so that it is dropped off the async threads: each blocking client owns a
/// small runtime, which must not be shut down from inside another runtime.
struct PoolHolder(Option<Pool>);

impl Drop for PoolHolder {
    fn drop(&mut self) {
        if let Some(pool) = self.0.take() {
            let _ = std::thread::spawn(move || drop(pool)).join();
        }
    }
}

/// A pool of connections to one PostgreSQL database whose schema is current.
#[derive(Clone)]
pub struct PgPool {
    pool: Arc<PoolHolder>,
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
            // No test query per checkout (a round trip per request): a connection found
            // broken fails its request with 503 and is then discarded.
            .test_on_check_out(false)
            .build_unchecked(config.manager()?);
        let pool = PgPool { pool: Arc::new(PoolHolder(Some(pool))) };
        let mut client = pool.get()?;
        let applied = schema::migrate(&mut client.client)?;
        tracing::info!(applied, version = schema::MIGRATIONS.len(), "database schema is current");
        drop(client);
        Ok(pool)
    }

    /// The schema version the database is at.
    ///
    /// # Errors
    /// Unavailable when the database cannot be reached.
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        let row = self.get()?.client.query_one("SELECT version FROM shoal_schema", &[])?;
        Ok(row.get::<_, i32>(0) as usize)
    }

    /// How many connections the pool may hold: how many dead ones a restart can leave in it.
    pub(crate) fn max_size(&self) -> usize {
        self.pool.0.as_ref().map_or(0, |pool| pool.max_size() as usize)
    }

    /// A connection from the pool.
    pub(crate) fn get(&self) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        self.pool.0.as_ref().ok_or_else(|| unavailable("closed"))?.get().map_err(unavailable)
    }
}
