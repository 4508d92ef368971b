//! `NVIDIA_DRIVER_CAPABILITIES`: which groups of driver files a container gets.

use std::collections::BTreeSet;

use gpuhook_node::Capability;

use super::error::{preview, RequestError};

/// The default when the variable is unset or empty (non-legacy image).
pub const DEFAULT_CAPABILITIES: [Capability; 2] = [Capability::Utility, Capability::Compute];

/// Parses a capability name (`compute`, ... ; case-insensitive).
pub fn parse_capability(token: &str) -> Option<Capability> {
    Capability::ALL
        .into_iter()
        .find(|c| c.as_str().eq_ignore_ascii_case(token))
}

/// Parses `NVIDIA_DRIVER_CAPABILITIES` (`None` = unset) into the expanded set:
/// unset/empty → utility,compute (legacy image and unset → all); `all` → every capability;
/// `video` implies `compute` and `display` implies `graphics` (the libraries they need).
pub fn parse_capabilities(
    value: Option<&str>,
    legacy_image: bool,
) -> Result<BTreeSet<Capability>, RequestError> {
    let mut set = BTreeSet::new();
    match value {
        None if legacy_image => set.extend(Capability::ALL),
        None => set.extend(DEFAULT_CAPABILITIES),
        Some(value) => {
            for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                if token.eq_ignore_ascii_case("all") {
                    set.extend(Capability::ALL);
                } else {
                    let cap =
                        parse_capability(token).ok_or_else(|| RequestError::UnknownCapability {
                            token: preview(token),
                        })?;
                    set.insert(cap);
                }
            }
            if set.is_empty() {
                set.extend(DEFAULT_CAPABILITIES);
            }
        }
    }
    if set.contains(&Capability::Video) {
        set.insert(Capability::Compute);
    }
    if set.contains(&Capability::Display) {
        set.insert(Capability::Graphics);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Capability::*;

    fn caps(v: Option<&str>, legacy: bool) -> Vec<Capability> {
        parse_capabilities(v, legacy).unwrap().into_iter().collect()
    }

    #[test]
    fn defaults() {
        assert_eq!(caps(None, false), vec![Utility, Compute]);
        assert_eq!(caps(Some(""), false), vec![Utility, Compute]);
        assert_eq!(caps(Some(" , ,"), false), vec![Utility, Compute]);
        assert_eq!(caps(None, true), Capability::ALL.to_vec());
        // Legacy images only default to all when the variable is unset.
        assert_eq!(caps(Some(""), true), vec![Utility, Compute]);
    }

    #[test]
    fn every_token_and_all() {
        assert_eq!(caps(Some("utility"), false), vec![Utility]);
        assert_eq!(caps(Some("compute"), false), vec![Compute]);
        assert_eq!(caps(Some("graphics"), false), vec![Graphics]);
        assert_eq!(caps(Some("ngx"), false), vec![Ngx]);
        assert_eq!(caps(Some("compat32"), false), vec![Compat32]);
        assert_eq!(caps(Some("all"), false), Capability::ALL.to_vec());
        assert_eq!(caps(Some("utility,all"), false), Capability::ALL.to_vec());
        assert_eq!(
            caps(Some(" Compute , UTILITY "), false),
            vec![Utility, Compute]
        );
    }

    #[test]
    fn expansion() {
        assert_eq!(caps(Some("video"), false), vec![Compute, Video]);
        assert_eq!(caps(Some("display"), false), vec![Graphics, Display]);
        assert_eq!(
            caps(Some("video,display"), false),
            vec![Compute, Video, Graphics, Display]
        );
    }

    #[test]
    fn unknown_token_is_an_error() {
        let err = parse_capabilities(Some("compute,gaming"), false).unwrap_err();
        assert_eq!(
            err,
            RequestError::UnknownCapability {
                token: "gaming".into()
            }
        );
        assert!(
            err.to_string().contains("valid values are compute"),
            "{err}"
        );
        assert!(parse_capabilities(Some("compute;utility"), false).is_err());
        assert!(parse_capabilities(Some("none"), false).is_err());
    }
}
