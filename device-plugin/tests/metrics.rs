//! The metrics endpoint itself: `GET /metrics` only, and at most 32 connections at once (an
//! idle flood cannot pile up tasks; scraping works again once they go).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::node::node_files;
use gpuhook_device_plugin::metrics::{serve, UsageSource};
use gpuhook_device_plugin::source::{ConfigName, ConfigSource, InventoryFrom};

fn request(addr: &str, head: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    let mut s = String::new();
    let _ = c.read_to_string(&mut s);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_get_metrics_and_at_most_32_connections() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let (_tx, health) = tokio::sync::watch::channel(Default::default());
    let src = UsageSource {
        source: ConfigSource::new(cfg, ConfigName::Fixed(None), InventoryFrom::File(inv)),
        inventory: None,
        health,
        pod_resources: files.path().join("no.sock"),
        hostname: "h".into(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, src, std::future::pending()));

    let a = addr.clone();
    let (ok, post, idle_refused, after) = tokio::task::spawn_blocking(move || {
        let ok = request(&a, "GET /metrics HTTP/1.1\r\n\r\n");
        let post = request(&a, "POST /metrics HTTP/1.1\r\n\r\n");
        let idle: Vec<TcpStream> = (0..32).map(|_| TcpStream::connect(&a).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(300));
        let refused = request(&a, "GET /metrics HTTP/1.1\r\n\r\n");
        drop(idle);
        std::thread::sleep(Duration::from_millis(300));
        (
            ok,
            post,
            refused,
            request(&a, "GET /metrics HTTP/1.1\r\n\r\n"),
        )
    })
    .await
    .unwrap();
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(
        ok.contains("gpuhook_device_plugin_pod_resources_up{Hostname=\"h\"} 0"),
        "{ok}"
    );
    assert_eq!(
        ok.matches("gpuhook_device_plugin_device_allocated{")
            .count(),
        8
    );
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    assert_eq!(idle_refused, "", "the 33rd connection is closed unanswered");
    assert!(after.starts_with("HTTP/1.1 200 OK\r\n"), "{after}");
}
