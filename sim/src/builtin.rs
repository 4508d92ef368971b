//! The reference profiles, compiled in so that tests and the CLI need no file paths.
//!
//! They cover the shapes a GPU node takes in the field: a single cloud GPU (`t4`), an RPM-style
//! library layout (`l20`), a multi-GPU NVSwitch box whose device minors differ from NVML indexes
//! (`dgx-h100`), and MIG in mixed and single layouts on three GPU models. The second set adds the
//! variation a real fleet has: a headless node without `nvidia-modeset`/`nvidia-uvm-tools`
//! (`l20-minimal`), an RPM node without `.so` links whose NVML indexes differ from its device
//! minors (`rhel-a100`), MIG mode on with no instances (`h100-mig-empty`), and a full desktop
//! install with i386 libraries, GBM, X.org files and application profiles (`workstation-full`).

const BUILTIN: &[(&str, &str)] = &[
    ("t4", include_str!("../profiles/t4.toml")),
    ("l20", include_str!("../profiles/l20.toml")),
    ("dgx-h100", include_str!("../profiles/dgx-h100.toml")),
    (
        "a100-mig-mixed",
        include_str!("../profiles/a100-mig-mixed.toml"),
    ),
    ("h100-mig", include_str!("../profiles/h100-mig.toml")),
    ("h20-mig", include_str!("../profiles/h20-mig.toml")),
    ("l20-minimal", include_str!("../profiles/l20-minimal.toml")),
    ("rhel-a100", include_str!("../profiles/rhel-a100.toml")),
    (
        "h100-mig-empty",
        include_str!("../profiles/h100-mig-empty.toml"),
    ),
    (
        "workstation-full",
        include_str!("../profiles/workstation-full.toml"),
    ),
];

/// TOML text of a built-in profile.
pub fn text(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Names of all built-in profiles, in a stable order.
pub fn names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use crate::profile::NodeProfile;

    #[test]
    fn every_builtin_parses_validates_and_is_named_like_its_file() {
        for name in super::names() {
            let p = NodeProfile::builtin(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.name, name);
            assert!(!p.description.is_empty(), "{name} has a description");
            let again = NodeProfile::from_toml_str(&p.to_toml()).unwrap();
            assert_eq!(again, p, "{name} round-trips through TOML");
        }
    }

    #[test]
    fn builtins_have_the_reference_facts() {
        let t4 = NodeProfile::builtin("t4").unwrap();
        assert_eq!((t4.gpus.len(), t4.gpus[0].name.as_str()), (1, "Tesla T4"));
        assert_eq!(t4.gpus[0].memory_mib, 15360);
        assert_eq!(t4.gpus[0].brand, "tesla");
        assert_eq!(NodeProfile::builtin("l20").unwrap().lib_dir, "/usr/lib64");
        let dgx = NodeProfile::builtin("dgx-h100").unwrap();
        assert_eq!(dgx.gpus.len(), 8);
        assert!(dgx.features.fabricmanager_socket);
        assert!(dgx.gpus.iter().any(|g| g.minor != g.index));
        let a100 = NodeProfile::builtin("a100-mig-mixed").unwrap();
        let layout: Vec<Vec<&str>> = a100
            .gpus
            .iter()
            .map(|g| g.mig_devices.iter().map(|m| m.profile.as_str()).collect())
            .collect();
        assert_eq!(layout[0], ["3g.40gb", "2g.20gb", "2g.20gb"]);
        assert_eq!(layout[1], ["1g.10gb"; 7]);
        for (name, profile) in [("h100-mig", "1g.10gb"), ("h20-mig", "1g.12gb")] {
            let p = NodeProfile::builtin(name).unwrap();
            assert_eq!(p.gpus[0].mig_devices.len(), 7);
            assert!(p.gpus[0].mig_devices.iter().all(|m| m.profile == profile));
        }
    }

    #[test]
    fn realism_profiles_have_their_variation() {
        let minimal = NodeProfile::builtin("l20-minimal").unwrap();
        let f = &minimal.features;
        assert!(!f.nvidia_modeset && !f.nvidia_uvm_tools && f.nvidia_uvm);
        let rhel = NodeProfile::builtin("rhel-a100").unwrap();
        assert_eq!(rhel.lib_dir, "/usr/lib64");
        assert!(rhel.features.dev_links.is_empty());
        assert!(rhel.gpus.iter().all(|g| g.index != g.minor));
        let ws = NodeProfile::builtin("workstation-full").unwrap();
        let f = &ws.features;
        assert_eq!(f.lib32_dir.as_deref(), Some("/usr/lib/i386-linux-gnu"));
        assert!(f.gbm && f.xorg && f.application_profiles && f.graphics);
        for stem in [
            "libcuda.so",
            "libnvidia-ml.so",
            "libnvcuvid.so",
            "libnvidia-encode.so",
            "libnvidia-opencl.so",
        ] {
            assert!(f.dev_links.iter().any(|d| d == stem), "{stem}");
        }
        // Existing profiles keep the default set of development links.
        let t4 = NodeProfile::builtin("t4").unwrap();
        assert_eq!(t4.features.dev_links, crate::profile::DEFAULT_DEV_LINKS);
        assert!(t4.features.nvidia_uvm_tools && t4.features.lib32_dir.is_none());
    }

    #[test]
    fn unknown_builtin_lists_the_known_ones() {
        let err = NodeProfile::builtin("v100").unwrap_err().to_string();
        assert!(
            err.contains("v100") && err.contains("a100-mig-mixed"),
            "{err}"
        );
    }
}
