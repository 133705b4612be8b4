//! `ringmq namesrv -c namesrv.conf` as real processes: two side by side on free ports
//! (each opens only its own), a broker registered by hand with REGISTER_BROKER frames from
//! the in-project client, routes read back from each; SIGTERM stops one cleanly; a
//! namesrv.conf with an unknown key is refused naming it.

use crate::common::run_local;

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::register_broker::{
    encode_register_broker, RegisterBrokerBody, RegisterBrokerHeader, RegisteredTopic,
};
use ringmq::remoting::{ExtFields, RemotingCommand};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const LISTENING: &str = "ringmq: name server ";

/// A `ringmq namesrv` process; killed when dropped if still running.
struct Namesrv {
    child: Child,
    addr: SocketAddr,
    /// stderr before the start line (the warnings of loading the config).
    before: String,
    /// stderr after the start line, read to its end once the process exits.
    rest: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Namesrv {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn namesrv_command(conf: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["namesrv", "-c"])
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

impl Namesrv {
    /// Starts one with `conf_text` (plus a free loopback port) and waits for its start line.
    fn start(dir: &Path, name: &str, conf_text: &str) -> Namesrv {
        let conf = dir.join(format!("{name}.conf"));
        std::fs::write(
            &conf,
            format!("listenPort=0\nbindAddress=127.0.0.1\n{conf_text}"),
        )
        .unwrap();
        let mut child = namesrv_command(&conf)
            .spawn()
            .expect("spawn ringmq namesrv");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
        let mut seen = String::new();
        let addr = loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).expect("read stderr");
            assert!(read > 0, "{name} exited before listening:\n{seen}");
            if let Some(rest) = line.trim().strip_prefix(LISTENING) {
                let bound: SocketAddr = rest
                    .rsplit(' ')
                    .next()
                    .and_then(|addr| addr.parse().ok())
                    .unwrap_or_else(|| panic!("no address in {line:?}"));
                break SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bound.port());
            }
            seen.push_str(&line);
        };
        let rest = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stderr.read_to_string(&mut rest);
            rest
        });
        Namesrv {
            child,
            addr,
            before: seen,
            rest: Some(rest),
        }
    }
}

fn register_request() -> RemotingCommand {
    let mut body = RegisterBrokerBody::default();
    body.topics
        .insert("TopicTest".into(), RegisteredTopic::new("TopicTest", 4));
    body.data_version.counter = 1;
    let header = RegisterBrokerHeader {
        broker_name: "broker-a".into(),
        broker_addr: "127.0.0.1:10911".into(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: "127.0.0.1:10912".into(),
        broker_id: 0,
        heartbeat_timeout_millis: None,
        enable_acting_master: false,
    };
    encode_register_broker(&header, &body)
}

async fn route(client: &Client, topic: &str) -> RemotingCommand {
    let fields = ExtFields::from([("topic", topic)]);
    client
        .request(RemotingCommand::request(
            request::GET_ROUTEINFO_BY_TOPIC,
            fields,
        ))
        .await
        .expect("route answered")
}

#[test]
fn two_name_servers_run_side_by_side_and_each_routes_what_registered_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = Namesrv::start(dir.path(), "first", "rocketmqHome=/opt/rocketmq\n");
    let second = Namesrv::start(dir.path(), "second", "");
    assert_ne!(first.addr.port(), second.addr.port());
    run_local(false, async {
        let broker = Client::connect(first.addr).await.unwrap();
        let answer = broker.request(register_request()).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
        // The broker's connection stays open: a closed one would unregister it.
        let reader = Client::connect(first.addr).await.unwrap();
        let found = route(&reader, "TopicTest").await;
        assert_eq!(found.code, response::SUCCESS);
        let data: Value = serde_json::from_slice(&found.body).unwrap();
        assert_eq!(
            data["brokerDatas"][0]["brokerAddrs"]["0"],
            "127.0.0.1:10911"
        );
        assert_eq!(data["queueDatas"][0]["writeQueueNums"], 4);
        // The other name server knows nothing of it until the broker registers there too.
        let other = Client::connect(second.addr).await.unwrap();
        assert_eq!(
            route(&other, "TopicTest").await.code,
            response::TOPIC_NOT_EXIST
        );
        other.request(register_request()).await.unwrap();
        assert_eq!(route(&other, "TopicTest").await.code, response::SUCCESS);
    });
}

#[test]
fn sigterm_stops_a_name_server_cleanly_and_it_warns_about_ignored_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut namesrv = Namesrv::start(dir.path(), "stopping", "serverWorkerThreads=8\n");
    assert!(
        namesrv
            .before
            .contains("`serverWorkerThreads` is a RocketMQ setting ringmq does not use"),
        "{}",
        namesrv.before
    );
    #[allow(unsafe_code)]
    // SAFETY: kill(2) takes plain integers; the pid is this test's unreaped child.
    let sent = unsafe { libc::kill(namesrv.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = namesrv.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status:?}");
    let rest = namesrv.rest.take().unwrap().join().unwrap();
    assert!(rest.contains("ringmq: stopped cleanly"), "{rest}");
}

#[test]
fn a_namesrv_conf_with_an_unknown_key_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bad.conf");
    std::fs::write(&conf, "listenPort=0\nscanNotActiveBrokerIntervall=5000\n").unwrap();
    let output = namesrv_command(&conf).output().expect("run ringmq namesrv");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "unknown key `scanNotActiveBrokerIntervall` (did you mean `scanNotActiveBrokerInterval`?)"
        ),
        "{stderr}"
    );
}
