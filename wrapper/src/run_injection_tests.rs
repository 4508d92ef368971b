//! Tests of the injection kinds: edits instead of CDI names (legacy and jit modes), an empty
//! request, and a second edit of an already edited bundle.

use std::fs;

use serde_json::json;

use super::*;

struct EditsRequest(ContainerEdits);

impl DeviceRequest for EditsRequest {
    fn injection(
        &self,
        _: &Path,
        _: Option<&str>,
        _: &Value,
    ) -> Result<Option<Injection>, InjectionError> {
        Ok(Some(Injection::Edits(Box::new(self.0.clone()))))
    }
}

#[test]
fn legacy_mode_edits_replace_an_old_hook_with_exactly_one_new_one() {
    let f = fixture();
    let mut spec = oci_spec();
    spec["hooks"]["prestart"] = json!([
        {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "prestart"]},
        {"path": "/usr/bin/keep-me"}
    ]);
    fs::write(
        f.bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    let edits: ContainerEdits = serde_json::from_value(json!({"hooks": [{
        "hookName": "prestart",
        "path": "/usr/local/bin/gpuhook",
        "args": ["gpuhook", "prestart"],
        "env": ["PATH=/usr/bin:/bin"]
    }]}))
    .unwrap();
    prepare(&create_argv(&f), &f.config, &EditsRequest(edits), None).unwrap();
    let hooks = read_spec(&f)["hooks"]["prestart"].clone();
    assert_eq!(
        hooks,
        json!([
            {"path": "/usr/bin/keep-me"},
            {"path": "/usr/local/bin/gpuhook", "args": ["gpuhook", "prestart"], "env": ["PATH=/usr/bin:/bin"]}
        ])
    );
}

#[test]
fn an_empty_cdi_request_is_no_request() {
    let f = fixture();
    let p = f.bundle.join("config.json");
    let before = fs::read(&p).unwrap();
    struct Empty;
    impl DeviceRequest for Empty {
        fn injection(
            &self,
            _: &Path,
            _: Option<&str>,
            _: &Value,
        ) -> Result<Option<Injection>, InjectionError> {
            Ok(Some(Injection::Cdi(vec![])))
        }
    }
    prepare(&create_argv(&f), &f.config, &Empty, None).unwrap();
    // Not rewritten: the legacy hook is still there.
    assert_eq!(fs::read(&p).unwrap(), before);
}

#[test]
fn applying_the_same_devices_again_changes_nothing() {
    // containerd 1.7 with enable_cdi may already have applied the pod's devices.
    let f = fixture();
    set_env(&f, "0,1");
    prepare(&create_argv(&f), &f.config, &env_request, None).unwrap();
    let once = read_spec(&f);
    assert_eq!(
        once["hooks"]["createContainer"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        once["linux"]["resources"]["devices"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    prepare(&create_argv(&f), &f.config, &env_request, None).unwrap();
    assert_eq!(read_spec(&f), once);
}
