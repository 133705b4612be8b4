//! `ringmq admin`'s command line: the global options and one subcommand per mqadmin
//! command. Argument checks that need no node (names, numbers, ids, timestamps) are in
//! [`super::commands`], done before any request.
//!
//! The short flags are mqadmin's letters: `-n` name server (also the `NAMESRV_ADDR`
//! environment variable, as mqadmin reads it), `-b` broker, `-c` cluster, `-t` topic,
//! `-g` group, and each command's own as its mqadmin command has them (`topic-create -r
//! -w -p -o`, `group-create -q -r -s -d -o`, `group-delete -r`, `query-key -k -e -m`,
//! `query-uniq -i`, `query-id -i`, `query-offset -i -o`, `reset-offset -s -f`). Where
//! mqadmin's letter would clash with a global one (`queryMsgByKey -b` for its begin time,
//! `queryMsgByOffset -b` for a broker name) there is only the long form.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::arg_error::{AddrError, DurationError};

/// The name server when neither `--namesrv` nor `NAMESRV_ADDR` gives one.
pub const DEFAULT_NAMESRV: &str = "127.0.0.1:9876";

/// `ringmq admin`: mqadmin's everyday commands over the remoting protocol.
#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The name server, `host:port`; several separated by `;` as mqadmin takes them (the
    /// first that accepts a connection is used). The flag wins over `NAMESRV_ADDR`.
    #[arg(
        short = 'n',
        long,
        global = true,
        env = "NAMESRV_ADDR",
        default_value = DEFAULT_NAMESRV,
        value_parser = parse_namesrv
    )]
    pub namesrv: String,
    /// The broker, `host:port` [default: the first master the name server's cluster info
    /// lists, else 127.0.0.1:10911].
    #[arg(short = 'b', long, global = true, value_parser = parse_addr)]
    pub broker: Option<String>,
    /// The cluster, by name, as the name server lists it: the broker is its first master,
    /// and the commands that change something (topic-create/update/delete,
    /// group-create/update/delete) go to every master of it, as mqadmin's `-c` does.
    /// `cluster` lists only it. Not with `--broker`.
    #[arg(short = 'c', long, global = true, conflicts_with = "broker")]
    pub cluster: Option<String>,
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Longest wait for a connection or an answer: `500ms`, `5s`, `1m` (a bare number is
    /// seconds).
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// The brokers of every cluster, with their runtime figures (mqadmin clusterList).
    Cluster,
    /// A broker's runtime info, sorted by key (mqadmin brokerStatus).
    BrokerStatus,
    /// A broker's replication: a master's slave streams (one per slave per shard) with
    /// their lag, or a slave's stream to its master; with --cluster, every master of it
    /// (mqadmin haStatus).
    HaStatus,
    /// The controllers (which leads) and each broker group as they keep it: master,
    /// epochs, SyncStateSet (mqadmin getControllerMetaData and getSyncStateSet).
    Controller(ControllerViewArgs),
    /// Ask the controllers to make a broker the master of its group (mqadmin
    /// electMaster); refused unless it is alive and in the SyncStateSet.
    ElectMaster(ElectMasterArgs),
    /// Every topic (mqadmin topicList).
    Topics,
    /// Create a topic; refused if it exists, unless --upsert (mqadmin updateTopic).
    TopicCreate(TopicCreateArgs),
    /// Change an existing topic; unset options keep their values (mqadmin updateTopic).
    TopicUpdate(TopicUpdateArgs),
    /// Delete a topic from the broker (mqadmin deleteTopic).
    TopicDelete(TopicArg),
    /// A topic's route from the name server (mqadmin topicRoute).
    TopicRoute(TopicArg),
    /// Min and max offset and last update time of each queue of a topic (mqadmin topicStatus).
    TopicStatus(TopicArg),
    /// The subscription groups of the broker.
    Groups,
    /// Create a consumer group's subscription config; refused if it exists, unless
    /// --upsert (mqadmin updateSubGroup).
    GroupCreate(GroupCreateArgs),
    /// Change an existing group; unset options keep their values (mqadmin updateSubGroup).
    GroupUpdate(GroupUpdateArgs),
    /// Delete a group's subscription config, and with --remove-offset its committed
    /// offsets (mqadmin deleteSubGroup).
    GroupDelete(GroupDeleteArgs),
    /// Each queue's broker offset, consumer offset and lag for a group (mqadmin consumerProgress).
    ConsumerProgress(ConsumerProgressArgs),
    /// The clients online in a consumer group (mqadmin consumerConnection).
    ConsumerConnections(GroupArg),
    /// Messages of a topic by key (mqadmin queryMsgByKey).
    QueryKey(QueryKeyArgs),
    /// A message by its unique key, the id a producer's send returns (mqadmin queryMsgByUniqueKey).
    QueryUniq(QueryUniqArgs),
    /// A message by its offsetMsgId: store host and commit log offset (mqadmin queryMsgById).
    QueryId(QueryIdArgs),
    /// The message at a queue offset (mqadmin queryMsgByOffset).
    QueryOffset(QueryOffsetArgs),
    /// Move a group's offsets on a topic to a point in time (mqadmin resetOffsetByTime).
    ResetOffset(ResetOffsetArgs),
    /// The undecided transactional (half) messages of a producer group, oldest first, on
    /// every shard of the broker; with --cluster, on every master of it (ringmq's own).
    TxPending(TxPendingArgs),
}

