//! Every flag of `nvidia-ctk cdi generate`, from NVIDIA's source: nvidia-container-toolkit
//! v1.20.0 cmd/nvidia-ctk/cdi/generate/generate.go `build` (flag names, aliases, env sources),
//! `validateFlags` (`enable-hook all` refused, `device-id none` implies no `all` device) and
//! pkg/nvcdi/mode.go (the modes). Each is accepted with its meaning or refused naming gpuhook's
//! way, and each env source sets the same option.

use clap::Parser;

use super::*;
use crate::cli::{CdiCommand, Cli, Command, GenerateArgs};

/// (flag, aliases, env var) of every flag NVIDIA defines.
const NVIDIA_FLAGS: &[(&str, &[&str], &str)] = &[
    (
        "config-search-path",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS",
    ),
    ("output", &[], "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"),
    ("format", &[], "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT"),
    ("mode", &["discovery-mode"], "NVIDIA_CTK_CDI_GENERATE_MODE"),
    ("dev-root", &[], "NVIDIA_CTK_DEV_ROOT"),
    (
        "device-name-strategy",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES",
    ),
    ("driver-root", &[], "NVIDIA_CTK_DRIVER_ROOT"),
    (
        "library-search-path",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS",
    ),
    (
        "nvidia-cdi-hook-path",
        &["nvidia-ctk-path"],
        "NVIDIA_CTK_CDI_HOOK_PATH",
    ),
    (
        "ldconfig-path",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH",
    ),
    ("vendor", &["cdi-vendor"], "NVIDIA_CTK_CDI_GENERATE_VENDOR"),
    ("class", &["cdi-class"], "NVIDIA_CTK_CDI_GENERATE_CLASS"),
    ("csv.file", &[], "NVIDIA_CTK_CDI_GENERATE_CSV_FILES"),
    (
        "csv.ignore-pattern",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS",
    ),
    (
        "csv.compat-container-root",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_CSV_CONTAINER_COMPAT_ROOT",
    ),
    (
        "disable-hook",
        &["disable-hooks"],
        "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS",
    ),
    (
        "enable-hook",
        &["enable-hooks"],
        "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS",
    ),
    (
        "feature-flag",
        &["feature-flags"],
        "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS",
    ),
    (
        "no-all-device",
        &[],
        "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE",
    ),
    (
        "device-id",
        &["device-ids", "device", "devices"],
        "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS",
    ),
];

fn generate_command() -> clap::Command {
    let cli = <Cli as clap::CommandFactory>::command();
    let cdi = cli.find_subcommand("cdi").unwrap().clone();
    cdi.find_subcommand("generate").unwrap().clone()
}

#[test]
fn every_nvidia_flag_alias_and_env_is_defined() {
    let cmd = generate_command();
    for (flag, aliases, env) in NVIDIA_FLAGS {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .unwrap_or_else(|| panic!("--{flag} is not a flag of gpuhook cdi generate"));
        let have: Vec<&str> = arg.get_all_aliases().unwrap_or_default();
        for alias in *aliases {
            assert!(
                have.contains(alias),
                "--{flag}: alias --{alias} missing ({have:?})"
            );
        }
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(*env),
            "--{flag}: env source"
        );
    }
}

fn generate_args(args: &[&str]) -> GenerateArgs {
    let mut argv = vec!["gpuhook", "cdi", "generate"];
    argv.extend_from_slice(args);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Cdi(CdiCommand::Generate(g)) => *g,
        other => panic!("{other:?}"),
    }
}

fn resolved(args: &[&str]) -> Result<Resolved, FlagsError> {
    generate_args(args).nvidia.resolve()
}

fn refusal(args: &[&str]) -> String {
    resolved(args).unwrap_err().to_string()
}

#[test]
fn accepted_flags_keep_nvidias_meaning() {
    let r = resolved(&[]).unwrap();
    assert_eq!(
        (r.mode, r.all_device, r.device_ids.clone()),
        (None, true, None)
    );
    assert!(r.disabled_hooks.is_empty());
    let r = resolved(&[
        "--discovery-mode",
        "NVML",
        "--no-all-device",
        "--devices",
        "0,GPU-x",
    ])
    .unwrap();
    assert_eq!((r.mode, r.all_device), (None, false));
    assert_eq!(
        r.device_ids,
        Some(vec!["0".to_string(), "GPU-x".to_string()])
    );
    for (value, mode) in [
        ("management", Mode::Management),
        ("gds", Mode::Gds),
        ("mofed", Mode::Mofed),
        ("nvswitch", Mode::Nvswitch),
        ("gdrcopy", Mode::Gdrcopy),
        ("imex", Mode::Imex),
    ] {
        assert_eq!(
            resolved(&["--mode", value]).unwrap().mode,
            Some(mode),
            "{value}"
        );
    }
    let r = resolved(&[
        "--disable-hooks",
        "create-symlinks,update-ldcache",
        "--enable-hook",
        "update-ldcache",
    ])
    .unwrap();
    assert_eq!(
        r.disabled_hooks,
        ["create-symlinks".to_string()].into_iter().collect()
    );
    let r = resolved(&[
        "--feature-flags",
        "disable-ipc-discoverer,no-additional-gids-for-device-nodes",
    ])
    .unwrap();
    assert!(r.no_ipc);
    let r = resolved(&[
        "--nvidia-ctk-path",
        "/usr/local/bin/gpuhook",
        "--library-search-path",
        "/x",
    ])
    .unwrap();
    assert_eq!(
        r.gpuhook_path,
        Some(PathBuf::from("/usr/local/bin/gpuhook"))
    );
    let g = generate_args(&[
        "--cdi-vendor",
        "example.com",
        "--cdi-class",
        "gds",
        "--format",
        "JSON",
    ]);
    assert_eq!(
        (g.vendor.as_str(), g.class.as_deref()),
        ("example.com", Some("gds"))
    );
}

#[test]
fn refused_flags_name_the_gpuhook_way() {
    for (args, want) in [
        (&["--mode", "csv"][..], "--mode nvml"),
        (&["--mode", "wsl"], "NVML only"),
        (&["--mode", "bogus"], "invalid discovery mode"),
        (
            &["--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"],
            "--gpuhook-path",
        ),
        (&["--config-search-path", "/etc"], "--driver-root"),
        (&["--csv.file", "/x.csv"], "CSV"),
        (&["--csv.ignore-pattern", "x"], "CSV"),
        (&["--csv.compat-container-root", "/x"], "CSV"),
        (&["--enable-hook", "all"], "not supported"),
        (&["--enable-hook", "chmod"], "no chmod step"),
        (&["--disable-hook", "bogus"], "unknown hook"),
        (&["--device-id", "none"], "without devices"),
        (
            &["--feature-flag", "enable-explicit-driver-libraries"],
            "not supported",
        ),
    ] {
        let err = refusal(args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
