//! CDI names: `vendor/class` kinds and `vendor/class=name` qualified device names.
//!
//! The spec gives regexes; these hand-written checks implement exactly those regexes so the crate
//! needs no regex engine:
//! - vendor and class: `^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`
//! - device name: `^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$`

use std::fmt;

/// Longest vendor (a DNS name).
pub const MAX_VENDOR_LEN: usize = 253;

/// Why a vendor, class, kind, device name or qualified name is not one (the message quotes the
/// value as given; callers cap what they echo).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what} is empty")]
    Empty { what: &'static str },
    #[error("{what} {value:?} must start with {first}")]
    BadStart {
        what: &'static str,
        value: String,
        first: &'static str,
    },
    #[error("{what} {value:?} contains {bad:?}; allowed: {allowed}")]
    BadChar {
        what: &'static str,
        value: String,
        bad: char,
        allowed: &'static str,
    },
    #[error("{what} {value:?} must end with a letter or digit")]
    BadEnd { what: &'static str, value: String },
    /// The value itself is left out: it is long, and callers name their input already.
    #[error("vendor is longer than {MAX_VENDOR_LEN} characters ({len})")]
    VendorTooLong { len: usize },
    #[error("kind {kind:?} is not of the form vendor/class (missing '/')")]
    NotAKind { kind: String },
    #[error("missing '=' between kind and device name")]
    NoEquals,
    #[error(
        "{input:?} is not a qualified CDI device name (vendor/class=name, e.g. nvidia.com/gpu=0)"
    )]
    NotQualified { input: String },
    /// [`QualifiedName::parse`]: the reason, after the input it is about.
    #[error("{input:?}: {reason}")]
    InName {
        input: String,
        reason: Box<NameError>,
    },
}

fn check(
    what: &'static str,
    s: &str,
    first: fn(char) -> bool,
    inner: fn(char) -> bool,
    first_desc: &'static str,
    inner_desc: &'static str,
) -> Result<(), NameError> {
    let mut chars = s.chars();
    let Some(c0) = chars.next() else {
        return Err(NameError::Empty { what });
    };
    if !first(c0) {
        return Err(NameError::BadStart {
            what,
            value: s.into(),
            first: first_desc,
        });
    }
    if let Some(bad) = s.chars().find(|&c| !inner(c)) {
        return Err(NameError::BadChar {
            what,
            value: s.into(),
            bad,
            allowed: inner_desc,
        });
    }
    if s.len() > 1 && !s.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(NameError::BadEnd {
            what,
            value: s.into(),
        });
    }
    Ok(())
}

fn vendor_inner(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// Checks a vendor (`nvidia.com`).
pub fn validate_vendor(vendor: &str) -> Result<(), NameError> {
    check(
        "vendor",
        vendor,
        |c| c.is_ascii_alphabetic(),
        vendor_inner,
        "a letter",
        "letters, digits, '_', '.', '-'",
    )?;
    if vendor.len() > MAX_VENDOR_LEN {
        return Err(NameError::VendorTooLong { len: vendor.len() });
    }
    Ok(())
}

/// Checks a class (`gpu`). A dot is allowed (but needs cdiVersion 0.6.0).
pub fn validate_class(class: &str) -> Result<(), NameError> {
    check(
        "class",
        class,
        |c| c.is_ascii_alphabetic(),
        vendor_inner,
        "a letter",
        "letters, digits, '_', '.', '-'",
    )
}

/// Checks a device name (`0`, `0:1`, `GPU-…`, `all`).
pub fn validate_device_name(name: &str) -> Result<(), NameError> {
    check(
        "device name",
        name,
        |c| c.is_ascii_alphanumeric(),
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'),
        "a letter or digit",
        "letters, digits, '_', '.', ':', '-'",
    )
}

/// Splits a kind `vendor/class` at the first `/` and checks both parts.
pub fn parse_kind(kind: &str) -> Result<(&str, &str), NameError> {
    let Some((vendor, class)) = kind.split_once('/') else {
        return Err(NameError::NotAKind { kind: kind.into() });
    };
    validate_vendor(vendor)?;
    validate_class(class)?;
    Ok((vendor, class))
}

/// A parsed `vendor/class=name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QualifiedName {
    pub vendor: String,
    pub class: String,
    pub name: String,
}

impl QualifiedName {
    /// Parses `vendor/class=name`: split at the first `=`, then the kind at the first `/`. The
    /// error names the input.
    pub fn parse(s: &str) -> Result<QualifiedName, NameError> {
        if !s.contains('=') {
            return Err(NameError::NotQualified { input: s.into() });
        }
        Self::parse_reason(s).map_err(|e| NameError::InName {
            input: s.into(),
            reason: Box::new(e),
        })
    }

