//! Allocate: from the device IDs the kubelet picked to what the container gets, with NVIDIA
//! k8s-device-plugin v0.20's semantics (`internal/rm/rm.go:ValidateRequest`,
//! `internal/plugin/server.go:getAllocateResponse`, `internal/plugin/mps.go`), except that CDI
//! names use gpuhook's own spec kinds so gpuhook's specs resolve them:
//!
//! - a GPU or MIG device: `nvidia.com/gpu=<id>` (gpuhook's `nvidia.com/gpu` spec names devices
//!   `<index>`, `<i>:<j>`, `GPU-…` and `MIG-…`; `<id>` follows deviceIDStrategy), where NVIDIA
//!   says `k8s.device-plugin.nvidia.com/gpu=<id>` (a spec only its own plugin writes);
//! - an MPS share: `nvidia.com/gpu-mps=<uuid|index>`, gpu-mps-daemon's spec device, which holds
//!   the GPU, the pipe directory, `/dev/shm` and the share's limits.
//!
//! MPS under envvar/volume-mounts: `CUDA_MPS_PIPE_DIRECTORY`, the share's limits (from the
//! daemon's spec, [`crate::mps_share`]) and mounts of gpu-mps-daemon's
//! per-GPU layout (`<mpsRoot>/<uuid>/pipe`, `<mpsRoot>/<uuid>/shm` when the daemon made one),
//! where NVIDIA mounts a per-resource `<mpsRoot>/<resource>/pipe`. A container gets one GPU's
//! MPS share: one pipe directory.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use gpuhook_sharing::{DeviceListStrategy, SharingKind};

use crate::api::{CdiDevice, ContainerAllocateResponse, DeviceSpec, Mount};
use crate::served::{Served, GPU_CDI_KIND, MPS_CDI_KIND};

/// Where volume-mounts lists devices (`NVIDIA_VISIBLE_DEVICES` value and mount parent).
pub const VOLUME_MOUNTS_ROOT: &str = "/var/run/nvidia-container-devices";
/// Control nodes passed with passDeviceSpecs when they exist.
const CONTROL_NODES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// Why a request is refused; the text follows NVIDIA's, so users' runbooks keep matching.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocateError {
    #[error(
        "invalid allocation request for \"{resource}\": invalid request: unknown device: {id}"
    )]
    UnknownDevice { resource: String, id: String },
    #[error(
        "invalid allocation request for \"{resource}\": invalid request: maximum request size for \
         shared resources is 1; found {found} (failRequestsGreaterThanOne is set: request 1 \
         replica per container)"
    )]
    TooManyShares { resource: String, found: usize },
    #[error(
        "invalid allocation request for \"{resource}\": an MPS container connects to one GPU's \
         MPS daemon, but the request spans GPUs {gpus}; request 1 replica per container"
    )]
    MpsSpansGpus { resource: String, gpus: String },
    #[error(
        "cannot allocate \"{resource}\": MPS needs mpsRoot (flags.mpsRoot in the config, the \
         directory gpu-mps-daemon serves)"
    )]
    NoMpsRoot { resource: String },
}

/// `ValidateRequest`: every ID advertised; at most one replica when failRequestsGreaterThanOne.
pub fn validate(served: &Served, ids: &[String]) -> Result<(), AllocateError> {
    let resource = &served.resource;
    if let Some(id) = ids.iter().find(|id| served.device(id).is_none()) {
        return Err(AllocateError::UnknownDevice {
            resource: resource.name.clone(),
            id: id.clone(),
        });
    }
    let shared = resource.sharing != SharingKind::None;
    if shared
        && resource.fail_requests_greater_than_one
        && ids.len() > 1
        && ids.iter().any(|id| id.contains("::"))
    {
        return Err(AllocateError::TooManyShares {
            resource: resource.name.clone(),
            found: ids.len(),
        });
    }
    Ok(())
}

/// The response for one container's request.
pub fn container_response(
    served: &Served,
    ids: &[String],
) -> Result<ContainerAllocateResponse, AllocateError> {
    validate(served, ids)?;
    let s = &served.settings;
    let devices: Vec<_> = ids.iter().filter_map(|id| served.device(id)).collect();
    let mps = served.resource.sharing == SharingKind::Mps;
    if mps {
        // One rule for every strategy: under CDI, N GPUs' `gpu-mps` devices would give the
        // container N GPUs but one reachable MPS daemon (they all mount the same pipe path).
        one_mps_gpu(served, &devices)?;
    }
    // deviceIDs: the env/CDI name of each device, first-seen order, no duplicates.
    let mut seen = BTreeSet::new();
    let names: Vec<String> = devices
        .iter()
        .map(|d| d.backing.device_name.clone())
        .filter(|n| seen.insert(n.clone()))
        .collect();
    let mut r = ContainerAllocateResponse::default();
    let is_cdi = |st: &DeviceListStrategy| {
        matches!(
            st,
            DeviceListStrategy::CdiAnnotations | DeviceListStrategy::CdiCri
        )
    };
    let kind = if mps { MPS_CDI_KIND } else { GPU_CDI_KIND };
    let cdi_names: Vec<String> = names.iter().map(|n| format!("{kind}={n}")).collect();
    if s.strategies.contains(&DeviceListStrategy::CdiAnnotations) && !cdi_names.is_empty() {
        let key = format!(
            "{}nvidia-device-plugin_{}",
            s.cdi_annotation_prefix,
            response_id()
        );
        r.annotations.insert(key, cdi_names.join(","));
    }
    if s.strategies.contains(&DeviceListStrategy::CdiCri) {
        r.cdi_devices = cdi_names
            .iter()
            .map(|name| CdiDevice { name: name.clone() })
            .collect();
    }
    if s.strategies.iter().all(is_cdi) {
        return Ok(r);
    }
    if mps {
        mps_edits(served, &devices, &mut r)?;
    }
    if s.strategies.contains(&DeviceListStrategy::Envvar) {
        r.envs
            .insert("NVIDIA_VISIBLE_DEVICES".into(), names.join(","));
    }
    if s.strategies.contains(&DeviceListStrategy::VolumeMounts) {
        r.envs
            .insert("NVIDIA_VISIBLE_DEVICES".into(), VOLUME_MOUNTS_ROOT.into());
        r.mounts.extend(names.iter().map(|n| Mount {
            container_path: format!("{VOLUME_MOUNTS_ROOT}/{n}"),
            host_path: "/dev/null".into(),
            read_only: false,
        }));
    }
    if s.pass_device_specs {
        r.devices = device_specs(served, &devices);
    }
    Ok(r)
}

