//! Regular expressions of `check_match` blocks, compiled with nginx's own
//! PCRE (`ngx_regex_compile`) at configuration time, so an invalid one fails
//! `nginx -t` with PCRE's message, and matched with `ngx_regex_exec`.

use core::ffi::c_int;
use core::ptr::{self, NonNull};

use healthcheck_core::matcher::RegexSet;
use ngx::ffi::{
    ngx_conf_t, ngx_regex_compile, ngx_regex_compile_t, ngx_regex_exec, ngx_regex_t, ngx_str_t,
    NGX_OK, NGX_REGEX_CASELESS,
};

/// A compiled regex; lives in the configuration pool of its cycle.
#[derive(Clone, Copy, Debug)]
pub struct Regex(NonNull<ngx_regex_t>);

/// Room for PCRE's error message.
const ERR_LEN: usize = 256;

impl Regex {
    /// Compile `pattern` (`caseless` for `~*`); `Err` with PCRE's message.
    ///
    /// # Safety
    /// `cf` is the configuration being parsed (its pool outlives every use
    /// of the regex: the cycle's).
    pub unsafe fn compile(
        cf: *mut ngx_conf_t,
        pattern: &[u8],
        caseless: bool,
    ) -> Result<Self, String> {
        // nginx keeps a pointer to the pattern: copy it into the pool.
        // SAFETY: per the contract.
        let pool = unsafe { (*cf).pool };
        // SAFETY: a live pool.
        let copy = unsafe { ngx::ffi::ngx_pnalloc(pool, pattern.len().max(1)) }.cast::<u8>();
        if copy.is_null() {
            return Err("out of memory".into());
        }
        // SAFETY: `copy` has room for the pattern.
        unsafe { ptr::copy_nonoverlapping(pattern.as_ptr(), copy, pattern.len()) };
        let mut err = [0u8; ERR_LEN];
        // SAFETY: all-zero is the initial state of the compile request.
        let mut rc: ngx_regex_compile_t = unsafe { core::mem::zeroed() };
        rc.pattern = ngx_str_t {
            len: pattern.len(),
            data: copy,
        };
        rc.pool = pool;
        rc.options = if caseless {
            NGX_REGEX_CASELESS as ngx::ffi::ngx_uint_t
        } else {
            0
        };
        rc.err = ngx_str_t {
            len: ERR_LEN,
            data: err.as_mut_ptr(),
        };
        // SAFETY: a fully initialised request; `err` outlives the call.
        if unsafe { ngx_regex_compile(&mut rc) } != NGX_OK as ngx::ffi::ngx_int_t {
            let len = rc.err.len.min(ERR_LEN);
            return Err(String::from_utf8_lossy(&err[..len]).into_owned());
        }
        NonNull::new(rc.regex)
            .map(Regex)
            .ok_or_else(|| "no regex".to_string())
    }

    /// Whether the regex matches anywhere in `subject`.
    pub fn is_match(self, subject: &[u8]) -> bool {
        let mut s = ngx_str_t {
            len: subject.len(),
            data: subject.as_ptr().cast_mut(),
        };
        // Room for the whole match's offsets (PCRE wants a multiple of 3).
        let mut captures: [c_int; 3] = [0; 3];
        // SAFETY: a compiled regex of a live cycle; PCRE only reads the
        // subject.
        let rc = unsafe { ngx_regex_exec(self.0.as_ptr(), &mut s, captures.as_mut_ptr(), 3) };
        // A match is 0 or more; NGX_REGEX_NO_MATCHED and errors are negative.
        rc >= 0
    }
}

/// A block's regexes, by the ids core gave them.
#[derive(Default, Debug, Clone)]
pub struct Compiled(pub Vec<Regex>);

impl RegexSet for Compiled {
    fn is_match(&self, id: usize, subject: &[u8]) -> bool {
        self.0.get(id).is_some_and(|r| r.is_match(subject))
    }
}
