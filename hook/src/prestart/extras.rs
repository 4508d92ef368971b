//! Device nodes that the GPUs' CDI edits do not cover, for every path alike: the MIG config and
//! monitor capabilities (`NVIDIA_MIG_CONFIG_DEVICES` / `NVIDIA_MIG_MONITOR_DEVICES=all`,
//! privileged containers only, checked by the request parser) and IMEX channels
//! (`NVIDIA_IMEX_CHANNELS`). The prestart hook turns them into its plan; the runtime wrapper
//! applies them as CDI edits beside the requested devices (cdi and jit-cdi modes), so no mode
//! drops them. The `/proc/driver/nvidia/capabilities/...` files are the host's procfs in every
//! container (runc refuses bind mounts inside `/proc`); only the prestart hook, which mounts
//! directly, also binds the MIG `access` files (as libnvidia-container).

use std::path::Path;

use gpuhook_cdi::DeviceNode;
use gpuhook_node::Inventory;

use crate::request::ImexChannels;

/// Why the extra nodes a request asks for cannot be given on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtrasError {
    #[error(
        "NVIDIA_MIG_{}_DEVICES=all asks for the MIG {name} capability, but this node's driver \
         exposes none (no MIG-capable GPU); drop the variable",
        name.to_uppercase()
    )]
    NoMigCapability { name: &'static str },
    #[error(
        "NVIDIA_IMEX_CHANNELS asks for IMEX channels, but this node's driver has no \
         nvidia-caps-imex-channels device; drop the variable"
    )]
    NoImexChannels,
    #[error("{path} is not UTF-8")]
    NotUtf8 { path: std::path::PathBuf },
}

/// The extra variables of a request.
#[derive(Debug, Clone, Copy)]
pub struct Extras<'a> {
    pub mig_config: bool,
    pub mig_monitor: bool,
    pub imex_channels: &'a ImexChannels,
}

impl Extras<'_> {
    /// Whether the request asks for any extra node.
    pub fn any(&self) -> bool {
        self.mig_config || self.mig_monitor || *self.imex_channels != ImexChannels::None
    }
}

fn char_node(
    inv: &Inventory,
    path: String,
    major: u32,
    minor: u32,
) -> Result<DeviceNode, ExtrasError> {
    let host = inv.host_dev_path(Path::new(&path));
    let host = host
        .to_str()
        .ok_or_else(|| ExtrasError::NotUtf8 { path: host.clone() })?
        .to_string();
    Ok(DeviceNode {
        path,
        host_path: Some(host),
        device_type: Some("c".into()),
        major: Some(major.into()),
        minor: Some(minor.into()),
        permissions: Some(gpuhook_cdi::edits::NODE_PERMISSIONS.into()),
        ..Default::default()
    })
}

/// The device nodes `extras` asks for on `inv`; an error names the variable and the fix when the
/// node lacks what it asks for.
pub fn extra_nodes(inv: &Inventory, extras: &Extras<'_>) -> Result<Vec<DeviceNode>, ExtrasError> {
    let mut out = Vec::new();
    for (wanted, name) in [
        (extras.mig_config, "config"),
        (extras.mig_monitor, "monitor"),
    ] {
        if !wanted {
            continue;
        }
        let (Some(caps), Some(major)) = (&inv.mig_caps, inv.majors.nvidia_caps) else {
            return Err(ExtrasError::NoMigCapability { name });
        };
        let minor = if name == "config" {
            caps.config_minor
        } else {
            caps.monitor_minor
        };
        out.push(char_node(
            inv,
            format!("/dev/nvidia-caps/nvidia-cap{minor}"),
            major,
            minor,
        )?);
    }
    let channels: Vec<u32> = match extras.imex_channels {
        ImexChannels::None => Vec::new(),
        ImexChannels::Ids(ids) => ids.clone(),
        ImexChannels::All => host_imex_channels(inv),
    };
    if !channels.is_empty() {
        let major = inv
            .majors
            .nvidia_caps_imex_channels
            .ok_or(ExtrasError::NoImexChannels)?;
        for c in channels {
            let path = format!("/dev/nvidia-caps-imex-channels/channel{c}");
            out.push(char_node(inv, path, major, c)?);
        }
    }
    Ok(out)
}

/// The channel ids under the host's `/dev/nvidia-caps-imex-channels`, sorted.
fn host_imex_channels(inv: &Inventory) -> Vec<u32> {
    let dir = inv.host_dev_path(Path::new("/dev/nvidia-caps-imex-channels"));
    let mut ids: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("channel")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}
