//! A check connection: a newtype over a live `ngx_connection_t` with every
//! socket operation the probe engine uses. Reads and writes go through the
//! connection's own `c->recv` / `c->send`, so a transport that replaces
//! them (nginx's SSL layer does) sits underneath without the probe kinds
//! noticing; only [`Conn::peek`], a liveness test of the plain socket, and
//! the socket options read the descriptor itself.

use core::ffi::{c_int, c_void};
use core::mem::{self, size_of};
use core::ptr::{self, NonNull};

use healthcheck_core::reason::Reason;
use ngx::ffi::{
    ngx_add_timer, ngx_close_connection, ngx_connection_t, ngx_del_timer, ngx_delete_posted_event,
    ngx_event_handler_pt, ngx_event_t, ngx_msec_t, ngx_reusable_connection,
    ngx_socket_errno as errno, NGX_AGAIN,
};

/// A live nginx connection owned by the probe engine: a round's, a kept
/// one or a spare. Copying the handle does not copy the connection; the
/// owner closes it exactly once.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Conn(NonNull<ngx_connection_t>);

/// What a one-byte `MSG_PEEK` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// Data is waiting.
    Data,
    /// Nothing yet; the connection is open.
    WouldBlock,
    /// Closed (FIN) or an error.
    Failed(Reason),
}

/// The result of `c->recv` / `c->send`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// This many bytes (0 from `recv` on a stream: the peer closed).
    Done(usize),
    /// Would block: the event comes later.
    Again,
    /// Failed with this errno (0 if nginx gave none).
    Error(c_int),
}

/// nginx's classification of a socket errno for a round.
pub fn reason_of(err: c_int) -> Reason {
    match err {
        libc::ECONNREFUSED => Reason::Refused,
        libc::ETIMEDOUT => Reason::Timeout,
        libc::ECONNRESET | libc::EPIPE => Reason::Reset,
        libc::EHOSTUNREACH | libc::ENETUNREACH => Reason::Unreachable,
        // A TLS alert or bad record (see `Conn::recv`).
        libc::EPROTO => Reason::Tls,
        _ => Reason::Error,
    }
}

/// Errors of this host, not of the peer: a round that meets one is neither
/// a success nor a failure.
pub fn is_local_error(err: c_int) -> bool {
    matches!(
        err,
        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL
    )
}

impl Conn {
    /// # Safety
    /// `c` is NULL or a live connection that the caller hands to the probe
    /// engine (nothing else reads or closes it from now on).
    pub unsafe fn from_raw(c: *mut ngx_connection_t) -> Option<Conn> {
        NonNull::new(c).map(Conn)
    }

    /// The raw connection, for nginx's functions that take one.
    pub fn as_ptr(self) -> *mut ngx_connection_t {
        self.0.as_ptr()
    }

    fn c(&self) -> &ngx_connection_t {
        // SAFETY: the type's invariant: a live connection.
        unsafe { self.0.as_ref() }
    }

    fn fd(self) -> c_int {
        self.c().fd
    }

    fn events(self) -> [*mut ngx_event_t; 2] {
        [self.c().read, self.c().write]
    }

    /// Route both events to `handler` with `data` as the connection's data;
    /// the events are cancelable (a worker may exit with them pending) and
    /// the connection idle (a shutting-down worker closes it at once:
    /// nginx sets `close` and calls the read handler).
    pub fn attach(self, data: *mut c_void, handler: ngx_event_handler_pt) {
        // SAFETY: a live connection with its two events.
        unsafe {
            let c = self.0.as_ptr();
            (*c).data = data;
            for ev in self.events() {
                (*ev).handler = handler;
                (*ev).set_cancelable(1);
            }
            (*c).set_idle(1);
        }
    }

    /// Whether nginx is taking the connection back (`c->close`).
    pub fn closing(self) -> bool {
        self.c().close() != 0
    }

    /// Whether nginx's SSL layer is attached.
    pub fn is_tls(self) -> bool {
        !self.c().ssl.is_null()
    }