/// `tx-pending`'s options.
#[derive(Args, Debug)]
pub struct TxPendingArgs {
    /// The producer group.
    #[arg(short = 'g', long)]
    pub group: String,
    /// Halves to list per shard, 1 to 1000.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
}

/// The controllers to ask: a broker's `controllerAddr`.
#[derive(Args, Debug)]
pub struct ControllerAddrs {
    /// The controllers, `host:port`, several separated by `;` (mqadmin's `-a`).
    #[arg(short = 'a', long = "controller", value_parser = parse_addr_list)]
    pub controller: String,
}

#[derive(Args, Debug)]
pub struct ControllerViewArgs {
    #[command(flatten)]
    pub controllers: ControllerAddrs,
    /// A broker group to show; repeat for several [default: every group the name
    /// server's cluster info lists].
    #[arg(long = "broker-name")]
    pub broker_names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ElectMasterArgs {
    #[command(flatten)]
    pub controllers: ControllerAddrs,
    /// The broker group (mqadmin's `-b`, which is `--broker` here).
    #[arg(long = "broker-name")]
    pub broker_name: String,
    /// The controller id of the broker to make master (1 and up, as `controller` shows).
    #[arg(short = 'i', long = "broker-id")]
    pub broker_id: i64,
}

#[derive(Args, Debug)]
pub struct TopicArg {
    #[arg(short = 't', long)]
    pub topic: String,
}

#[derive(Args, Debug)]
pub struct GroupArg {
    #[arg(short = 'g', long)]
    pub group: String,
}

/// The settings of `topic-create`; those not given take RocketMQ's defaults on a new
/// topic, and keep the topic's values under `--upsert`.
#[derive(Args, Debug)]
pub struct TopicCreateArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    /// Read queues [default: 8].
    #[arg(short = 'r', long)]
    pub read_queues: Option<i64>,
    /// Write queues [default: 8].
    #[arg(short = 'w', long)]
    pub write_queues: Option<i64>,
    /// Permission: 2 (write only), 4 (read only) or 6 (read and write) [default: 6].
    #[arg(short = 'p', long)]
    pub perm: Option<i64>,
    /// An ordered topic: `--order`, `--order true` or `--order false` [default: false].
    #[arg(short = 'o', long, num_args = 0..=1, default_missing_value = "true")]
    pub order: Option<bool>,
    /// Create the topic, or if it exists bring the settings given up to date (those not
    /// given keep their values); a rerun with the same settings changes nothing and says
    /// so. For provisioning scripts.
    #[arg(long)]
    pub upsert: bool,
}

#[derive(Args, Debug)]
pub struct TopicUpdateArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    #[arg(short = 'r', long)]
    pub read_queues: Option<i64>,
    #[arg(short = 'w', long)]
    pub write_queues: Option<i64>,
    /// 2 (write only), 4 (read only) or 6 (read and write).
    #[arg(short = 'p', long)]
    pub perm: Option<i64>,
    #[arg(short = 'o', long, num_args = 0..=1, default_missing_value = "true")]
    pub order: Option<bool>,
}

