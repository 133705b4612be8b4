//! POP consumption as a shard service ([`crate::shard::service`]): opens the shard's POP
//! state (replaying its log from the replay mark), holds the log against retention, runs
//! the housekeeping (the mark, the in-flight figures), and writes the mark once more at
//! stop, from the log's end, so the next start replays nothing it need not. On a slave the
//! housekeeping also keeps the table following the replicated log ([`super::follow`]), and
//! no mark is written while the table holds what the slave served on its own.

use std::rc::Rc;
use std::sync::Arc;

use super::Pops;
use crate::broker::Broker;
use crate::shard::service::{LocalFuture, ShardService, ShardTask};

struct PopService {
    broker: Rc<Broker>,
    pops: Rc<Pops>,
}

/// Opens the POP state of `broker`'s shard and hands it to the broker.
pub fn open(broker: &Rc<Broker>) -> anyhow::Result<Rc<dyn ShardService>> {
    let shard = broker.shard();
    let log_queue =
        crate::shard::routing::queue_of_shard(super::log::POP_LOG_TOPIC, shard.id(), shard.count());
    let pops = Pops::open(broker, Arc::new(crate::io::meta::RealFiles), log_queue)
        .map_err(|error| anyhow::anyhow!("cannot open the POP state: {error}"))?;
    let pops = Rc::new(pops);
    super::holds::hold(broker.store(), &pops);
    broker.set_pops(pops.clone());
    Ok(Rc::new(PopService {
        broker: broker.clone(),
        pops,
    }))
}

impl ShardService for PopService {
    fn name(&self) -> &'static str {
        "POP"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        vec![ShardTask::new(
            "POP housekeeping",
            super::run_housekeeping(self.broker.clone(), self.pops.clone()),
        )]
    }

    fn replica_tasks(&self) -> Vec<ShardTask> {
        vec![ShardTask::new(
            "POP following",
            super::follow::run(self.broker.clone(), self.pops.clone()),
        )]
    }

    fn stop(&self) -> LocalFuture<()> {
        let (broker, pops) = (self.broker.clone(), self.pops.clone());
        Box::pin(async move {
            if !super::follow::may_write_mark(&broker, &pops).await {
                return;
            }
            let log_end = broker
                .store()
                .max_offset(super::log::POP_LOG_TOPIC, pops.log_queue);
            if let Err(error) = pops.write_mark(log_end).await {
                let shard = broker.shard().id();
                tracing::error!(shard, "cannot write the POP replay mark: {error}");
            }
        })
    }
}
