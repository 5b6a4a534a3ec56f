//! Whole lines of a head at once: the start of a status line and field
//! lines, taken as the byte-wise machine in `super` would take their bytes
//! (a response fed whole ends as one fed byte by byte).

use super::grammar::{is_ows, is_tchar, is_text, trim_end};
use super::{Invalid, Line, Parser, Phase, MAX_INTERIM, STATUS_START};

impl Parser {
    /// Takes the usual start of a status line, `HTTP/1.x ddd`, at once, as
    /// the byte-wise machine would take its [`STATUS_START`] bytes; `false`
    /// (nothing taken: the machine goes byte by byte, and finds the error
    /// or waits for more) for anything else.
    pub(super) fn status_line(&mut self, input: &[u8]) -> bool {
        let Some(b) = input.get(..STATUS_START) else {
            return false;
        };
        if self.count + STATUS_START > self.cfg.max_head
            || &b[..7] != b"HTTP/1."
            || b[8] != b' '
            || !b[9..].iter().all(u8::is_ascii_digit)
        {
            return false;
        }
        let version = match b[7] {
            b'0' => 0,
            b'1' => 1,
            _ => return false,
        };
        let status = b[9..]
            .iter()
            .fold(self.head.status, |s, &d| s * 10 + u16::from(d - b'0'));
        if self.check_status(status).is_err() {
            return false;
        }
        self.head.version = version;
        self.head.status = status;
        self.count += STATUS_START;
        self.phase = Phase::Head(Line::AfterStatus);
        true
    }

    /// Takes a whole field line, `name: value CRLF` (or LF), at once, as the
    /// byte-wise machine would take its bytes: the same text stored
    /// (`name:value\n`, the value trimmed), the same buffer capacity, the
    /// same count. 0 (nothing taken: the machine goes byte by byte, and
    /// finds the error or waits for more) for anything else, and for a line
    /// that would reach `max_head`.
    pub(super) fn field_line(&mut self, input: &[u8]) -> usize {
        let room = self.cfg.max_head.saturating_sub(self.count);
        let line = &input[..input.len().min(room)];
        let name = line
            .iter()
            .position(|b| !is_tchar(*b))
            .unwrap_or(line.len());
        if name == 0 || line.get(name) != Some(&b':') {
            return 0;
        }
        let after = name + 1;
        let v0 = after
            + line[after..]
                .iter()
                .position(|b| !is_ows(b))
                .unwrap_or(line.len() - after);
        let v1 = v0
            + line[v0..]
                .iter()
                .position(|b| !is_text(*b))
                .unwrap_or(line.len() - v0);
        let end = match line.get(v1..) {
            Some([b'\r', b'\n', ..]) => v1 + 2,
            Some([b'\n', ..]) => v1 + 1,
            _ => return 0,
        };
        // The most the byte-wise machine stores: the untrimmed value, or
        // the line's LF after the trim (then `end_field_line` grows nothing).
        let base = self.head.text.len();
        let trimmed = trim_end(&line[v0..v1]).len();
        self.grow_text(base + name + 1 + (v1 - v0).max(trimmed + 1));
        let text = &mut self.head.text;
        self.name_start = base;
        text.extend_from_slice(&line[..name]);
        text.push(b':');
        self.value_start = text.len();
        text.extend_from_slice(&line[v0..v1]);
        self.end_field_line();
        self.count += end;
        end
    }

    /// Grows the head's buffer to hold `want` bytes, to the capacity that
    /// [`Parser::store`] reaches byte by byte.
    pub(super) fn grow_text(&mut self, want: usize) {
        let text = &mut self.head.text;
        if want > text.capacity() {
            let mut cap = text.capacity();
            while cap < want {
                cap = (cap * 2).max(256).min(self.cfg.max_head).max(cap + 1);
            }
            text.reserve_exact(cap - text.len());
        }
    }

    /// A complete status code: one this parser takes.
    pub(super) fn check_status(&self, s: u16) -> Result<(), Invalid> {
        if !(100..=599).contains(&s) || (s == 101 && !self.cfg.final_101) {
            return Err(Invalid::StatusLine);
        }
        if s < 200 && self.interim == MAX_INTERIM {
            return Err(Invalid::TooManyInterim);
        }
        Ok(())
    }
}
