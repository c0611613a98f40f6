//! The binary answers --help and --version, serves its endpoint and stops on SIGTERM.

#[test]
fn behaves_as_a_process() {
    ks_tests::process::check_binary(env!("CARGO_BIN_EXE_ks-addon"), "ks-addon", &[], true);
}
