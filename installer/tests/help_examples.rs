//! Issue 17.7: every `gpuhook-installer` help page, subcommands included, shows an example.

#[path = "../../tests/src/help_walk.rs"]
#[macro_use]
mod help_walk;

help_examples_test!("gpuhook-installer", 4);
