//! `check_match NAME { TEST; ... }` blocks: what an answer must look like
//! for a round to succeed.
//!
//! The glue parses a block line by line with [`parse_test`] (each line's
//! words, which nginx has split and unquoted), collects a [`MatchBlock`],
//! compiles its regular expressions ([`MatchBlock::regexes`]) with nginx's
//! PCRE and evaluates answers through a [`RegexSet`] over them:
//!
//! - http: [`MatchBlock::evaluate_http`] over the response head and body
//!   (or [`http_verdict`], which also covers checks without a block);
//! - tcp and udp: [`MatchBlock::send`] gives the bytes to send, and
//!   [`MatchBlock::expect_progress`] judges what has arrived so far.
//!
//! The tests:
//!
//! | line | passes when |
//! |---|---|
//! | `status 200 204 300-399;` | the status is one of the codes or ranges |
//! | `status ! 500 502-504;` | it is none of them |
//! | `header NAME;` / `header ! NAME;` | a header NAME is present / none is |
//! | `header NAME = VALUE;` | a header NAME has exactly VALUE |
//! | `header NAME != VALUE;` | no header NAME has VALUE (absent passes) |
//! | `header NAME ~ RE;` / `~* RE` | a header NAME matches RE (`~*`: caseless) |
//! | `header NAME !~ RE;` / `!~* RE` | no header NAME matches RE (absent passes) |
//! | `body ~ RE;` / `~* RE` / `!~ RE` / `!~* RE` | the body matches RE / does not |
//! | `send STRING;` | (sends STRING after connecting; tcp, udp) |
//! | `expect STRING;` | the answer starts with STRING (tcp, udp) |
//! | `expect ~ RE;` / `~* RE` | the answer matches RE (tcp, udp) |
//!
//! Header names are matched ignoring ASCII case; values exactly as the
//! response parser gives them. With several headers of one name, a
//! positive test (presence, `=`, `~`) passes when one of them passes, and
//! a negated one (`!`, `!=`, `!~`) exactly when its positive form fails.
//! Every test of a block must pass. STRINGs have `\xHH` decoded
//! ([`crate::conf::unescape`]); regular expressions are kept as written
//! (PCRE reads `\xHH` itself).
//!
//! `!~*` (`header` and `body`) and `expect ~*` complete the listed forms.

use crate::conf::{printable, unescape, CheckType, ConfError, StatusClasses};
use crate::reason::Reason;

/// Lowest status code a `status` test takes.
pub const STATUS_MIN: u16 = 100;
/// Highest status code a `status` test takes.
pub const STATUS_MAX: u16 = 599;

/// A regular expression as written, compiled by the glue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Regex {
    /// Its source, as written in the configuration.
    pub source: Vec<u8>,
    /// `~*`, `!~*`: matched ignoring case.
    pub caseless: bool,
}

/// What a `header` test asks of the headers of one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderCond {
    /// `header NAME;`
    Present,
    /// `header ! NAME;`
    Absent,
    /// `header NAME = VALUE;`
    Equals(Vec<u8>),
    /// `header NAME != VALUE;`
    NotEquals(Vec<u8>),
    /// `header NAME ~ RE;`, `header NAME ~* RE;`
    Matches(Regex),
    /// `header NAME !~ RE;`, `header NAME !~* RE;`
    NotMatches(Regex),
}

/// What an `expect` test waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// `expect STRING;`: the answer starts with these bytes.
    Prefix(Vec<u8>),
    /// `expect ~ RE;`: the answer matches RE anywhere.
    Regex(Regex),
}

/// One line of a `check_match` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// `status [!] CODE|LOW-HIGH ...;`
    Status {
        /// `!`: the status must be none of the ranges.
        negated: bool,
        /// Inclusive ranges (a single code is `(c, c)`), each within
        /// [`STATUS_MIN`]..=[`STATUS_MAX`] with low <= high; alternatives.
        ranges: Vec<(u16, u16)>,
    },
    /// `header ...;`
    Header {
        /// The header name as written (compared ignoring ASCII case).
        name: Vec<u8>,
        /// The condition.
        cond: HeaderCond,
    },
    /// `body ~ RE;` and its variants.
    Body {
        /// The expression.
        regex: Regex,
        /// `!~`, `!~*`: the body must not match.
        negated: bool,
    },
    /// `send STRING;`: the bytes to send (never empty).
    Send(Vec<u8>),
    /// `expect ...;`
    Expect(Expect),
}

