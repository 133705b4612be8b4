//! The post-kill model check's reading side: after the last restart of a kill sweep, pull
//! what the node holds and wait, with a bound, until every acknowledged message is there.
//! The checks of each copy (its queue, its due time, duplicates allowed) stay with the test
//! that knows the model.

use std::collections::HashMap;
use std::time::Duration;

use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, queue_request};
use ringmq::store::record::RecordView;

use super::raw::Raw;
use super::{pull_records, wait_for};

/// The end offset of `topic` queue `queue` (GET_MAX_OFFSET).
pub fn max_offset(raw: &mut Raw, topic: &str, queue: i32) -> u64 {
    let answer = raw.call(queue_request(request::GET_MAX_OFFSET, topic, queue));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.ext_fields["offset"].parse().unwrap()
}

/// Pulls `topic` queue `queue` from `*next` to its current end, adding what `keep` takes
/// of each record to `into` by body.
pub fn pull_new<T>(
    raw: &mut Raw,
    topic: &str,
    queue: i32,
    next: &mut u64,
    into: &mut HashMap<String, Vec<T>>,
    keep: &impl Fn(&RecordView<'_>) -> T,
) {
    let max = max_offset(raw, topic, queue);
    while *next < max {
        let answer = raw.call(pull_request(topic, queue, *next, 32, None, None));
        assert_eq!(
            answer.code,
            response::SUCCESS,
            "{topic}/{queue}: {answer:?}"
        );
        let records = pull_records(&answer.body);
        assert!(!records.is_empty(), "{topic}/{queue} at {next}: empty pull");
        for record in &records {
            into.entry(String::from_utf8(record.body.to_vec()).unwrap())
                .or_default()
                .push(keep(record));
        }
        *next += records.len() as u64;
    }
}

/// Pulls `topic`'s queues `0..queues` until every body in `acked` has been delivered, for
/// at most `patience` (`what` names the wait in a failure); every copy delivered, by body.
pub fn wait_until_delivered<T>(
    raw: &mut Raw,
    topic: &str,
    queues: i32,
    acked: &[&String],
    patience: Duration,
    what: &str,
    keep: impl Fn(&RecordView<'_>) -> T,
) -> HashMap<String, Vec<T>> {
    let mut delivered: HashMap<String, Vec<T>> = HashMap::new();
    let mut next = vec![0u64; queues as usize];
    wait_for(patience, what, || {
        for queue in 0..queues {
            pull_new(
                raw,
                topic,
                queue,
                &mut next[queue as usize],
                &mut delivered,
                &keep,
            );
        }
        acked.iter().all(|body| delivered.contains_key(*body))
    });
    delivered
}
