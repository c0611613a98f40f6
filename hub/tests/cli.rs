//! The binary answers --help and --version, serves its endpoint (alive but not ready while the
//! WDS is unreachable) and stops on SIGTERM.

#[test]
fn behaves_as_a_process() {
    let kubeconfig = ks_tests::process::unreachable_kubeconfig();
    let kubeconfig = format!("--wds-kubeconfig={}", kubeconfig.display());
    let its = kubeconfig.replace("--wds-", "--its-");
    ks_tests::process::check_binary(
        env!("CARGO_BIN_EXE_ks-hub"),
        "ks-hub",
        &["--wds-name=test", &kubeconfig, &its],
        false,
    );
}
