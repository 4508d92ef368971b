//! `gpuhook`: see [`gpuhook::cli`].

fn main() -> std::process::ExitCode {
    gpuhook::cli::main()
}
