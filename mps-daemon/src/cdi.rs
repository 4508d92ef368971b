//! The `nvidia.com/gpu-mps` CDI spec: how a container is connected to a GPU's MPS daemon.
//!
//! A container of an MPS GPU needs more than the GPU: the daemon's pipe directory (read-write,
//! with `CUDA_MPS_PIPE_DIRECTORY` pointing at it), the shared `/dev/shm` when the daemon has one,
//! and its share's client limits. Those depend on this daemon's layout and config, so the daemon
//! writes a spec of its own kind, `/var/run/cdi/nvidia.com-gpu-mps.json` by default (directory
//! `mpsDaemon.cdiSpecDir` / `--cdi-spec-dir`), with, for every MPS GPU:
//!
//! - devices `<index>` and `<uuid>`: the default share (1/replicas, or the `mpsDaemon.gpus`
//!   override);
//! - devices `<index>-<share>` and `<uuid>-<share>` for every `mpsDaemon.shares` entry.
//!
//! Each device carries the GPU's own device and driver edits ([`gpuhook_cdi::edits_for`] with
//! the `compute` and `utility` capabilities, the same edits as `nvidia.com/gpu=<index>`), then
//! `CUDA_MPS_PIPE_DIRECTORY=<containerPipeDirectory>`, `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<M>M` and the mounts, and its setup hook carries
//! `--mps-share <name>::<host pipe directory>`: `gpuhook hook setup` refuses the start when the
//! container's user cannot use the share (`gpuhook_request::check_mps_access`, the check the
//! runtime wrapper and the prestart hook run), so a runtime that applies this spec itself checks
//! too. A container uses ONE device of this
//! kind (one pipe directory per container).
//!
//! Host paths in the spec are the runtime's view: `mpsRoot` must be the same path on the host
//! (mount it at the same path when this daemon runs in a container), and `hostDriverRoot` names
//! the driver root as the host sees it when it is mounted elsewhere here (e.g. `/driver-root`).
//!
//! A GPU's devices appear in the file only once its daemon has been ready (limits applied) since
//! this daemon started or the GPU's settings last changed, so no container is created against a
//! daemon that is not limited yet; a later restart of its control daemon keeps them (the pipe
//! directory is the same). The file is validated before every write, written atomically, not
//! rewritten when unchanged, and removed at shutdown (and when no GPU is ready).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gpuhook_cdi::edits::{add_mps_share, SetupMpsShare, IPC_MOUNT_OPTIONS};
use gpuhook_cdi::{
    default_file_name, edits_for, minimum_version, validate_spec, write_spec, CdiError,
    ContainerEdits, Device, EditOptions, Format, Mount, Spec, WriteOutcome,
};
use gpuhook_node::{Capability, DeviceRef, Inventory};

use crate::layout::GpuLayout;
use crate::plan::{GpuPlan, Plan};
use crate::settings::ShareLimits;

/// Kind of our spec.
pub const CDI_KIND: &str = "nvidia.com/gpu-mps";

/// Path of the spec file in `dir`.
pub fn spec_path(dir: &Path) -> PathBuf {
    dir.join(default_file_name(CDI_KIND, Format::Json))
}

/// The two device names (`<index>[-share]`, `<uuid>[-share]`) of a share of a GPU.
pub fn device_names(g: &GpuPlan, share: &ShareLimits) -> [String; 2] {
    let suffix = share
        .name
        .as_ref()
        .map(|n| format!("-{n}"))
        .unwrap_or_default();
    [
        format!("{}{suffix}", g.index),
        format!("{}{suffix}", g.uuid),
    ]
}

fn path_str(p: &Path) -> Result<String, CdiError> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| CdiError::InvalidOption {
            option: "mpsRoot",
            message: format!("{} is not UTF-8", p.display()),
        })
}

fn rw_mount(host: &Path, container: &Path) -> Result<Mount, CdiError> {
    Ok(Mount {
        host_path: path_str(host)?,
        container_path: path_str(container)?,
        options: IPC_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
        mount_type: None,
    })
}

