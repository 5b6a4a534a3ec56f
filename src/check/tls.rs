//! The TLS transport of `type=https` and `type=tls` (docs/tls.md):
//! nginx's own SSL layer on the round's connection, the OpenSSL nginx is
//! linked with.
//!
//! After the TCP connect the round creates nginx's SSL connection
//! (`ngx_ssl_create_connection`, from the upstream's `ngx_ssl_t`), sets the
//! SNI and the peer's last session, and runs `ngx_ssl_handshake`; nginx
//! drives the handshake's events and calls back `c->ssl->handler`. Then the
//! certificate is verified (chain, then name) when `check_ssl_verify` is
//! on, and the probe kind runs over `c->recv`/`c->send`, which nginx has
//! pointed at its SSL functions. The SSL object and the connection's pool
//! are freed whenever the connection is closed (`Conn::close`), on every
//! path. Sessions: nginx calls `save_session` when the server issues one
//! (after the handshake, or with a TLS 1.3 ticket read later); the next
//! round offers it.

use core::ffi::CStr;
use core::ptr;
use std::cell::{Cell, RefCell};
use std::ffi::CString;

use healthcheck_core::reason::Reason;
use ngx::ffi::{
    ngx_connection_t, ngx_create_pool, ngx_int_t, ngx_log_t, ngx_ssl_check_host,
    ngx_ssl_create_connection, ngx_ssl_get_session, ngx_ssl_handshake, ngx_ssl_set_session,
    ngx_ssl_t, ngx_str_t, ngx_uint_t, SSL_SESSION_free, SSL_SESSION_get0_peer, SSL_ctrl,
    SSL_get0_alpn_selected, SSL_get1_peer_certificate, SSL_get_verify_result, SSL_session_reused,
    SSL_set_alpn_protos, TLSEXT_NAMETYPE_host_name, X509_check_ip_asc, X509_cmp_current_time,
    X509_free, X509_get0_notAfter, X509_verify_cert_error_string, NGX_AGAIN, NGX_OK,
    NGX_SSL_CLIENT, SSL_CTRL_CLEAR_MODE, SSL_CTRL_SET_MAX_SEND_FRAGMENT,
    SSL_CTRL_SET_TLSEXT_HOSTNAME, SSL_MODE_RELEASE_BUFFERS, SSL_SESSION, X509_V_OK,
};

use super::conn::Conn;
use super::outcome::{Local, Outcome};

/// Pool of a TLS round's connection: nginx's SSL connection struct and
/// little else (OpenSSL allocates its own buffers: released when idle,
/// except on a connection that may be kept).
const POOL_SIZE: usize = 512;

/// The largest record a kept connection writes: a check's request fits in
/// one (a longer one takes several records), and OpenSSL's write buffer,
/// kept with the connection, stays small.
const KEPT_SEND_FRAGMENT: usize = 2048;

/// What one probe keeps of TLS between rounds.
pub struct Tls {
    /// The upstream's SSL context (configuration pool; it outlives every
    /// connection made from it: OpenSSL counts references).
    ssl: *mut ngx_ssl_t,
    /// The SNI sent, if any.
    sni: Option<CString>,
    /// `check_ssl_verify on`: the name the certificate must match.
    verify: Option<Vec<u8>>,
    /// `check_ssl_session_reuse`.
    reuse: bool,
    /// `check_ssl_verify_interval`: with `verify`, a session is resumed
    /// only this long after the full handshake that verified the
    /// certificate (ms).
    verify_interval_ms: u64,
    /// When the last full handshake verified the certificate (nginx ms).
    verified_ms: u64,
    /// Offer ALPN `h2` and require it (grpcs, https with
    /// `check_http_version 2`).
    h2: bool,
    /// The peer's last session (one reference owned here), or NULL.
    session: *mut SSL_SESSION,
    /// The current round's handshake resumed a session.
    pub resumed: bool,
    /// Why the last handshake or verification failed, for the log.
    pub detail: Option<String>,
}

impl Tls {
    pub fn new(
        ssl: *mut ngx_ssl_t,
        sni: Option<&[u8]>,
        verify: Option<&[u8]>,
        (reuse, verify_interval_ms): (bool, u64),
        h2: bool,
    ) -> Tls {
        Tls {
            ssl,
            sni: sni.and_then(|n| CString::new(n).ok()),
            verify: verify.map(<[u8]>::to_vec),
            reuse,
            verify_interval_ms,
            verified_ms: 0,
            h2,
            session: ptr::null_mut(),
            resumed: false,
            detail: None,
        }
    }

