//! One sample of one GPU: the counters' values per entity and the processes on each entity,
//! read through `gpuhook-node`'s NVML. Runs on the GPU's collector thread (a slow call delays
//! only this GPU). A field NVML does not answer is absent, as DCGM's blank values are; only
//! `GPU_IS_LOST` fails the whole sample.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpuhook_node::nvml::{Clock, Device, ProcessKind};
use gpuhook_node::{NodeError, Nvml};

use crate::counters::Counter;
use crate::devices::GpuInfo;
use crate::fields::{Scope, Source};

/// `NVML_ERROR_GPU_IS_LOST`.
const GPU_IS_LOST: u32 = 15;
/// Largest `/proc/<pid>/cgroup` read.
const MAX_CGROUP_FILE: u64 = 16 * 1024;
const MIB: f64 = 1024.0 * 1024.0;

/// A process on an entity.
#[derive(Debug, Clone, PartialEq)]
pub struct Proc {
    pub pid: u32,
    pub kind: ProcessKind,
    pub used_mib: Option<f64>,
    /// SM utilization % of its latest sample (never on a MIG instance: NVML has none).
    pub sm: Option<f64>,
    /// Its container id, from its cgroup (None: a host process, or attribution is off).
    pub container: Option<String>,
}

/// A GPU's values at one time. Entity 0 is the GPU, 1 + i its MIG instance i.
#[derive(Debug, Clone)]
pub struct Sample {
    pub taken: Instant,
    /// The GPU and its MIG instances as they were when the sample was taken (a MIG
    /// re-partition changes them without a restart).
    pub gpu: Arc<GpuInfo>,
    /// `(entity, counter index, value)`.
    pub values: Vec<(usize, usize, f64)>,
    /// Processes per entity (only with attribution on).
    pub procs: Vec<Vec<Proc>>,
}

/// Why a sample failed.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)")]
    Lost,
    #[error(transparent)]
    Nvml(#[from] NodeError),
}

/// What a sample is asked for.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    pub counters: &'a [Counter],
    /// Last Xid per `(GPU UUID, GPU instance)`; `None` disables the XID field.
    pub xid: Option<&'a BTreeMap<(String, Option<u32>), u64>>,
    /// Read processes and their containers (per-pod series).
    pub processes: bool,
    pub proc_root: &'a Path,
    /// Utilization samples newer than this long ago count.
    pub window: Duration,
}

fn soft<T>(r: Result<T, NodeError>) -> Result<Option<T>, SampleError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NodeError::Nvml { code, .. }) if code == GPU_IS_LOST => Err(SampleError::Lost),
        Err(_) => Ok(None),
    }
}

#[allow(clippy::cast_precision_loss)]
fn f<T: Into<u64>>(v: Option<T>) -> Option<f64> {
    v.map(|v| v.into() as f64)
}

/// The value of a GPU-scope source.
fn gpu_value(dev: &Device<'_>, src: Source) -> Result<Option<f64>, SampleError> {
    Ok(match src {
        Source::SmClock => f(soft(dev.clock_mhz(Clock::Sm))?),
        Source::MemClock => f(soft(dev.clock_mhz(Clock::Mem))?),
        Source::VideoClock => f(soft(dev.clock_mhz(Clock::Video))?),
        Source::ClockEventReasons => f(soft(dev.clocks_event_reasons())?),
        // DCGM drops temperatures above 200 °C as bogus.
        Source::GpuTemp => f(soft(dev.temperature_gpu())?.filter(|t| *t <= 200)),
        Source::PowerUsage => soft(dev.power_usage_mw())?.map(|mw| f64::from(mw) / 1000.0),
        Source::TotalEnergy => f(soft(dev.total_energy_mj())?),
        Source::PcieReplay => f(soft(dev.pcie_replay_counter())?),
        Source::GpuUtil => f(soft(dev.utilization_rates())?.map(|u| u.0)),
        Source::MemCopyUtil => f(soft(dev.utilization_rates())?.map(|u| u.1)),
        Source::EncUtil => f(soft(dev.encoder_utilization())?),
        Source::DecUtil => f(soft(dev.decoder_utilization())?),
        Source::Nvml(ids) => {
            let Some(vals) = soft(dev.field_values(ids))? else {
                return Ok(None);
            };
            if vals.contains(&Err(GPU_IS_LOST)) {
                return Err(SampleError::Lost);
            }
            let ok: Option<Vec<f64>> = vals.iter().map(|v| v.ok().map(|s| s.as_f64())).collect();
            // MEMORY_TEMP above 200 °C is rejected by DCGM too.
            ok.map(|v| v.iter().sum::<f64>())
                .filter(|v| ids != [82] || *v <= 200.0)
        }
        _ => None,
    })
}

