//! The node's config label read from the API server (`GET /api/v1/nodes/<name>`, as a pod with
//! `get` on nodes does) drives the served config: a relabel switches it without a restart, a
//! failing API server keeps the last value. A fake API server plays the part over plain HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::node::{node_files, serve, terminate};
use common::{next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::node_label::{config_label, store, NodeLabelError, CONFIG_LABEL};
use gpuhook_kube::{Client as KubeApi, KubeError};

type Shared<T> = Arc<Mutex<T>>;

/// What the fake API server answers: the node's label (None: no label), or an HTTP status.
#[derive(Clone, Debug)]
enum Answer {
    Label(Option<String>),
    Status(u16),
}

/// A fake API server on 127.0.0.1 serving node `node-1`; returns its URL, the answer to change,
/// and the request lines it saw.
fn fake_api(answer: Answer) -> (String, Shared<Answer>, Shared<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(Mutex::new(answer));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (a, s) = (answer.clone(), seen.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    s.lock().unwrap().push(line.trim().to_string());
                }
            }
            s.lock().unwrap().push(first.trim().to_string());
            let (status, body) = match (&*a.lock().unwrap(), first.split(' ').nth(1)) {
                (Answer::Status(code), _) => (*code, String::from("{}")),
                (Answer::Label(l), Some("/api/v1/nodes/node-1")) => {
                    let labels = match l {
                        Some(v) => {
                            serde_json::json!({ CONFIG_LABEL: v, "kubernetes.io/os": "linux" })
                        }
                        None => serde_json::json!({ "kubernetes.io/os": "linux" }),
                    };
                    let node = serde_json::json!({"kind": "Node", "apiVersion": "v1",
                        "metadata": {"name": "node-1", "labels": labels}});
                    (200, node.to_string())
                }
                (Answer::Label(_), _) => (404, String::from(r#"{"kind":"Status","code":404}"#)),
            };
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(body.as_bytes());
        }
    });
    (url, answer, seen)
}

#[test]
fn config_label_is_read_from_the_node_object() {
    let (url, answer, seen) = fake_api(Answer::Label(Some("t4".into())));
    let api = KubeApi::loopback(&url).unwrap();
    assert_eq!(config_label(&api, "node-1").unwrap().as_deref(), Some("t4"));
    assert_eq!(seen.lock().unwrap()[0], "GET /api/v1/nodes/node-1 HTTP/1.1");
    *answer.lock().unwrap() = Answer::Label(None);
    assert_eq!(config_label(&api, "node-1").unwrap(), None, "no label");
    let missing = config_label(&api, "node-2").unwrap_err();
    assert!(
        matches!(&missing, NodeLabelError::Kube(e) if e.is_not_found()),
        "{missing:?}"
    );
    *answer.lock().unwrap() = Answer::Status(403);
    assert!(config_label(&api, "node-1").is_err(), "forbidden");
}

#[test]
fn the_service_account_token_is_sent_and_reread_each_time() {
    let (url, _, seen) = fake_api(Answer::Label(Some("t4".into())));
    let d = tempfile::tempdir().unwrap();
    let token = d.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let api = KubeApi::loopback(&url).unwrap().with_token(token.clone());
    config_label(&api, "node-1").unwrap();
    std::fs::write(&token, "rotated\n").unwrap();
    config_label(&api, "node-1").unwrap();
    let auth: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| !l.starts_with("GET"))
        .cloned()
        .collect();
    assert_eq!(
        auth,
        [
            "authorization: Bearer first",
            "authorization: Bearer rotated"
        ]
    );
}

#[test]
fn bad_inputs_are_refused_before_any_request() {
    let (url, _, seen) = fake_api(Answer::Label(None));
    let api = KubeApi::loopback(&url).unwrap();
    for bad in ["", "../secrets", "Node-1", "a/b", "n?x=1"] {
        let e = config_label(&api, bad).unwrap_err();
        assert!(
            matches!(e, NodeLabelError::Kube(KubeError::Name { .. })),
            "{bad}: {e:?}"
        );
    }
    assert!(seen.lock().unwrap().is_empty());
    let e = KubeApi::loopback("https://10.0.0.1:443").unwrap_err();
    assert!(matches!(e, KubeError::Url { .. }), "{e:?}");
}

#[test]
fn store_writes_only_changes() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("label");
    assert!(store(&p, Some("l20")).unwrap(), "first write");
    assert!(!store(&p, Some("l20")).unwrap(), "same value");
    assert!(store(&p, None).unwrap());
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "");
    assert!(!store(&p, None).unwrap());
}

