//! `gpuhook doctor`: why does this node, or this container, have no GPU?
//!
//! A container without a GPU is the end of a chain — driver loaded, NVML usable, a CDI spec that
//! matches the driver and the MIG layout and that no other spec shadows, containerd running our
//! runtime under the handler the RuntimeClass names, a device plugin registered, the MPS daemon
//! ready, and the container's request admitted by the node policy — and each link fails silently
//! somewhere else (a runtime log, a kubelet event). The doctor walks the chain with the product's
//! own code (discovery, the CDI registry, `runtime configure`'s planner, the request parser) and
//! says, per link, ok/warn/fail and the one-line fix.
//!
//! It only reads: no file is written, no socket connected, nothing started; every read is bounded
//! (file sizes, directory listings) and a check that cannot read its input fails with the reason
//! instead of aborting the others.

mod container;
mod containerd;
mod engines;
mod node;
mod services;
mod spec;

use std::path::PathBuf;

use serde::Serialize;

use crate::request::RequestPolicy;

/// Largest JSON or TOML file the doctor reads (state files, configs); real ones are KiBs.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most entries the doctor lists in one directory.
pub const MAX_DIR_ENTRIES: usize = 4096;

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One finding: which check, its outcome, what was seen, and the fix (for warn/fail).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(check: &'static str, message: impl Into<String>) -> Self {
        Finding {
            check,
            status: Status::Ok,
            message: message.into(),
            fix: None,
        }
    }

    pub fn warn(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            check,
            status: Status::Warn,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            check,
            status: Status::Fail,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The container to explain: its id and the runc state root that holds `<id>/state.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerTarget {
    pub id: String,
    pub runc_root: PathBuf,
}

/// What to examine, with the node's defaults filled in by the caller.
#[derive(Debug, Clone)]
pub struct Options {
    pub driver_root: PathBuf,
    /// NVML to load instead of the driver root's (as `cdi generate --nvml-lib`).
    pub nvml_lib: Option<PathBuf>,
    /// CDI spec directories, lowest priority first.
    pub spec_dirs: Vec<PathBuf>,
    /// Our CDI kind (`nvidia.com/gpu`).
    pub cdi_kind: String,
    pub inventory_cache: PathBuf,
    pub containerd_config: PathBuf,
    /// Where `runtime configure --drop-in` writes.
    pub containerd_drop_in: PathBuf,
    pub runtime_name: String,
    pub runtime_binary: PathBuf,
    /// Docker's `daemon.json`.
    pub docker_config: PathBuf,
    /// CRI-O's `crio.conf` and the drop-in `runtime configure --runtime crio` writes.
    pub crio_config: PathBuf,
    pub crio_drop_in: PathBuf,
    /// Where `dockerd`, `crio` and `nvidia-container-runtime-hook` are looked for (the doctor's
    /// `PATH`).
    pub engine_path: Option<std::ffi::OsString>,
    /// kubelet's device plugin directory.
    pub device_plugin_dir: PathBuf,
    /// gpu-mps-daemon's root (`status.json`, `<uuid>/ready`).
    pub mps_root: PathBuf,
    pub container: Option<ContainerTarget>,
    pub policy: RequestPolicy,
}

/// Every finding, in check order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst status of all findings.
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// Findings of `check`.
    pub fn of<'a>(&'a self, check: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
        self.findings.iter().filter(move |f| f.check == check)
    }

    /// One line per finding (`[fail] check: message` and an indented `fix:` line).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!(
                "[{}] {}: {}\n",
                f.status.as_str(),
                f.check,
                f.message
            ));
            if let Some(fix) = &f.fix {
                out.push_str(&format!("       fix: {fix}\n"));
            }
        }
        let count = |s| self.findings.iter().filter(|f| f.status == s).count();
        out.push_str(&format!(
            "{} ok, {} warn, {} fail\n",
            count(Status::Ok),
            count(Status::Warn),
            count(Status::Fail)
        ));
        out
    }
}

/// Runs every check.
pub fn run(opts: &Options) -> Report {
    let mut findings = Vec::new();
    let node = node::check(opts, &mut findings);
    spec::check(opts, node.as_ref(), &mut findings);
    containerd::check(opts, &mut findings);
    engines::check(opts, &mut findings);
    services::check(opts, &mut findings);
    if let Some(target) = &opts.container {
        container::check(opts, target, &mut findings);
    }
    Report { findings }
}

/// Sorted names in `dir`, at most [`MAX_DIR_ENTRIES`] (the rest is cut, and said).
pub(crate) fn list_dir(dir: &std::path::Path) -> std::io::Result<(Vec<String>, bool)> {
    let mut names = Vec::new();
    let mut cut = false;
    for entry in std::fs::read_dir(dir)? {
        if names.len() >= MAX_DIR_ENTRIES {
            cut = true;
            break;
        }
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort_unstable();
    Ok((names, cut))
}

#[cfg(test)]
mod tests;
