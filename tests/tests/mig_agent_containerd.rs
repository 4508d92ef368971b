//! Issue #23 item 5, end to end through a real containerd: the MIG manager agent applies the
//! label's layout on the simulated A100 pair (fake API server, seed 003's config), regenerates the
//! CDI spec the node's containerd uses, and a container started through gpuhook-runtime then gets
//! the new MIG device, which did not exist before: `NVIDIA_VISIBLE_DEVICES=0:6` (the seventh MIG
//! device of GPU 0) is refused before the relabel (GPU 0 has three) and after it the container
//! holds exactly the spec's nodes of that device, allowed by the device cgroup (ENXIO on open, as
//! on the other containerd tests), with the host's major:minor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

// Shared helpers: this test uses a part of them.
#[allow(dead_code)]
#[path = "mig_agent/api.rs"]
mod api;
#[allow(dead_code)]
#[path = "runtime_containerd/rig.rs"]
mod rig;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use api::FakeApi;
use gpuhook_mig_manager::agent::{Agent, Step, Timing};
use gpuhook_mig_manager::holders::HolderSources;
use gpuhook_mig_manager::host::{Argv, NodeHost};
use gpuhook_mig_manager::labels::{State, CONFIG_LABEL};
use gpuhook_mig_manager::layout::MigParted;
use gpuhook_mig_manager::node::KubeNode;
use gpuhook_mig_manager::reconcile::{Reconciler, Settings};
use rig::{env, Rig};
use serde_json::{json, Value};

const CONFIG: &str = r#"version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "2g.20gb": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"#;

fn agent(rig: &Rig, api: &FakeApi) -> Agent {
    let dir = rig.tmp.path();
    let config = dir.join("mig-config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let cdi = Argv {
        program: gpuhook_e2e::built("gpuhook"),
        args: vec![
            "cdi".into(),
            "generate".into(),
            "--driver-root".into(),
            s(&rig.root),
            "--output".into(),
            s(&rig.spec_file),
            "--inventory-cache".into(),
            s(&dir.join("inventory.json")),
        ],
        root: None,
    };
    let client = gpuhook_kube::Client::loopback(&api.url).unwrap();
    let reconciler = Reconciler {
        api: Box::new(KubeNode::new(client, "gpu-node-1", None).unwrap()),
        layout: Box::new(MigParted {
            config_file: config,
            driver_root: rig.root.clone(),
            nvml_lib: None,
            holders: HolderSources::default(),
            drain: false,
        }),
        host: Box::new(NodeHost {
            proc_root: dir.join("no-proc"),
            mps_root: dir.join("no-mps"),
            cdi_refresh: Some(cdi),
            reboot: Argv {
                program: "/bin/false".into(),
                args: vec![],
                root: None,
            },
        }),
        settings: Settings::default(),
    };
    let t = Duration::from_secs(60);
    Agent::new(
        reconciler,
        Timing {
            poll: Duration::from_millis(10),
            min_backoff: t,
            max_backoff: t,
        },
    )
}

/// The device nodes the spec gives MIG device `name`, as (container path, host path).
fn spec_nodes(rig: &Rig, name: &str) -> Vec<(String, String)> {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&rig.spec_file).unwrap()).unwrap();
    let dev = doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in the spec"));
    dev["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let path = n["path"].as_str().unwrap().to_string();
            let host = n["hostPath"].as_str().map_or_else(
                || {
                    rig.root
                        .join(path.trim_start_matches('/'))
                        .to_str()
                        .unwrap()
                        .to_string()
                },
                str::to_string,
            );
            (path, host)
        })
        .collect()
}

#[test]
fn relabel_applies_the_layout_and_containerd_starts_a_container_with_the_new_mig_device() {
    if !gpuhook_e2e::e2e_ready(
        "mig_agent_containerd",
        &["containerd", "ctr", "runc", "ldconfig"],
    ) {
        return;
    }
    let rig = Rig::new("a100-mig-mixed");
    let stderr = rig.run_err(&env("0:6"));
    assert!(stderr.contains("nvidia.com/gpu=0:6"), "{stderr}");

    let api = FakeApi::start("gpu-node-1", json!({CONFIG_LABEL: "all-small"}), |_| {});
    let mut a = agent(&rig, &api);
    match a.step() {
        Step::Ran { result, .. } => assert_eq!(result, Ok(State::Success)),
        Step::Idle => panic!("no run"),
    }
    let nodes = spec_nodes(&rig, "0:6");
    assert!(
        nodes
            .iter()
            .any(|(p, _)| p.starts_with("/dev/nvidia-caps/")),
        "{nodes:?}"
    );
    let mut script = String::new();
    for (p, _) in &nodes {
        script.push_str(&format!(
            "echo \"NODE {p} $(stat -c '%t:%T' {p})\"; echo \"OPEN {p} $(cat {p} 2>&1 </dev/null | head -n1)\"\n"
        ));
    }
    script.push_str("echo DONE\n");
    let (stdout, _) = rig.run_ok(&env("0:6"), &script);
    for (p, host) in &nodes {
        let rdev = std::fs::metadata(host).unwrap().rdev();
        let want = format!("{:x}:{:x}", libc::major(rdev), libc::minor(rdev));
        assert_eq!(
            rig::lookup(&stdout, "NODE", p).as_deref(),
            Some(want.as_str()),
            "{p}\n{stdout}"
        );
        let open = rig::lookup(&stdout, "OPEN", p).unwrap_or_default();
        assert!(
            open.contains("No such device or address"),
            "{p}: {open}\n{stdout}"
        );
    }
}