impl Test {
    /// The test's name as written: `status`, `header`, `body`, `send`,
    /// `expect`.
    pub fn name(&self) -> &'static str {
        match self {
            Test::Status { .. } => "status",
            Test::Header { .. } => "header",
            Test::Body { .. } => "body",
            Test::Send(_) => "send",
            Test::Expect(_) => "expect",
        }
    }

    /// The test's regular expression, if it has one (at most one).
    pub fn regex(&self) -> Option<&Regex> {
        match self {
            Test::Header {
                cond: HeaderCond::Matches(r) | HeaderCond::NotMatches(r),
                ..
            }
            | Test::Body { regex: r, .. }
            | Test::Expect(Expect::Regex(r)) => Some(r),
            _ => None,
        }
    }

    /// Whether the test judges an HTTP response (`status`, `header`,
    /// `body`), as opposed to a raw exchange (`send`, `expect`).
    pub fn is_http(&self) -> bool {
        matches!(
            self,
            Test::Status { .. } | Test::Header { .. } | Test::Body { .. }
        )
    }

    /// The check types the test may be used with, for messages.
    fn types(&self) -> &'static str {
        if self.is_http() {
            "type=http"
        } else {
            "type=tcp or type=udp"
        }
    }

    /// Whether the test may be used with checks of type `t`.
    pub fn fits(&self, t: CheckType) -> bool {
        match t {
            CheckType::Http | CheckType::Https => self.is_http(),
            CheckType::Tcp | CheckType::Udp | CheckType::Tls => !self.is_http(),
            // Their exchange is fixed: no block judges it.
            CheckType::Mysql
            | CheckType::Ajp
            | CheckType::Fastcgi
            | CheckType::Grpc
            | CheckType::Grpcs => false,
        }
    }
}

/// `invalid value "<arg>" in "<test>" test: <reason>`
fn invalid_value(test: &str, arg: &[u8], reason: &str) -> ConfError {
    ConfError(format!(
        "invalid value \"{}\" in \"{test}\" test: {reason}",
        printable(arg)
    ))
}

fn invalid_count(test: &str) -> ConfError {
    ConfError(format!("invalid number of arguments in \"{test}\" test"))
}

/// Parses one line of a `check_match` block: its words, the test's name
/// first (nginx has split and unquoted them).
pub fn parse_test(args: &[&[u8]]) -> Result<Test, ConfError> {
    let Some((&name, rest)) = args.split_first() else {
        return Err(ConfError("empty test in check_match".into()));
    };
    match name {
        b"status" => parse_status(rest),
        b"header" => parse_header(rest),
        b"body" => parse_body(rest),
        b"send" => match *rest {
            [s] => Ok(Test::Send(string("send", s)?)),
            _ => Err(invalid_count("send")),
        },
        b"expect" => parse_expect(rest),
        _ => Err(ConfError(format!(
            "unknown test \"{}\" in check_match: the tests are status, header, body, send \
             and expect",
            printable(name)
        ))),
    }
}

fn parse_status(rest: &[&[u8]]) -> Result<Test, ConfError> {
    const T: &str = "status";
    let (negated, values) = match rest.split_first() {
        Some((&b"!", values)) => (true, values),
        _ => (false, rest),
    };
    if values.is_empty() {
        return Err(invalid_count(T));
    }
    let code = |arg: &[u8], text: &[u8]| -> Result<u16, ConfError> {
        if text.is_empty() || text.len() > 3 || !text.iter().all(u8::is_ascii_digit) {
            return Err(invalid_value(
                T,
                arg,
                "must be a status code (200), a range (200-399), or \"!\" first",
            ));
        }
        let n = text.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
        if !(STATUS_MIN..=STATUS_MAX).contains(&n) {
            return Err(invalid_value(T, arg, "status codes are from 100 to 599"));
        }
        Ok(n)
    };
    let mut ranges = Vec::with_capacity(values.len());
    for &v in values {
        if v == b"!" {
            return Err(invalid_value(T, v, "\"!\" must come first"));
        }
        let range = match v.iter().position(|&b| b == b'-') {
            Some(dash) => (code(v, &v[..dash])?, code(v, &v[dash + 1..])?),
            None => {
                let c = code(v, v)?;
                (c, c)
            }
        };
        if range.0 > range.1 {
            return Err(invalid_value(
                T,
                v,
                "the low code of a range must not be above the high one",
            ));
        }
        ranges.push(range);
    }
    Ok(Test::Status { negated, ranges })
}

