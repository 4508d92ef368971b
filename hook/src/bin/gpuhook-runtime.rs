//! `gpuhook-runtime`: the runc wrapper containerd's shim runs instead of runc; see
//! [`gpuhook::wrapper`]. Nothing is ever written to stdout (it belongs to runc's caller).

fn main() {
    gpuhook::wrapper::main()
}
