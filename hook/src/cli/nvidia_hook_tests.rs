//! NVIDIA's hook command line (`cmd/nvidia-container-runtime-hook/main.go`: Go `flag` with
//! `-debug`, `-version`, `-config`; commands `prestart`, `poststart`/`poststop` no-ops; usage and
//! exit 2 otherwise), as gpuhook reads it when called by that name.

use std::ffi::OsString;
use std::path::PathBuf;

use super::*;

fn call(argv: &[&str], env: &[(&str, &str)]) -> Option<HookCall> {
    let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    from_argv(&argv, |name| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| OsString::from(v))
    })
}

fn prestart_cli(argv: &[&str], env: &[(&str, &str)]) -> Cli {
    match call(argv, env) {
        Some(HookCall::Prestart(cli)) => *cli,
        other => panic!("{argv:?}: expected prestart, got {other:?}"),
    }
}

fn exit(argv: &[&str]) -> (u8, String, String) {
    match call(argv, &[]) {
        Some(HookCall::Exit {
            code,
            stdout,
            stderr,
        }) => (code, stdout, stderr),
        other => panic!("{argv:?}: expected an exit, got {other:?}"),
    }
}

#[test]
fn only_the_nvidia_name_is_taken_over() {
    assert!(call(&["gpuhook", "prestart"], &[]).is_none());
    assert!(call(&["/usr/bin/gpuhook", "prestart"], &[]).is_none());
    assert!(call(&["nvidia-container-runtime-hook-x", "prestart"], &[]).is_none());
    assert!(call(&[], &[]).is_none());
    // dockerd passes the bare name as argv[0]; an OCI hook file may pass the full path.
    for name in [
        "nvidia-container-runtime-hook",
        "/usr/bin/nvidia-container-runtime-hook",
        "/opt/x/bin/nvidia-container-runtime-hook",
    ] {
        let cli = prestart_cli(&[name, "prestart"], &[]);
        assert!(matches!(cli.command, Command::Prestart(_)), "{name}");
    }
}

#[test]
fn dockers_argv_is_gpuhook_prestart() {
    // moby daemon/nvidia_linux.go: Args ["nvidia-container-runtime-hook", "prestart"], Env =
    // dockerd's environment (GPUHOOK_CONFIG in it reaches the hook).
    let cli = prestart_cli(&["nvidia-container-runtime-hook", "prestart"], &[]);
    assert_eq!(cli.config, None);
    assert_eq!(cli.log_level, None);
    let Command::Prestart(p) = &cli.command else {
        panic!("not prestart")
    };
    assert!(p.state.is_none() && p.config.is_none());
    let cli = prestart_cli(
        &["nvidia-container-runtime-hook", "prestart"],
        &[("GPUHOOK_CONFIG", "/etc/node/gpuhook.toml")],
    );
    assert_eq!(cli.config, Some(PathBuf::from("/etc/node/gpuhook.toml")));
}

#[test]
fn nvidias_flags_in_every_go_spelling() {
    let cfg = Some(PathBuf::from("/etc/nvidia-container-runtime/config.toml"));
    for argv in [
        &[
            "h",
            "-config",
            "/etc/nvidia-container-runtime/config.toml",
            "prestart",
        ][..],
        &[
            "h",
            "--config",
            "/etc/nvidia-container-runtime/config.toml",
            "prestart",
        ],
        &[
            "h",
            "-config=/etc/nvidia-container-runtime/config.toml",
            "prestart",
        ],
        &[
            "h",
            "--config=/etc/nvidia-container-runtime/config.toml",
            "prestart",
        ],
    ] {
        let mut argv = argv.to_vec();
        argv[0] = "nvidia-container-runtime-hook";
        // The flag wins over the environment.
        let cli = prestart_cli(&argv, &[("GPUHOOK_CONFIG", "/other.toml")]);
        assert_eq!(cli.config, cfg, "{argv:?}");
        assert_eq!(cli.log_level, None, "{argv:?}");
    }
    for (flag, level) in [
        ("-debug", Some(LogLevel::Debug)),
        ("--debug", Some(LogLevel::Debug)),
        ("-debug=true", Some(LogLevel::Debug)),
        ("-debug=1", Some(LogLevel::Debug)),
        ("-debug=false", None),
        ("-debug=F", None),
    ] {
        let cli = prestart_cli(&["nvidia-container-runtime-hook", flag, "prestart"], &[]);
        assert_eq!(cli.log_level, level, "{flag}");
    }
    let cli = prestart_cli(
        &[
            "nvidia-container-runtime-hook",
            "-debug",
            "-config",
            "/c.toml",
            "--",
            "prestart",
        ],
        &[],
    );
    assert_eq!(cli.log_level, Some(LogLevel::Debug));
    assert_eq!(cli.config, Some(PathBuf::from("/c.toml")));
}

#[test]
fn poststart_and_poststop_are_no_ops_as_nvidias() {
    for stage in ["poststart", "poststop"] {
        let (code, out, err) = exit(&["nvidia-container-runtime-hook", stage]);
        assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""), "{stage}");
        let (code, ..) = exit(&["nvidia-container-runtime-hook", "-debug", stage]);
        assert_eq!(code, 0, "{stage}");
    }
}

#[test]
fn version_and_help_exit_zero() {
    let (code, out, _) = exit(&["nvidia-container-runtime-hook", "-version"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("gpuhook") && out.contains(NVIDIA_HOOK_NAME),
        "{out}"
    );
    // -version wins over the command, as in NVIDIA's main().
    let (code, ..) = exit(&["nvidia-container-runtime-hook", "--version", "prestart"]);
    assert_eq!(code, 0);
    for h in ["-h", "-help", "--help"] {
        let (code, _, err) = exit(&["nvidia-container-runtime-hook", h]);
        assert_eq!(code, 0, "{h}");
        assert!(
            err.contains("-config FILE") && err.contains("poststop"),
            "{err}"
        );
    }
}

#[test]
fn unknown_flags_and_commands_are_refused_by_name() {
    for (argv, needle) in [
        (
            &["nvidia-container-runtime-hook", "-bogus", "prestart"][..],
            "flag provided but not defined: -bogus",
        ),
        (
            &["nvidia-container-runtime-hook", "--no-cgroups", "prestart"],
            "flag provided but not defined: -no-cgroups",
        ),
        (
            &["nvidia-container-runtime-hook", "-config"],
            "flag needs an argument: -config",
        ),
        (
            &["nvidia-container-runtime-hook", "-config=", "prestart"],
            "-config needs a file name",
        ),
        (
            &["nvidia-container-runtime-hook", "-debug=maybe", "prestart"],
            "invalid boolean value \"maybe\" for -debug",
        ),
        (
            &["nvidia-container-runtime-hook", "---x", "prestart"],
            "bad flag syntax: ---x",
        ),
        (&["nvidia-container-runtime-hook"], "no command given"),
        (
            &["nvidia-container-runtime-hook", "createRuntime"],
            "unknown command \"createRuntime\"",
        ),
        (
            &["nvidia-container-runtime-hook", "prestart", "-debug"],
            "unexpected argument \"-debug\" after `prestart`",
        ),
    ] {
        let (code, out, err) = exit(argv);
        assert_eq!(code, EXIT_USAGE, "{argv:?}");
        assert!(out.is_empty(), "{argv:?}: {out}");
        assert!(err.contains(needle), "{argv:?}: {err}");
        assert!(
            err.contains("Usage of nvidia-container-runtime-hook"),
            "{err}"
        );
    }
}