fn header_name(name: &[u8]) -> Result<Vec<u8>, ConfError> {
    if crate::conf::is_token(name) {
        Ok(name.to_vec())
    } else {
        Err(invalid_value(
            "header",
            name,
            &format!("a header name is a token ({})", crate::conf::TOKEN_SYNTAX),
        ))
    }
}

fn regex(test: &str, source: &[u8], caseless: bool) -> Result<Regex, ConfError> {
    if source.is_empty() {
        return Err(invalid_value(
            test,
            source,
            "the regular expression must not be empty",
        ));
    }
    Ok(Regex {
        source: source.to_vec(),
        caseless,
    })
}

fn string(test: &str, arg: &[u8]) -> Result<Vec<u8>, ConfError> {
    let s = unescape(arg).map_err(|reason| invalid_value(test, arg, &reason))?;
    if s.is_empty() {
        return Err(invalid_value(test, arg, "the string must not be empty"));
    }
    Ok(s)
}

fn parse_header(rest: &[&[u8]]) -> Result<Test, ConfError> {
    const T: &str = "header";
    let (name, cond) = match *rest {
        [b"!"] => return Err(invalid_count(T)),
        [b"!", name] => (name, HeaderCond::Absent),
        [name] => (name, HeaderCond::Present),
        [b"!", _, _] => {
            return Err(invalid_value(
                T,
                b"!",
                "\"!\" takes a header name only (header ! NAME)",
            ))
        }
        [name, op, value] => {
            let cond = match op {
                b"=" => HeaderCond::Equals(value.to_vec()),
                b"!=" => HeaderCond::NotEquals(value.to_vec()),
                b"~" => HeaderCond::Matches(regex(T, value, false)?),
                b"~*" => HeaderCond::Matches(regex(T, value, true)?),
                b"!~" => HeaderCond::NotMatches(regex(T, value, false)?),
                b"!~*" => HeaderCond::NotMatches(regex(T, value, true)?),
                _ => {
                    return Err(invalid_value(
                        T,
                        op,
                        "the operator must be =, !=, ~, ~*, !~ or !~*",
                    ))
                }
            };
            (name, cond)
        }
        _ => return Err(invalid_count(T)),
    };
    Ok(Test::Header {
        name: header_name(name)?,
        cond,
    })
}

/// `check_http_expect_body ~|~*|!~|!~* REGEX;` (zhouchangxun's module): the
/// body test of a `check_match` block, written as a directive.
pub fn parse_expect_body(args: &[&[u8]]) -> Result<Test, ConfError> {
    const D: &str = "check_http_expect_body";
    if args.len() != 2 {
        return Err(ConfError(format!(
            "invalid number of arguments in \"{D}\" directive: write {D} ~ \"REGEX\" (or ~*, !~, !~*)"
        )));
    }
    parse_body(args)
        .map_err(|e| ConfError(e.0.replace("in \"body\" test", &format!("in \"{D}\" directive"))))
}

fn parse_body(rest: &[&[u8]]) -> Result<Test, ConfError> {
    const T: &str = "body";
    let [op, source] = *rest else {
        return Err(invalid_count(T));
    };
    let (negated, caseless) = match op {
        b"~" => (false, false),
        b"~*" => (false, true),
        b"!~" => (true, false),
        b"!~*" => (true, true),
        _ => {
            return Err(invalid_value(
                T,
                op,
                "the operator must be ~, ~*, !~ or !~*",
            ))
        }
    };
    Ok(Test::Body {
        regex: regex(T, source, caseless)?,
        negated,
    })
}

fn parse_expect(rest: &[&[u8]]) -> Result<Test, ConfError> {
    const T: &str = "expect";
    let e = match *rest {
        [s] => Expect::Prefix(string(T, s)?),
        [b"~", source] => Expect::Regex(regex(T, source, false)?),
        [b"~*", source] => Expect::Regex(regex(T, source, true)?),
        [op, _] => {
            return Err(invalid_value(
                T,
                op,
                "the operator must be ~ or ~* (a literal is one argument)",
            ))
        }
        _ => return Err(invalid_count(T)),
    };
    Ok(Test::Expect(e))
}

