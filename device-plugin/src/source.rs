//! The node's advertisement from the config set (file or directory of named configs, as
//! NVIDIA's config-manager reads it) and the node's inventory, reloaded when any of them
//! changes: the config files, the node-label file, or an MPS daemon's `ready` file (a GPU's MPS
//! resources are advertised only while its daemon is ready).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpuhook_node::{discover, DiscoverOptions, Inventory};
use gpuhook_sharing::{advertise, load_config_set, Advertisement};

use crate::fingerprint::MpsInputs;
use crate::preferred::AllocationPolicy;
use crate::run::{AdSource, Loaded};
use crate::service::PreferError;

/// Largest node-label file read.
const MAX_LABEL_FILE: u64 = 4096;

/// How the node's config is chosen.
#[derive(Debug, Clone)]
pub enum ConfigName {
    /// The `nvidia.com/device-plugin.config` label value, given.
    Fixed(Option<String>),
    /// The label value, read from a file (empty or missing: no label).
    File(PathBuf),
}

/// Where GPU facts come from.
#[derive(Debug, Clone)]
pub enum InventoryFrom {
    /// Discovery under a driver root (NVML through the root's library or `nvml_lib`).
    Discover(DiscoverOptions),
    /// A serialised [`Inventory`] (JSON).
    File(PathBuf),
}

/// Reads the config set and the inventory on every load.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub config: PathBuf,
    pub name: ConfigName,
    pub inventory: InventoryFrom,
    /// `ready` files seen at the last load (watched for changes).
    ready_files: Vec<PathBuf>,
    /// The MPS root and GPUs of the last load (for [`AdSource::fingerprint`]).
    mps: MpsInputs,
    /// What changes when the node's devices do (watched): the inventory file, or each GPU's
    /// MIG capability directory (`gi<N>` entries come and go with a MIG re-partition), so a
    /// layout applied by the MIG manager is advertised without a restart.
    device_files: Vec<PathBuf>,
}

