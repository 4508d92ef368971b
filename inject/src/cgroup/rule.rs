//! Device cgroup rules in the OCI shape (`linux.resources.devices`).

use crate::error::{InjectError, Result};

/// `a` (all), `c` or `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    All,
    Char,
    Block,
}

/// Access bits; values are the kernel's `BPF_DEVCG_ACC_*` (mknod 1, read 2, write 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(pub u8);

impl Access {
    pub const MKNOD: u8 = 1;
    pub const READ: u8 = 2;
    pub const WRITE: u8 = 4;
    pub const ALL: Access = Access(7);

    /// Parse `rwm` (any non-empty subset, each letter at most once).
    pub fn parse(s: &str) -> Result<Access> {
        let bad = |reason: &str| InjectError::Invalid {
            what: "device access",
            value: s.to_string(),
            reason: reason.to_string(),
        };
        let mut bits = 0u8;
        for c in s.chars() {
            let b = match c {
                'r' => Self::READ,
                'w' => Self::WRITE,
                'm' => Self::MKNOD,
                _ => return Err(bad("only the letters r, w and m are allowed")),
            };
            if bits & b != 0 {
                return Err(bad("a letter is repeated"));
            }
            bits |= b;
        }
        if bits == 0 {
            return Err(bad("empty; use e.g. \"rwm\""));
        }
        Ok(Access(bits))
    }

    fn letters(self) -> String {
        let mut s = String::new();
        if self.0 & Self::READ != 0 {
            s.push('r');
        }
        if self.0 & Self::WRITE != 0 {
            s.push('w');
        }
        if self.0 & Self::MKNOD != 0 {
            s.push('m');
        }
        s
    }
}

/// One allow/deny rule; `None` major/minor means any (`*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRule {
    pub allow: bool,
    pub kind: DeviceType,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: Access,
}

impl DeviceRule {
    /// Build and validate a rule.
    pub fn new(
        allow: bool,
        kind: DeviceType,
        major: Option<u32>,
        minor: Option<u32>,
        access: &str,
    ) -> Result<Self> {
        Ok(DeviceRule {
            allow,
            kind,
            major,
            minor,
            access: Access::parse(access)?,
        })
    }

    /// `c major:minor rwm`, allowed: what we grant for an injected GPU node.
    pub fn allow_char(major: u32, minor: u32) -> Self {
        DeviceRule {
            allow: true,
            kind: DeviceType::Char,
            major: Some(major),
            minor: Some(minor),
            access: Access::ALL,
        }
    }

    /// The cgroup v1 `devices.allow` / `devices.deny` line, e.g. `c 195:0 rwm`.
    pub fn v1_line(&self) -> String {
        let t = match self.kind {
            DeviceType::All => 'a',
            DeviceType::Char => 'c',
            DeviceType::Block => 'b',
        };
        let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
        format!(
            "{t} {}:{} {}",
            n(self.major),
            n(self.minor),
            self.access.letters()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_parsing() {
        assert_eq!(Access::parse("rwm").unwrap(), Access::ALL);
        assert_eq!(Access::parse("r").unwrap(), Access(2));
        assert!(Access::parse("").is_err());
        assert!(Access::parse("rr").is_err());
        assert!(Access::parse("rwx").is_err());
    }

    #[test]
    fn v1_lines() {
        assert_eq!(DeviceRule::allow_char(195, 0).v1_line(), "c 195:0 rwm");
        let r = DeviceRule::new(false, DeviceType::All, None, None, "rw").unwrap();
        assert_eq!(r.v1_line(), "a *:* rw");
    }
}
