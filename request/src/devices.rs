//! The device-id grammar of `NVIDIA_VISIBLE_DEVICES` (also used for volume-mount ids and the name
//! part of `nvidia.com/gpu=<name>`).
//!
//! Parsing is purely syntactic: whether an id names a device of this node is decided later by
//! [`super::resolve`], so that the runtime wrapper can turn ids into CDI names without discovery.

use std::fmt;

use super::cdi_name::{validate_device_name, QualifiedName};
use super::error::{preview, RequestError, RequestSource};
use super::limits::{self, MAX_ID_ENTRIES, MAX_ID_LIST_BYTES};

/// One requested device, as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceId {
    /// NVML index `N`.
    Index(u32),
    /// `GPU-<uuid>`, as written (matched case-insensitively).
    GpuUuid(String),
    /// PCI bus id, normalised to `%08x:%02x:%02x.%x` (`00000000:18:00.0`).
    PciBusId(String),
    /// `MIG-<uuid>`, as written (matched case-insensitively).
    MigUuid(String),
    /// `MIG-GPU-<gpu-uuid>/<gi>/<ci>` (pre-R470 drivers); `gpu_uuid` is `GPU-…`.
    MigLegacy { gpu_uuid: String, gi: u32, ci: u32 },
    /// `N:M`: MIG device `M` (NVML MIG enumeration order) of GPU `N`.
    MigIndex { gpu: u32, mig: u32 },
    /// A fully qualified CDI name (`nvidia.com/gpu=0`).
    Cdi(QualifiedName),
    /// Any other CDI-style device name (`gpu0`, `mig0:1`, a custom name).
    Name(String),
}

impl DeviceId {
    /// The CDI name the runtime wrapper asks for: qualified names as they are, bare ids as
    /// `<kind>=<id>`. `None` for `MIG-GPU-…/<gi>/<ci>`, which cannot be a CDI device name.
    pub fn to_cdi_name(&self, kind: &str) -> Option<String> {
        match self {
            DeviceId::Cdi(q) => Some(q.to_string()),
            DeviceId::MigLegacy { .. } => None,
            other => Some(format!("{kind}={other}")),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::GpuUuid(s)
            | DeviceId::PciBusId(s)
            | DeviceId::MigUuid(s)
            | DeviceId::Name(s) => f.write_str(s),
            DeviceId::MigLegacy { gpu_uuid, gi, ci } => write!(f, "MIG-{gpu_uuid}/{gi}/{ci}"),
            DeviceId::MigIndex { gpu, mig } => write!(f, "{gpu}:{mig}"),
            DeviceId::Cdi(q) => write!(f, "{q}"),
        }
    }
}

/// What a GPU container asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    /// `none`: driver files and control nodes, no GPU.
    None,
    /// `all`: every non-MIG GPU and every MIG device.
    All,
    /// These devices, in request order (may still contain `nvidia.com/gpu=all`).
    Ids(Vec<DeviceId>),
}

impl DeviceSelection {
    /// The CDI names the runtime wrapper asks for in `cdi` mode: `all` → `<kind>=all`, `none` →
    /// nothing, ids via [`DeviceId::to_cdi_name`]. `MIG-GPU-<uuid>/<gi>/<ci>` has no CDI name: error.
    pub fn to_cdi_names(
        &self,
        kind: &str,
        origin: RequestSource,
    ) -> Result<Vec<String>, RequestError> {
        match self {
            DeviceSelection::None => Ok(Vec::new()),
            DeviceSelection::All => Ok(vec![format!("{kind}=all")]),
            DeviceSelection::Ids(ids) => ids
                .iter()
                .map(|id| {
                    id.to_cdi_name(kind)
                        .ok_or_else(|| RequestError::InvalidDeviceId {
                            id: preview(&id.to_string()),
                            origin,
                            reason:
                                "MIG-GPU-<uuid>/<gi>/<ci> has no CDI name; use MIG-<uuid> or N:M"
                                    .into(),
                        })
                })
                .collect(),
        }
    }
}

/// Result of parsing one id list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListOutcome {
    /// No entries (after trimming): not a GPU request.
    Empty,
    /// `void` somewhere: not a GPU container.
    Void,
    Selection(DeviceSelection),
}

/// Parses a list of raw entries (already split; trimmed and emptied here). `void` anywhere wins,
/// then `all` anywhere; `none` entries select nothing.
pub(crate) fn parse_entries<'a>(
    entries: impl IntoIterator<Item = &'a str>,
    origin: RequestSource,
) -> Result<ListOutcome, RequestError> {
    let mut raw = Vec::new();
    let mut total = 0usize;
    for e in entries.into_iter().map(str::trim).filter(|e| !e.is_empty()) {
        total += e.len();
        if raw.len() == MAX_ID_ENTRIES || total > MAX_ID_LIST_BYTES {
            return Err(RequestError::limit(
                format!("the device list of {origin}"),
                format!(
                    "{MAX_ID_ENTRIES} entries and {}",
                    limits::bytes(MAX_ID_LIST_BYTES)
                ),
            ));
        }
        raw.push(e);
    }
    if raw.is_empty() {
        return Ok(ListOutcome::Empty);
    }
    if raw.iter().any(|e| e.eq_ignore_ascii_case("void")) {
        return Ok(ListOutcome::Void);
    }
    let mut ids = Vec::with_capacity(raw.len());
    let mut all = false;
    for e in raw {
        if e.eq_ignore_ascii_case("all") {
            all = true;
        } else if !e.eq_ignore_ascii_case("none") {
            ids.push(parse_id(e, origin)?);
        }
    }
    Ok(ListOutcome::Selection(match (all, ids.is_empty()) {
        (true, _) => DeviceSelection::All,
        (false, true) => DeviceSelection::None,
        (false, false) => DeviceSelection::Ids(ids),
    }))
}

