use super::*;
use crate::testutil::{can_ldconfig, FakeRoot};

const V: &str = "570.158.01";
const LIB: &str = "/usr/lib/x86_64-linux-gnu";

#[test]
fn classify_by_prefix() {
    assert_eq!(
        classify("libcuda.so.1"),
        Some((Capability::Compute, "libcuda.so"))
    );
    assert_eq!(
        classify("libcuda.so"),
        Some((Capability::Compute, "libcuda.so"))
    );
    assert_eq!(classify("libcudart.so.12"), None);
    assert_eq!(
        classify("libnvidia-pkcs11-openssl3.so.570"),
        Some((Capability::Compute, "libnvidia-pkcs11-openssl3.so"))
    );
    assert_eq!(
        classify("libnvidia-ml.so.1"),
        Some((Capability::Utility, "libnvidia-ml.so"))
    );
    assert_eq!(
        classify("libGLX_nvidia.so.0"),
        Some((Capability::Graphics, "libGLX_nvidia.so"))
    );
    assert_eq!(classify("libGLX_mesa.so.0"), None);
}

#[test]
fn driver_version_filter() {
    assert!(matches_driver_version("libcuda.so.570.158.01", V));
    assert!(!matches_driver_version("libcuda.so.535.54.03", V));
    assert!(
        matches_driver_version("libnvidia-nscq.so.2", V),
        "soname-only file"
    );
    assert!(
        matches_driver_version("libcuda.so.535.54.03", ""),
        "unknown version keeps all"
    );
}

