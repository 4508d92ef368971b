//! The inventory cache: a JSON copy of an [`Inventory`] for the container start path.
//!
//! The prestart hook runs for every container start; loading NVML there would cost tens of
//! milliseconds and fail in exactly the situations (driver upgrade in progress) where a clear error
//! matters most. So `gpuhook cdi generate` saves the inventory, and the hook loads it after a
//! cheap staleness check: the driver version the kernel module reports now must still be the
//! cached one. Writes are atomic (temp file + rename) so a reader never sees half a file.

use std::path::{Path, PathBuf};

use gpuhook_fs::{AtomicWriter, Outcome};

use crate::error::NodeError;
use crate::inventory::{Inventory, INVENTORY_FORMAT_VERSION};
use crate::procfs::ProcFs;

fn version_mismatch(version: Option<u64>) -> String {
    format!(
        "format version {} (this gpuhook reads {INVENTORY_FORMAT_VERSION})",
        version.map_or("missing".to_string(), |v| v.to_string())
    )
}

/// Why a cached inventory cannot be used as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staleness {
    Fresh,
    /// The cache was made for another driver root.
    OtherDriverRoot {
        cached: PathBuf,
    },
    /// The node's driver version is not the cached one (driver upgraded).
    DriverChanged {
        cached: String,
        now: String,
    },
}

impl Inventory {
    /// Writes the inventory as JSON to `path` atomically, mode 0644.
    pub fn save_json(&self, path: &Path) -> Result<(), NodeError> {
        let json = self.to_json_bytes(path)?;
        Self::write_json_bytes(path, &json, AtomicWriter::new(0o644)).map(|_| ())
    }

    /// The file's bytes: pretty JSON and a final newline.
    fn to_json_bytes(&self, path: &Path) -> Result<Vec<u8>, NodeError> {
        let mut json = serde_json::to_vec_pretty(self).map_err(|e| NodeError::InventoryWrite {
            path: path.to_path_buf(),
            error: std::io::Error::other(e),
        })?;
        json.push(b'\n');
        Ok(json)
    }

    fn write_json_bytes(path: &Path, json: &[u8], writer: AtomicWriter) -> Result<bool, NodeError> {
        let outcome = writer
            .write(path, json)
            .map_err(|e| NodeError::InventoryWrite {
                path: path.to_path_buf(),
                error: e.into_io(),
            })?;
        Ok(outcome == Outcome::Written)
    }

    /// Reads an inventory saved by [`Inventory::save_json`], checking its format version.
    pub fn load_json(path: &Path) -> Result<Inventory, NodeError> {
        let bad = |reason: String| NodeError::InventoryCache {
            path: path.to_path_buf(),
            reason,
        };
        let data = crate::bounded::read_bounded(path, crate::bounded::MAX_INVENTORY_BYTES)?;
        // The typed parse first: this runs on container starts, and a cache of the current format
        // parses in one pass. Only a file that does not parse says why through a generic view.
        match serde_json::from_slice::<Inventory>(&data) {
            Ok(inv) if inv.format_version == INVENTORY_FORMAT_VERSION => return Ok(inv),
            Ok(inv) => return Err(bad(version_mismatch(Some(u64::from(inv.format_version))))),
            Err(_) => {}
        }
        let value: serde_json::Value =
            serde_json::from_slice(&data).map_err(|e| bad(format!("not JSON: {e}")))?;
        let version = value.get("format_version").and_then(|v| v.as_u64());
        if version != Some(u64::from(INVENTORY_FORMAT_VERSION)) {
            return Err(bad(version_mismatch(version)));
        }
        serde_json::from_value(value).map_err(|e| bad(format!("not an inventory: {e}")))
    }

    /// Saves the inventory unless `path` already holds exactly these bytes; `Ok(true)` when it
    /// wrote. Comparing bytes spares `cdi generate` parsing the old cache on every run.
    pub fn save_json_if_changed(&self, path: &Path) -> Result<bool, NodeError> {
        let json = self.to_json_bytes(path)?;
        Self::write_json_bytes(path, &json, AtomicWriter::new(0o644).skip_unchanged())
    }

    /// Compares the cached inventory with the node as it is now.
    pub fn staleness(&self, driver_root: &Path, node_driver_version: Option<&str>) -> Staleness {
        if self.driver_root != driver_root {
            return Staleness::OtherDriverRoot {
                cached: self.driver_root.clone(),
            };
        }
        match node_driver_version {
            Some(now) if now != self.driver_version => Staleness::DriverChanged {
                cached: self.driver_version.clone(),
                now: now.to_string(),
            },
            _ => Staleness::Fresh,
        }
    }
}

/// The driver version the kernel module under `driver_root` reports now (one small read), when
/// `/proc/driver/nvidia/version` exists.
pub fn node_driver_version(driver_root: &Path) -> Option<String> {
    ProcFs::new(driver_root).driver_version().ok().flatten()
}

