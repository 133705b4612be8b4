use super::*;
use crate::replication::wire::FrameHeader;

fn identity() -> SlaveIdentity {
    SlaveIdentity {
        cluster: "DefaultCluster".to_string(),
        broker: "broker-a".to_string(),
        shard_index: 0,
        shard_count: 2,
        slave_broker_id: 1,
        sync_from_last_file: true,
        async_learner: false,
    }
}

fn history(entries: &[(u32, u64)]) -> EpochCache {
    let entries: Vec<EpochEntry> = entries
        .iter()
        .map(|&(epoch, start)| EpochEntry { epoch, start })
        .collect();
    EpochCache::from_entries(&entries).unwrap()
}

fn log(epochs: &EpochCache, min: u64, max: u64) -> SlaveLog<'_> {
    SlaveLog {
        min_offset: min,
        max_offset: max,
        epochs,
    }
}

fn reply(entries: &[(u32, u64)], master_max: u64) -> FromMaster {
    FromMaster::Reply(HandshakeReply {
        master_max,
        epochs: history(entries),
    })
}

fn frame(offset: u64, epoch: u32, epoch_start: u64, confirm: u64, body: &[u8]) -> FromMaster {
    FromMaster::Frame(TransferFrame {
        header: FrameHeader {
            offset,
            epoch,
            epoch_start,
            confirm_offset: confirm,
            body_len: body.len() as u32,
        },
        body: body.to_vec(),
    })
}

/// A stream past the reply for a slave holding `local` up to `max`.
fn streaming(local: &EpochCache, max: u64) -> SlaveStream {
    let mut stream = SlaveStream::new(identity(), 5000);
    let plan = stream
        .on_message(reply(&[(1, 0), (2, 100)], 10_000), &log(local, 0, max), 0)
        .unwrap();
    assert_eq!(plan.report, Some(max));
    stream
}

#[test]
fn the_handshake_carries_the_identity() {
    let handshake = SlaveStream::new(identity(), 5000).handshake();
    assert_eq!(
        (
            handshake.shard_index,
            handshake.shard_count,
            handshake.sync_from_last_file
        ),
        (0, 2, true)
    );
    assert_eq!(
        (handshake.cluster.as_str(), handshake.broker.as_str()),
        ("DefaultCluster", "broker-a")
    );
}

#[test]
fn a_stream_is_answered_once_the_reply_arrives() {
    let empty = EpochCache::new();
    assert!(!SlaveStream::new(identity(), 5000).answered());
    assert!(streaming(&empty, 0).answered());
}

#[test]
fn the_reply_truncates_to_the_consistent_point_and_reports_it() {
    let local = history(&[(1, 0), (2, 1000)]);
    let mut stream = SlaveStream::new(identity(), 5000);
    let master = reply(&[(1, 0), (2, 1000), (3, 1200)], 2000);
    let plan = stream.on_message(master, &log(&local, 0, 1500), 7).unwrap();
    assert_eq!(
        plan,
        SlavePlan {
            truncate_to: Some(1200),
            report: Some(1200),
            ..SlavePlan::default()
        }
    );
}

#[test]
fn an_empty_store_reports_zero_and_a_store_with_data_but_no_epochs_is_refused() {
    let empty = EpochCache::new();
    let mut stream = SlaveStream::new(identity(), 5000);
    let plan = stream
        .on_message(reply(&[(1, 0)], 500), &log(&empty, 300, 300), 0)
        .unwrap();
    assert_eq!(
        plan,
        SlavePlan {
            report: Some(0),
            ..SlavePlan::default()
        }
    );
    let mut stream = SlaveStream::new(identity(), 5000);
    let error = stream
        .on_message(reply(&[(1, 0)], 500), &log(&empty, 0, 300), 0)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the local log holds bytes 0..300 but no epoch history, so nothing proves they are \
         the master's: empty this shard's store or restore its epoch file"
    );
    assert_eq!(
        error.refusal().unwrap().reason,
        RefusalReason::DataWithoutEpochs
    );
}

#[test]
fn a_store_holding_no_byte_under_its_own_epochs_follows_any_master() {
    // Its node became master twice at 500 and wrote nothing there.
    let local = history(&[(4, 500), (6, 500)]);
    let mut stream = SlaveStream::new(identity(), 5000);
    let plan = stream
        .on_message(reply(&[(1, 0), (5, 300)], 900), &log(&local, 500, 500), 0)
        .unwrap();
    assert_eq!(plan.truncate_to, Some(500), "its entries go");
    assert_eq!(plan.report, Some(500));
    // One byte under an epoch the master lacks is a divergence: refused.
    let mut stream = SlaveStream::new(identity(), 5000);
    let error = stream
        .on_message(reply(&[(1, 0), (5, 300)], 900), &log(&local, 400, 501), 0)
        .unwrap_err();
    assert_eq!(
        error.refusal().unwrap().reason,
        RefusalReason::NoConsistentPoint
    );
}

#[test]
fn no_consistent_point_is_refused_naming_both_histories() {
    let local = history(&[(1, 0), (2, 500)]);
    let mut stream = SlaveStream::new(identity(), 5000);
    let error = stream
        .on_message(reply(&[(2, 0), (3, 700)], 1000), &log(&local, 0, 900), 0)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "no consistent point: local epochs [1@0, 2@500] (max 900) share no epoch with the same \
         start with the master's [2@0, 3@700] (max 1000); an operator must choose which log \
         to keep"
    );
    assert_eq!(
        error.refusal().unwrap().reason,
        RefusalReason::NoConsistentPoint
    );
}

