//! The binary answers --help and --version, insists on the flags it cannot work without, serves
//! its endpoint (alive, not ready until it has listed the WEC's AppliedManifestWorks) with its
//! metrics, and stops on SIGTERM. No cluster needed: the kubeconfigs point at nothing.

use std::process::Command;
use std::time::Duration;

use ks_tests::process::{Running, address_in, check_binary, http_get, unreachable_kubeconfig};

const AGENT: &str = env!("CARGO_BIN_EXE_ks-agent");

fn unreachable_flags() -> [String; 3] {
    let kubeconfig = unreachable_kubeconfig();
    [
        "--cluster-name=cluster1".into(),
        format!("--hub-kubeconfig={}", kubeconfig.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
    ]
}

#[test]
fn behaves_as_a_process() {
    let flags = unreachable_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    check_binary(AGENT, "ks-agent", &flags, false);
}

#[test]
fn documents_its_flags_and_requires_hub_and_cluster() {
    let help = Command::new(AGENT).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in [
        "--hub-kubeconfig",
        "--hub-context",
        "--cluster-name",
        "--kubeconfig",
        "--context",
        "--hub-qps",
        "--hub-burst",
        "--local-qps",
        "--local-burst",
    ] {
        assert!(help.contains(flag), "--help mentions {flag}:\n{help}");
    }
    for missing in ["--hub-kubeconfig", "--cluster-name"] {
        let flags = unreachable_flags();
        let args = flags.iter().filter(|f| !f.starts_with(missing));
        let out = Command::new(AGENT).args(args).output().unwrap();
        assert!(!out.status.success(), "fails without {missing}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(missing),
            "names {missing}"
        );
    }
    let out = Command::new(AGENT)
        .args(["--cluster-name=c", "--hub-kubeconfig=/nonexistent/hub.kubeconfig"])
        .args(["--kubeconfig=/nonexistent/hub.kubeconfig", "--http-address=127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/hub.kubeconfig"));
}

#[test]
fn serves_its_metrics_and_names_what_readiness_waits_for() {
    let flags = unreachable_flags();
    let mut args = vec!["--http-address", "127.0.0.1:0"];
    args.extend(flags.iter().map(String::as_str));
    let mut running = Running::start(AGENT, &args);
    let address = address_in(&running.wait_for_line("serving /metrics", Duration::from_secs(20)));
    assert_eq!(
        http_get(address, "/readyz"),
        (503, "waiting for: appliedmanifestworks".into())
    );
    let (_, metrics) = http_get(address, "/metrics");
    for name in [
        "kubestellar_agent_writes_total",
        "kubestellar_agent_reconciles_total",
        "kubestellar_agent_errors_total",
        "kubestellar_agent_queue_depth",
        "kubestellar_agent_informers",
    ] {
        assert!(metrics.contains(name), "{name} in {metrics}");
    }
    assert!(running.terminate(Duration::from_secs(10)).success());
}

/// OCM rotates the add-on's client certificate by rewriting the Secret mounted as the hub
/// kubeconfig; a client reads it once, so the agent stops (exit 0) to be restarted with it.
#[test]
fn stops_when_its_hub_credentials_change() {
    let dir = tempfile::tempdir().unwrap();
    let hub = dir.path().join("kubeconfig");
    std::fs::copy(unreachable_kubeconfig(), &hub).unwrap();
    let flags = unreachable_flags();
    let hub_flag = format!("--hub-kubeconfig={}", hub.display());
    let mut args = vec![
        "--http-address",
        "127.0.0.1:0",
        "--hub-credentials-check",
        "1",
        &hub_flag,
    ];
    args.extend(
        flags
            .iter()
            .map(String::as_str)
            .filter(|f| !f.starts_with("--hub-kubeconfig")),
    );
    let mut running = Running::start(AGENT, &args);
    running.wait_for_line("reporting status", Duration::from_secs(20));
    let rotated = std::fs::read_to_string(&hub).unwrap() + "# a new certificate\n";
    std::fs::write(&hub, rotated).unwrap();
    running.wait_for_line("changed; stopping", Duration::from_secs(20));
    assert!(running.terminate(Duration::from_secs(10)).success());
}
