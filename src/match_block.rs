//! `check_match NAME { TEST; ... }` blocks (http and stream main context):
//! each line is parsed by core (`healthcheck_core::matcher::parse_test`) as
//! nginx reads it, so an error names its own line; the block's regexes are
//! compiled with nginx's PCRE when the block ends. Which checks may use a
//! block is decided when the context ends (`crate::finish`).

use core::ffi::{c_char, c_void};
use std::rc::Rc;

use healthcheck_core::matcher::{parse_test, MatchBlock, Test};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{ngx_command_t, ngx_conf_parse, ngx_conf_t};

use crate::directive::emerg;
use crate::ffi::{conf_args, guard, ConfLoc};
use crate::regex::{Compiled, Regex};

/// A block with its regexes compiled, shared by the probes that use it.
#[derive(Debug)]
pub struct CompiledMatch {
    pub block: MatchBlock,
    pub regexes: Compiled,
}

/// A context's blocks, in configuration order, with where each was written.
#[derive(Default)]
pub struct MatchBlocks {
    pub matches: Vec<Rc<CompiledMatch>>,
    locs: Vec<ConfLoc>,
}

impl MatchBlocks {
    /// The blocks as the rules across directives read them.
    pub fn blocks(&self) -> Vec<MatchBlock> {
        self.matches.iter().map(|m| m.block.clone()).collect()
    }

    /// Where block `j` was written.
    pub fn loc(&self, j: usize) -> Option<ConfLoc> {
        self.locs.get(j).copied()
    }
}

/// The lines of the block being read.
struct Reading {
    tests: Vec<Test>,
}

/// A block of one test named `name` (a directive that is a test, such as
/// `check_http_expect_body`), its regex compiled.
///
/// # Safety
/// `cf` is the configuration being parsed.
pub unsafe fn compile_one(
    cf: *mut ngx_conf_t,
    name: &[u8],
    test: Test,
) -> Result<Rc<CompiledMatch>, healthcheck_core::conf::ConfError> {
    let block = MatchBlock {
        name: name.to_vec(),
        tests: vec![test],
    };
    let mut regexes = Vec::new();
    for (_, source, caseless) in block.regexes() {
        // SAFETY: per the contract.
        let r = unsafe { Regex::compile(cf, source, caseless) }.map_err(|e| {
            healthcheck_core::conf::ConfError(format!(
                "invalid regex \"{}\" in \"{}\": {e}",
                String::from_utf8_lossy(source),
                String::from_utf8_lossy(name)
            ))
        })?;
        regexes.push(r);
    }
    Ok(Rc::new(CompiledMatch {
        block,
        regexes: Compiled(regexes),
    }))
}

/// `check_match NAME { ... }`; the command's offset selects the main
/// conf's [`MatchBlocks`].
pub unsafe extern "C" fn ngx_upstream_check_match(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes the configuration being parsed and its command.
    let (log, offset) = unsafe { ((*cf).log, cmd.as_ref().map_or(0, |c| c.offset)) };
    guard(log, "check_match", NGX_CONF_ERROR, || {
        // SAFETY: nginx's directive contract: the main conf holds our
        // blocks at the command's offset.
        unsafe { read_block(cf, conf.cast::<u8>().add(offset).cast::<MatchBlocks>()) }
    })
}

/// # Safety
/// nginx's directive contract for a block directive; `mcf` is the
/// context's blocks.
unsafe fn read_block(cf: *mut ngx_conf_t, mcf: *mut MatchBlocks) -> *mut c_char {
    // SAFETY: per the contract.
    let (Some(mcf), cfr) = (unsafe { mcf.as_mut() }, unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    // SAFETY: inside a directive handler.
    let args = unsafe { conf_args(cfr) };
    let Some(&name) = args.get(1) else {
        return emerg(
            cf,
            "invalid number of arguments in \"check_match\" directive",
        );
    };
    let name = name.to_vec();
    // SAFETY: inside a directive handler.
    let loc = unsafe { ConfLoc::here(cfr) };
    let mut reading = Reading { tests: Vec::new() };
    // nginx's way of reading a block of custom lines (as `types { }`):
    // every line goes to `cf->handler`, then the saved state comes back.
    // SAFETY: `cf` is valid; `reading` outlives the parse.
    let rv = unsafe {
        let saved = *cf;
        (*cf).handler = Some(match_line);
        (*cf).handler_conf = (&mut reading as *mut Reading).cast();
        let rv = ngx_conf_parse(cf, core::ptr::null_mut());
        *cf = saved;
        rv
    };
    if rv != NGX_CONF_OK {
        return rv;
    }
    let block = MatchBlock {
        name,
        tests: reading.tests,
    };
    let mut regexes = Vec::new();
    for (_, source, caseless) in block.regexes() {
        // SAFETY: the configuration being parsed.
        match unsafe { Regex::compile(cf, source, caseless) } {
            Ok(r) => regexes.push(r),
            Err(e) => {
                return emerg(
                    cf,
                    &format!(
                        "invalid regex \"{}\" in check_match \"{}\": {e}",
                        String::from_utf8_lossy(source),
                        String::from_utf8_lossy(&block.name)
                    ),
                );
            }
        }
    }
    mcf.matches.push(Rc::new(CompiledMatch {
        block,
        regexes: Compiled(regexes),
    }));
    mcf.locs.push(loc);
    NGX_CONF_OK
}

/// One line of a `check_match` block.
unsafe extern "C" fn match_line(
    cf: *mut ngx_conf_t,
    _dummy: *mut ngx_command_t,
    _conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes the configuration being parsed.
    let cfr = unsafe { &*cf };
    guard(cfr.log, "check_match", NGX_CONF_ERROR, || {
        // SAFETY: set by `read_block` to its `Reading` for this parse.
        let Some(reading) = (unsafe { cfr.handler_conf.cast::<Reading>().as_mut() }) else {
            return NGX_CONF_ERROR;
        };
        // SAFETY: inside a directive handler (the block's line).
        let args = unsafe { conf_args(cfr) };
        match parse_test(&args) {
            Ok(t) => {
                reading.tests.push(t);
                NGX_CONF_OK
            }
            Err(e) => emerg(cf, &e.to_string()),
        }
    })
}
