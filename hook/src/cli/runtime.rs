//! `gpuhook runtime configure`: register gpuhook-runtime with containerd.
//!
//! A thin layer over [`gpuhook_containerd::configure`]: the summary goes to stdout, and the exit
//! status tells provisioning scripts whether to restart containerd (0 changed, 3 unchanged,
//! 1 error with nothing written, 2 usage error).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use gpuhook_containerd::{
    configure, ConfigureOptions, DEFAULT_BINARY, DEFAULT_CONFIG, DEFAULT_DROP_IN,
    DEFAULT_RUNTIME_NAME, EXIT_UNCHANGED,
};

use super::CliError;
use crate::config::Config;

/// `gpuhook runtime ...`.
#[derive(Debug, Clone, Subcommand)]
#[command(after_help = "Examples:\n  \
    gpuhook runtime configure --drop-in --dry-run\n  \
    gpuhook runtime configure --drop-in && systemctl restart containerd")]
pub enum RuntimeCommand {
    /// Add a gpuhook runtime to containerd's, Docker's or CRI-O's config
    #[command(
        long_about = "Add a gpuhook runtime to containerd's (default), Docker's or CRI-O's config.\n\n\
        --runtime docker adds runtimes.<name> = {\"args\": [], \"path\": --binary} to \
        /etc/docker/daemon.json, keeping every other key in place (`docker run --runtime <name>`; \
        `docker run --gpus` needs only the nvidia-container-runtime-hook link on dockerd's PATH). \
        --runtime crio writes [crio.runtime.runtimes.<name>] (runtime_path, runtime_type = \"oci\" \
        and the settings of the node's runc/crun/default runtime, monitor_path included) to \
        /etc/crio/crio.conf.d/99-gpuhook.toml, or into crio.conf with --in-place.\n\n\
        Adds a runtime (runtime_type io.containerd.runc.v2, options.BinaryName = --binary) to the \
        CRI plugin table of the config version found (v1, v2 or v3), copying the options of the \
        existing runc runtime (SystemdCgroup included). With --drop-in the change goes to a separate \
        file that the main config imports. Files are written atomically, with a backup, and only \
        when something changed. containerd is never restarted: exit status 0 means a file changed \
        (restart containerd), 3 means everything was already configured, 1 an error (nothing \
        written). Select the runtime in Kubernetes with a RuntimeClass whose handler is \
        --runtime-name.",
        after_help = "Examples:\n  \
        gpuhook runtime configure --drop-in --dry-run          # show the diff, write nothing\n  \
        gpuhook runtime configure --runtime docker --binary /usr/bin/gpuhook-runtime --set-as-default\n  \
        gpuhook runtime configure --runtime crio --runtime-name gpuhook --dry-run\n  \
        gpuhook runtime configure --drop-in; [ $? = 0 ] && systemctl restart containerd\n  \
        gpuhook runtime configure --containerd-config /etc/containerd/config.toml \\\n      \
        --drop-in-config /etc/containerd/conf.d/99-gpuhook.toml --binary /usr/local/bin/gpuhook-runtime"
    )]
    Configure(ConfigureArgs),
}

/// Runtimes `configure` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeKind {
    Containerd,
    /// Docker: a runtime in /etc/docker/daemon.json (`docker run --runtime NAME`)
    Docker,
    /// CRI-O: a runtime handler in a drop-in of /etc/crio/crio.conf.d/ (or crio.conf)
    Crio,
}

