//! Support for `exporter_cri`: pods whose one container sleeps, started through containerd's CRI
//! as the kubelet starts them (its container labels), their host PIDs, `gpuhook-exporter` as a
//! process, and a parser of the Prometheus text it serves.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::device_plugin_cri_support::cri::Cri;
use crate::device_plugin_cri_support::kubelet::{container_config, RunOptions};

/// How long the exporter may take to show what a test waits for.
pub const WAIT: Duration = Duration::from_secs(30);

/// One running pod: its sandbox, its container and the container's host PID.
#[derive(Debug)]
pub struct Pod {
    pub name: String,
    pub sandbox: String,
    pub container: String,
    pub pid: u32,
}

/// Runs pod `namespace/name` with one container `container` that sleeps, labelled as the kubelet
/// labels it (`kuberuntime/labels.go:newContainerLabels`), and returns it once running.
pub async fn run_sleeping(cri: &mut Cri, namespace: &str, name: &str, container: &str) -> Pod {
    let mut sandbox = cri.sandbox_config(name);
    let uid = format!("uid-{name}");
    if let Some(m) = sandbox.metadata.as_mut() {
        m.namespace = namespace.into();
    }
    let pod_labels = HashMap::from([
        ("io.kubernetes.pod.name".to_string(), name.to_string()),
        ("io.kubernetes.pod.namespace".into(), namespace.into()),
        ("io.kubernetes.pod.uid".into(), uid),
    ]);
    sandbox.labels = pod_labels.clone();
    let mut config = container_config(container, "exec sleep 100000", RunOptions::default());
    config.labels.extend(pod_labels);
    config.log_path = format!("{container}_0.log");
    let (id, cid) = cri.start_pod(sandbox, config).await;
    let pid = cri.running_pid(&cid).await;
    Pod {
        name: name.into(),
        sandbox: id,
        container: cid,
        pid,
    }
}

/// StopPodSandbox + RemovePodSandbox, as the kubelet does when a pod goes.
pub async fn remove(cri: &mut Cri, pod: &Pod) {
    cri.remove_pod(&pod.sandbox).await;
}

/// `gpuhook-exporter` as the DaemonSet runs it; killed on drop.
pub struct Exporter {
    child: Child,
    pub port: u16,
    pub log: std::path::PathBuf,
}

impl Exporter {
    /// Serves the node under `driver_root` with `-k` naming pods through `cri_socket`.
    pub fn start(dir: &Path, driver_root: &Path, cri_socket: &Path) -> Exporter {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = dir.join("exporter.log");
        let child = Command::new(gpuhook_e2e::built("gpuhook-exporter"))
            .args(["-a", &format!("127.0.0.1:{port}"), "-k", "-c", "200"])
            .arg("--driver-root")
            .arg(driver_root)
            .arg("--cri-socket")
            .arg(cri_socket)
            .args(["--proc-root", "/proc", "--scrape-cache", "0"])
            .env("NODE_NAME", "e2e-node")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("exporter log"))
            .spawn()
            .expect("spawn gpuhook-exporter");
        Exporter { child, port, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET /metrics: the body of a 200 answer.
    fn metrics(&self) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_string())
    }

    /// The page once `ready` holds for it.
    pub fn wait_for(&self, ready: impl Fn(&[Series]) -> bool) -> Vec<Series> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(page) = self.metrics().map(|b| parse(&b)) {
                if ready(&page) {
                    return page;
                }
            }
            assert!(
                Instant::now() < deadline,
                "exporter not ready within {WAIT:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One series of the page.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the Prometheus text format (label values here hold no `",`).
pub fn parse(text: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (head, value) = line.rsplit_once(' ').expect("series line");
        let (name, labels) = head.split_once('{').unwrap_or((head, "}"));
        let labels = labels
            .strip_suffix('}')
            .expect("labels")
            .split("\",")
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once("=\"").expect("label");
                (k.to_string(), v.trim_end_matches('"').to_string())
            })
            .collect();
        out.push(Series {
            name: name.into(),
            labels,
            value: value.parse().expect("value"),
        });
    }
    out
}

/// The series of `name` on the device `uuid`.
pub fn on<'a>(page: &'a [Series], name: &str, uuid: &str) -> Vec<&'a Series> {
    page.iter()
        .filter(|s| s.name == name && s.label("UUID") == Some(uuid))
        .collect()
}