    /// `SO_ERROR` of the socket (0 = connected or no error).
    pub fn so_error(self) -> c_int {
        let mut err: c_int = 0;
        let mut len = size_of::<c_int>() as libc::socklen_t;
        // SAFETY: a valid fd and an int-sized buffer.
        let rc = unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                ptr::addr_of_mut!(err).cast(),
                &mut len,
            )
        };
        if rc == -1 {
            errno()
        } else {
            err
        }
    }

    /// Whether a connecting socket is established (has a peer).
    pub fn is_connected(self) -> bool {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut sa: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: a valid fd and a buffer of `len` bytes.
        unsafe { libc::getpeername(self.fd(), ptr::addr_of_mut!(sa).cast(), &mut len) == 0 }
    }

    /// Whether data is waiting, without taking it: one byte peeked from
    /// the socket. Over TLS the socket's bytes are records, not data: what
    /// is buffered or waiting goes through nginx's SSL layer (a record that
    /// carries no data, such as a TLS 1.3 session ticket, is processed and
    /// counts as nothing; one byte of data, if any, is consumed: a liveness
    /// test does not need it).
    pub fn peek(self) -> Peek {
        let raw = self.peek_socket();
        if !self.is_tls() {
            return raw;
        }
        // SAFETY: c->ssl is set (checked) and owns a live SSL object.
        let pending = unsafe { ngx::ffi::SSL_pending((*self.c().ssl).connection) } > 0;
        if raw != Peek::Data && !pending {
            return raw;
        }
        let mut b = [0u8; 1];
        match self.recv(&mut b) {
            Io::Done(0) => Peek::Failed(Reason::Closed),
            Io::Done(_) => Peek::Data,
            Io::Again => Peek::WouldBlock,
            Io::Error(e) => Peek::Failed(reason_of(e)),
        }
    }

    /// Whether a read may find something now: nginx's read event is ready
    /// (an event came, or the last read did not end in `EAGAIN`), or TLS
    /// holds bytes it read (decrypted, or a record not processed yet).
    /// When it is not, reading would only meet `EAGAIN` (and, over TLS,
    /// cost an `SSL_read` and its system call): the last read ended in
    /// `EAGAIN` and nothing came since, so the next bytes, FIN or RST
    /// raise a read event (nginx's events are edge-triggered; its upstream
    /// module reads a response after sending the request only when
    /// `c->read->ready`, for the same reason).
    pub fn read_ready(self) -> bool {
        // SAFETY: a live connection's read event.
        if unsafe { (*self.c().read).ready() } != 0 {
            return true;
        }
        // SAFETY: c->ssl is NULL or nginx's live SSL connection.
        unsafe { self.c().ssl.as_ref() }
            .is_some_and(|s| unsafe { ngx::ffi::SSL_has_pending(s.connection) } != 0)
    }

    /// Peek one byte of the plain socket.
    fn peek_socket(self) -> Peek {
        let mut b = 0u8;
        loop {
            // SAFETY: a valid fd and a one-byte buffer.
            let n =
                unsafe { libc::recv(self.fd(), ptr::addr_of_mut!(b).cast(), 1, libc::MSG_PEEK) };
            if n > 0 {
                return Peek::Data;
            }
            if n == 0 {
                return Peek::Failed(Reason::Closed);
            }
            match errno() {
                libc::EAGAIN => return Peek::WouldBlock,
                libc::EINTR => continue,
                err => return Peek::Failed(reason_of(err)),
            }
        }
    }

    /// Read into `buf` through `c->recv` (over TLS, one `SSL_read` first
    /// when that is enough: [`Conn::tls_read_once`]).
    pub fn recv(self, buf: &mut [u8]) -> Io {
        if let Some(io) = self.tls_read_once(buf) {
            return io;
        }
        let Some(recv) = self.c().recv else {
            return Io::Error(0);
        };
        let tls = self.is_tls();
        if tls {
            clear_errno();
        }
        // SAFETY: nginx's recv of this live connection, a writable buffer.
        let n = unsafe { recv(self.0.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        tls_result(tls, io_result(n))
    }

    /// One `SSL_read` where nginx's `ngx_ssl_recv` makes two: nginx reads
    /// until `SSL_read` has nothing more, so every response costs a last
    /// `SSL_read` whose socket read meets `EAGAIN`. OpenSSL reads ahead
    /// (nginx sets `read_ahead`): when the one socket read of this
    /// `SSL_read` came back short of what it asked for and OpenSSL holds
    /// nothing unread, the socket was empty, and the read event is cleared
    /// as `ngx_unix_recv` clears it after a short read (edge-triggered: what
    /// comes later raises a new event). Otherwise the event stays ready and
    /// the next read goes on. `None`: nginx's own `c->recv` reads instead
    /// (a plain socket, nginx's deferred end of a read (`c->ssl->last`), a
    /// handler it parked, errors of earlier calls to log, no buffer, or an
    /// outcome only nginx handles: `SSL_read` wanting to write, a
    /// close_notify, both of which it meets again at once).
    fn tls_read_once(self, buf: &mut [u8]) -> Option<Io> {
        use ngx::ffi::{
            SSL_get_error, SSL_has_pending, SSL_read, NGX_DONE, NGX_ERROR, SSL_ERROR_SSL,
            SSL_ERROR_SYSCALL, SSL_ERROR_WANT_READ,
        };
        let c = self.0.as_ptr();
        // SAFETY: c->ssl is NULL or nginx's live SSL connection.
        let sc = unsafe { (*c).ssl.as_mut() }?;
        if buf.is_empty()
            || sc.last == NGX_ERROR as ngx::ffi::ngx_int_t
            || sc.last == NGX_DONE as ngx::ffi::ngx_int_t
            || sc.saved_write_handler.is_some()
            || sc.saved_read_handler.is_some()
            // SAFETY: OpenSSL's error queue of this thread.
            || unsafe { ngx::ffi::ERR_peek_error() } != 0
        {
            return None;
        }
        let len = buf.len().min(c_int::MAX as usize) as c_int;
        SHORT_READ.set(false);
        // SAFETY: a live SSL object and a writable buffer of `len` bytes.
        let n = unsafe { SSL_read(sc.connection, buf.as_mut_ptr().cast(), len) };
        let sys = errno();
        // SAFETY: the connection's own read event.
        let rev = unsafe { &mut *(*c).read };
        if n > 0 {
            // SAFETY: the live SSL object.
            let pending = unsafe { SSL_has_pending(sc.connection) } != 0;
            if SHORT_READ.get() && !pending && rev.pending_eof() == 0 {
                rev.set_ready(0);
            }
            return Some(Io::Done(n as usize));
        }
        // SAFETY: the live SSL object and SSL_read's return value.
        let err = unsafe { SSL_get_error(sc.connection, n) } as u32;
        match err {
            SSL_ERROR_WANT_READ => {
                rev.set_ready(0);
                sc.last = NGX_AGAIN as ngx::ffi::ngx_int_t;
                Some(Io::Again)
            }
            SSL_ERROR_SYSCALL | SSL_ERROR_SSL => {
                // nginx's handling: no close exchange after a failure; an
                // end without an OpenSSL error is the peer's close.
                sc.set_no_wait_shutdown(1);
                sc.set_no_send_shutdown(1);
                rev.set_ready(0);
                // SAFETY: OpenSSL's error queue of this thread.
                if unsafe { ngx::ffi::ERR_peek_error() } == 0 {
                    sc.last = NGX_DONE as ngx::ffi::ngx_int_t;
                    rev.set_eof(1);
                    return Some(Io::Done(0));
                }
                sc.last = NGX_ERROR as ngx::ffi::ngx_int_t;
                rev.set_error(1);
                let sys = if err == SSL_ERROR_SYSCALL { sys } else { 0 };
                // SAFETY: the connection's log; nginx's SSL error logger
                // appends OpenSSL's reasons and clears the queue. (A check
                // connection's log keeps the line for the module's own
                // message, docs/tls.md.)
                unsafe {
                    ngx::ffi::ngx_ssl_error(
                        ngx::ffi::NGX_LOG_INFO as ngx::ffi::ngx_uint_t,
                        (*c).log,
                        sys,
                        c"SSL_read() failed".as_ptr().cast_mut(),
                    );
                }
                Some(tls_result(true, Io::Error(sys)))
            }
            _ => None,
        }
    }

    /// Write `buf` through `c->send`.
    pub fn send(self, buf: &[u8]) -> Io {
        let Some(send) = self.c().send else {
            return Io::Error(0);
        };
        let tls = self.is_tls();
        if tls {
            clear_errno();
        }
        // SAFETY: nginx's send of this live connection; send only reads
        // the buffer (its C prototype is not const).
        let n = unsafe { send(self.0.as_ptr(), buf.as_ptr().cast_mut(), buf.len()) };
        tls_result(tls, io_result(n))
    }

    /// Clear both events' `timedout` (nginx sets it when a timer fires and
    /// never clears it).
    pub fn clear_timedout(self) {
        for ev in self.events() {
            // SAFETY: the connection's own events.
            unsafe { (*ev).set_timedout(0) };
        }
    }

    /// Arm the read event's timer.
    pub fn read_timer(self, ms: u64) {
        // SAFETY: the connection's own read event.
        unsafe { ngx_add_timer(self.c().read, ms as ngx_msec_t) };
    }

    /// Arm the write event's timer.
    pub fn write_timer(self, ms: u64) {
        // SAFETY: the connection's own write event.
        unsafe { ngx_add_timer(self.c().write, ms as ngx_msec_t) };
    }

    /// Remove both events' timers.
    pub fn del_timers(self) {
        for ev in self.events() {
            // SAFETY: the connection's own events.
            unsafe {
                if (*ev).timer_set() != 0 {
                    ngx_del_timer(ev);
                }
            }
        }
    }

    /// Mark the connection reusable (nginx may take it back when it runs
    /// out of connections) or not.
    pub fn reusable(self, on: bool) {
        // SAFETY: a live connection.
        unsafe { ngx_reusable_connection(self.0.as_ptr(), usize::from(on)) };
    }

    /// Both events as a new connection's: no timer, not posted, no stale
    /// flags (a stale `timedout` would end the next round early).
    pub fn clear_events(self) {
        for ev in self.events() {
            // SAFETY: the connection's own events.
            unsafe {
                if (*ev).timer_set() != 0 {
                    ngx_del_timer(ev);
                }
                if (*ev).posted() != 0 {
                    ngx_delete_posted_event(ev);
                }
                (*ev).set_timedout(0);
                (*ev).set_ready(0);
                (*ev).set_eof(0);
                (*ev).set_error(0);
                (*ev).set_pending_eof(0);
                (*ev).available = 0;
            }
        }
    }

    /// Kernel keepalive probes on the socket.
    pub fn set_keepalive(self, idle_s: u32, intvl_s: u32, cnt: u32) {
        let set = |level: c_int, name: c_int, v: u32| {
            let v = v as c_int;
            // SAFETY: a valid fd and an int option value.
            unsafe {
                libc::setsockopt(
                    self.fd(),
                    level,
                    name,
                    ptr::addr_of!(v).cast(),
                    size_of::<c_int>() as libc::socklen_t,
                )
            }
        };
        set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle_s);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, intvl_s);
        set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, cnt);
    }

    /// `TCP_NODELAY`: small frames go at once (an HTTP/2 client's SETTINGS
    /// ACK must not hold back the GOAWAY that follows it, or the request
    /// behind a WINDOW_UPDATE).
    pub fn set_nodelay(self) {
        let on: c_int = 1;
        // SAFETY: a valid fd and an int option value.
        unsafe {
            libc::setsockopt(
                self.fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                ptr::addr_of!(on).cast(),
                size_of::<c_int>() as libc::socklen_t,
            );
        }
    }

    /// `connect()` the socket to `addr`; the errno on failure
    /// (`EINPROGRESS` for a connect under way).
    pub fn connect(self, addr: &[u8]) -> Result<(), c_int> {
        // SAFETY: a valid fd; the buffer holds `addr.len()` bytes of a
        // sockaddr.
        let rc = unsafe {
            libc::connect(
                self.fd(),
                addr.as_ptr().cast(),
                addr.len() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(errno())
        }
    }

    /// Disconnect in place (`connect(AF_UNSPEC)`): an open connection is
    /// reset (RST, no TIME_WAIT), a pending connect aborted, the local port
    /// released; the socket stays ready for another `connect()`.
    pub fn disconnect(self) -> bool {
        // SAFETY: all-zero is a valid sockaddr; family 0 is AF_UNSPEC.
        let unspec: libc::sockaddr = unsafe { mem::zeroed() };
        // SAFETY: a valid fd and a sockaddr of the given size.
        let rc = unsafe {
            libc::connect(
                self.fd(),
                ptr::addr_of!(unspec),
                size_of::<libc::sockaddr>() as libc::socklen_t,
            )
        };
        rc == 0
    }

    /// Whether nginx's SSL layer holds one of our event handlers aside
    /// (`SSL_read` wanted to write, or `SSL_write` to read): it restores it
    /// later, over whatever was attached since.
    pub fn tls_handler_parked(self) -> bool {
        // SAFETY: c->ssl is NULL or nginx's live SSL connection.
        unsafe { self.c().ssl.as_ref() }
            .is_some_and(|s| s.saved_read_handler.is_some() || s.saved_write_handler.is_some())
    }

    /// Whether the connection carries TLS or its pool (a TLS round's): such
    /// a socket is closed, never kept as a spare.
    pub fn has_tls_state(self) -> bool {
        self.is_tls() || !self.c().pool.is_null()
    }

    /// Free nginx's SSL object without a TLS close exchange (the round
    /// ends with RST anyway): quiet shutdown, `SSL_free`, `c->ssl` NULL.
    fn drop_tls(self) {
        if !self.is_tls() {
            return;
        }
        // SAFETY: a live connection whose c->ssl is set; with both flags
        // set `ngx_ssl_shutdown` neither sends nor waits, and frees the SSL
        // object at once.
        unsafe {
            let c = self.0.as_ptr();
            (*(*c).ssl).set_no_wait_shutdown(1);
            (*(*c).ssl).set_no_send_shutdown(1);
            ngx::ffi::ngx_ssl_shutdown(c);
        }
    }

    /// Close without TIME_WAIT (`SO_LINGER` 0 sends RST).
    pub fn rst_close(self) {
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid fd and a linger struct.
        unsafe {
            libc::setsockopt(
                self.fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                ptr::addr_of!(l).cast(),
                size_of::<libc::linger>() as libc::socklen_t,
            );
        }
        self.close();
    }

    /// `ngx_close_connection`: timers, events, descriptor, the slot; and
    /// a TLS round's SSL object and pool.
    pub fn close(self) {
        self.drop_tls();
        let pool = self.c().pool;
        // SAFETY: a live connection, closed once by its owner; the pool
        // (created by the TLS transport) is no longer used by anything.
        unsafe {
            (*self.0.as_ptr()).pool = ptr::null_mut();
            ngx_close_connection(self.0.as_ptr());
            if !pool.is_null() {
                ngx::ffi::ngx_destroy_pool(pool);
            }
        }
    }
}

