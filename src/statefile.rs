//! Writing `check_state_file` (docs/operations.md, State file): one
//! process, worker 0, writes the file while it holds the lock on
//! `PATH.lock`; `crate::shm` reads it when a zone starts without a previous
//! one (a start or a binary upgrade).
//!
//! Writing: a timer every [`TICK_MS`] compares a fingerprint of every
//! peer's saved fields with the last one written and, when it moved,
//! writes `PATH.tmp`, fsyncs it, renames it over `PATH` and fsyncs the
//! directory; so a change is on disk within about half a second, and a
//! reader only ever sees a complete file. The worker writes once more when
//! it exits (graceful shutdown, reload, binary upgrade: `exit_process`).
//!
//! One writer at a time, across reloads and binary upgrades: worker 0
//! takes an exclusive `flock` on `PATH.lock` without waiting, keeps it for
//! its life, and the kernel drops it when the process ends. A new worker 0
//! (after a reload, a crash, or in the new binary's nginx) tries again on
//! every tick, so it takes over within a tick of the old one exiting, and
//! writes at once. An old worker's last write (its state at exit) comes
//! before the new one's first.
//!
//! Errors (a missing directory, a full disk, a lock file that cannot be
//! made) are logged at `warn` once until a write succeeds again (`notice`);
//! nginx goes on without the file. The I/O is blocking and small (about 100
//! bytes per peer), done on the worker's event loop.

use core::ffi::c_void;
use core::ptr::NonNull;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use core::sync::atomic::Ordering;

use healthcheck_core::statefile::{self as sf, Entry, Named};
use healthcheck_core::status::Group;
use healthcheck_core::zone::admin;
use ngx::ffi::{
    ngx_add_timer, ngx_del_timer, ngx_event_t, ngx_log_t, NGX_LOG_NOTICE, NGX_LOG_WARN,
};

use crate::ffi::{self, guard};
use crate::shm::Zone;
use crate::worker::Context;

/// How often the writer looks for changes, ms.
pub const TICK_MS: u64 = 500;

fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn warn(log: *mut ngx_log_t, args: core::fmt::Arguments<'_>) {
    ffi::log(NGX_LOG_WARN, log, args);
}

/// Worker 0's writer of one context's file. nginx holds a pointer to its
/// timer (the event's `data`): made with `Box::into_raw`, freed by Drop.
pub struct StateWriter {
    inner: NonNull<Inner>,
}

#[repr(C)]
struct Inner {
    /// Must stay first: nginx's debug log reads a timer's `data` as a
    /// connection whose `fd` (4th word) is -1 (see `check::Probe`).
    ident: [usize; 4],
    ev: ngx_event_t,
    group: Group,
    path: PathBuf,
    zone: Zone,
    /// Per slot: upstream, address, server line (for the file's reader).
    names: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>,
    /// The open lock file while this process holds the lock.
    lock: Option<File>,
    /// Fingerprint of the state last written.
    written: Option<u64>,
    /// A write failed and was logged; the next success says so.
    failing: bool,
    /// Taking the lock failed for another reason than "held": logged.
    lock_failing: bool,
    log: *mut ngx_log_t,
}

impl StateWriter {
    /// Start writing `path` from `ctx`'s zone.
    pub fn start(group: Group, ctx: &Context, path: &[u8], log: *mut ngx_log_t) -> Option<Self> {
        let zone = ctx.zone?;
        let names = ctx
            .targets
            .iter()
            .map(|t| {
                (
                    t.upstream_bytes().to_vec(),
                    t.peer.name_bytes().to_vec(),
                    t.peer.server_bytes().to_vec(),
                )
            })
            .collect();
        let inner = Box::new(Inner {
            ident: [0, 0, 0, usize::MAX],
            // SAFETY: all-zero is nginx's initial state for an event.
            ev: unsafe { core::mem::zeroed() },
            group,
            path: path_of(path),
            zone,
            names,
            lock: None,
            written: None,
            failing: false,
            lock_failing: false,
            log,
        });
        let raw = Box::into_raw(inner);
        // SAFETY: `raw` is the only reference to the new writer; its event
        // is armed once.
        unsafe {
            (*raw).ev.data = raw.cast::<c_void>();
            (*raw).ev.handler = Some(ngx_healthcheck_state_timer);
            (*raw).ev.log = log;
            (*raw).ev.set_cancelable(1);
            ngx_add_timer(&mut (*raw).ev, 1);
        }
        Some(Self {
            // SAFETY: not NULL (from a Box).
            inner: unsafe { NonNull::new_unchecked(raw) },
        })
    }
}

