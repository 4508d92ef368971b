use std::path::PathBuf;

use clap::{CommandFactory, Parser};

use super::*;

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("gpuhook").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn parse_err(args: &[&str]) -> String {
    Cli::try_parse_from(std::iter::once("gpuhook").chain(args.iter().copied()))
        .expect_err("must fail")
        .to_string()
}

#[test]
fn command_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn cdi_generate_flags() {
    let cli = parse(&[
        "cdi",
        "generate",
        "--driver-root",
        "/drv",
        "--dev-root",
        "/",
        "--nvml-lib",
        "/x/libnvidia-ml.so.1",
        "--output",
        "/var/run/cdi",
        "--format",
        "yaml",
        "--device-name-strategy",
        "index,type-index",
        "--vendor",
        "example.com",
        "--class",
        "gpu",
    ]);
    let Command::Cdi(CdiCommand::Generate(g)) = cli.command else {
        panic!()
    };
    assert_eq!(g.driver_root, Some(PathBuf::from("/drv")));
    assert_eq!(g.nvml_lib, Some(PathBuf::from("/x/libnvidia-ml.so.1")));
    assert_eq!(g.format, Some(SpecFormat::Yaml));
    assert_eq!(
        g.device_name_strategy,
        vec![NameStrategy::Index, NameStrategy::TypeIndex]
    );
    assert_eq!(
        (g.vendor.as_str(), g.class.as_deref()),
        ("example.com", Some("gpu"))
    );

    let Command::Cdi(CdiCommand::Generate(g)) = parse(&["cdi", "generate"]).command else {
        panic!()
    };
    assert_eq!(
        g.device_name_strategy,
        vec![NameStrategy::Index, NameStrategy::Uuid]
    );
    assert_eq!(
        (g.vendor.as_str(), g.class.as_deref(), g.output),
        ("nvidia.com", None, None)
    );

    assert!(parse_err(&["cdi", "generate", "--vendor", "bad vendor"]).contains("contains ' '"));
    assert!(parse_err(&["cdi", "generate", "--device-name-strategy", "serial"]).contains("serial"));
}

