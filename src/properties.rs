//! Java properties syntax, as RocketMQ reads a `broker.conf` or a `controller.conf`: lines
//! into `(key, value)` pairs, with comments, continuations and escapes handled.

/// Java properties: `key=value`, `key: value` or `key value`; `#`/`!` comment lines;
/// a line ending in an odd number of `\` continues on the next (leading blanks dropped);
/// `\t \n \r \f \uXXXX` escapes, any other escaped character stands for itself. Trailing
/// whitespace of a value is dropped too (Java keeps it; here it is always a mistake).
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let first = first.trim_start();
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::new();
        let mut line = first;
        loop {
            let trailing = line.len() - line.trim_end_matches('\\').len();
            if trailing % 2 == 1 {
                logical.push_str(&line[..line.len() - 1]);
                match lines.next() {
                    Some(next) => line = next.trim_start(),
                    None => break,
                }
            } else {
                logical.push_str(line);
                break;
            }
        }
        let logical = logical.trim_end_matches(['\r', ' ', '\t', '\x0c']);
        // The key ends at the first unescaped '=', ':' or blank.
        let bytes = logical.as_bytes();
        let mut end = 0;
        while end < bytes.len() {
            match bytes[end] {
                b'\\' => end += 2,
                b'=' | b':' | b' ' | b'\t' | b'\x0c' => break,
                _ => end += 1,
            }
        }
        let end = end.min(bytes.len());
        let rest = logical[end..].trim_start_matches([' ', '\t', '\x0c']);
        let rest = rest
            .strip_prefix(['=', ':'])
            .unwrap_or(rest)
            .trim_start_matches([' ', '\t', '\x0c']);
        pairs.push((unescape(&logical[..end]), unescape(rest)));
    }
    pairs
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.clone().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) if hex.len() == 4 => {
                        out.push(decoded);
                        chars.nth(3);
                    }
                    _ => out.push('u'),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_syntax() {
        let text = "# comment\n! other comment\n\n  a = 1 \nb:2\nc 3\nd=\\\n    x\\\n  y\ne=x\\=y\\u0041\nf\n  g  =  spaced value  \r\nh==v\n";
        let pairs = parse_properties(text);
        let expect: Vec<(String, String)> = [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("d", "xy"),
            ("e", "x=yA"),
            ("f", ""),
            ("g", "spaced value"),
            ("h", "=v"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(pairs, expect);
    }
}