/// Arguments of `gpuhook runtime configure`.
#[derive(Debug, Clone, Args)]
pub struct ConfigureArgs {
    /// Which runtime to configure
    #[arg(long, value_enum, default_value = "containerd")]
    pub runtime: RuntimeKind,
    /// The runtime's config file [default: /etc/containerd/config.toml, /etc/docker/daemon.json,
    /// /etc/crio/crio.conf]
    #[arg(
        long = "runtime-config",
        visible_alias = "containerd-config",
        value_name = "FILE",
        conflicts_with = "config"
    )]
    pub containerd_config: Option<PathBuf>,
    /// nvidia-ctk's spelling of --runtime-config (everywhere else --config is gpuhook's own
    /// config.toml)
    #[arg(long, value_name = "FILE", hide = true)]
    pub config: Option<PathBuf>,
    /// Write the runtime to a drop-in file (default /etc/containerd/conf.d/99-gpuhook.toml) and
    /// add it to the main config's imports; --drop-in-config PATH (nvidia-ctk's name) and
    /// --drop-in-path PATH are the same
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = DEFAULT_DROP_IN,
          visible_alias = "drop-in-config", alias = "drop-in-path")]
    pub drop_in: Option<PathBuf>,
    /// CRI-O: edit crio.conf itself instead of writing the drop-in
    /// /etc/crio/crio.conf.d/99-gpuhook.toml (nvidia-ctk's `--drop-in-config=""`)
    #[arg(long, conflicts_with = "drop_in")]
    pub in_place: bool,
    /// Name of the runtime entry (the RuntimeClass handler)
    #[arg(long, value_name = "NAME", default_value = DEFAULT_RUNTIME_NAME,
          alias = "nvidia-runtime-name")]
    pub runtime_name: String,
    /// Absolute path of the gpuhook-runtime binary (options.BinaryName; Docker's `path`;
    /// CRI-O's `runtime_path`)
    #[arg(long, value_name = "PATH", default_value = DEFAULT_BINARY,
          aliases = ["nvidia-runtime-path", "runtime-path"])]
    pub binary: PathBuf,
    /// Also make it the default runtime (needs --privileged-host-devices: a default runtime
    /// must not hide host devices from privileged pods such as CSI drivers)
    #[arg(long, alias = "nvidia-set-as-default")]
    pub set_as_default: bool,
    /// Privileged containers of this runtime see all host devices, as with runc
    /// (privileged_without_host_devices = false)
    #[arg(long)]
    pub privileged_host_devices: bool,
    /// Turn on CDI: containerd's enable_cdi (1.7+), Docker's features.cdi (25+); CRI-O has it on
    #[arg(long, visible_alias = "cdi.enabled", alias = "cdi.enable")]
    pub enable_cdi: bool,
    /// Also pass cdi.k8s.io/* pod annotations to the runtime (pod_annotations); honoured only
    /// for devices in allow-cdi-devices-from-pod-annotations of gpuhook's config
    #[arg(long)]
    pub pod_cdi_annotations: bool,
    /// Print the diff instead of writing (exit status as if written)
    #[arg(long)]
    pub dry_run: bool,
    /// nvidia-ctk's `--config-source`: only `file` (the config files are read; `command`, the
    /// engine's `config dump`, is refused by name)
    #[arg(long, value_name = "SOURCE", hide = true)]
    pub config_source: Option<String>,
    /// nvidia-ctk's `--config-mode`: only `config`/`config-file` (the OCI hook file is
    /// `gpuhook hook install-oci-hook`)
    #[arg(long, value_name = "MODE", hide = true)]
    pub config_mode: Option<String>,
}

/// The deprecation warning for `runtime configure --config`.
pub const CONFIG_DEPRECATED: &str =
    "`runtime configure --config` is deprecated: use --runtime-config (or --containerd-config; --config is gpuhook's own config.toml)";