/// Parses a comma-separated `NVIDIA_VISIBLE_DEVICES` value.
pub(crate) fn parse_visible_devices(
    value: &str,
    origin: RequestSource,
) -> Result<ListOutcome, RequestError> {
    if value.len() > MAX_ID_LIST_BYTES {
        return Err(RequestError::limit(
            format!("NVIDIA_VISIBLE_DEVICES ({} bytes)", value.len()),
            limits::bytes(MAX_ID_LIST_BYTES),
        ));
    }
    parse_entries(value.split(','), origin)
}

/// Parses one trimmed, non-keyword entry.
pub fn parse_id(id: &str, origin: RequestSource) -> Result<DeviceId, RequestError> {
    let invalid = |reason: String| RequestError::InvalidDeviceId {
        id: preview(id),
        origin,
        reason,
    };
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(invalid(format!("contains the control character {c:?}")));
    }
    if id.split('/').any(|seg| seg == ".." || seg == ".") {
        return Err(invalid("contains a '.' or '..' path component".into()));
    }
    if let Some(c) = id
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '=' | '-')))
    {
        return Err(invalid(format!("contains {c:?}, which no device id uses")));
    }
    if id.contains('=') {
        return QualifiedName::parse_reason(id)
            .map(DeviceId::Cdi)
            .map_err(|reason| RequestError::InvalidCdiName {
                name: preview(id),
                origin,
                reason: reason.to_string(),
            });
    }
    if id.bytes().all(|b| b.is_ascii_digit()) {
        return id
            .parse()
            .map(DeviceId::Index)
            .map_err(|_| invalid("index is too large".into()));
    }
    if let Some(rest) = strip_prefix_ci(id, "MIG-GPU-") {
        return parse_legacy_mig(rest).map_err(|reason| invalid(reason.into()));
    }
    if id.contains('/') {
        return Err(invalid(
            "'/' is only valid in MIG-GPU-<uuid>/<gi>/<ci> and in CDI names".into(),
        ));
    }
    for (prefix, make) in [
        ("MIG-", DeviceId::MigUuid as fn(String) -> DeviceId),
        ("GPU-", DeviceId::GpuUuid),
    ] {
        if let Some(rest) = strip_prefix_ci(id, prefix) {
            return match validate_device_name(rest) {
                Ok(()) => Ok(make(id.to_string())),
                Err(_) => Err(invalid(format!("expected {prefix}<uuid>"))),
            };
        }
    }
    if let Some(pci) = normalize_pci_bus_id(id) {
        return Ok(DeviceId::PciBusId(pci));
    }
    if let Some((gpu, mig)) = id.split_once(':') {
        if let (Some(gpu), Some(mig)) = (decimal(gpu), decimal(mig)) {
            return Ok(DeviceId::MigIndex { gpu, mig });
        }
    }
    validate_device_name(id).map_err(|e| invalid(e.to_string()))?;
    Ok(DeviceId::Name(id.to_string()))
}

/// `<gpu-uuid>/<gi>/<ci>` after `MIG-GPU-` (the legacy MIG device id).
fn parse_legacy_mig(rest: &str) -> Result<DeviceId, &'static str> {
    let mut parts = rest.split('/');
    let (Some(uuid), Some(gi), Some(ci), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("expected MIG-GPU-<gpu-uuid>/<gi>/<ci>");
    };
    let num = |s: &str| {
        s.parse::<u32>()
            .ok()
            .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
    };
    match (uuid.is_empty(), num(gi), num(ci)) {
        (false, Some(gi), Some(ci)) => Ok(DeviceId::MigLegacy {
            gpu_uuid: format!("GPU-{uuid}"),
            gi,
            ci,
        }),
        _ => Err("expected MIG-GPU-<gpu-uuid>/<gi>/<ci> with decimal gi and ci"),
    }
}

fn decimal(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Normalises a PCI bus id (`[domain:]bus:device.function`, hex) to `%08x:%02x:%02x.%x`.
/// Accepts `0000:18:00.0`, `00000000:18:00.0` and `18:00.0`.
pub fn normalize_pci_bus_id(s: &str) -> Option<String> {
    let (head, function) = s.rsplit_once('.')?;
    let hex = |p: &str, max_len: usize| -> Option<u32> {
        if p.is_empty() || p.len() > max_len || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(p, 16).ok()
    };
    let parts: Vec<&str> = head.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [bus, device] => (0, hex(bus, 2)?, hex(device, 2)?),
        [domain, bus, device] => (hex(domain, 8)?, hex(bus, 2)?, hex(device, 2)?),
        _ => return None,
    };
    let function = hex(function, 1)?;
    if device > 0x1f || function > 7 {
        return None;
    }
    Some(format!("{domain:08x}:{bus:02x}:{device:02x}.{function:x}"))
}

#[cfg(test)]
#[path = "devices_tests.rs"]
mod tests;
