//! The broker's controller id and the file that keeps it (`<storePathRootDir>/brokerIdentity`,
//! RocketMQ's `BrokerMetadata` and `TempBrokerMetadata` in one): in controller mode a
//! broker's id is handed out by the controllers once (GET_NEXT_BROKER_ID, then
//! APPLY_BROKER_ID) and kept for the store's life, whatever role it has.
//!
//! The file is written before the apply with `applied=false` and the check code, and again
//! after it with `applied=true`: a broker that dies between the two applies the same id
//! with the same code again, which the controller takes as the same broker retrying, so
//! no id is applied twice for one store and none is orphaned by a crash.
//!
//! Format, one `key=value` per line: `cluster`, `broker`, `id`, `checkCode`, `applied`. It
//! is replaced whole (temp file, fsync, rename, directory fsync), on the supervisor's
//! thread, never on a shard's reactor. A file naming another cluster or group stops the
//! start: the store belongs to another broker.

use std::path::{Path, PathBuf};

use crate::controller::replicas::broker_calls::BrokerName;

/// The file's name under the store root.
pub const FILE_NAME: &str = "brokerIdentity";

/// What the file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cluster: String,
    pub broker: String,
    pub id: i64,
    pub check_code: String,
    /// Whether the controllers accepted the apply.
    pub applied: bool,
}

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} is damaged: {why}", path.display())]
    Damaged { path: PathBuf, why: String },
    #[error(
        "{} belongs to broker {found_broker} of cluster {found_cluster}, not {broker} of \
         {cluster}: this store is another broker's",
        path.display()
    )]
    OtherBroker {
        path: PathBuf,
        found_cluster: String,
        found_broker: String,
        cluster: String,
        broker: String,
    },
}

pub fn path(root: &Path) -> PathBuf {
    root.join(FILE_NAME)
}

impl Identity {
    pub fn encode(&self) -> String {
        format!(
            "cluster={}\nbroker={}\nid={}\ncheckCode={}\napplied={}\n",
            self.cluster, self.broker, self.id, self.check_code, self.applied
        )
    }

    pub fn decode(text: &str) -> Result<Identity, String> {
        let mut fields = std::collections::BTreeMap::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not key=value"))?;
            fields.insert(key.trim(), value.trim());
        }
        let field = |key: &str| {
            fields
                .get(key)
                .map(|value| value.to_string())
                .ok_or_else(|| format!("no {key}"))
        };
        let id = field("id")?;
        let applied = field("applied")?;
        Ok(Identity {
            cluster: field("cluster")?,
            broker: field("broker")?,
            id: id
                .parse()
                .map_err(|_| format!("id {id:?} is not a number"))?,
            check_code: field("checkCode")?,
            applied: applied
                .parse()
                .map_err(|_| format!("applied {applied:?} is not true or false"))?,
        })
    }

    /// The identity in `root`'s file, if there is one; one of another group is an error.
    pub fn load(root: &Path, name: &BrokerName) -> Result<Option<Identity>, IdentityError> {
        let path = path(root);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(IdentityError::Read { path, error }),
        };
        let identity = Identity::decode(&text).map_err(|why| IdentityError::Damaged {
            path: path.clone(),
            why,
        })?;
        if identity.cluster != name.cluster_name || identity.broker != name.broker_name {
            return Err(IdentityError::OtherBroker {
                path,
                found_cluster: identity.cluster,
                found_broker: identity.broker,
                cluster: name.cluster_name.clone(),
                broker: name.broker_name.clone(),
            });
        }
        Ok(Some(identity))
    }

    /// Replaces `root`'s file with this identity, durably.
    pub fn save(&self, root: &Path) -> Result<(), IdentityError> {
        let path = path(root);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            std::fs::create_dir_all(root)?;
            let temp = root.join(format!("{FILE_NAME}.tmp"));
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(self.encode().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)?;
            std::fs::File::open(root)?.sync_all()
        };
        write().map_err(|error| IdentityError::Write {
            path: path.clone(),
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name() -> BrokerName {
        BrokerName {
            cluster_name: "c".into(),
            broker_name: "g".into(),
        }
    }

    fn identity() -> Identity {
        Identity {
            cluster: "c".into(),
            broker: "g".into(),
            id: 3,
            check_code: "127.0.0.1:10911;77".into(),
            applied: true,
        }
    }

    #[test]
    fn a_saved_identity_is_what_the_next_load_finds() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Identity::load(dir.path(), &name()).unwrap(), None);
        identity().save(dir.path()).unwrap();
        assert_eq!(
            Identity::load(dir.path(), &name()).unwrap(),
            Some(identity())
        );
        let mut pending = identity();
        pending.applied = false;
        pending.save(dir.path()).unwrap();
        assert_eq!(Identity::load(dir.path(), &name()).unwrap(), Some(pending));
    }

    #[test]
    fn another_groups_or_a_damaged_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        identity().save(dir.path()).unwrap();
        let other = BrokerName {
            cluster_name: "c".into(),
            broker_name: "h".into(),
        };
        let error = Identity::load(dir.path(), &other).unwrap_err().to_string();
        assert!(
            error.contains("belongs to broker g of cluster c, not h of c"),
            "{error}"
        );
        std::fs::write(
            path(dir.path()),
            "cluster=c\nbroker=g\nid=x\ncheckCode=a\napplied=true\n",
        )
        .unwrap();
        let error = Identity::load(dir.path(), &name()).unwrap_err().to_string();
        assert!(
            error.contains("is damaged") && error.contains("\"x\""),
            "{error}"
        );
    }
}