/// Loads the cache at `path` if it exists and is fresh for `driver_root`; `Ok(None)` when it is
/// missing or stale (the caller rediscovers and saves a new one).
pub fn load_fresh(path: &Path, driver_root: &Path) -> Result<Option<Inventory>, NodeError> {
    let inv = match Inventory::load_json(path) {
        Ok(inv) => inv,
        Err(NodeError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    match inv.staleness(driver_root, node_driver_version(driver_root).as_deref()) {
        Staleness::Fresh => Ok(Some(inv)),
        other => {
            tracing::info!(path = %path.display(), reason = ?other, "inventory cache is stale");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{DeviceMajors, DiscoverySource, DriverFiles};
    use crate::procfs::PROC_VERSION;
    use crate::testutil::FakeRoot;

    fn inventory(root: &Path) -> Inventory {
        Inventory {
            format_version: INVENTORY_FORMAT_VERSION,
            driver_root: root.to_path_buf(),
            dev_root: root.to_path_buf(),
            driver_version: "570.158.01".into(),
            cuda_driver_version: Some("12.8".into()),
            majors: DeviceMajors {
                nvidia: 195,
                nvidia_uvm: Some(510),
                nvidia_caps: None,
                nvidia_caps_imex_channels: None,
            },
            gpus: vec![],
            mig_caps: None,
            files: DriverFiles::default(),
            source: DiscoverySource::Procfs,
        }
    }

    #[test]
    fn an_identical_cache_is_left_alone_a_changed_one_rewritten() {
        use std::os::unix::fs::MetadataExt;
        let root = FakeRoot::new();
        let path = root.path("/inv.json");
        let mut inv = inventory(root.root());
        assert!(inv.save_json_if_changed(&path).unwrap());
        let before = std::fs::metadata(&path).unwrap();
        assert!(!inv.save_json_if_changed(&path).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), before.ino());
        inv.driver_version = "580.159.04".into();
        assert!(inv.save_json_if_changed(&path).unwrap());
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), before.ino());
        assert_eq!(Inventory::load_json(&path).unwrap(), inv);
    }

    #[test]
    fn another_format_version_is_named_whether_or_not_the_rest_parses() {
        let root = FakeRoot::new();
        let path = root.path("/inv.json");
        let mut inv = inventory(root.root());
        inv.format_version = INVENTORY_FORMAT_VERSION + 1;
        inv.save_json(&path).unwrap();
        let e = Inventory::load_json(&path).unwrap_err().to_string();
        assert!(
            e.contains(&format!("format version {}", INVENTORY_FORMAT_VERSION + 1)),
            "{e}"
        );
        std::fs::write(&path, r#"{"format_version": 999, "other": 1}"#).unwrap();
        let e = Inventory::load_json(&path).unwrap_err().to_string();
        assert!(e.contains("format version 999"), "{e}");
    }

    #[test]
    fn save_load_round_trip_atomic_0644() {
        let root = FakeRoot::new();
        let path = root.path("/var/lib/gpuhook/inventory.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let inv = inventory(root.root());
        inv.save_json(&path).unwrap();
        inv.save_json(&path).unwrap();
        assert_eq!(Inventory::load_json(&path).unwrap(), inv);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("inventory.json")]);
        let err = inv
            .save_json(&root.path("/missing-dir/inv.json"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing-dir/inv.json") && err.contains("writable"),
            "{err}"
        );
    }

    #[test]
    fn bad_caches_are_clear_errors() {
        let root = FakeRoot::new();
        let path = root.path("/inv.json");
        std::fs::write(&path, "{\"format_version\": 99}").unwrap();
        let err = Inventory::load_json(&path).unwrap_err().to_string();
        assert!(
            err.contains("format version 99") && err.contains("gpuhook cdi generate"),
            "{err}"
        );
        std::fs::write(&path, "{").unwrap();
        assert!(Inventory::load_json(&path)
            .unwrap_err()
            .to_string()
            .contains("not JSON"));
        std::fs::write(&path, "{\"format_version\": 1}").unwrap();
        assert!(Inventory::load_json(&path)
            .unwrap_err()
            .to_string()
            .contains("not an inventory"));
    }

    #[test]
    fn staleness_follows_the_kernel_module_version() {
        let root = FakeRoot::new();
        let path = root.path("/inv.json");
        assert_eq!(
            load_fresh(&path, root.root()).unwrap(),
            None,
            "missing cache"
        );
        let inv = inventory(root.root());
        inv.save_json(&path).unwrap();
        assert!(
            load_fresh(&path, root.root()).unwrap().is_some(),
            "no /proc version: cannot tell, keep"
        );
        root.write(
            PROC_VERSION,
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.158.01  x\n",
        );
        assert!(load_fresh(&path, root.root()).unwrap().is_some());
        std::fs::write(
            root.path(PROC_VERSION),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  x\n",
        )
        .unwrap();
        assert_eq!(load_fresh(&path, root.root()).unwrap(), None);
        assert_eq!(
            inv.staleness(root.root(), Some("580.159.04")),
            Staleness::DriverChanged {
                cached: "570.158.01".into(),
                now: "580.159.04".into()
            }
        );
        assert!(matches!(
            inv.staleness(Path::new("/other"), None),
            Staleness::OtherDriverRoot { .. }
        ));
    }
}
