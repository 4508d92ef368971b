//! An MPS share end to end as a node runs it: `gpu-mps-daemon` and `gpuhook-device-plugin serve`
//! (`sharing.mps`, `flags.mpsRoot` = the daemon's root) on a simulated 2-GPU node, the fake
//! kubelet, and containerd 1.6's CRI plugin with the `gpuhook` runtime handler (see
//! `device_plugin_cri.rs` for the rig). The plugin advertises no MPS replica until the daemon is
//! ready (and none once it has stopped); then `nvidia.com/gpu: 1` gives a container its share:
//!
//! - `CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps` (the daemon's default containerPipeDirectory),
//!   the GPU's pipe directory mounted there (its control socket is visible), the daemon's shm
//!   tmpfs as `/dev/shm` (a file written inside appears in `<mpsRoot>/<uuid>/shm`);
//! - the share's limits as gpu-mps-daemon's CDI spec gives them for the default share:
//!   `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100/replicas`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB
//!   /replicas>M` (mps-daemon/src/cdi.rs:gpu_devices, plan.rs:plan_resources);
//! - only its GPU's `/dev/nvidia<minor>`.
//!
//! Both device list strategies that reach gpuhook-runtime on containerd 1.6 are run: envvar (the
//! plugin mounts the pipe directory and shm itself and copies the limits from the daemon's spec)
//! and cdi-annotations (`nvidia.com/gpu-mps=<uuid>`, resolved by gpuhook-runtime from the spec).
//!
//! Run under `flock /tmp/gpuhook-e2e.lock`; the daemon gets SIGTERM first (its control daemons,
//! shm mounts and spec go), then the plugin, containerd and the dirs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use device_plugin_cri_support::rig::{ready, tmp, Rig};
use device_plugin_cri_support::{Resource, Seen, REPORT};
use gpuhook_device_plugin::api::ContainerAllocateResponse;
use gpuhook_e2e::mps::{status_json, write_config, Daemon};

const REPLICAS: u64 = 4;

/// The device plugin's config: `sharing.mps` with the daemon's replicas, `flags.mpsRoot`.
fn plugin_config(mps: &Path, strategy: &str) -> String {
    format!(
        "version: v1\nflags:\n  mpsRoot: {}\n  plugin:\n    deviceListStrategy: {strategy}\n\
         sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {REPLICAS}\n",
        mps.display()
    )
}

/// What the container prints besides [`REPORT`]: its pipe directory and a file in `/dev/shm`.
fn script(pod: &str) -> String {
    format!(
        "ls /tmp/nvidia-mps | sed 's/^/PIPE /'\necho \"MARK $(cat /tmp/nvidia-mps/gpuhook-e2e-mark)\"\necho {pod} > /dev/shm/gpuhook-e2e-{pod}\n{REPORT}"
    )
}

/// Waits until the daemon's status lists `nvidia.com/gpu-mps=<uuid>` in its spec for `uuids`.
async fn wait_spec(mps: &Path, uuids: &[String], daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = status_json(mps).is_some_and(|s| {
            uuids.iter().all(|u| {
                let name = format!("nvidia.com/gpu-mps={u}");
                s["cdi"]["devices"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|d| d == name.as_str()))
            })
        });
        if listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no spec device:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The container saw GPU `g`'s MPS share and nothing of the other GPU.
fn check_share(rig: &Rig, saw: &Seen, g: usize, pod: &str, mps: &Path) {
    let gpu = &rig.bench.node.profile.gpus[g];
    let env = |k: &str| saw.env.get(k).map(String::as_str);
    assert_eq!(
        env("CUDA_MPS_PIPE_DIRECTORY"),
        Some("/tmp/nvidia-mps"),
        "{saw:?}"
    );
    let pct = (100 / REPLICAS).to_string();
    assert_eq!(
        env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        Some(pct.as_str()),
        "{saw:?}"
    );
    let mem = format!("0={}M", gpu.memory_mib / REPLICAS);
    assert_eq!(
        env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
        Some(mem.as_str()),
        "{saw:?}"
    );
    assert!(
        saw.other.iter().any(|l| l == "PIPE control"),
        "the GPU's pipe directory with its control socket: {saw:?}"
    );
    let mark = format!("MARK {}", gpu.uuid);
    assert!(
        saw.other.contains(&mark),
        "GPU {g}'s pipe directory: {saw:?}"
    );
    let shm = mps
        .join(&gpu.uuid)
        .join("shm")
        .join(format!("gpuhook-e2e-{pod}"));
    assert_eq!(
        std::fs::read_to_string(&shm).ok().as_deref(),
        Some(format!("{pod}\n").as_str()),
        "/dev/shm is the daemon's shm of GPU {g}"
    );
    assert_eq!(saw.gpu_nodes(), rig.bench.only_gpus(&[g]), "{saw:?}");
}

