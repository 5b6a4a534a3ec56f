//! HTTP/2 (RFC 9113) for the `grpc`/`grpcs` checks and
//! `check_http_version 2`: a sans-I/O client. The engine moves the bytes;
//! this module decides what they mean and what to answer.
//!
//! - [`frame`]: the incremental frame reader and the encoders of the
//!   frames a client sends;
//! - [`hpack`] and [`huffman`]: header compression (RFC 7541), written
//!   here (the module's documentation says why no crate was taken);
//! - [`conn`]: the connection state machine, [`Client`];
//! - [`response`]: what a stream received, [`Response`], and the rules a
//!   response's fields must follow;
//! - [`request`]: the header list of an http check's request;
//! - [`error`]: [`ProtocolError`] and the protocol's error codes.
//!
//! Nothing here reads a clock or does I/O, nothing panics on any input,
//! and every buffer has a bound given by [`Limits`].

pub mod conn;
pub mod error;
pub mod frame;
pub mod hpack;
pub mod huffman;
pub mod request;
pub mod response;

pub use conn::{Client, Event, GoAway, Limits, OpenError, PeerSettings};
pub use error::{code, ProtocolError};
pub use response::{Field, Response};

#[cfg(test)]
mod tests;
