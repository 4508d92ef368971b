//! Links the unwinder statically (see `gpuhook-build` for why and when).

fn main() {
    gpuhook_build::link_unwinder_statically();
}
