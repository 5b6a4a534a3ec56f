//! The `check_ssl_*` directives and the SSL contexts of TLS checks
//! (docs/tls.md).
//!
//! Each directive stores its value in the upstream's `TlsConf` (the
//! commands' offset selects it in the upstream's conf); once the context's
//! configuration is complete (`build_contexts`, after the cross-directive
//! rules passed), every upstream with a TLS check gets an
//! `ngx_ssl_t`, one per distinct set of settings, made by nginx's own SSL
//! layer in the configuration pool with nginx's cleanup: it lives as long
//! as the cycle that made it, in every process that uses it (OpenSSL counts
//! the connections' references to it as well).

use core::ffi::{c_char, c_void};
use core::mem::size_of;
use core::ptr::{self, NonNull};

use healthcheck_core::conf::tls::{self as ct, protocol};
use healthcheck_core::conf::ConfError;
use ngx::ffi::{
    ngx_command_t, ngx_conf_t, ngx_int_t, ngx_pcalloc, ngx_pnalloc, ngx_pool_cleanup_add,
    ngx_ssl_certificate, ngx_ssl_ciphers, ngx_ssl_cleanup_ctx, ngx_ssl_client_session_cache,
    ngx_ssl_create, ngx_ssl_t, ngx_ssl_trusted_certificate, ngx_str_t, ngx_uint_t, NGX_OK,
};

use crate::directive::run;
use crate::ffi::ConfLoc;

// The protocol bits of core are nginx's.
const _: () = {
    assert!(protocol::SSLV2 == ngx::ffi::NGX_SSL_SSLv2);
    assert!(protocol::SSLV3 == ngx::ffi::NGX_SSL_SSLv3);
    assert!(protocol::TLSV1 == ngx::ffi::NGX_SSL_TLSv1);
    assert!(protocol::TLSV1_1 == ngx::ffi::NGX_SSL_TLSv1_1);
    assert!(protocol::TLSV1_2 == ngx::ffi::NGX_SSL_TLSv1_2);
    assert!(protocol::TLSV1_3 == ngx::ffi::NGX_SSL_TLSv1_3);
};

/// `proxy_ssl_ciphers`' default.
const DEFAULT_CIPHERS: &[u8] = b"DEFAULT";
/// `proxy_ssl_verify_depth`'s default.
const DEFAULT_VERIFY_DEPTH: u32 = 1;

/// The `check_ssl_*` directives of one upstream.
#[derive(Default)]
pub struct TlsConf {
    pub server_name: Option<bool>,
    pub name: Option<Vec<u8>>,
    pub verify: Option<bool>,
    pub trusted: Option<Vec<u8>>,
    pub depth: Option<u32>,
    pub certificate: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
    pub protocols: Option<u32>,
    pub ciphers: Option<Vec<u8>>,
    pub session_reuse: Option<bool>,
    pub verify_interval: Option<u64>,
    /// Each directive given, where it was written, in order.
    pub locs: Vec<(&'static str, ConfLoc)>,
    /// The SSL context, once the configuration is complete.
    pub ssl: Option<NonNull<ngx_ssl_t>>,
}

impl TlsConf {
    /// What the cross-directive rules read.
    pub fn facts(&self) -> healthcheck_core::conf::TlsDirectives {
        healthcheck_core::conf::TlsDirectives {
            first: self.locs.first().map(|(n, _)| *n),
            verify: self.verify == Some(true),
            trusted: self.trusted.is_some(),
            certificate: self.certificate.is_some(),
            key: self.key.is_some(),
        }
    }

    /// Where `directive` was written.
    pub fn loc(&self, directive: &str) -> Option<ConfLoc> {
        self.locs
            .iter()
            .find(|(n, _)| *n == directive)
            .map(|(_, l)| *l)
    }

    /// The settings that make the SSL context (the rest is per round).
    fn key(&self) -> impl PartialEq + '_ {
        (
            self.protocols,
            &self.ciphers,
            self.verify,
            &self.trusted,
            self.depth,
            &self.certificate,
            &self.key,
            self.session_reuse,
        )
    }
}

/// Make the SSL contexts of the context's TLS checks, one per distinct set
/// of settings among `confs` (the `TlsConf` of each upstream whose check
/// is TLS). nginx logs what it refuses (an unreadable certificate, key or
/// CA file) at `emerg`.
///
/// # Safety
/// `cf` is the configuration being finished.
pub unsafe fn build_contexts<'a>(
    cf: *mut ngx_conf_t,
    confs: impl Iterator<Item = &'a mut TlsConf>,
) -> Result<(), ()> {
    let mut made: Vec<&'a TlsConf> = Vec::new();
    for t in confs {
        let ssl = match made.iter().find(|m| m.key() == t.key()).and_then(|m| m.ssl) {
            Some(s) => s,
            // SAFETY: per the contract.
            None => unsafe { create(cf, t)? },
        };
        t.ssl = Some(ssl);
        made.push(t);
    }
    Ok(())
}

/// `s` as an `ngx_str_t` in the configuration pool, NUL-terminated (nginx
/// hands file names to OpenSSL as C strings).
///
/// # Safety
/// `cf` is valid.
unsafe fn pool_str(cf: *mut ngx_conf_t, s: &[u8]) -> Result<ngx_str_t, ()> {
    // SAFETY: per the contract.
    let data = unsafe { ngx_pnalloc((*cf).pool, s.len() + 1) }.cast::<u8>();
    if data.is_null() {
        return Err(());
    }
    // SAFETY: `data` has room for the bytes and the NUL.
    unsafe {
        ptr::copy_nonoverlapping(s.as_ptr(), data, s.len());
        *data.add(s.len()) = 0;
    }
    Ok(ngx_str_t { len: s.len(), data })
}

