//! End to end on a simulated node: a claim for an MPS share runs a container whose MPS client
//! gets the claim's limits.
//!
//! The plugin (fake kubelet over its real sockets, fake API server) prepares NVIDIA's example
//! MPS claim (`gpu-test-mps.yaml`: `defaultActiveThreadPercentage: 50`,
//! `defaultPinnedDeviceMemoryLimit: 10Gi`) on a simulated L20 node (mock NVML: the compute mode
//! is read back through it). The claim's CDI device, applied from the claim's spec with
//! gpuhook_cdi (what a CDI-aware runtime does: no wrapper, no prestart hook), runs a busybox
//! container with real runc; inside it the simulated MPS client (host glibc bind-mounted
//! read-only, host pid namespace: the simulator registers the pid the client reports) connects
//! through `CUDA_MPS_PIPE_DIRECTORY` and prints the limits the daemon gave it. A file the
//! container writes in `/dev/shm` is seen by the daemon in its own `/dev/shm`.
//! Then the device's start check (`gpuhook hook setup --mps-share`): uid 1000 starts, but is
//! refused once a directory above the pipe dir is closed to it (its MPS server, which runs as
//! uid 1000, could not reach the daemon), and after the daemon was told `quit` a root container
//! is refused too until the plugin's supervisor has restarted it (held at its start by the
//! simulator's gate file). Unprepare restores the GPU's compute mode.
//!
//! Needs root, runc, `cargo build -p gpuhook-sim -p gpuhook -p gpuhook-mock-nvml
//! -p gpuhook-sim-mps-control --bins` (skips, or fails under GPUHOOK_REQUIRE_E2E=1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use apiserver::ApiServer;
use gpu_mps_daemon::node::NvmlComputeMode;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::config::Allowed;
use gpuhook_dra::run::Running;
use gpuhook_dra::testkit::{claim, opaque};
use gpuhook_e2e::{bin_dir, busybox_rootfs, e2e_ready, run_ok};
use gpuhook_node::{ComputeMode, DiscoverOptions, Nvml, NvmlLocation};
use plugin::{driver_options, start_with, NODE};
use serde_json::{json, Value};

/// NVIDIA's example (`demo/specs/quickstart/v1/gpu-test-mps.yaml`).
const THREADS: u32 = 50;
const PINNED_GIB: u64 = 10;

/// Where the simulated client is mounted in the container.
const CLIENT: &str = "/usr/local/bin/mps-client";