/// Allocates a free replica of the GPU other than `not` until the answer carries a
/// `cdi.k8s.io/` annotation (the label switch is applied within the plugin's poll interval).
async fn wait_for_mps_annotation(gpu: &mut Resource, not: &str) -> ContainerAllocateResponse {
    let id = gpu
        .available()
        .into_iter()
        .find(|i| !i.starts_with(not))
        .expect("a replica of the other GPU");
    for _ in 0..100 {
        let resp = gpu.allocate_ids(std::slice::from_ref(&id)).await.unwrap();
        if let Some((k, v)) = resp.annotations.iter().next() {
            assert!(k.starts_with("cdi.k8s.io/"), "{k}");
            let uuid = id.split("::").next().unwrap();
            assert_eq!(v, &format!("nvidia.com/gpu-mps={uuid}"));
            return resp;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the label switch to the cdi-annotations config was not applied within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_share_reaches_the_container_with_envvar_and_cdi_annotations() {
    if !ready("device_plugin_cri_mps") {
        return;
    }
    let tmp = tmp("mps");
    let (mps, mps_cdi) = (tmp.path().join("mps"), tmp.path().join("mps-cdi"));
    std::fs::create_dir_all(&mps_cdi).unwrap();
    let configs = [
        ("default", plugin_config(&mps, "envvar")),
        ("cdi", plugin_config(&mps, "cdi-annotations")),
    ];
    let configs: Vec<(&str, &str)> = configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut rig = Rig::start_in(tmp, "rhel-a100", &configs, "", &[&mps_cdi]).await;
    let mut gpu = rig.resource("nvidia.com/gpu").await;
    assert!(
        gpu.devices.is_empty(),
        "no MPS replica before the daemon is ready: {:?}",
        gpu.devices
    );

    let daemon_config = rig.tmp.path().join("mps-daemon.yaml");
    write_config(&daemon_config, &mps, &rig.bench.node.root, &mps_cdi, "");
    let daemon = Daemon::start(&daemon_config, None, &rig.tmp.path().join("mps-daemon.log"));
    let want = usize::try_from(REPLICAS).unwrap() * rig.bench.node.profile.gpus.len();
    let listed = gpu
        .wait_list(Duration::from_secs(60), |d| d.len() == want)
        .await;
    assert!(listed, "{:?}\n{}", gpu.devices, daemon.log_text());
    let uuids: Vec<String> = rig
        .bench
        .node
        .profile
        .gpus
        .iter()
        .map(|g| g.uuid.clone())
        .collect();
    wait_spec(&mps, &uuids, &daemon).await;
    for u in &uuids {
        // Which GPU's pipe directory a container got (the daemon keeps nothing of its own there).
        std::fs::write(mps.join(u).join("pipe/gpuhook-e2e-mark"), u).unwrap();
    }

    let resp = gpu.allocate(1).await.unwrap();
    let g = rig.bench.gpu_of(&gpu.allocated[0]);
    assert_eq!(
        resp.envs.get("NVIDIA_VISIBLE_DEVICES"),
        Some(&rig.bench.node.profile.gpus[g].uuid)
    );
    let saw = rig
        .bench
        .run_script("mps-envvar", &script("mps-envvar"), &[resp])
        .await;
    check_share(&rig, &saw, g, "mps-envvar", &mps);

    std::fs::write(&rig.label, "cdi").unwrap();
    let uuid = rig.bench.node.profile.gpus[g].uuid.clone();
    let resp = wait_for_mps_annotation(&mut gpu, &uuid).await;
    assert!(resp.envs.is_empty() && resp.mounts.is_empty(), "{resp:?}");
    let saw = rig
        .bench
        .run_script("mps-cdi", &script("mps-cdi"), &[resp])
        .await;
    check_share(&rig, &saw, 1 - g, "mps-cdi", &mps);

    // The daemon stops: its GPUs' MPS replicas are no longer listed.
    drop(daemon);
    let gone = gpu
        .wait_list(Duration::from_secs(20), BTreeMap::is_empty)
        .await;
    assert!(
        gone,
        "MPS replicas still listed after the daemon stopped: {:?}",
        gpu.devices
    );
}
