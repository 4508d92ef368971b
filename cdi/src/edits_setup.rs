//! The arguments of our one hook, `gpuhook hook setup …`, as one typed value.
//!
//! The CDI generator encodes them ([`SetupHookArgs::to_args`], in [`super::edits_for`]'s hook);
//! the prestart hook (turning a spec's hooks into its plan), the runtime wrapper (taking the hook
//! over, `early-setup`) and `gpuhook hook setup` itself read them back with
//! [`SetupHookArgs::from_args`] and [`SetupLink::parse`]: one grammar, one link parser.
//!
//! The grammar is the CLI's (clap's): `--flag VALUE` or `--flag=VALUE`, flags in any order,
//! list flags repeatable. A spec's hook is input a spec author controls: every value is checked
//! here (a link must be an absolute container path without `..`), so no reader sees a bad one.

use std::path::PathBuf;

use super::{APPLICATION_PROFILE_FLAG, CUDA_COMPAT_FLAG, DISABLE_DEVICE_NODE_MODIFICATION_FLAG};

/// `--link TARGET::LINK`.
pub const LINK_FLAG: &str = "--link";
/// `--folder DIR` (repeatable): the container's library folders for its `ld.so.cache`.
pub const FOLDER_FLAG: &str = "--folder";
/// `--ldconfig-path PATH`: the host's ldconfig.
pub const LDCONFIG_FLAG: &str = "--ldconfig-path";
/// `--container-spec FILE`: the container's config.json (not in generated specs).
pub const CONTAINER_SPEC_FLAG: &str = "--container-spec";
/// `--mps-share NAME::PIPE_DIR` (repeatable): an MPS share whose daemon the container's user must
/// be able to use (gpu-mps-daemon's spec; checked before anything is changed).
pub const MPS_SHARE_FLAG: &str = "--mps-share";

/// Why a setup hook's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupArgsError {
    #[error("{flag} needs a value")]
    MissingValue { flag: String },
    #[error("unexpected {arg:?}")]
    Unexpected { arg: String },
    #[error("{flag} takes no value")]
    UnexpectedValue { flag: String },
    /// A `--link` value that is not `TARGET::LINK`.
    #[error(transparent)]
    Link(#[from] SetupLinkError),
    /// A `--mps-share` value that is not `NAME::PIPE_DIR`.
    #[error("--mps-share {value:?}: {reason}")]
    MpsShare { value: String, reason: &'static str },
}

/// Why a `--link` value is not `TARGET::LINK`; the message names the rule the value breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupLinkError {
    #[error("expected TARGET::LINK, e.g. libcuda.so.1::/usr/lib64/libcuda.so")]
    NoSeparator,
    #[error("TARGET and LINK must both be non-empty")]
    Empty,
    #[error("contains a NUL byte")]
    Nul,
    #[error("LINK {0:?} must be an absolute path in the container")]
    Relative(String),
    #[error("LINK {0:?} must not contain '..'")]
    DotDot(String),
}

/// One link of the setup hook: `LINK` (an absolute container path) pointing to `TARGET`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SetupLink {
    pub target: PathBuf,
    /// Absolute container path, without `..`.
    pub link: PathBuf,
}

impl SetupLink {
    /// Parses `TARGET::LINK`.
    pub fn parse(s: &str) -> Result<Self, SetupLinkError> {
        let (target, link) = s.split_once("::").ok_or(SetupLinkError::NoSeparator)?;
        if target.is_empty() || link.is_empty() {
            return Err(SetupLinkError::Empty);
        }
        if s.contains('\0') {
            return Err(SetupLinkError::Nul);
        }
        if !link.starts_with('/') {
            return Err(SetupLinkError::Relative(link.to_string()));
        }
        if link.split('/').any(|c| c == "..") {
            return Err(SetupLinkError::DotDot(link.to_string()));
        }
        Ok(SetupLink {
            target: target.into(),
            link: link.into(),
        })
    }

    /// `TARGET::LINK`; `None` when a path is not UTF-8 (it could not be a hook argument).
    fn encode(&self) -> Option<String> {
        Some(format!(
            "{}::{}",
            self.target.to_str()?,
            self.link.to_str()?
        ))
    }
}

/// One MPS share of the setup hook: the CDI name the container asked for and the host path of
/// its daemon's pipe directory (what the start check of the share reads).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SetupMpsShare {
    /// Qualified CDI device name (`nvidia.com/gpu-mps=0`).
    pub name: String,
    /// Absolute host path, without `..`.
    pub pipe_dir: PathBuf,
}

