//! The shipped L20 config run for real: the built daemon on a simulated L20 node.
//!
//! Parsing and planning prove the daemon *would* accept the ConfigMap; this proves that with
//! exactly that text it brings the GPU up, applies 12 % and 5758 MiB on the control daemon (read
//! back from the simulator of `nvidia-cuda-mps-control`), reports ready on the `/readyz` the
//! DaemonSet probes, shows it in `gpu-mps-daemon status`, and cleans up on SIGTERM.
//! Only the paths differ from the DaemonSet (`--mps-root`, `--driver-root` into a temp dir) and
//! the GPU facts come from `--inventory-json` instead of NVML.

use std::path::Path;
use std::time::{Duration, Instant};

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, INVENTORY_FORMAT_VERSION,
};
use gpuhook_sim::NodeProfile;
use serde_json::Value as Json;

use super::cdi::{bundle_gpuhook, hook_paths, strings_at};
use super::live_daemon::{http_get, start, Daemon, Live};
use super::{by_kind, read, root, s, yaml_docs};

const L20_UUID: &str = "GPU-e6c1ce30-955f-10af-95b1-0a37b420ba76";

/// Bound on waiting for the daemon (the machine is small and shared); not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// A serialised inventory of the simulated L20 node whose driver root is `driver_root`.
pub fn l20_inventory(driver_root: &Path) -> Inventory {
    let p = NodeProfile::builtin("l20").expect("l20 profile");
    let gpus = p
        .gpus
        .iter()
        .map(|g| {
            let (maj, min) = g
                .compute_capability
                .split_once('.')
                .expect("cc major.minor");
            Gpu {
                index: g.index,
                minor: g.minor,
                uuid: g.uuid.clone(),
                pci_bus_id: g.pci_bus_id.clone(),
                name: g.name.clone(),
                memory_mib: g.memory_mib,
                architecture: Some(g.architecture.clone()),
                compute_capability: Some((maj.parse().unwrap(), min.parse().unwrap())),
                brand: Some(g.brand.clone()),
                mig_enabled: g.mig_mode,
                mig_devices: vec![],
            }
        })
        .collect();
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: driver_root.to_path_buf(),
        dev_root: driver_root.to_path_buf(),
        driver_version: p.driver_version.clone(),
        cuda_driver_version: Some(p.cuda_driver_version.clone()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(p.majors.nvidia_uvm),
            nvidia_caps: None,
            nvidia_caps_imex_channels: None,
        },
        gpus,
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

#[test]
fn configmap_l20_config_brings_up_the_simulated_l20_with_its_limits() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &[]) {
        return;
    }
    let cm = yaml_docs(&root().join(super::EXAMPLE).join("configmap.yaml"));
    let text = s(by_kind(&cm, "ConfigMap")[0], &["data", "l20.yaml"]);
    let (live, mut daemon) = start(text);
    wait_ready(&live, &mut daemon);
    check_metrics(&live);
    check_spec(&live);
    let g = check_status(&live);
    // SIGTERM, as kubelet sends it: clean exit, MPS root left as the hostPath had it.
    let pid = i32::try_from(daemon.0.id()).unwrap();
    check_reload(&live, pid, &g);
    check_sigterm(&live, pid, &mut daemon);
}

/// `/readyz` answers 200 (the daemon must not exit first), and `/healthz` too.
fn wait_ready(live: &Live, daemon: &mut Daemon) {
    let start = Instant::now();
    let ready = loop {
        if let Some((200, body)) = http_get(live.port, "/readyz") {
            break body;
        }
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "daemon exited:\n{}",
            live.log_text()
        );
        assert!(
            start.elapsed() < WAIT,
            "never ready; log:\n{}",
            live.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready, "ready: 1 GPU(s)\n");
    assert_eq!(http_get(live.port, "/healthz").map(|r| r.0), Some(200));
}

/// /metrics, the DaemonSet's scrape target: the control daemon is up and the GPU ready.
fn check_metrics(live: &Live) {
    let port = live.port;
    let (code, metrics) = http_get(port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "{metrics}");
    let samples = gpu_mps_daemon::metrics_parse::parse_text(&metrics).expect("/metrics parses");
    for (name, want) in [
        ("gpuhook_mps_up", 1.0),
        ("gpuhook_mps_ready", 1.0),
        ("gpuhook_mps_active_thread_ratio", 0.12),
        ("gpuhook_mps_pinned_memory_limit_bytes", 5758.0 * 1048576.0),
    ] {
        let got = samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.get("gpu").map(String::as_str) == Some("0")
                    && s.labels.get("UUID").map(String::as_str) == Some(L20_UUID)
            })
            .map(|s| s.value);
        assert_eq!(got, Some(want), "/metrics {name}:\n{metrics}");
    }
    // dcgm-exporter's modelName label, from the node inventory.
    let up = samples.iter().find(|s| s.name == "gpuhook_mps_up");
    let model = up.and_then(|s| s.labels.get("modelName"));
    assert_eq!(model.map(String::as_str), Some("NVIDIA L20"), "{metrics}");
}

