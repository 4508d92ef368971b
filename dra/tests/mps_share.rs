//! Consumable-capacity MPS shares (KEP-5075) of one GPU against the nvidia-cuda-mps-control
//! simulator, run as a node where one control daemon serves a GPU for a user
//! (`GPUHOOK_SIM_MPS_GPU_REGISTRY`): both shares are served by one daemon, started with the
//! first share and stopped with the last; each share's client gets its own limits (from the
//! claim's CDI environment), a client without them at most the largest share's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;

use std::path::{Path, PathBuf};
use std::process::Command;

use apiserver::ApiServer;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::config::Allowed;
use gpuhook_dra::testkit::{claim, inventory};
use plugin::{plugin_allowed, NODE};
use serde_json::json;

/// The simulator behind a wrapper that makes its node's one-daemon-per-GPU rule real; `None`
/// skips (`cargo build -p gpuhook-sim-mps-control`), except under GPUHOOK_REQUIRE_E2E=1.
fn sim(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_gpuhook-dra-plugin"))
        .with_file_name("sim-nvidia-cuda-mps-control");
    if !p.exists() {
        assert!(
            std::env::var_os("GPUHOOK_REQUIRE_E2E").is_none_or(|v| v != "1"),
            "{} is missing: cargo build -p gpuhook-sim-mps-control",
            p.display()
        );
        eprintln!("skipped: {} is missing", p.display());
        return None;
    }
    let wrapper = dir.join("nvidia-cuda-mps-control");
    let script = format!(
        "#!/bin/sh\nexport GPUHOOK_SIM_MPS_GPU_REGISTRY={}\nexec {} \"$@\"\n",
        dir.join("node-gpus").display(),
        p.display()
    );
    gpuhook_fs::testing::write_executable(&wrapper, &script).unwrap();
    Some((wrapper, p))
}

/// A share of gpu-0 as the scheduler allocates it: shareID and consumed capacity.
fn share(api: &ApiServer, name: &str, uid: &str, pct: u32, mem: &str) -> api::Claim {
    let mut c = claim("ns", name, uid, NODE, &[("share", "gpu-0")], vec![]);
    let r = &mut c["status"]["allocation"]["devices"]["results"][0];
    r["shareID"] = json!(format!("share-{uid}"));
    r["consumedCapacity"] = json!({"threadPercentage": pct.to_string(), "memory": mem});
    api.add_claim(c);
    kubelet::claim("ns", name, uid)
}

