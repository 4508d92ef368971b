//! `gpuhook-mig-parted` (also installed as `nvidia-mig-parted`): a thin `main` over
//! [`gpuhook_mig::cli`]. It lives in the MIG manager's crate because that is where the holders
//! are read: `apply` keeps a MIG device that NVML's processes, a pod (the kubelet's
//! pod-resources) or an MPS client (gpu-mps-daemon's status) holds, unless `--drain` — the same
//! sources the agent checks.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = gpuhook_mig::cli::Cli::parse();
    let level = if cli.debug { "debug" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUHOOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match gpuhook_mig::cli::run_with(&cli, &holders) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Every holder the agent also checks, from the paths `apply` was given.
fn holders(
    a: &gpuhook_mig::cli::ApplyArgs,
    nvml: &gpuhook_mig::NvmlBackend,
) -> anyhow::Result<gpuhook_mig::DeviceHolders> {
    let sources = gpuhook_mig_manager::holders::HolderSources {
        pod_resources: Some(a.pod_resources_socket.clone()),
        mps_status: Some(gpu_mps_daemon::layout::status_path(&a.mps_root)),
        proc_root: a.host_proc.clone(),
    };
    sources.collect(nvml).map_err(anyhow::Error::msg)
}
