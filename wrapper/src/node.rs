//! The node as the wrapper sees it: the inventory (loaded once, only when needed), the options of
//! the hooks it generates, and CDI specs made in memory ([`GenerateMissing`]).
//!
//! Generating missing specs (`[runtime] generate-missing = true`, the default) exists for
//! robustness: `/var/run/cdi` is a tmpfs, so right after boot a container can start before the
//! unit that runs `gpuhook cdi generate` has written the spec; and a request may name a device by
//! an id the spec file does not list (a PCI bus id, a UUID in another case). The in-memory spec
//! is exactly what `gpuhook cdi generate` would write (same library, same options), plus a
//! device for each missing name that resolves on this node; it is registered *after* the spec
//! files, so a spec file always wins. A name that does not resolve stays missing and the
//! container fails with `unresolvable CDI devices ...`.

use std::cell::OnceCell;
use std::path::PathBuf;
use std::sync::Arc;

use gpuhook_cdi::{ContainerEdits, Device, EditOptions, GenerateOptions, Registry, Spec};
use gpuhook_node::Inventory;

use gpuhook::config::{Config, CONFIG_ENV};
use gpuhook::prestart::inventory::load_inventory;
use gpuhook::prestart::PrestartError;
use gpuhook_request::limits::MAX_NAMES_SHOWN;
use gpuhook_request::{parse_id, resolve_id, validate_device_name, RequestError, RequestSource};

use crate::error::NodeError;
use crate::resolve::GenerateMissing;

/// Name of the gpuhook binary the generated hooks run, installed beside gpuhook-runtime.
pub const GPUHOOK_BINARY: &str = "gpuhook";

/// Lazily loaded node facts for one wrapper invocation.
#[derive(Debug)]
pub struct NodeState<'a> {
    config: &'a Config,
    kind: String,
    gpuhook_path: Option<PathBuf>,
    inventory: OnceCell<Result<Inventory, Arc<PrestartError>>>,
}

impl<'a> NodeState<'a> {
    pub fn new(config: &'a Config) -> Self {
        NodeState {
            config,
            kind: config.request_policy().cdi_kind,
            gpuhook_path: None,
            inventory: OnceCell::new(),
        }
    }

    /// Uses `path` as the gpuhook binary of generated hooks instead of the one beside this
    /// executable.
    pub fn with_gpuhook_path(mut self, path: PathBuf) -> Self {
        self.gpuhook_path = Some(path);
        self
    }

    /// The CDI kind the wrapper owns (`nvidia.com/gpu`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The inventory: the fresh cache `gpuhook cdi generate` saved, else live discovery.
    pub fn inventory(&self) -> Result<&Inventory, NodeError> {
        let loaded = self.inventory.get_or_init(|| {
            load_inventory(self.config)
                .map(|(inv, source)| {
                    tracing::debug!(?source, "inventory loaded");
                    inv
                })
                .map_err(Arc::new)
        });
        loaded
            .as_ref()
            .map_err(|e| NodeError::Inventory(Arc::clone(e)))
    }

    /// Options of the hooks in generated edits: the gpuhook binary beside gpuhook-runtime, with
    /// `GPUHOOK_CONFIG` passed on when set (the hooks read the same config).
    pub fn edit_options(&self) -> Result<EditOptions, NodeError> {
        let path = match &self.gpuhook_path {
            Some(p) => p.clone(),
            None => {
                let exe = std::env::current_exe()
                    .and_then(|e| e.canonicalize())
                    .map_err(NodeError::SelfPath)?;
                // `/proc/self/exe` canonicalized is an absolute file path: it has a parent.
                exe.parent().unwrap_or(&exe).join(GPUHOOK_BINARY)
            }
        };
        if !path.is_file() {
            return Err(NodeError::NoGpuhook { path });
        }
        let mut opts = EditOptions::new(path);
        if let Some(c) = std::env::var_os(CONFIG_ENV).filter(|c| !c.is_empty()) {
            let c = c.into_string().map_err(|_| NodeError::NotUtf8 {
                what: "GPUHOOK_CONFIG",
            })?;
            opts.hook_env.push(format!("{CONFIG_ENV}={c}"));
        }
        Ok(opts)
    }

