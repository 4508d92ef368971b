//! Removing legacy GPU prestart hooks from an OCI spec.
//!
//! A spec may already carry a prestart hook that injects GPUs the old way (nvidia-docker's
//! `nvidia-container-runtime-hook`, the toolkit's `nvidia-container-toolkit`, or our own
//! `gpuhook prestart`). When the wrapper injects the same GPUs through CDI, that hook would
//! inject them a second time — and change cgroups behind the runtime's back — so it goes.

use serde_json::Value;

/// Basenames of hooks that always are GPU injectors.
const LEGACY_HOOKS: &[&str] = &["nvidia-container-runtime-hook", "nvidia-container-toolkit"];

fn is_legacy(hook: &Value) -> bool {
    let Some(path) = hook.get("path").and_then(Value::as_str) else {
        return false;
    };
    let base = path.rsplit('/').next().unwrap_or(path);
    if LEGACY_HOOKS.contains(&base) {
        return true;
    }
    base == "gpuhook"
        && hook
            .get("args")
            .and_then(Value::as_array)
            .is_some_and(|args| args.iter().any(|a| a.as_str() == Some("prestart")))
}

/// Removes legacy GPU hooks from `hooks.prestart`; returns the paths of the removed hooks.
/// An emptied `prestart` list is removed, and an emptied `hooks` object too.
pub fn remove_legacy_hooks(spec: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    let Some(hooks) = spec.get_mut("hooks").and_then(Value::as_object_mut) else {
        return removed;
    };
    if let Some(prestart) = hooks.get_mut("prestart").and_then(Value::as_array_mut) {
        prestart.retain(|h| {
            let legacy = is_legacy(h);
            if legacy {
                removed.push(h["path"].as_str().unwrap_or_default().to_string());
            }
            !legacy
        });
        if prestart.is_empty() && !removed.is_empty() {
            hooks.remove("prestart");
        }
    }
    if hooks.is_empty() && !removed.is_empty() {
        spec.as_object_mut().map(|o| o.remove("hooks"));
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn removes_each_kind_of_legacy_hook_and_keeps_others() {
        let mut spec = json!({"hooks": {
            "prestart": [
                {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]},
                {"path": "/usr/bin/other-hook", "args": ["other-hook", "prestart"]},
                {"path": "/usr/local/bin/nvidia-container-toolkit", "args": ["nvidia-container-toolkit", "prestart"]},
                {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "prestart"], "env": ["PATH=/usr/bin"]},
                {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "something-else"]}
            ],
            "createContainer": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]
        }});
        let removed = remove_legacy_hooks(&mut spec);
        assert_eq!(
            removed,
            [
                "/usr/bin/nvidia-container-runtime-hook",
                "/usr/local/bin/nvidia-container-toolkit",
                "/usr/local/bin/gpuhook"
            ]
        );
        assert_eq!(
            spec,
            json!({"hooks": {
                "prestart": [
                    {"path": "/usr/bin/other-hook", "args": ["other-hook", "prestart"]},
                    {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "something-else"]}
                ],
                // Only prestart hooks are legacy injectors.
                "createContainer": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]
            }})
        );
    }

    #[test]
    fn emptied_lists_are_removed() {
        let mut spec = json!({"ociVersion": "1.0.2", "hooks": {"prestart": [
            {"path": "nvidia-container-toolkit"}
        ]}});
        assert_eq!(remove_legacy_hooks(&mut spec), ["nvidia-container-toolkit"]);
        assert_eq!(spec, json!({"ociVersion": "1.0.2"}));
    }

    #[test]
    fn nothing_to_remove_leaves_the_spec_identical() {
        for spec in [
            json!({"ociVersion": "1.0.2"}),
            json!({"hooks": {}}),
            json!({"hooks": {"prestart": []}}),
            json!({"hooks": {"prestart": [{"path": "/bin/gpuhook-x"}, {"args": ["prestart"]}]}}),
            json!({"hooks": {"prestart": "not a list"}}),
        ] {
            let mut copy = spec.clone();
            assert!(remove_legacy_hooks(&mut copy).is_empty());
            assert_eq!(copy, spec);
        }
    }
}
