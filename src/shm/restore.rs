//! Reading `check_state_file` into a fresh zone (docs/operations.md, State
//! file): when a zone starts without a previous one (a start or a binary
//! upgrade, not a reload), the saved health and admin state of each peer
//! whose identity the file names. The file is written by
//! `crate::statefile`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use core::sync::atomic::Ordering;

use healthcheck_core::statefile as sf;
use healthcheck_core::status::Group;
use ngx::ffi::{ngx_log_t, NGX_LOG_NOTICE, NGX_LOG_WARN};

use crate::ffi;
use healthcheck_core::zone::Slot;

fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

/// Read `path` and take its saved state into the matching `slots` of a
/// zone just filled. Anything wrong with the file is a `warn` and leaves
/// the slots as they are.
pub fn restore(log: *mut ngx_log_t, path: &[u8], group: Group, slots: &[Slot]) {
    let path = path_of(path);
    let shown = path.display();
    let mut wanted: HashMap<u64, usize> = HashMap::new();
    for s in slots {
        *wanted
            .entry(s.identity.load(Ordering::Relaxed))
            .or_default() += 1;
    }
    let limit = sf::max_file_bytes(slots.len());
    let bytes = match File::open(&path) {
        Ok(f) => {
            let mut bytes = Vec::new();
            // One byte over the limit tells a file that is too large.
            match f.take(limit as u64 + 1).read_to_end(&mut bytes) {
                Ok(_) if bytes.len() > limit => {
                    warn(
                        log,
                        format_args!(
                            "check_state_file \"{shown}\" ignored: larger than {limit} bytes, \
                             more than {} peers can need; {} peers start as configured",
                            slots.len(),
                            group.as_str()
                        ),
                    );
                    return;
                }
                Ok(_) => bytes,
                Err(e) => {
                    warn(
                        log,
                        format_args!("check_state_file \"{shown}\" ignored: cannot read it: {e}"),
                    );
                    return;
                }
            }
        }
        Err(e) => {
            warn(
                log,
                format_args!(
                    "check_state_file \"{shown}\" not read: {e}; {} peers start as configured",
                    group.as_str()
                ),
            );
            return;
        }
    };
    match sf::parse(&bytes, group, &wanted) {
        Ok(mut saved) => {
            let mut n = 0;
            for s in slots {
                if let Some(e) = saved.take(s.identity.load(Ordering::Relaxed)) {
                    s.restore(&e);
                    n += 1;
                }
            }
            ffi::log(
                NGX_LOG_NOTICE,
                log,
                format_args!(
                    "check_state_file \"{shown}\": {n} of {} {} peers start as saved ({} saved)",
                    slots.len(),
                    group.as_str(),
                    saved.lines
                ),
            );
        }
        Err(e) => warn(
            log,
            format_args!(
                "check_state_file \"{shown}\" ignored: {e}; {} peers start as configured",
                group.as_str()
            ),
        ),
    }
}

fn warn(log: *mut ngx_log_t, args: core::fmt::Arguments<'_>) {
    ffi::log(NGX_LOG_WARN, log, args);
}