    /// With `check_ssl_verify on`, a resumed handshake skips the
    /// certificate: the session is dropped (the round makes a full
    /// handshake) once `check_ssl_verify_interval` has passed since the
    /// full handshake that verified it, or when the certificate it holds
    /// has expired since.
    fn must_verify_again(&mut self) -> bool {
        if self.verify.is_none() || self.session.is_null() {
            return false;
        }
        let age = crate::ffi::monotonic_ms().saturating_sub(self.verified_ms);
        // SAFETY: the session this struct owns; its peer certificate (if
        // any) and that certificate's notAfter live as long as it.
        let expired = unsafe {
            let x = SSL_SESSION_get0_peer(self.session);
            x.is_null() || X509_cmp_current_time(X509_get0_notAfter(x)) <= 0
        };
        let again = self.verified_ms == 0 || age >= self.verify_interval_ms || expired;
        if again {
            self.set_session(ptr::null_mut());
        }
        again
    }

    /// A kept connection's rehandshake period `period_ms`, with
    /// `check_ssl_verify on` at most `check_ssl_verify_interval`: its
    /// certificate was verified when it was made.
    pub fn verify_period(&self, period_ms: u64) -> u64 {
        match self.verify {
            Some(_) => period_ms.min(self.verify_interval_ms),
            None => period_ms,
        }
    }

    fn set_session(&mut self, s: *mut SSL_SESSION) {
        if !self.session.is_null() {
            // SAFETY: the reference this struct owns.
            unsafe { SSL_SESSION_free(self.session) };
        }
        self.session = s;
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        self.set_session(ptr::null_mut());
    }
}

/// Where the handshake is.
pub enum Handshake {
    /// Waiting for the peer; nginx calls back.
    Pending,
    /// Established (and verified, when asked).
    Done,
    /// The round ends.
    Failed(Outcome),
}

impl Tls {
    /// Start the handshake on the round's fresh connection `c`: nginx's SSL
    /// connection with the SNI and the peer's last session; `handler` is
    /// what nginx calls when the handshake ends later. `keep`: the
    /// connection may be kept; `budget_ms`: what is left of the round.
    pub fn start(
        &mut self,
        c: Conn,
        base: *mut ngx_log_t,
        keep: bool,
        budget_ms: u64,
        handler: ngx::ffi::ngx_connection_handler_pt,
    ) -> Handshake {
        self.resumed = false;
        self.detail = None;
        let raw = c.as_ptr();
        // SAFETY: the round's live connection; the SSL context lives in the
        // configuration pool of the running cycle.
        unsafe {
            if (*raw).pool.is_null() {
                (*raw).pool = ngx_create_pool(POOL_SIZE, base);
                if (*raw).pool.is_null() {
                    return Handshake::Failed(Outcome::Local(Local::NoMemory));
                }
            }
            let Some(log) = connection_log((*raw).pool, base, raw) else {
                return Handshake::Failed(Outcome::Local(Local::NoMemory));
            };
            (*raw).log = log;
            if ngx_ssl_create_connection(self.ssl, raw, NGX_SSL_CLIENT as ngx_uint_t)
                != NGX_OK as ngx_int_t
            {
                return Handshake::Failed(Outcome::Local(Local::NoMemory));
            }
            let sc = (*raw).ssl;
            super::conn::watch_socket_reads(c);
            if keep {
                // A connection that may be kept keeps OpenSSL's record
                // buffers between rounds, rather than freeing and allocating
                // them on every read and write (nginx sets
                // SSL_MODE_RELEASE_BUFFERS on its contexts); its write buffer
                // is sized for a check's request, not for 16 KB records
                // (docs/tls.md).
                SSL_ctrl(
                    (*sc).connection,
                    SSL_CTRL_CLEAR_MODE as i32,
                    SSL_MODE_RELEASE_BUFFERS as _,
                    ptr::null_mut(),
                );
                SSL_ctrl(
                    (*sc).connection,
                    SSL_CTRL_SET_MAX_SEND_FRAGMENT as i32,
                    KEPT_SEND_FRAGMENT as _,
                    ptr::null_mut(),
                );
            }
            if self.reuse {
                (*sc).save_session = Some(ngx_healthcheck_tls_save_session);
                if !self.session.is_null() && !self.must_verify_again() {
                    // A session the server no longer knows just means a full
                    // handshake.
                    ngx_ssl_set_session(raw, self.session);
                }
            }
            if let Some(name) = &self.sni {
                SSL_ctrl(
                    (*sc).connection,
                    SSL_CTRL_SET_TLSEXT_HOSTNAME as i32,
                    TLSEXT_NAMETYPE_host_name as _,
                    name.as_ptr().cast_mut().cast(),
                );
            }
            if self.h2 {
                // The wire format: a length byte, then the name. http/1.1
                // is offered too, so that an HTTP/1.1-only server says so
                // (it picks it and the round fails with `protocol`) rather
                // than ending the handshake with an alert.
                const H2: [u8; 12] = *b"\x02h2\x08http/1.1";
                if SSL_set_alpn_protos((*sc).connection, H2.as_ptr(), H2.len() as _) != 0 {
                    return Handshake::Failed(Outcome::Local(Local::NoMemory));
                }
            }
            (*sc).handler = handler;
        }
        c.clear_timedout();
        // SAFETY: the connection has its SSL object now.
        let rc = unsafe { ngx_ssl_handshake(raw) };
        if rc == NGX_AGAIN as ngx_int_t {
            c.del_timers();
            c.write_timer(budget_ms.max(1));
            return Handshake::Pending;
        }
        self.finished(c)
    }

