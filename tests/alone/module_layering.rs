//! The module graph of `src/` checked against the crate's floors (issue 24, item 1).
//!
//! Every `.rs` file under `src/` is read as text; comments and string literals are blanked
//! out, and every path that names a module of the crate (`crate::x`, `use crate::{x, y}`,
//! `super::...` climbing to the crate root, and `ringmq::x` in the binary's `main.rs`)
//! becomes an edge between two *units*: the top-level modules of `src/`, except that each
//! child of `tools/` is a unit of its own (`tools::admin`, `tools::bench`) and the few
//! modules of [`ONE_UNIT_WITH`] count as the unit they belong to.
//!
//! Two rules, one table:
//! - no cycle between units: every cycle is reported with the files and lines of each
//!   import that closes it;
//! - [`FLOORS`], lowest first: a unit imports only units on floors below its own. So the
//!   disk and the store import nothing of the wire, the broker or the node, and nothing
//!   in the library imports a tool.
//!
//! Imports known to break either rule and owed by code outside this check's author's
//! reach are listed in [`ALLOWED`], one entry per (unit, unit, file), each with the reason
//! and the move that removes it. An entry that no longer matches an import fails the
//! check too, so the list only shrinks. The check needs no process state and does not
//! take [`crate::alone`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// The floors, lowest first. A unit may import only units on a lower floor; two units on
/// one floor import neither the other.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "clock",
            "rng",
            "sync",
            "quiet_pipe",
            "banner",
            "typo",
            "properties",
        ],
    ),
    ("the key tables of config files", &["key_table"]),
    ("disk I/O seam", &["io"]),
    ("one shard's store and its settings", &["store"]),
    ("wire codec", &["remoting"]),
    ("network seam", &["net"]),
    (
        "the in-project remoting client (over the network seam)",
        &["client"],
    ),
    ("serving connections over the network seam", &["server"]),
    ("shards: routing, mailboxes, layout", &["shard"]),
    (
        "per-shard replication: the HA wire, epochs, the stream state machines",
        &["replication"],
    ),
    ("metrics", &["metrics"]),
    (
        "the failover controller: replicated group state, the Raft adapter",
        &["controller"],
    ),
    ("broker: what each request means", &["broker"]),
    (
        "node settings; the embedded name server",
        &["node_config", "namesrv"],
    ),
    ("node", &["node"]),
    (
        "tools built on the library",
        &["tools", "tools::admin", "tools::bench"],
    ),
    ("the binary", &["main"]),
];

/// Modules counted as part of another unit: (module, unit, why).
const ONE_UNIT_WITH: &[(&str, &str, &str)] = &[(
    "config",
    "store",
    "config.rs is one shard's store settings (StoreConfig, FlushMode, the store's \
     defaults): its fields are the store's types and the store reads it; it belongs in \
     store/ (structure review 5.3)",
)];

/// Folders whose children are units of their own.
const SPLIT_FOLDERS: &[&str] = &["tools"];

/// An import that breaks a rule, kept until the move that removes it lands.
struct Allowed {
    from: &'static str,
    to: &'static str,
    /// Relative to `src/`.
    file: &'static str,
    why: &'static str,
}

/// Every entry here is owed by a file this check's author could not edit in issue 24;
/// remove an entry once its import is gone (the check then says it is stale).
const ALLOWED: &[Allowed] = &[];

// ---------------------------------------------------------------------------------------
// Reading the sources.

/// Where an import is written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    file: String,
    line: usize,
}

/// Unit -> unit -> every site that imports it.
type Graph = BTreeMap<String, BTreeMap<String, Vec<Site>>>;

/// `code` with every comment, string, byte string, raw string and char literal replaced
/// by spaces; line breaks stay, so line numbers do too.
fn blank_comments_and_literals(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut at = 0;
    while at < chars.len() {
        let end = literal_or_comment_end(&chars, at);
        if end > at {
            out.extend(
                chars[at..end]
                    .iter()
                    .map(|&c| if c == '\n' { '\n' } else { ' ' }),
            );
            at = end;
        } else {
            out.push(chars[at]);
            at += 1;
        }
    }
    out
}

