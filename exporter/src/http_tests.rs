use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn counting(cache_for: Duration) -> (Arc<Endpoint>, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = Arc::clone(&n);
    let ep = Endpoint::new(
        Box::new(move || format!("page {}\n", n2.fetch_add(1, Ordering::SeqCst))),
        cache_for,
    );
    (Arc::new(ep), n)
}

#[test]
fn routes_and_the_scrape_cache() {
    let (ep, n) = counting(Duration::from_secs(60));
    assert_eq!(route(&ep, "GET /health HTTP/1.1").body.as_str(), "OK");
    assert_eq!(route(&ep, "POST /metrics HTTP/1.1").code, 405);
    assert_eq!(route(&ep, "GET /other HTTP/1.1").code, 404);
    assert_eq!(
        route(&ep, "GET /metrics?x=1 HTTP/1.1").body.as_str(),
        "page 0\n"
    );
    // Within the cache period every scrape shares one rendering.
    assert_eq!(
        route(&ep, "GET /metrics HTTP/1.1").body.as_str(),
        "page 0\n"
    );
    assert_eq!(n.load(Ordering::SeqCst), 1);
    let (ep, n) = counting(Duration::ZERO);
    route(&ep, "GET /metrics HTTP/1.1");
    route(&ep, "GET /metrics HTTP/1.1");
    assert_eq!(n.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_and_an_oversized_request_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ep, _) = counting(Duration::ZERO);
    tokio::spawn(serve(listener, ep));
    // MAX_CONNECTIONS idle connections hold every slot...
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ...so one more is closed without an answer.
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let _ = extra.write_all(b"GET /health HTTP/1.1\r\n\r\n").await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut out)).await;
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    drop(idle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A request head over MAX_REQUEST is a 400.
    let mut big = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_REQUEST)
    );
    let _ = big.write_all(head.as_bytes()).await;
    let mut out = String::new();
    let _ = big.read_to_string(&mut out).await;
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
}
