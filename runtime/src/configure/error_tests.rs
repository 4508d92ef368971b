//! Bad input: each error names the file and the problem (once) and nothing is written.

use std::fs;

use super::super::tests::{opts, Dir};
use super::super::*;

#[test]
fn bad_input_is_reported_and_nothing_is_written() {
    let d = Dir::new();
    for (text, want) in [
        ("version = 2\n[plugins\nx = 1\n", "line 2"),
        ("version = 7\n", "unknown containerd config version 7"),
        (
            "version = \"2\"\n",
            "unknown containerd config version \"2\"",
        ),
        ("version = 2\nplugins = 3\n", "`plugins` must be a table"),
        (
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd = \"x\"\n",
            "must be a table",
        ),
        (
            "version = 2\nimports = \"x\"\n",
            "`imports` must be an array",
        ),
    ] {
        let cfg = d.write("config.toml", text);
        let mut o = opts(&cfg);
        if text.contains("imports") {
            o.drop_in = Some(d.path("conf.d/x.toml"));
        }
        let err = configure(&o, false).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: {err}");
        assert!(err.contains(cfg.to_str().unwrap()), "{err}");
        assert_eq!(fs::read_to_string(&cfg).unwrap(), text);
        assert_eq!(d.entries(), ["config.toml"]);
    }
    let cfg = d.path("config.toml");
    for o in [
        ConfigureOptions {
            runtime_name: "bad name".into(),
            ..opts(&cfg)
        },
        ConfigureOptions {
            binary: "gpuhook-runtime".into(),
            ..opts(&cfg)
        },
        ConfigureOptions {
            drop_in: Some("rel.toml".into()),
            ..opts(&cfg)
        },
    ] {
        assert!(matches!(
            configure(&o, false),
            Err(ConfigureError::InvalidOption { .. })
        ));
    }
}

/// An unreadable config names the file and the OS error once, whether printed alone (the
/// doctor) or as a cause chain (the CLI's `{:#}`).
#[test]
fn read_errors_print_their_cause_once() {
    let d = Dir::new();
    let cfg = d.path("config.toml");
    fs::create_dir_all(&cfg).unwrap();
    let err = configure(&opts(&cfg), false).unwrap_err();
    assert!(matches!(err, ConfigureError::Read { .. }), "{err}");
    let os = std::io::Error::from_raw_os_error(libc::EISDIR).to_string();
    let mut chain = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        chain = format!("{chain}: {c}");
        cause = c.source();
    }
    assert_eq!(chain.matches(&os).count(), 1, "{chain}");
    assert_eq!(chain.matches(cfg.to_str().unwrap()).count(), 1, "{chain}");
}