#[test]
fn symlinks_for_a_container() {
    let lib = |cap, name: &str, soname: Option<&str>| DriverLibrary {
        capability: cap,
        path: Path::new(LIB).join(name),
        soname: soname.map(str::to_string),
    };
    let links = container_symlinks(&[
        lib(
            Capability::Compute,
            "libcuda.so.570.158.01",
            Some("libcuda.so.1"),
        ),
        lib(
            Capability::Graphics,
            "libGLX_nvidia.so.570.158.01",
            Some("libGLX_nvidia.so.0"),
        ),
        lib(
            Capability::Video,
            "libnvidia-opticalflow.so.570.158.01",
            Some("libnvidia-opticalflow.so.1"),
        ),
        lib(
            Capability::Utility,
            "libnvidia-nscq.so.2",
            Some("libnvidia-nscq.so.2"),
        ),
    ]);
    let pairs: Vec<(String, String)> = links
        .iter()
        .map(|l| {
            (
                l.link.file_name().unwrap().to_string_lossy().into(),
                l.target.file_name().unwrap().to_string_lossy().into(),
            )
        })
        .collect();
    let want = [
        ("libcuda.so.1", "libcuda.so.570.158.01"),
        ("libcuda.so", "libcuda.so.1"),
        ("libGLX_nvidia.so.0", "libGLX_nvidia.so.570.158.01"),
        ("libGLX_indirect.so.0", "libGLX_nvidia.so.570.158.01"),
        (
            "libnvidia-opticalflow.so.1",
            "libnvidia-opticalflow.so.570.158.01",
        ),
        ("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
    ];
    assert_eq!(pairs, want.map(|(a, b)| (a.to_string(), b.to_string())));
    assert!(links
        .iter()
        .all(|l| l.link.parent() == Some(Path::new(LIB))
            && l.target.parent() == Some(Path::new(LIB))));
    assert_eq!(links[1].capability, Capability::Compute);
}

fn fake_driver() -> FakeRoot {
    let mut root = FakeRoot::new();
    for (file, soname) in [
        (format!("libcuda.so.{V}"), "libcuda.so.1"),
        (format!("libnvidia-ml.so.{V}"), "libnvidia-ml.so.1"),
        (
            format!("libnvidia-ptxjitcompiler.so.{V}"),
            "libnvidia-ptxjitcompiler.so.1",
        ),
        (format!("libGLX_nvidia.so.{V}"), "libGLX_nvidia.so.0"),
        (format!("libnvidia-encode.so.{V}"), "libnvidia-encode.so.1"),
        ("libnvidia-nscq.so.2".to_string(), "libnvidia-nscq.so.2"),
        ("libcudart.so.12.4.1".to_string(), "libcudart.so.12"),
    ] {
        root.lib(LIB, &file, soname, false, soname.starts_with("libcuda.so"));
    }
    // A stale library of an older driver in another folder.
    root.lib(
        "/opt/old",
        "libnvidia-cfg.so.535.54.03",
        "libnvidia-cfg.so.1",
        false,
        false,
    );
    root.lib(
        "/usr/lib32",
        &format!("libcuda.so.{V}"),
        "libcuda.so.1",
        true,
        false,
    );
    root.ldconfig("new");
    root.symlink("usr/bin", "/bin");
    root.write("/usr/bin/nvidia-smi", "");
    root.write("/usr/bin/nvidia-cuda-mps-control", "");
    root.write(&format!("/lib/firmware/nvidia/{V}/gsp_ga10x.bin"), "");
    root.write(&format!("/lib/firmware/nvidia/{V}/gsp_tu10x.bin"), "");
    root.write(&format!("/lib/firmware/nvidia/{V}/README"), "");
    root.write("/run/nvidia-persistenced/socket", "");
    root.write("/usr/share/vulkan/icd.d/nvidia_icd.json", "{}");
    root.write(
        "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        "{}",
    );
    root.write("/usr/share/egl/egl_external_platform.d/10_mesa.json", "{}");
    root
}

/// The files of [`fake_driver`]; `None` where ldconfig cannot run.
fn fake_driver_files() -> Option<DriverFiles> {
    if !can_ldconfig() {
        return None;
    }
    let root = fake_driver();
    let cache = LdCache::load(&root.path("/etc/ld.so.cache")).unwrap();
    let mut warnings = Vec::new();
    let files = discover_files(
        &mut RootResolver::new(root.root()),
        Some(&cache),
        V,
        &mut warnings,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    Some(files)
}

#[cfg(target_arch = "x86_64")]
#[test]
fn discovers_the_libraries_of_a_fake_driver_root() {
    let Some(files) = fake_driver_files() else {
        return;
    };
    let libs: Vec<(Capability, String, Option<&str>)> = files
        .libraries
        .iter()
        .map(|l| {
            (
                l.capability,
                l.path.display().to_string(),
                l.soname.as_deref(),
            )
        })
        .collect();
    let p = |n: &str| format!("{LIB}/{n}");
    let want = vec![
        (
            Capability::Graphics,
            p(&format!("libGLX_nvidia.so.{V}")),
            Some("libGLX_nvidia.so.0"),
        ),
        (
            Capability::Compute,
            p(&format!("libcuda.so.{V}")),
            Some("libcuda.so.1"),
        ),
        (
            Capability::Video,
            p(&format!("libnvidia-encode.so.{V}")),
            Some("libnvidia-encode.so.1"),
        ),
        (
            Capability::Utility,
            p(&format!("libnvidia-ml.so.{V}")),
            Some("libnvidia-ml.so.1"),
        ),
        (
            Capability::Utility,
            p("libnvidia-nscq.so.2"),
            Some("libnvidia-nscq.so.2"),
        ),
        (
            Capability::Compute,
            p(&format!("libnvidia-ptxjitcompiler.so.{V}")),
            Some("libnvidia-ptxjitcompiler.so.1"),
        ),
        (
            Capability::Compat32,
            format!("/usr/lib32/libcuda.so.{V}"),
            Some("libcuda.so.1"),
        ),
    ];
    assert_eq!(libs, want);
    assert_eq!(
        files.library_dirs,
        vec![PathBuf::from(LIB), PathBuf::from("/usr/lib32")]
    );
    assert!(files
        .symlinks
        .iter()
        .any(|l| l.link == Path::new("/usr/lib32/libcuda.so")
            && l.capability == Capability::Compat32));
    assert!(files
        .symlinks
        .iter()
        .any(|l| l.link == Path::new(LIB).join("libGLX_indirect.so.0")));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn discovers_the_other_files_of_a_fake_driver_root() {
    let Some(files) = fake_driver_files() else {
        return;
    };
    assert_eq!(
        files.binaries,
        vec![
            DriverFile {
                capability: Capability::Utility,
                path: "/usr/bin/nvidia-smi".into()
            },
            DriverFile {
                capability: Capability::Compute,
                path: "/usr/bin/nvidia-cuda-mps-control".into()
            },
        ]
    );
    assert_eq!(
        files.firmware,
        vec![
            PathBuf::from(format!("/lib/firmware/nvidia/{V}/gsp_ga10x.bin")),
            PathBuf::from(format!("/lib/firmware/nvidia/{V}/gsp_tu10x.bin"))
        ]
    );
    assert_eq!(
        files.ipc,
        vec![DriverFile {
            capability: Capability::Utility,
            path: "/run/nvidia-persistenced/socket".into()
        }]
    );
    let configs: Vec<_> = files
        .config_files
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    assert_eq!(
        configs,
        [
            "/usr/share/vulkan/icd.d/nvidia_icd.json",
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json"
        ]
    );
}

#[test]
fn without_a_cache_the_standard_folders_are_scanned() {
    let root = FakeRoot::new();
    root.write(&format!("{LIB}/libcuda.so.{V}"), "");
    root.symlink(&format!("libcuda.so.{V}"), &format!("{LIB}/libcuda.so.1"));
    root.write(&format!("{LIB}/libnvidia-ml.so.535.1"), "");
    let mut warnings = Vec::new();
    let files = discover_files(&mut RootResolver::new(root.root()), None, V, &mut warnings);
    let paths: Vec<_> = files
        .libraries
        .iter()
        .map(|l| (l.path.display().to_string(), l.soname.clone()))
        .collect();
    assert_eq!(
        paths,
        vec![(
            format!("{LIB}/libcuda.so.{V}"),
            Some("libcuda.so.1".to_string())
        )]
    );
}

#[test]
fn dangling_cache_entries_become_warnings() {
    if !can_ldconfig() {
        return;
    }
    let mut root = FakeRoot::new();
    root.lib(
        LIB,
        &format!("libcuda.so.{V}"),
        "libcuda.so.1",
        false,
        false,
    );
    root.ldconfig("new");
    std::fs::remove_file(root.path(&format!("{LIB}/libcuda.so.{V}"))).unwrap();
    let cache = LdCache::load(&root.path("/etc/ld.so.cache")).unwrap();
    let mut warnings = Vec::new();
    let files = discover_files(
        &mut RootResolver::new(root.root()),
        Some(&cache),
        V,
        &mut warnings,
    );
    assert!(files.libraries.is_empty());
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("libcuda.so.1"), "{warnings:?}");
}