/// One SSL context for `t`'s settings.
///
/// # Safety
/// `cf` is the configuration being finished.
unsafe fn create(cf: *mut ngx_conf_t, t: &TlsConf) -> Result<NonNull<ngx_ssl_t>, ()> {
    let ok = |rc: ngx_int_t| {
        if rc == NGX_OK as ngx_int_t {
            Ok(())
        } else {
            Err(())
        }
    };
    // SAFETY: per the contract; every pointer below is nginx's or in its
    // configuration pool.
    unsafe {
        let pool = (*cf).pool;
        let ssl = ngx_pcalloc(pool, size_of::<ngx_ssl_t>()).cast::<ngx_ssl_t>();
        let ssl = NonNull::new(ssl).ok_or(())?;
        (*ssl.as_ptr()).log = (*cf).log;
        let protocols = t.protocols.unwrap_or(protocol::DEFAULT);
        ok(ngx_ssl_create(
            ssl.as_ptr(),
            protocols as ngx_uint_t,
            ptr::null_mut(),
        ))?;
        // Freed with the configuration pool, whatever fails below.
        let cln = ngx_pool_cleanup_add(pool, 0);
        if cln.is_null() {
            ngx_ssl_cleanup_ctx(ssl.as_ptr().cast());
            return Err(());
        }
        (*cln).handler = Some(ngx_ssl_cleanup_ctx);
        (*cln).data = ssl.as_ptr().cast::<c_void>();

        let mut ciphers = pool_str(cf, t.ciphers.as_deref().unwrap_or(DEFAULT_CIPHERS))?;
        ok(ngx_ssl_ciphers(cf, ssl.as_ptr(), &mut ciphers, 0))?;
        if let (Some(cert), Some(key)) = (&t.certificate, &t.key) {
            let (mut cert, mut key) = (pool_str(cf, cert)?, pool_str(cf, key)?);
            ok(ngx_ssl_certificate(
                cf,
                ssl.as_ptr(),
                &mut cert,
                &mut key,
                ptr::null_mut(),
            ))?;
        }
        if t.verify == Some(true) {
            if let Some(trusted) = &t.trusted {
                let mut trusted = pool_str(cf, trusted)?;
                let depth = t.depth.unwrap_or(DEFAULT_VERIFY_DEPTH);
                ok(ngx_ssl_trusted_certificate(
                    cf,
                    ssl.as_ptr(),
                    &mut trusted,
                    depth as ngx_int_t,
                ))?;
            }
        }
        ok(ngx_ssl_client_session_cache(
            cf,
            ssl.as_ptr(),
            ngx_uint_t::from(t.session_reuse.unwrap_or(true)),
        ))?;
        Ok(ssl)
    }
}

/// A `check_ssl_*` directive: at most once per upstream, parsed by `set`,
/// its position kept for the cross-directive messages.
///
/// # Safety
/// nginx's directive contract (the command's offset selects our
/// `TlsConf` in the upstream's conf).
unsafe fn tls_directive(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    name: &'static str,
    is_set: fn(&TlsConf) -> bool,
    set: impl FnOnce(&mut TlsConf, &[&[u8]]) -> Result<(), ConfError>,
) -> *mut c_char {
    // SAFETY: per the contract.
    unsafe {
        run::<TlsConf>(cf, cmd, conf, |cf, t, args| {
            if is_set(t) {
                return Err(ConfError(format!("\"{name}\" directive is duplicate")));
            }
            set(t, args)?;
            // SAFETY: inside a directive handler.
            t.locs.push((name, ConfLoc::here(cf)));
            Ok(())
        })
    }
}

macro_rules! tls_directives {
    ($($fn:ident: $name:literal, $field:ident, $parse:expr;)*) => {$(
        #[doc = concat!("`", $name, "` in an upstream block.")]
        pub unsafe extern "C" fn $fn(
            cf: *mut ngx_conf_t,
            cmd: *mut ngx_command_t,
            conf: *mut c_void,
        ) -> *mut c_char {
            // SAFETY: nginx's directive contract.
            unsafe {
                tls_directive(cf, cmd, conf, $name, |t| t.$field.is_some(), |t, args| {
                    let parse: fn(&'static str, &[&[u8]]) -> Result<_, ConfError> = $parse;
                    t.$field = Some(parse($name, args)?);
                    Ok(())
                })
            }
        }
    )*};
}

tls_directives! {
    ngx_upstream_check_ssl_server_name: "check_ssl_server_name", server_name, ct::parse_flag;
    ngx_upstream_check_ssl_name: "check_ssl_name", name, ct::parse_text;
    ngx_upstream_check_ssl_verify: "check_ssl_verify", verify, ct::parse_flag;
    ngx_upstream_check_ssl_trusted_certificate: "check_ssl_trusted_certificate", trusted, ct::parse_text;
    ngx_upstream_check_ssl_verify_depth: "check_ssl_verify_depth", depth, |_, a| ct::parse_verify_depth(a);
    ngx_upstream_check_ssl_verify_interval: "check_ssl_verify_interval", verify_interval, |_, a| ct::parse_verify_interval(a);
    ngx_upstream_check_ssl_certificate: "check_ssl_certificate", certificate, ct::parse_text;
    ngx_upstream_check_ssl_certificate_key: "check_ssl_certificate_key", key, ct::parse_text;
    ngx_upstream_check_ssl_protocols: "check_ssl_protocols", protocols, |_, a| ct::parse_protocols(a);
    ngx_upstream_check_ssl_ciphers: "check_ssl_ciphers", ciphers, ct::parse_text;
    ngx_upstream_check_ssl_session_reuse: "check_ssl_session_reuse", session_reuse, ct::parse_flag;
}
