//! Preparing and unpreparing claims: the state behind `NodePrepareResources` and
//! `NodeUnprepareResources`. Each claim is handled under its own lock (different claims run
//! concurrently, the same claim never twice at once); the checkpoint records it before any
//! change, so a crash at any step is rolled back at the next call (dra-facts §5).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::sync::{Arc, Mutex};

use gpuhook_node::Inventory;

use crate::cdi_claim::{self, ClaimCdi};
use crate::checkpoint::{Checkpoint, ClaimEntry, ClaimState, PreparedDevice};
use crate::claim::parse_claim;
use crate::config::Allowed;
use crate::devices::NodeDevice;
use crate::dynmig::{self, MigRecord, Partitioner};
use crate::error::DraError;
use crate::kube::Cluster;
use crate::layout::Layout;
use crate::mps::MpsOptions;
use crate::mps_daemons;
use crate::plan::{self, ClaimPlan};
use crate::timeslice::TimeSlicer;

/// The driver's settings.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// `gpu.nvidia.com`.
    pub driver: String,
    /// This node's name = its pool name.
    pub node: String,
    pub checkpoint: PathBuf,
    pub cdi: ClaimCdi,
    pub mps: MpsOptions,
    pub allowed: Allowed,
}

/// The node side of the DRA driver.
#[derive(Debug)]
pub struct Driver {
    opts: DriverOptions,
    layout: RwLock<Layout>,
    /// Signalled when what to publish changed (a re-partition, a retired device unprepared).
    changed: tokio::sync::Notify,
    cluster: Arc<dyn Cluster>,
    slicer: Arc<dyn TimeSlicer>,
    checkpoint: Mutex<Checkpoint>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    daemons: mps_daemons::Daemons,
    partitioner: Option<Arc<Partitioner>>,
}

/// One claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What the kubelet is told about each device of `plan` (CDI IDs: claim UID + device name).
fn prepared_devices(uid: &str, plan: &ClaimPlan<'_>) -> Vec<PreparedDevice> {
    plan.devices
        .iter()
        .map(|p| PreparedDevice {
            requests: vec![p.result.request.clone()],
            pool: p.result.pool.clone(),
            device: p.device.name.clone(),
            cdi_device_ids: vec![cdi_claim::device_id(uid, &p.device.name)],
            share_id: p.result.share_id.clone(),
        })
        .collect()
}

impl Driver {
    pub fn new(
        opts: DriverOptions,
        inventory: Arc<Inventory>,
        devices: Vec<NodeDevice>,
        cluster: Arc<dyn Cluster>,
        slicer: Arc<dyn TimeSlicer>,
        checkpoint: Checkpoint,
    ) -> Self {
        Driver {
            daemons: mps_daemons::Daemons::adopt(&opts.mps, &checkpoint),
            opts,
            layout: RwLock::new(Layout::new(inventory, devices)),
            changed: tokio::sync::Notify::new(),
            cluster,
            slicer,
            checkpoint: Mutex::new(checkpoint),
            locks: Mutex::new(HashMap::new()),
            partitioner: None,
        }
    }

    /// Makes MIG devices for partitionable devices at prepare (and destroys them at unprepare).
    pub fn with_partitioner(mut self, p: Arc<Partitioner>) -> Self {
        self.partitioner = Some(p);
        self
    }

    pub fn options(&self) -> &DriverOptions {
        &self.opts
    }

    pub fn cluster(&self) -> Arc<dyn Cluster> {
        self.cluster.clone()
    }

    /// The checkpointed claims holding MIG devices this plugin made (see `sweep.rs`).
    pub fn claims_with_mig(&self) -> Vec<(String, ClaimEntry)> {
        let cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        let with_mig = cp.claims().filter(|(_, e)| !e.mig.is_empty());
        with_mig.map(|(u, e)| (u.clone(), e.clone())).collect()
    }

    fn lock_of(&self, uid: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(uid.to_string()).or_default().clone()
    }

    fn entry(&self, uid: &str) -> Option<ClaimEntry> {
        let cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        cp.get(uid).cloned()
    }

    fn record(&self, uid: &str, entry: Option<ClaimEntry>) -> Result<(), DraError> {
        let mut cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        match entry {
            Some(e) => cp.put(uid, e),
            None => cp.remove(uid),
        }
    }

