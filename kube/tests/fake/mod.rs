//! A fake API server on 127.0.0.1: records each request and answers with what a closure says.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub method: String,
    /// Path with its query.
    pub target: String,
    /// Header lines, lowercased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: status, extra header lines, body.
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);
type Handler = dyn Fn(&Seen) -> Answer + Send + Sync;

/// The server's URL and the requests it saw.
pub struct Fake {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fake {
    pub fn start(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let handler: Arc<Handler> = Arc::new(handler);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (s, h) = (s.clone(), handler.clone());
                std::thread::spawn(move || serve(conn, &s, &*h));
            }
        });
        Fake { url, seen }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(conn: std::net::TcpStream, seen: &Mutex<Vec<Seen>>, handler: &Handler) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = first.split(' ');
        let mut req = Seen {
            method: parts.next().unwrap_or_default().to_string(),
            target: parts.next().unwrap_or_default().to_string(),
            ..Seen::default()
        };
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                req.headers
                    .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        req.body = vec![0; len];
        reader.read_exact(&mut req.body).unwrap();
        seen.lock().unwrap().push(req.clone());
        let (status, headers, body) = handler(&req);
        let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&body).is_err() {
            return;
        }
    }
}

/// A JSON answer.
pub fn json(status: u16, v: &serde_json::Value) -> Answer {
    (
        status,
        vec![("Content-Type".into(), "application/json".into())],
        v.to_string().into_bytes(),
    )
}

/// A Kubernetes `Status` answer.
pub fn status(code: u16, reason: &str, message: &str) -> Answer {
    json(
        code,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code}),
    )
}
