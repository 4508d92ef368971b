//! Prepared claims, on disk (`<state dir>/checkpoint.json`, written with the one atomic writer),
//! so that a plugin restart neither prepares a claim twice nor forgets to unprepare it.
//!
//! As NVIDIA's driver (dra-facts §5, `checkpoint.go`): a claim is recorded `PrepareStarted`
//! before anything is changed and `PrepareCompleted` once its CDI spec is written; a claim found
//! `PrepareStarted` is rolled back before it is prepared again or unprepared; a checkpoint of an
//! earlier boot is discarded (its MPS daemons and `/var/run/cdi` specs died with that boot).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::DraError;

/// Version of the checkpoint format.
pub const FORMAT_VERSION: u32 = 1;
/// Largest checkpoint read.
const MAX_CHECKPOINT: u64 = 64 << 20;
/// The kernel's boot id.
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimState {
    PrepareStarted,
    PrepareCompleted,
}

/// One prepared device, as returned to the kubelet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    pub requests: Vec<String>,
    pub pool: String,
    pub device: String,
    pub cdi_device_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
}

/// One claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimEntry {
    pub state: ClaimState,
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub devices: Vec<PreparedDevice>,
    /// The claim's MPS dir, when it runs a control daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_dir: Option<PathBuf>,
    /// MIG devices made for the claim (partitionable devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<crate::dynmig::MigRecord>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    version: u32,
    boot_id: String,
    claims: BTreeMap<String, ClaimEntry>,
}

/// The checkpoint in memory and on disk.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    file: File,
}

/// The current boot id (empty when unreadable).
pub fn boot_id() -> String {
    std::fs::read_to_string(BOOT_ID)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Checkpoint {
    /// Loads `path` (none yet: empty). One of another boot is discarded, with a log line.
    pub fn load(path: &Path, boot_id: &str) -> Result<Self, DraError> {
        let err = |message: String| DraError::Checkpoint {
            path: path.to_path_buf(),
            message,
        };
        let fresh = File {
            version: FORMAT_VERSION,
            boot_id: boot_id.to_string(),
            claims: BTreeMap::new(),
        };
        let bytes = match gpuhook_node::bounded::read_bounded(path, MAX_CHECKPOINT) {
            Ok(b) => b,
            Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => {
                return Ok(Checkpoint {
                    path: path.into(),
                    file: fresh,
                })
            }
            Err(e) => return Err(err(e.to_string())),
        };
        let file: File = serde_json::from_slice(&bytes).map_err(|e| {
            err(format!(
                "not a valid checkpoint ({e}); move it away to start with no prepared claims"
            ))
        })?;
        if file.version != FORMAT_VERSION {
            return Err(err(format!(
                "format version {} is not {FORMAT_VERSION}",
                file.version
            )));
        }
        if !file.boot_id.is_empty() && file.boot_id != boot_id {
            tracing::info!(path = %path.display(), claims = file.claims.len(), "checkpoint of an earlier boot discarded");
            return Ok(Checkpoint {
                path: path.into(),
                file: fresh,
            });
        }
        Ok(Checkpoint {
            path: path.into(),
            file: File {
                boot_id: boot_id.to_string(),
                ..file
            },
        })
    }

    pub fn get(&self, uid: &str) -> Option<&ClaimEntry> {
        self.file.claims.get(uid)
    }

    pub fn claims(&self) -> impl Iterator<Item = (&String, &ClaimEntry)> {
        self.file.claims.iter()
    }

    /// Records `entry` for `uid` and writes the file.
    pub fn put(&mut self, uid: &str, entry: ClaimEntry) -> Result<(), DraError> {
        let old = self.file.claims.insert(uid.to_string(), entry);
        self.save().inspect_err(|_| {
            match old {
                Some(o) => self.file.claims.insert(uid.to_string(), o),
                None => self.file.claims.remove(uid),
            };
        })
    }

    /// Forgets `uid` and writes the file.
    pub fn remove(&mut self, uid: &str) -> Result<(), DraError> {
        if let Some(old) = self.file.claims.remove(uid) {
            self.save().inspect_err(|_| {
                self.file.claims.insert(uid.to_string(), old);
            })?;
        }
        Ok(())
    }

    fn save(&self) -> Result<(), DraError> {
        let err = |message: String| DraError::Checkpoint {
            path: self.path.clone(),
            message,
        };
        let bytes = serde_json::to_vec_pretty(&self.file).map_err(|e| err(e.to_string()))?;
        gpuhook_fs::write_atomic(&self.path, &bytes, 0o600).map_err(|e| err(e.to_string()))
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
