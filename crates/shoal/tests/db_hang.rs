//! A PostgreSQL database that hangs (its connections open, nothing answered): requests fail
//! with 503 after the server's database timeout, and work again once it answers. (Its own
//! test binary: `db_outage` stops the cluster its binary shares.)

#[path = "../../store/tests/support/postgres.rs"]
mod pg;
mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_get_503_after_the_database_timeout_while_it_hangs_and_work_again_after() {
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let proxy = pg::Stall::start(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--database", &proxy.url, "--database-timeout", "1"];
    let (_server, root) = support::start_server(dir.path(), &args).await;
    let client = support::client(&root);
    let before = slugid::nice();
    client
        .create_task(&before, &support::plain_task("outage/linux"))
        .await
        .expect("created while the database answers");

    proxy.stalled.send_replace(true);
    // The guard only turns requests that wait for as long as the database does into a failure.
    let http = reqwest::Client::new();
    let refused = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let during = slugid::nice();
        let url = format!("{root}/api/queue/v1/task/{during}");
        let created = support::signed(&http, reqwest::Method::PUT, &url, Some(&support::plain_task("outage/linux")))
            .send()
            .await
            .unwrap();
        let read = http.get(format!("{root}/api/queue/v1/task/{before}/status")).send().await.unwrap();
        (created, read)
    });
    let (created, read) = refused.await.expect("requests waited for a database that does not answer");
    assert_eq!(created.status().as_u16(), 503, "a write while the database hangs");
    let body: serde_json::Value = created.json().await.unwrap();
    assert_eq!(body["code"], "ServiceUnavailable", "{body}");
    assert_eq!(read.status().as_u16(), 503, "a read while the database hangs");

    proxy.stalled.send_replace(false);
    // The official clients retry a 503; so does this one.
    let status = client.task_status(&before).await.expect("reads work again");
    assert_eq!(status.task_id.to_string(), before);
    client.create_task(&slugid::nice(), &support::plain_task("outage/linux")).await.expect("writes work again");
}
