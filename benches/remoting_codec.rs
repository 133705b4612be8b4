//! The remoting work of one single-message send, as each side does it: the client builds
//! and encodes a SEND_MESSAGE_V2 request; the node takes the frame off its read buffer,
//! reads the send header, and encodes the response; the client decodes that response.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion};
use ringmq::client::send_request_v2;
use ringmq::remoting::codes::response;
use ringmq::remoting::frame::{encode_frame, take_frame, DEFAULT_MAX_FRAME_LEN};
use ringmq::remoting::send_header::SendMessageRequestHeader;
use ringmq::remoting::RemotingCommand;

fn send_response(request: &RemotingCommand) -> RemotingCommand {
    let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
    answer.put_ext("msgId", "7F00000100002A9F0000000000A1B2C3");
    answer.put_ext("queueId", 3);
    answer.put_ext("queueOffset", 123_456);
    answer.put_ext("transactionId", "7F000001000018B4AAC2000000000001");
    answer.put_ext("MSG_REGION", "DefaultRegion");
    answer.put_ext("TRACE_ON", "true");
    answer
}

fn bench(c: &mut Criterion) {
    let body = vec![b'x'; 1024];
    let mut group = c.benchmark_group("send_1KiB");

    group.bench_function("client_build_and_encode_request", |b| {
        let mut out = Vec::with_capacity(4096);
        b.iter(|| {
            out.clear();
            let mut request = send_request_v2("BenchTopic", 3, &body, Some("TagA"), None);
            request.opaque = 77;
            encode_frame(&request, &mut out).unwrap();
            black_box(&out);
        })
    });

    let mut request = send_request_v2("BenchTopic", 3, &body, Some("TagA"), None);
    request.opaque = 77;
    let mut frame = Vec::new();
    encode_frame(&request, &mut frame).unwrap();
    group.bench_function("node_take_request_and_read_header", |b| {
        let mut buffer = BytesMut::with_capacity(64 * 1024);
        b.iter(|| {
            buffer.extend_from_slice(&frame);
            let request = take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN)
                .unwrap()
                .unwrap();
            let header = SendMessageRequestHeader::from_command(&request).unwrap();
            black_box((&request, header));
        })
    });

    group.bench_function("node_build_and_encode_response", |b| {
        let mut out = Vec::with_capacity(4096);
        b.iter(|| {
            out.clear();
            encode_frame(&send_response(black_box(&request)), &mut out).unwrap();
            black_box(&out);
        })
    });

    let mut answer = Vec::new();
    encode_frame(&send_response(&request), &mut answer).unwrap();
    group.bench_function("client_take_response", |b| {
        let mut buffer = BytesMut::with_capacity(64 * 1024);
        b.iter(|| {
            buffer.extend_from_slice(&answer);
            black_box(
                take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN)
                    .unwrap()
                    .unwrap(),
            );
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
