//! Errors of request parsing and resolution.
//!
//! Every message names the offending input (variable, annotation or id) and, where there is one,
//! the fix, because the person reading it is a user whose container did not start.

use std::fmt;

/// Where a device request came from (the first source that yielded something wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestSource {
    /// `cdi.k8s.io/*` annotations (fully qualified CDI names).
    CdiAnnotations,
    /// `/dev/null` mounts under `/var/run/nvidia-container-devices/`.
    VolumeMounts,
    /// The `NVIDIA_VISIBLE_DEVICES` environment variable.
    EnvVar,
    /// A legacy CUDA image (`CUDA_VERSION` set, `NVIDIA_REQUIRE_CUDA` unset) without
    /// `NVIDIA_VISIBLE_DEVICES`: means `all`.
    LegacyImage,
}

impl RequestSource {
    /// Short stable name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestSource::CdiAnnotations => "cdi-annotations",
            RequestSource::VolumeMounts => "volume-mounts",
            RequestSource::EnvVar => "envvar",
            RequestSource::LegacyImage => "legacy-image",
        }
    }
}

impl fmt::Display for RequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestSource::CdiAnnotations => "the cdi.k8s.io/* annotations",
            RequestSource::VolumeMounts => "the /var/run/nvidia-container-devices/ volume mounts",
            RequestSource::EnvVar => "NVIDIA_VISIBLE_DEVICES",
            RequestSource::LegacyImage => "the legacy CUDA image default (all GPUs)",
        })
    }
}

/// A request that cannot be honoured. Nothing may be injected when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The OCI config does not have the expected shape.
    #[error("invalid OCI config: {field} {problem}")]
    InvalidConfig { field: String, problem: String },
    /// An environment entry without `=`.
    #[error("invalid OCI config: process.env[{index}] ({entry:?}) has no '=': every entry must be KEY=VALUE")]
    EnvEntryWithoutEquals { index: usize, entry: String },
    /// An input larger than a hardening limit.
    #[error("{what} exceeds the limit of {limit}: refusing to parse it")]
    LimitExceeded { what: String, limit: String },
    /// A device id that no grammar form accepts.
    #[error("invalid device id {id:?} in {origin}: {reason}")]
    InvalidDeviceId {
        id: String,
        origin: RequestSource,
        reason: String,
    },
    /// A CDI name that is not `vendor/class=name`.
    #[error("invalid CDI device name {name:?} in {origin}: {reason}; expected vendor/class=name, e.g. nvidia.com/gpu=0")]
    InvalidCdiName {
        name: String,
        origin: RequestSource,
        reason: String,
    },
    /// A well-formed id that matches no device of this node.
    #[error("unknown device {id:?} requested by {origin}: {hint}")]
    UnknownDevice {
        id: String,
        origin: RequestSource,
        hint: String,
    },
    /// A token of `NVIDIA_DRIVER_CAPABILITIES` that is not a capability.
    #[error("unknown driver capability {token:?} in NVIDIA_DRIVER_CAPABILITIES: valid values are compute, compat32, graphics, utility, video, display, ngx or all")]
    UnknownCapability { token: String },
    /// A requirement expression that does not parse.
    #[error("syntax error in {variable} at {token:?}: {reason}")]
    RequirementSyntax {
        variable: String,
        token: String,
        reason: SyntaxError,
    },
    /// A requirement that the node does not satisfy.
    #[error("requirement error: unsatisfied condition: {condition} ({variable}={expression:?}{on}){hint}")]
    RequirementUnsatisfied {
        variable: String,
        expression: String,
        condition: String,
        /// `", on GPU 0 (...)"` or empty.
        on: String,
        /// `", please update your driver ..."` or empty.
        hint: String,
    },
    /// A variable only a privileged container may use.
    #[error("{variable} requires a privileged container (CAP_SYS_ADMIN in process.capabilities.bounding); drop the variable or run the container privileged")]
    NotPrivileged { variable: String },
    /// A feature NVIDIA's legacy mode enables (`NVIDIA_GDS=enabled`, ...) that gpuhook does not
    /// inject: refused rather than silently dropped.
    #[error("{variable}=enabled is not supported by gpuhook: it does not inject {what}; drop the variable, or give the container those devices another way (a CDI spec of their vendor, or a device plugin)")]
    UnsupportedFeature {
        variable: &'static str,
        what: &'static str,
    },
    /// Any other malformed variable.
    #[error("invalid {variable}: {reason}")]
    InvalidValue { variable: String, reason: String },
}

impl RequestError {
    pub(crate) fn invalid_config(field: &str, problem: impl Into<String>) -> Self {
        RequestError::InvalidConfig {
            field: field.to_string(),
            problem: problem.into(),
        }
    }

    pub(crate) fn limit(what: impl Into<String>, limit: impl Into<String>) -> Self {
        RequestError::LimitExceeded {
            what: what.into(),
            limit: limit.into(),
        }
    }

    pub(crate) fn invalid_value(variable: &str, reason: impl Into<String>) -> Self {
        RequestError::InvalidValue {
            variable: variable.to_string(),
            reason: reason.into(),
        }
    }
}

/// Quotes at most 64 characters of an untrusted string for an error message.
pub(crate) fn preview(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

/// Why one condition of a requirement expression (`cuda>=12.4`, `brand=tesla`) does not parse;
/// the `reason` of [`RequestError::RequirementSyntax`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("empty condition (stray ',')")]
    EmptyCondition,
    #[error("expected a name: cuda, driver, arch or brand")]
    NoName,
    #[error("unknown name {name:?}: expected cuda, driver, arch or brand")]
    UnknownName { name: String },
    #[error("expected an operator (=, !=, <, <=, >, >=) after {name:?}")]
    NoOperator { name: String },
    #[error("missing value after {name}{op}")]
    NoValue { name: String, op: &'static str },
    #[error("brand only supports = and !=")]
    BrandOperator,
    /// `value` is capped (`preview`): the container chooses it.
    #[error("invalid brand {value:?}: expected letters, digits, '-' or '_'")]
    InvalidBrand { value: String },
    /// `value` is capped (`preview`): the container chooses it.
    #[error("invalid version {value:?}: expected a dotted number such as 12.4")]
    InvalidVersion { value: String },
}
