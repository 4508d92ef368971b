//! Reading a node profile: TOML text, a file or a built-in, each checked by [`crate::validate`]
//! before it is returned (kept apart from [`crate::profile`], the data, so that the rules and the
//! data do not import each other).

use std::path::{Path, PathBuf};

use crate::profile::NodeProfile;

impl NodeProfile {
    /// Parses and validates a profile from TOML text; `origin` names it in errors (a file name,
    /// `builtin:t4`, ...).
    pub fn from_toml_named(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let profile: NodeProfile = toml::from_str(text).map_err(|e| ProfileError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        crate::validate::validate(&profile).map_err(|issue| ProfileError::Invalid {
            origin: origin.to_string(),
            field: issue.field,
            problem: issue.problem,
        })?;
        Ok(profile)
    }

    /// Parses and validates a profile from TOML text (errors name it `inline TOML`).
    pub fn from_toml_str(text: &str) -> Result<Self, ProfileError> {
        Self::from_toml_named(text, "inline TOML")
    }

    /// Reads, parses and validates a profile file.
    pub fn from_file(path: &Path) -> Result<Self, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|error| ProfileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Self::from_toml_named(&text, &path.display().to_string())
    }

    /// A compiled-in reference profile by name (see [`builtin_names`]).
    pub fn builtin(name: &str) -> Result<Self, ProfileError> {
        let text = crate::builtin::text(name).ok_or_else(|| ProfileError::UnknownBuiltin {
            name: name.to_string(),
            known: builtin_names().join(", "),
        })?;
        Self::from_toml_named(text, &format!("builtin:{name}"))
    }

    /// A built-in profile name, or else a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self, ProfileError> {
        if crate::builtin::text(name_or_path).is_some() {
            Self::builtin(name_or_path)
        } else if name_or_path.ends_with(".toml") || name_or_path.contains('/') {
            Self::from_file(Path::new(name_or_path))
        } else {
            Self::builtin(name_or_path)
        }
    }
}

/// Names of the compiled-in reference profiles.
pub fn builtin_names() -> Vec<&'static str> {
    crate::builtin::names()
}

/// A profile that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The I/O error is part of the message, not a `source`: printed once.
    #[error("cannot read node profile {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("node profile {origin} is not valid TOML for a profile: {message}")]
    Parse { origin: String, message: String },
    #[error("node profile {origin}: {field}: {problem}")]
    Invalid {
        origin: String,
        field: String,
        problem: String,
    },
    #[error("unknown built-in node profile {name:?}: known profiles are {known} (or pass a path to a .toml file)")]
    UnknownBuiltin { name: String, known: String },
}
