//! The smaller variables: MIG config/monitor access, IMEX channels and the MPS pipe directory.

use super::error::{preview, RequestError};
use super::limits::{self, MAX_ID_ENTRIES, MAX_ID_LIST_BYTES};

/// `NVIDIA_IMEX_CHANNELS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ImexChannels {
    /// Unset, empty, or `none`.
    #[default]
    None,
    /// `all`: every channel the node has.
    All,
    /// `/dev/nvidia-caps-imex-channels/channel<N>` for each id, deduplicated, in request order.
    Ids(Vec<u32>),
}

/// Parses `NVIDIA_MIG_CONFIG_DEVICES` / `NVIDIA_MIG_MONITOR_DEVICES`: only `all` is meaningful.
/// Unset, empty, `none` or `void` → false; `all` → true (privileged containers only).
pub fn parse_mig_access(
    variable: &str,
    value: Option<&str>,
    privileged: bool,
) -> Result<bool, RequestError> {
    let value = value.map(str::trim).unwrap_or("");
    if value.is_empty() || value.eq_ignore_ascii_case("none") || value.eq_ignore_ascii_case("void")
    {
        return Ok(false);
    }
    if !value.eq_ignore_ascii_case("all") {
        return Err(RequestError::invalid_value(
            variable,
            format!(
                "{:?} is not supported; the only value is \"all\"",
                preview(value)
            ),
        ));
    }
    if !privileged {
        return Err(RequestError::NotPrivileged {
            variable: variable.to_string(),
        });
    }
    Ok(true)
}

/// The feature gates of NVIDIA's legacy mode (toolkit `internal/modifier/gated.go`,
/// `NewFeatureGatedModifier`: each acts only when its value is exactly `enabled`), with what each
/// would inject.
pub const FEATURE_GATES: [(&str, &str); 4] = [
    (
        "NVIDIA_GDS",
        "GPUDirect Storage (/dev/nvidia-fs*, cufile.json)",
    ),
    ("NVIDIA_MOFED", "MOFED devices (/dev/infiniband/*)"),
    (
        "NVIDIA_NVSWITCH",
        "NVSwitch devices (/dev/nvidia-nvswitch*)",
    ),
    ("NVIDIA_GDRCOPY", "GDRCopy (/dev/gdrdrv)"),
];

/// Refuses a feature gate set to `enabled` (gpuhook injects none of them; NVIDIA's cdi mode
/// drops them without a word, its legacy mode injects them). Other values enable nothing, as in
/// NVIDIA's toolkit.
pub fn check_feature_gates<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<(), RequestError> {
    for (variable, what) in FEATURE_GATES {
        if get(variable) == Some("enabled") {
            return Err(RequestError::UnsupportedFeature { variable, what });
        }
    }
    Ok(())
}

