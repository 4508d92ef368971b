//! What the commands of [`crate::cli`] do: `check` prints the plan, `status` reads a running
//! daemon's status file, and the default command runs the daemon.
//!
//! Lives in the library so that `main.rs` stays a thin shell and the wiring (lock, status
//! writer, HTTP, signals, reload) is in one readable place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use gpuhook_node::Inventory;

use gpuhook_cdi::CdiError;

use crate::cdi;
use crate::cdi_writer::{self, CdiInputs};
use crate::cli::{RunArgs, StatusArgs};
use crate::config::{self, ConfigError, DEFAULT_MPS_ROOT};
use crate::http::ListenError;
use crate::inventory::{facts_of, ComputeModeSetter, GpuInventory, InventoryError, JsonInventory};
use crate::layout::{self, CreatedDirs};
use crate::lock::{LockError, RootLock};
use crate::manager::{Manager, ReloadError};
use crate::plan::{self, Overrides, Plan};
use crate::status::Board;
use crate::status_file::{self, StatusReadError};

/// Why a command failed; each message says what to fix. Every cause is part of its variant's
/// message and none is a `source`: `main` prints the error with its chain, and a cause that is
/// both would be printed twice (`ConfigError::Read` keeps its I/O cause in its message only).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--config FILE is required")]
    NoConfig,
    #[error("{0}")]
    Config(ConfigError),
    #[error("{0}")]
    Inventory(InventoryError),
    #[error("config file {}: {error}", path.display())]
    Plan { path: PathBuf, error: ConfigError },
    #[error("config file {}: cannot build the {} CDI spec: {error}", path.display(), cdi::CDI_KIND)]
    Spec { path: PathBuf, error: CdiError },
    #[error("MPS root {}: {error}", path.display())]
    Root {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Lock(LockError),
    #[error("cannot handle signals: {0}")]
    Signals(std::io::Error),
    #[error("{0}")]
    Listen(ListenError),
    #[error("{0}")]
    Reload(ReloadError),
    #[error("{0}")]
    Status(StatusReadError),
    #[error("cannot print the status: {0}")]
    Json(serde_json::Error),
    #[error("gpu-mps-daemon (pid {0}) is not running; the status file is stale")]
    Stale(u32),
}

/// GPU facts and compute-mode control for the node.
fn node_access(
    args: &RunArgs,
    driver_root: &Path,
) -> (Box<dyn GpuInventory>, Arc<dyn ComputeModeSetter>) {
    if let Some(p) = &args.inventory_json {
        let no_nvml = crate::inventory::NoComputeMode {
            reason: "GPU facts come from --inventory-json, NVML is not used".into(),
        };
        return (
            Box::new(JsonInventory { path: p.clone() }),
            Arc::new(no_nvml),
        );
    }
    crate::node::access(driver_root, args.nvml_lib.as_deref())
}

struct Loaded {
    plan: Plan,
    node: Inventory,
    compute: Arc<dyn ComputeModeSetter>,
    inventory: Box<dyn GpuInventory>,
    overrides: Overrides,
}

fn load(args: &RunArgs) -> Result<Loaded, RunError> {
    let path = args.config.as_ref().ok_or(RunError::NoConfig)?;
    let cfg = config::load(path).map_err(RunError::Config)?;
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
    let (inventory, compute) = node_access(args, &driver_root);
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
) -> Result<(Plan, Inventory), RunError> {
    let node = inventory.inventory().map_err(RunError::Inventory)?;
    let plan = plan::resolve(cfg, &facts_of(&node), overrides).map_err(|error| RunError::Plan {
        path: path.to_path_buf(),
        error,
    })?;
    cdi::build_spec(&plan, &node, None).map_err(|error| RunError::Spec {
        path: path.to_path_buf(),
        error,
    })?;
    Ok((plan, node))
}

fn reload(args: &RunArgs, l: &Loaded) -> Result<(Plan, Inventory), RunError> {
    let path = args.config.as_ref().ok_or(RunError::NoConfig)?;
    let cfg = config::load(path).map_err(RunError::Config)?;
    resolve_checked(path, &cfg, l.inventory.as_ref(), &l.overrides)
}

/// `gpu-mps-daemon check`: prints the plan.
pub fn check(args: &RunArgs) -> Result<(), RunError> {
    let l = load(args)?;
    for w in &l.plan.warnings {
        eprintln!("warning: {w}");
    }
    println!("mpsRoot: {}", l.plan.mps_root.display());
    println!(
        "cdiSpec: {}",
        cdi::spec_path(&l.plan.cdi.spec_dir).display()
    );
    let mib = |m: Option<u64>| m.map(|m| m.to_string()).unwrap_or_else(|| "-".into());
    for g in &l.plan.gpus {
        println!(
            "GPU {} {} resource={} replicas={} activeThreadPercentage={} pinnedMemoryLimitMiB={}",
            g.index,
            g.uuid,
            g.resource,
            g.replicas,
            g.active_thread_percentage,
            mib(g.pinned_memory_limit_mib)
        );
        for share in &g.shares {
            println!(
                "  {}={} activeThreadPercentage={} pinnedMemoryLimitMiB={}",
                cdi::CDI_KIND,
                cdi::device_names(g, share).join(","),
                share.active_thread_percentage,
                mib(share.pinned_memory_limit_mib)
            );
        }
    }
    Ok(())
}

