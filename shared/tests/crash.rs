//! A panic in a spawned task ends the process; one inside `crash::catching` is an error to its
//! caller (each run as a child process of this test, with the process-wide hook installed).

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "KS_CRASH_TEST_CHILD";

/// Runs the test `name` of this binary as a child process with [`CHILD`] set: its exit status
/// and standard error.
fn run_child(name: &str) -> (ExitStatus, String) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture"])
        .env(CHILD, "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("child");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().expect("kill");
            panic!("the child {name} kept running");
        }
        // Polling a child's exit with a deadline; there is nothing else to wait on.
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    (status, stderr)
}

#[test]
fn a_panicking_task_ends_the_process() {
    if std::env::var_os(CHILD).is_some() {
        ks_shared::crash::exit_on_panic();
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            tokio::spawn(async { panic!("a controller bug") });
            // Without the hook only the task dies, and this waits forever.
            std::future::pending::<()>().await
        });
        return;
    }
    let (status, stderr) = run_child("a_panicking_task_ends_the_process");
    assert_eq!(status.code(), Some(ks_shared::crash::PANIC_EXIT), "{stderr}");
    assert!(stderr.contains("a controller bug"), "{stderr}");
}

#[test]
fn a_panic_inside_catching_is_an_error_to_its_caller() {
    if std::env::var_os(CHILD).is_some() {
        ks_shared::crash::exit_on_panic();
        let caught = ks_shared::crash::catching(|| panic!("a parser bug on user input"));
        assert!(caught.is_err());
        assert_eq!(ks_shared::crash::catching(|| 7).ok(), Some(7));
        eprintln!("still running");
        return;
    }
    let (status, stderr) = run_child("a_panic_inside_catching_is_an_error_to_its_caller");
    assert!(status.success(), "the process ended: {status}\n{stderr}");
    assert!(stderr.contains("still running"), "{stderr}");
}
