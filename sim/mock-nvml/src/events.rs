//! NVML event sets and the channel through which tests make a simulated GPU fail.
//!
//! A real driver raises events (critical Xids, ECC errors) that `nvmlEventSetWait_v2` hands to
//! every event set registered for them. On a simulated node something else must play the kernel
//! driver: tests append one line per fault to [`EVENTS_FILE_NAME`] in the state directory beside
//! the library (`<libdir>/gpuhook-sim-state/events`):
//!
//! ```text
//! xid <GPU-or-MIG-uuid> <xid>   critical Xid on a GPU, or on a MIG device (event on its parent
//!                               GPU with the MIG device's GI/CI ids, as NVML reports it)
//! ecc-dbe <GPU-uuid>            double-bit ECC error event
//! ecc-sbe <GPU-uuid>            single-bit ECC error event
//! lost <GPU-uuid>               Xid 79 "GPU has fallen off the bus"
//! ```
//!
//! A GPU also answers `NVML_ERROR_GPU_IS_LOST` to device queries while the file
//! `gpuhook-sim-state/lost-<uuid>` exists ([`is_lost`]); removing it is the GPU coming back.
//!
//! Each event set reads the file from the length it had when the set was created, so it sees
//! exactly the faults injected after it existed, independently of other sets and processes.
//! Reads are bounded ([`MAX_READ`] per poll, [`MAX_LINE`] per line); malformed lines are skipped.
//! Nothing here is reachable through an environment variable: the consumer only ever sees NVML.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::raw::c_uint;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::ffi::{self, NvmlEventData, NvmlEventSet, NvmlReturn};
use crate::state::STATE_DIR_NAME;
use crate::table::{handle_of, Gpu, Table};

/// Injection file name inside the state directory.
pub const EVENTS_FILE_NAME: &str = "events";
/// At most this many bytes are read per poll.
pub const MAX_READ: u64 = 64 * 1024;
/// Longer lines are skipped.
pub const MAX_LINE: usize = 256;
/// How often a waiting set looks at the file.
const POLL: Duration = Duration::from_millis(10);
/// The Xid the driver reports when a GPU falls off the bus.
pub const XID_GPU_LOST: u64 = 79;

/// One event set: which GPUs (by index) are registered for which event bits, and how far into
/// the injection file this set has read.
#[derive(Debug, Default)]
pub struct EventSet {
    regs: Mutex<Vec<(c_uint, u64)>>,
    cursor: Mutex<u64>,
}

type Sets = Vec<(usize, Arc<EventSet>)>;

static SETS: Mutex<Sets> = Mutex::new(Vec::new());
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data behind the locks: a panic cannot leave it half-updated.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn events_file(table: &Table) -> PathBuf {
    table.dir.join(STATE_DIR_NAME).join(EVENTS_FILE_NAME)
}

/// True while the GPU is marked lost (`gpuhook-sim-state/lost-<uuid>` exists).
pub fn is_lost(table: &Table, gpu: &Gpu) -> bool {
    // UUIDs are restricted to [A-Za-z0-9-] when the table is built, so this stays in the dir.
    table
        .dir
        .join(STATE_DIR_NAME)
        .join(format!("lost-{}", gpu.uuid))
        .exists()
}

/// `nvmlEventSetCreate`: a new set that sees faults injected from now on.
pub fn create(table: &Table) -> NvmlEventSet {
    let start = std::fs::metadata(events_file(table)).map_or(0, |m| m.len());
    let set = Arc::new(EventSet {
        regs: Mutex::new(Vec::new()),
        cursor: Mutex::new(start),
    });
    // Ids step by 16 so a handle looks like an aligned pointer to callers that check.
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed).saturating_mul(16);
    lock(&SETS).push((id, set));
    id as NvmlEventSet
}

/// Looks a caller's handle up by value; it is never dereferenced.
pub fn resolve(handle: NvmlEventSet) -> Result<Arc<EventSet>, NvmlReturn> {
    let id = handle as usize;
    lock(&SETS)
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, s)| Arc::clone(s))
        .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)
}

