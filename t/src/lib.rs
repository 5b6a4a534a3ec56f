//! Test harness: temp prefix, generated nginx.conf, real nginx, real backends.