/// The regular expressions of a block, compiled by the glue (nginx's
/// PCRE): `is_match(id, subject)` says whether the expression with that id
/// ([`MatchBlock::regexes`]) matches anywhere in `subject`.
pub trait RegexSet {
    /// Whether expression `id` matches `subject`.
    fn is_match(&self, id: usize, subject: &[u8]) -> bool;
}

/// What [`MatchBlock::evaluate_http`] reads from a response head: the
/// response parser's `Head` gives it with
/// `HeadView { status: head.status, headers: &head.headers }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadView<'a> {
    /// The status code.
    pub status: u16,
    /// Every header line as `(name, value)`, in order.
    pub headers: &'a [(Vec<u8>, Vec<u8>)],
}

impl<'a> HeadView<'a> {
    /// The values of every header named `name` (ASCII case ignored), in
    /// order.
    pub fn values(&self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// How far an answer is from passing the block's `expect` test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectProgress {
    /// The test passed (or the block has no `expect`).
    Matched,
    /// Not decided: read more.
    NeedMore,
    /// The test failed: [`Reason::Mismatch`].
    Failed,
}

/// A `check_match NAME { ... }` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchBlock {
    /// The block's name, as written.
    pub name: Vec<u8>,
    /// Its tests, in order.
    pub tests: Vec<Test>,
}

impl MatchBlock {
    /// The rules of a block on its own: at least one test, at most one
    /// `send` and one `expect`.
    pub fn check_shape(&self) -> Result<(), ConfError> {
        let name = printable(&self.name);
        if self.tests.is_empty() {
            return Err(ConfError(format!("check_match \"{name}\" has no tests")));
        }
        for test in ["send", "expect"] {
            if self.tests.iter().filter(|t| t.name() == test).count() > 1 {
                return Err(ConfError(format!(
                    "check_match \"{name}\" has more than one \"{test}\" test"
                )));
            }
        }
        Ok(())
    }

    /// The first test that does not fit a check of type `t`.
    pub fn misfit(&self, t: CheckType) -> Option<&Test> {
        self.tests.iter().find(|test| !test.fits(t))
    }

    /// Whether the block can judge a check of type `t`: its shape
    /// ([`MatchBlock::check_shape`]), and every test fits `t` (`status`,
    /// `header` and `body` need type=http; `send` and `expect` type=tcp or
    /// type=udp).
    pub fn validate(&self, check_type: CheckType) -> Result<(), ConfError> {
        self.check_shape()?;
        match self.misfit(check_type) {
            None => Ok(()),
            Some(test) => Err(ConfError(format!(
                "check_match \"{}\" cannot be used with type={}: {}",
                printable(&self.name),
                check_type.as_str(),
                misfit_reason(test)
            ))),
        }
    }

    /// Every regular expression of the block as `(id, source, caseless)`:
    /// ids count from 0 in the order of the tests, and are the ids
    /// [`RegexSet::is_match`] is asked about.
    pub fn regexes(&self) -> impl Iterator<Item = (usize, &[u8], bool)> {
        self.tests
            .iter()
            .filter_map(Test::regex)
            .enumerate()
            .map(|(id, r)| (id, r.source.as_slice(), r.caseless))
    }

    /// Each test with the id of its regular expression, if any.
    fn with_ids(&self) -> impl Iterator<Item = (&Test, Option<usize>)> {
        let mut next = 0;
        self.tests.iter().map(move |t| {
            let id = t.regex().map(|_| {
                next += 1;
                next - 1
            });
            (t, id)
        })
    }

    /// Whether a test reads the response body (a `body` test).
    pub fn needs_body(&self) -> bool {
        self.tests.iter().any(|t| matches!(t, Test::Body { .. }))
    }

