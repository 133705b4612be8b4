//! The sources: a TOML file, a RocketMQ broker.conf and command-line overrides, applied
//! one at a time onto a [`NodeConfig`] while remembering which source (and spelling) set
//! each key, so that a validation error names where the bad value came from.

use std::collections::HashMap;
use std::path::Path;

use super::key::Key;
use super::keys::{find_conf, find_key, find_snake};
use super::parse::Value;
use super::rocketmq::{
    StorePath, DERIVED_STORE_PATHS, IGNORED_ROCKETMQ_KEYS, UNSUPPORTED_ROCKETMQ_KEYS,
};
use super::suggest::nearest_conf_key;
use super::{ConfigError, NodeConfig};
use crate::properties::parse_properties;

/// Applies sources one at a time, remembering where each value came from so that a
/// validation error names the source and spelling that set the bad value.
///
/// Sources apply in call order: call them in the documented order (TOML file, broker.conf,
/// overrides), as [`NodeConfig::load`] does.
pub struct ConfigLoader {
    config: NodeConfig,
    /// snake_case key → (origin, key as spelled there).
    origins: HashMap<&'static str, (String, String)>,
    warnings: Vec<String>,
    /// RocketMQ store paths given ([`DERIVED_STORE_PATHS`]): `(origin, key, value)`,
    /// checked against the final root in [`ConfigLoader::finish`].
    store_paths: Vec<(String, &'static StorePath, String)>,
}

impl Default for ConfigLoader {
    fn default() -> Self {
        ConfigLoader::new()
    }
}

impl ConfigLoader {
    /// Starts from [`NodeConfig::default`].
    pub fn new() -> ConfigLoader {
        ConfigLoader::from_config(NodeConfig::default())
    }

    /// Starts from `config` (tests use a small one).
    pub fn from_config(config: NodeConfig) -> ConfigLoader {
        ConfigLoader {
            config,
            origins: HashMap::new(),
            warnings: Vec::new(),
            store_paths: Vec::new(),
        }
    }

    /// The settings so far, not yet validated.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The warnings logged so far (ignored RocketMQ keys), each `<source>: <key>: <why>`.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn toml_file(&mut self, path: &Path) -> Result<&mut Self, ConfigError> {
        let text = read(path)?;
        self.toml_str(&path.display().to_string(), &text)
    }

