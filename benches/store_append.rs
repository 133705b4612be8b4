//! The store's append path without the disk's latency: puts of 1 KiB messages from 16
//! concurrent producers into a store in the temp directory (portable backend, ASYNC_FLUSH:
//! no fsync on the put path), and reads of 32 messages. Reports time per message.
//! Not tmpfs: there `fallocate` zeroes real pages, and segment preallocation would swamp
//! the figures.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Bencher, Criterion, Throughput};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::portable::PortableDisk;
use ringmq::store::record::{body_crc, RecordInput};
use ringmq::store::{properties, Store};

const PRODUCERS: u64 = 16;

fn message(body: &Bytes, queue_id: i32) -> RecordInput {
    RecordInput {
        topic: "BenchTopic".to_string(),
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: SocketAddr::from(([127, 0, 0, 1], 40000)),
        store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: body_crc(body),
        body: body.clone(),
        properties: properties::encode([(properties::TAGS, "TagA"), (properties::KEYS, "k1")]),
    }
}

fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ringmq-bench-")
        .tempdir()
        .expect("scratch dir")
}

fn bench_append(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("store");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("put_1k_async_16_producers", bench_puts);
    group.bench_function("get_32_messages", bench_gets);
    group.finish();
}

/// A current-thread runtime and the `LocalSet` a store runs in, as on a shard.
fn shard_runtime() -> (tokio::runtime::Runtime, tokio::task::LocalSet) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (runtime, tokio::task::LocalSet::new())
}

fn bench_puts(bencher: &mut Bencher<'_>) {
    // One store for every sample, so only steady-state puts are timed (not segment
    // creation or the directory fsyncs of a new store).
    let dir = scratch_dir();
    let (runtime, local) = shard_runtime();
    let store = local.block_on(&runtime, async {
        let mut config = StoreConfig::new(dir.path());
        config.flush_mode = FlushMode::Async;
        config.commit_log_segment_size = 256 << 20;
        Store::open(config, Rc::new(PortableDisk::new()), Clock::system())
            .await
            .unwrap()
    });
    let body = Bytes::from(vec![b'x'; 1024]);
    bencher.iter_custom(|iterations| {
        local.block_on(&runtime, put_from_producers(&store, &body, iterations))
    });
    local.block_on(&runtime, store.shutdown()).unwrap();
}

/// About `iterations` puts, spread over the producers; the time they took, scaled to
/// exactly `iterations`.
async fn put_from_producers(store: &Store, body: &Bytes, iterations: u64) -> Duration {
    let per_producer = iterations.div_ceil(PRODUCERS);
    let started = Instant::now();
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let store = store.clone();
            let body = body.clone();
            tokio::task::spawn_local(async move {
                for _ in 0..per_producer {
                    store
                        .put(message(&body, (producer % 8) as i32))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started
        .elapsed()
        .mul_f64(iterations as f64 / (per_producer * PRODUCERS) as f64)
}

fn bench_gets(bencher: &mut Bencher<'_>) {
    let dir = scratch_dir();
    let (runtime, local) = shard_runtime();
    let store = local.block_on(&runtime, async {
        let mut config = StoreConfig::new(dir.path());
        config.commit_log_segment_size = 64 << 20;
        let store = Store::open(config, Rc::new(PortableDisk::new()), Clock::system())
            .await
            .unwrap();
        let body = Bytes::from(vec![b'y'; 1024]);
        for _ in 0..10_000 {
            store.put(message(&body, 0)).await.unwrap();
        }
        store
    });
    let mut offset = 0u64;
    bencher.iter(|| {
        let got = store
            .get_messages("BenchTopic", 0, offset, 32, None)
            .unwrap();
        offset = (offset + 32) % 9_000;
        got.messages.len()
    });
    local.block_on(&runtime, store.shutdown()).unwrap();
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
