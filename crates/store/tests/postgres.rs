//! The PostgreSQL backend against a real cluster: schema migrations.

mod support;

use shoal_store::{PgConfig, PgPool, StoreError, migrate_postgres};
use support::postgres::fresh_database;

#[test]
fn servers_starting_at_once_migrate_exactly_once() {
    let url = fresh_database();
    let servers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PgPool::open(&PgConfig::new(&url)).expect("open"))
        })
        .collect();
    for server in servers {
        let pool = server.join().expect("no panic");
        assert_eq!(pool.schema_version().unwrap(), shoal_store::PG_SCHEMA_VERSION);
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows: i64 = client.query_one("SELECT count(*) FROM shoal_schema", &[]).unwrap().get(0);
    assert_eq!(rows, 1, "one version row");
    assert_eq!(migrate_postgres(&url).unwrap(), 0, "nothing left to apply");
}

#[test]
fn a_database_from_a_newer_shoal_is_refused() {
    let url = fresh_database();
    assert_eq!(migrate_postgres(&url).unwrap(), shoal_store::PG_SCHEMA_VERSION);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client.batch_execute("UPDATE shoal_schema SET version = version + 1").unwrap();
    let Err(err) = PgPool::open(&PgConfig::new(&url)) else { panic!("refused") };
    assert!(err.to_string().contains("newer than this Shoal knows"), "{err}");
}

#[test]
fn an_unreachable_database_is_unavailable() {
    // Port 1 on loopback refuses connections.
    let mut config = PgConfig::new("postgres://shoal@127.0.0.1:1/shoal");
    config.connect_timeout = std::time::Duration::from_millis(300);
    let Err(err) = PgPool::open(&config) else { panic!("refused") };
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}