/// `runc delete -f` on drop.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["delete", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `script` in a busybox container of the claim's CDI device `device` as `uid`.
fn run_container(tmp: &Path, cdi: &Path, device: &str, uid: u32, script: &str) -> Output {
    let bundle = tmp.join(format!("bundle-{uid}-{}", script.len()));
    busybox_rootfs(&bundle.join("rootfs"), false);
    run_ok(Command::new("runc").arg("spec").current_dir(&bundle));
    let mut oci: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    oci["process"]["terminal"] = json!(false);
    oci["process"]["user"] = json!({"uid": uid, "gid": uid});
    oci["process"]["args"] = json!(["/bin/sh", "-c", script]);
    oci["root"] = json!({"path": "rootfs", "readonly": false});
    let ns = oci["linux"]["namespaces"].as_array_mut().unwrap();
    ns.retain(|n| n["type"] != "pid");
    let client = bin_dir().join("sim-nvidia-cuda-mps-control");
    let mut binds = vec![(client.display().to_string(), CLIENT.to_string())];
    for lib in ["/lib/x86_64-linux-gnu", "/lib64"] {
        binds.push((lib.into(), lib.into()));
    }
    for (src, dst) in binds {
        oci["mounts"].as_array_mut().unwrap().push(json!({
            "destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro"]
        }));
    }
    let reg = gpuhook_cdi::Registry::load(&[cdi]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    gpuhook_cdi::apply_devices(&mut oci, &reg, &[device.to_string()]).unwrap();
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&oci).unwrap(),
    )
    .unwrap();
    let id = format!(
        "gpuhook-dra-mps-{}-{uid}-{}",
        std::process::id(),
        script.len()
    );
    let _c = Container(id.clone());
    Command::new("runc")
        .args(["run", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn compute_mode(nvml: &Nvml, uuid: &str) -> ComputeMode {
    nvml.compute_mode(uuid).unwrap()
}

async fn prepare(channel: tonic::transport::Channel, c: api::Claim) -> Vec<String> {
    let uid = c.uid.clone();
    let mut v1 = DRAPluginClient::new(channel);
    let mut r = v1
        .node_prepare_resources(api::NodePrepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    let r = r.claims.remove(&uid).unwrap();
    assert_eq!(r.error, "");
    r.devices
        .into_iter()
        .flat_map(|d| d.cdi_device_ids)
        .collect()
}

/// The simulated node's tools: (MPS control simulator, gpuhook).
fn tools() -> (PathBuf, PathBuf) {
    let (sim_control, gpuhook) = (
        bin_dir().join("sim-nvidia-cuda-mps-control"),
        bin_dir().join("gpuhook"),
    );
    for b in [&sim_control, &gpuhook] {
        assert!(
            b.exists(),
            "{} is missing: cargo build -p gpuhook -p gpuhook-sim-mps-control",
            b.display()
        );
    }
    (sim_control, gpuhook)
}

/// The plugin on simulated `node` (compute modes through its mock NVML, hooks run `gpuhook`),
/// serving NVIDIA's example MPS claim `uid`.
fn start_plugin(dir: &Path, node: &Path, api: &ApiServer, uid: &str) -> Running {
    let (sim_control, gpuhook) = tools();
    let d = DiscoverOptions::for_root(node);
    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    // The simulator, its daemon start held while `<dir>/hold` exists (the restart window).
    let wrapper = dir.join("nvidia-cuda-mps-control");
    let script = format!(
        "#!/bin/sh\nexport GPUHOOK_SIM_MPS_HOLD='{}'\nexec '{}' \"$@\"\n",
        dir.join("hold").display(),
        sim_control.display()
    );
    gpuhook_fs::testing::write_executable(&wrapper, &script).unwrap();
    let mut opts = driver_options(dir, &wrapper, Allowed::default());
    opts.cdi.edit_options = gpuhook_cdi::EditOptions::new(&gpuhook);
    opts.cdi.edit_options.cuda_compat = false;
    opts.mps.shm = true;
    opts.mps.compute = Arc::new(NvmlComputeMode(nvml_of(node)));
    let cfg = opaque(
        &["mps-gpu"],
        json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
               "sharing": {"strategy": "MPS", "mpsConfig": {
                   "defaultActiveThreadPercentage": THREADS,
                   "defaultPinnedDeviceMemoryLimit": format!("{PINNED_GIB}Gi")}}}),
    );
    let results = [("mps-gpu", "gpu-0")];
    api.add_claim(claim("ns", "mps", uid, NODE, &results, vec![cfg]));
    start_with(dir, api, opts, None, inv, None)
}

fn nvml_of(node: &Path) -> Nvml {
    Nvml::load(&NvmlLocation::locate(node, None).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_for_an_mps_share_runs_a_container_whose_client_gets_the_claims_limits() {
    if !e2e_ready("dra mps_container", &["runc"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-dra-mps-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(node) = sim::sim_node(tmp.path(), "l20", "mps_container") else {
        return;
    };
    let nvml = nvml_of(&node);
    let uuid = gpuhook_node::discover(&DiscoverOptions::for_root(&node))
        .unwrap()
        .inventory
        .gpus[0]
        .uuid
        .clone();
    let before = compute_mode(&nvml, &uuid);
    assert_ne!(before, ComputeMode::ExclusiveProcess);
    let (api, uid) = (ApiServer::start(NODE), "uid-mps-ctr");
    let p = start_plugin(tmp.path(), &node, &api, uid);
    let k = kubelet::register(&tmp.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let c = kubelet::claim("ns", "mps", uid);
    let ids = prepare(k.channel.clone(), c.clone()).await;
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(compute_mode(&nvml, &uuid), ComputeMode::ExclusiveProcess);
    let claim_dir = tmp.path().join("plugin/mps").join(uid);

    client_gets_the_limits(tmp.path(), &ids[0], &claim_dir);
    unreachable_user_is_refused(tmp.path(), &ids[0]);
    stopped_daemon_is_refused(tmp.path(), &ids[0], &claim_dir);

    let mut v1 = DRAPluginClient::new(k.channel);
    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims[uid].error, "");
    assert_eq!(compute_mode(&nvml, &uuid), before, "restored at unprepare");
    assert!(!claim_dir.exists());
    p.stop().await;
}

/// 1. Root: the client in the container reaches the claim's daemon and gets the claim's limits;
///    the container's `/dev/shm` is the daemon's.
fn client_gets_the_limits(tmp: &Path, id: &str, claim_dir: &Path) {
    let script = format!(
        "echo from-container > /dev/shm/gpuhook-dra-probe && exec {CLIENT} --sim-client --uid 0 --hold 0"
    );
    let ok = run_container(tmp, &tmp.join("cdi"), id, 0, &script);
    let out = text(&ok);
    assert!(ok.status.success(), "{out}");
    let want = format!(
        "active_thread_percentage={THREADS}.0 pinned_mem_limit=0={}M",
        PINNED_GIB * 1024
    );
    assert!(out.contains(&want), "want {want}: {out}");
    let pid: i32 = std::fs::read_to_string(claim_dir.join("control-daemon.id"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let seen = format!("/proc/{pid}/root/dev/shm/gpuhook-dra-probe");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap_or_default(),
        "from-container\n",
        "the daemon's /dev/shm is the container's"
    );
    assert!(!Path::new("/dev/shm/gpuhook-dra-probe").exists());
}

/// 2. uid 1000: its MPS server runs as uid 1000 and reaches the pipe dir through the host path
///    (the daemon makes the pipe dir 0777). With every directory above it searchable it starts;
///    with the plugin dir 0700 (as /var/lib/kubelet often is) it is refused at start, naming
///    the directory, instead of running without MPS.
fn unreachable_user_is_refused(tmp: &Path, id: &str) {
    let (cdi, plugin_dir) = (tmp.join("cdi"), tmp.join("plugin"));
    let ok = run_container(tmp, &cdi, id, 1000, "echo STARTED");
    assert!(ok.status.success(), "{}", text(&ok));
    std::fs::set_permissions(&plugin_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let refused = run_container(tmp, &cdi, id, 1000, "echo STARTED-1000");
    std::fs::set_permissions(&plugin_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = text(&refused);
    assert!(!refused.status.success(), "{err}");
    assert!(!err.contains("STARTED"), "{err}");
    let search = format!("uid 1000 cannot search {}", plugin_dir.display());
    assert!(
        err.contains(id) && err.contains(&search) && err.contains("without MPS"),
        "{err}"
    );
}

/// 3. The daemon told to quit: until its replacement is ready (held at its start here), a root
///    container is refused, naming the claim's device; then it starts again.
fn stopped_daemon_is_refused(tmp: &Path, id: &str, claim_dir: &Path) {
    let (sim_control, _) = tools();
    let (gate, held) = (tmp.join("hold"), tmp.join("hold.waiting"));
    std::fs::write(&gate, "").unwrap();
    quit(&sim_control, &claim_dir.join("pipe"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !held.exists() {
        assert!(std::time::Instant::now() < deadline, "no replacement held");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let refused = run_container(tmp, &tmp.join("cdi"), id, 0, "echo STARTED");
    let err = text(&refused);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains(id) && err.contains("not ready") && !err.contains("STARTED"),
        "{err}"
    );
    std::fs::remove_file(&gate).unwrap();
    while !claim_dir.join("ready").exists() {
        assert!(std::time::Instant::now() < deadline, "not ready again");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ok = run_container(tmp, &tmp.join("cdi"), id, 0, "echo STARTED-AGAIN");
    assert!(ok.status.success(), "{}", text(&ok));
}

/// `echo quit | nvidia-cuda-mps-control` on the claim's pipe dir.
fn quit(control: &PathBuf, pipe: &Path) {
    use std::io::Write;
    let mut c = Command::new(control)
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(c.stdin.take().unwrap(), "quit").unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "quit: {out:?}");
    assert!(!pipe.join("control").exists(), "the socket is gone");
}