impl SetupMpsShare {
    /// Parses `NAME::PIPE_DIR`. A CDI name has no `/` after its `=`, so the first `::/` is
    /// the separator.
    pub fn parse(s: &str) -> Result<Self, SetupArgsError> {
        let bad = |reason| SetupArgsError::MpsShare {
            value: s.to_string(),
            reason,
        };
        let (name, rest) = s
            .split_once("::/")
            .ok_or_else(|| bad("expected NAME::PIPE_DIR with an absolute PIPE_DIR"))?;
        if s.contains('\0') {
            return Err(bad("contains a NUL byte"));
        }
        if !name.contains('/') || !name.contains('=') {
            return Err(bad(
                "NAME must be a qualified CDI name (vendor/class=device)",
            ));
        }
        let pipe_dir = format!("/{rest}");
        if pipe_dir.split('/').any(|c| c == "..") {
            return Err(bad("PIPE_DIR must not contain '..'"));
        }
        Ok(SetupMpsShare {
            name: name.to_string(),
            pipe_dir: pipe_dir.into(),
        })
    }

    /// `NAME::PIPE_DIR`; `None` when the path is not UTF-8.
    pub fn encode(&self) -> Option<String> {
        Some(format!("{}::{}", self.name, self.pipe_dir.to_str()?))
    }
}

/// What `gpuhook hook setup` does: the MPS shares' start check (before any change), links, the `params` override, the CUDA compat folder, the
/// application profile, then the `ld.so.cache` of `folders`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetupHookArgs {
    pub links: Vec<SetupLink>,
    pub ldconfig: Option<PathBuf>,
    pub folders: Vec<PathBuf>,
    pub disable_device_node_modification: bool,
    pub cuda_compat_host_driver_version: Option<String>,
    pub application_profile: bool,
    pub container_spec: Option<PathBuf>,
    pub mps_shares: Vec<SetupMpsShare>,
}

impl SetupHookArgs {
    /// True when the hook would do nothing (the generator then writes no hook).
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
            && self.folders.is_empty()
            && !self.disable_device_node_modification
            && self.cuda_compat_host_driver_version.is_none()
            && !self.application_profile
            && self.mps_shares.is_empty()
    }

    /// The flags, after `gpuhook hook setup`: links, ldconfig, folders, then the switches.
    /// Paths that are not UTF-8 are left out (the generator checks them first: `path_str`).
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                args.push(flag.to_string());
                args.push(v);
            }
        };
        for l in &self.links {
            push(LINK_FLAG, l.encode());
        }
        let path = |p: &PathBuf| p.to_str().map(str::to_string);
        push(LDCONFIG_FLAG, self.ldconfig.as_ref().and_then(path));
        for f in &self.folders {
            push(FOLDER_FLAG, path(f));
        }
        if self.disable_device_node_modification {
            args.push(DISABLE_DEVICE_NODE_MODIFICATION_FLAG.into());
        }
        if let Some(v) = &self.cuda_compat_host_driver_version {
            args.extend([CUDA_COMPAT_FLAG.to_string(), v.clone()]);
        }
        if self.application_profile {
            args.push(APPLICATION_PROFILE_FLAG.into());
        }
        if let Some(c) = self.container_spec.as_ref().and_then(path) {
            args.extend([CONTAINER_SPEC_FLAG.to_string(), c]);
        }
        for m in &self.mps_shares {
            if let Some(v) = m.encode() {
                args.extend([MPS_SHARE_FLAG.to_string(), v]);
            }
        }
        args
    }

    /// Reads the flags after `gpuhook hook setup` (any order, `--flag VALUE` or `--flag=VALUE`).
    pub fn from_args<S: AsRef<str>>(args: &[S]) -> Result<Self, SetupArgsError> {
        let mut out = SetupHookArgs::default();
        let mut it = args.iter().map(AsRef::as_ref);
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v)),
                _ => (arg, None),
            };
            let mut value = || -> Result<String, SetupArgsError> {
                inline
                    .or_else(|| it.next())
                    .map(str::to_string)
                    .ok_or_else(|| SetupArgsError::MissingValue {
                        flag: flag.to_string(),
                    })
            };
            match flag {
                LINK_FLAG => out.links.push(SetupLink::parse(&value()?)?),
                FOLDER_FLAG => out.folders.push(value()?.into()),
                LDCONFIG_FLAG => out.ldconfig = Some(value()?.into()),
                CUDA_COMPAT_FLAG => out.cuda_compat_host_driver_version = Some(value()?),
                CONTAINER_SPEC_FLAG => out.container_spec = Some(value()?.into()),
                MPS_SHARE_FLAG => out.mps_shares.push(SetupMpsShare::parse(&value()?)?),
                DISABLE_DEVICE_NODE_MODIFICATION_FLAG | APPLICATION_PROFILE_FLAG
                    if inline.is_some() =>
                {
                    return Err(SetupArgsError::UnexpectedValue {
                        flag: flag.to_string(),
                    })
                }
                DISABLE_DEVICE_NODE_MODIFICATION_FLAG => {
                    out.disable_device_node_modification = true
                }
                APPLICATION_PROFILE_FLAG => out.application_profile = true,
                other => {
                    return Err(SetupArgsError::Unexpected {
                        arg: other.to_string(),
                    })
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "edits_setup_tests.rs"]
mod tests;
