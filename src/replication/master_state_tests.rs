use super::*;
use crate::replication::epochs::EpochEntry;

const SEGMENT: u64 = 1000;

fn identity() -> MasterIdentity {
    MasterIdentity {
        cluster: "DefaultCluster".to_string(),
        broker: "broker-a".to_string(),
        shard_index: 1,
        shard_count: 2,
    }
}

fn settings() -> MasterSettings {
    MasterSettings {
        batch_bytes: 300,
        segment_bytes: SEGMENT,
        heartbeat_interval_ms: 5000,
    }
}

fn handshake() -> SlaveHandshake {
    SlaveHandshake {
        sync_from_last_file: false,
        async_learner: false,
        slave_broker_id: 1,
        shard_index: 1,
        shard_count: 2,
        cluster: "DefaultCluster".to_string(),
        broker: "broker-a".to_string(),
    }
}

fn history(entries: &[(u32, u64)]) -> EpochCache {
    let entries: Vec<EpochEntry> = entries
        .iter()
        .map(|&(epoch, start)| EpochEntry { epoch, start })
        .collect();
    EpochCache::from_entries(&entries).unwrap()
}

fn log(epochs: &EpochCache, min: u64, max: u64) -> MasterLog<'_> {
    MasterLog {
        min_offset: min,
        max_offset: max,
        confirm_offset: 0,
        epochs,
    }
}

/// A stream past its handshake, started by the slave's first report.
fn started(
    epochs: &EpochCache,
    min: u64,
    max: u64,
    first_report: u64,
    sync_from_last_file: bool,
) -> (MasterStream, MasterEvent) {
    let mut stream = MasterStream::new(identity(), settings());
    let log = log(epochs, min, max);
    let mut greeting = handshake();
    greeting.sync_from_last_file = sync_from_last_file;
    let reply = stream
        .on_message(FromSlave::Handshake(greeting), &log)
        .unwrap();
    assert_eq!(
        reply,
        MasterEvent::Reply(HandshakeReply {
            master_max: max,
            epochs: epochs.clone()
        })
    );
    let event = stream
        .on_message(FromSlave::Report(first_report), &log)
        .unwrap();
    (stream, event)
}

fn refused(mutate: impl Fn(&mut SlaveHandshake)) -> MasterError {
    let epochs = history(&[(1, 0)]);
    let mut stream = MasterStream::new(identity(), settings());
    let mut greeting = handshake();
    mutate(&mut greeting);
    stream
        .on_message(FromSlave::Handshake(greeting), &log(&epochs, 0, 0))
        .unwrap_err()
}

/// A change to a good handshake.
type Mutation = fn(&mut SlaveHandshake);

#[test]
fn handshake_mismatches_are_refused_naming_both_values() {
    let cases: [(Mutation, &str, RefusalReason); 5] = [
        (
            |h| h.cluster = "OtherCluster".to_string(),
            "cluster name mismatch: master is in 'DefaultCluster', slave is in 'OtherCluster'",
            RefusalReason::ClusterName,
        ),
        (
            |h| h.broker = "broker-b".to_string(),
            "broker name mismatch: master is 'broker-a', slave is 'broker-b'",
            RefusalReason::BrokerName,
        ),
        (
            |h| h.shard_count = 4,
            "shard count mismatch: master has 2 shards, slave has 4",
            RefusalReason::ShardCount,
        ),
        (
            |h| h.shard_index = 0,
            "stream for shard 0 reached shard 1",
            RefusalReason::ShardCount,
        ),
        (
            |h| h.slave_broker_id = 0,
            "slave claims broker id 0, which is the master's",
            RefusalReason::BrokerIdZero,
        ),
    ];
    for (mutate, text, reason) in cases {
        let error = refused(mutate);
        assert_eq!(error.to_string(), text);
        let refusal = error.refusal().unwrap();
        assert_eq!((refusal.reason, refusal.text.as_str()), (reason, text));
    }
}

