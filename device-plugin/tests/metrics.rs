//! The metrics endpoint itself: `GET /metrics` only; at most 32 connections at once, and idle
//! connections cannot keep a scraper out (the oldest one still without a request is closed to
//! make room); reports come from the state the serving loop published, never from a config
//! read per scrape; it runs on a thread of its own (#22).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::node::node_files;
use gpuhook_device_plugin::metrics::{spawn, UsageSource, MAX_CONNECTIONS};
use gpuhook_device_plugin::run::AdSource;
use gpuhook_device_plugin::source::{ConfigName, ConfigSource, InventoryFrom};

fn request(addr: &str, head: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    let mut s = String::new();
    let _ = c.read_to_string(&mut s);
    s
}

/// Serves the endpoint for the test node's config (loaded once, as the serving loop does);
/// returns its address, the config path and the running thread. No tokio runtime here: the
/// endpoint brings its own.
fn endpoint(dir: &std::path::Path) -> (String, std::path::PathBuf, impl Drop) {
    let (cfg, inv) = node_files(dir);
    let mut source = ConfigSource::new(
        cfg.clone(),
        ConfigName::Fixed(None),
        InventoryFrom::File(inv),
    );
    let loaded = source.load().unwrap();
    let (published, loaded_rx) = tokio::sync::watch::channel(Some(Arc::new(loaded)));
    std::mem::forget(published); // the state stays published
    let (_tx, health) = tokio::sync::watch::channel(Default::default());
    std::mem::forget(_tx);
    let src = UsageSource {
        loaded: loaded_rx,
        health,
        pod_resources: dir.join("no.sock"),
        hostname: "h".into(),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (addr, cfg, spawn(listener, src).unwrap())
}

#[test]
fn only_get_metrics() {
    let files = tempfile::tempdir().unwrap();
    let (addr, _, _srv) = endpoint(files.path());
    let ok = request(&addr, "GET /metrics HTTP/1.1\r\n\r\n");
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
    let post = request(&addr, "POST /metrics HTTP/1.1\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let other = request(&addr, "GET /debug HTTP/1.1\r\n\r\n");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
}

/// 32 (and more) idle connections, renewed as they go, cannot keep a scrape out: the oldest
/// connection that sent no request yet is closed for the scraper.
#[test]
fn idle_connections_cannot_keep_a_scraper_out() {
    let files = tempfile::tempdir().unwrap();
    let (addr, _, _srv) = endpoint(files.path());
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS + 8)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..3 {
        let got = request(&addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            got.starts_with("HTTP/1.1 200 OK\r\n"),
            "scrape {i}: {got:?}"
        );
    }
    // Closed ones see EOF at once; the others stay open, fewer than the cap.
    let mut open = 0;
    for mut c in idle {
        c.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        if !matches!(c.read(&mut b), Ok(0)) {
            open += 1;
        }
    }
    assert!(open < MAX_CONNECTIONS, "{open} idle connections kept");
}

/// A scrape reads no config: the published state answers even when the config file has since
/// become invalid (the serving loop would keep serving the last good one, too).
#[test]
fn a_scrape_reads_no_config() {
    let files = tempfile::tempdir().unwrap();
    let (addr, cfg, _srv) = endpoint(files.path());
    std::fs::write(&cfg, "version: v1\nsharing: [not, valid\n").unwrap();
    let ok = request(&addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert_eq!(
        ok.matches("gpuhook_device_plugin_device_allocated{")
            .count(),
        8
    );
}
