//! Polling with deadlines. Tests never sleep and hope: they poll a condition
//! every [`POLL_STEP`] until it holds or the time is up, and a timeout fails
//! with a message saying what was awaited.

use std::fmt::Display;
use std::thread;
use std::time::{Duration, Instant};

/// Pause between two checks of a condition.
pub const POLL_STEP: Duration = Duration::from_millis(10);

/// Poll `f` until it returns `Some`, for at most `timeout`; `None` on timeout.
/// `f` is always called at least once, and once more at the deadline.
pub fn try_wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::sleep(POLL_STEP.min(deadline - now));
    }
}

/// Like [`try_wait_for`], but a timeout panics with "timed out after …
/// waiting for `what`".
pub fn wait_for<T>(timeout: Duration, what: impl Display, f: impl FnMut() -> Option<T>) -> T {
    try_wait_for(timeout, f)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Poll `cond` until true, for at most `timeout`; whether it became true.
pub fn try_wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    try_wait_for(timeout, || cond().then_some(())).is_some()
}

/// Poll `cond` until true; panic naming `what` on timeout.
pub fn wait_until(timeout: Duration, what: impl Display, mut cond: impl FnMut() -> bool) {
    wait_for(timeout, what, || cond().then_some(()))
}

/// Check `cond` every [`POLL_STEP`] for `duration`; panic naming `what` the
/// first time it is false. For "this must stay so" assertions.
pub fn assert_holds(duration: Duration, what: impl Display, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    let deadline = start + duration;
    loop {
        if !cond() {
            panic!("{what} stopped holding after {:?}", start.elapsed());
        }
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        thread::sleep(POLL_STEP.min(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_true() {
        let start = Instant::now();
        let mut n = 0;
        wait_until(Duration::from_secs(5), "n reaches 3", || {
            n += 1;
            n >= 3
        });
        assert_eq!(n, 3);
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn times_out() {
        let start = Instant::now();
        assert!(!try_wait_until(Duration::from_millis(50), || false));
        assert!(start.elapsed() >= Duration::from_millis(50));
        let r = std::panic::catch_unwind(|| {
            wait_until(Duration::from_millis(20), "the impossible", || false)
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("waiting for the impossible"), "{msg}");
    }

    #[test]
    fn holds() {
        assert_holds(Duration::from_millis(30), "truth", || true);
        let mut n = 0;
        let r = std::panic::catch_unwind(move || {
            assert_holds(Duration::from_secs(5), "n < 2", || {
                n += 1;
                n < 2
            })
        });
        assert!(r.is_err());
    }
}
