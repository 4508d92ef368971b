//! Applying the same devices twice must not run their hooks twice.
//!
//! On containerd 1.7+ with `enable_cdi`, the CRI plugin may already have applied a pod's CDI
//! devices when the wrapper sees the same `cdi.k8s.io/*` annotations; a legacy setup may also
//! have prepared the spec. Most CDI edits are idempotent (env, device nodes and mounts replace by
//! key) but hooks and device cgroup rules are appended: a second `createContainer` hook that
//! creates the same symlinks fails the container. So entries that the edit appended and that were
//! already present are dropped again.

use serde_json::Value;

fn array_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Vec<Value>> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_array()
}

fn array_at_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Vec<Value>> {
    path.iter().try_fold(v, |v, k| v.get_mut(k))?.as_array_mut()
}

/// Removes from the append-only lists of `after` (every `hooks.*` list and
/// `linux.resources.devices`) the appended entries equal to an entry of `before` or to an
/// earlier appended one. Returns how many were removed.
pub fn drop_reinjected(before: &Value, after: &mut Value) -> usize {
    let mut paths: Vec<Vec<String>> =
        vec![vec!["linux".into(), "resources".into(), "devices".into()]];
    if let Some(hooks) = after.get("hooks").and_then(Value::as_object) {
        paths.extend(hooks.keys().map(|k| vec!["hooks".to_string(), k.clone()]));
    }
    let mut removed = 0;
    for path in paths {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let old: &[Value] = array_at(before, &path).map_or(&[], Vec::as_slice);
        let Some(new) = array_at_mut(after, &path) else {
            continue;
        };
        // The edits only append: the old entries are a prefix; anything else is left alone.
        if new.len() < old.len() || new[..old.len()] != *old {
            continue;
        }
        let appended = new.split_off(old.len());
        for item in appended {
            if new.contains(&item) {
                removed += 1;
            } else {
                new.push(item);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicates_of_existing_entries_are_dropped_new_ones_kept() {
        let hook =
            json!({"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "cdi-hook", "symlinks"]});
        let rule = json!({"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"});
        let before = json!({
            "hooks": {"createContainer": [hook.clone()]},
            "linux": {"resources": {"devices": [{"allow": false, "access": "rwm"}, rule.clone()]}}
        });
        let new_rule =
            json!({"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"});
        let mut after = json!({
            "hooks": {
                "createContainer": [hook.clone(), hook.clone()],
                "prestart": [{"path": "/x"}, {"path": "/x"}]
            },
            "linux": {"resources": {"devices": [
                {"allow": false, "access": "rwm"}, rule.clone(), rule.clone(), new_rule.clone()
            ]}}
        });
        assert_eq!(drop_reinjected(&before, &mut after), 3);
        assert_eq!(
            after,
            json!({
                "hooks": {"createContainer": [hook], "prestart": [{"path": "/x"}]},
                "linux": {"resources": {"devices": [{"allow": false, "access": "rwm"}, rule, new_rule]}}
            })
        );
    }

    #[test]
    fn lists_that_were_not_appended_to_are_left_alone() {
        let before = json!({"hooks": {"prestart": [{"path": "/a"}, {"path": "/a"}]}});
        let mut after = before.clone();
        assert_eq!(drop_reinjected(&before, &mut after), 0);
        assert_eq!(after, before);
        // Reordered (not an append): untouched.
        let before = json!({"hooks": {"prestart": [{"path": "/a"}, {"path": "/b"}]}});
        let mut after =
            json!({"hooks": {"prestart": [{"path": "/b"}, {"path": "/a"}, {"path": "/a"}]}});
        assert_eq!(drop_reinjected(&before, &mut after), 0);
    }
}