/// If a comment or literal starts at `at`, where it ends; otherwise `at`.
fn literal_or_comment_end(chars: &[char], at: usize) -> usize {
    let next = |k: usize| chars.get(at + k).copied().unwrap_or('\0');
    let word_before = at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_');
    match (chars[at], next(1)) {
        ('/', '/') => (at..chars.len())
            .find(|&k| chars[k] == '\n')
            .unwrap_or(chars.len()),
        ('/', '*') => block_comment_end(chars, at),
        ('"', _) => quoted_end(chars, at + 1, '"'),
        ('b', '"') if !word_before => quoted_end(chars, at + 2, '"'),
        ('r', '"' | '#') if !word_before => raw_string_end(chars, at + 1),
        ('b', 'r') if !word_before && matches!(next(2), '"' | '#') => raw_string_end(chars, at + 2),
        ('b', '\'') if !word_before => quoted_end(chars, at + 2, '\''),
        ('\'', '\\') => quoted_end(chars, at + 1, '\''),
        // 'x' is a char; 'a without a closing quote two on is a lifetime.
        ('\'', _) if next(2) == '\'' => at + 3,
        _ => at,
    }
}

fn block_comment_end(chars: &[char], at: usize) -> usize {
    let (mut depth, mut k) = (0usize, at);
    while k + 1 < chars.len() {
        match (chars[k], chars[k + 1]) {
            ('/', '*') => (depth, k) = (depth + 1, k + 2),
            ('*', '/') => {
                (depth, k) = (depth - 1, k + 2);
                if depth == 0 {
                    return k;
                }
            }
            _ => k += 1,
        }
    }
    chars.len()
}

/// The end of a literal whose body starts at `from` and closes with `close`, `\` escaping.
fn quoted_end(chars: &[char], from: usize, close: char) -> usize {
    let mut k = from;
    while k < chars.len() {
        match chars[k] {
            '\\' => k += 2,
            c if c == close => return k + 1,
            _ => k += 1,
        }
    }
    chars.len()
}

/// `r#"..."#`: `from` is just past the `r`. Not a raw string (`r#ident`): `from - 1`.
fn raw_string_end(chars: &[char], from: usize) -> usize {
    let hashes = chars[from..].iter().take_while(|&&c| c == '#').count();
    if chars.get(from + hashes) != Some(&'"') {
        return from - 1;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain("#".repeat(hashes).chars())
        .collect();
    (from + hashes + 1..chars.len())
        .find(|&k| chars[k..].starts_with(&closing))
        .map_or(chars.len(), |k| k + closing.len())
}

/// The module path of a file under `src/`: `broker/pop/mod.rs` is `broker::pop`; the
/// binary's `main.rs` is `main`.
fn module_path_of(relative: &str) -> Vec<String> {
    let stem = relative.trim_end_matches(".rs");
    let mut path: Vec<String> = stem.split('/').map(str::to_string).collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The unit a module path belongs to.
fn unit_of(path: &[String]) -> Option<String> {
    let first = path.first()?;
    if let Some((_, unit, _)) = ONE_UNIT_WITH.iter().find(|(module, ..)| module == first) {
        return Some(unit.to_string());
    }
    match path.get(1) {
        Some(child) if SPLIT_FOLDERS.contains(&first.as_str()) => Some(format!("{first}::{child}")),
        _ => Some(first.clone()),
    }
}

/// A cursor over blanked code that reads use trees and paths.
struct Scanner<'a> {
    chars: &'a [char],
    at: usize,
}

impl Scanner<'_> {
    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let token: Vec<char> = token.chars().collect();
        if self.chars[self.at..].starts_with(&token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let start = self.at;
        while self
            .chars
            .get(self.at)
            .is_some_and(|&c| c.is_alphanumeric() || c == '_')
        {
            self.at += 1;
        }
        (self.at > start).then(|| self.chars[start..self.at].iter().collect())
    }

    /// The leaf paths of the use tree (or plain path) at the cursor, each under `prefix`:
    /// `a::{b, c::d}` gives `a::b` and `a::c::d`.
    fn tree(&mut self, prefix: Vec<String>, leaves: &mut Vec<Vec<String>>) {
        if self.eat("{") {
            loop {
                if self.eat("}") {
                    return;
                }
                self.tree(prefix.clone(), leaves);
                if !self.eat(",") {
                    self.eat("}");
                    return;
                }
            }
        }
        let Some(segment) = self.ident() else {
            leaves.push(prefix); // `*`, or the end of the path
            return;
        };
        let mut path = prefix;
        path.push(segment);
        let before = self.at;
        if self.eat("::") && !self.eat("<") {
            self.tree(path, leaves);
            return;
        }
        self.at = before;
        leaves.push(path);
        // `x as y`: the alias names nothing.
        if self.ident().as_deref() == Some("as") {
            self.ident();
        } else {
            self.at = before;
        }
    }
}

