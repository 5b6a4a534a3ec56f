//! The TLS transport of `type=https` and `type=tls` (README: TLS checks):
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
use std::cell::RefCell;
use std::ffi::CString;

use healthcheck_core::reason::Reason;
use ngx::ffi::{
    ngx_connection_t, ngx_create_pool, ngx_int_t, ngx_log_t, ngx_ssl_check_host,
    ngx_ssl_create_connection, ngx_ssl_get_session, ngx_ssl_handshake, ngx_ssl_set_session,
    ngx_ssl_t, ngx_str_t, ngx_uint_t, SSL_SESSION_free, SSL_ctrl, SSL_get1_peer_certificate,
    SSL_get_verify_result, SSL_session_reused, TLSEXT_NAMETYPE_host_name, X509_check_ip_asc,
    X509_free, X509_verify_cert_error_string, NGX_AGAIN, NGX_OK, NGX_SSL_CLIENT,
    SSL_CTRL_SET_TLSEXT_HOSTNAME, SSL_SESSION, X509_V_OK,
};

use super::conn::Conn;
use super::round::{Local, Outcome};
use super::Probe;
use crate::ffi::guard;

/// Pool of a TLS round's connection: nginx's SSL connection struct and
/// little else (OpenSSL allocates its own buffers, released when idle).
const POOL_SIZE: usize = 512;

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
    /// The peer's last session (one reference owned here), or NULL.
    session: *mut SSL_SESSION,
    /// The current round's handshake resumed a session.
    pub resumed: bool,
    /// Why the last handshake or verification failed, for the log.
    pub detail: Option<String>,
}

