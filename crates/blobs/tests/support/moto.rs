//! moto's S3-compatible server for tests, on a free loopback port: `SHOAL_MOTO_SERVER` names
//! its program, else `moto_server` on `PATH` (`./scripts/test.sh` installs it).
// Each test binary uses some of these.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};

/// A moto server on a free loopback port, stopped when dropped.
pub(crate) struct Moto {
    child: Child,
    /// Its URL.
    pub(crate) endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts one.
pub(crate) fn moto() -> Moto {
    let program = std::env::var("SHOAL_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(&program)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| {
            panic!("{program}: {err}; install moto (`pip install 'moto[server]'`) or run ./scripts/test.sh")
        });
    let moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}") };
    // Ready when it accepts connections.
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return moto;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("moto did not start on {}", moto.endpoint);
}

impl Moto {
    /// Makes the bucket `name`.
    pub(crate) async fn create_bucket(&self, name: &str) {
        let res = reqwest::Client::new().put(format!("{}/{name}", self.endpoint)).send().await.unwrap();
        assert!(res.status().is_success(), "creating bucket {name}: {}", res.status());
    }

    /// The keys in bucket `name` under `prefix`.
    pub(crate) async fn keys(&self, name: &str, prefix: &str) -> Vec<String> {
        let url = format!("{}/{name}?list-type=2&prefix={prefix}", self.endpoint);
        let listing = reqwest::get(url).await.unwrap().text().await.unwrap();
        listing.split("<Key>").skip(1).filter_map(|rest| rest.split("</Key>").next()).map(str::to_owned).collect()
    }

    /// The variables a `shoal server` process reaches this server with.
    pub(crate) fn env(&self) -> [(&'static str, String); 4] {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}
