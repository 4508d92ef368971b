//! Fully qualified CDI device names (`vendor/class=name`).
//!
//! Parsed here rather than borrowed from the CDI crate because the request parser must validate
//! untrusted annotation values on the container start path with no other dependency, and the rules
//! are short (see the CDI spec: vendor and class `^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`, device
//! name `^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$`).

use std::fmt;

/// The kind NVIDIA GPUs are published under.
pub const NVIDIA_GPU_KIND: &str = "nvidia.com/gpu";

/// Longest vendor (a DNS name).
const MAX_VENDOR_LEN: usize = 253;

/// A validated `vendor/class=name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QualifiedName {
    pub vendor: String,
    pub class: String,
    pub name: String,
}

impl QualifiedName {
    /// Parses and validates `vendor/class=name` (split at the first `=` and the first `/`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (kind, name) = s.split_once('=').ok_or("missing '='")?;
        let (vendor, class) = kind
            .split_once('/')
            .ok_or("missing '/' between vendor and class")?;
        validate_vendor(vendor)?;
        validate_class(class)?;
        validate_device_name(name)?;
        Ok(QualifiedName {
            vendor: vendor.to_string(),
            class: class.to_string(),
            name: name.to_string(),
        })
    }

    /// `vendor/class`.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }

    /// Whether this name is of kind `kind` (`vendor/class`).
    pub fn is_kind(&self, kind: &str) -> bool {
        kind.split_once('/')
            .is_some_and(|(v, c)| v == self.vendor && c == self.class)
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}={}", self.vendor, self.class, self.name)
    }
}

/// Checks a CDI vendor (`nvidia.com`).
pub fn validate_vendor(vendor: &str) -> Result<(), String> {
    if vendor.len() > MAX_VENDOR_LEN {
        return Err(format!("vendor is longer than {MAX_VENDOR_LEN} characters"));
    }
    validate_kind_part("vendor", vendor)
}

/// Checks a CDI class (`gpu`).
pub fn validate_class(class: &str) -> Result<(), String> {
    validate_kind_part("class", class)
}

fn validate_kind_part(what: &str, s: &str) -> Result<(), String> {
    let first = s.chars().next().ok_or_else(|| format!("empty {what}"))?;
    if !first.is_ascii_alphabetic() {
        return Err(format!("{what} {s:?} must start with a letter"));
    }
    if !s.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("{what} {s:?} must end with a letter or digit"));
    }
    match s
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        Some(c) => Err(format!(
            "{what} {s:?} contains {c:?}; allowed are letters, digits, '_', '.', '-'"
        )),
        None => Ok(()),
    }
}

/// Checks a CDI device name (`0`, `GPU-…`, `0:1`).
pub fn validate_device_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty device name".into());
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err(format!(
            "device name {name:?} must start and end with a letter or digit"
        ));
    }
    match name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        Some(c) => Err(format!(
            "device name {name:?} contains {c:?}; allowed are letters, digits, '_', '.', ':', '-'"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_names() {
        let q = QualifiedName::parse("nvidia.com/gpu=0").unwrap();
        assert_eq!(
            (q.vendor.as_str(), q.class.as_str(), q.name.as_str()),
            ("nvidia.com", "gpu", "0")
        );
        assert!(q.is_kind(NVIDIA_GPU_KIND));
        assert_eq!(q.to_string(), "nvidia.com/gpu=0");
        assert_eq!(q.kind(), "nvidia.com/gpu");
        let mig = QualifiedName::parse("nvidia.com/gpu=MIG-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab")
            .unwrap();
        assert_eq!(mig.name, "MIG-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab");
        assert_eq!(
            QualifiedName::parse("nvidia.com/gpu=0:1").unwrap().name,
            "0:1"
        );
        assert_eq!(
            QualifiedName::parse("vendor.io/my.class=a_b-c")
                .unwrap()
                .class,
            "my.class"
        );
        assert!(!QualifiedName::parse("example.com/net=x")
            .unwrap()
            .is_kind(NVIDIA_GPU_KIND));
    }

    #[test]
    fn rejects_invalid_names() {
        for (input, needle) in [
            ("nvidia.com/gpu", "missing '='"),
            ("nvidia.com=0", "missing '/'"),
            ("/gpu=0", "empty vendor"),
            ("nvidia.com/=0", "empty class"),
            ("nvidia.com/gpu=", "empty device name"),
            ("1vendor/gpu=0", "must start with a letter"),
            ("nvidia.com-/gpu=0", "must end with a letter or digit"),
            ("nvi dia/gpu=0", "contains ' '"),
            ("nvidia.com/gpu=MIG-GPU-x/1/0", "contains '/'"),
            ("nvidia.com/gpu=-0", "must start and end"),
            ("nvidia.com/gpu=0:", "must start and end"),
            ("nvidia.com/gpu=a\u{0}b", "contains '\\0'"),
        ] {
            let err = QualifiedName::parse(input).unwrap_err();
            assert!(err.contains(needle), "{input:?}: {err}");
        }
        let long = format!("{}/gpu=0", "a".repeat(254));
        assert!(QualifiedName::parse(&long)
            .unwrap_err()
            .contains("longer than 253"));
    }
}
