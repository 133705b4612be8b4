//! The episode's clients, each a thread of its own recording into the [`Recorder`]:
//! producers that send uniquely numbered messages to both groups, finding each group's
//! master from the name server's route as a stock client does (and asking again after any
//! send that is not SEND_OK); a consumer that pulls every queue of every group from its
//! master (or, while the route names none, from a slave) and records what it read at
//! which offset; and an observer that asks the controllers for each group's master and
//! epoch.
//!
//! A producer never sends a body twice: a send whose outcome is unknown is not retried,
//! so a body held twice is the brokers' doing.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

use super::history::{MasterSeen, Outcome, Read, Recorder, Send};
use crate::common::{process_controllers, pull_records, run_local};

pub const TOPIC: &str = "campaign";
pub const QUEUES: i32 = 4;
/// How often the observer asks the controllers, and the consumer pulls.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(100);
const PULL_EVERY: Duration = Duration::from_millis(100);
/// A producer's pause between sends: the load stays well under what two cores serve with
/// eight processes, so a slow answer is a fault's, not the machine's.
const SEND_PAUSE: Duration = Duration::from_millis(5);
/// A client's bound on one request: a stock producer's `sendMsgTimeout`. A send into a
/// silent master waits this long before its producer asks the route again, so the
/// first acknowledgement by a new master comes no sooner after a SIGSTOP.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const PULL_BATCH: i32 = 32;

/// The running clients; [`Clients::stop`] ends them.
pub struct Clients {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// What the clients need to know of the cluster.
#[derive(Clone)]
pub struct Targets {
    pub namesrv: SocketAddr,
    pub controllers: Vec<SocketAddr>,
    pub groups: Vec<String>,
    /// Marks every body, so one episode's messages are told from another's.
    pub episode: u64,
}

impl Clients {
    pub fn start(targets: &Targets, producers: usize, recorder: &Arc<Recorder>) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for p in 0..producers {
            let (targets, recorder, stop) = (targets.clone(), recorder.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                run_local(false, produce(p, &targets, &recorder, &stop));
            }));
        }
        let (consumer, recorder_c, stop_c) = (targets.clone(), recorder.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            run_local(false, consume(&consumer, &recorder_c, &stop_c));
        }));
        let (observer, recorder_o, stop_o) = (targets.clone(), recorder.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            run_local(false, observe(&observer, &recorder_o, &stop_o));
        }));
        Clients { stop, threads }
    }

    /// Stops every client after its request in flight.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a client thread panicked");
        }
    }
}

/// One request on a fresh connection, bounded.
async fn call_once(addr: SocketAddr, command: RemotingCommand) -> Option<RemotingCommand> {
    let connected = tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(addr)).await;
    let client = connected.ok()?.ok()?;
    client.set_timeout(REQUEST_TIMEOUT);
    client.request(command).await.ok()
}

/// Each group's brokers as the name server's route names them: id to address.
pub async fn route(namesrv: SocketAddr) -> HashMap<String, BTreeMap<i64, SocketAddr>> {
    let command = RemotingCommand::request(
        request::GET_ROUTEINFO_BY_TOPIC,
        ExtFields::from([("topic", TOPIC)]),
    );
    let mut groups = HashMap::new();
    let Some(answer) = call_once(namesrv, command).await else {
        return groups;
    };
    if answer.code != response::SUCCESS {
        return groups;
    }
    let Ok(route) = serde_json::from_slice::<serde_json::Value>(&answer.body) else {
        return groups;
    };
    for data in route["brokerDatas"].as_array().into_iter().flatten() {
        let Some(name) = data["brokerName"].as_str() else {
            continue;
        };
        let addrs = data["brokerAddrs"].as_object().into_iter().flatten();
        let brokers = addrs
            .filter_map(|(id, addr)| Some((id.parse().ok()?, addr.as_str()?.parse().ok()?)))
            .collect();
        groups.insert(name.to_string(), brokers);
    }
    groups
}