#[test]
fn cdi_list_and_validate() {
    let Command::Cdi(CdiCommand::List(l)) =
        parse(&["cdi", "list", "--spec-dir", "/a", "--spec-dir", "/b"]).command
    else {
        panic!()
    };
    assert_eq!(l.spec_dirs, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
    let Command::Cdi(CdiCommand::Validate(v)) = parse(&["cdi", "validate", "spec.json"]).command
    else {
        panic!()
    };
    assert_eq!(v.file, PathBuf::from("spec.json"));
    assert!(parse_err(&["cdi", "validate"]).contains("FILE"));
}

#[test]
fn hook_flags() {
    let cli = parse(&[
        "hook",
        "create-symlinks",
        "--link",
        "libcuda.so.1::/usr/lib64/libcuda.so",
        "--link",
        "a::/b",
    ]);
    let Command::Hook(HookCommand::CreateSymlinks(c)) = cli.command else {
        panic!()
    };
    assert_eq!(
        c.links[0],
        LinkSpec {
            target: "libcuda.so.1".into(),
            link: "/usr/lib64/libcuda.so".into()
        }
    );
    assert_eq!(c.links.len(), 2);
    for (bad, why) in [
        ("a:/b", "expected TARGET::LINK"),
        ("::/b", "non-empty"),
        ("a::b", "absolute"),
        ("a::/x/../../b", "'..'"),
    ] {
        let e = parse_err(&["hook", "create-symlinks", "--link", bad]);
        assert_eq!(e.matches(why).count(), 1, "{bad}: {e}");
    }
    let cli = parse(&[
        "hook",
        "update-ldcache",
        "--folder",
        "/usr/lib64",
        "--folder",
        "/lib",
        "--ldconfig",
        "/sbin/ldconfig",
    ]);
    let Command::Hook(HookCommand::UpdateLdcache(u)) = cli.command else {
        panic!()
    };
    assert_eq!(
        u.folders,
        vec![PathBuf::from("/usr/lib64"), PathBuf::from("/lib")]
    );
    assert_eq!(u.ldconfig, Some(PathBuf::from("/sbin/ldconfig")));
    assert!(matches!(
        parse(&["hook", "disable-device-node-modification"]).command,
        Command::Hook(HookCommand::DisableDeviceNodeModification(_))
    ));
    let cli = parse(&[
        "hook",
        "setup",
        "--link",
        "libcuda.so.1::/usr/lib64/libcuda.so",
        "--ldconfig-path",
        "/sbin/ldconfig.real",
        "--folder",
        "/usr/lib64",
        "--disable-device-node-modification",
    ]);
    let Command::Hook(HookCommand::Setup(s)) = cli.command else {
        panic!()
    };
    assert_eq!(s.links.len(), 1);
    assert_eq!(s.folders, vec![PathBuf::from("/usr/lib64")]);
    assert_eq!(s.ldconfig, Some(PathBuf::from("/sbin/ldconfig.real")));
    assert!(s.disable_device_node_modification);
    let e = parse_err(&["hook", "setup", "--link", "a:/b"]);
    assert!(e.contains("TARGET::LINK"), "{e}");
}

#[test]
fn runtime_configure_flags_and_global_config() {
    let cli = parse(&[
        "--config",
        "/etc/gpuhook/other.toml",
        "runtime",
        "configure",
        "--config",
        "/etc/containerd/config.toml",
        "--drop-in",
        "--set-as-default",
        "--dry-run",
    ]);
    assert_eq!(cli.config, Some(PathBuf::from("/etc/gpuhook/other.toml")));
    let Command::Runtime(RuntimeCommand::Configure(c)) = cli.command else {
        panic!()
    };
    assert_eq!(
        c.containerd_config(),
        PathBuf::from("/etc/containerd/config.toml")
    );
    assert!(c.drop_in.is_some() && c.set_as_default && c.dry_run && !c.enable_cdi);
    assert_eq!(c.runtime, RuntimeKind::Containerd);
    assert_eq!(c.runtime_name, "gpuhook");
}

#[test]
fn system_and_prestart() {
    let cli = parse(&[
        "--log-level",
        "debug",
        "--log-format",
        "json",
        "system",
        "create-dev-char-symlinks",
        "--dry-run",
    ]);
    assert_eq!(cli.log_level, Some(LogLevel::Debug));
    assert_eq!(cli.log_format, Some(LogFormat::Json));
    let Command::System(SystemCommand::CreateDevCharSymlinks(s)) = cli.command else {
        panic!()
    };
    assert!(s.dry_run);
    assert_eq!(s.dev_char_path, PathBuf::from("/dev/char"));
    let Command::Prestart(p) = parse(&["prestart", "--state", "/tmp/s.json"]).command else {
        panic!()
    };
    assert_eq!(p.state, Some(PathBuf::from("/tmp/s.json")));
}

#[test]
fn prestart_fast_path_means_what_clap_means() {
    let argv = |a: &[&str]| -> Vec<std::ffi::OsString> {
        std::iter::once("gpuhook")
            .chain(a.iter().copied())
            .map(Into::into)
            .collect()
    };
    // With `prestart --config FILE`, clap keeps FILE on the subcommand; the fast path makes it
    // the top-level config, which `prestart::run` then uses for everything: same config file.
    let fast = prestart_fast_path(&argv(&["prestart", "--config", "/etc/x.toml"])).unwrap();
    assert_eq!(fast.config, Some(PathBuf::from("/etc/x.toml")));
    let Command::Prestart(p) = &fast.command else {
        panic!()
    };
    assert_eq!((&p.state, &p.config), (&None, &None));
    let slow = parse(&["prestart", "--config", "/etc/x.toml"]);
    let Command::Prestart(q) = &slow.command else {
        panic!()
    };
    assert_eq!(q.config, fast.config);
    assert_eq!(q.state, None);
    assert!(matches!(
        prestart_fast_path(&argv(&["prestart"])).map(|c| c.command),
        Some(Command::Prestart(_))
    ));
    // Anything else is clap's.
    for other in [
        &["prestart", "--help"][..],
        &["prestart", "--state", "s.json"],
        &["prestart", "--config"],
        &["prestart", "--config", ""],
        &["--log-level", "debug", "prestart"],
        &["cdi", "list"],
        &[],
    ] {
        assert!(prestart_fast_path(&argv(other)).is_none(), "{other:?}");
    }
}

#[test]
fn one_line_errors() {
    let e = anyhow::anyhow!("root\ncause").context("outer");
    assert_eq!(one_line(e.as_ref()), "outer: root cause");
}

#[test]
fn one_line_of_a_typed_error_is_the_anyhow_chain_it_replaces() {
    // Before `CliError`, `run` returned an anyhow chain printed with `{:#}`: context, then cause.
    let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
    let typed = CliError::ReadContainerSpec {
        path: "/b/config.json".into(),
        error: io(),
    };
    let chained = anyhow::Error::from(io()).context("cannot read container spec /b/config.json");
    assert_eq!(one_line(&typed), format!("{chained:#}"));
    assert_eq!(
        one_line(&typed),
        "cannot read container spec /b/config.json: gone"
    );
    // A wrapped sub-error prints as itself, once.
    let wrapped = CliError::from(CdiCliError::NotADirectory {
        what: "driver root",
        path: "/x".into(),
    });
    assert_eq!(one_line(&wrapped), "driver root /x is not a directory");
}
