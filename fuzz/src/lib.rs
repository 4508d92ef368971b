//! Fuzz properties of every parser that reads input a container, an image, a pod author, an MPS
//! tenant or a foreign CDI spec author controls.
//!
//! Each target is a plain function `fn(&[u8])` that panics when a property fails, so the same code
//! runs under libFuzzer (`fuzz/libfuzzer`, driven by `scripts/fuzz.sh`) and in `cargo test` (the
//! corpus replay in `tests/corpus.rs`, which makes every kept reproducer a regression test).
//! Properties go beyond "does not crash": what parses prints back to something that parses to the
//! same value, cheap pre-checks agree with the full parser, limits hold, and every error message
//! is bounded whatever the input's size.

pub mod cdi;
pub mod config;
pub mod mps;
pub mod oci;
pub mod request;

/// Longest error message a parser may produce, whatever the input (issue 14, item 11: error
/// messages are capped, the offending value truncated). Inputs reach 64 KiB under the fuzzer, so
/// an error that quotes its input whole fails this.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// Environment variable that changes the message bound for a run: a number of bytes, or `off` to
/// fuzz the other properties while an unbounded message is being fixed.
pub const MESSAGE_LIMIT_ENV: &str = "GPUHOOK_FUZZ_MAX_MESSAGE";

fn message_limit() -> Option<usize> {
    static LIMIT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| match std::env::var(MESSAGE_LIMIT_ENV) {
        Ok(v) if v == "off" => None,
        Ok(v) => Some(v.parse().unwrap_or_else(|_| {
            panic!("{MESSAGE_LIMIT_ENV}={v:?}: expected a number of bytes or off")
        })),
        Err(_) => Some(MAX_MESSAGE_BYTES),
    })
}

/// A fuzz target: panics when a property fails.
pub type Target = fn(&[u8]);

/// Every target by name (the names of `fuzz/corpus/<name>/` and of the libFuzzer binaries).
pub const TARGETS: &[(&str, Target)] = &[
    ("visible_devices", request::visible_devices),
    ("require", request::require),
    ("capabilities", request::capabilities),
    ("oci_config", oci::config_json),
    ("oci_state", oci::state),
    ("cdi_spec", cdi::spec),
    ("mps_config", mps::config),
    ("mps_control", mps::control_reply),
    ("hook_config", config::hook_config),
];

/// Input as text, as the parsers see it: env values and files reach them as UTF-8 strings
/// (invalid UTF-8 is refused before any of them runs), so other bytes are replaced.
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Asserts that an error's message is bounded (see [`MESSAGE_LIMIT_ENV`]).
pub fn check_message(what: &str, err: &dyn std::fmt::Display) {
    let msg = err.to_string();
    let Some(limit) = message_limit() else { return };
    assert!(
        msg.len() <= limit,
        "{what}: error message of {} bytes (limit {limit}): {}…",
        msg.len(),
        msg.chars().take(200).collect::<String>()
    );
}