    /// The handshake on `c` ended (nginx's callback, or at once): verify,
    /// or say why it failed.
    pub fn finished(&mut self, c: Conn) -> Handshake {
        c.del_timers();
        let raw = c.as_ptr();
        let t = self;
        // SAFETY: the round's live connection.
        let (sc, timedout) = unsafe {
            (
                (*raw).ssl,
                (*(*raw).write).timedout() != 0 || (*(*raw).read).timedout() != 0,
            )
        };
        // SAFETY: NULL or nginx's SSL connection of `c`.
        let handshaked = unsafe { sc.as_ref() }.is_some_and(|s| s.handshaked() != 0);
        if !handshaked {
            if timedout {
                return Handshake::Failed(Outcome::Down(Reason::Timeout));
            }
            t.detail = captured(c);
            // A server that takes no protocol we offered ends the
            // handshake with the no_application_protocol alert.
            let alpn = t
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("no application protocol"));
            if t.h2 && alpn {
                return Handshake::Failed(Outcome::Down(Reason::Protocol));
            }
            return Handshake::Failed(Outcome::Down(Reason::Tls));
        }
        collect(t, c);
        // SAFETY: established: `sc` and its SSL object are live.
        let ssl = unsafe { (*sc).connection };
        // SAFETY: as above.
        t.resumed = unsafe { SSL_session_reused(ssl) } == 1;
        if let Some(name) = t.verify.as_deref() {
            // SAFETY: as above.
            let rc = unsafe { SSL_get_verify_result(ssl) };
            if rc != X509_V_OK as _ {
                // SAFETY: OpenSSL returns a static string for any code.
                let why = unsafe { CStr::from_ptr(X509_verify_cert_error_string(rc)) };
                t.detail = Some(format!(
                    "certificate verify failed: {}",
                    why.to_string_lossy()
                ));
                return Handshake::Failed(Outcome::Down(Reason::TlsVerify));
            }
            if !name_matches(c, name) {
                t.detail = Some(format!(
                    "certificate does not match \"{}\"",
                    String::from_utf8_lossy(name)
                ));
                return Handshake::Failed(Outcome::Down(Reason::TlsVerify));
            }
            if !t.resumed {
                t.verified_ms = crate::ffi::monotonic_ms();
            }
        }
        if t.h2 {
            let mut proto: *const u8 = ptr::null();
            let mut len: core::ffi::c_uint = 0;
            // SAFETY: as above; OpenSSL points into its own buffer (or
            // leaves NULL), valid while the connection lives.
            unsafe { SSL_get0_alpn_selected(ssl, &mut proto, &mut len) };
            let chosen = match proto.is_null() {
                true => &[][..],
                // SAFETY: `len` bytes at `proto`, per OpenSSL.
                false => unsafe { core::slice::from_raw_parts(proto, len as usize) },
            };
            if chosen != b"h2" {
                t.detail = Some(match chosen {
                    [] => "the server chose no ALPN protocol (h2 required)".to_string(),
                    p => format!(
                        "the server chose ALPN {} (h2 required)",
                        String::from_utf8_lossy(p)
                    ),
                });
                return Handshake::Failed(Outcome::Down(Reason::Protocol));
            }
        }
        Handshake::Done
    }

    /// Take the session nginx handed over for `c`, if any, as the peer's
    /// next (after any read on `c`: a TLS 1.3 ticket may come with data).
    pub fn collect(&mut self, c: Conn) {
        collect(self, c);
    }
}

/// Whether the peer's certificate is for `name`: a host name as nginx's
/// `proxy_ssl_verify` checks it, an IP address against the certificate's
/// IP addresses.
fn name_matches(c: Conn, name: &[u8]) -> bool {
    let raw = c.as_ptr();
    if healthcheck_core::tls::is_ip_literal(name) {
        let inner = name
            .strip_prefix(b"[")
            .and_then(|n| n.strip_suffix(b"]"))
            .unwrap_or(name);
        let Ok(ip) = CString::new(inner) else {
            return false;
        };
        // SAFETY: an established TLS connection; the certificate reference
        // is released below.
        unsafe {
            let cert = SSL_get1_peer_certificate((*(*raw).ssl).connection);
            if cert.is_null() {
                return false;
            }
            let ok = X509_check_ip_asc(cert, ip.as_ptr(), 0) == 1;
            X509_free(cert);
            ok
        }
    } else {
        let mut s = ngx_str_t {
            len: name.len(),
            data: name.as_ptr().cast_mut(),
        };
        // SAFETY: an established TLS connection; nginx only reads `s`.
        unsafe { ngx_ssl_check_host(raw, &mut s) == NGX_OK as ngx_int_t }
    }
}

