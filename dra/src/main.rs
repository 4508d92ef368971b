//! `gpuhook-dra-plugin`: the DRA kubelet plugin for `gpu.nvidia.com` (a thin main over the
//! `gpuhook_dra` library).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use gpuhook_dra::cdi_claim::ClaimCdi;
use gpuhook_dra::config::Allowed;
use gpuhook_dra::driver::DriverOptions;
use gpuhook_dra::kube::{Cluster, HttpCluster};
use gpuhook_dra::mps::MpsOptions;
use gpuhook_dra::run::{start, RunOptions};
use gpuhook_dra::server::Sockets;
use gpuhook_dra::slices::UnhealthyPolicy;
use gpuhook_dra::timeslice::NvidiaSmi;
use gpuhook_node::{Capability, DiscoverOptions, Inventory};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "DRA kubelet plugin for gpu.nvidia.com (GPUs, MIG devices, MPS and time-sliced shares)"
)]
struct Cli {
    /// This node's name (the pool name of its ResourceSlices).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    #[arg(long, default_value = gpuhook_dra::DRIVER_NAME)]
    driver_name: String,
    /// The kubelet's plugin-registration dir.
    #[arg(long, default_value = gpuhook_dra::api::PLUGINS_REGISTRY)]
    registry_dir: PathBuf,
    /// The plugin's dir (dra.sock, checkpoint, MPS dirs); default /var/lib/kubelet/plugins/<driver>.
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    /// Where claim CDI specs are written.
    #[arg(long, env = "CDI_ROOT", default_value = "/var/run/cdi")]
    cdi_root: PathBuf,
    /// Host path of the gpuhook binary the specs' hooks run.
    #[arg(long, default_value = "/usr/bin/gpuhook")]
    gpuhook_path: PathBuf,
    /// Driver capabilities of claim containers (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "compute,utility")]
    driver_capabilities: Vec<String>,
    /// The driver root (discovery, NVML, nvidia-smi, nvidia-cuda-mps-control).
    #[arg(long, default_value = "/")]
    driver_root: PathBuf,
    /// A saved inventory (`gpuhook cdi generate` cache) instead of discovery.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// NVML library to load instead of the driver root's.
    #[arg(long)]
    nvml_lib: Option<PathBuf>,
    /// Don't watch device health through NVML events.
    #[arg(long)]
    no_health: bool,
    /// Serve the kubelet's resource-health service (v1alpha1, gate ResourceHealthStatus).
    #[arg(long)]
    health_service: bool,
    /// An unhealthy device is tainted in its slice, or withdrawn from it.
    #[arg(long, value_enum, default_value = "taint")]
    unhealthy: UnhealthyPolicy,
    /// API server URL for tests (http:// only); in a pod leave it out.
    #[arg(long)]
    kube_api_url: Option<String>,
    /// Don't publish ResourceSlices.
    #[arg(long)]
    no_publish: bool,
    /// Sharing strategies allowed in claims (comma-separated: mps, time-slicing; `none`).
    /// `consumable-mps` also publishes full GPUs as consumable capacity (KEP-5075, needs the
    /// DRAConsumableCapacity gate: beta and on in 1.36): each share becomes an MPS claim with its
    /// consumed `threadPercentage` and `memory` as limits. `partitionable-mig` publishes MIG-mode
    /// GPUs, and those that switch MIG mode without a reset (Hopper+), as partitionable devices
    /// (KEP-4815, gate DRAPartitionableDevices: beta and on in 1.36) and creates each claim's MIG
    /// device at prepare (MIG mode switched on as needed), destroying it at unprepare.
    #[arg(long, value_delimiter = ',', default_value = "mps,time-slicing")]
    sharing: Vec<String>,
    /// MPS control binary; default <driver root>/usr/bin/nvidia-cuda-mps-control.
    #[arg(long)]
    mps_control_binary: Option<PathBuf>,
    /// nvidia-smi (time-slice intervals); default <driver root>/usr/bin/nvidia-smi.
    #[arg(long)]
    nvidia_smi: Option<PathBuf>,
    /// How often the MIG capability directories (or the --inventory file) are checked for a
    /// re-partition, in ms; the slices follow it without a restart. 0: not checked.
    #[arg(long, default_value_t = 1000)]
    mig_poll_ms: u64,
    /// How often the prepared claims' `status.reservedFor` is read to index pods that join or
    /// leave a claim already prepared (the claim index for containerd 1.6), in ms. 0: not read.
    #[arg(long, default_value_t = 1000)]
    claim_index_poll_ms: u64,
}

/// The re-partition watch of `cli` (`None`: off).
fn rescan(cli: &Cli) -> Option<gpuhook_dra::rescan::Rescan> {
    use gpuhook_device_plugin::source::InventoryFrom;
    if cli.mig_poll_ms == 0 {
        return None;
    }
    let from = match &cli.inventory {
        Some(p) => InventoryFrom::File(p.clone()),
        None => {
            let mut opts = DiscoverOptions::for_root(&cli.driver_root);
            opts.nvml_lib = cli.nvml_lib.clone();
            InventoryFrom::Discover(opts)
        }
    };
    Some(gpuhook_dra::rescan::Rescan {
        from,
        sys_root: cli.driver_root.clone(),
        poll: Duration::from_millis(cli.mig_poll_ms),
    })
}

