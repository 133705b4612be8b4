//! The configuration reference, rendered from the key table and the relations:
//! `ringmq serve --help-keys` prints it and `docs/configuration.md` is a copy of it (a
//! test fails when the two differ).

use std::fmt::Write;

use super::keys::KEYS;
use super::relations::RELATIONS;

/// The command that regenerates `docs/configuration.md`.
pub const REGENERATE: &str = "cargo run -- serve --help-keys > docs/configuration.md";

/// The markdown key table: key | broker.conf key | default | range | meaning.
pub fn key_table() -> String {
    let mut out = String::from(
        "| key | broker.conf key | default | range | meaning |\n|---|---|---|---|---|\n",
    );
    for key in KEYS {
        let mut conf = format!("`{}`", key.conf[0]);
        if key.ours {
            conf.push_str(" *(ringmq)*");
        }
        for also in &key.conf[1..] {
            let _ = write!(conf, ", also `{also}`");
        }
        let _ = writeln!(
            out,
            "| `{}` | {conf} | {} | {} | {} |",
            key.name,
            key.default.doc(),
            key.range_doc(),
            key.meaning
        );
    }
    out
}

/// The relations between keys, one bullet each.
pub fn relation_list() -> String {
    let mut out = String::new();
    for relation in RELATIONS {
        let _ = writeln!(
            out,
            "- {}; reported against `{}`.",
            (relation.doc)(),
            relation.keys[0]
        );
    }
    out
}

/// The whole of `docs/configuration.md`.
pub fn document() -> String {
    format!(
        "# Configuration keys\n\
         \n\
         <!-- Generated from src/node_config/keys.rs and relations.rs by \
         `ringmq serve --help-keys`; do not edit. Regenerate: {REGENERATE} -->\n\
         \n\
         Every setting of `ringmq serve`. A TOML file (`--config`) uses the first column, a \
         RocketMQ\n\
         `broker.conf` (`--broker-conf`) the second, and `--set key=value` takes either \
         spelling;\n\
         *(ringmq)* marks a name of ringmq's own, for a setting RocketMQ lacks. How the \
         sources combine\n\
         and how a bad value is reported: [operations.md](operations.md#configuration). \
         Durations are\n\
         whole milliseconds unless the key says otherwise.\n\
         \n\
         {}\
         \n\
         ## Relations\n\
         \n\
         Checked after every key's own range, in this order:\n\
         \n\
         {}",
        key_table(),
        relation_list()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_configuration_md_is_the_rendered_document() {
        let file = include_str!("../../docs/configuration.md");
        assert!(
            file == document(),
            "docs/configuration.md differs from the key table; regenerate it: {REGENERATE}"
        );
    }

    #[test]
    fn every_key_has_one_row_of_five_cells() {
        let table = key_table();
        for key in KEYS {
            let rows: Vec<&str> = table
                .lines()
                .filter(|l| l.starts_with(&format!("| `{}` |", key.name)))
                .collect();
            assert_eq!(rows.len(), 1, "{}", key.name);
            // No cell may contain a '|' of its own.
            assert_eq!(rows[0].matches('|').count(), 6, "{}", rows[0]);
            assert!(!key.meaning.is_empty() && !key.range_doc().is_empty());
        }
    }
}
