//! The DCGM fields the exporter knows: each name (as `dcgm_fields.h` spells it, with DCGM's own
//! numeric id for reference) and the NVML call that answers it, following DCGM's
//! `DcgmCacheManager.cpp` (see `shared/reference/dcgm-exporter-facts.md` §5).
//!
//! A name is either served ([`Source`]), a label ([`LabelSource`]), or known but refused
//! ([`Refusal`]): profiling fields (`DCGM_FI_PROF_*`) need DCGM's profiling module, which reads
//! hardware counters NVML does not expose.

/// Where a served field's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    SmClock,
    MemClock,
    VideoClock,
    ClockEventReasons,
    GpuTemp,
    PowerUsage,
    TotalEnergy,
    PcieReplay,
    GpuUtil,
    MemCopyUtil,
    EncUtil,
    DecUtil,
    XidErrors,
    FbTotal,
    FbFree,
    FbUsed,
    FbReserved,
    /// `nvmlDeviceGetFieldValues` of these NVML field ids, summed.
    Nvml(&'static [u32]),
}

/// Which entities a served field has series for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The physical GPU only (one series per GPU, MIG or not).
    Gpu,
    /// A GPU without MIG, and each MIG GPU instance of a GPU with MIG (framebuffer, XID).
    Instance,
}

/// Label-type fields (`DCGM_FI_DRIVER_VERSION, label, ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelSource {
    DriverVersion,
    Brand,
    Name,
}

/// Why a known field is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `DCGM_FI_PROF_*`: DCGM's profiling module (hardware performance counters).
    Profiling,
    /// A DCGM-exporter computed field (`DCGM_EXP_*`) or one tied to DCGM itself.
    NeedsDcgm,
    /// vGPU licensing: only meaningful inside a vGPU guest.
    VgpuOnly,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Profiling => "needs DCGM profiling (hardware counters NVML does not expose)",
            Refusal::NeedsDcgm => "computed by DCGM or dcgm-exporter, not answerable from NVML",
            Refusal::VgpuOnly => "vGPU guest licensing, not served on bare-metal GPUs",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Profiling => "profiling",
            Refusal::NeedsDcgm => "dcgm",
            Refusal::VgpuOnly => "vgpu",
        }
    }
}

/// What a field name means to the exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Value(Source, Scope),
    Label(LabelSource),
    Refused(Refusal),
}

use Scope::{Gpu, Instance};
use Source::*;

/// Served value fields: (name, DCGM field id, source, scope).
pub const VALUES: &[(&str, u16, Source, Scope)] = &[
    ("DCGM_FI_DEV_SM_CLOCK", 100, SmClock, Gpu),
    ("DCGM_FI_DEV_MEM_CLOCK", 101, MemClock, Gpu),
    ("DCGM_FI_DEV_VIDEO_CLOCK", 102, VideoClock, Gpu),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        112,
        ClockEventReasons,
        Gpu,
    ),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        112,
        ClockEventReasons,
        Gpu,
    ),
    ("DCGM_FI_DEV_MEMORY_TEMP", 140, Nvml(&[82]), Gpu),
    ("DCGM_FI_DEV_GPU_TEMP", 150, GpuTemp, Gpu),
    ("DCGM_FI_DEV_POWER_USAGE", 155, PowerUsage, Gpu),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        156,
        TotalEnergy,
        Gpu,
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, PcieReplay, Gpu),
    ("DCGM_FI_DEV_GPU_UTIL", 203, GpuUtil, Gpu),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", 204, MemCopyUtil, Gpu),
    ("DCGM_FI_DEV_ENC_UTIL", 206, EncUtil, Gpu),
    ("DCGM_FI_DEV_DEC_UTIL", 207, DecUtil, Gpu),
    ("DCGM_FI_DEV_XID_ERRORS", 230, XidErrors, Instance),
    ("DCGM_FI_DEV_POWER_VIOLATION", 240, Nvml(&[74]), Gpu),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", 241, Nvml(&[75]), Gpu),
    ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", 242, Nvml(&[76]), Gpu),
    ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", 243, Nvml(&[77]), Gpu),
    ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", 244, Nvml(&[78]), Gpu),
    ("DCGM_FI_DEV_RELIABILITY_VIOLATION", 245, Nvml(&[79]), Gpu),
    ("DCGM_FI_DEV_FB_TOTAL", 250, FbTotal, Instance),
    ("DCGM_FI_DEV_FB_FREE", 251, FbFree, Instance),
    ("DCGM_FI_DEV_FB_USED", 252, FbUsed, Instance),
    ("DCGM_FI_DEV_FB_RESERVED", 253, FbReserved, Instance),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310, Nvml(&[3]), Gpu),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311, Nvml(&[4]), Gpu),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312, Nvml(&[5]), Gpu),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313, Nvml(&[6]), Gpu),
    ("DCGM_FI_DEV_RETIRED_SBE", 390, Nvml(&[29]), Gpu),
    ("DCGM_FI_DEV_RETIRED_DBE", 391, Nvml(&[30]), Gpu),
    ("DCGM_FI_DEV_RETIRED_PENDING", 392, Nvml(&[31]), Gpu),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        393,
        Nvml(&[143]),
        Gpu,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        394,
        Nvml(&[142]),
        Gpu,
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, Nvml(&[145]), Gpu),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        409,
        Nvml(&[38]),
        Gpu,
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        419,
        Nvml(&[45]),
        Gpu,
    ),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        429,
        Nvml(&[52]),
        Gpu,
    ),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        439,
        Nvml(&[59]),
        Gpu,
    ),
    // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX (DCGM's source since r450).
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        449,
        Nvml(&[138, 139]),
        Gpu,
    ),
];

/// Served label fields.
pub const LABELS: &[(&str, LabelSource)] = &[
    ("DCGM_FI_DRIVER_VERSION", LabelSource::DriverVersion),
    ("DCGM_FI_DEV_BRAND", LabelSource::Brand),
    ("DCGM_FI_DEV_NAME", LabelSource::Name),
];

/// Known fields that are refused (besides every `DCGM_FI_PROF_*` and `DCGM_EXP_*`).
pub const REFUSED: &[(&str, Refusal)] = &[
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Refusal::VgpuOnly),
    ("DCGM_FI_NVML_VERSION", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_SERIAL", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_OEM_INFOROM_VER", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_ECC_INFOROM_VER", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_POWER_INFOROM_VER", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_INFOROM_IMAGE_VER", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_VBIOS_VERSION", Refusal::NeedsDcgm),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", Refusal::NeedsDcgm),
];

/// What `name` means; `None` for a name no DCGM version defines as far as we know.
pub fn lookup(name: &str) -> Option<Kind> {
    if let Some((_, _, src, scope)) = VALUES.iter().find(|(n, ..)| *n == name) {
        return Some(Kind::Value(*src, *scope));
    }
    if let Some((_, l)) = LABELS.iter().find(|(n, _)| *n == name) {
        return Some(Kind::Label(*l));
    }
    if let Some((_, r)) = REFUSED.iter().find(|(n, _)| *n == name) {
        return Some(Kind::Refused(*r));
    }
    if is_name(name, "DCGM_FI_PROF_") {
        return Some(Kind::Refused(Refusal::Profiling));
    }
    if is_name(name, "DCGM_EXP_") {
        return Some(Kind::Refused(Refusal::NeedsDcgm));
    }
    None
}

fn is_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// True for a DCGM value that prints as a double (`%f`); all others are integers.
pub fn is_double(src: Source) -> bool {
    matches!(src, Source::PowerUsage)
}