#[test]
fn a_master_without_epochs_refuses_and_messages_out_of_turn_are_refused() {
    let empty = EpochCache::new();
    let mut stream = MasterStream::new(identity(), settings());
    let facts = log(&empty, 0, 0);
    assert_eq!(
        stream.on_message(FromSlave::Report(0), &facts),
        Err(MasterError::Unexpected {
            what: "report",
            phase: "waiting for the handshake"
        })
    );
    let error = stream.on_message(FromSlave::Handshake(handshake()), &facts);
    assert_eq!(error, Err(MasterError::NoEpochs));
    let epochs = history(&[(1, 0)]);
    let (mut stream, _) = started(&epochs, 0, 10, 0, false);
    let again = stream.on_message(FromSlave::Handshake(handshake()), &log(&epochs, 0, 10));
    assert_eq!(
        again.unwrap_err().to_string(),
        "unexpected handshake while streaming"
    );
}

#[test]
fn the_first_report_chooses_the_start() {
    let epochs = history(&[(1, 0)]);
    let at = |event: MasterEvent| match event {
        MasterEvent::Started {
            from,
            below_retention,
        } => (from, below_retention),
        other => panic!("{other:?}"),
    };
    // Empty slave: the whole retained history, or the last segment when asked.
    assert_eq!(at(started(&epochs, 2000, 3500, 0, false).1), (2000, None));
    assert_eq!(at(started(&epochs, 2000, 3500, 0, true).1), (3000, None));
    assert_eq!(at(started(&epochs, 3200, 3500, 0, true).1), (3200, None));
    // A slave that has data resumes where it is.
    assert_eq!(
        at(started(&epochs, 2000, 3500, 2500, false).1),
        (2500, None)
    );
    assert_eq!(
        at(started(&epochs, 2000, 3500, 3500, false).1),
        (3500, None)
    );
    // Below retention: restart from the min, and say so.
    let below = Some(BelowRetention {
        reported: 1500,
        master_min: 2000,
    });
    assert_eq!(
        at(started(&epochs, 2000, 3500, 1500, false).1),
        (2000, below)
    );
}

#[test]
fn a_report_beyond_the_master_is_refused_naming_both() {
    let epochs = history(&[(1, 0)]);
    let mut stream = MasterStream::new(identity(), settings());
    let facts = log(&epochs, 0, 3500);
    stream
        .on_message(FromSlave::Handshake(handshake()), &facts)
        .unwrap();
    let error = stream
        .on_message(FromSlave::Report(3501), &facts)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "slave reports offset 3501, master has only 3500: a forged offset, or a slave ahead \
         of its master"
    );
    assert_eq!(error.refusal().unwrap().reason, RefusalReason::ForgedOffset);
}

fn frames(stream: &mut MasterStream, facts: &MasterLog, now_ms: u64) -> Vec<(u64, u32, u32)> {
    let mut out = Vec::new();
    while let Some(header) = stream.next_frame(facts, now_ms).unwrap() {
        out.push((header.offset, header.body_len, header.epoch));
        if header.body_len == 0 {
            break;
        }
    }
    out
}

#[test]
fn frames_stop_at_batch_segment_and_epoch_boundaries() {
    let epochs = history(&[(1, 0), (2, 1900), (3, 2100)]);
    let (mut stream, _) = started(&epochs, 0, 2250, 1500, false);
    let facts = log(&epochs, 0, 2250);
    assert_eq!(
        frames(&mut stream, &facts, 0),
        [
            (1500, 300, 1), // batch
            (1800, 100, 1), // epoch 1 ends at 1900
            (1900, 100, 2), // segment ends at 2000
            (2000, 100, 2), // epoch 2 ends at 2100
            (2100, 150, 3), // written end
        ]
    );
    assert_eq!(stream.next_offset(), Some(2250));
    // Caught up and not idle: nothing to send.
    assert_eq!(stream.next_frame(&facts, 4999).unwrap(), None);
}

#[test]
fn heartbeats_go_out_first_and_after_each_idle_interval() {
    let epochs = history(&[(1, 0), (4, 700)]);
    let (mut stream, _) = started(&epochs, 0, 900, 900, false);
    let facts = MasterLog {
        confirm_offset: 850,
        ..log(&epochs, 0, 900)
    };
    let first = stream.next_frame(&facts, 100).unwrap().unwrap();
    let heartbeat = FrameHeader {
        offset: 900,
        epoch: 4,
        epoch_start: 700,
        confirm_offset: 850,
        body_len: 0,
    };
    assert_eq!(first, heartbeat);
    assert_eq!(stream.next_frame(&facts, 5099).unwrap(), None);
    assert_eq!(stream.next_frame(&facts, 5100).unwrap(), Some(heartbeat));
}