    /// Like [`QualifiedName::parse`], but the error is only the reason (`vendor is empty`), for
    /// callers whose own error already names the input and the expected form.
    pub fn parse_reason(s: &str) -> Result<QualifiedName, NameError> {
        let Some((kind, name)) = s.split_once('=') else {
            return Err(NameError::NoEquals);
        };
        let (vendor, class) = parse_kind(kind)?;
        validate_device_name(name)?;
        Ok(QualifiedName {
            vendor: vendor.into(),
            class: class.into(),
            name: name.into(),
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

/// Builds `vendor/class=name` without checking.
pub fn qualified_name(vendor: &str, class: &str, name: &str) -> String {
    format!("{vendor}/{class}={name}")
}

/// True when `s` looks like a qualified name (has `/` before `=`), valid or not; lets callers
/// tell `nvidia.com/gpu=0` from a plain id such as `0` or `GPU-…`.
pub fn is_qualified_name(s: &str) -> bool {
    matches!(s.split_once('='), Some((kind, _)) if kind.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendors_and_classes() {
        for ok in ["nvidia.com", "a", "a-b_c.d9", "Vendor1"] {
            validate_vendor(ok).unwrap();
            validate_class(ok).unwrap();
        }
        for bad in ["", "1abc", "-a", "a-", "a/b", "a b", "a.", "é"] {
            assert!(validate_vendor(bad).is_err(), "{bad:?}");
            assert!(validate_class(bad).is_err(), "{bad:?}");
        }
        assert!(validate_vendor(&"a".repeat(254)).is_err());
    }

    #[test]
    fn device_names() {
        for ok in ["0", "0:1", "GPU-1234-abcd", "mig0:1", "all", "a.b_c"] {
            validate_device_name(ok).unwrap();
        }
        for bad in ["", ":0", "0:", "MIG-GPU-x/1/0", "a b", "-x", "x_"] {
            assert!(validate_device_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn qualified() {
        let q = QualifiedName::parse("nvidia.com/gpu=0:1").unwrap();
        assert_eq!(
            (q.vendor.as_str(), q.class.as_str(), q.name.as_str()),
            ("nvidia.com", "gpu", "0:1")
        );
        assert_eq!(q.to_string(), "nvidia.com/gpu=0:1");
        assert_eq!(q.kind(), "nvidia.com/gpu");
        assert!(q.is_kind("nvidia.com/gpu"));
        assert!(!q.is_kind("nvidia.com/gpux") && !q.is_kind("nvidia.com"));
        assert!(QualifiedName::parse("nvidia.com/gpu").is_err());
        assert!(QualifiedName::parse("gpu=0").is_err());
        assert!(QualifiedName::parse("nvidia.com/gpu=a=b").is_err());
        // Split at the first '/': the class cannot contain another one.
        assert!(QualifiedName::parse("a.com/b/c=0").is_err());
        assert!(is_qualified_name("nvidia.com/gpu=0"));
        assert!(!is_qualified_name("GPU-1"));
        assert_eq!(parse_kind("nvidia.com/gpu").unwrap(), ("nvidia.com", "gpu"));
        assert!(parse_kind("nvidia.com").is_err());
    }

    #[test]
    fn rejection_reasons_name_the_problem() {
        for (input, needle) in [
            ("nvidia.com/gpu", "missing '='"),
            ("nvidia.com=0", "not of the form vendor/class"),
            ("/gpu=0", "vendor is empty"),
            ("nvidia.com/=0", "class is empty"),
            ("nvidia.com/gpu=", "device name is empty"),
            ("1vendor/gpu=0", "must start with a letter"),
            ("nvidia.com-/gpu=0", "must end with a letter or digit"),
            ("nvi dia/gpu=0", "contains ' '"),
            ("nvidia.com/gpu=MIG-GPU-x/1/0", "contains '/'"),
            ("nvidia.com/gpu=-0", "must start with a letter or digit"),
            ("nvidia.com/gpu=0:", "must end with a letter or digit"),
            ("nvidia.com/gpu=a\u{0}b", "contains '\\0'"),
        ] {
            let reason = QualifiedName::parse_reason(input).unwrap_err().to_string();
            assert!(reason.contains(needle), "{input:?}: {reason}");
            let named = QualifiedName::parse(input).unwrap_err().to_string();
            assert!(named.starts_with(&format!("{input:?}")), "{named}");
        }
        let long = format!("{}/gpu=0", "a".repeat(254));
        assert!(QualifiedName::parse_reason(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than 253"));
        assert!(QualifiedName::parse("gpu0")
            .unwrap_err()
            .to_string()
            .contains("vendor/class=name, e.g. nvidia.com/gpu=0"));
    }
}