    /// Prepares `claim`: its devices with their CDI IDs (again the same when already prepared).
    pub async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, DraError> {
        let lock = self.lock_of(&claim.uid);
        let _held = lock.lock().await;
        match self.entry(&claim.uid) {
            Some(e) if e.state == ClaimState::PrepareCompleted => return Ok(e.devices),
            Some(e) => {
                tracing::info!(claim = %claim.uid, "rolling back an unfinished preparation");
                self.undo(&claim.uid, &e).await?;
                self.record(&claim.uid, None)?;
            }
            None => {}
        }
        let cluster = self.cluster.clone();
        let (ns, name) = (claim.namespace.clone(), claim.name.clone());
        let value = tokio::task::spawn_blocking(move || cluster.get_claim(&ns, &name))
            .await
            .map_err(|e| DraError::Mps {
                claim: claim.uid.clone(),
                message: e.to_string(),
            })??;
        let rc = parse_claim(value, &claim.namespace, &claim.name, &claim.uid)?;
        let layout = self.layout();
        let plan = plan::plan(
            &rc,
            &self.opts.driver,
            &self.opts.node,
            &layout.devices,
            self.opts.allowed,
        )?;
        let made_at_prepare = |d: &&plan::Planned<'_>| d.device.slot.is_some();
        if plan.mps.is_some() && plan.devices.iter().any(|d| made_at_prepare(&d)) {
            // As NVIDIA's driver (MPS is rejected with DynamicMIG): the UUIDs are not known yet.
            return Err(DraError::Mig {
                claim: format!("{}/{}", claim.namespace, claim.name),
                message: "MPS sharing is not supported for partitionable devices: drop the MPS config or use a static MIG device".into(),
            });
        }
        let mps_dir = plan
            .mps
            .as_ref()
            .map(|m| mps_daemons::dir_of(&self.opts.mps.root, &claim.uid, m));
        let mut entry = ClaimEntry {
            state: ClaimState::PrepareStarted,
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            devices: prepared_devices(&claim.uid, &plan),
            mps_dir,
            mig: dynmig::records(plan.devices.iter().map(|p| p.device)),
        };
        self.reserve(claim, &plan, entry.clone())?;
        match self.apply(claim, &plan, &mut entry).await {
            Ok(()) => {
                entry.state = ClaimState::PrepareCompleted;
                let devices = entry.devices.clone();
                self.record(&claim.uid, Some(entry))?;
                self.index_pods(&rc, &devices).await;
                Ok(devices)
            }
            Err(e) => {
                if let Err(u) = self.undo(&claim.uid, &entry).await {
                    tracing::warn!(claim = %claim.uid, error = %u, "rollback incomplete");
                } else {
                    self.record(&claim.uid, None)?;
                }
                Err(e)
            }
        }
    }

    /// Checks that no other prepared claim holds the plan's devices (nor, for a partitionable
    /// GPU, its full GPU against a placement: `dynmig::gpu_conflict`) and records the claim as
    /// started, under one lock (two claims for one device never both pass).
    fn reserve(
        &self,
        claim: &ClaimRef,
        plan: &ClaimPlan<'_>,
        entry: ClaimEntry,
    ) -> Result<(), DraError> {
        let all = self.devices();
        let mut cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        let busy = plan::busy(cp.claims(), &claim.uid);
        for p in &plan.devices {
            let shared = p.result.admin_access == Some(true) || p.result.share_id.is_some();
            let other =
                (busy.get(&p.device.name)).or_else(|| dynmig::gpu_conflict(p.device, &all, &busy));
            if let Some(other) = other.filter(|_| !shared) {
                return Err(DraError::DeviceBusy {
                    claim: format!("{}/{}", claim.namespace, claim.name),
                    device: p.device.name.clone(),
                    other: other.clone(),
                });
            }
        }
        cp.put(&claim.uid, entry)
    }

