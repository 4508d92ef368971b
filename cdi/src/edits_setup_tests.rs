use super::*;

fn full() -> SetupHookArgs {
    SetupHookArgs {
        links: vec![
            SetupLink::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap(),
            SetupLink::parse("libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so").unwrap(),
        ],
        ldconfig: Some("/sbin/ldconfig.real".into()),
        folders: vec!["/usr/lib64".into(), "/usr/lib/x86_64-linux-gnu".into()],
        disable_device_node_modification: true,
        cuda_compat_host_driver_version: Some("550.54.15".into()),
        application_profile: true,
        container_spec: Some("/run/b/config.json".into()),
        mps_shares: vec![SetupMpsShare {
            name: "nvidia.com/gpu-mps=0-half".into(),
            pipe_dir: "/run/gpuhook/mps/GPU-1/pipe".into(),
        }],
    }
}

#[test]
fn round_trip() {
    for a in [full(), SetupHookArgs::default()] {
        assert_eq!(SetupHookArgs::from_args(&a.to_args()).unwrap(), a);
    }
    let only_links = SetupHookArgs {
        links: full().links,
        ..SetupHookArgs::default()
    };
    assert_eq!(
        SetupHookArgs::from_args(&only_links.to_args()).unwrap(),
        only_links
    );
}

#[test]
fn the_encoding_is_the_clis_flags_in_a_fixed_order() {
    assert_eq!(
        full().to_args(),
        [
            "--link",
            "libcuda.so.1::/usr/lib64/libcuda.so",
            "--link",
            "libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so",
            "--ldconfig-path",
            "/sbin/ldconfig.real",
            "--folder",
            "/usr/lib64",
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
            "--disable-device-node-modification",
            "--cuda-compat-host-driver-version",
            "550.54.15",
            "--application-profile",
            "--container-spec",
            "/run/b/config.json",
            "--mps-share",
            "nvidia.com/gpu-mps=0-half::/run/gpuhook/mps/GPU-1/pipe",
        ]
    );
    assert!(SetupHookArgs::default().is_empty());
    assert!(SetupHookArgs::default().to_args().is_empty());
}

#[test]
fn any_order_and_inline_values_as_clap_reads_them() {
    let a = SetupHookArgs::from_args(&[
        "--folder=/b",
        "--disable-device-node-modification",
        "--link=t::/l",
        "--folder",
        "/a=x",
    ])
    .unwrap();
    assert_eq!(a.folders, [PathBuf::from("/b"), PathBuf::from("/a=x")]);
    assert_eq!(
        a.links,
        [SetupLink {
            target: "t".into(),
            link: "/l".into()
        }]
    );
    assert!(a.disable_device_node_modification);
}

#[test]
fn bad_arguments_are_refused_with_the_flag_named() {
    let err = |args: &[&str]| SetupHookArgs::from_args(args).unwrap_err().to_string();
    assert_eq!(err(&["--folder"]), "--folder needs a value");
    assert_eq!(err(&["--bogus"]), "unexpected \"--bogus\"");
    assert_eq!(err(&["/x"]), "unexpected \"/x\"");
    assert_eq!(
        err(&["--application-profile=yes"]),
        "--application-profile takes no value"
    );
    assert_eq!(
        err(&["--link", "nolink"]),
        "expected TARGET::LINK, e.g. libcuda.so.1::/usr/lib64/libcuda.so"
    );
    assert_eq!(
        err(&["--link", "::/x"]),
        "TARGET and LINK must both be non-empty"
    );
    assert_eq!(
        err(&["--link", "t::rel/x"]),
        "LINK \"rel/x\" must be an absolute path in the container"
    );
    assert_eq!(
        err(&["--link", "t::/a/../etc/x"]),
        "LINK \"/a/../etc/x\" must not contain '..'"
    );
    assert_eq!(err(&["--link", "t\0::/x"]), "contains a NUL byte");
}

#[test]
fn mps_shares_are_a_cdi_name_and_an_absolute_pipe_directory() {
    let a = SetupHookArgs::from_args(&[
        "--mps-share=example.com/gpu-mps=a:b::/p/x::y",
        "--mps-share",
        "nvidia.com/gpu-mps=GPU-1::/run/m/GPU-1/pipe",
    ])
    .unwrap();
    assert_eq!(a.mps_shares[0].name, "example.com/gpu-mps=a:b");
    assert_eq!(a.mps_shares[0].pipe_dir, PathBuf::from("/p/x::y"));
    assert_eq!(a.mps_shares[1].pipe_dir, PathBuf::from("/run/m/GPU-1/pipe"));
    assert!(!a.is_empty());
    let err = |v: &str| SetupMpsShare::parse(v).unwrap_err().to_string();
    assert!(err("nvidia.com/gpu-mps=0::rel/pipe").contains("absolute PIPE_DIR"));
    assert!(err("/run/pipe").contains("NAME::PIPE_DIR"));
    assert!(err("gpu-mps::/run/pipe").contains("qualified CDI name"));
    assert!(err("nvidia.com/gpu-mps=0::/run/../etc").contains("'..'"));
    assert!(err("nvidia.com/gpu-mps=0::/run\0").contains("NUL"));
    assert_eq!(
        SetupHookArgs::from_args(&["--mps-share"])
            .unwrap_err()
            .to_string(),
        "--mps-share needs a value"
    );
}
