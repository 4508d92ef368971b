use super::*;

fn argv(s: &[&str]) -> Vec<OsString> {
    std::iter::once("gpuhook-runtime")
        .chain(s.iter().copied())
        .map(OsString::from)
        .collect()
}

fn bundle_of(s: &[&str]) -> Intercept {
    parse(&argv(s)).unwrap().intercept()
}

fn create_with(bundle: &str) -> Intercept {
    Intercept::Bundle {
        command: "create".into(),
        bundle: bundle.into(),
    }
}

#[test]
fn containerd_shim_create_line() {
    // What the runc v2 shim runs (go-runc).
    let a = argv(&[
        "--root",
        "/run/containerd/runc/k8s.io",
        "--log",
        "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/log.json",
        "--log-format",
        "json",
        "--systemd-cgroup",
        "create",
        "--bundle",
        "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc",
        "--pid-file",
        "/run/x/init.pid",
        "abc",
    ]);
    let p = parse(&a).unwrap();
    assert_eq!(p.command.as_deref(), Some("create"));
    assert_eq!(p.command_index, Some(8));
    assert_eq!(
        p.log.as_deref(),
        Some(std::path::Path::new(
            "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/log.json"
        ))
    );
    assert!(p.log_is_json());
    assert_eq!(
        p.root.as_deref(),
        Some(std::path::Path::new("/run/containerd/runc/k8s.io"))
    );
    assert_eq!(
        p.intercept(),
        create_with("/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc")
    );
}

#[test]
fn global_flags_in_all_forms() {
    for globals in [
        &["--root", "/r", "--log", "/l", "--log-format", "json"][..],
        &["--root=/r", "--log=/l", "--log-format=json"],
        &["-root", "/r", "-log=/l", "-log-format", "json"],
        &[
            "--debug",
            "--root",
            "/r",
            "--criu",
            "/c",
            "--log",
            "/l",
            "--log-format=json",
        ],
        &[
            "--rootless",
            "auto",
            "--root=/r",
            "--debug=true",
            "--log",
            "/l",
            "--log-format",
            "json",
        ],
        &[
            "--systemd-cgroup",
            "--rootless=false",
            "--root",
            "/r",
            "--log",
            "/l",
            "-log-format=json",
        ],
    ] {
        let mut s = globals.to_vec();
        s.extend(["create", "id1"]);
        let p = parse(&argv(&s)).unwrap();
        assert_eq!(p.command.as_deref(), Some("create"), "{globals:?}");
        assert_eq!(
            p.log.as_deref(),
            Some(std::path::Path::new("/l")),
            "{globals:?}"
        );
        assert_eq!(
            p.root.as_deref(),
            Some(std::path::Path::new("/r")),
            "{globals:?}"
        );
        assert!(p.log_is_json(), "{globals:?}");
        assert_eq!(p.intercept(), create_with("."), "{globals:?}");
    }
}

#[test]
fn a_global_value_that_looks_like_a_command_is_a_value() {
    // `--root create` names a directory called "create"; the command is `start`.
    let p = parse(&argv(&["--root", "create", "start", "id"])).unwrap();
    assert_eq!(p.command.as_deref(), Some("start"));
    assert_eq!(p.intercept(), Intercept::PassThrough);
}

#[test]
fn bundle_in_all_forms() {
    for (args, want) in [
        (&["create", "--bundle", "/b", "id"][..], "/b"),
        (&["create", "--bundle=/b", "id"], "/b"),
        (&["create", "-b", "/b", "id"], "/b"),
        (&["create", "-b=/b", "id"], "/b"),
        (&["create", "-bundle", "/b", "id"], "/b"),
        // urfave/cli v1 moves flags written after the id in front of it.
        (&["create", "id", "--bundle", "/b"], "/b"),
        (
            &[
                "create",
                "--console-socket",
                "/s",
                "-b",
                "/b",
                "--no-pivot",
                "id",
            ],
            "/b",
        ),
        // Last one wins, as with Go's flag package.
        (&["create", "-b", "/a", "--bundle", "/b", "id"], "/b"),
        // Values of other options are not mistaken for the bundle flag.
        (
            &["create", "--pid-file", "-b", "--bundle", "/b", "id"],
            "/b",
        ),
        // No bundle: the working directory.
        (&["create", "--pid-file", "/p", "id"], "."),
        // After `--` nothing is a flag.
        (&["create", "-b", "/b", "--", "-b", "/x"], "/b"),
    ] {
        assert_eq!(bundle_of(args), create_with(want), "{args:?}");
    }
}