/// A consumer group's settings as `group-create` and `group-update` take them; each
/// unset one keeps its value (RocketMQ's default on a new group).
#[derive(Args, Debug, Default, Clone, PartialEq, Eq)]
pub struct GroupSettings {
    /// Retry queues (retryQueueNums), 1 to 64 [new group: 1].
    #[arg(short = 'q', long)]
    pub retry_queues: Option<i64>,
    /// Most redeliveries before a message goes to the group's DLQ (retryMaxTimes), 0 to
    /// 1000 [new group: 16].
    #[arg(short = 'r', long)]
    pub retry_max_times: Option<i64>,
    /// Whether the group may consume (consumeEnable) [new group: true].
    #[arg(short = 's', long, num_args = 0..=1, default_missing_value = "true")]
    pub consume_enable: Option<bool>,
    /// Whether the group may consume in broadcasting mode (consumeBroadcastEnable) [new
    /// group: true].
    #[arg(short = 'd', long, num_args = 0..=1, default_missing_value = "true")]
    pub broadcast_enable: Option<bool>,
    /// Orderly consumption (consumeMessageOrderly) [new group: false].
    #[arg(short = 'o', long, num_args = 0..=1, default_missing_value = "true")]
    pub orderly: Option<bool>,
}

#[derive(Args, Debug)]
pub struct GroupCreateArgs {
    #[arg(short = 'g', long)]
    pub group: String,
    #[command(flatten)]
    pub settings: GroupSettings,
    /// Create the group, or if it exists bring the settings given up to date (those not
    /// given keep their values); a rerun with the same settings changes nothing and says
    /// so. For provisioning scripts.
    #[arg(long)]
    pub upsert: bool,
}

#[derive(Args, Debug)]
pub struct GroupUpdateArgs {
    #[arg(short = 'g', long)]
    pub group: String,
    #[command(flatten)]
    pub settings: GroupSettings,
}

#[derive(Args, Debug)]
pub struct GroupDeleteArgs {
    #[arg(short = 'g', long)]
    pub group: String,
    /// Also remove the group's committed offsets (the header `cleanOffset`):
    /// `--remove-offset`, or `-r true` as mqadmin takes it [default: false].
    #[arg(short = 'r', long, num_args = 0..=1, default_missing_value = "true")]
    pub remove_offset: Option<bool>,
}

#[derive(Args, Debug)]
pub struct ConsumerProgressArgs {
    #[arg(short = 'g', long)]
    pub group: String,
    /// Only this topic.
    #[arg(short = 't', long)]
    pub topic: Option<String>,
}

#[derive(Args, Debug)]
pub struct QueryKeyArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    #[arg(short = 'k', long)]
    pub key: String,
    /// Earliest store time: epoch ms, RFC 3339 or `now` [default: the epoch].
    #[arg(long)]
    pub begin: Option<String>,
    /// Latest store time: epoch ms, RFC 3339 or `now` [default: no limit].
    #[arg(short = 'e', long)]
    pub end: Option<String>,
    /// Most messages asked for (the broker caps it at 64).
    #[arg(short = 'm', long, default_value_t = 64)]
    pub max: i32,
}

#[derive(Args, Debug)]
pub struct QueryUniqArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    /// The unique key (UNIQ_KEY): 32 or 56 hex digits.
    #[arg(short = 'i', long)]
    pub id: String,
}

#[derive(Args, Debug)]
pub struct QueryIdArgs {
    /// The offsetMsgId: 32 (IPv4) or 56 (IPv6) hex digits.
    #[arg(short = 'i', long)]
    pub id: String,
}

#[derive(Args, Debug)]
pub struct QueryOffsetArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    #[arg(short = 'i', long)]
    pub queue: i32,
    #[arg(short = 'o', long)]
    pub offset: i64,
}

#[derive(Args, Debug)]
pub struct ResetOffsetArgs {
    #[arg(short = 'g', long)]
    pub group: String,
    #[arg(short = 't', long)]
    pub topic: String,
    /// Epoch ms, RFC 3339 (`2026-12-02T10:00:00Z`) or `now`.
    #[arg(short = 's', long)]
    pub timestamp: String,
    /// Reset even to offsets past what the group has consumed.
    #[arg(short = 'f', long)]
    pub force: bool,
}

/// One or more name servers, `host:port;host:port` as mqadmin's `-n` and `NAMESRV_ADDR`
/// take them (spaces around each are ignored); each checked by [`parse_addr`]. Returns
/// the list joined by `;`.
pub fn parse_namesrv(text: &str) -> Result<String, AddrError> {
    let addrs: Vec<&str> = text
        .split(';')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    // An empty NAMESRV_ADDR (`NAMESRV_ADDR= ringmq admin ...`) counts as unset.
    if addrs.is_empty() {
        return Ok(DEFAULT_NAMESRV.to_owned());
    }
    for addr in &addrs {
        if let Err(why) = parse_addr(addr) {
            // clap names the flag, not where the value came from.
            let from_env = std::env::var("NAMESRV_ADDR").is_ok_and(|env| env == text);
            return Err(if from_env {
                AddrError::FromEnv(Box::new(why))
            } else {
                why
            });
        }
    }
    Ok(addrs.join(";"))
}

