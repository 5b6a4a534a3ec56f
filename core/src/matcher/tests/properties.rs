use super::*;

// ---- properties ------------------------------------------------------------

pub(super) fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..12),
        prop::sample::select(vec![
            "status", "header", "body", "send", "expect", "!", "=", "!=", "~", "~*", "!~", "!~*",
            "200", "599", "600", "99", "200-399", "399-200", "-", "X-A", "\\x41", "\\x", "",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        "[0-9]{1,4}(-[0-9]{1,4})?".prop_map(String::into_bytes),
    ]
}

proptest! {
    #[test]
    fn parse_never_panics(first in word(), rest in proptest::collection::vec(word(), 0..5)) {
        let mut args: Vec<&[u8]> = vec![&first];
        args.extend(rest.iter().map(Vec::as_slice));
        match parse_test(&args) {
            Ok(Test::Status { ranges, .. }) => {
                prop_assert!(!ranges.is_empty());
                for (lo, hi) in ranges {
                    prop_assert!(STATUS_MIN <= lo && lo <= hi && hi <= STATUS_MAX);
                }
            }
            Ok(Test::Send(s)) | Ok(Test::Expect(Expect::Prefix(s))) => prop_assert!(!s.is_empty()),
            Ok(t) => {
                if let Some(r) = t.regex() {
                    prop_assert!(!r.source.is_empty());
                }
                if let Test::Header { name, .. } = &t {
                    prop_assert!(crate::conf::is_token(name));
                }
            }
            Err(e) => {
                prop_assert!(!e.0.is_empty());
                prop_assert!(!e.0.chars().any(|c| c.is_ascii_control()), "{}", e);
            }
        }
    }

    #[test]
    fn status_lists_match_their_ranges(
        ranges in proptest::collection::vec((100u16..=599, 0u16..50), 1..4),
        negated: bool,
        status in 0u16..1000,
    ) {
        let ranges: Vec<(u16, u16)> = ranges.into_iter().map(|(lo, w)| (lo, (lo + w).min(599))).collect();
        let mut line = String::from("status");
        if negated {
            line.push_str(" !");
        }
        for (lo, hi) in &ranges {
            if lo == hi { line.push_str(&format!(" {lo}")) } else { line.push_str(&format!(" {lo}-{hi}")) }
        }
        let listed = ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&status));
        let want = if listed != negated { Ok(()) } else { Err(Reason::Status) };
        prop_assert_eq!(eval(&[&line], status, &[], ""), want);
    }

    #[test]
    fn literal_expect_is_split_invariant(
        literal in proptest::collection::vec(any::<u8>(), 1..8),
        answer in proptest::collection::vec(any::<u8>(), 0..16),
        take_literal: bool,
    ) {
        // Half the time the answer starts with the literal.
        let answer = if take_literal { [literal.clone(), answer].concat() } else { answer };
        let b = MatchBlock { name: b"m".to_vec(), tests: vec![Test::Expect(Expect::Prefix(literal.clone()))] };
        let none = Compiled(vec![]);
        let mut seen_failed = false;
        let mut seen_matched = false;
        for n in 0..=answer.len() {
            let p = b.expect_progress(&answer[..n], &none, false);
            match p {
                ExpectProgress::Matched => {
                    prop_assert!(!seen_failed, "Failed then Matched at {}", n);
                    seen_matched = true;
                }
                ExpectProgress::Failed => {
                    prop_assert!(!seen_matched, "Matched then Failed at {}", n);
                    seen_failed = true;
                }
                ExpectProgress::NeedMore => prop_assert!(!seen_failed && !seen_matched),
            }
            // Complete: decided, and the same as the oracle.
            let done = b.expect_progress(&answer[..n], &none, true);
            let want = if answer[..n].starts_with(&literal) { ExpectProgress::Matched } else { ExpectProgress::Failed };
            prop_assert_eq!(done, want);
        }
        let last = b.expect_progress(&answer, &none, false);
        prop_assert_eq!(last == ExpectProgress::Matched, answer.starts_with(&literal));
    }
}
