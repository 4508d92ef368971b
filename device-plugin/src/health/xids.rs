//! Which Xids make a device unhealthy: NVIDIA's `DP_DISABLE_HEALTHCHECKS` and
//! `DP_ENABLE_HEALTHCHECKS`, with NVIDIA's semantics (`internal/rm/health.go`:
//! `getDisabledHealthCheckXids`, `newHealthCheckXIDs`, `disabledXIDs.IsDisabled`).
//!
//! - Application errors are ignored by default: 13, 31, 43, 45, 68, 109.
//! - `DP_DISABLE_HEALTHCHECKS`: `all` or `xids` turns health checking off; otherwise a comma
//!   list of more Xids to ignore.
//! - `DP_ENABLE_HEALTHCHECKS`: a comma list of Xids checked even if ignored by default or
//!   disabled; `all` checks every Xid, the default-ignored ones included.
//! - Values are lower-cased and trimmed; malformed entries are skipped.

use std::collections::BTreeMap;

/// `DP_DISABLE_HEALTHCHECKS`.
pub const ENV_DISABLE: &str = "DP_DISABLE_HEALTHCHECKS";
/// `DP_ENABLE_HEALTHCHECKS`.
pub const ENV_ENABLE: &str = "DP_ENABLE_HEALTHCHECKS";
/// Xids NVIDIA ignores by default (application errors: the GPU is still healthy).
pub const DEFAULT_IGNORED: [u64; 6] = [13, 31, 43, 45, 68, 109];
/// NVIDIA's key for "every Xid" in its map.
const ALL: u64 = 0;

/// Xid -> disabled, as NVIDIA's `disabledXIDs` map (key 0 stands for "all").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidFilter(BTreeMap<u64, bool>);

impl Default for XidFilter {
    fn default() -> Self {
        Self::from_values("", "")
    }
}

/// `newHealthCheckXIDs`: a comma list to a set; `all`/`xids` is the "all" marker.
fn parse_list(list: &str) -> BTreeMap<u64, bool> {
    let mut out = BTreeMap::new();
    for item in list.to_ascii_lowercase().split(',') {
        let item = item.trim();
        if item == "all" || item == "xids" {
            return BTreeMap::from([(ALL, true)]);
        }
        if item.is_empty() {
            continue;
        }
        match item.parse::<u64>() {
            Ok(xid) => {
                out.insert(xid, true);
            }
            Err(e) => tracing::info!(xid = item, error = %e, "ignoring malformed Xid value"),
        }
    }
    out
}

impl XidFilter {
    /// From the two environment variables of the plugin's process.
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).unwrap_or_default();
        Self::from_values(&var(ENV_DISABLE), &var(ENV_ENABLE))
    }

    /// From the values of `DP_DISABLE_HEALTHCHECKS` and `DP_ENABLE_HEALTHCHECKS`.
    pub fn from_values(disable: &str, enable: &str) -> Self {
        let mut disabled = parse_list(disable);
        for xid in DEFAULT_IGNORED {
            disabled.insert(xid, true);
        }
        for xid in parse_list(enable).into_keys() {
            disabled.insert(xid, false);
        }
        XidFilter(disabled)
    }

    /// Health checking is off entirely (`DP_DISABLE_HEALTHCHECKS=all`).
    pub fn all_disabled(&self) -> bool {
        self.0.get(&ALL).copied().unwrap_or(false)
    }

    /// This Xid does not make a device unhealthy.
    pub fn is_disabled(&self, xid: u64) -> bool {
        if self.0.get(&ALL) == Some(&false) {
            return false;
        }
        match self.0.get(&xid) {
            Some(disabled) => *disabled,
            None => self.all_disabled(),
        }
    }

    /// The Xids ignored (sorted, without the "all" marker), for the start-up log.
    pub fn ignored(&self) -> Vec<u64> {
        self.0
            .keys()
            .copied()
            .filter(|x| *x != ALL && self.is_disabled(*x))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(disable: &str, enable: &str, all: bool, expect: &[(u64, bool)], ignored: &[u64]) {
        let f = XidFilter::from_values(disable, enable);
        assert_eq!(f.all_disabled(), all, "{disable:?}/{enable:?}");
        for (xid, disabled) in expect {
            assert_eq!(
                f.is_disabled(*xid),
                *disabled,
                "xid {xid} {disable:?}/{enable:?}"
            );
        }
        assert_eq!(f.ignored(), ignored, "{disable:?}/{enable:?}");
    }

    /// NVIDIA `health_test.go:TestNewHealthCheckXIDs`.
    #[test]
    fn parse_list_as_nvidia() {
        let cases: [(&str, &[u64]); 10] = [
            ("", &[]),
            (",", &[]),
            ("not-an-int", &[]),
            ("68", &[68]),
            ("-68", &[]),
            ("68  ", &[68]),
            ("68,", &[68]),
            (",68", &[68]),
            ("68,67", &[67, 68]),
            ("68,not-an-int,67", &[67, 68]),
        ];
        for (input, want) in cases {
            let got: Vec<u64> = parse_list(input).into_keys().collect();
            assert_eq!(got, want, "{input:?}");
        }
    }

    /// NVIDIA `health_test.go:TestGetDisabledHealthCheckXids`, case by case.
    #[test]
    fn env_combinations_as_nvidia() {
        let defaults: Vec<(u64, bool)> = DEFAULT_IGNORED.iter().map(|x| (*x, true)).collect();
        // "empty envvars are default disabled"
        check("", "", false, &defaults, &DEFAULT_IGNORED);
        // "disabled is all" / "disabled is xids": 555 disabled too.
        let mut all = defaults.clone();
        all.push((555, true));
        check("all", "", true, &all, &DEFAULT_IGNORED);
        check("xids", "", true, &all, &DEFAULT_IGNORED);
        // "enabled is all": nothing disabled, no ignored list entries.
        let none: Vec<(u64, bool)> = all.iter().map(|(x, _)| (*x, false)).collect();
        check("", "all", false, &none, &[]);
        // "enabled overrides disabled"
        let mut over = defaults.clone();
        over.extend([(11, false), (555, false)]);
        check("11", "11", false, &over, &DEFAULT_IGNORED);
        // "enabled overrides default ignored"
        check(
            "",
            "31",
            false,
            &[(31, false), (13, true), (555, false)],
            &[13, 43, 45, 68, 109],
        );
    }
}