/// MPS under a non-CDI strategy: the pipe directory and `/dev/shm` of the one GPU's daemon.
fn mps_edits(
    served: &Served,
    devices: &[&gpuhook_sharing::AdvertisedDevice],
    r: &mut ContainerAllocateResponse,
) -> Result<(), AllocateError> {
    let resource = served.resource.name.clone();
    let Some(uuid) = one_mps_gpu(served, devices)? else {
        return Ok(());
    };
    let root = served
        .settings
        .mps_root
        .as_ref()
        .ok_or(AllocateError::NoMpsRoot { resource })?;
    let dir = root.join(uuid);
    let pipe_in = &served.settings.container_pipe_dir;
    r.envs
        .insert("CUDA_MPS_PIPE_DIRECTORY".into(), pipe_in.clone());
    // The share's client limits, as gpu-mps-daemon's CDI device gives them (NVIDIA passes none:
    // its clients get the server's limits only).
    match crate::mps_share::share_env(root, uuid) {
        Ok(env) => r.envs.extend(env),
        Err(e) => tracing::warn!(
            gpu = %uuid,
            error = %crate::error::chain(&e),
            "MPS share limits not passed to the container: its clients get the daemon's server limits"
        ),
    }
    r.mounts.push(Mount {
        container_path: pipe_in.clone(),
        host_path: dir.join("pipe").display().to_string(),
        read_only: false,
    });
    let shm = dir.join("shm");
    if shm.is_dir() {
        r.mounts.push(Mount {
            container_path: "/dev/shm".into(),
            host_path: shm.display().to_string(),
            read_only: false,
        });
    }
    Ok(())
}

/// The one GPU an MPS request's devices share (`None`: no device); devices of several GPUs are
/// refused ([`AllocateError::MpsSpansGpus`]) under every strategy.
fn one_mps_gpu<'a>(
    served: &Served,
    devices: &[&'a gpuhook_sharing::AdvertisedDevice],
) -> Result<Option<&'a str>, AllocateError> {
    let gpus: BTreeSet<&str> = devices
        .iter()
        .map(|d| d.backing.gpu_uuid.as_str())
        .collect();
    if gpus.len() > 1 {
        let gpus = gpus.into_iter().collect::<Vec<_>>().join(", ");
        return Err(AllocateError::MpsSpansGpus {
            resource: served.resource.name.clone(),
            gpus,
        });
    }
    Ok(gpus.first().copied())
}

/// passDeviceSpecs: the control nodes that exist, then each device's nodes, `rw`, host paths
/// under the dev root. Duplicates (replicas of one GPU, MIG devices of one parent) are dropped.
fn device_specs(
    served: &Served,
    devices: &[&gpuhook_sharing::AdvertisedDevice],
) -> Vec<DeviceSpec> {
    let s = &served.settings;
    let host = |p: &str| s.dev_root.join(p.trim_start_matches('/'));
    let mut paths: Vec<String> = CONTROL_NODES
        .iter()
        .filter(|p| host(p).exists())
        .map(|p| (*p).to_string())
        .collect();
    for d in devices {
        let key = d
            .backing
            .mig
            .as_ref()
            .map_or(&d.backing.gpu_uuid, |m| &m.uuid);
        paths.extend(s.device_paths.get(key).into_iter().flatten().cloned());
    }
    let mut seen = BTreeSet::new();
    paths
        .into_iter()
        .filter(|p| seen.insert(p.clone()))
        .map(|p| DeviceSpec {
            host_path: host(&p).display().to_string(),
            container_path: p,
            permissions: "rw".into(),
        })
        .collect()
}

/// A per-process unique suffix for the CDI annotation key (NVIDIA uses a fresh UUID): the
/// start time and a counter, so two resources' annotations on one container never collide.
fn response_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let start = START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    });
    format!("{start:x}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
#[path = "allocate_tests.rs"]
mod tests;
