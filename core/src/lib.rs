//! Pure logic of nginx-healthcheck. No nginx symbols, no `unsafe`, no I/O,
//! no clocks: callers pass `now` and randomness in.
#![forbid(unsafe_code)]
pub mod admin;
pub mod conf;
pub mod events;
pub mod gate;
pub mod grpc;
pub mod h2;
pub mod health;
pub mod http;
pub mod identity;
pub mod inflight;
pub mod matcher;
pub mod outlier;
pub mod protocols;
pub mod ptrmap;
pub mod query;
pub mod ramp;
pub mod reason;
pub mod room;
pub mod schedule;
pub mod statefile;
pub mod status;
pub mod timing;
pub mod tls;
pub mod vnswrr;
pub mod zone;
