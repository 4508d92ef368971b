//! Command line: `gpu-mps-daemon --config FILE [...]` runs the daemon; `status` reports on it.
//!
//! Lives in the library so that `main.rs` stays a thin shell and the wiring (lock, status
//! writer, HTTP, signals, reload) is in one readable place.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use gpuhook_node::Inventory;

use crate::cdi;
use crate::cdi_writer::{self, CdiInputs};
use crate::config::{self, parse_duration, DEFAULT_MPS_ROOT};
use crate::inventory::{facts_of, ComputeModeSetter, GpuInventory, JsonInventory};
use crate::layout::{self, CreatedDirs};
use crate::lock::RootLock;
use crate::manager::Manager;
use crate::plan::{self, Overrides, Plan};
use crate::status::{self, Board};

#[derive(Debug, Parser)]
#[command(
    name = "gpu-mps-daemon",
    version,
    about = "Runs and supervises one nvidia-cuda-mps-control daemon per shared GPU",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the per-GPU state of a running daemon (from <mpsRoot>/status.json).
    Status(StatusArgs),
    /// Check a config against the node and print the resulting limits, without starting anything.
    Check(RunArgs),
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Log line format on stderr: json or text (colours only when stderr is a terminal)
    #[arg(long, value_name = "FORMAT", env = "GPUHOOK_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Sharing config (k8s-device-plugin format plus `mpsDaemon`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve /healthz, /readyz and /status on this address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Overrides mpsDaemon.mpsRoot.
    #[arg(long, value_name = "DIR")]
    pub mps_root: Option<PathBuf>,
    /// Overrides mpsDaemon.driverRoot.
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Overrides mpsDaemon.controlBinary.
    #[arg(long, value_name = "PATH")]
    pub control_binary: Option<PathBuf>,
    /// Overrides mpsDaemon.probeInterval (e.g. 500ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub probe_interval: Option<std::time::Duration>,
    /// Host path of libnvidia-ml to use instead of the driver root's.
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// Overrides mpsDaemon.cdiSpecDir (where nvidia.com-gpu-mps.json is written).
    #[arg(long, value_name = "DIR")]
    pub cdi_spec_dir: Option<PathBuf>,
    /// Overrides mpsDaemon.gpuhookPath (the gpuhook binary the CDI spec's hooks run).
    #[arg(long, value_name = "PATH")]
    pub gpuhook_path: Option<PathBuf>,
    /// Take GPU facts from a serialised gpuhook inventory instead of discovering them.
    #[arg(long, value_name = "FILE", hide = true)]
    pub inventory_json: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Print the status file as JSON.
    #[arg(long)]
    pub json: bool,
    /// MPS root of the daemon (default: from --config, else /run/gpuhook/mps).
    #[arg(long, value_name = "DIR")]
    pub mps_root: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// A command-line duration that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid duration {0:?} (use e.g. 500ms, 5s)")]
pub struct DurationArgError(String);

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, DurationArgError> {
    parse_duration(s).ok_or_else(|| DurationArgError(s.to_string()))
}

/// GPU facts and compute-mode control for the node.
fn node_access(
    args: &RunArgs,
    driver_root: &Path,
) -> Result<(Box<dyn GpuInventory>, Arc<dyn ComputeModeSetter>)> {
    if let Some(p) = &args.inventory_json {
        let no_nvml = crate::inventory::NoComputeMode {
            reason: "GPU facts come from --inventory-json, NVML is not used".into(),
        };
        return Ok((
            Box::new(JsonInventory { path: p.clone() }),
            Arc::new(no_nvml),
        ));
    }
    Ok(crate::node::access(driver_root, args.nvml_lib.as_deref()))
}

struct Loaded {
    plan: Plan,
    node: Inventory,
    compute: Arc<dyn ComputeModeSetter>,
    inventory: Box<dyn GpuInventory>,
    overrides: Overrides,
}