/// `nvmlEventSetFree`.
pub fn free(handle: NvmlEventSet) -> Result<(), NvmlReturn> {
    let id = handle as usize;
    let mut sets = lock(&SETS);
    let pos = sets
        .iter()
        .position(|(i, _)| *i == id)
        .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
    sets.remove(pos);
    Ok(())
}

impl EventSet {
    /// `nvmlDeviceRegisterEvents` for the GPU with this index (bits accumulate).
    pub fn register(&self, gpu_index: c_uint, mask: u64) {
        let mut regs = lock(&self.regs);
        match regs.iter_mut().find(|(g, _)| *g == gpu_index) {
            Some((_, m)) => *m |= mask,
            None => regs.push((gpu_index, mask)),
        }
    }

    fn wants(&self, gpu_index: c_uint, event_type: u64) -> bool {
        lock(&self.regs)
            .iter()
            .any(|(g, m)| *g == gpu_index && m & event_type != 0)
    }

    /// `nvmlEventSetWait_v2`: the next registered event, or `NVML_ERROR_TIMEOUT`.
    pub fn wait(&self, table: &Table, timeout_ms: c_uint) -> Result<NvmlEventData, NvmlReturn> {
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            if let Some(event) = self.next_event(table) {
                return Ok(event);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ffi::NVML_ERROR_TIMEOUT);
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
    }

    /// Reads complete lines after the cursor (bounded) until one is an event for this set.
    fn next_event(&self, table: &Table) -> Option<NvmlEventData> {
        let mut cursor = lock(&self.cursor);
        let mut file = File::open(events_file(table)).ok()?;
        let len = file.metadata().ok()?.len();
        if len < *cursor {
            // Truncated by the injector: start over from its new end.
            *cursor = len;
            return None;
        }
        file.seek(SeekFrom::Start(*cursor)).ok()?;
        let mut chunk = Vec::new();
        file.take(MAX_READ).read_to_end(&mut chunk).ok()?;
        let mut consumed = 0usize;
        let mut found = None;
        for line in chunk.split_inclusive(|b| *b == b'\n') {
            if !line.ends_with(b"\n") {
                break;
            }
            consumed += line.len();
            if let Some(event) = parse_line(table, line).filter(|e| self.accepts(table, e)) {
                found = Some(event);
                break;
            }
        }
        if consumed == 0 && u64::try_from(chunk.len()).is_ok_and(|n| n == MAX_READ) {
            // A "line" longer than a whole read: skip it rather than stall forever.
            consumed = chunk.len();
        }
        *cursor += u64::try_from(consumed).unwrap_or(0);
        found
    }

    fn accepts(&self, table: &Table, event: &NvmlEventData) -> bool {
        table
            .gpus
            .iter()
            .find(|g| handle_of(*g) == event.device)
            .is_some_and(|g| self.wants(g.index, event.event_type))
    }
}