    /// A TOML document; `origin` names it in errors.
    pub fn toml_str(&mut self, origin: &str, text: &str) -> Result<&mut Self, ConfigError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigError::new(origin, "", format!("not valid TOML: {}", e.message()))
        })?;
        for (key, value) in &table {
            let Some(def) = find_snake(key) else {
                let message = match (find_conf(key), value) {
                    (Some(def), _) => {
                        format!("unknown key; TOML keys are snake_case: use {}", def.name)
                    }
                    (None, toml::Value::Table(_)) => {
                        "unknown key (sections are not used; keys sit at the top level)".into()
                    }
                    (None, _) => "unknown key".into(),
                };
                return Err(ConfigError::new(origin, key, message));
            };
            let value = match value {
                toml::Value::String(s) => Value::Str(s),
                toml::Value::Integer(n) => Value::Int(*n),
                toml::Value::Boolean(b) => Value::Bool(*b),
                other => {
                    return Err(ConfigError::new(
                        origin,
                        key,
                        format!(
                            "expected a string, integer or boolean, found {}",
                            other.type_str()
                        ),
                    ))
                }
            };
            self.set(origin, key, def, value)?;
        }
        Ok(self)
    }

    pub fn broker_conf_file(&mut self, path: &Path) -> Result<&mut Self, ConfigError> {
        let text = read(path)?;
        self.broker_conf_str(&path.display().to_string(), &text)
    }

    /// A RocketMQ broker.conf (Java properties); `origin` names it in errors. Every bad
    /// line is reported at once, not one per start: the error is the first, its message
    /// followed by one `<origin>: <key>: <why>` line for each of the others.
    pub fn broker_conf_str(&mut self, origin: &str, text: &str) -> Result<&mut Self, ConfigError> {
        let mut errors = Vec::new();
        for (key, value) in parse_properties(text) {
            let applied = match find_conf(&key) {
                Some(def) => self.set(origin, &key, def, Value::Raw(&value)),
                None => {
                    let hint = find_snake(&key)
                        .map(|def| {
                            format!(
                                "unknown key; broker.conf keys are camelCase: use {}",
                                def.conf[0]
                            )
                        })
                        .or_else(|| {
                            nearest_conf_key(&key)
                                .map(|near| format!("unknown key; did you mean {near}?"))
                        });
                    self.unknown_rocketmq(origin, &key, &value, hint)
                }
            };
            if let Err(error) = applied {
                errors.push(error);
            }
        }
        let mut errors = errors.into_iter();
        match errors.next() {
            None => Ok(self),
            Some(mut first) => {
                for other in errors {
                    first.message.push_str(&format!("\n{other}"));
                }
                Err(first)
            }
        }
    }

    /// One `key=value` override; the key in either style.
    pub fn override_arg(&mut self, item: &str) -> Result<&mut Self, ConfigError> {
        const ORIGIN: &str = "command line";
        let Some((key, value)) = item.split_once('=') else {
            return Err(ConfigError::new(ORIGIN, item.trim(), "expected key=value"));
        };
        let (key, value) = (key.trim(), value.trim());
        match find_key(key) {
            Some(def) => self.set(ORIGIN, key, def, Value::Raw(value))?,
            None => self.unknown_rocketmq(ORIGIN, key, value, None)?,
        }
        Ok(self)
    }

    /// Validates and hands over the settings.
    pub fn finish(mut self) -> Result<NodeConfig, ConfigError> {
        self.check_store_paths()?;
        match self.config.validate() {
            Ok(()) => Ok(self.config),
            Err(mut error) => {
                match self.origins.get(error.key.as_str()) {
                    Some((origin, spelled)) => {
                        error.origin = origin.clone();
                        error.key = spelled.clone();
                    }
                    None => match self.set_partner(&error.key) {
                        // The key at its default lost to one a source set (an oversized
                        // maxMessageSize against the default maxFrameSize): blame the set
                        // one, and name the default one as the key to raise.
                        Some((origin, spelled)) => {
                            let def = find_snake(&error.key);
                            let raise =
                                def.map_or(error.key.clone(), |def| def.conf[0].to_string());
                            // A number is raised; a text or a choice is set.
                            let numeric = def
                                .is_none_or(|def| (def.get)(&self.config).parse::<f64>().is_ok());
                            let verb = if numeric { "raise" } else { "set" };
                            error.message = format!(
                                "{} {}; {} is at its default: {verb} {raise} ({} in TOML)",
                                error.key, error.message, error.key, error.key
                            );
                            error.origin = origin;
                            error.key = spelled;
                        }
                        None => error.origin = "defaults".into(),
                    },
                }
                Err(error)
            }
        }
    }

    /// For a relation whose first key is `key` (as `validate` names them), the source and
    /// spelling of another of its keys that a source set.
    fn set_partner(&self, key: &str) -> Option<(String, String)> {
        super::relations::RELATIONS
            .iter()
            .filter(|relation| relation.keys[0] == key)
            .flat_map(|relation| relation.keys[1..].iter())
            .find_map(|other| self.origins.get(other).cloned())
    }

    fn set(
        &mut self,
        origin: &str,
        spelled: &str,
        def: &'static Key,
        value: Value,
    ) -> Result<(), ConfigError> {
        (def.set)(&mut self.config, value)
            .map_err(|error| ConfigError::new(origin, spelled, error.to_string()))?;
        self.origins
            .insert(def.name, (origin.to_string(), spelled.to_string()));
        Ok(())
    }

    fn unknown_rocketmq(
        &mut self,
        origin: &str,
        key: &str,
        value: &str,
        hint: Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(path) = DERIVED_STORE_PATHS.iter().find(|(k, _, _)| *k == key) {
            self.store_paths
                .push((origin.to_string(), path, value.to_string()));
            return Ok(());
        }
        if IGNORED_ROCKETMQ_KEYS.contains(&key) {
            self.warn(
                origin,
                key,
                "a RocketMQ setting ringmq does not use; ignored".into(),
            );
            return Ok(());
        }
        if let Some((_, harmless, why)) =
            UNSUPPORTED_ROCKETMQ_KEYS.iter().find(|(k, _, _)| *k == key)
        {
            if harmless.is_some_and(|h| h.eq_ignore_ascii_case(value)) {
                self.warn(
                    origin,
                    key,
                    format!("{value} is RocketMQ's default; ignored"),
                );
                return Ok(());
            }
            return Err(ConfigError::new(
                origin,
                key,
                format!("not supported: {why}"),
            ));
        }
        Err(ConfigError::new(
            origin,
            key,
            hint.unwrap_or_else(|| "unknown key".into()),
        ))
    }

    /// Each RocketMQ store path given is ignored with a warning where RocketMQ itself
    /// would put it under the final `storePathRootDir`, and refused anywhere else. Called
    /// by [`ConfigLoader::finish`]; a caller that wants the warnings calls it first.
    pub fn check_store_paths(&mut self) -> Result<(), ConfigError> {
        for (origin, &(key, under_root, why), value) in std::mem::take(&mut self.store_paths) {
            let place = self.config.store_path_root_dir.join(under_root);
            if Path::new(&value) == place {
                self.warn(
                    &origin,
                    key,
                    format!("{value} is RocketMQ's place under storePathRootDir; ignored: {why}"),
                );
                continue;
            }
            return Err(ConfigError::new(
                &origin,
                key,
                format!(
                    "not supported: {why} (only {}, RocketMQ's place under storePathRootDir, \
                     is accepted)",
                    place.display()
                ),
            ));
        }
        Ok(())
    }

    fn warn(&mut self, origin: &str, key: &str, why: String) {
        tracing::warn!("{origin}: {key}: {why}");
        self.warnings.push(format!("{origin}: {key}: {why}"));
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&path.display().to_string(), "", format!("cannot read: {e}")))
}