/// The devices of one GPU (every share, both names).
pub fn gpu_devices(plan: &Plan, g: &GpuPlan, inv: &Inventory) -> Result<Vec<Device>, CdiError> {
    let caps: BTreeSet<Capability> = [Capability::Compute, Capability::Utility].into();
    let opts = EditOptions::new(&plan.cdi.gpuhook_path);
    let base = edits_for(inv, &[DeviceRef::Gpu { index: g.index }], &caps, &opts)?;
    let layout = GpuLayout::new(&plan.mps_root, &g.uuid);
    let pipe_in = &plan.cdi.container_pipe_directory;
    let mut mounts = vec![rw_mount(&layout.pipe, pipe_in)?];
    if g.shm_size.is_some() {
        mounts.push(rw_mount(&layout.shm, Path::new("/dev/shm"))?);
    }
    let mut out = Vec::new();
    for share in &g.shares {
        let mut edits = base.clone();
        let mut env = vec![
            format!("CUDA_MPS_PIPE_DIRECTORY={}", path_str(pipe_in)?),
            format!(
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={}",
                share.active_thread_percentage
            ),
        ];
        if let Some(m) = share.pinned_memory_limit_mib {
            // Ordinal 0: the container sees only this GPU.
            env.push(format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={m}M"));
        }
        edits.append(ContainerEdits {
            env,
            mounts: mounts.clone(),
            ..Default::default()
        });
        for name in device_names(g, share) {
            // The start check runs in the share's own hook: a CDI-aware runtime (podman,
            // containerd 1.7+) applies this spec without the wrapper or the prestart hook.
            let mut container_edits = edits.clone();
            let share = SetupMpsShare {
                name: format!("{CDI_KIND}={name}"),
                pipe_dir: layout.pipe.clone(),
            };
            add_mps_share(&mut container_edits, &opts, share)?;
            out.push(Device {
                name,
                annotations: BTreeMap::new(),
                container_edits,
            });
        }
    }
    Ok(out)
}

/// The spec for the GPUs of `plan` whose UUID is in `uuids` (all when `None`); `None` when that
/// selects no GPU. The spec is validated.
pub fn build_spec(
    plan: &Plan,
    inv: &Inventory,
    uuids: Option<&BTreeSet<String>>,
) -> Result<Option<Spec>, CdiError> {
    let host_view = plan.cdi.host_driver_root.as_ref().map(|root| {
        let mut v = inv.clone();
        v.driver_root = root.clone();
        v.dev_root = root.clone();
        v
    });
    let inv = host_view.as_ref().unwrap_or(inv);
    let mut devices = Vec::new();
    for g in &plan.gpus {
        if uuids.is_none_or(|u| u.contains(&g.uuid)) {
            devices.extend(gpu_devices(plan, g, inv)?);
        }
    }
    if devices.is_empty() {
        return Ok(None);
    }
    let mut spec = Spec {
        cdi_version: String::new(),
        kind: CDI_KIND.to_string(),
        devices,
        ..Default::default()
    };
    spec.cdi_version = minimum_version(&spec).to_string();
    validate_spec(&spec).map_err(|errors| CdiError::Invalid { errors })?;
    Ok(Some(spec))
}

/// Writes (or, for `None`, removes) the spec at `path`. Returns whether the file changed.
pub fn publish(path: &Path, spec: Option<&Spec>) -> Result<bool, CdiError> {
    match spec {
        Some(s) => Ok(write_spec(s, path, Format::Json)? == WriteOutcome::Written),
        None => remove_spec(path),
    }
}

/// Largest spec file read back (ours are a few KiB per GPU).
const MAX_SPEC_BYTES: u64 = 4 << 20;

/// Removes our spec file; a file of another kind (or not a spec) is left alone with an error.
pub fn remove_spec(path: &Path) -> Result<bool, CdiError> {
    // Bounded, no symlink, no FIFO: whatever is at the path, reading it cannot hang us.
    let bytes = match crate::safefs::read_bounded(path, MAX_SPEC_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(CdiError::Io {
                op: "read",
                path: path.into(),
                error: source,
            })
        }
    };
    let ours = Spec::from_slice(&bytes, Some(Format::Json))
        .map_err(|e| e.to_string())
        .and_then(|s| gpuhook_cdi::is_ours(&s, CDI_KIND).map_err(|e| e.to_string()));
    if let Err(reason) = ours {
        return Err(CdiError::NotOurs {
            path: path.into(),
            reason,
        });
    }
    std::fs::remove_file(path).map_err(|error| CdiError::Io {
        op: "remove",
        path: path.into(),
        error,
    })?;
    Ok(true)
}

#[cfg(test)]
#[path = "cdi_tests.rs"]
mod tests;
