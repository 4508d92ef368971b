//! `gpuhook-mig-manager`: the Kubernetes MIG manager agent (see the library, `gpuhook_mig_manager`).

fn main() -> std::process::ExitCode {
    gpuhook_mig_manager::cli::main()
}