/// Parses `NVIDIA_IMEX_CHANNELS` (`all`, `none`, or comma-separated decimal channel ids).
pub fn parse_imex_channels(value: Option<&str>) -> Result<ImexChannels, RequestError> {
    const VAR: &str = "NVIDIA_IMEX_CHANNELS";
    let Some(value) = value else {
        return Ok(ImexChannels::None);
    };
    if value.len() > MAX_ID_LIST_BYTES {
        return Err(RequestError::limit(
            format!("{VAR} ({} bytes)", value.len()),
            limits::bytes(MAX_ID_LIST_BYTES),
        ));
    }
    let mut ids = Vec::new();
    let mut all = false;
    for (n, token) in value
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .enumerate()
    {
        if n == MAX_ID_ENTRIES {
            return Err(RequestError::limit(
                format!("{VAR} list"),
                format!("{MAX_ID_ENTRIES} entries"),
            ));
        }
        if token.eq_ignore_ascii_case("all") {
            all = true;
        } else if !token.eq_ignore_ascii_case("none") {
            let id = Some(token)
                .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse::<u32>().ok())
                .ok_or_else(|| {
                    RequestError::invalid_value(
                        VAR,
                        format!("{:?} is not a channel id; expected all, none or decimal ids such as 0,1", preview(token)),
                    )
                })?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(match (all, ids.is_empty()) {
        (true, _) => ImexChannels::All,
        (false, true) => ImexChannels::None,
        (false, false) => ImexChannels::Ids(ids),
    })
}

/// Validates `CUDA_MPS_PIPE_DIRECTORY` (an absolute container path; `None` when unset/empty).
pub fn parse_mps_pipe_dir(value: Option<&str>) -> Result<Option<String>, RequestError> {
    const VAR: &str = "CUDA_MPS_PIPE_DIRECTORY";
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bad =
        |reason: &str| RequestError::invalid_value(VAR, format!("{:?} {reason}", preview(value)));
    if value.len() > 4096 {
        return Err(bad("is longer than 4096 bytes"));
    }
    if value.chars().any(char::is_control) {
        return Err(bad("contains a control character"));
    }
    if !value.starts_with('/') {
        return Err(bad("is not an absolute path"));
    }
    if value.split('/').any(|c| c == "..") {
        return Err(bad("contains a '..' component"));
    }
    Ok(Some(value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_access() {
        let v = "NVIDIA_MIG_CONFIG_DEVICES";
        assert!(!parse_mig_access(v, None, false).unwrap());
        assert!(!parse_mig_access(v, Some(""), false).unwrap());
        assert!(!parse_mig_access(v, Some("none"), false).unwrap());
        assert!(parse_mig_access(v, Some("all"), true).unwrap());
        let err = parse_mig_access(v, Some("all"), false).unwrap_err();
        assert_eq!(err, RequestError::NotPrivileged { variable: v.into() });
        assert!(
            err.to_string().contains("requires a privileged container"),
            "{err}"
        );
        let err = parse_mig_access("NVIDIA_MIG_MONITOR_DEVICES", Some("0"), true).unwrap_err();
        assert!(
            err.to_string()
                .contains("NVIDIA_MIG_MONITOR_DEVICES: \"0\" is not supported"),
            "{err}"
        );
    }

    #[test]
    fn imex() {
        assert_eq!(parse_imex_channels(None).unwrap(), ImexChannels::None);
        assert_eq!(parse_imex_channels(Some("")).unwrap(), ImexChannels::None);
        assert_eq!(
            parse_imex_channels(Some("none")).unwrap(),
            ImexChannels::None
        );
        assert_eq!(parse_imex_channels(Some("all")).unwrap(), ImexChannels::All);
        assert_eq!(
            parse_imex_channels(Some(" 3, 0,3 ,")).unwrap(),
            ImexChannels::Ids(vec![3, 0])
        );
        for bad in ["x", "-1", "1.5", "99999999999", "0,../1"] {
            let err = parse_imex_channels(Some(bad)).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid NVIDIA_IMEX_CHANNELS"),
                "{bad}: {err}"
            );
        }
        let many = vec!["1"; MAX_ID_ENTRIES + 1].join(",");
        assert!(matches!(
            parse_imex_channels(Some(&many)),
            Err(RequestError::LimitExceeded { .. })
        ));
    }

    /// Issue #13.6: never silently dropped.
    #[test]
    fn feature_gates_enabled_are_refused_other_values_enable_nothing() {
        for (var, _) in FEATURE_GATES {
            let err = check_feature_gates(|k| (k == var).then_some("enabled")).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("{var}=enabled is not supported by gpuhook")),
                "{err}"
            );
            check_feature_gates(|k| (k == var).then_some("disabled")).unwrap();
        }
        check_feature_gates(|_| None).unwrap();
    }

    #[test]
    fn mps_dir() {
        assert_eq!(parse_mps_pipe_dir(None).unwrap(), None);
        assert_eq!(parse_mps_pipe_dir(Some("")).unwrap(), None);
        assert_eq!(
            parse_mps_pipe_dir(Some("/tmp/nvidia-mps"))
                .unwrap()
                .as_deref(),
            Some("/tmp/nvidia-mps")
        );
        for (bad, why) in [
            ("tmp/x", "absolute"),
            ("/a/../b", "'..'"),
            ("/a\nb", "control"),
        ] {
            let err = parse_mps_pipe_dir(Some(bad)).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }
}
