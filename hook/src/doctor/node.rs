//! The driver root and NVML: is there a driver, and can the product talk to it?
//!
//! NVML is located exactly as `cdi generate` and the runtime wrapper locate it (the driver root's
//! `ld.so.cache`, then the standard folders), loaded, and asked for the driver version and the
//! device count; the node state comes from the same fingerprint `cdi refresh` polls.

use gpuhook_node::fingerprint::Fingerprint;
use gpuhook_node::procfs::{ProcFs, PROC_VERSION};
use gpuhook_node::{Nvml, NvmlLocation};

use super::{Finding, Options};

const DRIVER: &str = "driver-root";
const NVML: &str = "nvml";

/// Checks the driver root and NVML; returns the node state for the later checks.
pub(super) fn check(opts: &Options, out: &mut Vec<Finding>) -> Option<Fingerprint> {
    let root = &opts.driver_root;
    if !root.is_dir() {
        out.push(Finding::fail(
            DRIVER,
            format!("driver root {} does not exist", root.display()),
            "pass --driver-root DIR (where the driver is installed: / or /run/nvidia/driver), or \
             set driver-root in /etc/gpuhook/config.toml",
        ));
        return None;
    }
    let fp = match Fingerprint::take(root) {
        Ok(fp) => fp,
        Err(e) => {
            out.push(Finding::fail(
                DRIVER,
                format!("cannot read the driver state under {}: {e}", root.display()),
                "check that the driver root is the driver's installation and /proc is mounted",
            ));
            return None;
        }
    };
    let proc = ProcFs::new(root);
    let version = fp.driver_version();
    match (&version, proc.gpus()) {
        (None, _) => out.push(Finding::fail(
            DRIVER,
            format!(
                "no NVIDIA kernel module: {} is missing or unreadable",
                proc.path(PROC_VERSION).display()
            ),
            "load the driver (`nvidia-smi` or `modprobe nvidia`), or point --driver-root at the \
             driver container's root (/run/nvidia/driver)",
        )),
        (Some(v), Ok(gpus)) if !gpus.is_empty() => out.push(Finding::ok(
            DRIVER,
            format!(
                "{}: driver {v}, {} GPU(s), {} MIG instance cap(s)",
                root.display(),
                gpus.len(),
                fp.mig_caps().len()
            ),
        )),
        (Some(v), Ok(_)) => out.push(Finding::fail(
            DRIVER,
            format!("driver {v} is loaded but /proc/driver/nvidia/gpus lists no GPU"),
            "check `dmesg | grep NVRM` for a GPU the driver refused (e.g. an unsupported GPU or a \
             driver/firmware mismatch)",
        )),
        (Some(_), Err(e)) => out.push(Finding::fail(
            DRIVER,
            e.to_string(),
            "the driver's /proc files are unreadable: check the driver root",
        )),
    }
    check_nvml(opts, version.as_deref(), out);
    Some(fp)
}

fn check_nvml(opts: &Options, proc_version: Option<&str>, out: &mut Vec<Finding>) {
    let fix_missing =
        "install the driver's user-space libraries (libnvidia-ml.so.1) in the driver \
                       root and run ldconfig there, or pass --nvml-lib PATH";
    let location = match NvmlLocation::locate(&opts.driver_root, opts.nvml_lib.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            out.push(Finding::fail(NVML, e.to_string(), fix_missing));
            return;
        }
    };
    let nvml = match Nvml::load(&location) {
        Ok(n) => n,
        Err(e) => {
            out.push(Finding::fail(
                NVML,
                e.to_string(),
                "match the user-space libraries to the loaded kernel module (reinstall the driver or \
                 reboot after an upgrade); `nvidia-smi` shows the same error",
            ));
            return;
        }
    };
    let facts = nvml
        .driver_version()
        .and_then(|v| Ok((v, nvml.device_count()?)));
    match facts {
        Ok((v, _)) if proc_version.is_some_and(|p| p != v) => out.push(Finding::fail(
            NVML,
            format!(
                "{} is driver {v} but the kernel module is {}",
                location.path().display(),
                proc_version.unwrap_or_default()
            ),
            "reboot (or reload the nvidia modules) after a driver upgrade, then `gpuhook cdi \
             refresh`",
        )),
        Ok((v, n)) => out.push(Finding::ok(
            NVML,
            format!(
                "{} loads: driver {v}, {n} device(s)",
                location.path().display()
            ),
        )),
        Err(e) => out.push(Finding::fail(
            NVML,
            e.to_string(),
            "NVML loads but does not answer: check `nvidia-smi` and `dmesg | grep NVRM`",
        )),
    }
}