impl ConfigureArgs {
    /// containerd's config file, from --containerd-config or the deprecated --config.
    pub fn containerd_config(&self) -> PathBuf {
        self.containerd_config
            .clone()
            .or_else(|| self.config.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }

    /// The library's options.
    pub fn options(&self) -> ConfigureOptions {
        ConfigureOptions {
            config: self.containerd_config(),
            drop_in: self.drop_in.clone(),
            runtime_name: self.runtime_name.clone(),
            binary: self.binary.clone(),
            set_as_default: self.set_as_default,
            enable_cdi: self.enable_cdi,
            pod_cdi_annotations: self.pod_cdi_annotations,
            privileged_host_devices: self.privileged_host_devices,
        }
    }
}

pub(super) fn run(command: &RuntimeCommand, _config: &Config) -> Result<(), CliError> {
    match command {
        RuntimeCommand::Configure(args) if args.runtime != RuntimeKind::Containerd => {
            engine::run(args)
        }
        RuntimeCommand::Configure(args) => {
            engine::nvidia_modes(args)?;
            if args.config.is_some() {
                tracing::warn!("{CONFIG_DEPRECATED}");
            }
            let outcome = configure(&args.options(), args.dry_run)?;
            let mut out = std::io::stdout().lock();
            out.write_all(outcome.summary().as_bytes())
                .and_then(|()| out.flush())
                .map_err(|error| CliError::Stdout { error })?;
            tracing::info!(
                containerd_config = %args.containerd_config().display(),
                exit = outcome.exit_code(),
                "runtime configure"
            );
            if outcome.exit_code() == EXIT_UNCHANGED {
                // Not an error, but scripts need to tell it apart from "changed".
                std::process::exit(EXIT_UNCHANGED);
            }
            Ok(())
        }
    }
}

#[path = "runtime_engine.rs"]
mod engine;

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn configure_args(args: &[&str]) -> ConfigureArgs {
        let argv = ["gpuhook", "runtime", "configure"].iter().chain(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Runtime(RuntimeCommand::Configure(c)) = cli.command else {
            panic!("not runtime configure")
        };
        c
    }

    #[test]
    fn defaults_match_the_library() {
        let c = configure_args(&[]);
        assert_eq!(c.options(), ConfigureOptions::default());
        assert!(!c.dry_run);
    }

    #[test]
    fn drop_in_takes_an_optional_path() {
        let c = configure_args(&["--drop-in", "--dry-run"]);
        assert_eq!(c.drop_in, Some(PathBuf::from(DEFAULT_DROP_IN)));
        assert!(c.dry_run);
        let c = configure_args(&["--drop-in", "/etc/containerd/conf.d/50-gpu.toml"]);
        assert_eq!(
            c.drop_in,
            Some(PathBuf::from("/etc/containerd/conf.d/50-gpu.toml"))
        );
        let c = configure_args(&[
            "--drop-in=/x.toml",
            "--binary",
            "/opt/bin/gpuhook-runtime",
            "--runtime-name",
            "nvidia",
            "--set-as-default",
            "--enable-cdi",
            "--containerd-config",
            "/c.toml",
        ]);
        let o = c.options();
        assert_eq!(o.drop_in, Some(PathBuf::from("/x.toml")));
        assert_eq!(o.binary, PathBuf::from("/opt/bin/gpuhook-runtime"));
        assert_eq!(o.runtime_name, "nvidia");
        assert!(o.set_as_default && o.enable_cdi);
        assert_eq!(o.config, PathBuf::from("/c.toml"));
    }

    #[test]
    fn nvidia_and_documented_drop_in_spellings_are_accepted() {
        for flag in ["--drop-in-config", "--drop-in-path"] {
            let c = configure_args(&[flag, "/etc/containerd/conf.d/50-gpu.toml"]);
            assert_eq!(
                c.options().drop_in,
                Some(PathBuf::from("/etc/containerd/conf.d/50-gpu.toml")),
                "{flag}"
            );
        }
    }

    #[test]
    fn old_config_spelling_still_names_containerds_file() {
        let c = configure_args(&["--config", "/old.toml"]);
        assert_eq!(c.options().config, PathBuf::from("/old.toml"));
        let both = [
            "gpuhook",
            "runtime",
            "configure",
            "--config",
            "/a",
            "--containerd-config",
            "/b",
        ];
        assert!(Cli::try_parse_from(both).is_err(), "one file, one flag");
        let c = configure_args(&["--set-as-default", "--privileged-host-devices"]);
        assert!(c.options().set_as_default && c.options().privileged_host_devices);
    }
}
