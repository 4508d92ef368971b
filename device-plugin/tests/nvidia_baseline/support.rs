//! NVIDIA's observed device IDs per simulated profile, the node builder, `dry-run` and our
//! plugin served to the fake kubelet, for `nvidia_baseline.rs`.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use crate::common::node::BIN;
use crate::common::{self, next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::api;
use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{materialise, MaterialiseOptions};

pub const DGX_H100: [&str; 8] = [
    "GPU-054b5817-d8d5-cb0c-e645-7b685ed85ca6",
    "GPU-192dd611-6d8a-5ecf-3ede-0587705f2e20",
    "GPU-6488b716-7c98-6278-11af-3429eea75d97",
    "GPU-6dbbc031-b4bc-424b-1e9a-c08644f26e69",
    "GPU-b5b0b898-dc85-046e-9974-a9c372303cce",
    "GPU-d3047d8b-cc4c-8769-7149-ff1dccaf40f6",
    "GPU-e5e68423-6751-255f-c16e-ea0d3fae783c",
    "GPU-f5697335-68e9-f228-da8c-f7af42e3b440",
];
pub const A100_GPUS: [&str; 2] = [
    "GPU-c4f82fda-f11d-4492-a176-950eab898aad",
    "GPU-cedc8ef5-2012-4e98-be22-5cdcb615ef10",
];
pub const A100_1G10: [&str; 7] = [
    "MIG-1ff7dfac-6e3c-6a16-e1e3-9334e0e7bdbf",
    "MIG-225e2f35-94b0-3136-7b2d-75c5025b713a",
    "MIG-3921a5a0-0380-55eb-a9d4-2c0dc7febab5",
    "MIG-94aa7f60-2fb0-6a64-0fc0-d50c83f9ef3e",
    "MIG-ac75110b-0eb4-37dc-3154-25ab2bcf98a0",
    "MIG-e8625a38-ed19-839b-8af6-577ec4cdeea1",
    "MIG-f63e5e6f-7454-9b92-e0bc-fdab8858231a",
];
pub const A100_2G20: [&str; 2] = [
    "MIG-9b612579-eea6-d02e-9378-b6e128e4a517",
    "MIG-e2cb7d61-d7f3-f752-602c-5d1e97c7969c",
];
pub const A100_3G40: [&str; 1] = ["MIG-ae18ffb7-f9f1-fb51-5ea5-0879a2b7053a"];
pub const H100_GPU: [&str; 1] = ["GPU-fd8da993-f3cd-7ebd-8145-12144134a43b"];
pub const H100_1G10: [&str; 7] = [
    "MIG-12db4061-8473-070e-3522-3c866d13cc5c",
    "MIG-1e48b296-dcf5-23bf-5fc5-7a0b3d6741a2",
    "MIG-d03f1bcc-ee79-56c1-29fa-cdd4118fa612",
    "MIG-e3084145-31ff-9be5-fa09-8fb4de892bd8",
    "MIG-ebb2129d-c749-9a6a-c7ff-fc35ebe58496",
    "MIG-eff95050-5d80-1f6e-f8be-85636fe95b58",
    "MIG-fc6bc1b6-6dec-0afa-a860-867d7b266067",
];
pub const H100_EMPTY_GPU: [&str; 1] = ["GPU-7a9156e6-b19d-40db-b4b7-33105084c3f4"];
pub const H20_GPU: [&str; 1] = ["GPU-47f7199f-a1f1-9d77-df3a-02910bb51b8c"];
pub const H20_1G12: [&str; 7] = [
    "MIG-0b28cd05-b74f-501f-1b96-76738f66b6b3",
    "MIG-18e550d9-91bb-e6fc-8e82-57111d1471e2",
    "MIG-2f17dfb6-0137-a184-1857-4e88851e2bbc",
    "MIG-6191b129-f493-7d24-9bce-6e884a808b9d",
    "MIG-6c3e4650-ce19-7cc2-c7bc-deda5a030656",
    "MIG-c115f6ab-dd76-5fbf-bb6a-ad0ed8824b66",
    "MIG-e74131f4-c05d-f360-1cd7-5b4b00b570ba",
];
pub const T4: [&str; 1] = ["GPU-ac3229e7-417e-7ede-24ee-fab293a06d71"];
pub const L20: [&str; 1] = ["GPU-e6c1ce30-955f-10af-95b1-0a37b420ba76"];
pub const L20_MINIMAL: [&str; 1] = ["GPU-30aa8cd6-e129-4956-8f3d-1db1c2b41ae7"];
pub const RHEL_A100: [&str; 2] = [
    "GPU-22adc0b9-fa37-4d63-9f06-46d90f218054",
    "GPU-5f81fd9f-4d89-42c4-9485-601d787d3fa2",
];
pub const WORKSTATION: [&str; 1] = ["GPU-f8730119-4d74-4bcc-805e-8c9aef8ad514"];

/// The profile materialised as a driver root in a fresh temp dir.
pub fn node(profile: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = NodeProfile::builtin(profile).unwrap();
    materialise(&p, dir.path(), &MaterialiseOptions::default()).unwrap_or_else(|e| {
        panic!("materialise {profile} (needs root and `cargo build -p gpuhook-mock-nvml`): {e}")
    });
    dir
}

/// `dry-run` on the node: Ok(resources as (name, sorted ids, numa nodes)) or Err(errors).
#[allow(clippy::type_complexity)]
pub fn dry_run(
    root: &Path,
    yaml: &str,
) -> Result<Vec<(String, Vec<String>, Vec<Option<u64>>)>, String> {
    let cfg = root.join("baseline-config.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["dry-run", "--config"])
        .arg(&cfg)
        .arg("--driver-root")
        .arg(root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    if v["outcome"] != "ok" {
        assert!(!out.status.success(), "errors but exit 0: {v}");
        return Err(v["errors"].to_string());
    }
    let mut res: Vec<_> = v["advertisement"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut devs: Vec<(String, Option<u64>)> = r["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    (
                        d["id"].as_str().unwrap().to_string(),
                        d["numa_node"].as_u64(),
                    )
                })
                .collect();
            devs.sort();
            let (ids, numa) = devs.into_iter().unzip();
            (r["name"].as_str().unwrap().to_string(), ids, numa)
        })
        .filter(|(_, ids, _): &(String, Vec<String>, _)| !ids.is_empty())
        .collect();
    res.sort();
    Ok(res)
}