/// `l20` (8 replicas) and `t4` (3 replicas, renamed) as ConfigMap keys.
fn config_dir(dir: &Path) -> std::path::PathBuf {
    let cfgs = dir.join("configs");
    std::fs::create_dir(&cfgs).unwrap();
    let ts = |replicas: u32, rename: bool| {
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: {rename}\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
        )
    };
    std::fs::write(cfgs.join("l20"), ts(8, false)).unwrap();
    std::fs::write(cfgs.join("t4"), ts(3, true)).unwrap();
    cfgs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relabelling_the_node_on_the_api_server_switches_the_config_without_restart() {
    let files = tempfile::tempdir().unwrap();
    let (_, inv) = node_files(files.path());
    let cfgs = config_dir(files.path());
    let (url, answer, _) = fake_api(Answer::Label(Some("l20".into())));
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let extra = [
        "--node-name",
        "node-1",
        "--kube-api-url",
        &url,
        "--node-label-poll-ms",
        "200",
    ];
    let extra: Vec<&std::ffi::OsStr> = extra.iter().map(|s| s.as_ref()).collect();
    let plugin = serve(&cfgs, &inv, dir.path(), &extra);
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu");
    assert_eq!(
        next_list(&mut reg, WAIT).await.devices.len(),
        16,
        "l20: 2 GPUs x 8"
    );

    *answer.lock().unwrap() = Answer::Label(Some("t4".into()));
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu.shared");
    assert_eq!(
        next_list(&mut reg, WAIT).await.devices.len(),
        6,
        "t4: 2 GPUs x 3"
    );

    // The API server fails: the last label (and config) stay.
    *answer.lock().unwrap() = Answer::Status(500);
    let quiet =
        tokio::time::timeout(Duration::from_millis(800), kubelet.registrations.recv()).await;
    assert!(quiet.is_err(), "a failing API server changed the config");
    assert!(dir.path().join("nvidia-gpu.shared.sock").exists());

    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}

/// `openssl` with `args` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is needed for the TLS test (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `<name>.crt` in `dir` (P-256, self-signed).
fn make_ca(dir: &Path, name: &str) {
    let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-subj",
            "/CN=test-ca",
            "-days",
            "2",
        ],
    );
}

/// An HTTPS server (`openssl s_server -WWW`) on 127.0.0.1 with a certificate for IP 127.0.0.1
/// signed by `ca`, serving `node-1` with label `t4`; returns the port and the server.
fn tls_api(dir: &Path) -> (String, common::node::Plugin) {
    make_ca(dir, "ca");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=kubernetes",
        ],
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.crt",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
    let www = dir.join("www/api/v1/nodes");
    std::fs::create_dir_all(&www).unwrap();
    let node = serde_json::json!({"metadata": {"name": "node-1", "labels": {CONFIG_LABEL: "t4"}}});
    std::fs::write(www.join("node-1"), node.to_string()).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let server = std::process::Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-cert",
            "../srv.crt",
            "-key",
            "../srv.key",
            "-WWW",
        ])
        .args(["-accept", &format!("127.0.0.1:{port}")])
        .current_dir(dir.join("www"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "s_server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (port, common::node::Plugin(server))
}

#[test]
fn in_cluster_https_is_verified_with_the_service_account_ca() {
    let d = tempfile::tempdir().unwrap();
    let (port, _server) = tls_api(d.path());
    let sa = d.path().join("sa");
    std::fs::create_dir(&sa).unwrap();
    std::fs::copy(d.path().join("ca.crt"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("token"), "t0ken\n").unwrap();
    let api = KubeApi::with_service_account("127.0.0.1", &port, &sa).unwrap();
    assert_eq!(config_label(&api, "node-1").unwrap().as_deref(), Some("t4"));

    // Another CA: the server's certificate is refused.
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    make_ca(&other, "ca");
    std::fs::write(other.join("token"), "t0ken\n").unwrap();
    let api = KubeApi::with_service_account("127.0.0.1", &port, &other).unwrap();
    let e = config_label(&api, "node-1").unwrap_err();
    assert!(
        matches!(e, NodeLabelError::Kube(KubeError::Transport { .. })),
        "{e:?}"
    );
}

#[test]
fn a_node_name_outside_a_cluster_is_a_clear_error() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let out = std::process::Command::new(common::node::BIN)
        .args(["serve", "--node-name", "node-1", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--plugin-dir")
        .arg(files.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("KUBERNETES_SERVICE_HOST is not set"), "{err}");
    assert_eq!(
        err.matches("KUBERNETES_SERVICE_HOST").count(),
        1,
        "cause printed once: {err}"
    );
}
