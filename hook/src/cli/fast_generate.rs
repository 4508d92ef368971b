//! `gpuhook cdi generate`'s arguments as units, the installer and the benchmarks pass them, read
//! without clap: `--driver-root`, `--dev-root`, `--nvml-lib`, `--output` and `--inventory-cache`
//! (each once, `--opt VALUE` or `--opt=VALUE`). Building and running clap's parser for
//! `generate`'s ~40 options took ~0.1 ms of a ~2 ms spec refresh (`scripts/bench-cdi-generate.sh`).
//! Anything else (another option, a repeated one, an empty or dash-leading value) or any
//! `NVIDIA_CTK_*` variable that gives one of `generate`'s options a default leaves the argv to
//! clap. The defaults below are clap's: the tests compare every result with clap's parse of the
//! same argv, and [`GENERATE_ENV`] with the variables clap's definition names.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::cdi::NvidiaFlags;
use super::{GenerateArgs, NameStrategy};

/// The environment variables that give `generate`'s options defaults (its clap `env`s).
pub(super) const GENERATE_ENV: &[&str] = &[
    "NVIDIA_CTK_DRIVER_ROOT",
    "NVIDIA_CTK_DEV_ROOT",
    "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH",
    "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT",
    "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES",
    "NVIDIA_CTK_CDI_GENERATE_VENDOR",
    "NVIDIA_CTK_CDI_GENERATE_CLASS",
    "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH",
    "NVIDIA_CTK_CDI_GENERATE_MODE",
    "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE",
    "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS",
    "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS",
    "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS",
    "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS",
    "NVIDIA_CTK_CDI_HOOK_PATH",
    "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS",
    "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS",
    "NVIDIA_CTK_CDI_GENERATE_CSV_FILES",
    "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS",
    "NVIDIA_CTK_CDI_GENERATE_CSV_CONTAINER_COMPAT_ROOT",
];

/// `generate`'s arguments (what follows `cdi generate`), or `None` to leave them to clap.
pub(super) fn generate_args(
    args: &[OsString],
    env: &impl Fn(&str) -> Option<OsString>,
) -> Option<GenerateArgs> {
    if GENERATE_ENV.iter().any(|name| env(name).is_some()) {
        return None;
    }
    let mut out = clap_defaults();
    let mut rest = args;
    while let [opt, tail @ ..] = rest {
        let opt = opt.to_str()?;
        let (name, value, tail) = match opt.split_once('=') {
            Some((name, value)) => (name, OsStr::new(value), tail),
            None => {
                let (value, tail) = tail.split_first()?;
                (opt, value.as_os_str(), tail)
            }
        };
        if value.is_empty() || value.as_encoded_bytes().starts_with(b"-") {
            return None;
        }
        let slot = match name {
            "--driver-root" => &mut out.driver_root,
            "--dev-root" => &mut out.dev_root,
            "--nvml-lib" => &mut out.nvml_lib,
            "--output" => &mut out.output,
            "--inventory-cache" => &mut out.inventory_cache,
            _ => return None,
        };
        if slot.replace(PathBuf::from(value)).is_some() {
            return None; // repeated: clap's error to report
        }
        rest = tail;
    }
    Some(out)
}

/// What clap gives for `cdi generate` without arguments or environment.
fn clap_defaults() -> GenerateArgs {
    GenerateArgs {
        driver_root: None,
        dev_root: None,
        nvml_lib: None,
        output: None,
        format: None,
        device_name_strategy: vec![NameStrategy::Index, NameStrategy::Uuid],
        vendor: gpuhook_cdi::DEFAULT_VENDOR.to_owned(),
        class: None,
        gpuhook_path: None,
        ldconfig_path: None,
        inventory_cache: None,
        no_inventory_cache: false,
        allow_procfs_fallback: false,
        force: false,
        fail_on_empty: false,
        nvidia: NvidiaFlags {
            mode: "auto".to_owned(),
            ..NvidiaFlags::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    fn clap_parse(args: &[&str]) -> Option<GenerateArgs> {
        let mut cmd = GenerateArgs::augment_args(clap::Command::new("generate"));
        let mut m = cmd
            .try_get_matches_from_mut(std::iter::once("generate").chain(args.iter().copied()))
            .ok()?;
        GenerateArgs::from_arg_matches_mut(&mut m).ok()
    }

    fn direct(args: &[&str]) -> Option<GenerateArgs> {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        generate_args(&argv, &|_| None)
    }

    #[test]
    fn the_direct_reading_is_claps() {
        for args in [
            &[][..],
            &["--driver-root", "/d", "--output", "/o/x.json"],
            &[
                "--inventory-cache=/i.json",
                "--dev-root",
                "/dev-r",
                "--nvml-lib=/l.so",
            ],
            &["--output", "dir/"],
        ] {
            let ours = direct(args).unwrap_or_else(|| panic!("{args:?} must be read directly"));
            let theirs = clap_parse(args).expect("clap accepts it");
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{args:?}");
        }
    }

    #[test]
    fn anything_else_is_left_to_clap() {
        for args in [
            &["--driver-root"][..],
            &["--driver-root", ""],
            &["--driver-root="],
            &["--driver-root", "-x"],
            &["--driver-root", "/a", "--driver-root", "/b"],
            &["-o", "/x"],
            &["--format", "yaml"],
            &["--vendor", "a.b"],
            &["--help"],
            &["extra"],
        ] {
            assert!(direct(args).is_none(), "{args:?}");
        }
        let argv = [OsString::from("--output"), OsString::from("/o")];
        for name in GENERATE_ENV {
            let env = |n: &str| (n == *name).then(|| OsString::from("x"));
            assert!(generate_args(&argv, &env).is_none(), "{name}");
        }
    }

    #[test]
    fn every_environment_default_of_generate_is_known() {
        let cmd = GenerateArgs::augment_args(clap::Command::new("generate"));
        let mut theirs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        let mut ours: Vec<String> = GENERATE_ENV.iter().map(|s| s.to_string()).collect();
        theirs.sort();
        ours.sort();
        assert_eq!(ours, theirs);
    }
}
