//! The hooks of the edits as the plan reads them: the generator's [`SetupHookArgs`] encoding,
//! the one-step hooks of older specs, and everything the prestart hook refuses.

use gpuhook_cdi::edits::SetupHookArgs;

use super::*;

#[test]
fn bad_edits_are_refused() {
    let inv = inventory();
    let mut edits = edits_for(
        &inv,
        &[DeviceRef::Gpu { index: 0 }],
        &caps(&[Capability::Compute]),
        &EditOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    let good = edits.clone();

    edits.mounts[0].container_path = "/usr/../../etc/passwd".into();
    assert!(Plan::from_edits(&inv, &edits)
        .unwrap_err()
        .to_string()
        .contains(".."));

    let mut edits = good.clone();
    edits.mounts[0].options = vec!["ro".into(), "rbind".into()];
    assert!(Plan::from_edits(&inv, &edits)
        .unwrap_err()
        .to_string()
        .contains("lack nosuid,nodev"));
    edits.mounts[0].options = vec!["nosuid".into(), "nodev".into(), "suid".into()];
    assert!(Plan::from_edits(&inv, &edits)
        .unwrap_err()
        .to_string()
        .contains("unsupported option \"suid\""));

    let mut edits = good.clone();
    edits.device_nodes[0].device_type = Some("b".into());
    assert!(Plan::from_edits(&inv, &edits).is_err());
    let mut edits = good.clone();
    edits.device_nodes[0].major = Some(-1);
    assert!(Plan::from_edits(&inv, &edits)
        .unwrap_err()
        .to_string()
        .contains("major"));

    let mut edits = good.clone();
    edits.hooks[0].args = vec!["sh".into(), "-c".into(), "id".into()];
    assert!(Plan::from_edits(&inv, &edits)
        .unwrap_err()
        .to_string()
        .contains("unsupported hook"));
    let mut edits = good.clone();
    let h = edits
        .hooks
        .iter_mut()
        .find(|h| h.args.iter().any(|a| a == "setup"))
        .unwrap();
    h.args.push("--link".into());
    let e = Plan::from_edits(&inv, &edits).unwrap_err().to_string();
    assert!(e.contains("--link needs a value"), "{e}");
    let mut edits = good.clone();
    edits.hooks[0].args.push("--frobnicate".into());
    let e = Plan::from_edits(&inv, &edits).unwrap_err().to_string();
    assert!(e.contains("unexpected \"--frobnicate\""), "{e}");
    // The one-step hooks of older specs: each accepts only its own flags.
    let mut edits = good;
    edits.hooks[0].args = ["gpuhook", "hook", "create-symlinks", "--folder", "/lib"]
        .map(String::from)
        .to_vec();
    let e = Plan::from_edits(&inv, &edits).unwrap_err().to_string();
    assert!(
        e.contains("create-symlinks: unexpected \"--folder\""),
        "{e}"
    );
}

#[test]
fn one_step_hooks_of_older_specs_plan_like_setup() {
    let inv = inventory();
    let edits = gpuhook_cdi::edits_for(
        &inv,
        &[DeviceRef::Gpu { index: 0 }],
        &[Capability::Compute, Capability::Utility]
            .into_iter()
            .collect(),
        &gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    let setup = Plan::from_edits(&inv, &edits).unwrap();
    let mut old = edits.clone();
    let args = &edits.hooks[0].args;
    let (mut links, mut folders) = (vec![], vec![]);
    for pair in args[3..].windows(2) {
        match pair[0].as_str() {
            "--link" => links.extend(["--link".to_string(), pair[1].clone()]),
            "--folder" => folders.extend(["--folder".to_string(), pair[1].clone()]),
            _ => {}
        }
    }
    let hook = |rest: Vec<String>| {
        let mut h = edits.hooks[0].clone();
        h.args = ["gpuhook", "hook"].map(String::from).to_vec();
        h.args.extend(rest);
        h
    };
    old.hooks = vec![
        hook([vec!["create-symlinks".to_string()], links].concat()),
        hook([vec!["update-ldcache".to_string()], folders].concat()),
        hook(vec!["disable-device-node-modification".to_string()]),
    ];
    let one_step = Plan::from_edits(&inv, &old).unwrap();
    assert!(!setup.symlinks.is_empty() && !setup.ldcache_folders.is_empty());
    assert!(setup.params.is_some());
    assert_eq!(
        (
            &one_step.symlinks,
            &one_step.ldcache_folders,
            &one_step.params
        ),
        (&setup.symlinks, &setup.ldcache_folders, &setup.params)
    );
}

#[test]
fn setup_flags_the_hook_does_not_do_are_refused() {
    let inv = inventory();
    let edits = edits_for(
        &inv,
        &[DeviceRef::Gpu { index: 0 }],
        &caps(&[Capability::Compute]),
        &EditOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    for (extra, flag) in [
        (
            SetupHookArgs {
                cuda_compat_host_driver_version: Some("550.1".into()),
                ..SetupHookArgs::default()
            },
            "--cuda-compat-host-driver-version",
        ),
        (
            SetupHookArgs {
                application_profile: true,
                ..SetupHookArgs::default()
            },
            "--application-profile",
        ),
    ] {
        let mut edits = edits.clone();
        edits.hooks[0].args.extend(extra.to_args());
        let e = Plan::from_edits(&inv, &edits).unwrap_err().to_string();
        assert_eq!(e, format!("setup: unexpected {flag:?}"));
    }
    // A link of a spec is checked like the CLI checks it.
    let mut bad = edits;
    bad.hooks[0]
        .args
        .extend(["--link".into(), "t::rel/x".into()]);
    let e = Plan::from_edits(&inv, &bad).unwrap_err().to_string();
    assert!(
        e.contains("must be an absolute path in the container"),
        "{e}"
    );
}

/// A bad hook argument is named once in the error's `source()` chain (as `{:#}` prints it).
#[test]
fn a_bad_hook_argument_is_printed_once() {
    let inv = inventory();
    let mut edits = edits_for(
        &inv,
        &[DeviceRef::Gpu { index: 0 }],
        &caps(&[Capability::Compute]),
        &EditOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    edits.hooks[0]
        .args
        .extend(["--link".into(), "t::rel/x".into()]);
    let e = Plan::from_edits(&inv, &edits).unwrap_err();
    let chain: Vec<String> =
        std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect();
    let text = chain.join(": ");
    assert_eq!(
        text.matches("must be an absolute path").count(),
        1,
        "{text}"
    );
}

/// gpu-mps-daemon's setup hook carries `--mps-share`: the plan accepts it on `setup` (the
/// prestart hook checks the shares it injects before planning, `mps_edits`) and plans exactly
/// what it plans without it; a one-step hook with it is refused.
#[test]
fn an_mps_share_on_the_setup_hook_is_accepted_and_adds_nothing() {
    let inv = inventory();
    let edits = edits_for(
        &inv,
        &[DeviceRef::Gpu { index: 0 }],
        &caps(&[Capability::Compute]),
        &EditOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    let mut with_share = edits.clone();
    let share = gpuhook_cdi::edits::SetupMpsShare {
        name: "nvidia.com/gpu-mps=0".into(),
        pipe_dir: "/run/gpuhook/mps/GPU-1/pipe".into(),
    };
    gpuhook_cdi::edits::add_mps_share(
        &mut with_share,
        &EditOptions::new("/usr/bin/gpuhook"),
        share,
    )
    .unwrap();
    assert_ne!(with_share.hooks, edits.hooks);
    assert_eq!(
        Plan::from_edits(&inv, &with_share).unwrap(),
        Plan::from_edits(&inv, &edits).unwrap()
    );
    let mut one_step = edits;
    one_step.hooks[0].args = vec![
        "gpuhook".into(),
        "hook".into(),
        "update-ldcache".into(),
        "--mps-share".into(),
        "nvidia.com/gpu-mps=0::/run/p".into(),
    ];
    let e = Plan::from_edits(&inv, &one_step).unwrap_err().to_string();
    assert_eq!(e, "update-ldcache: unexpected \"--mps-share\"");
}