impl Drop for StateWriter {
    /// The last write (exit, reload, upgrade), then free the writer and
    /// release the lock.
    fn drop(&mut self) {
        // SAFETY: made in `start`; nginx's only pointer to it is the timer
        // event, deleted here before the box is freed.
        let mut inner = unsafe { Box::from_raw(self.inner.as_ptr()) };
        if inner.ev.timer_set() != 0 {
            // SAFETY: our own timer.
            unsafe { ngx_del_timer(&mut inner.ev) };
        }
        let log = inner.log;
        guard(log, "state file", (), || {
            if inner.lock.is_some() {
                inner.write_if_changed();
            }
        });
        drop(inner);
    }
}

unsafe extern "C" fn ngx_healthcheck_state_timer(ev: *mut ngx_event_t) {
    // SAFETY: `data` is the writer owning this event (set in `start`).
    let (w, log) = unsafe { ((*ev).data.cast::<Inner>(), (*ev).log) };
    // SAFETY: the writer outlives its timer (Drop deletes it first).
    let Some(w) = (unsafe { w.as_mut() }) else {
        return;
    };
    guard(log, "state file timer", (), || w.tick());
    if !ffi::exiting() && w.ev.timer_set() == 0 {
        // SAFETY: our own event, not armed.
        unsafe { ngx_add_timer(&mut w.ev, TICK_MS as ngx::ffi::ngx_msec_t) };
    }
}

impl Inner {
    fn tick(&mut self) {
        if self.lock.is_none() && !self.take_lock() {
            return;
        }
        self.write_if_changed();
    }

    /// Try to become the writer; true if this process holds the lock.
    fn take_lock(&mut self) -> bool {
        let lock_path = with_suffix(&self.path, ".lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&lock_path);
        let file = match file {
            Ok(f) => f,
            Err(e) => {
                if !self.lock_failing {
                    self.lock_failing = true;
                    warn(
                        self.log,
                        format_args!(
                            "check_state_file \"{}\" not written: cannot open \"{}\": {e}",
                            self.path.display(),
                            lock_path.display()
                        ),
                    );
                }
                return false;
            }
        };
        // SAFETY: a valid open descriptor; flock does not touch memory.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            // Held by another process (an old worker): try again later.
            return false;
        }
        self.lock_failing = false;
        self.lock = Some(file);
        // The state may have changed while another process held the lock.
        self.written = None;
        true
    }

    /// A fingerprint of what the file saves (FNV-1a over every slot's
    /// identity, health, admin bits and change times).
    fn fingerprint(&self) -> u64 {
        let r = Ordering::Relaxed;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for s in self.zone.slots() {
            for v in [
                s.identity.load(r),
                u64::from(s.up.load(r)),
                u64::from(s.admin.load(r) & admin::DISABLED),
                s.last_change.load(r),
                s.down_since.load(r),
            ] {
                for b in v.to_le_bytes() {
                    h ^= u64::from(b);
                    h = h.wrapping_mul(0x0000_0100_0000_01b3);
                }
            }
        }
        h
    }

    fn write_if_changed(&mut self) {
        let fp = self.fingerprint();
        if self.written == Some(fp) {
            return;
        }
        match self.write() {
            Ok(()) => {
                self.written = Some(fp);
                if self.failing {
                    self.failing = false;
                    ffi::log(
                        NGX_LOG_NOTICE,
                        self.log,
                        format_args!("check_state_file \"{}\" written again", self.path.display()),
                    );
                }
            }
            Err(e) => {
                if !self.failing {
                    self.failing = true;
                    warn(
                        self.log,
                        format_args!(
                            "check_state_file \"{}\" not written: {e}; retrying every {TICK_MS} ms",
                            self.path.display()
                        ),
                    );
                }
            }
        }
    }

    /// Write the whole file atomically: temporary file, fsync, rename,
    /// fsync of the directory.
    fn write(&self) -> std::io::Result<()> {
        let r = Ordering::Relaxed;
        let slots = self.zone.slots();
        let mut body = Vec::with_capacity(128 + slots.len() * 100);
        let empty: &[u8] = b"";
        sf::render(
            self.group,
            slots.iter().enumerate().map(|(i, s)| {
                let (upstream, name, server) = self
                    .names
                    .get(i)
                    .map_or((empty, empty, empty), |(u, n, v)| {
                        (u.as_slice(), n.as_slice(), v.as_slice())
                    });
                Named {
                    entry: Entry {
                        identity: s.identity.load(r),
                        up: s.up.load(r) != 0,
                        // An ejection is not saved: it ends with its time.
                        admin: s.admin.load(r) & admin::DISABLED,
                        last_change: s.last_change.load(r),
                        down_since: s.down_since.load(r),
                    },
                    upstream,
                    name,
                    server,
                }
            }),
            &mut body,
        );
        let tmp = with_suffix(&self.path, ".tmp");
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o644)
                .open(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // The rename itself is durable once the directory is synced.
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()
    }
}
