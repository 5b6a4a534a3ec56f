//! HTTP/1.x for the http check: pure, incremental parsers.

pub mod response;
