//! `gpuhook runtime configure --runtime docker|crio`: the same command line as for containerd,
//! mapped onto [`gpuhook_containerd::engine`] (nvidia-ctk's flags where they apply; the
//! containerd-only ones are refused by name rather than ignored).

use std::io::Write;
use std::path::PathBuf;

use gpuhook_containerd::engine::{configure_engine, Engine, EngineOptions, CRIO_DROP_IN};
use gpuhook_containerd::{ConfigureError, DEFAULT_DROP_IN, EXIT_UNCHANGED};

use super::{CliError, ConfigureArgs, RuntimeKind};

/// The library's options for `args` (whose runtime is Docker or CRI-O).
pub fn engine_options(args: &ConfigureArgs) -> Result<(Engine, EngineOptions), ConfigureError> {
    let engine = match args.runtime {
        RuntimeKind::Docker => Engine::Docker,
        RuntimeKind::Crio => Engine::Crio,
        RuntimeKind::Containerd => {
            return Err(ConfigureError::InvalidOption {
                option: "runtime",
                message: "containerd is configured by gpuhook_containerd::configure".into(),
            })
        }
    };
    for (given, flag) in [
        (args.privileged_host_devices, "--privileged-host-devices"),
        (args.pod_cdi_annotations, "--pod-cdi-annotations"),
        (args.in_place && engine == Engine::Docker, "--in-place"),
    ] {
        if given {
            return Err(ConfigureError::Unsupported {
                engine: engine.name(),
                what: flag,
                message: format!("{flag} is for --runtime containerd (or crio); drop it"),
            });
        }
    }
    let mut o = EngineOptions::defaults(engine);
    if let Some(c) = args
        .containerd_config
        .clone()
        .or_else(|| args.config.clone())
    {
        o.config = c;
    }
    o.drop_in = match (engine, &args.drop_in) {
        (Engine::Crio, _) if args.in_place => None,
        // `--drop-in` without a path: CRI-O's default drop-in, not containerd's.
        (Engine::Crio, Some(d)) if d.as_os_str() == DEFAULT_DROP_IN => Some(CRIO_DROP_IN.into()),
        (Engine::Crio, None) => Some(PathBuf::from(CRIO_DROP_IN)),
        (_, d) => d.clone(),
    };
    o.runtime_name = args.runtime_name.clone();
    o.binary = args.binary.clone();
    o.set_as_default = args.set_as_default;
    o.enable_cdi = args.enable_cdi;
    Ok((engine, o))
}

/// nvidia-ctk's `--config-source` and `--config-mode`: what gpuhook does is accepted, the rest
/// refused by name with what to use instead.
pub fn nvidia_modes(args: &ConfigureArgs) -> Result<(), ConfigureError> {
    match args.config_source.as_deref() {
        None | Some("file") => {}
        Some(other) => {
            return Err(ConfigureError::Unsupported {
                engine: "gpuhook runtime configure",
                what: "--config-source other than `file`",
                message: format!(
                    "{other:?}: gpuhook reads the config files themselves (CRI-O: with its \
                     drop-ins); give the file with --runtime-config"
                ),
            })
        }
    }
    match args.config_mode.as_deref() {
        None | Some("config" | "config-file") => Ok(()),
        Some("oci-hook" | "hook") => Err(ConfigureError::Unsupported {
            engine: "gpuhook runtime configure",
            what: "--config-mode oci-hook",
            message: "write the OCI hook file with `gpuhook hook install-oci-hook --hooks-dir DIR`"
                .into(),
        }),
        Some(other) => Err(ConfigureError::Unsupported {
            engine: "gpuhook runtime configure",
            what: "this --config-mode",
            message: format!("{other:?}: use `config` (the default)"),
        }),
    }
}