fn load(args: &RunArgs) -> Result<Loaded> {
    let path = args
        .config
        .as_ref()
        .ok_or_else(|| anyhow!("--config FILE is required"))?;
    let cfg = config::load(path)?;
    let overrides = Overrides {
        mps_root: args.mps_root.clone(),
        driver_root: args.driver_root.clone(),
        control_binary: args.control_binary.clone(),
        probe_interval: args.probe_interval,
        cdi_spec_dir: args.cdi_spec_dir.clone(),
        gpuhook_path: args.gpuhook_path.clone(),
    };
    let driver_root = overrides
        .driver_root
        .clone()
        .or_else(|| cfg.mps_daemon.driver_root.clone())
        .unwrap_or_else(|| PathBuf::from("/"));
    let (inventory, compute) = node_access(args, &driver_root)?;
    let (plan, node) = resolve_checked(path, &cfg, inventory.as_ref(), &overrides)?;
    Ok(Loaded {
        plan,
        node,
        compute,
        inventory,
        overrides,
    })
}

/// Resolves the plan and builds (validates) its whole CDI spec, so that a config whose spec
/// cannot be written fails before anything starts.
fn resolve_checked(
    path: &Path,
    cfg: &config::ConfigFile,
    inventory: &dyn GpuInventory,
    overrides: &Overrides,
) -> Result<(Plan, Inventory)> {
    let node = inventory.inventory()?;
    let plan = plan::resolve(cfg, &facts_of(&node), overrides)
        .with_context(|| format!("config file {}", path.display()))?;
    cdi::build_spec(&plan, &node, None).with_context(|| {
        format!(
            "config file {}: cannot build the {} CDI spec",
            path.display(),
            cdi::CDI_KIND
        )
    })?;
    Ok((plan, node))
}

fn reload(args: &RunArgs, l: &Loaded) -> Result<(Plan, Inventory)> {
    let path = args
        .config
        .as_ref()
        .ok_or_else(|| anyhow!("--config FILE is required"))?;
    let cfg = config::load(path)?;
    resolve_checked(path, &cfg, l.inventory.as_ref(), &l.overrides)
}

/// `gpu-mps-daemon check`: prints the plan.
pub fn check(args: &RunArgs) -> Result<()> {
    let l = load(args)?;
    for w in &l.plan.warnings {
        eprintln!("warning: {w}");
    }
    println!("mpsRoot: {}", l.plan.mps_root.display());
    println!(
        "cdiSpec: {}",
        cdi::spec_path(&l.plan.cdi.spec_dir).display()
    );
    for g in &l.plan.gpus {
        println!(
            "GPU {} {} resource={} replicas={} activeThreadPercentage={} pinnedMemoryLimitMiB={}",
            g.index,
            g.uuid,
            g.resource,
            g.replicas,
            g.active_thread_percentage,
            g.pinned_memory_limit_mib
                .map(|m| m.to_string())
                .unwrap_or_else(|| "-".into())
        );
        for share in &g.shares {
            println!(
                "  {}={} activeThreadPercentage={} pinnedMemoryLimitMiB={}",
                cdi::CDI_KIND,
                cdi::device_names(g, share).join(","),
                share.active_thread_percentage,
                share
                    .pinned_memory_limit_mib
                    .map(|m| m.to_string())
                    .unwrap_or_else(|| "-".into())
            );
        }
    }
    Ok(())
}

