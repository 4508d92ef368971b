//! Who uses what: a fake kubelet pod-resources server (v1 `PodResourcesLister.List` on a unix
//! socket, as the kubelet serves `pod-resources/kubelet.sock`) assigns advertised IDs, replicas
//! included, to containers; `status` prints them as JSON and `/metrics` as DCGM-style labels.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use common::node::{inventory, node_files, serve, terminate, BIN};
use common::{next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::fake_pod_resources::serve_pod_resources;
use gpuhook_device_plugin::podresources::{
    self, ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};

/// Serves `resp` on `<dir>/kubelet.sock`; returns the socket path.
fn fake_pod_resources(dir: &Path, resp: ListPodResourcesResponse) -> PathBuf {
    let sock = dir.join("kubelet.sock");
    serve_pod_resources(&sock, resp);
    sock
}

fn container(name: &str, resource: &str, ids: &[String]) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        devices: vec![ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.to_vec(),
            topology: None,
        }],
    }
}

/// Pod `train` (ns `ml`) holds replica 1 of GPU 0 in container `worker`; pod `infer` (ns `web`)
/// holds replica 3 of GPU 1 and an ID of another plugin's resource; a stale replica 9.
fn assignments() -> ListPodResourcesResponse {
    let gpus = inventory().gpus;
    let (g0, g1) = (&gpus[0].uuid, &gpus[1].uuid);
    ListPodResourcesResponse {
        pod_resources: vec![
            PodResources {
                name: "train".into(),
                namespace: "ml".into(),
                containers: vec![container("worker", "nvidia.com/gpu", &[format!("{g0}::1")])],
            },
            PodResources {
                name: "infer".into(),
                namespace: "web".into(),
                containers: vec![
                    container(
                        "srv",
                        "nvidia.com/gpu",
                        &[format!("{g1}::3"), format!("{g1}::9")],
                    ),
                    container("nic", "example.com/nic", &["eth1".into()]),
                ],
            },
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_flattens_every_container_device() {
    let d = tempfile::tempdir().unwrap();
    let sock = fake_pod_resources(d.path(), assignments());
    let rows = podresources::list(&sock).await.unwrap();
    let got: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|a| {
            (
                a.resource.as_str(),
                a.pod.as_str(),
                a.namespace.as_str(),
                a.container.as_str(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(got.contains(&("example.com/nic", "infer", "web", "nic")));
    assert!(got.contains(&("nvidia.com/gpu", "train", "ml", "worker")));
    let missing = podresources::list(&d.path().join("nope.sock")).await;
    assert!(missing.is_err(), "no socket must be an error");
}

/// `GET /metrics` on `addr`: status line and body.
fn scrape(addr: &str, path: &str) -> (String, String) {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    let (head, body) = s.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_the_pod_holding_each_replica() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let pr = tempfile::tempdir().unwrap();
    let sock = fake_pod_resources(pr.path(), assignments());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let addr = free_port();
    // A fixed config name: the node name only names the node here (no API server to follow).
    let extra = [
        "--metrics-listen",
        &addr,
        "--node-name",
        "gpu-node-7",
        "--config-name",
        "x",
    ];
    let mut extra: Vec<&std::ffi::OsStr> = extra.iter().map(|s| s.as_ref()).collect();
    extra.extend(["--pod-resources-socket".as_ref(), sock.as_os_str()]);
    let plugin = serve(&cfg, &inv, dir.path(), &extra);
    let mut reg = kubelet.next_registration().await;
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 8);

    let g0 = inventory().gpus[0].uuid.clone();
    let (status, body) = scrape(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let want = format!(
        "gpuhook_device_plugin_device_allocated{{resource=\"nvidia.com/gpu\",device=\"{g0}::1\",gpu=\"0\",UUID=\"{g0}\",modelName=\"NVIDIA L20\",Hostname=\"gpu-node-7\",pod=\"train\",namespace=\"ml\",container=\"worker\"}} 1"
    );
    assert!(body.lines().any(|l| l == want), "{want}\nnot in\n{body}");
    let free = format!("device=\"{g0}::0\"");
    let free_line = body
        .lines()
        .find(|l| l.contains("_allocated{") && l.contains(&free))
        .unwrap();
    assert!(
        free_line.ends_with("pod=\"\",namespace=\"\",container=\"\"} 0"),
        "{free_line}"
    );
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("gpuhook_device_plugin_device_healthy{"))
            .count(),
        8
    );
    assert!(body.contains("gpuhook_device_plugin_pod_resources_up{Hostname=\"gpu-node-7\"} 1"));
    assert_eq!(scrape(&addr, "/other").0, "HTTP/1.1 404 Not Found");

    check_status(&cfg, &inv, &sock, dir.path(), &g0);

    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}

/// `status` beside the serving plugin: users from pod-resources, health as served.
fn check_status(cfg: &Path, inv: &Path, sock: &Path, plugin_dir: &Path, g0: &str) {
    let out = std::process::Command::new(BIN)
        .args(["status", "--config"])
        .arg(cfg)
        .arg("--inventory")
        .arg(inv)
        .arg("--pod-resources-socket")
        .arg(sock)
        .arg("--plugin-dir")
        .arg(plugin_dir)
        .args(["--node-name", "gpu-node-7"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hostname"], "gpu-node-7");
    let devs = v["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 8, "2 GPUs x 4 replicas");
    let d = devs.iter().find(|d| d["id"] == format!("{g0}::1")).unwrap();
    assert_eq!(
        d["users"],
        serde_json::json!([{"pod": "train", "namespace": "ml", "container": "worker"}])
    );
    assert_eq!(
        (d["uuid"].as_str(), d["gpu"].as_u64(), d["replica"].as_u64()),
        (Some(g0), Some(0), Some(1))
    );
    assert!(
        devs.iter().all(|d| d["healthy"] == true),
        "health as served: {devs:?}"
    );
    let stale = v["unadvertised"].as_array().unwrap();
    assert_eq!(
        stale.len(),
        1,
        "replica 9 is not advertised; the NIC isn't ours: {stale:?}"
    );
    assert!(stale[0]["device_id"].as_str().unwrap().ends_with("::9"));
}

#[test]
fn status_without_the_kubelet_reports_users_and_health_unknown() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let out = std::process::Command::new(BIN)
        .args(["status", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--pod-resources-socket")
        .arg(files.path().join("none.sock"))
        .arg("--plugin-dir")
        .arg(files.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["pod_resources_error"]
            .as_str()
            .unwrap()
            .contains("none.sock"),
        "{v}"
    );
    let devs = v["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 8);
    assert!(devs
        .iter()
        .all(|d| d["healthy"].is_null() && d["users"] == serde_json::json!([])));
}

#[test]
fn metric_label_values_are_escaped_and_users_each_get_a_series() {
    use gpuhook_device_plugin::podresources::Assignment;
    use gpuhook_device_plugin::served::HealthState;
    use gpuhook_device_plugin::usage::{prometheus, usage};
    let ad = common::advertisement(
        "nvidia.com/gpu",
        1,
        2,
        gpuhook_sharing::SharingKind::TimeSlicing,
        &[],
    );
    let mut inv = inventory();
    inv.gpus[0].uuid = common::gpu_uuid(0);
    inv.gpus[0].name = "Odd \"GPU\" \\ name".into();
    let id = format!("{}::0", common::gpu_uuid(0));
    let row = |pod: &str, c: &str| Assignment {
        resource: "nvidia.com/gpu".into(),
        device_id: id.clone(),
        pod: pod.into(),
        namespace: "ns".into(),
        container: c.into(),
    };
    let rows = [row("p", "init"), row("p", "app")];
    let u = usage("h", &ad, Some(&inv), &HealthState::default(), Ok(&rows));
    assert_eq!(u.devices[0].users.len(), 2, "init and app container");
    let text = prometheus(&u);
    assert!(
        text.contains(r#"modelName="Odd \"GPU\" \\ name""#),
        "{text}"
    );
    let series = |c: &str| {
        text.lines()
            .filter(|l| {
                l.contains(&format!("device=\"{id}\"")) && l.contains(&format!("container=\"{c}\""))
            })
            .count()
    };
    assert_eq!((series("init"), series("app")), (1, 1), "{text}");
    let gone = gpuhook_device_plugin::podresources::PodResourcesError::Timeout {
        path: "/gone.sock".into(),
    };
    let down = usage("h", &ad, Some(&inv), &HealthState::default(), Err(&gone));
    assert!(down
        .pod_resources_error
        .as_deref()
        .unwrap()
        .contains("/gone.sock"));
    assert!(prometheus(&down).contains("gpuhook_device_plugin_pod_resources_up{Hostname=\"h\"} 0"));
}