async fn produce(p: usize, targets: &Targets, recorder: &Recorder, stop: &AtomicBool) {
    let mut masters: HashMap<String, BTreeMap<i64, SocketAddr>> = HashMap::new();
    let mut clients: HashMap<SocketAddr, Client> = HashMap::new();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let group = &targets.groups[(n + p) % targets.groups.len()];
        let queue = ((n / targets.groups.len()) % QUEUES as usize) as i32;
        let Some(&broker) = masters.get(group).and_then(|brokers| brokers.get(&0)) else {
            masters = route(targets.namesrv).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let client = match clients.get(&broker).filter(|c| !c.is_closed()) {
            Some(client) => client.clone(),
            None => match tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(broker)).await {
                Ok(Ok(client)) => {
                    client.set_timeout(REQUEST_TIMEOUT);
                    clients.insert(broker, client.clone());
                    client
                }
                _ => {
                    masters = route(targets.namesrv).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let body = format!("[e{}-p{p}-m{n}]", targets.episode);
        let started = recorder.now();
        let answer = client
            .send_message(TOPIC, queue, body.as_bytes(), None, None)
            .await
            .map(|answer| {
                let offset = answer
                    .ext_fields
                    .get("queueOffset")
                    .and_then(|o| o.parse().ok());
                (answer.code, offset)
            })
            .map_err(|error| error.to_string());
        let outcome = Outcome::of(answer);
        let acked = matches!(outcome, Outcome::Acked(_));
        recorder.send(Send {
            group: group.clone(),
            broker,
            queue,
            body,
            started,
            ended: recorder.now(),
            outcome,
        });
        n += 1;
        if !acked {
            clients.remove(&broker);
            masters = route(targets.namesrv).await;
        }
        tokio::time::sleep(SEND_PAUSE).await;
    }
}

async fn consume(targets: &Targets, recorder: &Recorder, stop: &AtomicBool) {
    let mut next: HashMap<(String, i32), u64> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let brokers = route(targets.namesrv).await;
        for group in &targets.groups {
            // The master, else the slave with the lowest id.
            let Some(&broker) = brokers.get(group).and_then(|b| b.values().next()) else {
                continue;
            };
            let Ok(Ok(client)) =
                tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(broker)).await
            else {
                continue;
            };
            client.set_timeout(REQUEST_TIMEOUT);
            for queue in 0..QUEUES {
                let at = next.entry((group.clone(), queue)).or_insert(0);
                let Ok(answer) = client.pull(TOPIC, queue, *at, PULL_BATCH, None).await else {
                    break;
                };
                if answer.code != response::SUCCESS {
                    continue;
                }
                for record in pull_records(&answer.body) {
                    let offset = record.queue_offset as u64;
                    recorder.read(Read {
                        group: group.clone(),
                        broker,
                        queue,
                        offset,
                        body: String::from_utf8_lossy(record.body).into_owned(),
                        at: recorder.now(),
                    });
                    *at = (*at).max(offset + 1);
                }
            }
        }
        tokio::time::sleep(PULL_EVERY).await;
    }
}

/// A group's master and epoch from the controllers, the first that answers.
pub async fn master_of(controllers: &[SocketAddr], group: &str) -> Option<(SocketAddr, i32)> {
    for &controller in controllers {
        let fields = [("brokerName", group)];
        let code = request::CONTROLLER_GET_REPLICA_INFO;
        let Some(answer) = process_controllers::call(controller, code, &fields).await else {
            continue;
        };
        if answer.code != response::SUCCESS {
            continue;
        }
        let master = answer.ext_fields.get("masterAddress")?.parse().ok()?;
        let epoch = answer.ext_fields.get("masterEpoch")?.parse().ok()?;
        return Some((master, epoch));
    }
    None
}

async fn observe(targets: &Targets, recorder: &Recorder, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        for group in &targets.groups {
            if let Some((master, epoch)) = master_of(&targets.controllers, group).await {
                recorder.master(MasterSeen {
                    group: group.clone(),
                    master,
                    epoch,
                    at: recorder.now(),
                });
            }
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}