/// Parses one injection line into the event NVML would report for it.
fn parse_line(table: &Table, line: &[u8]) -> Option<NvmlEventData> {
    if line.len() > MAX_LINE {
        return None;
    }
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split_whitespace();
    let (kind, uuid) = (words.next()?, words.next()?);
    let (event_type, data) = match kind {
        "xid" => (ffi::EVENT_XID_CRITICAL, words.next()?.parse::<u64>().ok()?),
        "lost" => (ffi::EVENT_XID_CRITICAL, XID_GPU_LOST),
        "ecc-dbe" => (ffi::EVENT_DOUBLE_BIT_ECC, 0),
        "ecc-sbe" => (ffi::EVENT_SINGLE_BIT_ECC, 0),
        _ => return None,
    };
    for gpu in &table.gpus {
        let (gi, ci) = if gpu.uuid == uuid {
            (ffi::NO_INSTANCE, ffi::NO_INSTANCE)
        } else if let Some(mig) = gpu.migs.iter().find(|m| m.uuid == uuid) {
            (mig.gi, mig.ci)
        } else {
            continue;
        };
        return Some(NvmlEventData {
            device: handle_of(gpu),
            event_type,
            event_data: data,
            gpu_instance_id: gi,
            compute_instance_id: ci,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhook_sim::NodeProfile;
    use std::io::Write;

    const GPU: &str = "GPU-a100a100-0000-4000-8000-000000000000";
    const MIG: &str = "MIG-11111111-2222-5333-8444-555555555555";

    fn table(dir: &std::path::Path) -> Table {
        let text = format!(
            r#"
name = "events-test"
driver_version = "550.54.15"
cuda_driver_version = "12.4"
lib_dir = "/usr/lib64"
[majors]
nvidia_uvm = 234
nvidia_caps = 235
[[gpus]]
index = 0
minor = 0
uuid = "{GPU}"
pci_bus_id = "00000000:B1:00.0"
name = "NVIDIA A100-SXM4-80GB"
architecture = "ampere"
compute_capability = "8.0"
brand = "nvidia"
memory_mib = 81920
mig_mode = true
[[gpus.mig_devices]]
profile = "4g.40gb"
gi_id = 1
ci_id = 0
uuid = "{MIG}"
memory_mib = 40192
gi_cap_minor = 12
ci_cap_minor = 13
"#
        );
        let profile = NodeProfile::from_toml_str(&text).expect("profile");
        std::fs::create_dir_all(dir.join(STATE_DIR_NAME)).expect("state dir");
        Table::from_profile(&profile, dir.to_path_buf()).expect("table")
    }

    fn append(t: &Table, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(events_file(t))
            .expect("open");
        f.write_all(text.as_bytes()).expect("append");
    }

    #[test]
    fn lines_become_nvml_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = table(dir.path());
        let gpu = handle_of(&t.gpus[0]);
        let xid = parse_line(&t, format!("xid {MIG} 48\n").as_bytes()).expect("MIG xid");
        // On the parent GPU, with the MIG device's GI/CI (nvml.h nvmlEventData_t).
        assert_eq!((xid.device, xid.event_data), (gpu, 48));
        assert_eq!((xid.gpu_instance_id, xid.compute_instance_id), (1, 0));
        let lost = parse_line(&t, format!("lost {GPU}\n").as_bytes()).expect("lost");
        assert_eq!(
            (lost.event_type, lost.event_data),
            (ffi::EVENT_XID_CRITICAL, XID_GPU_LOST)
        );
        assert_eq!(lost.gpu_instance_id, ffi::NO_INSTANCE);
        let dbe = parse_line(&t, format!("ecc-dbe {GPU}\n").as_bytes()).expect("dbe");
        assert_eq!(dbe.event_type, ffi::EVENT_DOUBLE_BIT_ECC);
        assert!(parse_line(&t, b"xid GPU-unknown 48\n").is_none());
        assert!(parse_line(&t, format!("xid {GPU} x\n").as_bytes()).is_none());
        let long = format!("xid {GPU} 48 {}\n", "x".repeat(MAX_LINE));
        assert!(parse_line(&t, long.as_bytes()).is_none());
    }

    #[test]
    fn a_set_sees_registered_events_injected_after_it_was_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = table(dir.path());
        append(&t, &format!("xid {GPU} 48\n"));
        let set = EventSet {
            cursor: Mutex::new(std::fs::metadata(events_file(&t)).map_or(0, |m| m.len())),
            ..EventSet::default()
        };
        set.register(0, ffi::EVENT_XID_CRITICAL);
        assert_eq!(
            set.wait(&t, 30).map(|e| e.event_data).err(),
            Some(ffi::NVML_ERROR_TIMEOUT)
        );
        // Not registered for ECC; a partial line waits for its newline; an overlong one is skipped.
        append(
            &t,
            &format!("ecc-dbe {GPU}\n{}\nxid {GPU} 6", "y".repeat(2 * MAX_LINE)),
        );
        assert_eq!(set.wait(&t, 30).err(), Some(ffi::NVML_ERROR_TIMEOUT));
        append(&t, "2\n");
        assert_eq!(set.wait(&t, 30).map(|e| e.event_data), Ok(62));
    }
}
