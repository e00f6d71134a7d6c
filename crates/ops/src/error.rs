//! What the store can fail with, and how each database driver's errors map onto it (with
//! `row/drivers.rs`, all this crate knows of a driver, each behind its backend's feature).

/// What the store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The rules refused the command (maps to 400/404/409).
    #[error(transparent)]
    Rejected(#[from] shoal_engine::Rejection),
    /// The database cannot be reached or is shutting down (503); the command may be retried.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The transaction lost a race to another (a deadlock, a serialization failure, a row
    /// inserted first, a database busy with another writer): run again, it may succeed (503
    /// once the store's own retries are spent).
    #[error("storage conflict: {0}")]
    Conflict(String),
    /// A stored value that does not decode, or a database answer that breaks the schema's
    /// promises (500).
    #[error("corrupt storage: {0}")]
    Corrupt(String),
    /// The database refused a statement for a reason retrying will not fix (500).
    #[error("database error: {0}")]
    Database(String),
    /// A setting the store cannot use: the database URL, a schema newer than this build (500
    /// where it reaches a request; the server does not start).
    #[error("storage settings: {0}")]
    Settings(String),
    /// The store's own machinery failed: a thread that did not start, an operation dropped
    /// unanswered, a value that could not be encoded (500).
    #[error("storage failure: {0}")]
    Internal(String),
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> StoreError {
        let code = match &err {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.code),
            _ => None,
        };
        match code {
            // Another connection holds the lock (the checkpointer, a reader's recovery):
            // retrying can succeed.
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Conflict(err.to_string())
            }
            Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::DiskFull) => {
                StoreError::Unavailable(err.to_string())
            }
            _ => StoreError::Database(err.to_string()),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for StoreError {
    fn from(err: tokio_postgres::Error) -> StoreError {
        // Lost connections, a server shutting down or refusing connections: retryable (503).
        let transient = err.is_closed()
            || err.code().is_some_and(|code| {
                let code = code.code();
                code.starts_with("08") || code.starts_with("57P") || code == "53300"
            })
            || (err.code().is_none()
                && std::error::Error::source(&err).is_some_and(|source| source.is::<std::io::Error>()));
        // A race lost to another transaction: a deadlock, a serialization failure, or a row
        // another server inserted first (the operation, run again, finds it).
        let lost_race = err.code().is_some_and(|code| matches!(code.code(), "40P01" | "40001" | "23505"));
        // tokio_postgres::Error's own text is only "db error"; the server's message says what failed.
        let text = match err.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => err.to_string(),
        };
        match (transient, lost_race) {
            (true, _) => StoreError::Unavailable(text),
            (false, true) => StoreError::Conflict(text),
            (false, false) => StoreError::Database(text),
        }
    }
}
