//! A failure that leaves a controller dead ends the process. A tokio task that panics otherwise
//! dies alone, and the process keeps running and answering `/healthz` with 200 while it does
//! nothing. Exiting lets the kubelet restart it, with the reason at the end of its log.

/// Exit status of a process ended by a panic (Rust's own for a panicking `main`).
pub const PANIC_EXIT: i32 = 101;
/// Exit status of a process whose controller stopped with an error.
pub const FAILED_EXIT: i32 = 1;

/// Makes every panic, in any thread or task, end the process once it is reported.
pub fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!(panic = %info, "a task panicked; exiting, to be restarted");
        std::process::exit(PANIC_EXIT);
    }));
}

/// Ends the process: `what`, which should run until shutdown, stopped with `error`.
pub fn exit_on_error(what: &str, error: &dyn std::fmt::Display) -> ! {
    tracing::error!(error = %error, "{what} stopped; exiting, to be restarted");
    std::process::exit(FAILED_EXIT);
}