impl Tls {
    pub fn new(ssl: *mut ngx_ssl_t, sni: Option<&[u8]>, verify: Option<&[u8]>, reuse: bool) -> Tls {
        Tls {
            ssl,
            sni: sni.and_then(|n| CString::new(n).ok()),
            verify: verify.map(<[u8]>::to_vec),
            reuse,
            session: ptr::null_mut(),
            resumed: false,
            detail: None,
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

/// Start the handshake on the round's fresh connection.
pub fn start(p: &mut Probe) -> Handshake {
    let Some(c) = p.conn else {
        return Handshake::Failed(Outcome::Local(Local::NoConnection));
    };
    let log = tls_log(p.conn_log);
    let Some(t) = p.tls.as_mut() else {
        return Handshake::Done;
    };
    t.resumed = false;
    t.detail = None;
    let raw = c.as_ptr();
    // SAFETY: the round's live connection; the SSL context lives in the
    // configuration pool of the running cycle.
    unsafe {
        (*raw).log = log;
        if (*raw).pool.is_null() {
            (*raw).pool = ngx_create_pool(POOL_SIZE, log);
            if (*raw).pool.is_null() {
                return Handshake::Failed(Outcome::Local(Local::NoMemory));
            }
        }
        if ngx_ssl_create_connection(t.ssl, raw, NGX_SSL_CLIENT as ngx_uint_t)
            != NGX_OK as ngx_int_t
        {
            return Handshake::Failed(Outcome::Local(Local::NoMemory));
        }
        let sc = (*raw).ssl;
        if t.reuse {
            (*sc).save_session = Some(ngx_healthcheck_tls_save_session);
            if !t.session.is_null() {
                // A session the server no longer knows just means a full
                // handshake.
                ngx_ssl_set_session(raw, t.session);
            }
        }
        if let Some(name) = &t.sni {
            SSL_ctrl(
                (*sc).connection,
                SSL_CTRL_SET_TLSEXT_HOSTNAME as i32,
                TLSEXT_NAMETYPE_host_name as _,
                name.as_ptr().cast_mut().cast(),
            );
        }
        (*sc).handler = Some(ngx_healthcheck_tls_handshaked);
    }
    CAPTURED.with(|m| m.borrow_mut().take());
    // SAFETY: the connection has its SSL object now.
    let rc = unsafe { ngx_ssl_handshake(raw) };
    if rc == NGX_AGAIN as ngx_int_t {
        let spent = p.round.elapsed_ms();
        c.del_timers();
        c.write_timer(p.check.conf.timeout_ms.saturating_sub(spent).max(1));
        return Handshake::Pending;
    }
    finished(p, c)
}

/// The handshake ended (nginx's callback, or at once): verify, or say why
/// it failed.
fn finished(p: &mut Probe, c: Conn) -> Handshake {
    c.del_timers();
    let raw = c.as_ptr();
    let Some(t) = p.tls.as_mut() else {
        return Handshake::Failed(Outcome::Down(Reason::Tls));
    };
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
        t.detail = CAPTURED.with(|m| m.borrow_mut().take());
        return Handshake::Failed(Outcome::Down(Reason::Tls));
    }
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
    }
    Handshake::Done
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

/// Count a resumed handshake of the round that just ended.
pub fn resumed(p: &Probe) -> bool {
    p.tls.as_ref().is_some_and(|t| t.resumed)
}

/// Why the last TLS round failed, in OpenSSL's words, if known.
pub fn detail(p: &Probe) -> Option<&str> {
    p.tls.as_ref().and_then(|t| t.detail.as_deref())
}

unsafe extern "C" fn ngx_healthcheck_tls_handshaked(c: *mut ngx_connection_t) {
    // SAFETY: nginx calls back with the live connection whose data is the
    // probe (set by `Probe::attach`); the probe outlives its connections.
    let (conn, p, log) = unsafe { (Conn::from_raw(c), (*c).data.cast::<Probe>(), (*c).log) };
    // SAFETY: as above.
    let (Some(conn), Some(p)) = (conn, unsafe { p.as_mut() }) else {
        return;
    };
    if !guard(log, "check TLS handshake", false, || {
        if p.conn == Some(conn) {
            let result = finished(p, conn);
            super::after_handshake(p, result);
        }
        true
    }) {
        super::recover(p);
    }
}

unsafe extern "C" fn ngx_healthcheck_tls_save_session(c: *mut ngx_connection_t) {
    // SAFETY: as in the handshake callback: the connection's data is its
    // probe (a kept connection's too).
    let (p, log) = unsafe { ((*c).data.cast::<Probe>(), (*c).log) };
    // SAFETY: as above.
    let Some(p) = (unsafe { p.as_mut() }) else {
        return;
    };
    guard(log, "check TLS session", (), || {
        // SAFETY: nginx's session of this connection, one reference for us.
        let s = unsafe { ngx_ssl_get_session(c) };
        if let Some(t) = p.tls.as_mut() {
            t.set_session(s);
        } else if !s.is_null() {
            // SAFETY: the reference just taken.
            unsafe { SSL_SESSION_free(s) };
        }
    });
}

// --- OpenSSL's reason for the log line ---------------------------------------

thread_local! {
    /// The last message nginx's SSL layer logged on a TLS check connection.
    static CAPTURED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Longest message kept.
const CAPTURED_MAX: usize = 512;

/// The log of TLS check connections: nginx's SSL layer logs a failed
/// handshake with OpenSSL's reason (at `info` or `crit`); this log keeps
/// the last message for the module's own state-change line instead of
/// writing it (a check that fails every round must not fill the error
/// log). With debug logging on, the connections keep the ordinary log.
fn tls_log(conn_log: *mut ngx_log_t) -> *mut ngx_log_t {
    static LOG: core::sync::atomic::AtomicPtr<ngx_log_t> =
        core::sync::atomic::AtomicPtr::new(ptr::null_mut());
    let made = LOG.load(core::sync::atomic::Ordering::Relaxed);
    if !made.is_null() {
        return made;
    }
    // SAFETY: the probe connections' log lives as long as the process.
    let mut l = unsafe { *conn_log };
    if l.log_level & !0xf != 0 {
        // debug bits: keep nginx's own messages
        return conn_log;
    }
    l.log_level = ngx::ffi::NGX_LOG_INFO as usize;
    l.writer = Some(capture);
    l.wdata = ptr::null_mut();
    l.next = ptr::null_mut();
    l.handler = None;
    l.data = ptr::null_mut();
    let made = Box::into_raw(Box::new(l));
    LOG.store(made, core::sync::atomic::Ordering::Relaxed);
    made
}

unsafe extern "C" fn capture(_log: *mut ngx_log_t, _level: ngx_uint_t, buf: *mut u8, len: usize) {
    // SAFETY: nginx passes its formatted line.
    let line = unsafe { core::slice::from_raw_parts(buf, len) };
    // "2026/12/01 10:00:00 [info] 12#12: *3 SSL_do_handshake() failed (...)"
    let text = line
        .windows(2)
        .position(|w| w == b": ")
        .map_or(line, |at| &line[at + 2..]);
    let text = match text.strip_prefix(b"*") {
        Some(rest) => rest
            .iter()
            .position(|&b| b == b' ')
            .map_or(rest, |at| &rest[at + 1..]),
        None => text,
    };
    let text = String::from_utf8_lossy(&text[..text.len().min(CAPTURED_MAX)])
        .trim_end()
        .to_string();
    CAPTURED.with(|m| *m.borrow_mut() = Some(text));
}