    /// Judges an HTTP response: `Err(Reason::Status)` when a `status` test
    /// fails (they are looked at first), else `Err(Reason::Mismatch)` when
    /// a `header` or `body` test fails. `send` and `expect` tests (which
    /// [`MatchBlock::validate`] does not allow with type=http) are passed
    /// over. `body` is what was read of it (empty unless
    /// [`MatchBlock::needs_body`]).
    pub fn evaluate_http(
        &self,
        head: &HeadView<'_>,
        body: &[u8],
        rx: &dyn RegexSet,
    ) -> Result<(), Reason> {
        for t in &self.tests {
            if let Test::Status { negated, ranges } = t {
                let listed = ranges
                    .iter()
                    .any(|&(lo, hi)| (lo..=hi).contains(&head.status));
                if listed == *negated {
                    return Err(Reason::Status);
                }
            }
        }
        for (t, id) in self.with_ids() {
            let id = id.unwrap_or(usize::MAX);
            let pass = match t {
                Test::Header { name, cond } => {
                    let mut values = head.values(name);
                    match cond {
                        HeaderCond::Present => values.next().is_some(),
                        HeaderCond::Absent => values.next().is_none(),
                        HeaderCond::Equals(v) => values.any(|x| x == v.as_slice()),
                        HeaderCond::NotEquals(v) => !values.any(|x| x == v.as_slice()),
                        HeaderCond::Matches(_) => values.any(|x| rx.is_match(id, x)),
                        HeaderCond::NotMatches(_) => !values.any(|x| rx.is_match(id, x)),
                    }
                }
                Test::Body { negated, .. } => rx.is_match(id, body) != *negated,
                Test::Status { .. } | Test::Send(_) | Test::Expect(_) => true,
            };
            if !pass {
                return Err(Reason::Mismatch);
            }
        }
        Ok(())
    }

    /// The bytes of the `send` test, if any.
    pub fn send(&self) -> Option<&[u8]> {
        self.tests.iter().find_map(|t| match t {
            Test::Send(s) => Some(s.as_slice()),
            _ => None,
        })
    }

    /// Judges what has arrived so far against the `expect` test.
    /// `complete`: nothing more will arrive (the peer closed, a datagram,
    /// or the buffer is full).
    ///
    /// - A literal: `Matched` once `received` starts with it, `Failed` as
    ///   soon as `received` can no longer start with it (or it is
    ///   `complete` and shorter), `NeedMore` otherwise.
    /// - A regex: `Matched` when it matches anywhere in `received`, else
    ///   `NeedMore` until `complete`, then `Failed`.
    /// - No `expect` test: `Matched`.
    pub fn expect_progress(
        &self,
        received: &[u8],
        rx: &dyn RegexSet,
        complete: bool,
    ) -> ExpectProgress {
        let Some((e, id)) = self.with_ids().find_map(|(t, id)| match t {
            Test::Expect(e) => Some((e, id)),
            _ => None,
        }) else {
            return ExpectProgress::Matched;
        };
        let undecided = if complete {
            ExpectProgress::Failed
        } else {
            ExpectProgress::NeedMore
        };
        match e {
            Expect::Prefix(p) if received.len() >= p.len() => {
                if received.starts_with(p) {
                    ExpectProgress::Matched
                } else {
                    ExpectProgress::Failed
                }
            }
            Expect::Prefix(p) if p.starts_with(received) => undecided,
            Expect::Prefix(_) => ExpectProgress::Failed,
            Expect::Regex(_) if rx.is_match(id.unwrap_or(usize::MAX), received) => {
                ExpectProgress::Matched
            }
            Expect::Regex(_) => undecided,
        }
    }
}

/// `its "status" test needs type=http`
pub(crate) fn misfit_reason(test: &Test) -> String {
    format!("its \"{}\" test needs {}", test.name(), test.types())
}

/// Whether `status` is of a class in `mask` (`check_http_expect_alive`):
/// the verdict of an http check without a `check_match` block.
pub fn status_alive(mask: StatusClasses, status: u16) -> bool {
    mask.accepts(status)
}

/// The verdict of an http check on a response: the block's tests when the
/// check has `match=`, else [`status_alive`] (failing with
/// [`Reason::Status`]).
pub fn http_verdict(
    block: Option<&MatchBlock>,
    alive: StatusClasses,
    head: &HeadView<'_>,
    body: &[u8],
    rx: &dyn RegexSet,
) -> Result<(), Reason> {
    match block {
        Some(b) => b.evaluate_http(head, body, rx),
        None if status_alive(alive, head.status) => Ok(()),
        None => Err(Reason::Status),
    }
}

#[cfg(test)]
mod tests;