/// nginx's `save_session` callback: the server issued a session (after a
/// full handshake, or a TLS 1.3 ticket read later). It runs inside OpenSSL,
/// within a call the probe's own code made while it holds the probe, so it
/// never touches the probe: the session waits in [`PENDING`] until the
/// probe collects it ([`Tls::collect`]).
unsafe extern "C" fn ngx_healthcheck_tls_save_session(c: *mut ngx_connection_t) {
    // SAFETY: nginx's session of this live connection, one reference for us.
    let s = unsafe { ngx_ssl_get_session(c) };
    let old = PENDING.with(|p| p.replace((c as usize, s)));
    if !old.1.is_null() {
        // SAFETY: a reference no probe collected (another connection's).
        unsafe { SSL_SESSION_free(old.1) };
    }
}

/// Take the session nginx handed over for `c`, if any, as the peer's next.
fn collect(t: &mut Tls, c: Conn) {
    let pending = PENDING.with(|p| {
        let (conn, s) = p.get();
        if conn == c.as_ptr() as usize && !s.is_null() {
            p.set((0, ptr::null_mut()));
            s
        } else {
            ptr::null_mut()
        }
    });
    if !pending.is_null() {
        t.set_session(pending);
    }
}

// --- OpenSSL's reason for the log line ---------------------------------------

thread_local! {
    /// A session for the connection (its address) that got it.
    static PENDING: Cell<(usize, *mut SSL_SESSION)> = const { Cell::new((0, ptr::null_mut())) };
    /// The last message nginx's SSL layer logged on a TLS check connection,
    /// and that connection's address.
    static CAPTURED: RefCell<(usize, Option<String>)> = const { RefCell::new((0, None)) };
}

/// Longest message kept.
const CAPTURED_MAX: usize = 512;

/// What nginx logged last on `c`, taken.
fn captured(c: Conn) -> Option<String> {
    CAPTURED.with(|m| {
        let mut m = m.borrow_mut();
        if m.0 == c.as_ptr() as usize {
            m.1.take()
        } else {
            None
        }
    })
}

/// The log of one TLS check connection, in its pool: nginx's SSL layer
/// logs a failed handshake with OpenSSL's reason (at `info` or `crit`);
/// this log keeps the connection's last message for the module's own
/// state-change line instead of writing it (a check that fails every round
/// must not fill the error log). With debug logging on, the connection
/// keeps the ordinary log.
///
/// # Safety
/// `pool` is the connection's; `base` the probes' connection log.
unsafe fn connection_log(
    pool: *mut ngx::ffi::ngx_pool_t,
    base: *mut ngx_log_t,
    c: *mut ngx_connection_t,
) -> Option<*mut ngx_log_t> {
    // SAFETY: per the contract.
    let mut l = unsafe { *base };
    if l.log_level & !0xf != 0 {
        // debug bits: keep nginx's own messages
        return Some(base);
    }
    l.log_level = ngx::ffi::NGX_LOG_INFO as usize;
    l.writer = Some(capture);
    l.wdata = c.cast();
    l.next = ptr::null_mut();
    // SAFETY: a log-sized allocation in the connection's pool, which lives
    // as long as the connection.
    let made = unsafe { ngx::ffi::ngx_palloc(pool, core::mem::size_of::<ngx_log_t>()) }
        .cast::<ngx_log_t>();
    if made.is_null() {
        return None;
    }
    // SAFETY: freshly allocated, the right size and alignment (nginx's
    // pools align to pointers).
    unsafe { made.write(l) };
    Some(made)
}

unsafe extern "C" fn capture(log: *mut ngx_log_t, _level: ngx_uint_t, buf: *mut u8, len: usize) {
    // SAFETY: nginx passes its formatted line and the log we made.
    let (line, conn) = unsafe { (core::slice::from_raw_parts(buf, len), (*log).wdata as usize) };
    // A log writer must not log (the guard would) nor unwind into nginx: a
    // panic here only loses the detail of the log line.
    let _ = std::panic::catch_unwind(|| {
        let text = healthcheck_core::tls::logged_message(line, CAPTURED_MAX);
        CAPTURED.with(|m| *m.borrow_mut() = (conn, Some(text)));
    });
}
