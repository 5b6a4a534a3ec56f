//! [`Renderer`]: a page rendered in steps, pass by pass and row by row.

use super::{
    c_shapes, csv, html, json, keeps, prom, Counts, Format, Group, Meta, PeerRow, Query,
    UpstreamSummary,
};

/// A page rendered in steps, for a caller that must not stop for the whole
/// page (an nginx worker: it renders a few hundred rows per event-loop turn
/// so proxied requests are not held up behind a 10 000-peer page).
///
/// Use: [`Renderer::new`] (writes the head, so `counts` must be the
/// [`Counts::of`] the rows that will be fed, under the same filter, and
/// `upstreams` their [`summarize`](super::summarize)), then
/// for each pass in `0..passes()` feed every row, in any number of
/// [`Renderer::rows`] calls, in page order (all http rows, then all stream
/// rows; each group in `index` order), then [`Renderer::finish`]. Rows the
/// filter drops may be fed; they print nothing. Concatenated, the output is
/// exactly what [`render_with`](super::render_with) gives for the same rows.
#[derive(Debug)]
pub struct Renderer {
    format: Format,
    query: Query,
    now_ms: u64,
    counts: Counts,
    /// JSON and HTML: groups opened so far (0, 1 = http, 2 = both).
    opened: u8,
    /// JSON: the open group has printed a row.
    group_rows: bool,
    /// Prometheus: the pass whose header is written, `None` before any.
    pass: Option<usize>,
    /// Prometheus: label sets of the printed rows, from pass 0.
    labels: Vec<u8>,
    ends: Vec<usize>,
    /// Prometheus: printed rows seen in the current pass.
    cursor: usize,
    /// Prometheus: the current pass's family header is written (a family
    /// that not every peer has writes it before its first sample).
    headed: bool,
    /// JSON: the `upstreams` list, rendered at the start, written last.
    tail: Vec<u8>,
    /// `check_status` in html, csv or json: the C modules' shapes; the
    /// rows fed so far (a row's index) and whether one was printed.
    c_shapes: Option<(u64, bool)>,
}

impl Renderer {
    /// Start a page: append its head to `out`.
    pub fn new(
        format: Format,
        query: &Query,
        meta: &Meta,
        counts: Counts,
        upstreams: &[UpstreamSummary],
        out: &mut Vec<u8>,
    ) -> Renderer {
        let mut tail = Vec::new();
        let c = query.c_shapes && format != Format::Prometheus;
        match format {
            _ if c => c_shapes::head(format, meta, &counts, out),
            Format::Html => html::head(query, meta, &counts, upstreams, out),
            Format::Csv => csv::head(out),
            Format::Json => {
                json::head(meta, &counts, out);
                json::upstreams(upstreams, &mut tail);
            }
            Format::Prometheus => prom::head(meta, &counts, upstreams, out),
        }
        Renderer {
            format,
            query: *query,
            now_ms: meta.now_ms,
            counts,
            opened: 0,
            group_rows: false,
            pass: None,
            labels: Vec::new(),
            ends: Vec::new(),
            cursor: 0,
            headed: false,
            tail,
            c_shapes: c.then_some((0, false)),
        }
    }

    /// Prometheus: the full page (`histogram=on`) rather than the lean one.
    fn full(&self) -> bool {
        self.query.histogram == Some(true)
    }

    /// Passes over the rows this format needs: Prometheus prints each
    /// family's samples together, one family per pass; the others one.
    pub fn passes(&self) -> usize {
        match self.format {
            Format::Prometheus => prom::passes(self.full()),
            _ => 1,
        }
    }