    /// The spec `gpuhook cdi generate` would write for this node.
    pub fn generate_spec(&self) -> Result<Spec, NodeError> {
        let (vendor, class) = self.kind.split_once('/').ok_or_else(|| NodeError::Kind {
            kind: self.kind.clone(),
        })?;
        let mut opts = GenerateOptions::new(PathBuf::new());
        opts.vendor = vendor.into();
        opts.class = class.into();
        opts.edits = self.edit_options()?;
        Ok(gpuhook_cdi::generate(self.inventory()?, &opts)?)
    }

    /// The edits of a GPU container without GPUs (`NVIDIA_VISIBLE_DEVICES=none`): the common
    /// edits (driver files, control nodes, hooks) of the highest-priority spec file of our kind,
    /// else of the spec generated in memory.
    pub fn common_edits(&self) -> Result<ContainerEdits, NodeError> {
        let registry = Registry::load(&self.config.cdi_spec_dirs);
        let from_file = registry
            .specs
            .iter()
            .filter(|s| s.spec.kind == self.kind)
            .max_by_key(|s| s.priority);
        if let Some(s) = from_file {
            tracing::debug!(spec = %s.path.display(), "common edits from spec file");
            return Ok(s.spec.container_edits.clone());
        }
        if !self.config.runtime.generate_missing {
            return Err(NodeError::NoSpec {
                kind: self.kind.clone(),
                dirs: self.config.cdi_spec_dirs.clone(),
            });
        }
        Ok(self.generate_spec()?.container_edits)
    }
}

impl GenerateMissing for NodeState<'_> {
    fn generate(&self, missing: &[String]) -> Result<Vec<Spec>, NodeError> {
        let prefix = format!("{}=", self.kind);
        let ours: Vec<&str> = missing
            .iter()
            .filter_map(|n| n.strip_prefix(&prefix))
            .collect();
        // `generate-missing = false`: nothing is generated (the node is still asked to explain).
        if ours.is_empty() || !self.config.runtime.generate_missing {
            return Ok(Vec::new());
        }
        let mut spec = self.generate_spec()?;
        let inv = self.inventory()?;
        for name in ours {
            if spec.devices.iter().any(|d| d.name == name) || validate_device_name(name).is_err() {
                continue;
            }
            // An alias of a device (PCI bus id, UUID in another case, ...): its nodes.
            let Ok(id) = parse_id(name, RequestSource::CdiAnnotations) else {
                continue;
            };
            let Ok(dev) = resolve_id(&id, inv, RequestSource::CdiAnnotations) else {
                continue;
            };
            spec.devices.push(Device {
                name: name.to_string(),
                annotations: Default::default(),
                container_edits: ContainerEdits {
                    device_nodes: gpuhook_cdi::device_nodes(inv, &[dev])?,
                    ..Default::default()
                },
            });
        }
        tracing::info!(
            missing = %gpuhook_node::bounded::preview_list(missing, MAX_NAMES_SHOWN),
            "no spec file defines these devices; using a spec generated in memory"
        );
        Ok(vec![spec])
    }

    /// The node's devices (a bounded list), when a name of our kind does not resolve on it.
    fn explain(&self, unresolved: &[String]) -> Option<String> {
        let prefix = format!("{}=", self.kind);
        let inv = self.inventory().ok()?;
        unresolved
            .iter()
            .filter_map(|n| n.strip_prefix(&prefix))
            .find_map(|name| {
                let id = parse_id(name, RequestSource::CdiAnnotations).ok()?;
                match resolve_id(&id, inv, RequestSource::CdiAnnotations) {
                    Err(RequestError::UnknownDevice { hint, .. }) => Some(hint),
                    _ => None,
                }
            })
    }
}