std::thread_local! {
    /// The last socket read of the current `SSL_read` came back with fewer
    /// bytes than it asked for: the socket had no more (its BIO's callback,
    /// [`watch_socket_reads`]; no read, or a failed one, leaves it false).
    static SHORT_READ: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Have the socket reads of `c`'s TLS connection tell
/// [`Conn::tls_read_once`] whether they drained the socket.
pub fn watch_socket_reads(c: Conn) {
    // SAFETY: c->ssl is NULL or nginx's live SSL connection, whose read BIO
    // (the socket's, from `SSL_set_fd`) lives as long as it does.
    unsafe {
        let Some(sc) = c.c().ssl.as_ref() else {
            return;
        };
        let bio = ngx::ffi::SSL_get_rbio(sc.connection);
        if !bio.is_null() {
            ngx::ffi::BIO_set_callback_ex(bio, Some(socket_read_seen));
        }
    }
}

unsafe extern "C" fn socket_read_seen(
    _bio: *mut ngx::ffi::BIO,
    oper: c_int,
    _argp: *const core::ffi::c_char,
    len: usize,
    _argi: c_int,
    _argl: core::ffi::c_long,
    ret: c_int,
    processed: *mut usize,
) -> core::ffi::c_long {
    const READ_DONE: c_int = (ngx::ffi::BIO_CB_READ | ngx::ffi::BIO_CB_RETURN) as c_int;
    if oper == READ_DONE {
        let got = if ret > 0 && !processed.is_null() {
            // SAFETY: OpenSSL passes the count of the read it made.
            unsafe { *processed }
        } else {
            0
        };
        SHORT_READ.set(got > 0 && got < len);
    }
    // Before an operation (`ret` 1): go on; after it: its result, unchanged.
    ret as core::ffi::c_long
}

fn clear_errno() {
    ngx::ffi::ngx_set_socket_errno(0);
}

/// A failure of nginx's SSL layer that is no socket error (an alert, a
/// bad record) leaves errno as it was cleared: it is a TLS failure,
/// [`reason_of`] `EPROTO`.
fn tls_result(tls: bool, io: Io) -> Io {
    match io {
        Io::Error(0) if tls => Io::Error(libc::EPROTO),
        other => other,
    }
}

fn io_result(n: isize) -> Io {
    if n >= 0 {
        Io::Done(n as usize)
    } else if n == NGX_AGAIN as isize {
        Io::Again
    } else {
        Io::Error(errno())
    }
}

/// Bytes read from a socket per `recv` by the probe kinds.
pub const READ_CHUNK: usize = 4096;

std::thread_local! {
    /// The worker's one read buffer, lent to the kind whose handler runs
    /// (handlers never nest; a fresh zeroed array per read cost more than
    /// the read).
    static SCRATCH: core::cell::RefCell<[u8; READ_CHUNK]> =
        const { core::cell::RefCell::new([0; READ_CHUNK]) };
}

/// Run `f` with the worker's read buffer (a fresh one if it is lent out).
pub fn with_read_buffer<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => f(&mut buf[..]),
        Err(_) => f(&mut [0u8; READ_CHUNK]),
    })
}