/// A `;`-separated list of `host:port` (at least one), each checked as [`parse_addr`].
pub fn parse_addr_list(text: &str) -> Result<String, AddrError> {
    let addrs = namesrv_list(text);
    if addrs.is_empty() {
        return Err(AddrError::NotHostPort {
            text: text.to_string(),
            why: "no address",
        });
    }
    for addr in &addrs {
        parse_addr(addr)?;
    }
    Ok(addrs.join(";"))
}

/// The addresses of a [`parse_namesrv`] list, in order.
pub fn namesrv_list(text: &str) -> Vec<String> {
    text.split(';')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `host:port`: a name or IPv4 address, or a bracketed IPv6 address (`[::1]:9876`), and
/// a port from 1 to 65535. Only the shape is checked here (a usage error, exit 2, before
/// any request); whether the name resolves is found when it is used.
pub fn parse_addr(text: &str) -> Result<String, AddrError> {
    let usage = |why: &'static str| AddrError::NotHostPort {
        text: text.to_string(),
        why,
    };
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(usage("no port"));
    };
    match port.parse::<u16>() {
        Ok(0) => return Err(usage("port 0")),
        Ok(_) => {}
        Err(_) => return Err(usage("the port is not a number from 1 to 65535")),
    }
    let bare = match host.strip_prefix('[') {
        Some(inner) => match inner.strip_suffix(']') {
            Some(inner) if inner.parse::<std::net::Ipv6Addr>().is_ok() => return Ok(text.into()),
            _ => return Err(usage("not an IPv6 address in brackets")),
        },
        None => host,
    };
    if bare.is_empty() {
        return Err(usage("no host"));
    }
    if !bare
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
    {
        return Err(usage("a host is a name or an address (IPv6 in brackets)"));
    }
    Ok(text.into())
}

