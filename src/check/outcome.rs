//! How a round ends, and where a probe kind's handler left it.

use core::ffi::c_int;

use healthcheck_core::reason::Reason;

/// A resource this host ran out of.
#[derive(Clone, Copy, Debug)]
pub enum Local {
    /// `socket()`/`connect()` failed with this errno.
    Errno(c_int),
    /// nginx had no free connection (`worker_connections`).
    NoConnection,
    /// No memory for the TLS connection.
    NoMemory,
}

/// The end of a round.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Up {
        delay_ms: u64,
    },
    Down(Reason),
    /// A local resource problem; counters stay as they are.
    Local(Local),
}

/// Where a probe kind's handler left the round.
pub enum Step {
    /// Waiting for an event or a timer.
    Pending,
    /// Over.
    Done(Outcome),
    /// The kept connection the round started on can serve no more (an
    /// HTTP/2 server's GOAWAY): the round goes on, on a new connection.
    Reconnect,
}
