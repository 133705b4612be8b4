//! `ringmq admin`'s command line: the global options and one subcommand per mqadmin
//! command. Argument checks that need no node (names, numbers, ids, timestamps) are in
//! [`super::commands`], done before any request.

use std::time::Duration;

use clap::{Args, Subcommand};

/// `ringmq admin`: mqadmin's everyday commands over the remoting protocol.
#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The name server, `host:port`.
    #[arg(long, global = true, default_value = "127.0.0.1:9876", value_parser = parse_addr)]
    pub namesrv: String,
    /// The broker, `host:port` [default: the first master the name server's cluster info
    /// lists, else 127.0.0.1:10911].
    #[arg(long, global = true, value_parser = parse_addr)]
    pub broker: Option<String>,
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
    /// Every topic (mqadmin topicList).
    Topics,
    /// Create a topic; refused if it exists (mqadmin updateTopic).
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
}

#[derive(Args, Debug)]
pub struct TopicArg {
    #[arg(long)]
    pub topic: String,
}

#[derive(Args, Debug)]
pub struct GroupArg {
    #[arg(long)]
    pub group: String,
}

#[derive(Args, Debug)]
pub struct TopicCreateArgs {
    #[arg(long)]
    pub topic: String,
    /// Read queues.
    #[arg(long, default_value_t = 8)]
    pub read_queues: i64,
    /// Write queues.
    #[arg(long, default_value_t = 8)]
    pub write_queues: i64,
    /// Permission bits: 2 write, 4 read, 6 both.
    #[arg(long, default_value_t = 6)]
    pub perm: i64,
    /// An ordered topic.
    #[arg(long)]
    pub order: bool,
}

#[derive(Args, Debug)]
pub struct TopicUpdateArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long)]
    pub read_queues: Option<i64>,
    #[arg(long)]
    pub write_queues: Option<i64>,
    #[arg(long)]
    pub perm: Option<i64>,
    #[arg(long, action = clap::ArgAction::Set)]
    pub order: Option<bool>,
}

#[derive(Args, Debug)]
pub struct ConsumerProgressArgs {
    #[arg(long)]
    pub group: String,
    /// Only this topic.
    #[arg(long)]
    pub topic: Option<String>,
}

#[derive(Args, Debug)]
pub struct QueryKeyArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long)]
    pub key: String,
    /// Earliest store time: epoch ms, RFC 3339 or `now` [default: the epoch].
    #[arg(long)]
    pub begin: Option<String>,
    /// Latest store time: epoch ms, RFC 3339 or `now` [default: no limit].
    #[arg(long)]
    pub end: Option<String>,
    /// Most messages asked for (the broker caps it at 64).
    #[arg(long, default_value_t = 64)]
    pub max: i32,
}

#[derive(Args, Debug)]
pub struct QueryUniqArgs {
    #[arg(long)]
    pub topic: String,
    /// The unique key (UNIQ_KEY): 32 or 56 hex digits.
    #[arg(long)]
    pub id: String,
}

#[derive(Args, Debug)]
pub struct QueryIdArgs {
    /// The offsetMsgId: 32 (IPv4) or 56 (IPv6) hex digits.
    #[arg(long)]
    pub id: String,
}

#[derive(Args, Debug)]
pub struct QueryOffsetArgs {
    #[arg(long)]
    pub topic: String,
    #[arg(long)]
    pub queue: i32,
    #[arg(long)]
    pub offset: i64,
}

#[derive(Args, Debug)]
pub struct ResetOffsetArgs {
    #[arg(long)]
    pub group: String,
    #[arg(long)]
    pub topic: String,
    /// Epoch ms, RFC 3339 (`2026-12-02T10:00:00Z`) or `now`.
    #[arg(long)]
    pub timestamp: String,
    /// Reset even to offsets past what the group has consumed.
    #[arg(long)]
    pub force: bool,
}

/// `host:port`: a name or IPv4 address, or a bracketed IPv6 address (`[::1]:9876`), and
/// a port from 1 to 65535. Only the shape is checked here (a usage error, exit 2, before
/// any request); whether the name resolves is found when it is used.
pub fn parse_addr(text: &str) -> Result<String, String> {
    let usage = |why: &str| format!("{text:?} is not host:port: {why}");
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
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 5s, 1m)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s or m)")),
    };
    if !(seconds > 0.0 && seconds <= 3600.0) {
        return Err(format!("{text:?}: a timeout between 1ms and 1h"));
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

    fn parse(args: &[&str]) -> Result<AdminArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("admin").chain(args.iter().copied())).map(|c| c.admin)
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