    /// Feed the next rows of pass `pass` (see the type's docs for order).
    pub fn rows<'r, 'a: 'r>(
        &mut self,
        pass: usize,
        rows: impl IntoIterator<Item = &'r PeerRow<'a>>,
        out: &mut Vec<u8>,
    ) {
        let filter = self.query.filter;
        if let Some((index, any)) = self.c_shapes.as_mut() {
            for r in rows {
                if keeps(filter, r.up || r.unchecked) {
                    c_shapes::row(self.format, *index, !*any, r, out);
                    *any = true;
                }
                *index += 1;
            }
            return;
        }
        let printed = rows.into_iter().filter(|r| keeps(filter, r.up));
        match self.format {
            Format::Csv => printed.for_each(|r| csv::row(r, out)),
            Format::Json => {
                for r in printed {
                    self.enter(r.group, out);
                    json::row(r, !self.group_rows, out);
                    self.group_rows = true;
                }
            }
            Format::Html => {
                for r in printed {
                    self.enter(r.group, out);
                    html::row(r, self.now_ms, out);
                }
            }
            Format::Prometheus => {
                if self.counts.total() == 0 || pass >= prom::passes(self.full()) {
                    return;
                }
                self.begin_passes(pass, out);
                if self.pass != Some(pass) {
                    return; // a pass already ended: out of order
                }
                for r in printed {
                    self.prom_row(pass, r, out);
                }
            }
        }
    }

    /// Append the page's end.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        if let Some((_, any)) = self.c_shapes {
            return c_shapes::tail(self.format, any, out);
        }
        match self.format {
            Format::Csv => {}
            Format::Json => {
                self.enter_all(2, out);
                self.close(out);
                json::tail(&self.tail, out);
            }
            Format::Html => {
                self.enter_all(2, out);
                self.close(out);
                html::tail(out);
            }
            Format::Prometheus => {
                if self.counts.total() != 0 {
                    self.begin_passes(prom::passes(self.full()) - 1, out);
                }
            }
        }
    }

    /// JSON/HTML: close the open group and open the next ones until
    /// `group` is open. A row of a group already closed (out of order)
    /// prints in the open one.
    fn enter(&mut self, group: Group, out: &mut Vec<u8>) {
        let want = match group {
            Group::Http => 1,
            Group::Stream => 2,
        };
        self.enter_all(want, out);
    }

    /// Open groups (closing the open one first) until `want` are open.
    fn enter_all(&mut self, want: u8, out: &mut Vec<u8>) {
        const GROUPS: [Group; 2] = [Group::Http, Group::Stream];
        while self.opened < want {
            self.close(out);
            let g = GROUPS[usize::from(self.opened)];
            self.opened += 1;
            self.group_rows = false;
            match self.format {
                Format::Json => json::open_group(g, out),
                _ => html::open_group(g, &self.query, &self.counts, out),
            }
        }
    }

    /// Close the open group, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(&g) = [Group::Http, Group::Stream].get(usize::from(self.opened).wrapping_sub(1))
        else {
            return;
        };
        match self.format {
            Format::Json => json::close_group(!self.group_rows, out),
            _ => html::close_group(g, &self.counts, out),
        }
    }

    /// Prometheus: write the headers of the passes up to `pass`.
    fn begin_passes(&mut self, pass: usize, out: &mut Vec<u8>) {
        loop {
            let next = self.pass.map_or(0, |p| p + 1);
            if next > pass {
                return;
            }
            self.headed = !prom::header_waits(next, self.full());
            if self.headed {
                prom::pass_header(next, self.full(), out);
            }
            self.pass = Some(next);
            self.cursor = 0;
        }
    }

    fn prom_row(&mut self, pass: usize, r: &PeerRow, out: &mut Vec<u8>) {
        let full = self.full();
        // The row's place among the printed rows, whose label sets pass 0
        // computes.
        let i = if pass == 0 {
            prom::label_set(r, &mut self.labels);
            self.ends.push(self.labels.len());
            self.ends.len() - 1
        } else {
            self.cursor += 1;
            self.cursor - 1
        };
        if !prom::has_samples(pass, full, r) {
            return;
        }
        if !self.headed {
            prom::pass_header(pass, full, out);
            self.headed = true;
        }
        match self.ends.get(i) {
            Some(&end) => {
                let start = i.checked_sub(1).map_or(0, |j| self.ends[j]);
                prom::pass_row(pass, full, r, &self.labels[start..end], out);
            }
            None => {
                // More rows than pass 0 saw (out of order): label it afresh.
                let mut set = Vec::new();
                prom::label_set(r, &mut set);
                prom::pass_row(pass, full, r, &set, out);
            }
        }
    }
}
