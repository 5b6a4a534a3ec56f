//! The shape every directive handler of the module shares: raw pointers
//! turned into references, the panic guard, the arguments, and an error
//! printed as `[emerg]` the way `ngx_conf_log_error` prints it; plus
//! [`Setting`], a directive's value with the place it was written (for the
//! messages of rules checked once the whole context is read, and for the
//! `[warn]` of a directive given twice).

use core::ffi::{c_char, c_void};

use healthcheck_core::conf::ConfError;
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{ngx_command_t, ngx_conf_t, NGX_LOG_EMERG, NGX_LOG_WARN};

use crate::ffi::{conf_args, guard, log_at, ConfLoc};

/// Log `msg` at `[emerg]` at the directive being parsed; nginx's error.
pub fn emerg(cf: *mut ngx_conf_t, msg: &str) -> *mut c_char {
    ngx::ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{}", msg);
    NGX_CONF_ERROR
}

/// The arguments of a directive that takes exactly one, or nginx's message.
pub fn one<'a>(directive: &str, args: &[&'a [u8]]) -> Result<&'a [u8], ConfError> {
    match args {
        [arg] => Ok(arg),
        _ => Err(ConfError(format!(
            "invalid number of arguments in \"{directive}\" directive"
        ))),
    }
}

/// Run a directive handler: `conf` (our struct `T`, at `cmd->offset` in
/// the struct nginx passes) and the directive's arguments (after its name)
/// go to `f`, under the panic guard; an `Err` is logged as `[emerg]` (an
/// empty message fails without one: nginx logged the reason already).
///
/// # Safety
/// nginx's directive-handler contract: `cf` valid, `conf` points to the
/// struct the command's `conf` offset selects, which holds a `T` at the
/// command's `offset`.
pub unsafe fn run<T>(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    f: impl FnOnce(&ngx_conf_t, &mut T, &[&[u8]]) -> Result<(), ConfError>,
) -> *mut c_char {
    // SAFETY: nginx passes the configuration being parsed and its command.
    let (cfr, offset) = unsafe { (&*cf, cmd.as_ref().map_or(0, |c| c.offset)) };
    // SAFETY: per the contract, a `T` lives at `offset` in `conf`.
    let Some(conf) = (unsafe { conf.cast::<u8>().add(offset).cast::<T>().as_mut() }) else {
        return NGX_CONF_ERROR;
    };
    // SAFETY: called from a directive handler.
    let args = unsafe { conf_args(cfr) };
    let rest = args.get(1..).unwrap_or_default();
    let r = guard(
        cfr.log,
        "configuration",
        Err(ConfError("internal error".into())),
        || f(cfr, conf, rest),
    );
    match r {
        Ok(()) => NGX_CONF_OK,
        Err(e) if e.0.is_empty() => NGX_CONF_ERROR,
        Err(e) => emerg(cf, &e.0),
    }
}

/// What a second occurrence of a directive in the same block does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// nginx's `"x" directive is duplicate`.
    Refuse,
    /// The later one replaces the earlier, with a `[warn]` naming the line
    /// it replaces (as yaoweibin's and Tengine's modules keep the last).
    Last,
}

/// A directive's value and where it was written.
#[derive(Debug)]
pub struct Setting<T> {
    pub value: Option<T>,
    pub loc: ConfLoc,
}

impl<T> Default for Setting<T> {
    fn default() -> Self {
        Self {
            value: None,
            loc: ConfLoc::default(),
        }
    }
}

impl<T> Setting<T> {
    pub fn is_set(&self) -> bool {
        self.value.is_some()
    }

    pub fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Store the value of `directive`, written where `cf` is parsing now.
    /// A second occurrence follows `repeat`. `parse` runs only when the
    /// value is taken.
    pub fn set(
        &mut self,
        cf: &ngx_conf_t,
        directive: &str,
        repeat: Repeat,
        parse: impl FnOnce() -> Result<T, ConfError>,
    ) -> Result<(), ConfError> {
        if self.value.is_some() && repeat == Repeat::Refuse {
            return Err(ConfError(format!("\"{directive}\" directive is duplicate")));
        }
        let value = parse()?;
        // SAFETY: called from a directive handler.
        let here = unsafe { ConfLoc::here(cf) };
        if self.value.is_some() {
            let msg = format!(
                "\"{directive}\" is given again and replaces the one at {}",
                self.loc.position()
            );
            // SAFETY: the configuration's log.
            unsafe { log_at(NGX_LOG_WARN, cf.log, &here, &msg) };
        }
        self.value = Some(value);
        self.loc = here;
        Ok(())
    }
}
