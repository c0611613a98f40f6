//! A failure that leaves a controller dead ends the process. A tokio task that panics otherwise
//! dies alone, and the process keeps running and answering `/healthz` with 200 while it does
//! nothing. Exiting lets the kubelet restart it, with the reason at the end of its log.
//!
//! A panic inside [`catching`] is the exception: third-party code fed user input (a CEL parser,
//! say) that panics has failed on that input, and the caller reports it as the input's error.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Exit status of a process ended by a panic (Rust's own for a panicking `main`).
pub const PANIC_EXIT: i32 = 101;
/// Exit status of a process whose controller stopped with an error.
pub const FAILED_EXIT: i32 = 1;

thread_local! {
    /// How many [`catching`] calls this thread is inside of.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
}

/// Makes every panic, in any thread or task, end the process once it is reported, except one
/// inside [`catching`].
pub fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CATCHING.with(Cell::get) > 0 {
            tracing::warn!(panic = %info, "a guarded call panicked; its caller reports it as an error");
            return;
        }
        report(info);
        tracing::error!(panic = %info, "a task panicked; exiting, to be restarted");
        std::process::exit(PANIC_EXIT);
    }));
}

/// Runs `f`; a panic in it is returned as `Err` and does not end the process, whatever
/// [`exit_on_panic`] says (its hook runs before any `catch_unwind` gets the panic).
pub fn catching<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    CATCHING.with(|c| c.set(c.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get() - 1));
    result
}

/// Ends the process: `what`, which should run until shutdown, stopped with `error`.
pub fn exit_on_error(what: &str, error: &dyn std::fmt::Display) -> ! {
    tracing::error!(error = %error, "{what} stopped; exiting, to be restarted");
    std::process::exit(FAILED_EXIT);
}