pub(super) fn run(args: &ConfigureArgs) -> Result<(), CliError> {
    nvidia_modes(args)?;
    let (engine, opts) = engine_options(args)?;
    let outcome = configure_engine(engine, &opts, args.dry_run)?;
    let mut out = std::io::stdout().lock();
    out.write_all(outcome.summary().as_bytes())
        .and_then(|()| out.flush())
        .map_err(|error| CliError::Stdout { error })?;
    tracing::info!(
        engine = engine.name(),
        config = %opts.config.display(),
        exit = outcome.exit_code(),
        "runtime configure"
    );
    if outcome.exit_code() == EXIT_UNCHANGED {
        std::process::exit(EXIT_UNCHANGED);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command, RuntimeCommand};

    fn parse(args: &[&str]) -> Result<(Engine, EngineOptions), ConfigureError> {
        let argv = ["gpuhook", "runtime", "configure"].iter().chain(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Runtime(RuntimeCommand::Configure(c)) = cli.command else {
            panic!("not runtime configure")
        };
        engine_options(&c)
    }

    #[test]
    fn nvidia_ctks_flags_mean_the_same() {
        // nvidia-ctk runtime configure --runtime=docker --config=... --nvidia-runtime-name ...
        let (e, o) = parse(&[
            "--runtime=docker",
            "--config=/t/daemon.json",
            "--nvidia-runtime-name",
            "nvidia",
            "--nvidia-runtime-path",
            "/usr/bin/gpuhook-runtime",
            "--nvidia-set-as-default",
            "--cdi.enabled",
        ])
        .unwrap();
        assert_eq!(e, Engine::Docker);
        assert_eq!(o.config, PathBuf::from("/t/daemon.json"));
        assert_eq!(o.runtime_name, "nvidia");
        assert_eq!(o.binary, PathBuf::from("/usr/bin/gpuhook-runtime"));
        assert!(o.set_as_default && o.enable_cdi && o.drop_in.is_none());
        let (_, o) = parse(&["--runtime", "docker"]).unwrap();
        assert_eq!(o.config, PathBuf::from("/etc/docker/daemon.json"));
    }

    #[test]
    fn crio_defaults_to_its_drop_in_and_in_place_edits_crio_conf() {
        let (e, o) = parse(&["--runtime", "crio"]).unwrap();
        assert_eq!(e, Engine::Crio);
        assert_eq!(o.config, PathBuf::from("/etc/crio/crio.conf"));
        assert_eq!(o.drop_in, Some(PathBuf::from(CRIO_DROP_IN)));
        let (_, o) = parse(&["--runtime", "crio", "--drop-in"]).unwrap();
        assert_eq!(o.drop_in, Some(PathBuf::from(CRIO_DROP_IN)));
        let (_, o) = parse(&["--runtime", "crio", "--drop-in-config", "/x/50-g.conf"]).unwrap();
        assert_eq!(o.drop_in, Some(PathBuf::from("/x/50-g.conf")));
        let (_, o) = parse(&["--runtime", "crio", "--in-place", "--runtime-config", "/c"]).unwrap();
        assert_eq!(o.drop_in, None);
        assert_eq!(o.config, PathBuf::from("/c"));
    }

    #[test]
    fn nvidia_ctks_config_source_and_mode_are_accepted_or_refused_by_name() {
        let args = |extra: &[&str]| {
            let argv = ["gpuhook", "runtime", "configure"].iter().chain(extra);
            let Command::Runtime(RuntimeCommand::Configure(c)) =
                Cli::try_parse_from(argv).unwrap().command
            else {
                panic!("not runtime configure")
            };
            nvidia_modes(&c)
        };
        assert!(args(&["--config-source", "file", "--config-mode", "config"]).is_ok());
        assert!(args(&["--config-mode=config-file"]).is_ok());
        let err = args(&["--config-source", "command"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--config-source") && err.contains("--runtime-config"),
            "{err}"
        );
        let err = args(&["--config-mode", "oci-hook"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("install-oci-hook"), "{err}");
        assert!(args(&["--config-mode", "bogus"]).is_err());
    }

    #[test]
    fn containerd_only_flags_are_refused_by_name() {
        for (args, flag) in [
            (
                &["--runtime", "docker", "--privileged-host-devices"][..],
                "--privileged-host-devices",
            ),
            (
                &["--runtime", "crio", "--pod-cdi-annotations"],
                "--pod-cdi-annotations",
            ),
            (&["--runtime", "docker", "--in-place"], "--in-place"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }
}
