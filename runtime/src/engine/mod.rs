//! `gpuhook runtime configure --runtime docker|crio`: the options and outcome shared by the
//! Docker ([`crate::docker`]) and CRI-O ([`crate::crio`]) edits, as `nvidia-ctk runtime
//! configure` has them (`cmd/nvidia-ctk/runtime/configure/configure.go`): the engine's config
//! file (`--config`), an optional drop-in (CRI-O only: Docker has none), the runtime's name and
//! binary, `--set-as-default`, `--cdi.enabled` (Docker's `features.cdi`; CRI-O has CDI on and
//! ignores it). Same rules as for containerd: nothing is written when nothing changes (exit
//! status 3), a backup of a replaced config, atomic writes, never over a file edited since it
//! was read, and the engine is never restarted.

pub mod crio;
pub mod docker;

use std::path::PathBuf;

use crate::configure::{ConfigureError, FileChange, EXIT_CHANGED, EXIT_UNCHANGED};

/// Docker's daemon config (nvidia-ctk's `defaultDockerConfigFilePath`).
pub const DOCKER_CONFIG: &str = "/etc/docker/daemon.json";
/// CRI-O's main config (nvidia-ctk's `defaultCrioConfigFilePath`).
pub const CRIO_CONFIG: &str = "/etc/crio/crio.conf";
/// Our CRI-O drop-in (nvidia-ctk writes `/etc/crio/crio.conf.d/99-nvidia.toml`).
pub const CRIO_DROP_IN: &str = "/etc/crio/crio.conf.d/99-gpuhook.toml";

/// The engines besides containerd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Docker,
    Crio,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Crio => "crio",
        }
    }

    /// How the engine picks up the change.
    fn apply_hint(self) -> &'static str {
        match self {
            Engine::Docker => "dockerd was NOT restarted: run `systemctl restart docker` to apply",
            Engine::Crio => {
                "CRI-O was NOT restarted: run `systemctl reload crio` (runtime handlers reload \
                 live) or `systemctl restart crio` to apply"
            }
        }
    }
}

/// What to configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    /// `daemon.json` or `crio.conf`.
    pub config: PathBuf,
    /// CRI-O's drop-in; `None` edits `config` in place (Docker: always).
    pub drop_in: Option<PathBuf>,
    /// The runtime name (`docker run --runtime NAME`; CRI-O's runtime handler).
    pub runtime_name: String,
    /// Absolute path of gpuhook-runtime.
    pub binary: PathBuf,
    pub set_as_default: bool,
    /// Docker: `features.cdi = true` (Docker 25+).
    pub enable_cdi: bool,
}

impl EngineOptions {
    /// The defaults of `engine`, as nvidia-ctk's (CRI-O: the drop-in).
    pub fn defaults(engine: Engine) -> EngineOptions {
        let (config, drop_in) = match engine {
            Engine::Docker => (DOCKER_CONFIG, None),
            Engine::Crio => (CRIO_CONFIG, Some(PathBuf::from(CRIO_DROP_IN))),
        };
        EngineOptions {
            config: config.into(),
            drop_in,
            runtime_name: crate::DEFAULT_RUNTIME_NAME.into(),
            binary: crate::DEFAULT_BINARY.into(),
            set_as_default: false,
            enable_cdi: false,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigureError> {
        let n = &self.runtime_name;
        if n.is_empty()
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ConfigureError::InvalidOption {
                option: "runtime name",
                message: format!("{n:?}: use letters, digits, '-', '_' or '.'"),
            });
        }
        for (option, path) in [
            ("binary", Some(&self.binary)),
            ("config", Some(&self.config)),
        ]
        .into_iter()
        .chain([("drop-in path", self.drop_in.as_ref())])
        {
            if let Some(p) = path.filter(|p| !p.is_absolute()) {
                return Err(ConfigureError::InvalidOption {
                    option,
                    message: format!("{}: give an absolute path", p.display()),
                });
            }
        }
        Ok(())
    }
}

/// What `configure` did (or would do) for Docker or CRI-O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOutcome {
    pub engine: Engine,
    /// The files written (or, with `dry_run`, to write); empty: already configured.
    pub files: Vec<FileChange>,
    pub notes: Vec<String>,
    pub dry_run: bool,
}

impl EngineOutcome {
    /// [`EXIT_CHANGED`] or [`EXIT_UNCHANGED`].
    pub fn exit_code(&self) -> i32 {
        if self.files.is_empty() {
            EXIT_UNCHANGED
        } else {
            EXIT_CHANGED
        }
    }

    /// Human summary for the CLI (stdout), ending with what to run next.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for n in &self.notes {
            s.push_str(&format!("- {n}\n"));
        }
        if self.files.is_empty() {
            s.push_str(&format!(
                "{} already has the gpuhook runtime; nothing changed, no restart needed\n",
                self.engine.name()
            ));
            return s;
        }
        for f in &self.files {
            if self.dry_run {
                s.push_str(&f.diff());
            } else {
                s.push_str(&format!("wrote {}", f.path.display()));
                if let Some(b) = &f.backup {
                    s.push_str(&format!(" (previous content saved as {})", b.display()));
                }
                s.push('\n');
            }
        }
        s.push_str(if self.dry_run {
            "Dry run: nothing was written.\n"
        } else {
            self.engine.apply_hint()
        });
        if !self.dry_run {
            s.push('\n');
        }
        s
    }
}

/// Plans and (unless `dry_run`) writes the change for `engine`.
pub fn configure_engine(
    engine: Engine,
    opts: &EngineOptions,
    dry_run: bool,
) -> Result<EngineOutcome, ConfigureError> {
    opts.validate()?;
    let (mut files, notes) = match engine {
        Engine::Docker => docker::plan(opts)?,
        Engine::Crio => crio::plan(opts)?,
    };
    if !dry_run {
        // Back up an engine's own config; our drop-in is ours (re-created by a re-run).
        let drop_in = opts.drop_in.clone();
        crate::configure::publish::publish(&mut files, |c| Some(&c.path) != drop_in.as_ref())?;
    }
    Ok(EngineOutcome {
        engine,
        files,
        notes,
        dry_run,
    })
}