#[test]
fn acks_move_forward_only_and_never_past_what_was_sent() {
    let epochs = history(&[(1, 0)]);
    let (mut stream, _) = started(&epochs, 0, 800, 100, false);
    let facts = log(&epochs, 0, 800);
    assert_eq!(frames(&mut stream, &facts, 0).len(), 3);
    assert_eq!(stream.ack_offset(), Some(100));
    let ack =
        |stream: &mut MasterStream, offset| stream.on_message(FromSlave::Report(offset), &facts);
    assert_eq!(
        ack(&mut stream, 400),
        Ok(MasterEvent::Acked { offset: 400 })
    );
    assert_eq!(
        ack(&mut stream, 400),
        Ok(MasterEvent::Acked { offset: 400 })
    );
    assert_eq!(
        ack(&mut stream, 801).unwrap_err().to_string(),
        "slave acks 801, but only bytes up to 800 were sent"
    );
    let (mut stream, _) = started(&epochs, 0, 800, 100, false);
    frames(&mut stream, &facts, 0);
    ack(&mut stream, 700).unwrap();
    let backwards = ack(&mut stream, 699).unwrap_err();
    assert_eq!(
        backwards.to_string(),
        "slave's ack went backwards: 699 after 700"
    );
    assert_eq!(
        backwards.refusal().unwrap().reason,
        RefusalReason::AckBackwards
    );
    assert_eq!(stream.ack_offset(), Some(700));
}

#[test]
fn retention_passing_a_slow_stream_ends_it() {
    let epochs = history(&[(1, 0)]);
    let (mut stream, _) = started(&epochs, 0, 800, 100, false);
    let error = stream.next_frame(&log(&epochs, 1000, 1800), 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "slave fell below retention while streaming: next byte 100, master min 1000"
    );
}

#[test]
fn a_history_that_does_not_cover_the_start_is_an_error_not_a_guess() {
    let epochs = history(&[(1, 500)]);
    let (mut stream, _) = started(&epochs, 0, 800, 0, false);
    let error = stream.next_frame(&log(&epochs, 0, 800), 0).unwrap_err();
    assert_eq!(
        error,
        MasterError::NoEpochCovers {
            offset: 0,
            first_start: 500
        }
    );
}

#[test]
fn a_slave_refusal_ends_the_stream_without_an_answer() {
    let epochs = history(&[(1, 0)]);
    let (mut stream, _) = started(&epochs, 0, 800, 100, false);
    let refusal = Refusal {
        reason: RefusalReason::NoConsistentPoint,
        text: "no shared epoch".to_string(),
    };
    let error = stream
        .on_message(FromSlave::Refusal(refusal), &log(&epochs, 0, 800))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "slave refused the stream (NoConsistentPoint): no shared epoch"
    );
    assert_eq!(error.refusal(), None);
}

#[test]
fn a_long_history_sends_its_newest_entries_only() {
    let entries: Vec<(u32, u64)> = (0..EPOCHS_MAX as u32 + 5)
        .map(|at| (at + 1, u64::from(at) * 10))
        .collect();
    let epochs = history(&entries);
    let mut stream = MasterStream::new(identity(), settings());
    let facts = log(&epochs, 0, 20_000);
    let Ok(MasterEvent::Reply(reply)) =
        stream.on_message(FromSlave::Handshake(handshake()), &facts)
    else {
        panic!("a reply");
    };
    assert_eq!(reply.epochs.len(), EPOCHS_MAX);
    assert_eq!(
        reply.epochs.entries()[0],
        EpochEntry {
            epoch: 6,
            start: 50
        }
    );
    assert_eq!(reply.epochs.last(), epochs.last());
    let mut bytes = Vec::new();
    reply.encode(&mut bytes);
    assert_eq!(bytes.len(), 36 + 12 * EPOCHS_MAX);
}