/// `500ms`, `5s`, `2m`, or a bare number of seconds; positive.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| DurationError::NotANumber {
        text: text.to_string(),
    })?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => {
            return Err(DurationError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    if !(seconds > 0.0 && seconds <= 3600.0) {
        return Err(DurationError::OutOfRange {
            text: text.to_string(),
        });
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        admin: AdminArgs,
    }

    /// Every parse here runs with NAMESRV_ADDR as the test says (unset unless given), one
    /// at a time: the variable is process-wide.
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn parse_with_env(env: Option<&str>, args: &[&str]) -> Result<AdminArgs, clap::Error> {
        let _one_at_a_time = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match env {
            Some(value) => std::env::set_var("NAMESRV_ADDR", value),
            None => std::env::remove_var("NAMESRV_ADDR"),
        }
        let parsed = Cli::try_parse_from(std::iter::once("admin").chain(args.iter().copied()))
            .map(|c| c.admin);
        std::env::remove_var("NAMESRV_ADDR");
        parsed
    }

    fn parse(args: &[&str]) -> Result<AdminArgs, clap::Error> {
        parse_with_env(None, args)
    }

    #[test]
    fn controller_commands_take_a_list_of_controllers_and_mqadmins_letters() {
        let args = parse(&["controller", "-a", "10.0.0.1:9878; 10.0.0.2:9878"]).unwrap();
        let AdminCommand::Controller(view) = args.command else {
            unreachable!()
        };
        assert_eq!(view.controllers.controller, "10.0.0.1:9878;10.0.0.2:9878");
        assert!(view.broker_names.is_empty());
        let args = parse(&[
            "elect-master",
            "-a",
            "10.0.0.1:9878",
            "--broker-name",
            "broker-a",
            "-i",
            "2",
        ])
        .unwrap();
        let AdminCommand::ElectMaster(elect) = args.command else {
            unreachable!()
        };
        assert_eq!(
            (elect.broker_name.as_str(), elect.broker_id),
            ("broker-a", 2)
        );
        for bad in [";", "10.0.0.1", "10.0.0.1:9878;h:0"] {
            let refused = parse(&["controller", "-a", bad]).unwrap_err().to_string();
            assert!(refused.contains("host:port"), "{bad}: {refused}");
        }
        assert!(parse(&["controller"]).is_err(), "-a is required");
    }

    #[test]
    fn the_name_server_from_the_flag_else_the_environment_else_the_default() {
        assert_eq!(parse(&["topics"]).unwrap().namesrv, "127.0.0.1:9876");
        assert_eq!(
            parse(&["-n", "10.0.0.1:9876", "topics"]).unwrap().namesrv,
            "10.0.0.1:9876"
        );
        assert_eq!(
            parse(&["topics", "--namesrv", "10.0.0.1:9876"])
                .unwrap()
                .namesrv,
            "10.0.0.1:9876"
        );
        let env = Some("10.0.0.2:9876");
        assert_eq!(
            parse_with_env(env, &["topics"]).unwrap().namesrv,
            "10.0.0.2:9876"
        );
        // The flag wins over the environment.
        assert_eq!(
            parse_with_env(env, &["-n", "10.0.0.1:9876", "topics"])
                .unwrap()
                .namesrv,
            "10.0.0.1:9876"
        );
        // mqadmin's lists, `;`-separated; an empty variable counts as unset.
        assert_eq!(
            parse_with_env(Some(" 10.0.0.1:9876; 10.0.0.2:9876;"), &["topics"])
                .unwrap()
                .namesrv,
            "10.0.0.1:9876;10.0.0.2:9876"
        );
        assert_eq!(
            namesrv_list("10.0.0.1:9876;10.0.0.2:9876"),
            ["10.0.0.1:9876", "10.0.0.2:9876"]
        );
        assert_eq!(
            parse_with_env(Some(""), &["topics"]).unwrap().namesrv,
            "127.0.0.1:9876"
        );
        // A bad value from the environment is a usage error that says where it came from.
        let error = parse_with_env(Some("10.0.0.1"), &["topics"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("NAMESRV_ADDR"), "{error}");
        let error = parse(&["-n", "10.0.0.1:9876;nope", "topics"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn mqadmins_short_flags_for_topics() {
        let args = parse(&[
            "-b",
            "1.2.3.4:10911",
            "topic-create",
            "-t",
            "T",
            "-r",
            "4",
            "-w",
            "2",
            "-p",
            "4",
            "-o",
        ])
        .unwrap();
        assert_eq!(args.broker.as_deref(), Some("1.2.3.4:10911"));
        let AdminCommand::TopicCreate(create) = args.command else {
            panic!("{:?}", args.command)
        };
        assert_eq!(create.topic, "T");
        assert_eq!(
            (
                create.read_queues,
                create.write_queues,
                create.perm,
                create.order
            ),
            (Some(4), Some(2), Some(4), Some(true))
        );
        assert!(!create.upsert);
        // Unset stays unset: the defaults are the command's (a new topic's), so --upsert
        // changes only what is given.
        let AdminCommand::TopicCreate(create) = parse(&["topic-create", "-t", "T", "--upsert"])
            .unwrap()
            .command
        else {
            unreachable!()
        };
        assert_eq!(
            (
                create.read_queues,
                create.write_queues,
                create.perm,
                create.order
            ),
            (None, None, None, None)
        );
        assert!(create.upsert);
        // mqadmin writes booleans as values: `-o true`.
        let AdminCommand::TopicUpdate(update) = parse(&["topic-update", "-t", "T", "-o", "false"])
            .unwrap()
            .command
        else {
            unreachable!()
        };
        assert_eq!(update.order, Some(false));
    }

    #[test]
    fn mqadmins_short_flags_for_groups() {
        let args = parse(&[
            "-c",
            "DefaultCluster",
            "group-create",
            "-g",
            "G",
            "-q",
            "2",
            "-r",
            "3",
            "-s",
            "false",
            "-d",
            "false",
            "-o",
            "true",
            "--upsert",
        ])
        .unwrap();
        assert_eq!(args.cluster.as_deref(), Some("DefaultCluster"));
        let AdminCommand::GroupCreate(create) = args.command else {
            unreachable!()
        };
        assert_eq!(create.group, "G");
        assert_eq!(
            create.settings,
            GroupSettings {
                retry_queues: Some(2),
                retry_max_times: Some(3),
                consume_enable: Some(false),
                broadcast_enable: Some(false),
                orderly: Some(true),
            }
        );
        assert!(create.upsert);
        let AdminCommand::GroupUpdate(update) =
            parse(&["group-update", "-g", "G", "-s"]).unwrap().command
        else {
            unreachable!()
        };
        assert_eq!(
            update.settings,
            GroupSettings {
                consume_enable: Some(true),
                ..GroupSettings::default()
            }
        );
    }

    #[test]
    fn mqadmins_short_flags_for_group_delete_and_offsets() {
        for (args, remove) in [
            (&["group-delete", "-g", "G"][..], None),
            (&["group-delete", "-g", "G", "-r"], Some(true)),
            (&["group-delete", "-g", "G", "-r", "true"], Some(true)),
            (
                &["group-delete", "-g", "G", "--remove-offset", "false"],
                Some(false),
            ),
        ] {
            let AdminCommand::GroupDelete(delete) = parse(args).unwrap().command else {
                unreachable!()
            };
            assert_eq!(
                (delete.group.as_str(), delete.remove_offset),
                ("G", remove),
                "{args:?}"
            );
        }
        let AdminCommand::ResetOffset(reset) =
            parse(&["reset-offset", "-g", "G", "-t", "T", "-s", "now", "-f"])
                .unwrap()
                .command
        else {
            unreachable!()
        };
        assert_eq!(
            (
                reset.group.as_str(),
                reset.topic.as_str(),
                reset.timestamp.as_str(),
                reset.force
            ),
            ("G", "T", "now", true)
        );
        let AdminCommand::QueryOffset(query) =
            parse(&["query-offset", "-t", "T", "-i", "3", "-o", "7"])
                .unwrap()
                .command
        else {
            unreachable!()
        };
        assert_eq!((query.queue, query.offset), (3, 7));
        let AdminCommand::QueryKey(query) =
            parse(&["query-key", "-t", "T", "-k", "K", "-e", "now", "-m", "5"])
                .unwrap()
                .command
        else {
            unreachable!()
        };
        assert_eq!(
            (query.key.as_str(), query.end.as_deref(), query.max),
            ("K", Some("now"), 5)
        );
    }

    #[test]
    fn the_cluster_is_not_given_with_a_broker() {
        let error = parse(&["-c", "C", "-b", "1.2.3.4:10911", "cluster"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(parse(&["cluster", "-c", "C"]).unwrap().cluster.is_some());
    }

    #[test]
    fn numbers_that_are_not_numbers_are_usage_errors() {
        for args in [
            &["topic-create", "-t", "T", "-p", "rw"][..],
            &["group-create", "-g", "G", "-q", "many"],
            &["group-create", "-g", "G", "-s", "yes"],
            &["group-delete", "-g", "G", "-r", "maybe"],
        ] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        for bad in ["", "0", "-1s", "5h", "fast", "0ms", "2m5s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn addresses() {
        for good in [
            "127.0.0.1:9876",
            "localhost:10911",
            "broker-a.example.com:1",
            "[::1]:9876",
            "[fe80::1]:65535",
        ] {
            assert_eq!(parse_addr(good).as_deref(), Ok(good), "{good}");
        }
        for bad in [
            "",
            "127.0.0.1",
            "127.0.0.1:",
            "host:notaport",
            "host:0",
            "host:65536",
            "host:-1",
            ":9876",
            "::1:9876",
            "[::1]",
            "[nope]:9876",
            "a b:9876",
            "host:9876/x",
        ] {
            assert!(parse_addr(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn global_options_go_before_or_after_the_command() {
        let args = parse(&[
            "--json",
            "topic-status",
            "--topic",
            "T",
            "--timeout",
            "250ms",
        ])
        .unwrap();
        assert!(args.json);
        assert_eq!(args.timeout, Duration::from_millis(250));
        assert_eq!(args.namesrv, "127.0.0.1:9876");
        assert!(args.broker.is_none());
        assert!(
            matches!(args.command, AdminCommand::TopicStatus(TopicArg { ref topic }) if topic == "T")
        );
        let args = parse(&["cluster", "--broker", "1.2.3.4:10911"]).unwrap();
        assert_eq!(args.broker.as_deref(), Some("1.2.3.4:10911"));
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for args in [
            &["topic-status"][..],
            &[
                "query-offset",
                "--topic",
                "T",
                "--queue",
                "x",
                "--offset",
                "0",
            ],
            &["cluster", "--timeout", "soon"],
            &["cluster", "--broker", "127.0.0.1"],
            &["topics", "--namesrv", "host:notaport"],
            &["no-such-command"],
        ] {
            let error = parse(args).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}");
        }
    }
}
