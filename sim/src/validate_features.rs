//! Rules for `[features]`: each optional part of a driver install must be one a real install can
//! have (uvm-tools comes with the UVM module, desktop files with the graphics libraries, a
//! development link names a library the profile installs).

use super::{is_lib_dir, issue, Issue};
use crate::library_table::{installs, LIBRARIES};
use crate::profile::NodeProfile;

pub(super) fn validate_features(p: &NodeProfile) -> Result<(), Issue> {
    let f = &p.features;
    if f.nvidia_uvm_tools && !f.nvidia_uvm {
        return Err(issue(
            "features.nvidia_uvm_tools",
            "/dev/nvidia-uvm-tools is created by the nvidia-uvm module: set nvidia_uvm = true or nvidia_uvm_tools = false",
        ));
    }
    for (name, on) in [
        ("gbm", f.gbm),
        ("xorg", f.xorg),
        ("application_profiles", f.application_profiles),
    ] {
        if on && !f.graphics {
            return Err(issue(
                format!("features.{name}"),
                "needs the graphics libraries: set graphics = true or turn it off",
            ));
        }
    }
    for (i, stem) in f.dev_links.iter().enumerate() {
        let field = format!("features.dev_links[{i}]");
        let Some(spec) = LIBRARIES.iter().find(|l| l.stem == stem) else {
            let known: Vec<&str> = LIBRARIES.iter().map(|l| l.stem).collect();
            return Err(issue(
                field,
                format!(
                    "{stem:?} is not a driver library; known: {}",
                    known.join(", ")
                ),
            ));
        };
        if !installs(p, spec) {
            return Err(issue(
                field,
                format!(
                    "{stem:?} is not installed by this profile (its capability {:?} is turned off)",
                    spec.capability
                ),
            ));
        }
        if f.dev_links[..i].contains(stem) {
            return Err(issue(field, format!("duplicate development link {stem:?}")));
        }
    }
    if let Some(dir) = &f.lib32_dir {
        if !is_lib_dir(dir) {
            return Err(issue(
                "features.lib32_dir",
                format!("{dir:?} must be an absolute, normalised directory, e.g. /usr/lib/i386-linux-gnu or /usr/lib"),
            ));
        }
        if dir.trim_end_matches('/') == p.lib_dir.trim_end_matches('/') {
            return Err(issue(
                "features.lib32_dir",
                format!("{dir:?} is lib_dir: 32-bit libraries need their own directory"),
            ));
        }
    }
    Ok(())
}