/// The CDI spec, written once the GPU is ready (the writer may trail /readyz a little).
fn check_spec(live: &Live) {
    let (spec_file, mps_root, driver_root) = (&live.spec_file, &live.mps_root, &live.driver_root);
    let log_text = || live.log_text();
    let start = Instant::now();
    while !spec_file.exists() {
        assert!(start.elapsed() < WAIT, "no CDI spec; log:\n{}", log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let spec: Json = serde_json::from_str(&read(spec_file)).expect("spec JSON");
    assert_eq!(spec["kind"], "nvidia.com/gpu-mps");
    let devices = spec["devices"].as_array().expect("devices");
    let names: Vec<&str> = devices.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(
        names,
        ["0", L20_UUID],
        "one slot per GPU, by index and UUID"
    );
    for d in devices {
        let env: Vec<&str> = d["containerEdits"]["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .collect();
        for want in [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=5758M",
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        ] {
            assert!(env.contains(&want), "{}: no {want} in {env:?}", d["name"]);
        }
        let host_paths = strings_at(d, "hostPath");
        let uuid_dir = mps_root.join(L20_UUID);
        for sub in ["pipe", "shm"] {
            let p = uuid_dir.join(sub).display().to_string();
            assert!(host_paths.contains(&p), "{}: no mount of {p}", d["name"]);
        }
    }
    // hostDriverRoot: / in the ConfigMap: host paths, never the daemon's --driver-root view.
    let text_all = spec.to_string();
    assert!(
        !text_all.contains(driver_root.to_str().unwrap()),
        "the spec names the daemon's driver root instead of the host's:\n{spec:#}"
    );
    assert!(strings_at(&spec, "path")
        .iter()
        .any(|p| p == "/dev/nvidia0"));
    assert!(hook_paths(&spec)
        .iter()
        .all(|p| Path::new(p) == bundle_gpuhook()));
}

/// `status --json` and the table: the GPU ready with the limits read back from the control
/// daemon, its tmpfs mounted. Returns the GPU's JSON.
fn check_status(live: &Live) -> Json {
    let (mps_root, status) = (&live.mps_root, |args: &[&str]| live.status(args));
    let json: Json = serde_json::from_str(&status(&["--json"])).expect("status --json");
    let g = json["gpus"][0].clone();
    assert_eq!(g["uuid"], L20_UUID);
    assert_eq!(g["state"], "ready");
    assert_eq!(g["resource"], "nvidia.com/gpu");
    assert_eq!(g["replicas"], 8);
    // Read back from the control daemon after setting them, not just configured.
    assert_eq!(
        g["appliedActiveThreadPercentage"].as_f64(),
        Some(12.0),
        "{g}"
    );
    assert_eq!(g["appliedPinnedMemoryLimitMiB"], 5758, "{g}");
    let uuid_dir = mps_root.join(L20_UUID);
    assert!(uuid_dir.join("ready").exists());
    // shmSize: 1Gi in the config: the per-GPU tmpfs clients share as /dev/shm is mounted.
    assert!(gpu_mps_daemon::shm::is_mount_point(&uuid_dir.join("shm")));
    let table = status(&[]);
    println!("gpu-mps-daemon status:\n{table}");
    assert!(
        table
            .lines()
            .any(|l| l.contains("ready") && l.contains(" 12 ") && l.contains("5758M")),
        "{table}"
    );
    g
}

/// deploy/README.md reloads through the pid in the lock file (in a hostPID pod the daemon is
/// not pid 1): it must be the daemon's, and SIGHUP with an unchanged config must keep the GPU's
/// control daemon (no restart under its clients).
fn check_reload(live: &Live, pid: i32, g: &Json) {
    let (mps_root, status, log_text) = (
        &live.mps_root,
        |args: &[&str]| live.status(args),
        || live.log_text(),
    );
    let port = live.port;
    let lock_pid = read(&mps_root.join(".lock"));
    assert_eq!(lock_pid.trim(), pid.to_string());
    let control_pid = g["pid"].as_i64().expect("control daemon pid");
    // SAFETY: kill(2) on the pid of our own child, which we have not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let start = Instant::now();
    while !log_text().contains("config reloaded") {
        assert!(start.elapsed() < WAIT, "no reload; log:\n{}", log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let json: Json = serde_json::from_str(&status(&["--json"])).expect("status --json");
    assert_eq!(
        json["gpus"][0]["pid"].as_i64(),
        Some(control_pid),
        "unchanged GPU restarted"
    );
    assert_eq!(json["gpus"][0]["state"], "ready");
    assert!(json["lastReloadError"].is_null(), "{json}");
    assert_eq!(http_get(port, "/readyz").map(|r| r.0), Some(200));
}

/// SIGTERM: exit 0, the MPS root left as the hostPath had it, the CDI spec gone.
fn check_sigterm(live: &Live, pid: i32, daemon: &mut Daemon) {
    let (mps_root, spec_file, log_text) = (&live.mps_root, &live.spec_file, || live.log_text());
    // SAFETY: kill(2) on the pid of our own child, which we have not reaped yet.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    let code = loop {
        if let Some(st) = daemon.0.try_wait().unwrap() {
            break st.code();
        }
        assert!(
            start.elapsed() < WAIT,
            "no exit after SIGTERM; log:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0), "log:\n{}", log_text());
    let left: Vec<_> = std::fs::read_dir(mps_root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter().all(|n| n == ".lock"),
        "MPS root not cleaned: {left:?}\n{}",
        log_text()
    );
    assert!(
        !spec_file.exists(),
        "the CDI spec must go with the daemon: no container may be created against it"
    );
}