/// Why the node's advertisement could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read node label file {}", path.display())]
    Label {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read inventory {}: {message}", path.display())]
    Inventory { path: PathBuf, message: String },
    #[error("cannot discover the node's GPUs")]
    Discover(#[source] gpuhook_node::NodeError),
}

impl ConfigSource {
    pub fn new(config: PathBuf, name: ConfigName, inventory: InventoryFrom) -> Self {
        ConfigSource {
            config,
            name,
            inventory,
            ready_files: Vec::new(),
            mps: MpsInputs::default(),
            device_files: Vec::new(),
        }
    }

    /// The label value now.
    pub fn label(&self) -> Result<Option<String>, SourceError> {
        match &self.name {
            ConfigName::Fixed(v) => Ok(v.clone()),
            ConfigName::File(path) => {
                use std::io::Read;
                let text = match std::fs::File::open(path) {
                    Ok(f) => {
                        let mut s = String::new();
                        f.take(MAX_LABEL_FILE)
                            .read_to_string(&mut s)
                            .map_err(|source| SourceError::Label {
                                path: path.clone(),
                                source,
                            })?;
                        s
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(source) => {
                        return Err(SourceError::Label {
                            path: path.clone(),
                            source,
                        })
                    }
                };
                let v = text.trim();
                Ok((!v.is_empty()).then(|| v.to_string()))
            }
        }
    }

    /// The node's inventory now.
    pub fn inventory(&self) -> Result<Inventory, SourceError> {
        match &self.inventory {
            InventoryFrom::Discover(opts) => {
                let d = discover(opts).map_err(SourceError::Discover)?;
                for w in &d.warnings {
                    tracing::warn!(warning = %w, "discovery");
                }
                Ok(d.inventory)
            }
            InventoryFrom::File(path) => {
                let err = |message: String| SourceError::Inventory {
                    path: path.clone(),
                    message,
                };
                let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
                serde_json::from_str(&text).map_err(|e| err(e.to_string()))
            }
        }
    }

    /// The advertisement for the config and inventory now; a GPU's MPS shares count as ready
    /// when its daemon is ready (`<mpsRoot>/<uuid>/ready` exists) *and* the daemon's CDI spec
    /// already lists the GPU: the daemon writes `ready` a moment before it publishes the spec,
    /// and a share advertised in between would give a container no limits (envvar) or a CDI
    /// name that does not resolve yet.
    pub fn advertisement(&self, inv: &Inventory) -> Result<Advertisement, PreferError> {
        Ok(self.advertisement_and_policy(inv)?.0)
    }

    /// `flags.gfd.noTimestamp` of the selected config (default false).
    pub fn no_timestamp(&self) -> Result<bool, PreferError> {
        let label = self.label()?;
        let set = load_config_set(&self.config)?;
        let (_, config) = set.select(label.as_deref())?;
        Ok(config.flags.gfd.no_timestamp.unwrap_or(false))
    }

    /// [`Self::advertisement`] and the config's `sharedDevicesAllocationPolicy`.
    fn advertisement_and_policy(
        &self,
        inv: &Inventory,
    ) -> Result<(Advertisement, AllocationPolicy), PreferError> {
        let label = self.label()?;
        let set = load_config_set(&self.config)?;
        let (name, config) = set.select(label.as_deref())?;
        let root = config.flags.mps_root.clone().map(PathBuf::from);
        let ready = |uuid: &str| {
            root.as_ref().is_some_and(|r| {
                ready_file(r, uuid).exists() && crate::mps_share::share_env(r, uuid).is_ok()
            })
        };
        let policy = match config.flags.plugin.shared_devices_allocation_policy {
            Some(gpuhook_sharing::config::AllocationPolicy::Packed) => AllocationPolicy::Packed,
            _ => AllocationPolicy::Distributed,
        };
        Ok((advertise(name, config, inv, &ready)?, policy))
    }
}

/// The paths whose change means the node's devices changed (see `ConfigSource::device_files`).
/// `minors`: the GPUs' device minors (`/dev/nvidia<minor>`).
pub fn device_files(from: &InventoryFrom, minors: impl IntoIterator<Item = u32>) -> Vec<PathBuf> {
    match from {
        InventoryFrom::File(path) => vec![path.clone()],
        InventoryFrom::Discover(opts) => minors
            .into_iter()
            .map(|m| {
                opts.driver_root
                    .join(format!("proc/driver/nvidia/capabilities/gpu{m}/mig"))
            })
            .collect(),
    }
}

fn ready_file(root: &Path, uuid: &str) -> PathBuf {
    root.join(uuid).join("ready")
}

impl AdSource for ConfigSource {
    fn watched(&self) -> Vec<PathBuf> {
        let mut v = vec![self.config.clone()];
        if let ConfigName::File(p) = &self.name {
            v.push(p.clone());
        }
        v.extend(self.ready_files.iter().cloned());
        v.extend(self.device_files.iter().cloned());
        v
    }

    fn fingerprint(&self) -> Option<u64> {
        // An unreadable label file is an input too (its load fails, logged, until it reads).
        let label = self.label().unwrap_or_else(|e| Some(format!("\0{e}")));
        Some(crate::fingerprint::fingerprint(
            &self.config,
            &label,
            &self.mps,
            &self.device_files,
        ))
    }

    fn load(&mut self) -> Result<Loaded, PreferError> {
        let inv = self.inventory()?;
        self.device_files = device_files(&self.inventory, inv.gpus.iter().map(|g| g.minor));
        let (ad, policy) = self.advertisement_and_policy(&inv)?;
        // The ready files, the daemon's status (it names the spec) and the spec itself.
        self.ready_files = match &ad.mps_root {
            Some(root) => {
                let root = Path::new(root);
                let mut files: Vec<PathBuf> =
                    inv.gpus.iter().map(|g| ready_file(root, &g.uuid)).collect();
                files.push(root.join(crate::mps_share::STATUS_FILE));
                files.extend(crate::mps_share::spec_path(root));
                files
            }
            None => Vec::new(),
        };
        self.mps = MpsInputs {
            root: ad.mps_root.as_ref().map(PathBuf::from),
            gpus: inv.gpus.iter().map(|g| g.uuid.clone()).collect(),
        };
        Ok(Loaded {
            ad,
            inventory: Some(Arc::new(inv)),
            policy,
        })
    }
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
