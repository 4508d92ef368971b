//! `assert`: is a config applied?

use crate::error::MigError;
use crate::select::select;
use crate::spec::MigConfigSpec;
use crate::state::GpuState;

/// Whether every GPU the config selects is in its desired state (mig-parted's `assert`: a GPU no
/// entry covers fails it too). `mode_only` checks MIG modes only.
pub fn assert_applied(
    gpus: &[GpuState],
    entries: &[MigConfigSpec],
    mode_only: bool,
) -> Result<Vec<String>, MigError> {
    let desired = select(entries, gpus)?;
    let mut problems = Vec::new();
    for g in gpus {
        let covered = entries.iter().any(|e| crate::select::entry_matches(e, g));
        if !covered {
            problems.push(format!(
                "GPU {} ({}): no entry of the config covers it",
                g.index, g.uuid
            ));
        }
    }
    for d in &desired {
        let Some(g) = gpus.iter().find(|g| g.index == d.index) else {
            continue;
        };
        if g.mig.enabled() != d.mig_enabled || g.mig.pending_change() {
            problems.push(format!(
                "GPU {} ({}): MIG mode is {}, wanted {}",
                g.index,
                g.uuid,
                mode_word(g.mig.enabled()),
                mode_word(d.mig_enabled)
            ));
            continue;
        }
        if !mode_only
            && d.mig_enabled
            && (g.layout() != d.layout() || g.instances.iter().any(|i| i.cis.is_empty()))
        {
            problems.push(format!(
                "GPU {} ({}): has {:?}, wanted {:?}",
                g.index,
                g.uuid,
                g.layout(),
                d.layout()
            ));
        }
    }
    Ok(problems)
}

fn mode_word(b: bool) -> &'static str {
    if b {
        "enabled"
    } else {
        "disabled"
    }
}