fn capabilities(names: &[String]) -> Result<BTreeSet<Capability>> {
    let mut out = BTreeSet::new();
    for n in names {
        match Capability::ALL.iter().find(|c| c.as_str() == n.trim()) {
            Some(c) => out.insert(*c),
            None => bail!("--driver-capabilities: unknown capability {n:?} (one of compute, utility, video, graphics, display, ngx, compat32)"),
        };
    }
    if out.is_empty() {
        bail!("--driver-capabilities: give at least one capability");
    }
    Ok(out)
}

fn allowed(names: &[String]) -> Result<(Allowed, bool)> {
    let mut a = Allowed {
        time_slicing: false,
        mps: false,
        consumable_mps: false,
    };
    let mut partitionable = false;
    for n in names {
        match n.trim() {
            "mps" => a.mps = true,
            "time-slicing" => a.time_slicing = true,
            "consumable-mps" => a.consumable_mps = true,
            "partitionable-mig" => partitionable = true,
            "none" => {}
            other => bail!(
                "--sharing: unknown strategy {other:?} (mps, time-slicing, consumable-mps, partitionable-mig or none)"
            ),
        }
    }
    Ok((a, partitionable))
}

fn inventory(cli: &Cli) -> Result<Inventory> {
    if let Some(p) = &cli.inventory {
        let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
        return serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a gpuhook inventory", p.display()));
    }
    let mut opts = DiscoverOptions::for_root(&cli.driver_root);
    opts.nvml_lib = cli.nvml_lib.clone();
    let d = gpuhook_node::discover(&opts).context("node discovery")?;
    for w in &d.warnings {
        tracing::warn!(warning = %w, "discovery");
    }
    Ok(d.inventory)
}

fn options(cli: &Cli) -> Result<(DriverOptions, RunOptions)> {
    let plugin_dir = cli
        .plugin_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(gpuhook_dra::api::PLUGINS_DIR).join(&cli.driver_name));
    let (allowed, partitionable) = allowed(&cli.sharing)?;
    let under_root = |p: &str| gpuhook_node::join_under(&cli.driver_root, p.as_ref());
    let mut edits = gpuhook_cdi::EditOptions::new(&cli.gpuhook_path);
    edits.cuda_compat = false;
    let opts = DriverOptions {
        driver: cli.driver_name.clone(),
        node: cli.node_name.clone(),
        checkpoint: plugin_dir.join("checkpoint.json"),
        cdi: ClaimCdi {
            dir: cli.cdi_root.clone(),
            edit_options: edits,
            capabilities: capabilities(&cli.driver_capabilities)?,
        },
        mps: MpsOptions {
            root: plugin_dir.join("mps"),
            driver_root: cli.driver_root.clone(),
            control_binary: cli
                .mps_control_binary
                .clone()
                .unwrap_or_else(|| under_root("/usr/bin/nvidia-cuda-mps-control")),
            start_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(5),
            shm: true,
            compute: gpu_mps_daemon::node::access(&cli.driver_root, cli.nvml_lib.as_deref()).1,
        },
        allowed,
    };
    let run = RunOptions {
        sockets: Sockets {
            registry_dir: cli.registry_dir.clone(),
            plugin_dir,
        },
        sys_root: cli.driver_root.clone(),
        publish: !cli.no_publish,
        unhealthy: cli.unhealthy,
        republish: Duration::from_secs(60),
        health_service: cli.health_service,
        nvml: (!cli.no_health).then(|| (cli.driver_root.clone(), cli.nvml_lib.clone())),
        partitionable: partitionable.then(|| {
            let mut d = DiscoverOptions::for_root(&cli.driver_root);
            d.nvml_lib = cli.nvml_lib.clone();
            d
        }),
    };
    Ok((opts, run))
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let (opts, run) = options(&cli)?;
    let inv = inventory(&cli)?;
    let cluster: Arc<dyn Cluster> = match &cli.kube_api_url {
        Some(u) => Arc::new(HttpCluster::plain(u)?),
        None => Arc::new(HttpCluster::in_cluster()?),
    };
    let slicer = Arc::new(NvidiaSmi {
        binary: cli.nvidia_smi.clone().unwrap_or_else(|| {
            gpuhook_node::join_under(&cli.driver_root, "/usr/bin/nvidia-smi".as_ref())
        }),
        timeout: Duration::from_secs(10),
    });
    let mut running = start(opts, run, inv, cluster, slicer)?;
    if let Some(r) = rescan(&cli) {
        running.follow_repartitions(r);
    }
    if cli.claim_index_poll_ms > 0 {
        running.follow_reservations(Duration::from_millis(cli.claim_index_poll_ms));
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    running.stop().await;
    Ok(())
}