/// Our plugin serving `yaml` on the node, with the fake kubelet's registration of `resource`.
pub struct Served {
    plugin: common::node::Plugin,
    kubelet: FakeKubelet,
    reg: common::Registered,
    _dir: tempfile::TempDir,
}

impl Served {
    pub async fn start(root: &Path, yaml: &str, resource: &str) -> Served {
        let cfg = root.join("baseline-config.yaml");
        std::fs::write(&cfg, yaml).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut kubelet = FakeKubelet::start(dir.path());
        let plugin = common::node::Plugin(
            Command::new(BIN)
                .arg("serve")
                .arg("--config")
                .arg(&cfg)
                .arg("--driver-root")
                .arg(root)
                .arg("--plugin-dir")
                .arg(dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut reg = loop {
            let reg = kubelet.next_registration().await;
            if reg.request.resource_name == resource {
                break reg;
            }
        };
        next_list(&mut reg, WAIT).await;
        Served {
            plugin,
            kubelet,
            reg,
            _dir: dir,
        }
    }

    pub async fn allocate(&mut self, id: &str) -> api::ContainerAllocateResponse {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest {
                devices_ids: vec![id.to_string()],
            }],
        };
        let resp = self.reg.client.allocate(req).await.unwrap().into_inner();
        resp.container_responses.into_iter().next().unwrap()
    }

    /// GetPreferredAllocation of `size` out of `available`, nothing required.
    pub async fn preferred(&mut self, available: &[String], size: i32) -> Vec<String> {
        let req = api::PreferredAllocationRequest {
            container_requests: vec![api::ContainerPreferredAllocationRequest {
                available_device_ids: available.to_vec(),
                must_include_device_ids: vec![],
                allocation_size: size,
            }],
        };
        let resp = self.reg.client.get_preferred_allocation(req).await.unwrap();
        let mut ids = resp.into_inner().container_responses[0].device_ids.clone();
        ids.sort();
        ids
    }

    /// The next ListAndWatch update: the IDs that are not healthy.
    pub async fn next_unhealthy(&mut self) -> Vec<String> {
        let list = next_list(&mut self.reg, WAIT).await;
        let mut bad: Vec<String> = list
            .devices
            .into_iter()
            .filter(|d| d.health != api::HEALTHY)
            .map(|d| d.id)
            .collect();
        bad.sort();
        bad
    }

    pub async fn stop(self) {
        common::node::terminate(self.plugin).await;
        self.kubelet.stop().await;
    }
}
