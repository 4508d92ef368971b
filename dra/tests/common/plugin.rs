//! The plugin in-process on a temp dir, with a time slicer that refuses `Long`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpuhook_dra::cdi_claim::ClaimCdi;
use gpuhook_dra::config::{Allowed, Interval};
use gpuhook_dra::driver::DriverOptions;
use gpuhook_dra::kube::HttpCluster;
use gpuhook_dra::mps::MpsOptions;
use gpuhook_dra::run::{start, RunOptions, Running};
use gpuhook_dra::server::Sockets;
use gpuhook_dra::slices::UnhealthyPolicy;
use gpuhook_dra::testkit::inventory;
use gpuhook_dra::timeslice::TimeSlicer;

use super::apiserver::ApiServer;

pub const NODE: &str = "node-a";

#[derive(Debug)]
pub struct Slicer;
impl TimeSlicer for Slicer {
    fn set(&self, _: &str, i: Interval) -> Result<(), String> {
        match i {
            Interval::Long => Err("Not Supported".into()),
            _ => Ok(()),
        }
    }
}

pub fn plugin(dir: &Path, api: &ApiServer) -> Running {
    plugin_with(dir, api, Path::new("/nonexistent"))
}

/// The plugin with `control_binary` as nvidia-cuda-mps-control.
pub fn plugin_with(dir: &Path, api: &ApiServer, control_binary: &Path) -> Running {
    plugin_full(dir, api, control_binary, None)
}

/// The plugin with `control_binary` and the health monitor on NVML `nvml` (driver root, library).
pub fn plugin_full(
    dir: &Path,
    api: &ApiServer,
    control_binary: &Path,
    nvml: Option<(PathBuf, Option<PathBuf>)>,
) -> Running {
    plugin_node(dir, api, control_binary, nvml, inventory(), None)
}

/// The plugin on node inventory `inv`, with partitionable MIG devices when `partitionable`.
pub fn plugin_node(
    dir: &Path,
    api: &ApiServer,
    control_binary: &Path,
    nvml: Option<(PathBuf, Option<PathBuf>)>,
    inv: gpuhook_node::Inventory,
    partitionable: Option<gpuhook_node::DiscoverOptions>,
) -> Running {
    plugin_allowed(
        dir,
        api,
        control_binary,
        nvml,
        inv,
        partitionable,
        Allowed::default(),
    )
}

/// [`plugin_node`] with the sharing strategies `allowed`.
pub fn plugin_allowed(
    dir: &Path,
    api: &ApiServer,
    control_binary: &Path,
    nvml: Option<(PathBuf, Option<PathBuf>)>,
    inv: gpuhook_node::Inventory,
    partitionable: Option<gpuhook_node::DiscoverOptions>,
    allowed: Allowed,
) -> Running {
    let opts = driver_options(dir, control_binary, allowed);
    start_with(dir, api, opts, nvml, inv, partitionable)
}

/// The driver's options for a plugin on `dir` with `control_binary` as nvidia-cuda-mps-control.
pub fn driver_options(dir: &Path, control_binary: &Path, allowed: Allowed) -> DriverOptions {
    DriverOptions {
        driver: "gpu.nvidia.com".into(),
        node: NODE.into(),
        checkpoint: dir.join("plugin/checkpoint.json"),
        cdi: ClaimCdi {
            dir: dir.join("cdi"),
            edit_options: gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
            capabilities: [gpuhook_node::Capability::Compute].into(),
        },
        mps: MpsOptions {
            shm: is_root(),
            ..gpuhook_dra::testkit::mps_options(
                dir.join("plugin/mps"),
                control_binary.to_path_buf(),
            )
        },
        allowed,
    }
}

/// The plugin with driver options `opts`.
pub fn start_with(
    dir: &Path,
    api: &ApiServer,
    opts: DriverOptions,
    nvml: Option<(PathBuf, Option<PathBuf>)>,
    inv: gpuhook_node::Inventory,
    partitionable: Option<gpuhook_node::DiscoverOptions>,
) -> Running {
    let run = RunOptions {
        sockets: Sockets {
            registry_dir: dir.join("plugins_registry"),
            plugin_dir: dir.join("plugin"),
        },
        sys_root: dir.join("sys-root"),
        publish: true,
        unhealthy: UnhealthyPolicy::Taint,
        republish: Duration::from_secs(3600),
        health_service: true,
        nvml,
        partitionable,
    };
    let cluster = Arc::new(HttpCluster::plain(&api.url).unwrap());
    start(opts, run, inv, cluster, Arc::new(Slicer)).unwrap()
}

/// Whether the tests run as root (each claim daemon's own `/dev/shm` needs it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

pub fn specs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("cdi"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

pub async fn wait_for<F: Fn() -> bool>(what: &str, f: F) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}
