//! The node's MIG layout, as the manager drives it: a preview (what a config would change, with
//! nothing written) and the apply. [`MigParted`] is the real one: gpuhook-mig's parser, planner
//! and apply over NVML loaded from the driver root (a fresh load per call, so a re-partition made
//! by another process is seen); tests use fakes. A MIG device that a process, a pod or an MPS
//! client holds is not destroyed unless the manager drains ([`crate::holders`]).

use std::io::Read;
use std::path::PathBuf;

use gpuhook_mig::{
    apply, assert_applied, entry_matches, ApplyOptions, DeviceHolders, GpuStatus, MigBackend,
    MigConfigFile, MigConfigSpec, NoHolders, NvmlBackend, Outcome, MAX_CONFIG_BYTES,
};
use gpuhook_node::{Nvml, NvmlLocation};

use crate::holders::HolderSources;

/// One GPU in a preview or an apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRef {
    pub index: u32,
    pub uuid: String,
}

/// What applying a config would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    /// GPUs that would be written to (mode or instances).
    pub changes: Vec<GpuRef>,
    /// GPUs whose MIG mode change is already set and waits for a GPU reset or a reboot.
    pub pending_reset: Vec<GpuRef>,
}

/// Why a config cannot be previewed or applied. The message names the file, the config, the GPU.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub String);

/// What the manager needs of the MIG layer.
pub trait Layout {
    /// Reads the config file, selects `name`, plans it against the GPUs: writes nothing.
    fn preview(&mut self, name: &str) -> Result<Preview, LayoutError>;
    /// Applies `name`; returns the GPUs whose mode change waits for a reset or reboot. On
    /// success every other selected GPU has been checked to hold the layout asked for.
    fn apply(&mut self, name: &str) -> Result<Vec<GpuRef>, LayoutError>;
}

/// [`Layout`] over gpuhook-mig and NVML.
#[derive(Debug, Clone)]
pub struct MigParted {
    /// The mig-parted config file (the mounted ConfigMap key), re-read at every call.
    pub config_file: PathBuf,
    pub driver_root: PathBuf,
    pub nvml_lib: Option<PathBuf>,
    /// Who holds the devices (NVML's processes always; pods and MPS clients where set).
    pub holders: HolderSources,
    /// Destroy held MIG devices anyway (and change held GPUs' modes).
    pub drain: bool,
}

fn err(e: impl std::fmt::Display) -> LayoutError {
    LayoutError(e.to_string())
}

impl MigParted {
    fn entries(&self, name: &str) -> Result<Vec<MigConfigSpec>, LayoutError> {
        let path = &self.config_file;
        let f = std::fs::File::open(path).map_err(|e| {
            err(format!(
                "cannot read MIG config file {}: {e}",
                path.display()
            ))
        })?;
        let mut bytes = Vec::new();
        let limit = u64::try_from(MAX_CONFIG_BYTES).unwrap_or(u64::MAX);
        f.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| {
                err(format!(
                    "cannot read MIG config file {}: {e}",
                    path.display()
                ))
            })?;
        let file = MigConfigFile::parse(&bytes, &path.display().to_string()).map_err(err)?;
        let entries = file.config(name).map_err(|e| {
            err(format!(
                "{e} (label {}={name}; the configs in {} are: {})",
                crate::labels::CONFIG_LABEL,
                path.display(),
                file.names().join(", ")
            ))
        })?;
        Ok(entries.to_vec())
    }

    fn backend(&self) -> Result<NvmlBackend, LayoutError> {
        let location =
            NvmlLocation::locate(&self.driver_root, self.nvml_lib.as_deref()).map_err(err)?;
        Ok(NvmlBackend::new(Nvml::load(&location).map_err(err)?))
    }
}

fn gpus_with(outcome: &Outcome, status: &GpuStatus, uuids: &[(u32, String)]) -> Vec<GpuRef> {
    outcome
        .gpus
        .iter()
        .filter(|g| &g.status == status)
        .map(|g| GpuRef {
            index: g.index,
            uuid: uuids
                .iter()
                .find(|(i, _)| *i == g.index)
                .map(|(_, u)| u.clone())
                .unwrap_or_default(),
        })
        .collect()
}

fn failures(outcome: &Outcome) -> Result<(), LayoutError> {
    let failed: Vec<String> = outcome
        .failed()
        .iter()
        .map(|g| match &g.status {
            GpuStatus::Failed(why) => why.clone(),
            _ => String::new(),
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(LayoutError(failed.join("; ")))
    }
}

fn uuids(backend: &mut dyn MigBackend) -> Result<Vec<(u32, String)>, LayoutError> {
    Ok(backend
        .gpus()
        .map_err(err)?
        .into_iter()
        .map(|g| (g.index, g.uuid))
        .collect())
}

impl Layout for MigParted {
    fn preview(&mut self, name: &str) -> Result<Preview, LayoutError> {
        let entries = self.entries(name)?;
        let mut backend = self.backend()?;
        let ids = uuids(&mut backend)?;
        let opts = ApplyOptions {
            dry_run: true,
            ..ApplyOptions::default()
        };
        let outcome = apply(&mut backend, &entries, &NoHolders, opts).map_err(err)?;
        failures(&outcome)?;
        Ok(Preview {
            changes: gpus_with(&outcome, &GpuStatus::Planned, &ids),
            pending_reset: gpus_with(&outcome, &GpuStatus::PendingReset, &ids),
        })
    }

    fn apply(&mut self, name: &str) -> Result<Vec<GpuRef>, LayoutError> {
        let entries = self.entries(name)?;
        let mut backend = self.backend()?;
        let ids = uuids(&mut backend)?;
        let holders = if self.drain {
            DeviceHolders::default()
        } else {
            self.holders.collect(&backend).map_err(LayoutError)?
        };
        let opts = ApplyOptions {
            drain: self.drain,
            ..ApplyOptions::default()
        };
        let outcome = apply(&mut backend, &entries, &holders, opts).map_err(err)?;
        failures(&outcome)?;
        let pending = gpus_with(&outcome, &GpuStatus::PendingReset, &ids);
        if pending.is_empty() {
            // "Applied" must mean the layout is there (mig-parted once reported success with
            // zero instances): read the GPUs again and compare.
            let mut gpus = backend.gpus().map_err(err)?;
            gpus.retain(|g| entries.iter().any(|e| entry_matches(e, g)));
            let problems = assert_applied(&gpus, &entries, false).map_err(err)?;
            if !problems.is_empty() {
                return Err(LayoutError(format!(
                    "config {name} applied but the GPUs do not hold it: {}",
                    problems.join("; ")
                )));
            }
        }
        Ok(pending)
    }
}