/// The value of an instance-scope source on `dev` (the GPU, or a MIG device).
fn instance_value(
    dev: &Device<'_>,
    src: Source,
    mem: &mut Option<Option<gpuhook_node::nvml::MemoryInfo>>,
    xid: Option<u64>,
) -> Result<Option<f64>, SampleError> {
    let mut memory = || -> Result<Option<gpuhook_node::nvml::MemoryInfo>, SampleError> {
        if mem.is_none() {
            *mem = Some(soft(dev.memory_info())?);
        }
        Ok(mem.flatten())
    };
    #[allow(clippy::cast_precision_loss)]
    let mib = |b: u64| (b as f64 / MIB).floor();
    Ok(match src {
        Source::FbTotal => memory()?.map(|m| mib(m.total)),
        Source::FbFree => memory()?.map(|m| mib(m.free)),
        Source::FbUsed => memory()?.map(|m| mib(m.used)),
        Source::FbReserved => memory()?.map(|m| mib(m.reserved)),
        #[allow(clippy::cast_precision_loss)]
        Source::XidErrors => xid.map(|x| x as f64),
        _ => None,
    })
}

/// Samples one GPU.
pub fn sample(nvml: &Nvml, gpu: &Arc<GpuInfo>, want: &Wanted<'_>) -> Result<Sample, SampleError> {
    let dev = nvml.device_by_index(gpu.index)?;
    let mut values = Vec::new();
    let mut procs = vec![Vec::new(); gpu.entity_count()];
    let mut gpu_mem = None;
    for (ci, c) in want.counters.iter().enumerate() {
        let v = match c.scope {
            Scope::Gpu => gpu_value(&dev, c.source)?,
            Scope::Instance if gpu.mig => None,
            Scope::Instance => instance_value(&dev, c.source, &mut gpu_mem, xid(want, gpu, None))?,
        };
        if let Some(v) = v {
            values.push((0, ci, v));
        }
    }
    if gpu.mig {
        for (i, inst) in gpu.instances.iter().enumerate() {
            let Some(m) = soft(dev.mig_device_by_index(inst.index))?.flatten() else {
                continue;
            };
            let mut mem = None;
            for (ci, c) in want.counters.iter().enumerate() {
                if c.scope != Scope::Instance {
                    continue;
                }
                let x = xid(want, gpu, Some(inst.gi));
                if let Some(v) = instance_value(&m, c.source, &mut mem, x)? {
                    values.push((1 + i, ci, v));
                }
            }
            if want.processes {
                procs[1 + i] = processes(&m, false, want)?;
            }
        }
    } else if want.processes {
        procs[0] = processes(&dev, true, want)?;
    }
    Ok(Sample {
        taken: Instant::now(),
        gpu: Arc::clone(gpu),
        values,
        procs,
    })
}

fn xid(want: &Wanted<'_>, gpu: &GpuInfo, gi: Option<u32>) -> Option<u64> {
    let map = want.xid?;
    Some(map.get(&(gpu.uuid.clone(), gi)).copied().unwrap_or(0))
}

/// The processes on `dev` (compute, graphics, MPS clients; one row per pid), with their latest
/// SM sample (`with_util`: NVML has none on a MIG device) and their container.
fn processes(
    dev: &Device<'_>,
    with_util: bool,
    want: &Wanted<'_>,
) -> Result<Vec<Proc>, SampleError> {
    let mut by_pid: BTreeMap<u32, Proc> = BTreeMap::new();
    for kind in [
        ProcessKind::Compute,
        ProcessKind::Graphics,
        ProcessKind::Mps,
    ] {
        for p in soft(dev.processes(kind))?.unwrap_or_default() {
            #[allow(clippy::cast_precision_loss)]
            let used = p.used_bytes.map(|b| (b as f64 / MIB).floor());
            let e = by_pid.entry(p.pid).or_insert(Proc {
                pid: p.pid,
                kind,
                used_mib: None,
                sm: None,
                container: None,
            });
            e.used_mib = match (e.used_mib, used) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }
    if with_util {
        let since = SystemTime::now()
            .checked_sub(want.window)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0));
        let mut latest: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
        for s in soft(dev.process_utilization(since))?.unwrap_or_default() {
            let e = latest.entry(s.pid).or_insert((s.timestamp_us, s.sm));
            if s.timestamp_us >= e.0 {
                *e = (s.timestamp_us, s.sm);
            }
        }
        for (pid, (_, sm)) in latest {
            if let Some(p) = by_pid.get_mut(&pid) {
                p.sm = Some(f64::from(sm.min(100)));
            }
        }
    }
    let mut out: Vec<Proc> = by_pid.into_values().collect();
    for p in &mut out {
        p.container = container_of(want.proc_root, p.pid);
    }
    Ok(out)
}

/// The container id of `pid` from `<proc_root>/<pid>/cgroup` (bounded read); `None` for a host
/// process or one that is gone.
pub fn container_of(proc_root: &Path, pid: u32) -> Option<String> {
    let file = std::fs::File::open(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    let mut text = String::new();
    file.take(MAX_CGROUP_FILE).read_to_string(&mut text).ok()?;
    gpu_mps_daemon::cgroup::parse_proc_cgroup(&text).map(|o| o.id)
}

#[cfg(test)]
#[path = "sample_tests.rs"]
mod tests;
