//! One collector thread per GPU samples it every interval; `/metrics` only reads the last
//! result, so a wedged or slow NVML call never blocks a scrape. A sample older than the stale
//! limit, or one that has been running for longer than the per-GPU timeout, marks the GPU
//! stale (its last good values are still served, marked by `gpuhook_exporter_gpu_stale`). A GPU
//! fallen off the bus (`NVML_ERROR_GPU_IS_LOST`) loses its value series, gets
//! `gpuhook_exporter_gpu_lost 1` and one log line; the thread keeps trying, so a GPU that comes
//! back is served again. Each sample re-reads the GPU's MIG layout, so a re-partition (MIG mode
//! switched, instances created or destroyed) is followed without a restart.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpuhook_node::Nvml;

use crate::counters::Counter;
use crate::devices::{read_gpu, GpuInfo};
use crate::sample::{sample, Sample, SampleError, Wanted};
use crate::xid::XidTable;

/// What a GPU's thread last knew.
#[derive(Debug, Default, Clone)]
pub struct Slot {
    /// The last good sample.
    pub sample: Option<Arc<Sample>>,
    /// When the sample now running started (`None`: idle).
    pub busy_since: Option<Instant>,
    pub lost: bool,
    /// Samples that failed (other than a lost GPU).
    pub errors: u64,
}

/// Settings of the collector threads.
#[derive(Debug, Clone)]
pub struct Settings {
    pub interval: Duration,
    pub timeout: Duration,
    pub processes: bool,
    pub proc_root: PathBuf,
    pub xid: bool,
}

/// The GPUs, their slots and the settings.
#[derive(Debug)]
pub struct Collector {
    pub gpus: Vec<GpuInfo>,
    slots: Vec<Mutex<Slot>>,
    pub settings: Settings,
    pub xid: XidTable,
    pub started: Instant,
}

fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Collector {
    pub fn new(gpus: Vec<GpuInfo>, settings: Settings, xid: XidTable) -> Collector {
        let slots = gpus.iter().map(|_| Mutex::new(Slot::default())).collect();
        Collector {
            gpus,
            slots,
            settings,
            xid,
            started: Instant::now(),
        }
    }

    /// A copy of GPU `i`'s slot.
    pub fn slot(&self, i: usize) -> Slot {
        self.slots
            .get(i)
            .map(|s| lock(s).clone())
            .unwrap_or_default()
    }

    /// A sample older than this is stale.
    pub fn stale_after(&self) -> Duration {
        self.settings.interval * 2 + self.settings.timeout
    }

    /// Whether GPU `i`'s values are stale now.
    pub fn is_stale(&self, slot: &Slot, now: Instant) -> bool {
        let hung = slot
            .busy_since
            .is_some_and(|t| now.saturating_duration_since(t) > self.settings.timeout);
        let old = match &slot.sample {
            Some(s) => now.saturating_duration_since(s.taken) > self.stale_after(),
            None => now.saturating_duration_since(self.started) > self.settings.timeout,
        };
        hung || old
    }

    /// Samples GPU `i` once and records the result.
    pub fn sample_once(&self, nvml: &Nvml, i: usize, counters: &[Counter]) {
        let (Some(gpu), Some(slot)) = (self.gpus.get(i), self.slots.get(i)) else {
            return;
        };
        let last = {
            let mut s = lock(slot);
            s.busy_since = Some(Instant::now());
            s.sample
                .as_ref()
                .map_or_else(|| Arc::new(gpu.clone()), |s| Arc::clone(&s.gpu))
        };
        let gpu = &identity(nvml, &last);
        let xid: Option<BTreeMap<_, _>> = self
            .settings
            .xid
            .then(|| self.xid.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let want = Wanted {
            counters,
            xid: xid.as_ref(),
            processes: self.settings.processes,
            proc_root: &self.settings.proc_root,
            window: self.settings.interval * 2,
        };
        let result = sample(nvml, gpu, &want);
        let mut s = lock(slot);
        s.busy_since = None;
        match result {
            Ok(sample) => {
                if s.lost {
                    tracing::warn!(gpu = gpu.index, uuid = %gpu.uuid, "GPU answers NVML again");
                }
                s.lost = false;
                s.sample = Some(Arc::new(sample));
            }
            Err(SampleError::Lost) => {
                if !s.lost {
                    tracing::error!(gpu = gpu.index, uuid = %gpu.uuid, "GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST); its values are no longer served");
                }
                s.lost = true;
                s.sample = None;
            }
            Err(SampleError::Nvml(e)) => {
                if s.errors == 0 {
                    tracing::warn!(gpu = gpu.index, uuid = %gpu.uuid, error = %e, "sampling this GPU failed; its last values are served until they are stale");
                }
                s.errors = s.errors.saturating_add(1);
            }
        }
    }

    /// Starts one thread per GPU, sampling every interval.
    pub fn start(self: &Arc<Self>, nvml: Arc<Nvml>, counters: Arc<Vec<Counter>>) {
        for i in 0..self.gpus.len() {
            let (me, nvml, counters) = (Arc::clone(self), Arc::clone(&nvml), Arc::clone(&counters));
            let spawned =
                std::thread::Builder::new()
                    .name(format!("gpu-{i}"))
                    .spawn(move || loop {
                        let t0 = Instant::now();
                        me.sample_once(&nvml, i, &counters);
                        std::thread::sleep(me.settings.interval.saturating_sub(t0.elapsed()));
                    });
            if let Err(e) = spawned {
                tracing::error!(gpu = i, error = %e, "cannot start this GPU's collector thread");
            }
        }
    }
}

/// The GPU's identity now (its MIG mode and instances, re-read at every sample); the last one
/// when it cannot be read (the sample itself then says why) or the index names another GPU.
fn identity(nvml: &Nvml, last: &Arc<GpuInfo>) -> Arc<GpuInfo> {
    match read_gpu(nvml, last.index) {
        Ok(now) if now == **last => Arc::clone(last),
        Ok(now) if now.uuid == last.uuid => {
            tracing::info!(gpu = now.index, uuid = %now.uuid, mig = now.mig, instances = now.instances.len(), "the GPU's MIG layout changed; its series follow it");
            Arc::new(now)
        }
        _ => Arc::clone(last),
    }
}
