//! Encode and full-verify decode of one record with a 1 KiB body.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ringmq::store::properties;
use ringmq::store::record::{body_crc, decode, encode_into, encoded_len, RecordInput, Verify};

fn input() -> RecordInput {
    let body = Bytes::from(
        (0..1024u32)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<_>>(),
    );
    RecordInput {
        topic: "BenchTopic".to_owned(),
        queue_id: 1,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: "10.0.0.1:51234".parse().unwrap(),
        store_host: "192.168.1.2:10911".parse().unwrap(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: body_crc(&body),
        body,
        properties: properties::encode([
            (properties::KEYS, "order-1 order-2"),
            (properties::TAGS, "TagA"),
            (properties::UNIQ_KEY, "AC110001000018B4AAC2"),
            (properties::WAIT, "true"),
        ]),
    }
}

fn bench(c: &mut Criterion) {
    let input = input();
    let len = encoded_len(&input).unwrap();
    let mut group = c.benchmark_group("record_1KiB");
    group.throughput(Throughput::Bytes(len as u64));

    let mut out = Vec::with_capacity(len);
    group.bench_function("encode_into", |b| {
        b.iter(|| {
            out.clear();
            encode_into(black_box(&input), 42, 4096, 1_700_000_000_123, &mut out).unwrap();
            black_box(&out);
        })
    });

    let mut record = Vec::new();
    encode_into(&input, 42, 4096, 1_700_000_000_123, &mut record).unwrap();
    group.bench_function("decode_full", |b| {
        b.iter(|| black_box(decode(black_box(&record), Verify::Full).unwrap()))
    });
    group.bench_function("decode_structure", |b| {
        b.iter(|| black_box(decode(black_box(&record), Verify::Structure).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
