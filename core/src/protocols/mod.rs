//! The fixed exchanges of the check types that speak an application's own
//! protocol instead of HTTP (docs/directives.md, check: type): what is
//! sent, and sans-IO decoders of the answer, fed bytes in any split.
//!
//! - [`mysql`]: the server's initial handshake packet (`type=mysql`);
//! - [`ajp`]: AJP13's CPing / CPong (`type=ajp`);
//! - [`fastcgi`]: a FastCGI request and its response's `Status`
//!   (`type=fastcgi`).
//!
//! Every decoder holds at most a bounded number of bytes, whatever it is
//! fed, and answers [`Verdict::NeedMore`] until it knows.

pub mod ajp;
pub mod fastcgi;
pub mod mysql;

use crate::reason::Reason;

/// Where an answer stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided yet: feed more bytes (or the end of the stream).
    NeedMore,
    /// The answer says the service is up.
    Up,
    /// It says the service is down, why (a failure reason of the check
    /// type) and what the log line quotes.
    Down(Reason, String),
}

/// A decoder of one round's answer.
pub trait Answer {
    /// More bytes of the answer arrived.
    fn feed(&mut self, bytes: &[u8]) -> Verdict;
    /// The server closed the connection.
    fn eof(&mut self) -> Verdict;
}
