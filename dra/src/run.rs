//! Wiring: the node's devices, the API server, the checkpoint, health, slice publication and the
//! sockets, until a shutdown signal.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpuhook_node::Inventory;
use tokio::sync::watch;

use crate::checkpoint::{boot_id, Checkpoint};
use crate::devices::{catalogue, NodeDevice};
use crate::driver::{Driver, DriverOptions};
use crate::dynmig::Partitioner;
use crate::error::DraError;
use crate::health_service::{HealthService, Unhealthy};
use crate::kube::Cluster;
use crate::layout::REMOVED_WHILE_PREPARED;
use crate::publish::publish;
use crate::server::{Servers, Sockets};
use crate::slices::UnhealthyPolicy;
use crate::timeslice::TimeSlicer;

/// Everything `run` needs besides the driver options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub sockets: Sockets,
    /// `/` on a node; the root whose `/sys` gives the PCIe roots.
    pub sys_root: PathBuf,
    /// Publish ResourceSlices (off: another component publishes them).
    pub publish: bool,
    pub unhealthy: UnhealthyPolicy,
    /// Re-publish at least this often (repairs slices changed or deleted by someone else).
    pub republish: Duration,
    /// Serve the resource-health service.
    pub health_service: bool,
    /// NVML for the health monitor (`None`: no monitor).
    pub nvml: Option<(PathBuf, Option<PathBuf>)>,
    /// Partitionable MIG devices (`--sharing …,partitionable-mig`): NVML and discovery of this
    /// driver root; `None`: off.
    pub partitionable: Option<gpuhook_node::DiscoverOptions>,
}

/// What the running plugin holds.
#[derive(Debug)]
pub struct Running {
    pub driver: Arc<Driver>,
    pub servers: Servers,
    pub unhealthy: watch::Sender<Unhealthy>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    monitor: Option<gpuhook_device_plugin::health::HealthMonitor>,
}

fn publish_now(
    cluster: &Arc<dyn Cluster>,
    opts: &DriverOptions,
    devices: &[NodeDevice],
    unhealthy: &Unhealthy,
    policy: UnhealthyPolicy,
) {
    if let Err(e) = publish(
        cluster.as_ref(),
        &opts.driver,
        &opts.node,
        devices,
        unhealthy,
        policy,
        opts.allowed.consumable_mps,
    ) {
        tracing::error!(error = %e, "cannot publish ResourceSlices; retrying later");
    }
}

/// Publishes at start, at every health change and every `republish`.
fn spawn_publisher(
    cluster: Arc<dyn Cluster>,
    driver: &Arc<Driver>,
    mut rx: watch::Receiver<Unhealthy>,
    run: &RunOptions,
) -> tokio::task::JoinHandle<()> {
    let (driver, policy, every) = (driver.clone(), run.unhealthy, run.republish);
    tokio::spawn(async move {
        loop {
            let mut state = rx.borrow_and_update().clone();
            let (c, d) = (cluster.clone(), driver.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let (devices, retired) = d.published();
                for uuid in retired {
                    state.insert(uuid, REMOVED_WHILE_PREPARED.into());
                }
                publish_now(&c, d.options(), &devices, &state, policy)
            })
            .await;
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return },
                () = driver.changed() => {}
                _ = tokio::time::sleep(every) => {}
            }
        }
    })
}

/// Follows the NVML health monitor into `tx`.
fn start_monitor(
    inv: &Inventory,
    nvml: &(PathBuf, Option<PathBuf>),
    tx: watch::Sender<Unhealthy>,
) -> Option<(
    gpuhook_device_plugin::health::HealthMonitor,
    tokio::task::JoinHandle<()>,
)> {
    use gpuhook_device_plugin::health::{HealthConfig, HealthMonitor};
    use gpuhook_device_plugin::monitor::{load_nvml, watched_gpus};
    let lib = match load_nvml(&nvml.0, nvml.1.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "no NVML: device health is not watched");
            return None;
        }
    };
    let (ctx, mut crx) = tokio::sync::mpsc::channel(256);
    let monitor = match HealthMonitor::start(lib, watched_gpus(inv), HealthConfig::default(), ctx) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "device health is not watched");
            return None;
        }
    };
    let task = tokio::spawn(async move {
        while let Some(c) = crx.recv().await {
            let key = c.mig_uuid.clone().unwrap_or_else(|| c.gpu_uuid.clone());
            tracing::info!(device = %key, healthy = c.healthy, reason = %c.reason, "health change");
            tx.send_modify(|m| {
                if c.healthy {
                    m.remove(&key);
                } else {
                    m.insert(key, c.reason.clone());
                }
            });
        }
    });
    Some((monitor, task))
}