/// One file's imports of other modules: (module path named, line). `relative` is the
/// file's path under `src/`; `crate_name` is how the file names the library (`crate`, or
/// `ringmq` in the binary).
fn imports_of(relative: &str, code: &str) -> Vec<(Vec<String>, usize)> {
    let blank = blank_comments_and_literals(code);
    let chars: Vec<char> = blank.chars().collect();
    let in_binary = relative == "main.rs";
    let root_word = if in_binary { "ringmq" } else { "crate" };
    let file_path = module_path_of(relative);
    let mut inline_modules: Vec<(String, usize)> = Vec::new(); // (name, depth inside it)
    let (mut depth, mut line, mut at) = (0usize, 1usize, 0usize);
    let mut found = Vec::new();
    while at < chars.len() {
        let starts_word = chars[at].is_alphabetic() || chars[at] == '_';
        let boundary = at == 0 || !(chars[at - 1].is_alphanumeric() || chars[at - 1] == '_');
        if !(starts_word && boundary) {
            match chars[at] {
                '\n' => line += 1,
                '{' => depth += 1,
                '}' => {
                    depth = depth.checked_sub(1).unwrap_or_else(|| {
                        panic!("src/{relative}:{line}: a `}}` closes nothing: the check misread a literal")
                    });
                    if inline_modules
                        .last()
                        .is_some_and(|(_, inside)| *inside > depth)
                    {
                        inline_modules.pop();
                    }
                }
                _ => {}
            }
            at += 1;
            continue;
        }
        let mut scanner = Scanner { chars: &chars, at };
        let word = scanner.ident().expect("a word starts here");
        let mut leaves = Vec::new();
        match word.as_str() {
            "mod" => {
                if let Some(name) = scanner.ident().filter(|_| scanner.eat("{")) {
                    depth += 1;
                    inline_modules.push((name, depth));
                }
            }
            word if word == root_word && scanner.eat("::") => {
                scanner.tree(Vec::new(), &mut leaves);
            }
            "super" if !in_binary && scanner.eat("::") => {
                let mut base = file_path.clone();
                base.extend(inline_modules.iter().map(|(name, _)| name.clone()));
                base.pop();
                while scanner.eat("super::") {
                    base.pop();
                }
                scanner.tree(base, &mut leaves);
            }
            _ => {}
        }
        leaves.dedup();
        found.extend(leaves.into_iter().map(|leaf| (leaf, line)));
        line += chars[at..scanner.at].iter().filter(|&&c| c == '\n').count();
        at = scanner.at;
    }
    found
}

/// Every `.rs` file under `dir`, as (path relative to `dir` with `/`, contents).
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).expect("read a folder of src/") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(dir).expect("under src/");
                let relative = relative.to_string_lossy().replace('\\', "/");
                let code = std::fs::read_to_string(&path).expect("read a source file");
                files.push((relative, code));
            }
        }
    }
    files.sort();
    files
}

/// The unit graph of `files`, and every path that names no unit ("names no module").
fn unit_graph(files: &[(String, String)]) -> (Graph, Vec<String>) {
    // The crate root declares the modules; it is no unit.
    let files: Vec<_> = files.iter().filter(|(path, _)| path != "lib.rs").collect();
    let units: BTreeSet<String> = files
        .iter()
        .filter_map(|(path, _)| unit_of(&module_path_of(path)))
        .collect();
    let mut graph = Graph::new();
    let mut unknown = Vec::new();
    for (relative, code) in files {
        let from = unit_of(&module_path_of(relative)).expect("a file has a unit");
        graph.entry(from.clone()).or_default();
        for (path, line) in imports_of(relative, code) {
            let site = Site {
                file: relative.clone(),
                line,
            };
            match unit_of(&path) {
                Some(to) if to == from => {}
                Some(to) if units.contains(&to) => {
                    let sites = graph
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_default();
                    if sites.last() != Some(&site) {
                        sites.push(site);
                    }
                }
                _ => unknown.push(format!(
                    "src/{}:{}: `{}` names no module of src/",
                    site.file,
                    site.line,
                    path.join("::")
                )),
            }
        }
    }
    (graph, unknown)
}

// ---------------------------------------------------------------------------------------
// The rules.

