//! The binary answers --help and --version, serves its endpoint (alive but not ready while the
//! ITS is unreachable) and stops on SIGTERM.

#[test]
fn behaves_as_a_process() {
    let kubeconfig = ks_tests::process::unreachable_kubeconfig();
    let kubeconfig = format!("--kubeconfig={}", kubeconfig.display());
    ks_tests::process::check_binary(env!("CARGO_BIN_EXE_ks-addon"), "ks-addon", &[&kubeconfig], false);
}
