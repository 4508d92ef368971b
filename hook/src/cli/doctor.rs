//! `gpuhook doctor`: the command line of [`crate::doctor`].
//!
//! Findings go to stdout (text, or one JSON document with `--json`) so they can be piped and
//! parsed; the exit status is 1 when any check fails, 0 otherwise (warnings included).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use gpuhook_containerd::configure::{
    DEFAULT_BINARY, DEFAULT_CONFIG, DEFAULT_DROP_IN, DEFAULT_RUNTIME_NAME,
};

use super::CliError;
use crate::config::Config;
use crate::doctor::{self, ContainerTarget, Options, Status};

/// Arguments of `gpuhook doctor`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    gpuhook doctor                                   # the node: driver, NVML, spec, containerd, plugin, MPS\n  \
    gpuhook doctor --driver-root /run/nvidia/driver --json\n  \
    gpuhook doctor --container 3f2a9c --runc-root /run/containerd/runc/k8s.io   # and why this container has no GPU")]
pub struct DoctorArgs {
    /// Root of the driver installation [default: driver-root from the config]
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// libnvidia-ml.so.1 to load [default: found through the driver root's ld.so.cache]
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// CDI spec directory, lowest priority first; repeatable [default: cdi-spec-dirs from the config]
    #[arg(long = "spec-dir", value_name = "DIR")]
    pub spec_dirs: Vec<PathBuf>,
    /// The inventory cache [default: inventory-cache from the config]
    #[arg(long, value_name = "PATH")]
    pub inventory_cache: Option<PathBuf>,
    /// containerd's main config file
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
    pub containerd_config: PathBuf,
    /// The drop-in `gpuhook runtime configure --drop-in` writes
    #[arg(long, value_name = "FILE", default_value = DEFAULT_DROP_IN)]
    pub containerd_drop_in: PathBuf,
    /// The containerd runtime name (= the RuntimeClass handler)
    #[arg(long, value_name = "NAME", default_value = DEFAULT_RUNTIME_NAME)]
    pub runtime_name: String,
    /// Where gpuhook-runtime is installed (the runtime's BinaryName)
    #[arg(long, value_name = "PATH", default_value = DEFAULT_BINARY)]
    pub runtime_binary: PathBuf,
    /// Docker's daemon config (checked when Docker is installed)
    #[arg(long, value_name = "FILE", default_value = gpuhook_containerd::engine::DOCKER_CONFIG)]
    pub docker_config: PathBuf,
    /// CRI-O's main config (checked, with its drop-ins, when CRI-O is installed)
    #[arg(long, value_name = "FILE", default_value = gpuhook_containerd::engine::CRIO_CONFIG)]
    pub crio_config: PathBuf,
    /// The CRI-O drop-in `gpuhook runtime configure --runtime crio` writes
    #[arg(long, value_name = "FILE", default_value = gpuhook_containerd::engine::CRIO_DROP_IN)]
    pub crio_drop_in: PathBuf,
    /// Where to look for dockerd, crio and nvidia-container-runtime-hook (dockerd's PATH, for
    /// `--gpus`) [default: $PATH]
    #[arg(long, value_name = "DIRS")]
    pub engine_path: Option<std::ffi::OsString>,
    /// kubelet's device plugin directory
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/kubelet/device-plugins"
    )]
    pub device_plugin_dir: PathBuf,
    /// gpu-mps-daemon's root (status.json, <uuid>/ready)
    #[arg(long, value_name = "DIR", default_value = "/run/gpuhook/mps")]
    pub mps_root: PathBuf,
    /// Also explain this container: its request and the policy decisions
    #[arg(long, value_name = "ID")]
    pub container: Option<String>,
    /// The runtime's state root that holds <ID>/state.json
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/run/containerd/runc/k8s.io",
        requires = "container"
    )]
    pub runc_root: PathBuf,
    /// Print the findings as one JSON document
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: &DoctorArgs, config: &Config) -> Result<(), CliError> {
    let spec_dirs = if args.spec_dirs.is_empty() {
        config.cdi_spec_dirs.clone()
    } else {
        args.spec_dirs.clone()
    };
    let driver_root = args
        .driver_root
        .clone()
        .unwrap_or_else(|| config.driver_root.clone());
    // As `cdi generate` records it (canonical); a missing one is the driver check's to report.
    let driver_root = driver_root.canonicalize().unwrap_or(driver_root);
    let opts = Options {
        driver_root,
        nvml_lib: args.nvml_lib.clone(),
        spec_dirs,
        cdi_kind: crate::request::NVIDIA_GPU_KIND.to_string(),
        inventory_cache: args
            .inventory_cache
            .clone()
            .unwrap_or_else(|| config.inventory_cache.clone()),
        containerd_config: args.containerd_config.clone(),
        containerd_drop_in: args.containerd_drop_in.clone(),
        runtime_name: args.runtime_name.clone(),
        runtime_binary: args.runtime_binary.clone(),
        docker_config: args.docker_config.clone(),
        crio_config: args.crio_config.clone(),
        crio_drop_in: args.crio_drop_in.clone(),
        engine_path: args
            .engine_path
            .clone()
            .or_else(|| std::env::var_os("PATH")),
        device_plugin_dir: args.device_plugin_dir.clone(),
        mps_root: args.mps_root.clone(),
        container: args.container.clone().map(|id| ContainerTarget {
            id,
            runc_root: args.runc_root.clone(),
        }),
        policy: config.request_policy(),
    };
    let report = doctor::run(&opts);
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)
            .map_err(|error| CliError::EncodeReport { error })?;
        s.push('\n');
        s
    } else {
        report.to_text()
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| CliError::Stdout { error })?;
    if report.worst() == Status::Fail {
        let n = report
            .findings
            .iter()
            .filter(|f| f.status == Status::Fail)
            .count();
        return Err(CliError::ChecksFailed { n });
    }
    Ok(())
}
