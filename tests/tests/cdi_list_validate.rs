//! `gpuhook cdi list` and `gpuhook cdi validate` as a user runs them (no root needed): the spec
//! directories' priority and conflict rules, broken files reported on stderr while the rest is
//! listed, exit statuses, and every validation error printed with its JSON path.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::path::Path;

use cdi_support::{gpuhook, gpuhook_ok, s, texts, tmp, write};

fn spec_json(kind: &str, names: &[&str]) -> String {
    let devices: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                r#"{{"name":"{n}","containerEdits":{{"env":["DEV_{}=1"]}}}}"#,
                n.len()
            )
        })
        .collect();
    format!(
        r#"{{"cdiVersion":"0.3.0","kind":"{kind}","devices":[{}]}}"#,
        devices.join(",")
    )
}

#[test]
fn list_follows_priority_and_conflict_rules() {
    let t = tmp("list");
    let low = t.path().join("etc-cdi");
    let high = t.path().join("run-cdi");
    write(
        &low.join("a.json"),
        &spec_json("example.com/gpu", &["x", "y"]),
    );
    write(&high.join("b.json"), &spec_json("example.com/gpu", &["x"]));
    write(
        &high.join("c.json"),
        &spec_json("example.com/gpu", &["z", "c-only"]),
    );
    write(&high.join("d.yaml"), "cdiVersion: 0.3.0\nkind: example.com/gpu\ndevices:\n  - name: z\n    containerEdits:\n      env: [A=1]\n");
    write(&high.join("e.json"), "{ broken");
    write(&high.join("ignored.yml"), "not: loaded");
    let out = gpuhook(&[
        "cdi",
        "list",
        "-v",
        "--spec-dir",
        s(&low),
        "--spec-dir",
        s(&high),
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("example.com/gpu=c-only\t{}", high.join("c.json").display()),
            format!("example.com/gpu=x\t{}", high.join("b.json").display()),
            format!("example.com/gpu=y\t{}", low.join("a.json").display()),
        ],
        "later directory wins, a device in two files of one dir is dropped\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("{}:", high.join("e.json").display())),
        "{stderr}"
    );
    check_conflict_messages(&stderr, &high);
    assert!(!stderr.contains("ignored.yml"), "{stderr}");

    let (plain, _) = gpuhook_ok(&["cdi", "list", "--spec-dir", s(&low)]);
    assert_eq!(plain, "example.com/gpu=x\nexample.com/gpu=y\n");

    listing_nothing(t.path());
}

/// Conflicts are explained once, with both files and the outcome (container-device-interface
/// pkg/cdi/cache.go `refresh`: same directory -> dropped, later directory -> it wins).
fn check_conflict_messages(stderr: &str, high: &Path) {
    let conflict = stderr
        .lines()
        .find(|l| l.contains("conflict:") && l.contains("example.com/gpu=z"))
        .unwrap_or_else(|| panic!("no conflict line:\n{stderr}"));
    assert!(
        conflict.contains(s(&high.join("c.json"))) && conflict.contains("drop"),
        "{conflict}"
    );
    let shadow = stderr
        .lines()
        .find(|l| l.contains("note:") && l.contains("example.com/gpu=x"))
        .unwrap_or_else(|| panic!("no override note:\n{stderr}"));
    assert!(
        shadow.contains(&format!("runtimes use {}", high.join("b.json").display())),
        "{shadow}"
    );
    assert_eq!(
        stderr.matches("example.com/gpu=z").count(),
        1,
        "each conflict told once:\n{stderr}"
    );
}

/// Only broken files: an error exit. Nothing at all: fine, and said so.
fn listing_nothing(t: &Path) {
    // Only broken files: an error exit.
    let broken = t.join("broken");
    write(&broken.join("bad.json"), "{");
    let out = gpuhook(&["cdi", "list", "--spec-dir", s(&broken)]);
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("bad.json") && stderr.contains("no CDI device could be listed"),
        "{stderr}"
    );

    // Nothing at all: fine, and said so.
    let (stdout, stderr) = gpuhook_ok(&["cdi", "list", "--spec-dir", s(&t.join("none"))]);
    assert!(stdout.is_empty());
    assert!(stderr.contains("no CDI specs found"), "{stderr}");
}

#[test]
fn validate_prints_each_error_with_its_json_path() {
    let t = tmp("validate");
    let good = t.path().join("good.json");
    write(&good, &spec_json("example.com/gpu", &["a", "b"]));
    let (stdout, _) = gpuhook_ok(&["cdi", "validate", s(&good)]);
    assert_eq!(
        stdout,
        format!(
            "{}: valid CDI spec: kind example.com/gpu, cdiVersion 0.3.0, 2 devices\n",
            good.display()
        )
    );

    let bad = t.path().join("bad.json");
    write(
        &bad,
        r#"{"cdiVersion":"0.3.0","kind":"example.com/gpu","devices":[
            {"name":"a/b","containerEdits":{"deviceNodes":[{"path":"/dev/x","hostPath":"/dev/y"}]}},
            {"name":"ok","containerEdits":{}}]}"#,
    );
    let out = gpuhook(&["cdi", "validate", s(&bad)]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty());
    let f = bad.display().to_string();
    for want in [
        format!("{f}: cdiVersion: "),
        format!("{f}: devices[0].name: "),
        format!("{f}: devices[1].containerEdits: "),
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(&want)),
            "no line {want:?}:\n{stderr}"
        );
    }
    assert!(stderr.contains("3 error(s)"), "{stderr}");

    let schema_bad = t.path().join("schema.yaml");
    write(&schema_bad, "cdiVersion: 0.3.0\nkind: example.com/gpu\ndevices:\n  - name: a\n    containerEdits:\n      deviceNodes:\n        - hostPath: /dev/y\n");
    let (_, stderr) = texts(&gpuhook(&["cdi", "validate", s(&schema_bad)]));
    assert!(
        stderr.contains(
            "devices[0].containerEdits.deviceNodes[0]: schema: missing properties 'path'"
        ),
        "{stderr}"
    );

    let (_, stderr) = texts(&gpuhook(&[
        "cdi",
        "validate",
        s(&t.path().join("nope.json")),
    ]));
    assert!(
        stderr.contains("cannot read") && stderr.contains("nope.json"),
        "{stderr}"
    );
}
