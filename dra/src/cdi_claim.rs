//! One transient CDI spec per prepared claim, as NVIDIA's driver writes (dra-facts §5, `cdi.go`):
//! kind `k8s.gpu.nvidia.com/claim`, file `<cdi dir>/k8s.gpu.nvidia.com-claim_<claim UID>.json`,
//! one CDI device `<claim UID>-<device name>` per allocated device, whose qualified names are
//! what `NodePrepareResources` returns. The edits come from `gpuhook_cdi` (`device_nodes` per
//! device, `common_edits` for the claim), so a claim's container gets exactly what the
//! generator, the prestart hook and the runtime wrapper give a container of the same devices.
//!
//! An MPS claim's spec adds, as NVIDIA's `MpsControlDaemon.GetCDIContainerEdits`:
//! `CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps`, the daemon's pipe dir bind-mounted there and its
//! `shm` dir at `/dev/shm`; and on each device the start check gpu-mps-daemon's spec carries:
//! a `createContainer` hook `gpuhook hook setup --mps-share <CDI ID>::<host pipe dir>`
//! (`gpuhook_request::check_mps_access`: the daemon's ready marker, its control socket, the
//! container user's access), so a container that cannot reach the claim's daemon fails at start
//! with a message instead of running without MPS limits.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gpuhook_cdi::edits::{add_mps_share, SetupMpsShare, IPC_MOUNT_OPTIONS};
use gpuhook_cdi::{common_edits, device_nodes, CdiError, ContainerEdits, EditOptions, Mount, Spec};
use gpuhook_node::{Capability, Inventory};

use crate::devices::NodeDevice;
use crate::mps::MpsEdits;

/// The CDI kind of claim specs (NVIDIA's vendor `k8s.gpu.nvidia.com`, class `claim`).
pub const CLAIM_KIND: &str = "k8s.gpu.nvidia.com/claim";
/// Where a claim's MPS pipe dir appears in its containers (CUDA's default).
pub const CONTAINER_PIPE_DIR: &str = "/tmp/nvidia-mps";
/// Where a claim's MPS `shm` dir appears in its containers.
pub const CONTAINER_SHM_DIR: &str = "/dev/shm";

/// A read-write bind mount of host `dir` at `at` (the IPC mount options of gpuhook's specs).
fn bind(dir: &Path, at: &str) -> Mount {
    Mount {
        host_path: dir.display().to_string(),
        container_path: at.into(),
        options: IPC_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
        mount_type: None,
    }
}

/// How claim specs are written.
#[derive(Debug, Clone)]
pub struct ClaimCdi {
    pub dir: PathBuf,
    pub edit_options: EditOptions,
    pub capabilities: BTreeSet<Capability>,
}

/// The spec file of claim `uid`.
pub fn spec_path(dir: &Path, uid: &str) -> PathBuf {
    dir.join(format!("k8s.gpu.nvidia.com-claim_{uid}.json"))
}

/// The CDI device name of `device` in claim `uid`.
pub fn device_name(uid: &str, device: &str) -> String {
    format!("{uid}-{device}")
}

/// The qualified CDI device ID returned to the kubelet.
pub fn device_id(uid: &str, device: &str) -> String {
    format!("{CLAIM_KIND}={}", device_name(uid, device))
}

impl ClaimCdi {
    /// The spec of claim `uid` with `devices`; `mps`: what its MPS daemon gives its containers.
    pub fn spec(
        &self,
        inv: &Inventory,
        uid: &str,
        devices: &[&NodeDevice],
        mps: Option<&MpsEdits>,
    ) -> Result<Spec, CdiError> {
        let mut common = common_edits(inv, &self.capabilities, &self.edit_options)?;
        if let Some(m) = mps {
            let mut mounts = vec![bind(&m.pipe, CONTAINER_PIPE_DIR)];
            mounts.extend(m.shm.as_deref().map(|s| bind(s, CONTAINER_SHM_DIR)));
            common.append(ContainerEdits {
                env: vec![format!("CUDA_MPS_PIPE_DIRECTORY={CONTAINER_PIPE_DIR}")],
                mounts,
                ..Default::default()
            });
        }
        let mut spec = Spec {
            cdi_version: String::new(),
            kind: CLAIM_KIND.into(),
            annotations: Default::default(),
            devices: Vec::new(),
            container_edits: common,
        };
        for d in devices {
            let mut edits = ContainerEdits {
                device_nodes: device_nodes(inv, &[d.dev])?,
                ..Default::default()
            };
            if let Some(m) = mps {
                let share = SetupMpsShare {
                    name: device_id(uid, &d.name),
                    pipe_dir: m.pipe.clone(),
                };
                add_mps_share(&mut edits, &self.edit_options, share)?;
            }
            spec.devices.push(gpuhook_cdi::Device {
                name: device_name(uid, &d.name),
                annotations: Default::default(),
                container_edits: edits,
            });
        }
        spec.cdi_version = gpuhook_cdi::minimum_version(&spec).to_string();
        Ok(spec)
    }

    /// Writes the spec of claim `uid` (atomically; validated first).
    pub fn write(&self, uid: &str, spec: &Spec) -> Result<PathBuf, CdiError> {
        let path = spec_path(&self.dir, uid);
        gpuhook_cdi::write_spec(spec, &path, gpuhook_cdi::Format::Json)?;
        Ok(path)
    }

    /// Removes the spec of claim `uid`; absent is fine.
    pub fn remove(&self, uid: &str) -> std::io::Result<()> {
        match std::fs::remove_file(spec_path(&self.dir, uid)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}
