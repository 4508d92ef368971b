//! Issue 17.7: every `gpuhook-device-plugin` help page, subcommands included, shows an example.

#[path = "../../tests/src/help_walk.rs"]
#[macro_use]
mod help_walk;

help_examples_test!("gpuhook-device-plugin", 4);
