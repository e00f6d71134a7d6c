//! A PostgreSQL outage: requests fail cleanly with 503 while the database is away, and the
//! server carries on by itself once it is back. (Its own test binary: it stops the cluster
//! the binary shares.)

#[path = "../../store/tests/support/postgres.rs"]
mod pg;
mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_get_503_while_the_database_is_away_and_work_again_after() {
    let url = tokio::task::spawn_blocking(pg::fresh_database).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_server, root) = support::start_server(dir.path(), &["--database", &url]).await;
    let client = support::client(&root);
    let before = slugid::nice();
    client.create_task(&before, &support::plain_task("outage/linux")).await.expect("created while the database is up");

    tokio::task::spawn_blocking(|| pg::control("pause")).await.unwrap();
    // One plain request each (the client would retry a 503 a few times, as Taskcluster's do).
    let http = reqwest::Client::new();
    let during = slugid::nice();
    let url = format!("{root}/api/queue/v1/task/{during}");
    let refused = support::signed(&http, reqwest::Method::PUT, &url, Some(&support::plain_task("outage/linux")))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503, "refused while the database is away");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "ServiceUnavailable", "{body}");
    let refused = http.get(format!("{root}/api/queue/v1/task/{before}/status")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 503, "reads too");

    tokio::task::spawn_blocking(|| pg::control("resume")).await.unwrap();
    // The first requests after the outage find the pool's connections dead and reconnect.
    let status = client.task_status(&before).await.expect("reads work again");
    assert_eq!(status.task_id.to_string(), before);
    let after = slugid::nice();
    client.create_task(&after, &support::plain_task("outage/linux")).await.expect("writes work again");
    let err = client.task_status(&during).await.expect_err("nothing of the refused create was kept");
    assert_eq!(err.status().map(|status| status.as_u16()), Some(404), "{err}");

    // A restart nobody notices while it happens: the pooled connections die idle, and the
    // next plain reads (no client retry) are served on fresh ones rather than failing.
    let reads = |http: reqwest::Client| {
        let url = format!("{root}/api/queue/v1/task/{after}/status");
        futures_util::future::join_all((0..16).map(move |_| {
            let (http, url) = (http.clone(), url.clone());
            async move { http.get(url).send().await.unwrap().status().as_u16() }
        }))
    };
    // Many at once, so that the pool holds many connections when the database goes.
    assert!(reads(http.clone()).await.iter().all(|&status| status == 200));
    tokio::task::spawn_blocking(|| {
        pg::control("pause");
        pg::control("resume");
    })
    .await
    .unwrap();
    let statuses = reads(http.clone()).await;
    assert!(statuses.iter().all(|&status| status == 200), "reads after an unnoticed restart: {statuses:?}");
}
