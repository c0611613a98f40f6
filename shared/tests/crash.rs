//! A panic in a spawned task ends the process (run as a child process of this test).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "KS_CRASH_TEST_CHILD";

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
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "a_panicking_task_ends_the_process", "--nocapture"])
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
            panic!("the process kept running after its task panicked");
        }
        // Polling a child's exit with a deadline; there is nothing else to wait on.
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    assert_eq!(status.code(), Some(ks_shared::crash::PANIC_EXIT), "{stderr}");
    assert!(stderr.contains("a controller bug"), "{stderr}");
}
