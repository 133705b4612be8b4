//! The timer limits as `ringmq serve` applies them from its command line:
//! `timerMaxPending` refuses a timer send once that many wait (SYSTEM_ERROR, as RocketMQ's
//! WHEEL_TIMER_FLOW_CONTROL) and takes them again once some are delivered;
//! `timerMemoryEntries` outside its bounds stops the start, naming the key.

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use common::serve::{refused, Serve};
use common::wait_for;
use ringmq::broker::timer::TIMER_DELAY_MS;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{queue_request, send_request_v1};
use ringmq::remoting::RemotingCommand;
use ringmq::store::properties;

const PATIENCE: Duration = Duration::from_secs(20);

fn send(topic: &str, body: &str, delay_ms: Option<u32>) -> RemotingCommand {
    let mut send = send_request_v1(topic, 0, body.as_bytes(), None, None);
    if let Some(delay) = delay_ms {
        let mut props =
            properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
        properties::push_pair(&mut props, TIMER_DELAY_MS, &delay.to_string());
        send.put_ext("properties", props);
    }
    send
}

fn max_offset(raw: &mut Raw, topic: &str) -> u64 {
    let answer = raw.call(queue_request(request::GET_MAX_OFFSET, topic, 0));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.ext_fields["offset"].parse().unwrap()
}

#[test]
fn timer_sends_past_timer_max_pending_are_refused_until_some_are_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(
        dir.path(),
        &["--shards", "1", "--set", "timerMaxPending=3"],
        "timerMaxPending=3",
    );
    let mut raw = Raw::connect(serve.addr);
    for index in 0..3 {
        let answer = raw.call(send("Held", &format!("t{index}"), Some(1500)));
        assert_eq!(answer.code, response::SUCCESS, "timer {index}: {answer:?}");
    }
    let answer = raw.call(send("Held", "t3", Some(1500)));
    assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
    let remark = answer.remark.clone().unwrap_or_default();
    assert!(
        remark.contains("flow control") && remark.contains("timerMaxPending allows 3"),
        "{remark}"
    );
    // Only timer sends are held back.
    let answer = raw.call(send("Plain", "p0", None));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(
        max_offset(&mut raw, "Held"),
        0,
        "none due yet, none refused stored"
    );

    // Once the three are delivered, a timer send is taken again.
    wait_for(PATIENCE, "the three timers delivered", || {
        max_offset(&mut raw, "Held") == 3
    });
    wait_for(PATIENCE, "a timer send taken again", || {
        let answer = raw.call(send("Held", "t4", Some(200)));
        match answer.code {
            response::SUCCESS => true,
            response::SYSTEM_ERROR => false,
            _ => panic!("{answer:?}"),
        }
    });
    wait_for(PATIENCE, "the fourth timer delivered", || {
        max_offset(&mut raw, "Held") == 4
    });
    serve.kill();
}

#[test]
fn timer_memory_entries_outside_its_bounds_stops_the_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (value, says) in [
        ("15", "between 16 and 16777216"),
        ("0", "between 16 and 16777216"),
        ("16777217", "at most 16777216"),
    ] {
        let setting = format!("timerMemoryEntries={value}");
        let stderr = refused(dir.path(), &["--set", &setting], PATIENCE);
        assert!(
            stderr.contains("timerMemoryEntries") && stderr.contains(says),
            "{setting}: {stderr}"
        );
    }
    let stderr = refused(dir.path(), &["--set", "timerMaxPending=0"], PATIENCE);
    assert!(
        stderr.contains("timerMaxPending") && stderr.contains("between 1 and"),
        "timerMaxPending=0: {stderr}"
    );
    // Its bounds themselves are taken.
    for value in ["16", "16777216"] {
        let serve = Serve::start(
            dir.path(),
            &["--set", &format!("timerMemoryEntries={value}")],
            value,
        );
        serve.kill();
    }
}