/// The MIG manager's NVML backend of the driver root in `d`.
pub fn partitioner(d: &gpuhook_node::DiscoverOptions) -> Result<Partitioner, DraError> {
    let err = |e: gpuhook_node::NodeError| DraError::Invalid {
        what: "NVML for partitionable MIG devices",
        value: d.driver_root.display().to_string(),
        why: e.to_string(),
    };
    let loc =
        gpuhook_node::NvmlLocation::locate(&d.driver_root, d.nvml_lib.as_deref()).map_err(err)?;
    let nvml = gpuhook_node::Nvml::load(&loc).map_err(err)?;
    Ok(Partitioner::new(
        Box::new(gpuhook_mig::NvmlBackend::new(nvml)),
        d.clone(),
    ))
}

/// Starts the plugin: loads the checkpoint, publishes slices, serves and registers.
pub fn start(
    opts: DriverOptions,
    run: RunOptions,
    inventory: Inventory,
    cluster: Arc<dyn Cluster>,
    slicer: Arc<dyn TimeSlicer>,
) -> Result<Running, DraError> {
    let checkpoint = Checkpoint::load(&opts.checkpoint, &boot_id())?;
    let (devices, partitioner) = match &run.partitionable {
        None => (catalogue(&inventory, &run.sys_root), None),
        Some(d) => {
            let p = partitioner(d)?.with_marks(opts.checkpoint.with_file_name("mig-mode"));
            let claims = || checkpoint.claims().map(|c| c.1.clone()).collect();
            let devs =
                crate::partition::read(&p, claims, &inventory, &run.sys_root).map_err(|why| {
                    DraError::Invalid {
                        what: "MIG state",
                        value: d.driver_root.display().to_string(),
                        why,
                    }
                })?;
            (devs, Some(Arc::new(p)))
        }
    };
    tracing::info!(devices = devices.len(), node = %opts.node, "devices found");
    let mut driver = Driver::new(
        opts,
        Arc::new(inventory),
        devices,
        cluster.clone(),
        slicer,
        checkpoint,
    );
    if let Some(p) = partitioner {
        driver = driver.with_partitioner(p);
    }
    let driver = Arc::new(driver);
    if run.partitionable.is_some() {
        tokio::spawn(crate::sweep::sweep(driver.clone()));
    }
    let (tx, rx) = watch::channel(BTreeMap::new());
    let mut tasks = Vec::new();
    let mut monitor = None;
    if let Some(nvml) = &run.nvml {
        if let Some((m, t)) = start_monitor(&driver.inventory(), nvml, tx.clone()) {
            monitor = Some(m);
            tasks.push(t);
        }
    }
    if run.publish {
        tasks.push(spawn_publisher(cluster, &driver, rx.clone(), &run));
    }
    let health = run
        .health_service
        .then(|| HealthService::new(driver.clone(), rx.clone()));
    let servers = Servers::start(driver.clone(), health, &run.sockets)?;
    Ok(Running {
        driver,
        servers,
        unhealthy: tx,
        tasks,
        monitor,
    })
}

impl Running {
    /// Follows MIG re-partitions (`rescan.rs`): static MIG devices, or with partitionable MIG
    /// devices what other tools make and destroy; the health monitor and the health streams
    /// follow the new devices.
    pub fn follow_repartitions(&mut self, r: crate::rescan::Rescan) {
        let followers = crate::rescan::Followers {
            monitor: self.monitor.as_ref().map(|m| m.retarget()),
            health: Some(self.unhealthy.clone()),
        };
        self.tasks
            .push(crate::rescan::spawn(self.driver.clone(), r, followers));
    }

    /// Keeps the claim index current for pods that join or leave a prepared claim, polling
    /// every `every` (`claimwatch.rs`).
    pub fn follow_reservations(&mut self, every: Duration) {
        let task = crate::claimwatch::spawn(self.driver.clone(), every);
        self.tasks.push(task);
    }

    /// Stops serving; prepared claims stay prepared (checkpointed).
    pub async fn stop(self) {
        self.servers.stop().await;
        for t in self.tasks {
            t.abort();
        }
        if let Some(m) = self.monitor {
            let _ = tokio::task::spawn_blocking(move || m.stop()).await;
        }
        self.driver.shutdown().await;
    }
}