#[test]
fn run_is_intercepted_too() {
    assert_eq!(
        bundle_of(&["--log", "/l", "run", "-d", "--bundle", "/b", "id"]),
        Intercept::Bundle {
            command: "run".into(),
            bundle: "/b".into()
        }
    );
}

#[test]
fn other_commands_pass_through() {
    for args in [
        &["start", "id"][..],
        &["--root", "/r", "delete", "--force", "id"],
        &["state", "id"],
        &["kill", "id", "9"],
        &["exec", "--process", "/p.json", "id"],
        // `create` as an argument of another command is not the command.
        &["exec", "id", "create"],
        &["--version"],
        &["-h"],
        &[],
        // A global option missing its value: runc reports it; nothing to intercept.
        &["--root"],
    ] {
        let p = parse(&argv(args)).unwrap();
        assert_eq!(p.intercept(), Intercept::PassThrough, "{args:?}");
    }
}

#[test]
fn missing_bundle_value_is_an_error() {
    assert_eq!(
        parse(&argv(&["create", "id", "--bundle"])),
        Err(ArgvError::MissingValue {
            flag: "--bundle".into()
        })
    );
}

#[test]
fn unknown_global_flag_before_create_is_refused() {
    let err = parse(&argv(&["--new-thing", "x", "create", "id"])).unwrap_err();
    assert_eq!(
        err,
        ArgvError::UnknownGlobalFlag {
            flag: "--new-thing".into()
        }
    );
    assert!(err.to_string().contains("--new-thing=VALUE"));
    // With `=` it is unambiguous.
    let p = parse(&argv(&["--new-thing=x", "create", "-b", "/b", "id"])).unwrap();
    assert_eq!(p.intercept(), create_with("/b"));
    // And for commands we pass through it does not matter.
    let p = parse(&argv(&["--new-thing", "start", "id"])).unwrap();
    assert_eq!(p.intercept(), Intercept::PassThrough);
}

#[test]
fn non_utf8_arguments_are_kept() {
    use std::os::unix::ffi::OsStringExt;
    let mut a = argv(&["create", "--bundle"]);
    a.push(OsString::from_vec(b"/b\xff".to_vec()));
    a.push("id".into());
    let p = parse(&a).unwrap();
    assert_eq!(
        p.bundle,
        Some(PathBuf::from(OsString::from_vec(b"/b\xff".to_vec())))
    );
}

#[test]
fn the_container_id_is_the_last_argument_of_create_and_run() {
    let id = |a: &[&str]| {
        let argv: Vec<OsString> = std::iter::once("runc")
            .chain(a.iter().copied())
            .map(OsString::from)
            .collect();
        parse(&argv).unwrap().container_id
    };
    assert_eq!(
        id(&[
            "--root",
            "/r",
            "create",
            "--bundle",
            "/b",
            "--pid-file",
            "/p",
            "abc"
        ]),
        Some("abc".into())
    );
    assert_eq!(id(&["run", "-d", "-b=/b", "x1"]), Some("x1".into()));
    // No id (runc itself will refuse), and commands that are not intercepted.
    assert_eq!(id(&["create", "--bundle", "/b"]), None);
    assert_eq!(id(&["create"]), None);
    assert_eq!(id(&["start", "abc"]), None);
}
