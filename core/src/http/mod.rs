//! HTTP/1.x for the http check: the request it sends and an incremental,
//! bounded parser of the response.

pub mod request;
pub mod response;
