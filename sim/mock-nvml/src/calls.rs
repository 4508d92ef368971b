//! Call counting for benchmarks: with the `count-calls` switch in the state directory when the
//! table is built, each MIG call appends `R <name>` (a read) or `W <name>` (a write) to
//! `calls.log` there (see `gpuhook_sim::mig_state`).

use std::io::Write;

use crate::table::Table;

/// Logs one call when counting is on.
pub fn note(t: &Table, call: &str, write: bool) {
    if !t.mig.count_calls {
        return;
    }
    let path = gpuhook_sim::mig_state::state_dir(&t.dir).join("calls.log");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{} {call}", if write { 'W' } else { 'R' });
    }
}

/// Logs one read call of the current table, when counting is on.
pub fn read(call: &str) {
    if let Ok(t) = crate::state::table() {
        note(t, call, false);
    }
}