/// `graph` without the sites [`ALLOWED`] (or `allowed`) excuses; also every entry that
/// excused nothing.
fn without_allowed(graph: &Graph, allowed: &[Allowed]) -> (Graph, Vec<String>) {
    let mut used = vec![false; allowed.len()];
    let mut kept = Graph::new();
    for (from, targets) in graph {
        let entry = kept.entry(from.clone()).or_default();
        for (to, sites) in targets {
            let left: Vec<Site> = sites
                .iter()
                .filter(|site| {
                    let excuse = allowed
                        .iter()
                        .position(|a| a.from == from && a.to == to && a.file == site.file);
                    excuse.inspect(|&k| used[k] = true).is_none()
                })
                .cloned()
                .collect();
            if !left.is_empty() {
                entry.insert(to.clone(), left);
            }
        }
    }
    let stale = allowed
        .iter()
        .zip(used)
        .filter(|(_, used)| !used)
        .map(|(a, _)| {
            format!(
                "stale allow-list entry: src/{} no longer imports {} from {}; remove it from \
                 ALLOWED (it said: {})",
                a.file, a.to, a.from, a.why
            )
        })
        .collect();
    (kept, stale)
}

/// `from -> to` with where it is written: `broker -> node (src/broker/x.rs:3, ...)`.
fn describe_edge(graph: &Graph, from: &str, to: &str) -> String {
    let sites = &graph[from][to];
    let shown: Vec<String> = sites
        .iter()
        .take(4)
        .map(|site| format!("src/{}:{}", site.file, site.line))
        .collect();
    let more = match sites.len() {
        n if n > 4 => format!(", and {} more", n - 4),
        _ => String::new(),
    };
    format!("{from} -> {to} ({}{more})", shown.join(", "))
}

