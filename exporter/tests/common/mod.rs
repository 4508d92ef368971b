//! A simulated node for the exporter (the mock NVML with a built-in profile in a temp dir), the
//! exporter process, and a parser of the Prometheus text it serves.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpuhook-exporter");
pub const WAIT: Duration = Duration::from_secs(20);

/// A simulated node: `lib` is the mock `libnvidia-ml.so.1` beside its profile.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub lib: PathBuf,
}

impl Node {
    pub fn new(profile: &str) -> Node {
        let mock = Path::new(BIN).with_file_name("libgpuhook_mock_nvml.so");
        assert!(
            mock.is_file(),
            "{} is missing: `cargo build -p gpuhook-mock-nvml` first",
            mock.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(&mock, &lib).unwrap();
        let text = gpuhook_sim::builtin::text(profile).expect("built-in profile");
        std::fs::write(dir.path().join("gpuhook-sim-profile.toml"), text).unwrap();
        std::fs::create_dir_all(dir.path().join("gpuhook-sim-state")).unwrap();
        Node { dir, lib }
    }

    /// Writes `gpuhook-sim-state/<name>`.
    pub fn state(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join("gpuhook-sim-state").join(name), text).unwrap();
    }

    pub fn remove_state(&self, name: &str) {
        std::fs::remove_file(self.dir.path().join("gpuhook-sim-state").join(name)).unwrap();
    }
}

/// The exporter process; killed on drop. Its stderr goes to a file (read with [`Exporter::log`]).
pub struct Exporter {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Exporter {
    pub fn start(node: &Node, extra: &[&str]) -> Exporter {
        let port = free_port();
        let log = node.dir.path().join(format!("exporter-{port}.log"));
        let child = Command::new(BIN)
            .args(["-a", &format!("127.0.0.1:{port}"), "--nvml-lib"])
            .arg(&node.lib)
            .args(extra)
            .env("NODE_NAME", "test-node")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Exporter { child, port, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path`: `(status code, body)`, or `None` when nothing answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(WAIT)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let code = out.get(9..12)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n")?.1.to_string();
        Some((code, body))
    }

    /// The metrics page once `ready` holds for it.
    pub fn wait_for(&self, ready: impl Fn(&Page) -> bool) -> Page {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some((200, body)) = self.get("/metrics") {
                let page = Page::parse(&body);
                if ready(&page) {
                    return page;
                }
            }
            assert!(
                Instant::now() < deadline,
                "exporter not ready within {WAIT:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One series: name, labels in page order, value text.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: String,
}

impl Series {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    pub fn f(&self) -> f64 {
        self.value.parse().unwrap()
    }
}

/// A parsed page: HELP and TYPE per metric, and every series.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub text: String,
    pub help: BTreeMap<String, String>,
    pub kind: BTreeMap<String, String>,
    pub series: Vec<Series>,
}

impl Page {
    pub fn parse(text: &str) -> Page {
        let mut p = Page {
            text: text.to_string(),
            ..Page::default()
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (n, h) = rest.split_once(' ').unwrap();
                p.help.insert(n.into(), h.into());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (n, t) = rest.split_once(' ').unwrap();
                p.kind.insert(n.into(), t.into());
            } else if !line.is_empty() {
                let (head, value) = line.rsplit_once(' ').unwrap();
                let (name, labels) = head.split_once('{').unwrap_or((head, "}"));
                let labels = labels.strip_suffix('}').unwrap();
                // Label values in these tests have no `",` inside.
                let labels = labels
                    .split("\",")
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        let (k, v) = l.split_once("=\"").unwrap();
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                p.series.push(Series {
                    name: name.into(),
                    labels,
                    value: value.into(),
                });
            }
        }
        p
    }

    pub fn of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Series> + 'a {
        self.series.iter().filter(move |s| s.name == name)
    }

    /// The one series of `name` whose labels include all of `with`.
    pub fn one<'a>(&'a self, name: &'a str, with: &[(&str, &str)]) -> &'a Series {
        let found: Vec<&Series> = self
            .of(name)
            .filter(|s| with.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .collect();
        assert_eq!(found.len(), 1, "{name} {with:?}: {found:#?}");
        found[0]
    }
}

/// A kubelet-made container's cgroup (systemd driver, containerd), as `/proc/<pid>/cgroup` says.
pub fn pod_cgroup(pod_uid: &str, container_id: &str) -> String {
    let uid = pod_uid.replace('-', "_");
    format!(
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice/cri-containerd-{container_id}.scope\n"
    )
}

/// Writes `<root>/<pid>/cgroup`.
pub fn fake_proc(root: &Path, pid: u32, cgroup: &str) {
    let d = root.join(pid.to_string());
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cgroup"), cgroup).unwrap();
}

/// A 64-hex container id made of one repeated digit.
pub fn cid(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

/// The exporter started in this process (collector threads and all), with `--nvml-lib` and a
/// fake `/proc` under the node's dir.
pub fn start_in_process(node: &Node, extra: &[&str]) -> gpuhook_exporter::run::State {
    use clap::Parser;
    let proc_root = node.dir.path().join("proc");
    std::fs::create_dir_all(&proc_root).unwrap();
    let mut argv: Vec<String> = vec!["gpuhook-exporter".into(), "--nvml-lib".into()];
    argv.push(node.lib.display().to_string());
    argv.extend([
        "--proc-root".into(),
        proc_root.display().to_string(),
        "-n".into(),
    ]);
    argv.extend(extra.iter().map(|s| s.to_string()));
    let args = gpuhook_exporter::cli::Args::parse_from(argv);
    gpuhook_exporter::run::start(&args).unwrap()
}

/// Names `container id → (namespace, pod, container)` as the CRI runtime would.
pub fn name_pods(state: &gpuhook_exporter::run::State, pods: &[(&str, &str, &str, &str)]) {
    let names = state.names.as_ref().expect("-k");
    let mut n = names.write().unwrap();
    for (id, ns, pod, c) in pods {
        n.insert(
            (*id).to_string(),
            gpu_mps_daemon::cri::PodRef {
                pod: (*pod).into(),
                namespace: (*ns).into(),
                container: (*c).into(),
            },
        );
    }
}

/// The page once `ready` holds.
pub fn page_when(state: &gpuhook_exporter::run::State, ready: impl Fn(&Page) -> bool) -> Page {
    let deadline = Instant::now() + WAIT;
    loop {
        let p = Page::parse(&state.page());
        if ready(&p) {
            return p;
        }
        assert!(Instant::now() < deadline, "not ready:\n{}", p.text);
        std::thread::sleep(Duration::from_millis(50));
    }
}
