//! Scripted GPU telemetry: what the exporter's samples read, set per device by tests.
//!
//! A real driver measures; on a simulated node tests write what NVML should answer, in the
//! state directory beside the library (`<libdir>/gpuhook-sim-state/`, like the `events` file):
//!
//! ```text
//! telemetry-<GPU-or-MIG-uuid>   one `key value` per line ('#' comments):
//!     gpu_util mem_util enc_util dec_util        %            (default 0)
//!     temp memory_temp                           °C           (default 30 + index, 40)
//!     power_mw energy_mj                         mW, mJ       (default 70000 + 1000 * index, 1e9)
//!     sm_clock mem_clock                         MHz          (default 1410, 1593)
//!     pcie_replay throttle                       count, mask  (default 0)
//!     fb_used_mib fb_reserved_mib                MiB used outside processes, reserved (0)
//!     field.<NVML field id> <value>              any nvmlDeviceGetFieldValues answer (0)
//!     delay_ms <ms>                              every telemetry call of this device first
//!                                                sleeps this long (a wedged driver call)
//! processes-<GPU-or-MIG-uuid>   one process per line: `<pid> <compute|graphics|mps> <used MiB>
//!                               [<sm %> [<mem %>]]`
//! ```
//!
//! Files are re-read on every call (bounded to [`MAX_FILE`]), so a test changes a GPU's figures
//! while a consumer runs; malformed lines are skipped.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use crate::ffi::{self, NvmlReturn};
use crate::state::STATE_DIR_NAME;
use crate::table::{Dev, Table};

/// At most this much of a telemetry or process file is read.
pub const MAX_FILE: u64 = 256 * 1024;
/// Longest `delay_ms` honoured (a test's wedge must end eventually).
const MAX_DELAY_MS: u64 = 120_000;
const MIB: u64 = 1024 * 1024;

/// A process scripted on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    /// 0 compute, 1 graphics, 2 MPS client.
    pub kind: u8,
    pub used_mib: u64,
    pub sm: u32,
    pub mem: u32,
}

fn read_bounded(path: PathBuf) -> String {
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(MAX_FILE).read_to_string(&mut text);
    }
    text
}

fn state_file(t: &Table, prefix: &str, uuid: &str) -> PathBuf {
    // UUIDs were restricted to [A-Za-z0-9-] when the table was built.
    t.dir.join(STATE_DIR_NAME).join(format!("{prefix}-{uuid}"))
}

/// The scripted values of one device (`key value` lines).
#[derive(Debug, Default)]
pub struct Values(BTreeMap<String, f64>);

impl Values {
    pub fn read(t: &Table, uuid: &str) -> Values {
        let text = read_bounded(state_file(t, "telemetry", uuid));
        let map = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.split_once(char::is_whitespace)?;
                Some((k.to_string(), v.trim().parse::<f64>().ok()?))
            })
            .collect();
        Values(map)
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.0
            .get(key)
            .copied()
            .filter(|v| v.is_finite() && *v >= 0.0)
    }

    /// The value as an unsigned integer (saturating), or `default`.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn uint(&self, key: &str, default: u64) -> u64 {
        self.get(key).map_or(default, |v| v as u64)
    }
}

/// The device's scripted values, after its `delay_ms` and the lost check (`GPU_IS_LOST`).
pub fn values(t: &Table, d: Dev<'_>) -> Result<Values, NvmlReturn> {
    if crate::events::is_lost(t, d.gpu()) {
        return Err(ffi::NVML_ERROR_GPU_IS_LOST);
    }
    let v = Values::read(t, d.uuid());
    let delay = v.uint("delay_ms", 0).min(MAX_DELAY_MS);
    if delay > 0 {
        std::thread::sleep(Duration::from_millis(delay));
    }
    Ok(v)
}

/// The processes scripted on one device (GPU or MIG device), in file order.
pub fn processes(t: &Table, uuid: &str) -> Vec<Proc> {
    let text = read_bounded(state_file(t, "processes", uuid));
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let pid = it.next()?.parse().ok()?;
            let kind = match it.next()? {
                "compute" => 0,
                "graphics" => 1,
                "mps" => 2,
                _ => return None,
            };
            let used_mib = it.next()?.parse().ok()?;
            let sm = it.next().map_or(Some(0), |s| s.parse().ok())?;
            let mem = it.next().map_or(Some(0), |s| s.parse().ok())?;
            Some(Proc {
                pid,
                kind,
                used_mib,
                sm: sm.min(100),
                mem: mem.min(100),
            })
        })
        .collect()
}

/// `(total, reserved, used, free)` in bytes: used is the device's `fb_used_mib` plus its
/// processes' memory (plus, on a MIG-enabled GPU, its MIG devices'), capped by what exists.
pub fn memory(t: &Table, d: Dev<'_>) -> Result<(u64, u64, u64, u64), NvmlReturn> {
    let v = values(t, d)?;
    let total = d.memory_bytes();
    let reserved = v.uint("fb_reserved_mib", 0).saturating_mul(MIB).min(total);
    let own = |uuid: &str, v: &Values| {
        let procs: u64 = processes(t, uuid).iter().map(|p| p.used_mib).sum();
        v.uint("fb_used_mib", 0)
            .saturating_add(procs)
            .saturating_mul(MIB)
    };
    let mut used = own(d.uuid(), &v);
    if let Dev::Gpu(g) = d {
        for m in &g.migs {
            used = used.saturating_add(own(&m.uuid, &Values::read(t, &m.uuid)));
        }
    }
    let used = used.min(total - reserved);
    Ok((total, reserved, used, total - reserved - used))
}