    async fn apply(
        &self,
        claim: &ClaimRef,
        plan: &ClaimPlan<'_>,
        entry: &mut ClaimEntry,
    ) -> Result<(), DraError> {
        let key = format!("{}/{}", claim.namespace, claim.name);
        let made = self
            .create_migs(&claim.uid, plan, entry)
            .map_err(|message| DraError::Mig {
                claim: key.clone(),
                message,
            })?;
        for (uuid, interval) in &plan.time_slices {
            let (slicer, u, i) = (self.slicer.clone(), uuid.clone(), *interval);
            let res = tokio::task::spawn_blocking(move || slicer.set(&u, i))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            res.map_err(|message| DraError::TimeSlice {
                claim: key.clone(),
                uuid: uuid.clone(),
                interval: format!("{interval:?}"),
                message,
            })?;
        }
        let mut mps_edits = None;
        if let Some(want) = &plan.mps {
            let started = self.daemons.start(&self.opts.mps, &claim.uid, want).await;
            mps_edits = Some(started.map_err(|message| DraError::Mps {
                claim: key.clone(),
                message,
            })?);
        }
        let (inv, made) = match made {
            Some((inv, made)) => (Arc::new(inv), made),
            None => (self.inventory(), Vec::new()),
        };
        let devs: Vec<&NodeDevice> = plan
            .devices
            .iter()
            .map(|p| {
                made.iter()
                    .find(|m| m.name == p.device.name)
                    .unwrap_or(p.device)
            })
            .collect();
        let cdi_err = |source| DraError::Cdi {
            claim: key.clone(),
            source,
        };
        let mps = mps_edits.as_ref();
        let mut spec = (self.opts.cdi.spec(&inv, &claim.uid, &devs, mps)).map_err(cdi_err)?;
        let env = mps_edits.map(|m| m.env).unwrap_or_default();
        spec.container_edits.env.extend(env);
        self.opts.cdi.write(&claim.uid, &spec).map_err(cdi_err)?;
        Ok(())
    }

    /// Creates the plan's MIG devices (recorded in `entry` and the checkpoint before and after
    /// each), then re-reads the node: the new inventory and the devices as made.
    fn create_migs(
        &self,
        uid: &str,
        plan: &ClaimPlan<'_>,
        entry: &mut ClaimEntry,
    ) -> Result<Option<(Inventory, Vec<NodeDevice>)>, String> {
        if let Some(p) = &self.partitioner {
            p.prepare_full(plan.devices.iter().map(|d| d.device))?;
        }
        if entry.mig.is_empty() {
            return Ok(None);
        }
        let p = self.partitioner.as_ref().ok_or(
            "this plugin runs without partitionable MIG devices (--sharing …,partitionable-mig)",
        )?;
        for i in 0..entry.mig.len() {
            let slot = (plan.devices.iter())
                .find(|d| d.device.name == entry.mig[i].device)
                .and_then(|d| d.device.slot.clone())
                .ok_or("a MIG record without its device")?;
            let mut rec = entry.mig[i].clone();
            let mut persist = |r: &MigRecord| {
                entry.mig[i] = r.clone();
                self.record(uid, Some(entry.clone()))
                    .map_err(|e| e.to_string())
            };
            p.create(&mut rec, &slot, &mut persist)?;
        }
        let inv = p.inventory()?;
        let made = entry
            .mig
            .iter()
            .filter_map(|r| {
                let base = plan.devices.iter().find(|p| p.device.name == r.device)?;
                dynmig::made_device(&inv, r, base.device)
            })
            .collect::<Vec<_>>();
        if made.len() != entry.mig.len() {
            return Err("a created MIG device is missing from node discovery".into());
        }
        Ok(Some((inv, made)))
    }

    /// Undoes whatever of claim `uid` exists: its MPS daemon, its CDI spec, its MIG devices.
    async fn undo(&self, uid: &str, entry: &ClaimEntry) -> Result<(), DraError> {
        let dir = entry.mps_dir.as_deref();
        self.daemons.stop(&self.opts.mps, uid, dir).await;
        if !entry.mig.is_empty() {
            let p = self.partitioner.clone();
            for r in &entry.mig {
                let res = match &p {
                    Some(p) => p.destroy(r),
                    None if r.creating => {
                        Err("no MIG backend to destroy it (--sharing …,partitionable-mig)".into())
                    }
                    None => Ok(()),
                };
                res.map_err(|message| DraError::Mig {
                    claim: uid.to_string(),
                    message,
                })?;
            }
        }
        self.opts
            .cdi
            .remove(uid)
            .map_err(|source| DraError::Remove {
                path: cdi_claim::spec_path(&self.opts.cdi.dir, uid),
                source,
            })
    }

    /// Unprepares claim `uid` (nothing to do when it is not prepared).
    pub async fn unprepare(&self, uid: &str) -> Result<(), DraError> {
        let lock = self.lock_of(uid);
        let _held = lock.lock().await;
        if let Some(e) = self.entry(uid) {
            self.undo(uid, &e).await?;
            self.record(uid, None)?;
            self.unindex(uid);
            let retired = self.layout().retired;
            if e.devices.iter().any(|d| retired.contains(&d.device)) {
                self.changed.notify_one();
            }
        }
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        Ok(())
    }

    /// Shutdown: the MPS daemons of prepared claims keep running for their containers (own
    /// process groups); the checkpoint and each daemon's identity let the next run stop them.
    pub async fn shutdown(&self) {
        self.daemons.shutdown().await;
    }
}

mod index;
mod relayout;

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
