//! cgroup v1: one write per rule to `devices.allow` / `devices.deny` (the kernel parses one rule
//! per write(2)).

use std::io::Write;
use std::path::PathBuf;

use super::{DeviceController, DeviceRule};
use crate::error::{InjectError, Result};

/// A v1 `devices` cgroup directory.
#[derive(Debug, Clone)]
pub struct V1Devices {
    pid: i32,
    dir: PathBuf,
}

impl V1Devices {
    /// `dir` is the cgroup's directory in the devices hierarchy; `pid` is for messages.
    pub fn new(pid: i32, dir: PathBuf) -> Self {
        V1Devices { pid, dir }
    }
}

impl DeviceController for V1Devices {
    fn apply(&self, _base: &[DeviceRule], add: &[DeviceRule]) -> Result<()> {
        for rule in add {
            let file = self.dir.join(if rule.allow {
                "devices.allow"
            } else {
                "devices.deny"
            });
            let line = rule.v1_line();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| InjectError::Cgroup {
                    pid: self.pid,
                    reason: format!("write {line:?} to {}: {e}", file.display()),
                })?;
        }
        Ok(())
    }
}
