//! MIG profile names: `[<C>c.]<G>g.<GB>gb[+attr[,attr…] | -attr[,attr…]]`.
//!
//! The grammar is go-nvlib v0.12.0's (`pkg/nvlib/device/mig_profile.go`, the version mig-parted
//! v0.15.0 vendors): `C`, `G` and `GB` are decimal numbers; attributes are alphanumerics and `.`,
//! unique, not empty, not starting with a digit nor starting or ending with `.`; `+` and `-`
//! attributes never mix. When `C` equals `G` the `Nc.` prefix is dropped from the canonical name
//! (`1c.1g.5gb` is `1g.5gb`). Whether a GPU has the profile is a different question
//! ([`crate::GpuState::profile`]).

use std::fmt;

/// A parsed MIG profile name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigProfile {
    /// Compute slices of the compute instance (`C`, equal to `G` when not written).
    pub compute: u32,
    /// Slices of the GPU instance (`G`).
    pub gpu: u32,
    /// Memory in GB (`GB`).
    pub memory_gb: u32,
    /// `+attr` (true) or `-attr` (false) attributes, in the order written.
    pub attributes: Vec<String>,
    /// True for `-attr` (negative) attributes.
    pub negative: bool,
}

/// Why a profile name is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MIG profile name {name:?}: {reason} (the form is [<C>c.]<G>g.<GB>gb[+attr,…|-attr,…], e.g. 1g.10gb or 1g.10gb+me)")]
pub struct ProfileNameError {
    pub name: String,
    pub reason: &'static str,
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn valid_attribute(a: &str) -> bool {
    !a.is_empty()
        && a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
        && !a.as_bytes()[0].is_ascii_digit()
        && !a.starts_with('.')
        && !a.ends_with('.')
}

impl MigProfile {
    /// Parses a profile name with go-nvlib's grammar.
    pub fn parse(name: &str) -> Result<MigProfile, ProfileNameError> {
        let err = |reason| ProfileNameError {
            name: name.to_string(),
            reason,
        };
        let (base, attrs, negative) = match (name.find('+'), name.find('-')) {
            (Some(_), Some(_)) => return Err(err("'+' and '-' attributes cannot be mixed")),
            (Some(i), None) => (&name[..i], Some(&name[i + 1..]), false),
            (None, Some(i)) => (&name[..i], Some(&name[i + 1..]), true),
            (None, None) => (name, None, false),
        };
        let parts: Vec<&str> = base.split('.').collect();
        let (c, g, gb) = match parts.as_slice() {
            [g, gb] => (None, *g, *gb),
            [c, g, gb] => (Some(*c), *g, *gb),
            _ => {
                return Err(err(
                    "expected 2 or 3 '.'-separated parts before the attributes",
                ))
            }
        };
        let compute = match c {
            Some(c) => Some(
                c.strip_suffix('c')
                    .and_then(number)
                    .ok_or_else(|| err("the compute part must be <number>c"))?,
            ),
            None => None,
        };
        let gpu = g
            .strip_suffix('g')
            .and_then(number)
            .ok_or_else(|| err("the GPU-instance part must be <number>g"))?;
        let memory_gb = gb
            .strip_suffix("gb")
            .and_then(number)
            .ok_or_else(|| err("the memory part must be <number>gb"))?;
        let mut attributes: Vec<String> = Vec::new();
        if let Some(attrs) = attrs {
            for a in attrs.split(',') {
                if !valid_attribute(a) {
                    return Err(err("an attribute is empty, starts with a digit or '.', ends with '.', or has a character other than [A-Za-z0-9.]"));
                }
                if attributes.iter().any(|x| x == a) {
                    return Err(err("an attribute is repeated"));
                }
                attributes.push(a.to_string());
            }
        }
        Ok(MigProfile {
            compute: compute.unwrap_or(gpu),
            gpu,
            memory_gb,
            attributes,
            negative,
        })
    }

    /// The GPU-instance part of the name (`1g.10gb+me` of `1c.1g.10gb+me`): what identifies the
    /// GPU instance profile.
    pub fn gi_name(&self) -> String {
        let mut s = format!("{}g.{}gb", self.gpu, self.memory_gb);
        self.push_attributes(&mut s);
        s
    }

    fn push_attributes(&self, s: &mut String) {
        if !self.attributes.is_empty() {
            s.push(if self.negative { '-' } else { '+' });
            s.push_str(&self.attributes.join(","));
        }
    }
}

impl fmt::Display for MigProfile {
    /// The canonical name (go-nvlib's `String()`): `Nc.` only when it differs from `G`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        if self.compute != self.gpu {
            s.push_str(&format!("{}c.", self.compute));
        }
        s.push_str(&format!("{}g.{}gb", self.gpu, self.memory_gb));
        self.push_attributes(&mut s);
        f.write_str(&s)
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
