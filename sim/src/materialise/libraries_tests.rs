use super::*;

#[test]
fn sonames_and_file_names_follow_the_driver_layout() {
    let p = NodeProfile::builtin("l20").unwrap();
    let libs = libraries(&p);
    let find = |stem: &str| {
        libs.iter()
            .find(|l| l.file_name.starts_with(&format!("{stem}.so.")))
            .unwrap()
    };
    assert_eq!(find("libcuda").soname, "libcuda.so.1");
    assert_eq!(find("libcuda").file_name, "libcuda.so.570.158.01");
    assert_eq!(find("libGLX_nvidia").soname, "libGLX_nvidia.so.0");
    assert_eq!(
        find("libnvidia-glcore").soname,
        "libnvidia-glcore.so.570.158.01"
    );
    assert!(libs
        .iter()
        .all(|l| l.file_name.ends_with(&p.driver_version)));
}

#[test]
fn graphics_libraries_only_with_the_graphics_feature() {
    let t4 = NodeProfile::builtin("t4").unwrap();
    assert!(!t4.features.graphics);
    assert!(libraries(&t4).iter().all(|l| l.capability != "graphics"));
    let l20 = NodeProfile::builtin("l20").unwrap();
    assert!(libraries(&l20)
        .iter()
        .any(|l| l.soname == "libEGL_nvidia.so.0"));
}