/// Runs the daemon until SIGTERM/SIGINT; SIGHUP reloads the config.
pub async fn run(args: RunArgs) -> Result<()> {
    let mut loaded = load(&args)?;
    for w in &loaded.plan.warnings {
        tracing::warn!("{w}");
    }
    let root = loaded.plan.mps_root.clone();
    let mut root_dirs = CreatedDirs::default();
    root_dirs
        .ensure(&root, 0o755)
        .with_context(|| format!("MPS root {}", root.display()))?;
    let lock = match RootLock::acquire(&root) {
        Ok(l) => l,
        Err(e) => {
            root_dirs.remove_all();
            bail!(e);
        }
    };
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;

    let board = Board::default();
    board.set_config(args.config.as_ref().map(|p| p.display().to_string()));
    board.set_idle(loaded.plan.gpus.is_empty());
    board.set_identities(crate::metrics::identities_of(&loaded.node));
    let (stop_tx, stop_rx) = watch::channel(false);
    let writer = tokio::spawn(status::write_loop(
        board.clone(),
        layout::status_path(&root),
        stop_rx,
    ));
    let http = match args.listen {
        Some(addr) => match crate::http::serve(addr, board.clone()).await {
            Ok(h) => Some(h),
            Err(e) => {
                let _ = stop_tx.send(true);
                let _ = writer.await;
                let _ = layout::remove_file_if_exists(&layout::status_path(&root));
                lock.release();
                root_dirs.remove_all();
                bail!(e);
            }
        },
        None => None,
    };
    tracing::info!(mps_root = %root.display(), gpus = loaded.plan.gpus.len(), "starting");
    let (cdi_tx, cdi_rx) = watch::channel(Arc::new(CdiInputs {
        plan: loaded.plan.clone(),
        inventory: loaded.node.clone(),
    }));
    let (cdi_stop, cdi_stop_rx) = watch::channel(false);
    let cdi_task = tokio::spawn(cdi_writer::run(board.clone(), cdi_rx, cdi_stop_rx));
    let mut manager = Manager::start(loaded.plan.clone(), board.clone(), loaded.compute.clone());
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading config");
                let res = match reload(&args, &loaded) {
                    Ok((plan, node)) => manager.reload(plan.clone()).await.map(|s| (plan, node, s)).map_err(anyhow::Error::from),
                    Err(e) => Err(e),
                };
                match res {
                    Ok((plan, node, s)) => {
                        cdi_tx.send_replace(Arc::new(CdiInputs { plan: plan.clone(), inventory: node.clone() }));
                        board.set_identities(crate::metrics::identities_of(&node));
                        loaded.node = node;
                        tracing::info!(started = ?s.started, restarted = ?s.restarted, stopped = ?s.stopped,
                            unchanged = ?s.unchanged, "config reloaded");
                        board.set_idle(plan.gpus.is_empty());
                        loaded.plan = plan;
                        board.set_reload_error(None);
                    }
                    Err(e) => {
                        let e = format!("{e:#}");
                        tracing::error!(error = %e, "reload refused; keeping the running config");
                        board.set_reload_error(Some(e));
                    }
                }
            }
        }
    }
    tracing::info!("shutting down");
    // The CDI spec goes first: no new container may be created against a stopping daemon.
    let _ = cdi_stop.send(true);
    if let Err(e) = cdi_task.await {
        tracing::error!(error = %e, "CDI writer task failed");
    }
    manager.shutdown().await;
    let _ = stop_tx.send(true);
    let _ = writer.await;
    if let Some(h) = http {
        h.abort();
    }
    let _ = layout::remove_file_if_exists(&layout::status_path(&root));
    lock.release();
    for e in root_dirs.remove_all() {
        tracing::warn!(error = %e, "cleanup");
    }
    tracing::info!("stopped");
    Ok(())
}

/// `gpu-mps-daemon status`.
pub fn status_cmd(args: &StatusArgs) -> Result<()> {
    let root = match (&args.mps_root, &args.config) {
        (Some(r), _) => r.clone(),
        (None, Some(c)) => config::load(c)?
            .mps_daemon
            .mps_root
            .unwrap_or_else(|| PathBuf::from(DEFAULT_MPS_ROOT)),
        (None, None) => PathBuf::from(DEFAULT_MPS_ROOT),
    };
    let s = status::read(&layout::status_path(&root))?;
    let alive = i32::try_from(s.pid)
        .map(crate::process::is_alive)
        .unwrap_or(false);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", crate::status_table::render_table(&s, alive));
    }
    if !alive {
        bail!(
            "gpu-mps-daemon (pid {}) is not running; the status file is stale",
            s.pid
        );
    }
    Ok(())
}