#[test]
fn frames_append_at_the_local_max_and_open_new_epochs_at_their_start() {
    let local = history(&[(1, 0), (2, 100)]);
    let mut stream = streaming(&local, 150);
    let plan = stream
        .on_message(frame(150, 2, 100, 120, b"abcde"), &log(&local, 0, 150), 1)
        .unwrap();
    let appended = SlavePlan {
        append: Some(Append {
            offset: 150,
            body: b"abcde".to_vec(),
        }),
        confirm_offset: Some(120),
        report: Some(155),
        ..SlavePlan::default()
    };
    assert_eq!(plan, appended);
    let plan = stream
        .on_message(frame(155, 4, 155, 9000, b"xy"), &log(&local, 0, 155), 2)
        .unwrap();
    assert_eq!(
        plan.append_epoch,
        Some(EpochEntry {
            epoch: 4,
            start: 155
        })
    );
    // The confirm offset never passes what the slave holds.
    assert_eq!(plan.confirm_offset, Some(157));
    assert_eq!(plan.report, Some(157));
}

#[test]
fn frames_that_break_the_order_close_the_stream() {
    let local = history(&[(1, 0), (2, 100)]);
    let cases = [
        (frame(151, 2, 100, 0, b"a"), "frame at 151 does not continue the local log, which ends at 150"),
        (frame(149, 2, 100, 0, b"a"), "frame at 149 does not continue the local log, which ends at 150"),
        (frame(150, 1, 0, 0, b"a"), "frame of epoch 1 is older than the local last epoch 2"),
        (frame(150, 2, 90, 0, b"a"), "frame says epoch 2 starts at 90, the local history says 100"),
        (
            frame(150, 3, 120, 0, b"a"),
            "frame at 150 is in new epoch 3 starting earlier, at 120: the local bytes between \
             are another epoch's",
        ),
        (frame(150, 3, 120, 0, b""), "frame at 150 is in new epoch 3 starting earlier, at 120: the local bytes between are another epoch's"),
    ];
    for (message, text) in cases {
        let mut stream = streaming(&local, 150);
        // A first frame behind the log is never a restart; make the ahead case a later one.
        stream
            .on_message(frame(150, 2, 100, 0, b""), &log(&local, 0, 150), 0)
            .unwrap();
        let error = stream
            .on_message(message, &log(&local, 0, 150), 0)
            .unwrap_err();
        assert_eq!(error.to_string(), text);
        assert_eq!(error.refusal().unwrap().reason, RefusalReason::OutOfOrder);
    }
}

#[test]
fn a_first_frame_past_the_log_restarts_the_slave_from_there() {
    let local = history(&[(1, 0), (2, 100)]);
    let mut stream = streaming(&local, 150);
    let plan = stream
        .on_message(frame(4000, 2, 100, 3000, b"abc"), &log(&local, 0, 150), 0)
        .unwrap();
    assert_eq!(plan.restart_at, Some(4000));
    assert_eq!(
        plan.append_epoch,
        Some(EpochEntry {
            epoch: 2,
            start: 100
        })
    );
    assert_eq!(plan.report, Some(4003));
    // Only the first: later, the same jump closes the stream.
    let restarted = history(&[(2, 100)]);
    let error = stream
        .on_message(
            frame(9000, 2, 100, 0, b"abc"),
            &log(&restarted, 4000, 4003),
            0,
        )
        .unwrap_err();
    assert!(matches!(error, SlaveError::OffsetMismatch { .. }));
}

#[test]
fn heartbeats_append_nothing_and_report_only_on_the_interval() {
    let local = history(&[(1, 0), (2, 100)]);
    let mut stream = streaming(&local, 150);
    let facts = log(&local, 0, 150);
    let plan = stream
        .on_message(frame(150, 2, 100, 400, b""), &facts, 10)
        .unwrap();
    assert_eq!(
        plan,
        SlavePlan {
            confirm_offset: Some(150),
            ..SlavePlan::default()
        }
    );
    // The reply's report was at 0 ms.
    assert_eq!(stream.report_due(&facts, 4999), None);
    assert_eq!(stream.report_due(&facts, 5000), Some(150));
    assert_eq!(stream.report_due(&facts, 9999), None);
}

#[test]
fn messages_out_of_turn_and_master_refusals() {
    let local = history(&[(1, 0)]);
    let facts = log(&local, 0, 10);
    let mut stream = SlaveStream::new(identity(), 5000);
    assert_eq!(stream.report_due(&facts, 99_999), None);
    let early = stream.on_message(frame(10, 1, 0, 0, b""), &facts, 0);
    assert_eq!(
        early.unwrap_err().to_string(),
        "unexpected frame while waiting for the handshake reply"
    );
    let mut stream = streaming(&local, 10);
    let again = stream
        .on_message(reply(&[(1, 0)], 10), &facts, 0)
        .unwrap_err();
    assert_eq!(
        again.to_string(),
        "unexpected handshake reply while streaming"
    );
    let refusal = FromMaster::Refusal(Refusal {
        reason: RefusalReason::ShardCount,
        text: "shard count mismatch: master has 4 shards, slave has 2".to_string(),
    });
    let error = stream.on_message(refusal, &facts, 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "master refused the stream (ShardCount): shard count mismatch: master has 4 shards, \
         slave has 2"
    );
    assert_eq!(error.refusal(), None);
}
