//! The plugin as users meet it: `--help` with examples, `--version`, completion scripts, and clear
//! errors (nothing on standard output; exit status 2 for a usage error, 1 otherwise) for bad input
//! and a space it cannot reach.

use std::process::{Command, Output};

fn plugin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-kubestellar"))
        .args(args)
        .env_remove("KUBESTELLAR_WDS_CONTEXT")
        .env_remove("KUBESTELLAR_ITS_CONTEXT")
        .output()
        .expect("run kubectl-kubestellar")
}

fn failure(code: i32, args: &[&str]) -> String {
    let output = plugin(args);
    assert_eq!(output.status.code(), Some(code), "{args:?}: {output:?}");
    assert!(output.stdout.is_empty(), "{args:?}: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn help_shows_the_commands_with_examples() {
    let output = plugin(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "why",
        "status",
        "trace",
        "kubectl kubestellar why deployment/web -n shop",
        "--wds",
        "--its",
        "Exit status: 0 answered",
        "3 `why` answered and names a broken link",
        "4 `get` answered for some WECs only",
        "get",
        "completion",
        "kubectl kubestellar get deployments -A -l app=web",
        "--no-headers",
    ] {
        assert!(help.contains(expected), "{expected:?} missing from:\n{help}");
    }
    let version = plugin(&["--version"]);
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn get_help_says_how_wecs_are_read() {
    let output = plugin(&["get", "--help"]);
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "--all-namespaces",
        "--selector <SELECTOR>",
        "--wec-context-template <TEMPLATE>",
        "[default: {wec}]",
        "--wec-timeout <DURATION>",
        "kubestellar.io/wec",
        "exit status 4",
    ] {
        assert!(help.contains(expected), "{expected:?} missing from:\n{help}");
    }
}

#[test]
fn completion_prints_a_script_for_each_shell() {
    for (shell, expected) in [
        ("bash", "complete -F _kubectl__kubestellar"),
        ("zsh", "#compdef kubectl-kubestellar"),
        ("fish", "complete -c kubectl-kubestellar"),
    ] {
        let output = plugin(&["completion", shell]);
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(
            script.contains(expected),
            "{shell}: {expected:?} missing from:\n{script}"
        );
        // The subcommands and their options are completed.
        for word in ["why", "get", "wec-context-template", "all-namespaces"] {
            assert!(script.contains(word), "{shell}: {word:?} missing");
        }
    }
    let error = failure(2, &["completion", "tcsh"]);
    assert!(error.contains("invalid value 'tcsh'"), "{error}");
}

#[test]
fn options_that_do_not_fit_are_usage_errors() {
    let cases = [
        (&["why", "deploy/web", "-o", "wide"][..], "only `get` prints it"),
        (&["status", "web", "-o", "name"], "only `get` prints it"),
        (
            &["trace", "deploy/web", "--no-headers"],
            "`trace` prints no table of rows",
        ),
        (&["get", "cm", "-n", "shop", "-A"], "cannot be used with"),
        (
            &["get", "cm", "--wec-context-template", "cluster1"],
            "does not contain {wec}",
        ),
        (&["get", "cm", "--wec-timeout", "soon"], "is not a duration"),
    ];
    for (args, expected) in cases {
        let error = failure(2, args);
        assert!(error.contains(expected), "{args:?}: {error}");
    }
}

#[test]
fn get_without_an_its_says_which_context_it_tried() {
    let kubeconfig = ks_tests::process::unreachable_kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    let error = failure(1, &["--kubeconfig", kubeconfig, "--its", "nowhere", "get", "cm"]);
    assert!(error.contains("in the ITS (context nowhere)"), "{error}");
    let error = failure(1, &["--kubeconfig", kubeconfig, "get", "cm/a", "b"]);
    assert!(error.contains("names an object already"), "{error}");
}

#[test]
fn bad_input_and_unreachable_spaces_are_clear_errors() {
    let kubeconfig = ks_tests::process::unreachable_kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    let error = failure(1, &["--kubeconfig", kubeconfig, "why", "web"]);
    assert!(error.contains("is not <resource>/<name>"), "{error}");
    let error = failure(1, &["--kubeconfig", kubeconfig, "why", "deploy/web"]);
    assert!(error.contains("the WDS: kubeconfig context \"wds1\""), "{error}");
    let unreachable = ["--kubeconfig", kubeconfig, "--wds", "nowhere", "--its", "nowhere"];
    let error = failure(1, &[&unreachable[..], &["why", "deploy/web"]].concat());
    assert!(error.contains("cannot reach the WDS (context nowhere)"), "{error}");
    let error = failure(1, &[&unreachable[..], &["status", "web"]].concat());
    assert!(error.contains("reading the WDS (context nowhere)"), "{error}");
    let error = failure(2, &["--kubeconfig", kubeconfig, "why", "deploy/web", "-o", "xml"]);
    assert!(error.contains("invalid value 'xml'"), "{error}");
}

/// A kubeconfig file in the temporary directory with one context `name` (its namespace
/// `namespace`) of an unreachable server.
fn kubeconfig_with(name: &str, namespace: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("ks-plugin-{}-{name}.kubeconfig", std::process::id()));
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster: {{server: \"https://127.0.0.1:1\"}}\n\
         users:\n- name: {name}\n  user: {{}}\ncontexts:\n- name: {name}\n  context: {{cluster: {name}, user: {name}, namespace: {namespace}}}\n"
    );
    std::fs::write(&path, config).expect("write kubeconfig");
    path
}

#[test]
fn a_kubeconfig_list_is_merged_as_kubectl_merges_it() {
    // The WDS's context in one file, the ITS's in another.
    let (wds, its) = (kubeconfig_with("wds-a", "shop"), kubeconfig_with("its-b", "x"));
    let list = std::env::join_paths([&wds, &its]).expect("a path list");
    let output = Command::new(env!("CARGO_BIN_EXE_kubectl-kubestellar"))
        .args(["--wds", "wds-a", "--its", "its-b", "status", "web"])
        .env("KUBECONFIG", &list)
        .output()
        .expect("run kubectl-kubestellar");
    let error = String::from_utf8_lossy(&output.stderr);
    // Both contexts were found: it went on to read the (unreachable) WDS.
    assert!(error.contains("reading the WDS (context wds-a)"), "{error}");
    for file in [wds, its] {
        let _ = std::fs::remove_file(file);
    }
}
