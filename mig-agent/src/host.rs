//! What the manager does on the node itself: find the GPU clients' processes (the host's `/proc`,
//! the pod runs with `hostPID`), refresh the CDI spec and inventory, reboot. [`NodeHost`] is the
//! real one; tests use fakes.
//!
//! Waiting for clients through their processes instead of their pods keeps the manager's RBAC to
//! its own Node: NVIDIA's manager lists pods (`app=nvidia-device-plugin-daemonset`, …) in one
//! namespace, which needs `list pods` cluster-wide and misses a client deployed under another
//! name. A process is what holds a GPU, whatever deployed it.

use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::labels::GpuClient;
use crate::layout::GpuRef;

/// The processes /proc is scanned for at most (bounds the walk).
const MAX_PROCS: usize = 1 << 16;

/// A running process of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub label: &'static str,
    pub pid: u32,
    pub comm: String,
}

impl std::fmt::Display for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {}, {})", self.comm, self.pid, self.label)
    }
}

/// Why a host step failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

/// What the manager needs of the node.
pub trait Host {
    /// The running processes of `clients` that hold one of `gpus` (a GPU-scoped client only when
    /// it serves one of them; a node-wide client always).
    fn holders(&self, clients: &[GpuClient], gpus: &[GpuRef]) -> Vec<Proc>;
    /// Regenerates the CDI spec and the inventory cache for the new layout.
    fn refresh_cdi(&self) -> Result<(), HostError>;
    /// Reboots the node (returns when the reboot was started).
    fn reboot(&self) -> Result<(), HostError>;
}

/// A program and its arguments, run chrooted into the host root when `root` is set (the program
/// is then a host path: the installed gpuhook, the host's systemctl).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub root: Option<PathBuf>,
}

impl Argv {
    /// Runs it to the end with a minimal environment; a non-zero exit is an error with the end
    /// of its stderr.
    pub fn run(&self, what: &str) -> Result<(), HostError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::null());
        if let Some(root) = &self.root {
            let dir = CString::new(root.as_os_str().as_bytes())
                .map_err(|_| HostError(format!("{what}: bad host root {}", root.display())))?;
            // SAFETY: the closure runs in the forked child before exec and calls only chroot(2)
            // and chdir(2), both async-signal-safe, on a CString made before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::chroot(dir.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let out = cmd.output().map_err(|e| {
            HostError(format!(
                "{what}: cannot run {}: {e}",
                self.program.display()
            ))
        })?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .trim()
            .chars()
            .rev()
            .take(400)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Err(HostError(format!(
            "{what}: {} {} exited with {}: {tail}",
            self.program.display(),
            self.args.join(" "),
            out.status
        )))
    }
}

/// The real node.
#[derive(Debug, Clone)]
pub struct NodeHost {
    /// The host's `/proc` (the pod's own with `hostPID: true`).
    pub proc_root: PathBuf,
    /// gpuhook's MPS root: `<mps_root>/<GPU-UUID>` exists while the daemon serves that GPU.
    pub mps_root: PathBuf,
    /// `gpuhook cdi generate …` (or `cdi refresh`) with the node's flags.
    pub cdi_refresh: Option<Argv>,
    pub reboot: Argv,
}

/// `/proc/<pid>/comm`, bounded.
fn comm(dir: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(dir.join("comm"))
        .ok()?
        .take(64)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim_end().to_string())
}

/// Every process of `clients` under `proc_root`.
pub fn client_processes(proc_root: &Path, clients: &[GpuClient]) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten().take(MAX_PROCS) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(name) = comm(&e.path()) else {
            continue;
        };
        if let Some(c) = clients.iter().find(|c| c.runs_as(&name)) {
            out.push(Proc {
                label: c.label,
                pid,
                comm: name,
            });
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

impl Host for NodeHost {
    fn holders(&self, clients: &[GpuClient], gpus: &[GpuRef]) -> Vec<Proc> {
        let serves = |c: &GpuClient| {
            !c.gpu_scoped || gpus.iter().any(|g| self.mps_root.join(&g.uuid).exists())
        };
        let wanted: Vec<GpuClient> = clients.iter().copied().filter(serves).collect();
        client_processes(&self.proc_root, &wanted)
    }

    fn refresh_cdi(&self) -> Result<(), HostError> {
        match &self.cdi_refresh {
            Some(argv) => argv.run("CDI spec refresh"),
            None => Ok(()),
        }
    }

    fn reboot(&self) -> Result<(), HostError> {
        self.reboot.run("reboot")
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