/// The shortest path of units from `start` to `goal`, both included.
fn shortest_path(graph: &Graph, start: &str, goal: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(unit) = queue.pop_front() {
        if unit == goal {
            let mut path = vec![goal.to_string()];
            let mut at = goal;
            while at != start {
                at = came_from[at];
                path.push(at.to_string());
            }
            path.reverse();
            return Some(path);
        }
        for next in graph
            .get(unit)
            .into_iter()
            .flat_map(|targets| targets.keys())
        {
            if next != start && !came_from.contains_key(next.as_str()) {
                came_from.insert(next, unit);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Every cycle of `graph`: for each import `a -> b` that lies on one, the shortest cycle
/// through it, each cycle once, with the sites of every import in it.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut seen: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut found = Vec::new();
    for (from, targets) in graph {
        for to in targets.keys() {
            let Some(mut cycle) = shortest_path(graph, to, from) else {
                continue;
            };
            cycle.insert(0, from.clone()); // from -> to -> ... -> from
            let mut key = cycle[..cycle.len() - 1].to_vec();
            let smallest = (0..key.len()).min_by_key(|&k| &key[k]).expect("a cycle");
            key.rotate_left(smallest);
            if seen.insert(key) {
                let edges: Vec<String> = cycle
                    .windows(2)
                    .map(|pair| format!("  {}", describe_edge(graph, &pair[0], &pair[1])))
                    .collect();
                found.push(format!(
                    "cycle {}:\n{}",
                    cycle.join(" -> "),
                    edges.join("\n")
                ));
            }
        }
    }
    found
}

/// Every import of a unit on the same floor or a higher one, and every unit the floors do
/// not place (or place twice, or that does not exist).
fn floor_breaks(graph: &Graph, floors: &[(&str, &[&str])]) -> Vec<String> {
    let mut floor_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for (level, (_, units)) in floors.iter().enumerate() {
        for &unit in *units {
            if floor_of.insert(unit, level).is_some() {
                problems.push(format!("FLOORS places {unit} twice"));
            }
            if !graph.contains_key(unit) {
                problems.push(format!("FLOORS names {unit}, which is no module of src/"));
            }
        }
    }
    for (from, targets) in graph {
        let Some(&own) = floor_of.get(from.as_str()) else {
            problems.push(format!("{from} is on no floor: add it to FLOORS"));
            continue;
        };
        for to in targets.keys() {
            match floor_of.get(to.as_str()) {
                Some(&theirs) if theirs < own => {}
                Some(&theirs) => problems.push(format!(
                    "{} imports up or across: {from} is on floor '{}', {to} on '{}'",
                    describe_edge(graph, from, to),
                    floors[own].0,
                    floors[theirs].0
                )),
                None => {} // reported as a unit on no floor
            }
        }
    }
    problems
}

/// Every problem of `graph` under `floors` and `allowed`: cycles, floor breaks, stale
/// allow-list entries.
fn problems(graph: &Graph, floors: &[(&str, &[&str])], allowed: &[Allowed]) -> Vec<String> {
    let (kept, mut found) = without_allowed(graph, allowed);
    found.extend(cycles(&kept));
    found.extend(floor_breaks(&kept, floors));
    found
}

fn crate_graph() -> (Graph, Vec<String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    unit_graph(&sources(&src))
}

#[test]
fn the_modules_of_src_form_no_cycle_and_import_only_lower_floors() {
    let (graph, mut found) = crate_graph();
    found.extend(problems(&graph, FLOORS, ALLOWED));
    let edges: Vec<String> = graph
        .iter()
        .flat_map(|(from, targets)| targets.keys().map(move |to| format!("{from} -> {to}")))
        .collect();
    assert!(
        found.is_empty(),
        "the module graph breaks its rules (tests/alone/module_layering.rs):\n\n{}\n\nevery import between units: {}",
        found.join("\n\n"),
        edges.join(", ")
    );
}

// ---------------------------------------------------------------------------------------
// The check's own tests, on small synthetic sources.

fn synthetic(files: &[(&str, &str)]) -> Graph {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(path, code)| (path.to_string(), code.to_string()))
        .collect();
    let (graph, unknown) = unit_graph(&files);
    assert_eq!(unknown, Vec::<String>::new());
    graph
}

const NO_ALLOWED: &[Allowed] = &[];

#[test]
fn a_cycle_fails_the_check_naming_the_lines_that_close_it() {
    let graph = synthetic(&[
        ("lower/mod.rs", "use crate::middle::Thing;\n"),
        ("middle.rs", "\n\nfn f() { crate::upper::g() }\n"),
        ("upper/mod.rs", "pub fn g() {}\n"),
        ("upper/deep.rs", "use super::super::lower::X;\n"),
    ]);
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("cycle lower -> middle -> upper -> lower:"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("lower -> middle (src/lower/mod.rs:1)"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("middle -> upper (src/middle.rs:3)"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("upper -> lower (src/upper/deep.rs:1)"),
        "{}",
        found[0]
    );
    let floors: &[(&str, &[&str])] = &[("a", &["lower"]), ("b", &["middle"]), ("c", &["upper"])];
    let found = problems(&graph, floors, NO_ALLOWED);
    assert!(found.iter().any(|p| p.starts_with("cycle")), "{found:#?}");
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("lower -> middle (src/lower/mod.rs:1) imports up")),
        "{found:#?}"
    );
}

#[test]
fn an_allowed_import_is_excused_only_in_its_file_and_a_stale_entry_fails() {
    let graph = synthetic(&[
        ("lower.rs", "use crate::upper::X;\n"),
        ("upper.rs", "use crate::lower::Y;\n"),
    ]);
    let floors: &[(&str, &[&str])] = &[("a", &["lower"]), ("b", &["upper"])];
    let allowed = [Allowed {
        from: "lower",
        to: "upper",
        file: "lower.rs",
        why: "test",
    }];
    assert_eq!(problems(&graph, floors, &allowed), Vec::<String>::new());
    let elsewhere = [Allowed {
        file: "other.rs",
        ..allowed[0]
    }];
    let found = problems(&graph, floors, &elsewhere);
    assert!(
        found[0].starts_with("stale allow-list entry: src/other.rs"),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("cycle lower -> upper -> lower")),
        "{found:#?}"
    );
}

#[test]
fn paths_are_read_from_code_only_through_groups_and_inline_modules() {
    let code = r##"
// use crate::in_a_comment::X;
/* crate::in_a_block /* nested */ crate::still_comment */
const S: &str = "crate::in_a_string";
const R: &str = r#"crate::in_a_raw "string""#;
const C: char = '"'; fn f<'a>(x: &'a str) {}
use crate::{alpha::A, beta::{self, B}, tools::admin::run};
mod tests {
    use super::super::sibling::S;
    use super::super::super::gamma::G;
    mod deeper { fn g() { super::super::super::super::delta::d(); } }
}
fn h() { super::epsilon::e(); }
"##;
    let named: Vec<(String, usize)> = imports_of("me/file.rs", code)
        .into_iter()
        .map(|(path, line)| (path.join("::"), line))
        .collect();
    let expected = [
        ("alpha::A", 7),
        ("beta::self", 7),
        ("beta::B", 7),
        ("tools::admin::run", 7),
        ("me::sibling::S", 9),
        ("gamma::G", 10),
        ("delta::d", 11),
        ("me::epsilon::e", 13),
    ];
    let expected: Vec<(String, usize)> = expected
        .iter()
        .map(|(path, line)| (path.to_string(), *line))
        .collect();
    assert_eq!(named, expected);
    assert_eq!(
        unit_of(&["tools".into(), "admin".into(), "x".into()]),
        Some("tools::admin".into())
    );
    assert_eq!(unit_of(&["config".into()]), Some("store".into()));
}
