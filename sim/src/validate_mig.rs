//! MIG rules: the layout must be one the GPU model can make, and the cap minors must be the
//! ones the driver would assign (see [`crate::profile::gi_cap_minor`]).

use std::collections::HashMap;

use super::is_uuid;
use super::{issue, mig_profiles_for, mig_slices, unique, Issue};
use crate::profile::{
    ci_cap_minor, gi_cap_minor, GpuProfile, MigDeviceProfile, MIG_MAX_COMPUTE_INSTANCES,
    MIG_MAX_GPU_INSTANCES,
};

pub(super) fn validate_mig(
    i: usize,
    g: &GpuProfile,
    seen: &mut HashMap<String, String>,
) -> Result<(), Issue> {
    if !g.mig_mode {
        if !g.mig_devices.is_empty() {
            return Err(issue(
                format!("gpus[{i}].mig_devices"),
                "MIG devices on a GPU without mig_mode = true (enable MIG mode or remove them)",
            ));
        }
        return Ok(());
    }
    let Some(allowed) = mig_profiles_for(&g.name) else {
        return Err(issue(
            format!("gpus[{i}].mig_mode"),
            format!(
                "GPU model {:?} has no MIG support we know of (A100 80GB, H100 80GB, H20)",
                g.name
            ),
        ));
    };
    let mut slices_by_gi: HashMap<u32, u32> = HashMap::new();
    for (j, m) in g.mig_devices.iter().enumerate() {
        let f = |name: &str| format!("gpus[{i}].mig_devices[{j}].{name}");
        mig_device(g, m, allowed, &f, seen)?;
        let slices = mig_slices(&m.profile).unwrap_or(0);
        if let Some(old) = slices_by_gi.insert(m.gi_id, slices) {
            if old != slices {
                return Err(issue(
                    f("profile"),
                    format!("GPU instance {} already has a different profile", m.gi_id),
                ));
            }
        }
        cap_minors(g, m, &f, seen)?;
    }
    let total: u32 = slices_by_gi.values().sum();
    if total > 7 {
        return Err(issue(
            format!("gpus[{i}].mig_devices"),
            format!("GPU instances use {total} compute slices, but a GPU has only 7"),
        ));
    }
    Ok(())
}

/// The rules of one MIG device on its own: profile, ids, UUID, memory.
fn mig_device(
    g: &GpuProfile,
    m: &MigDeviceProfile,
    allowed: &[&str],
    f: &dyn Fn(&str) -> String,
    seen: &mut HashMap<String, String>,
) -> Result<(), Issue> {
    if !allowed.contains(&m.profile.as_str()) {
        return Err(issue(
            f("profile"),
            format!(
                "unknown MIG profile {:?} for {}: supported are {}",
                m.profile,
                g.name,
                allowed.join(", ")
            ),
        ));
    }
    if m.gi_id >= MIG_MAX_GPU_INSTANCES {
        return Err(issue(
            f("gi_id"),
            format!("{} is out of range 0..{MIG_MAX_GPU_INSTANCES}", m.gi_id),
        ));
    }
    if m.ci_id >= MIG_MAX_COMPUTE_INSTANCES {
        return Err(issue(
            f("ci_id"),
            format!("{} is out of range 0..{MIG_MAX_COMPUTE_INSTANCES}", m.ci_id),
        ));
    }
    let pair = format!("gi/ci:{}/{}/{}", g.minor, m.gi_id, m.ci_id);
    unique(
        seen,
        pair,
        f("ci_id"),
        "GPU/compute instance pair",
        &format!("gi {} ci {}", m.gi_id, m.ci_id),
    )?;
    if !is_uuid(&m.uuid, "MIG-") {
        return Err(issue(
            f("uuid"),
            format!(
                "{:?} is not a MIG UUID like MIG-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",
                m.uuid
            ),
        ));
    }
    unique(
        seen,
        format!("uuid:{}", m.uuid),
        f("uuid"),
        "MIG UUID",
        &m.uuid,
    )?;
    if m.memory_mib == 0 || m.memory_mib > g.memory_mib {
        return Err(issue(
            f("memory_mib"),
            format!(
                "{} must be in 1..={} (the GPU's memory)",
                m.memory_mib, g.memory_mib
            ),
        ));
    }
    Ok(())
}

/// The device's cap minors: each owned by one GI or CI, and numbered as the driver does.
fn cap_minors(
    g: &GpuProfile,
    m: &MigDeviceProfile,
    f: &dyn Fn(&str) -> String,
    seen: &mut HashMap<String, String>,
) -> Result<(), Issue> {
    // The GI access minor is shared by the CIs of one GI: key it by owner, not by field.
    let gi_owner = format!("gpu{} gi{}", g.minor, m.gi_id);
    cap_minor(seen, m.gi_cap_minor, &gi_owner, f("gi_cap_minor"))?;
    cap_minor(
        seen,
        m.ci_cap_minor,
        &format!("{gi_owner} ci{}", m.ci_id),
        f("ci_cap_minor"),
    )?;
    let (want_gi, want_ci) = (
        gi_cap_minor(g.minor, m.gi_id),
        ci_cap_minor(g.minor, m.gi_id, m.ci_id),
    );
    if m.gi_cap_minor != want_gi {
        return Err(issue(f("gi_cap_minor"), format!(
            "{} does not match the driver's numbering for gpu{}/gi{}/access: expected {want_gi} (3 + minor*135 + gi*9)",
            m.gi_cap_minor, g.minor, m.gi_id)));
    }
    if m.ci_cap_minor != want_ci {
        return Err(issue(f("ci_cap_minor"), format!(
            "{} does not match the driver's numbering for gpu{}/gi{}/ci{}/access: expected {want_ci} (gi access minor + 1 + ci)",
            m.ci_cap_minor, g.minor, m.gi_id, m.ci_id)));
    }
    Ok(())
}

/// A cap minor may be used by one owner (GI or CI) only; several devices of one GI share it.
fn cap_minor(
    seen: &mut HashMap<String, String>,
    minor: u32,
    owner: &str,
    field: String,
) -> Result<(), Issue> {
    let owner_key = format!("capowner:{minor}");
    match seen.get(&owner_key) {
        Some(o) if o == owner => Ok(()),
        Some(o) => Err(issue(
            field,
            format!("duplicate cap minor {minor} (already used by {o})"),
        )),
        None => {
            seen.insert(owner_key, owner.to_string());
            Ok(())
        }
    }
}
