//! `gpuhook-runtime`: the runc wrapper containerd's shim runs instead of runc; see
//! [`gpuhook_wrapper`]. Nothing is ever written to stdout (it belongs to runc's caller), except
//! for the wrapper's own `--version` / `--help`, which only a person (or `docker info`) asks for.
//!
//! `no_main`: containerd runs this binary for every runc command of every container, and most of
//! them only exec runc. Rust's own start-up (the main thread's stack guard, which reads
//! `/proc/self/maps`, and the SIGPIPE and stack-overflow handlers) is skipped: nothing here needs
//! it, and runc gets the signal dispositions the shim gave us, as if the shim had run it.
// Test builds keep the harness's own `main`.
#![cfg_attr(not(test), no_main)]

use std::ffi::{c_int, OsString};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use gpuhook::config::{Config, CONFIG_ENV};

/// The C entry point; the arguments are read through `std::env::args_os`, which works without
/// Rust's runtime start-up on Linux.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(argc: c_int, _argv: *const *const std::ffi::c_char) -> c_int {
    // The shim never runs `runc --version` or `runc --help` (one argument, no command): an
    // integer compare is the whole cost on the pass-through path.
    if argc == 2 {
        let arg = std::env::args_os().nth(1).unwrap_or_default();
        if let Some(flag) = own_flag(arg.as_encoded_bytes()) {
            return answer(flag);
        }
    }
    gpuhook_wrapper::main()
}

/// A flag the wrapper answers itself instead of passing it to runc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnFlag {
    Version,
    Help,
}

/// runc's own spellings (`-v, --version`, `-h, --help`), alone on the command line.
fn own_flag(arg: &[u8]) -> Option<OwnFlag> {
    match arg {
        b"--version" | b"-v" => Some(OwnFlag::Version),
        b"--help" | b"-h" => Some(OwnFlag::Help),
        _ => None,
    }
}

const HELP: &str = "\
gpuhook-runtime: the runc wrapper that gives containerd's containers the GPUs they ask for.

containerd's runc shim runs it instead of runc (the runtime's options.BinaryName). For `create`
and `run` of a container that asks for GPUs (NVIDIA_VISIBLE_DEVICES, cdi.k8s.io/* annotations),
it adds the devices to the bundle's config.json; then it execs the real runc with the same
arguments. Every other command and container passes through unchanged.

Usage: gpuhook-runtime [runc global options] <runc command> [args]
       gpuhook-runtime --version | -v    this version, the runtime it wraps, and that runtime's version
       gpuhook-runtime --help | -h       this text (the wrapped runtime's own: runc --help)

Settings: $GPUHOOK_CONFIG, else /etc/gpuhook/config.toml ([runtime] runtimes = the runtimes to
wrap, first found wins; log-file, log-level, log-format = \"json\"|\"text\"). GPUHOOK_LOG_FORMAT
overrides log-format (runc's own --log-format is runc's, passed through).

Examples:
  gpuhook runtime configure --drop-in          # register it with containerd
  ctr run --rm --runc-binary /usr/local/bin/gpuhook-runtime --env NVIDIA_VISIBLE_DEVICES=0 \\
      docker.io/library/busybox:latest gpu-test ls /dev/nvidia0
";

#[cfg_attr(test, allow(dead_code))]
/// Prints our answer; for `--version` then execs the wrapped runtime's `--version`.
fn answer(flag: OwnFlag) -> c_int {
    let mut out = std::io::stdout().lock();
    if flag == OwnFlag::Help {
        return c_int::from(out.write_all(HELP.as_bytes()).is_err());
    }
    let version = concat!("gpuhook-runtime version ", env!("CARGO_PKG_VERSION"), "\n");
    let path = std::env::var_os(CONFIG_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let config = Config::load(path.as_deref()).unwrap_or_default();
    let rc = gpuhook_wrapper::runtime_config(&config);
    let path_env = std::env::var_os("PATH");
    let found = gpuhook_wrapper::find_runtime(
        &rc.runtimes,
        path_env.as_deref(),
        &PathBuf::from("/proc/self/exe"),
    );
    let Ok(runtime) = found else {
        let _ = out.write_all(version.as_bytes());
        let _ = out.flush();
        let names: Vec<String> = rc
            .runtimes
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        eprintln!(
            "gpuhook-runtime: error: no runtime to wrap: none of {} found on PATH; install runc or \
             list yours in [runtime] runtimes of gpuhook's config",
            names.join(", ")
        );
        return 1;
    };
    let wraps = format!("wraps: {}\n", runtime.display());
    if out
        .write_all(version.as_bytes())
        .and_then(|()| out.write_all(wraps.as_bytes()))
        .and_then(|()| out.flush())
        .is_err()
    {
        return 1;
    }
    let err = std::process::Command::new(&runtime)
        .arg(OsString::from("--version"))
        .exec();
    eprintln!(
        "gpuhook-runtime: error: cannot run {}: {err}",
        runtime.display()
    );
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runcs_own_version_and_help_spellings_are_ours() {
        assert_eq!(own_flag(b"--version"), Some(OwnFlag::Version));
        assert_eq!(own_flag(b"-v"), Some(OwnFlag::Version));
        assert_eq!(own_flag(b"--help"), Some(OwnFlag::Help));
        assert_eq!(own_flag(b"-h"), Some(OwnFlag::Help));
        for other in [&b"state"[..], b"--versions", b"-V", b"", b"list"] {
            assert_eq!(own_flag(other), None);
        }
        assert!(HELP.contains("Examples:"));
    }
}