/// A CUDA client of a claim's container: the pipe dir and the environment its CDI spec gives.
fn client_sees(sim: &Path, pipe: &Path, env: &[String]) -> String {
    let mut cmd = Command::new(sim);
    cmd.env_clear().env("CUDA_MPS_PIPE_DIRECTORY", pipe);
    for kv in env.iter().filter(|kv| kv.starts_with("CUDA_MPS_")) {
        let (k, v) = kv.split_once('=').unwrap();
        if k != "CUDA_MPS_PIPE_DIRECTORY" {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .args(["--sim-client", "--uid", "0", "--hold", "0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn spec_env(dir: &Path, uid: &str) -> Vec<String> {
    let p = dir.join(format!("cdi/k8s.gpu.nvidia.com-claim_{uid}.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    serde_json::from_value(v["containerEdits"]["env"].clone()).unwrap()
}

/// Both shares' devices carry the start check on the GPU's pipe dir, whose daemon has its ready
/// marker (with the ceiling); as root, both get the GPU daemon's one `/dev/shm` dir (one server serves them).
fn share_edits(dir: &Path, gpu_dir: &Path) {
    let pipe = gpu_dir.join("pipe").display().to_string();
    let ready: serde_json::Value =
        serde_json::from_slice(&std::fs::read(gpu_dir.join("ready")).unwrap()).unwrap();
    assert_eq!(ready["pipeDirectory"], pipe.as_str());
    // It follows the ceiling raised by the second share: the largest of 30/50 % and 8/4 GiB.
    assert_eq!(ready["activeThreadPercentage"], 50, "{ready}");
    assert_eq!(ready["pinnedMemoryLimitMiB"], json!([8192]), "{ready}");
    assert!(ready["pid"].as_i64().unwrap() > 0, "{ready}");
    for uid in ["uid-a", "uid-b"] {
        let p = dir.join(format!("cdi/k8s.gpu.nvidia.com-claim_{uid}.json"));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        let share = format!("k8s.gpu.nvidia.com/claim={uid}-gpu-0::{pipe}");
        let hooks = v["devices"][0]["containerEdits"]["hooks"].to_string();
        assert!(hooks.contains(&share), "{hooks}");
        if plugin::is_root() {
            let shm = gpu_dir.join("shm").display().to_string();
            let mounts = v["containerEdits"]["mounts"].as_array().unwrap();
            assert!(
                mounts
                    .iter()
                    .any(|m| m["containerPath"] == "/dev/shm" && m["hostPath"] == shm.as_str()),
                "{mounts:?}"
            );
        }
    }
}

fn daemon_pid(dir: &Path) -> i32 {
    let rec = std::fs::read_to_string(dir.join("control-daemon.id")).unwrap();
    rec.split_whitespace().next().unwrap().parse().unwrap()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// The plugin with consumable-capacity MPS shares on, registered with a fake kubelet.
async fn consumable(
    dir: &Path,
    api: &ApiServer,
    wrapper: &Path,
) -> (gpuhook_dra::run::Running, kubelet::Registered) {
    let on = Allowed {
        consumable_mps: true,
        ..Allowed::default()
    };
    let p = plugin_allowed(dir, api, wrapper, None, inventory(), None, on);
    let k = kubelet::register(&dir.join("plugins_registry"), "gpu.nvidia.com").await;
    (p, k)
}

/// The first (on a one-GPU node: the) shared daemon dir.
fn the_gpu_dir(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir.join("plugin/mps/gpu"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

async fn call(ch: &tonic::transport::Channel, c: &api::Claim, prepare: bool) -> String {
    let mut v1 = DRAPluginClient::new(ch.clone());
    let claims = vec![c.clone()];
    if prepare {
        let r = v1
            .node_prepare_resources(api::NodePrepareResourcesRequest { claims })
            .await
            .unwrap()
            .into_inner();
        r.claims[&c.uid].error.clone()
    } else {
        let r = v1
            .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims })
            .await
            .unwrap()
            .into_inner();
        r.claims[&c.uid].error.clone()
    }
}

#[tokio::test]
async fn shares_of_one_gpu_share_one_control_daemon_with_their_own_limits() {
    let dir = tempfile::tempdir().unwrap();
    let Some((wrapper, sim)) = sim(dir.path()) else {
        return;
    };
    let api = ApiServer::start(NODE);
    let a = share(&api, "a", "uid-a", 30, "8Gi");
    let b = share(&api, "b", "uid-b", 50, "4Gi");
    let (p, k) = consumable(dir.path(), &api, &wrapper).await;
    assert_eq!(call(&k.channel, &a, true).await, "");
    assert_eq!(
        call(&k.channel, &b, true).await,
        "",
        "the second share joins"
    );
    let gpu_dir = std::fs::read_dir(dir.path().join("plugin/mps/gpu"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>();
    assert_eq!(gpu_dir.len(), 1, "one daemon dir for gpu-0: {gpu_dir:?}");
    let (gpu_dir, pipe) = (&gpu_dir[0], gpu_dir[0].join("pipe"));
    assert!(!dir.path().join("plugin/mps/uid-a").exists());
    let pid = daemon_pid(gpu_dir);
    share_edits(dir.path(), gpu_dir);
    let (env_a, env_b) = (spec_env(dir.path(), "uid-a"), spec_env(dir.path(), "uid-b"));
    let seen = client_sees(&sim, &pipe, &env_a);
    assert!(
        seen.contains("active_thread_percentage=30.0 pinned_mem_limit=0=8192M"),
        "{seen}"
    );
    let seen = client_sees(&sim, &pipe, &env_b);
    assert!(
        seen.contains("active_thread_percentage=50.0 pinned_mem_limit=0=4096M"),
        "{seen}"
    );
    // A client that drops its environment gets the ceiling: the largest share, not the GPU.
    let seen = client_sees(&sim, &pipe, &[]);
    assert!(
        seen.contains("active_thread_percentage=50.0 pinned_mem_limit=0=8192M"),
        "{seen}"
    );
    assert_eq!(call(&k.channel, &a, false).await, "");
    assert!(alive(pid), "the daemon stays for the GPU's last share");
    let seen = client_sees(&sim, &pipe, &[]);
    assert!(
        seen.contains("active_thread_percentage=50.0 pinned_mem_limit=0=4096M"),
        "the ceiling follows the shares left: {seen}"
    );
    assert_eq!(call(&k.channel, &b, false).await, "");
    plugin::wait_for("the shared daemon to stop", || !alive(pid)).await;
    assert!(!gpu_dir.exists());
    p.stop().await;
}

/// The daemon outlives a plugin restart; the next run still knows the GPU's shares (member
/// files) and stops the daemon with the last one.
#[tokio::test]
async fn the_last_share_stops_the_daemon_after_a_plugin_restart() {
    let dir = tempfile::tempdir().unwrap();
    let Some((wrapper, _)) = sim(dir.path()) else {
        return;
    };
    let api = ApiServer::start(NODE);
    let a = share(&api, "a", "uid-a", 20, "2Gi");
    let b = share(&api, "b", "uid-b", 20, "2Gi");
    let (p, k) = consumable(dir.path(), &api, &wrapper).await;
    assert_eq!(call(&k.channel, &a, true).await, "");
    p.stop().await;
    let (p, k) = consumable(dir.path(), &api, &wrapper).await;
    assert_eq!(
        call(&k.channel, &b, true).await,
        "",
        "joins the running daemon"
    );
    let gpu_dir = the_gpu_dir(dir.path());
    let pid = daemon_pid(&gpu_dir);
    assert_eq!(call(&k.channel, &a, false).await, "");
    assert!(alive(pid));
    assert_eq!(call(&k.channel, &b, false).await, "");
    plugin::wait_for("the shared daemon to stop", || !alive(pid)).await;
    assert!(!gpu_dir.exists());
    p.stop().await;
}

/// The GPU's shared daemon, killed, is restarted (`mps_supervise.rs`) with the shares' ceiling,
/// and the ceiling still follows the shares on the replacement.
#[tokio::test]
async fn a_killed_shared_daemon_is_restarted_with_the_shares_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let Some((wrapper, sim)) = sim(dir.path()) else {
        return;
    };
    let api = ApiServer::start(NODE);
    let a = share(&api, "a", "uid-a", 30, "8Gi");
    let b = share(&api, "b", "uid-b", 50, "4Gi");
    let (p, k) = consumable(dir.path(), &api, &wrapper).await;
    assert_eq!(call(&k.channel, &a, true).await, "");
    assert_eq!(call(&k.channel, &b, true).await, "");
    let gpu_dir = the_gpu_dir(dir.path());
    let (pipe, ready) = (gpu_dir.join("pipe"), gpu_dir.join("ready"));
    let old = daemon_pid(&gpu_dir);
    let st = Command::new("kill")
        .args(["-KILL", &old.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let new = loop {
        let pid = std::fs::read(&ready)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["pid"].as_i64());
        match pid {
            Some(p) if p != i64::from(old) => break i32::try_from(p).unwrap(),
            _ => assert!(std::time::Instant::now() < deadline, "no replacement"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(alive(new));
    let seen = client_sees(&sim, &pipe, &[]);
    assert!(
        seen.contains("active_thread_percentage=50.0 pinned_mem_limit=0=8192M"),
        "the ceiling of both shares: {seen}"
    );
    assert_eq!(call(&k.channel, &a, false).await, "");
    let seen = client_sees(&sim, &pipe, &[]);
    assert!(
        seen.contains("active_thread_percentage=50.0 pinned_mem_limit=0=4096M"),
        "the ceiling follows the shares left: {seen}"
    );
    assert_eq!(call(&k.channel, &b, false).await, "");
    plugin::wait_for("the replacement to stop", || !alive(new)).await;
    assert!(!gpu_dir.exists());
    p.stop().await;
}