/// SIGTERM, SIGINT (both stop) and SIGHUP (reload).
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// The status file writer and the HTTP endpoint, stopped together.
struct Reporting {
    stop: watch::Sender<bool>,
    writer: JoinHandle<()>,
    http: Option<JoinHandle<()>>,
    /// `--cri-socket`: the task naming pods ([`crate::attrib`]).
    attrib: Option<JoinHandle<()>>,
    status_path: PathBuf,
}

impl Reporting {
    async fn start(
        args: &RunArgs,
        board: &Board,
        root: &Path,
        cri_socket: Option<PathBuf>,
    ) -> Result<Self, ListenError> {
        let status_path = layout::status_path(root);
        let (stop, stop_rx) = watch::channel(false);
        let writer = tokio::spawn(status_file::write_loop(
            board.clone(),
            status_path.clone(),
            stop_rx,
        ));
        let attrib = cri_socket.map(|socket| {
            tokio::spawn(crate::attrib::run(board.clone(), socket, stop.subscribe()))
        });
        let mut r = Reporting {
            stop,
            writer,
            http: None,
            attrib,
            status_path,
        };
        if let Some(addr) = args.listen {
            match crate::http::serve(addr, board.clone()).await {
                Ok(h) => r.http = Some(h),
                Err(e) => {
                    r.stop().await;
                    return Err(e);
                }
            }
        }
        Ok(r)
    }

    /// Stops the writer, the endpoint, and removes the status file.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.writer.await;
        if let Some(h) = self.attrib {
            h.abort();
        }
        if let Some(h) = self.http {
            h.abort();
        }
        let _ = layout::remove_file_if_exists(&self.status_path);
    }
}

/// Runs the daemon until SIGTERM/SIGINT; SIGHUP reloads the config.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let mut loaded = load(&args)?;
    for w in &loaded.plan.warnings {
        tracing::warn!("{w}");
    }
    let root = loaded.plan.mps_root.clone();
    let mut root_dirs = CreatedDirs::default();
    root_dirs
        .ensure(&root, 0o755)
        .map_err(|error| RunError::Root {
            path: root.clone(),
            error,
        })?;
    let lock = match RootLock::acquire(&root) {
        Ok(l) => l,
        Err(e) => {
            root_dirs.remove_all();
            return Err(RunError::Lock(e));
        }
    };
    let mut signals = Signals::install().map_err(RunError::Signals)?;
    let board = Board::default();
    board.set_config(args.config.as_ref().map(|p| p.display().to_string()));
    board.set_idle(loaded.plan.gpus.is_empty());
    board.set_identities(crate::metrics::identities_of(&loaded.node));
    let cri_socket = (args.cri_socket.clone()).or_else(|| loaded.plan.enforce.cri_socket.clone());
    let reporting = match Reporting::start(&args, &board, &root, cri_socket).await {
        Ok(r) => r,
        Err(e) => {
            lock.release();
            root_dirs.remove_all();
            return Err(RunError::Listen(e));
        }
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
            _ = signals.term.recv() => break,
            _ = signals.int.recv() => break,
            _ = signals.hup.recv() => {
                tracing::info!("SIGHUP: reloading config");
                on_reload(&args, &mut loaded, &mut manager, &board, &cdi_tx).await;
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
    reporting.stop().await;
    lock.release();
    for e in root_dirs.remove_all() {
        tracing::warn!(error = %e, "cleanup");
    }
    tracing::info!("stopped");
    Ok(())
}

/// SIGHUP: a new plan replaces the running one, or the refusal is reported and nothing changes.
async fn on_reload(
    args: &RunArgs,
    loaded: &mut Loaded,
    manager: &mut Manager,
    board: &Board,
    cdi_tx: &watch::Sender<Arc<CdiInputs>>,
) {
    let res = match reload(args, loaded) {
        Ok((plan, node)) => match manager.reload(plan.clone()).await {
            Ok(s) => Ok((plan, node, s)),
            Err(e) => Err(RunError::Reload(e)),
        },
        Err(e) => Err(e),
    };
    match res {
        Ok((plan, node, s)) => {
            cdi_tx.send_replace(Arc::new(CdiInputs {
                plan: plan.clone(),
                inventory: node.clone(),
            }));
            board.set_identities(crate::metrics::identities_of(&node));
            loaded.node = node;
            tracing::info!(started = ?s.started, restarted = ?s.restarted, stopped = ?s.stopped,
                unchanged = ?s.unchanged, "config reloaded");
            board.set_idle(plan.gpus.is_empty());
            loaded.plan = plan;
            board.set_reload_error(None);
        }
        Err(e) => {
            let e = e.to_string();
            tracing::error!(error = %e, "reload refused; keeping the running config");
            board.set_reload_error(Some(e));
        }
    }
}

/// `gpu-mps-daemon status`.
pub fn status_cmd(args: &StatusArgs) -> Result<(), RunError> {
    let root = match (&args.mps_root, &args.config) {
        (Some(r), _) => r.clone(),
        (None, Some(c)) => config::load(c)
            .map_err(RunError::Config)?
            .mps_daemon
            .mps_root
            .unwrap_or_else(|| PathBuf::from(DEFAULT_MPS_ROOT)),
        (None, None) => PathBuf::from(DEFAULT_MPS_ROOT),
    };
    let s = status_file::read(&layout::status_path(&root)).map_err(RunError::Status)?;
    let alive = i32::try_from(s.pid)
        .map(crate::process::is_alive)
        .unwrap_or(false);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s).map_err(RunError::Json)?
        );
    } else {
        print!("{}", crate::status_table::render_table(&s, alive));
    }
    if !alive {
        return Err(RunError::Stale(s.pid));
    }
    Ok(())
}
